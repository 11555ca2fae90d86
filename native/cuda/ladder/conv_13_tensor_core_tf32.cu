// Step 13 -- gpu-tensor-core-tf32: one TF32 pass on the tensor cores, whole images in shared memory, the next
// image prefetched with cp.async while the current one is multiplied.
// Measurements and what was tried: docs/ladder-findings/13.md (docs/ladder.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/runtime/registry.cuh"
#include "cuda/runtime/cp_async.cuh"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/mma_tf32.cuh"

namespace pyconv {
namespace {

constexpr size_t kSmemLimit = 200 * 1024;  // per block, opted in (sm_90 allows 227 KB)

struct Tf32Params {
  int C, H, W, M, K, Ho, Wo;
  long long B;
  int P;           // Ho * Wo: output pixels of one image
  int ckk;         // C * K * K: the GEMM depth
  int ksteps;      // ceil(ckk / 8)
  int img_floats;  // C * H * W: one image
  int img_pitch;   // img_floats rounded up to 4 (each buffer starts 16-byte aligned)
  bool vec4;       // img_floats % 4 == 0: images are copied in 16-byte pieces
};

// Queues the copy of one image into shared memory (cp.async: the copy proceeds while the block computes).
template <int THREADS>
__device__ __forceinline__ void load_image(float* dst, const float* src, const Tf32Params& p) {
  cp_async_floats<THREADS>(dst, src, p.img_floats, p.vec4);
  cp_async_commit();
}

template <int WARPS, int NT>
__global__ void __launch_bounds__(WARPS * 32)
    conv_fwd_gpu_tensor_core_tf32_kernel(const float* __restrict__ x, const float* __restrict__ k,
                                         float* __restrict__ y, const Tf32Params p) {
  constexpr int THREADS = WARPS * 32;
  extern __shared__ uint4 smem[];
  uint4* s_w = smem;                                                 // [ksteps][32 lanes]: A fragments (TF32)
  int* s_kofs = reinterpret_cast<int*>(s_w + p.ksteps * 32);          // [ksteps * 8]: tap -> offset in the image
  float* s_x = reinterpret_cast<float*>(s_kofs + p.ksteps * 8);     // [2][img_pitch]: double-buffered images
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int m0 = blockIdx.y * 16;
  const int KK = p.K * p.K;

  long long b = blockIdx.x;
  if (b < p.B) load_image<THREADS>(s_x, x + b * p.img_floats, p);  // the first image flies while we set up

  uint32_t* s_wu = reinterpret_cast<uint32_t*>(s_w);
  for (int i = tid; i < p.ksteps * 128; i += THREADS) {
    const int reg = i & 3, l = (i >> 2) & 31, ks = i >> 7;
    const int row = (l >> 2) + 8 * (reg & 1), col = (l & 3) + 4 * (reg >> 1);
    const int m = m0 + row, kk = ks * 8 + col;
    s_wu[i] = to_tf32(m < p.M && kk < p.ckk ? __ldg(&k[size_t(m) * p.ckk + kk]) : 0.0f);
  }
  // Padded taps (kk >= ckk) point at offset 0: a finite input times a zero weight.
  for (int i = tid; i < p.ksteps * 8; i += THREADS) {
    int off = 0;
    if (i < p.ckk) {
      const int c = i / KK, pq = i % KK;
      off = (c * p.H + pq / p.K) * p.W + pq % p.K;
    }
    s_kofs[i] = off;
  }
  // This lane's pixel (column g) of each of its n-tiles: offset of the window's top-left input; 0 past the image.
  int pix[NT];
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    const int n = (warp + i * WARPS) * 8 + g;
    pix[i] = n < p.P ? (n / p.Wo) * p.W + n % p.Wo : 0;
  }

  int buf = 0;
  for (; b < p.B; b += gridDim.x) {
    const long long next = b + gridDim.x;
    if (next < p.B) {
      load_image<THREADS>(s_x + (buf ^ 1) * p.img_pitch, x + next * p.img_floats, p);
      cp_async_wait(2);  // this image's copy is done, the next one may fly
    } else {
      cp_async_wait(0);
    }
    __syncthreads();  // every thread's part of the image (and, the first time, the weights and offsets) is in
    const float* xs = s_x + buf * p.img_pitch;

    float acc[NT][4];
#pragma unroll
    for (int i = 0; i < NT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    for (int ks = 0; ks < p.ksteps; ++ks) {
      const uint4 a = s_w[ks * 32 + lane];
      const int k0 = s_kofs[ks * 8 + t], k1 = s_kofs[ks * 8 + t + 4];
#pragma unroll
      for (int i = 0; i < NT; ++i)
        if ((warp + i * WARPS) * 8 < p.P)  // warp-uniform: the n-tile holds at least one pixel
          mma_tf32(acc[i], a.x, a.y, a.z, a.w, to_tf32(xs[k0 + pix[i]]), to_tf32(xs[k1 + pix[i]]));
    }

    // Rows g and g+8 of the fragment are output channels, columns 2t and 2t+1 consecutive pixels of the image.
#pragma unroll
    for (int i = 0; i < NT; ++i) {
      const int n = (warp + i * WARPS) * 8 + 2 * t;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = m0 + g + 8 * h;
        if (m >= p.M) continue;
        float* yo = y + (b * p.M + m) * p.P + n;
        if (n + 1 < p.P && (p.P % 2) == 0) {
          *reinterpret_cast<float2*>(yo) = make_float2(acc[i][2 * h], acc[i][2 * h + 1]);
        } else {
          if (n < p.P) yo[0] = acc[i][2 * h];
          if (n + 1 < p.P) yo[1] = acc[i][2 * h + 1];
        }
      }
    }
    __syncthreads();  // nobody reads this buffer any more: the next iteration's prefetch may overwrite it
    buf ^= 1;
  }
}

using Tf32Kernel = void (*)(const float*, const float*, float*, const Tf32Params);

struct Config {
  int warps, nt;
  Tf32Kernel kernel;
};

// Smallest configuration whose warps * nt * 8 pixels cover one output image (accumulators: 4 * nt registers).
constexpr int kMaxPixels = 8 * 16 * 8;
const Config* pick(int64_t P) {
  static const Config configs[] = {
      {4, 4, conv_fwd_gpu_tensor_core_tf32_kernel<4, 4>},    {4, 8, conv_fwd_gpu_tensor_core_tf32_kernel<4, 8>},
      {4, 12, conv_fwd_gpu_tensor_core_tf32_kernel<4, 12>},  {8, 12, conv_fwd_gpu_tensor_core_tf32_kernel<8, 12>},
      {8, 16, conv_fwd_gpu_tensor_core_tf32_kernel<8, 16>},
  };
  for (const Config& c : configs)
    if (P <= int64_t(c.warps) * c.nt * 8) return &c;
  return nullptr;
}

size_t smem_bytes(const Tf32Params& p) {
  return size_t(p.ksteps) * 32 * 16 + size_t(p.ksteps) * 8 * 4 + 2 * size_t(p.img_pitch) * 4;
}

std::string plan(const ConvShape& s, Tf32Params& p) {
  const int64_t P = s.Ho() * s.Wo();
  if (P > kMaxPixels)
    return "gpu-tensor-core-tf32: an output image of " + std::to_string(P) + " pixels is beyond the " +
           std::to_string(kMaxPixels) + " one block holds";
  const int64_t img = s.C * s.H * s.W, ckk = s.C * s.K * s.K;
  if (img > (int64_t(1) << 24) || ckk > (int64_t(1) << 20))
    return "gpu-tensor-core-tf32: image or weights too large";
  p.C = int(s.C); p.H = int(s.H); p.W = int(s.W); p.M = int(s.M); p.K = int(s.K);
  p.Ho = int(s.Ho()); p.Wo = int(s.Wo()); p.B = s.B; p.P = int(P);
  p.ckk = int(ckk);
  p.ksteps = int((ckk + 7) / 8);
  p.img_floats = int(img);
  p.img_pitch = int((img + 3) / 4 * 4);
  p.vec4 = img % 4 == 0;
  if (smem_bytes(p) > kSmemLimit)
    return "gpu-tensor-core-tf32: two " + std::to_string(s.C) + "x" + std::to_string(s.H) + "x" +
           std::to_string(s.W) + " images and the weights need " + std::to_string(smem_bytes(p) / 1024) +
           " KB of shared memory (limit " + std::to_string(kSmemLimit / 1024) + " KB)";
  return "";
}

}  // namespace

std::string conv_supports_gpu_tensor_core_tf32(const ConvShape& s) {
  Tf32Params p{};
  return plan(s, p);
}

void conv_fwd_gpu_tensor_core_tf32(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  Tf32Params p{};
  const std::string why = plan(s, p);
  if (!why.empty()) throw std::invalid_argument(why);
  if (s.B == 0) return;
  const Config* c = pick(p.P);
  const size_t smem = smem_bytes(p);
  const int threads = c->warps * 32;
  CUDA_CHECK(cudaFuncSetAttribute(c->kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int dev = 0, sms = 0, per_sm = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, c->kernel, threads, smem));
  if (per_sm < 1) throw std::invalid_argument("gpu-tensor-core-tf32: a block does not fit on an SM");
  // Persistent blocks: each walks images blockIdx.x, +gridDim.x, ... so the weights are converted once per block
  // and the prefetch always has a next image.
  const int m_blocks = int((s.M + 15) / 16);
  if (m_blocks > 65535) throw std::invalid_argument("gpu-tensor-core-tf32: more than 65535 x 16 output channels");
  const long long per_y = std::max<long long>(1, (long long)(sms) * per_sm / m_blocks);
  const dim3 grid{unsigned(std::min<long long>(s.B, per_y)), unsigned(m_blocks), 1u};
  c->kernel<<<grid, threads, smem, st>>>(x, k, y, p);
  CUDA_CHECK_LAUNCH();
}

// One TF32 rounding per operand (relative 2^-11): held to 2e-3 instead of the default. Final uses it only where
// the end-to-end bench of the model's weights on this GPU allowed TF32 (its precision verdict).
PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-tensor-core-tf32",
    .step = 13,
    .summary = "one TF32 tensor-core pass, whole images in shared memory, next image prefetched",
    .precision = Precision::Tf32,
    .rtol = 2e-3,
    .launch = conv_fwd_gpu_tensor_core_tf32,
    .supports = conv_supports_gpu_tensor_core_tf32,
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
