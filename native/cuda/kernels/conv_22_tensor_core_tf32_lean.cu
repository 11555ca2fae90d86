// Step 22 -- gpu-tensor-core-tf32-lean: step 13's one TF32 pass with step 21's structure: all of an image's
// n-tiles in one block of up to 16 warps, byte offsets and per-lane bases computed once per block, the image
// rounded to TF32 once.
// Measurements and what was tried: docs/ladder-findings/22.md (docs/ladder.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/runtime/lean_tiles.cuh"
#include "cuda/runtime/pixel_pair_store.cuh"
#include "cuda/runtime/cp_async.cuh"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/fast_div.cuh"
#include "cuda/runtime/mma_tf32.cuh"
#include "cuda/runtime/persistent.cuh"
#include "cuda/runtime/registry.cuh"

namespace pyconv {
namespace {

constexpr size_t kSmemLimit = 220 * 1024;  // per block, opted in (sm_90 allows 227 KB)


struct LeanTf32Params {
  int C, H, W, M, K, Ho, Wo;
  long long B;
  int P;           // Ho * Wo
  int tiles;       // ceil(P / 8): 8-pixel n-tiles
  int ckk;         // C * K * K: the GEMM depth
  int ksteps;      // ceil(ckk / 8)
  int mtiles;      // ceil(M / 16), even when > 1 (two m-tiles per pass)
  int img_floats;  // C * H * W
  int img_pitch;   // img_floats rounded up to 4 (each slot 16-byte aligned)
  bool vec4;       // img_floats % 4 == 0: 16-byte copies
  int a_off, off_off, stage_off, total;  // shared memory layout, bytes
  FastDiv div_wo;
};

// Queues the copy of one image into a slot as one cp.async group.
__device__ __forceinline__ void stage_image(float* dst, const float* src, const LeanTf32Params& p) {
  cp_async_floats(dst, src, p.img_floats, p.vec4);
  cp_async_commit();
}

// B element: the 32 bits at a shared-window byte address (an image value already rounded to TF32 in place).
__device__ __forceinline__ uint32_t ldx(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr));
  return v;
}

// The staged image rounded to TF32 in place, once: every value is read by up to K*K windows, and cvt.rna.tf32 is
// several instructions on sm_90 (-Xptxas -v, SASS: a compare and an add per value), so rounding per load (as
// step 13 does) would repeat them K*K times.
__device__ __forceinline__ void round_image(float* img, const LeanTf32Params& p) {
  float4* v = reinterpret_cast<float4*>(img);
  for (int i = threadIdx.x; i < p.img_pitch / 4; i += blockDim.x) {
    float4 f = v[i];
    f.x = __uint_as_float(to_tf32(f.x));
    f.y = __uint_as_float(to_tf32(f.y));
    f.z = __uint_as_float(to_tf32(f.z));
    f.w = __uint_as_float(to_tf32(f.w));
    v[i] = f;
  }
}

// The k-steps of MT m-tiles over the warp's n-tiles (GUARDED: only the first nv are real).
template <int MT, int NT, bool GUARDED>
__device__ __forceinline__ void k_loop(float (&acc)[MT][NT][4], const uint32_t (&pix)[NT], int nv, const uint4* a_p,
                                       int mt_stride, const uint32_t* off_p, int ksteps) {
#pragma unroll 2
  for (int ks = 0; ks < ksteps; ++ks) {
    uint4 a[MT];
#pragma unroll
    for (int j = 0; j < MT; ++j) a[j] = a_p[j * mt_stride + ks * 32];
    const uint32_t o = off_p[ks * 4];  // words: tap t (low half), tap t+4 (high half) of this k-step
#pragma unroll
    for (int i = 0; i < NT; ++i) {
      if (GUARDED && i >= nv) continue;
      const uint32_t b0 = ldx(pix[i] + 4u * (o & 0xffffu)), b1 = ldx(pix[i] + 4u * (o >> 16));
#pragma unroll
      for (int j = 0; j < MT; ++j) mma_tf32(acc[j][i], a[j].x, a[j].y, a[j].z, a[j].w, b0, b1);
    }
  }
}

template <int MT, int NT>
__global__ void __launch_bounds__(lean_max_warps(MT * NT) * 32, 2)
    conv_fwd_gpu_tf32_lean_kernel(const float* __restrict__ x, const float* __restrict__ k, float* __restrict__ y,
                                  const LeanTf32Params p) {
  extern __shared__ uint4 smem[];
  unsigned char* base = reinterpret_cast<unsigned char*>(smem);
  uint4* s_a = reinterpret_cast<uint4*>(base + p.a_off);        // [mtiles][ksteps][32 lanes]: A fragments, TF32
  // [2 slots][ksteps][t]: the word offsets of taps t and t+4 in the two halves of one word, so that a k-step's
  // offsets are one LDS.32 (a warp's LDS.64 takes two shared-memory wavefronts); 16 bits hold them, as two staged
  // images fit in shared memory.
  uint32_t* s_off = reinterpret_cast<uint32_t*>(base + p.off_off);
  float* s_stage = reinterpret_cast<float*>(base + p.stage_off);  // [2][img_pitch]: the images
  const int warps = int(blockDim.x) / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;

  long long b = blockIdx.x;
  if (b < p.B) stage_image(s_stage, x + b * p.img_floats, p);  // the first image flies while the tables are built

  uint32_t* s_au = reinterpret_cast<uint32_t*>(s_a);
  const int afrags = p.mtiles * p.ksteps * 32;
  for (int i = threadIdx.x; i < afrags * 4; i += blockDim.x) {
    const int reg = i & 3, l = (i >> 2) & 31, rest = i >> 7;
    const int mt = rest / p.ksteps, ks = rest - mt * p.ksteps;
    const int m = mt * 16 + (l >> 2) + 8 * (reg & 1), kk = ks * 8 + (l & 3) + 4 * (reg >> 1);
    s_au[i] = to_tf32(m < p.M && kk < p.ckk ? __ldg(&k[size_t(m) * p.ckk + kk]) : 0.0f);
  }
  // Tap -> word offset from a pixel's base in slot 0 (slot 1: + one slot); padded taps read the pixel itself.
  const uint32_t s_x = smem_addr(s_stage);
  const int KK = p.K * p.K;
  for (int i = threadIdx.x; i < 2 * p.ksteps * 4; i += blockDim.x) {
    const int slot = i / (p.ksteps * 4), r = i - slot * p.ksteps * 4, ks = r >> 2, tt = r & 3;
    uint32_t o = 0;
    for (int h = 0; h < 2; ++h) {
      const int kk = ks * 8 + tt + 4 * h;
      int off = 0;
      if (kk < p.ckk) {
        const int c = kk / KK, pq = kk - c * KK, ky = pq / p.K;
        off = (c * p.H + ky) * p.W + (pq - ky * p.K);
      }
      o |= uint32_t(off + slot * p.img_pitch) << (16 * h);
    }
    s_off[i] = o;
  }
  // This lane's B column (pixel g) of each of its n-tiles, as a byte address in slot 0, and where its two stored
  // pixels (2t, 2t+1) go: the same for every image when one group of n-tiles covers it.
  const bool one_group = p.tiles <= warps * NT;
  auto bases = [&](uint32_t (&pix)[NT], int first) {
#pragma unroll
    for (int i = 0; i < NT; ++i) {
      const int n = (first + i * warps) * 8 + g;
      int w = 0;
      if (n < p.P) {
        const int oy = int(p.div_wo.div(uint32_t(n)));
        w = oy * p.W + (n - oy * p.Wo);
      }
      pix[i] = s_x + 4u * uint32_t(w);
    }
  };
  uint32_t pix0[NT];
  bases(pix0, warp);
  const int nv0 = warp < p.tiles ? min(NT, (p.tiles - warp + warps - 1) / warps) : 0;

  // One group of n-tiles for m-tiles mt0 .. mt0+MT-1 of image b from slot `slot`: accumulate, then straight to y.
  auto group = [&](const uint32_t (&pix)[NT], int nv, int first, int mt0, int slot) {
    float acc[MT][NT][4];
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
      for (int i = 0; i < NT; ++i) acc[j][i][0] = acc[j][i][1] = acc[j][i][2] = acc[j][i][3] = 0.0f;
    const uint4* a_p = s_a + mt0 * p.ksteps * 32 + lane;
    const uint32_t* off_p = s_off + slot * p.ksteps * 4 + t;
    if (nv == NT)
      k_loop<MT, NT, false>(acc, pix, nv, a_p, p.ksteps * 32, off_p, p.ksteps);
    else
      k_loop<MT, NT, true>(acc, pix, nv, a_p, p.ksteps * 32, off_p, p.ksteps);
    // D rows g and g+8 are filters, columns 2t and 2t+1 consecutive pixels: straight to y.
    const int m_lane = mt0 * 16 + g;
    float* yb = y + (size_t(b) * p.M + m_lane) * size_t(p.P);
#pragma unroll
    for (int i = 0; i < NT; ++i) {
      if (i >= nv) continue;
      const int n = (first + i * warps) * 8 + 2 * t;
#pragma unroll
      for (int jh = 0; jh < 2 * MT; ++jh) {
        const int j = jh / 2, h = jh % 2;
        if (m_lane + 16 * j + 8 * h >= p.M) continue;
        store_pixel_pair(yb + uint32_t((16 * j + 8 * h) * p.P + n), n, p.P, acc[j][i][2 * h], acc[j][i][2 * h + 1]);
      }
    }
  };

  int slot = 0;
  for (; b < p.B; b += gridDim.x, slot ^= 1) {
    cp_async_wait(0);
    __syncthreads();  // image b (slot) is in for every thread; every warp is done with image b - grid (slot ^ 1)
    const long long nb = b + gridDim.x;
    if (nb < p.B) stage_image(s_stage + (slot ^ 1) * p.img_pitch, x + nb * p.img_floats, p);
    round_image(s_stage + slot * p.img_pitch, p);
    __syncthreads();  // the image is rounded
    for (int mt0 = 0; mt0 < p.mtiles; mt0 += MT) {  // p.mtiles is a multiple of MT (zero filters pad it)
      if (one_group) {
        if (nv0 > 0) group(pix0, nv0, warp, mt0, slot);
        continue;
      }
      for (int tg = 0; tg < p.tiles; tg += warps * NT) {
        const int first = tg + warp;
        if (first >= p.tiles) continue;
        uint32_t pix[NT];
        bases(pix, first);
        group(pix, min(NT, (p.tiles - first + warps - 1) / warps), first, mt0, slot);
      }
    }
  }
}

using LeanTf32Kernel = void (*)(const float*, const float*, float*, const LeanTf32Params);

struct Config {
  int mt, nt;
  LeanTf32Kernel kernel;
};

// The tiling rule of lean_tiles.cuh over this step's kernels.
const Config& pick(int M, int tiles, int& warps) {
  static const Config configs[] = {
      {1, 1, conv_fwd_gpu_tf32_lean_kernel<1, 1>}, {1, 2, conv_fwd_gpu_tf32_lean_kernel<1, 2>},
      {1, 3, conv_fwd_gpu_tf32_lean_kernel<1, 3>}, {1, 6, conv_fwd_gpu_tf32_lean_kernel<1, 6>},
      {2, 1, conv_fwd_gpu_tf32_lean_kernel<2, 1>}, {2, 3, conv_fwd_gpu_tf32_lean_kernel<2, 3>},
  };
  return pick_lean_tiles(configs, M, tiles, warps);
}

std::string plan(const ConvShape& s, LeanTf32Params& p) {
  const int64_t img = s.C * s.H * s.W, P = s.Ho() * s.Wo(), ckk = s.C * s.K * s.K;
  if (img > (int64_t(1) << 24) || ckk > (int64_t(1) << 20) || s.M > (int64_t(1) << 20))
    return "gpu-tensor-core-tf32-lean: image or weights too large";
  p.C = int(s.C); p.H = int(s.H); p.W = int(s.W); p.M = int(s.M); p.K = int(s.K);
  p.Ho = int(s.Ho()); p.Wo = int(s.Wo()); p.B = s.B; p.P = int(P);
  p.tiles = int((P + 7) / 8);
  p.ckk = int(ckk);
  p.ksteps = int((ckk + 7) / 8);
  p.mtiles = int((s.M + 15) / 16);
  if (p.mtiles > 1) p.mtiles += p.mtiles % 2;
  p.img_floats = int(img);
  p.img_pitch = int((img + 3) / 4 * 4);
  p.vec4 = img % 4 == 0;
  p.div_wo = FastDiv(uint32_t(p.Wo));
  const size_t a = size_t(p.mtiles) * p.ksteps * 32 * 16, off = size_t(2) * p.ksteps * 16,
               stage = size_t(2) * p.img_pitch * 4;
  p.a_off = 0;
  p.off_off = int(a);
  p.stage_off = int(a + off);
  const size_t total = a + off + stage;
  p.total = total > kSmemLimit ? int(kSmemLimit + 1) : int(total);
  if (total > kSmemLimit)
    return "gpu-tensor-core-tf32-lean: two " + std::to_string(s.C) + "x" + std::to_string(s.H) + "x" +
           std::to_string(s.W) + " images and " + std::to_string(s.M) + " filters need " +
           std::to_string(total / 1024) + " KB of shared memory (limit " + std::to_string(kSmemLimit / 1024) +
           " KB)";
  return "";
}

}  // namespace

std::string conv_supports_gpu_tensor_core_tf32_lean(const ConvShape& s) {
  LeanTf32Params p{};
  return plan(s, p);
}

void conv_fwd_gpu_tensor_core_tf32_lean(const float* x, const float* k, float* y, const ConvShape& s,
                                        cudaStream_t st) {
  LeanTf32Params p{};
  const std::string why = plan(s, p);
  if (!why.empty()) throw std::invalid_argument(why);
  if (s.B == 0) return;
  int warps = 0;
  const Config& c = pick(p.M, p.tiles, warps);
  const size_t smem = size_t(p.total);
  const int threads = warps * 32;
  // Persistent blocks: each walks images blockIdx.x, +gridDim.x, ...
  const dim3 grid = persistent_grid("gpu-tensor-core-tf32-lean", c.kernel, threads, smem, s.B);
  c.kernel<<<grid, threads, smem, st>>>(x, k, y, p);
  CUDA_CHECK_LAUNCH();
}

// One TF32 rounding per operand (relative 2^-11), as step 13: held to 2e-3 instead of the default. Final uses it
// only where the end-to-end bench of the model's weights on this GPU allowed TF32 (its precision verdict).
PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-tensor-core-tf32-lean",
    .step = 22,
    .summary = "step 13's one TF32 pass with step 21's structure: all n-tiles of an image in one block, hoisted "
               "addressing, the image rounded to TF32 once",
    .precision = Precision::Tf32,
    .rtol = 2e-3,
    .launch = conv_fwd_gpu_tensor_core_tf32_lean,
    .supports = conv_supports_gpu_tensor_core_tf32_lean,
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
