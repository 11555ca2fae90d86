// Step 10 -- gpu-fused-tanh-pool: convolution + tanh + 2x2/2 max pooling in one kernel (Epilogue::TanhMaxPool2).
// Measurements and what was tried: docs/ladder-findings/10.md (docs/ladder.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/runtime/registry.cuh"
#include "cuda/runtime/cuda_check.cuh"

namespace pyconv {
namespace {

constexpr int THREADS = 256;
constexpr size_t SMEM_IMAGES = 40 * 1024;  // staged images per block (bytes)
constexpr size_t SMEM_WEIGHTS = 16 * 1024;  // weights of every channel, padded to MB

struct FusedParams {
  int B, C, H, W, M, K, Hp, Wp;  // Hp, Wp: pooled output size
  int pitch;                     // shared row pitch: even and >= W + 2 (the masked second quad reads 2 past)
  int ipb;                       // images per block
  int mgroups;                   // ceil(M / MB)
};

template <int K, int MB, typename TIn>
__global__ void __launch_bounds__(THREADS)
    conv_tanh_pool_kernel(const TIn* __restrict__ x, const float* __restrict__ k, float* __restrict__ y,
                          const FusedParams p) {
  static_assert(MB % 2 == 0, "weights of a tap are read as float2 pairs");
  static_assert(K % 2 == 1, "K + 3 input columns are read as float2 pairs: K must be odd");
  constexpr int NV = K + 3;  // input columns feeding two adjacent pooled outputs (4 conv columns)
  extern __shared__ float2 smem2[];
  float* s_w = reinterpret_cast<float*>(smem2);      // [mgroup][c][p][q][MB], zero past M
  float* s_x = s_w + size_t(p.mgroups) * p.C * K * K * MB;  // [img][c][row][pitch]
  const int tid = threadIdx.x;
  const long long b0 = (long long)blockIdx.x * p.ipb;
  const int nimg = p.B - b0 < p.ipb ? int(p.B - b0) : p.ipb;

  const int nw = p.mgroups * p.C * K * K * MB;
  for (int i = tid; i < nw; i += THREADS) {
    const int j = i % MB, tap = (i / MB) % (p.C * K * K), mg = i / (MB * p.C * K * K);
    const int m = mg * MB + j;
    s_w[i] = m < p.M ? __ldg(&k[size_t(m) * p.C * K * K + tap]) : 0.0f;
  }
  const int rows = nimg * p.C * p.H;  // image rows of this block, contiguous in x
  const TIn* xb = x + size_t(b0) * p.C * p.H * p.W;
  for (int i = tid; i < rows * p.W; i += THREADS) s_x[(i / p.W) * p.pitch + i % p.W] = float(__ldg(&xb[i]));
  // Columns W..pitch-1 are read only for the masked second quad of an odd Wp: zero them so nothing reads
  // uninitialised shared memory.
  for (int i = tid; i < rows * (p.pitch - p.W); i += THREADS)
    s_x[(i / (p.pitch - p.W)) * p.pitch + p.W + i % (p.pitch - p.W)] = 0.0f;
  __syncthreads();

  const int pairs = (p.Wp + 1) / 2;  // two pooled columns per thread
  const int per_img = p.mgroups * p.Hp * pairs;
  for (int item = tid; item < nimg * per_img; item += THREADS) {
    const int img = item / per_img;
    int r = item % per_img;
    const int mg = r / (p.Hp * pairs);
    r %= p.Hp * pairs;
    const int i = r / pairs, jp = r % pairs;  // pooled row, pair of pooled columns (2jp, 2jp+1)
    float acc[MB][2][4];  // [channel][quad][conv (dr, dc) = 2*dr + dc], dc in 0..1 for quad 0, 2..3 -> quad 1
#pragma unroll
    for (int m = 0; m < MB; ++m)
#pragma unroll
      for (int u = 0; u < 2; ++u) acc[m][u][0] = acc[m][u][1] = acc[m][u][2] = acc[m][u][3] = 0.0f;

    for (int c = 0; c < p.C; ++c) {
      const float* xs = s_x + (size_t(img) * p.C + c) * p.H * p.pitch + size_t(2 * i) * p.pitch + 4 * jp;
      const float* ws = s_w + (size_t(mg) * p.C + c) * K * K * MB;
#pragma unroll
      for (int kp = 0; kp < K; ++kp) {
        float wr[K][MB];
#pragma unroll
        for (int q = 0; q < K; ++q)
#pragma unroll
          for (int m = 0; m < MB; m += 2) {
            const float2 w2 = *reinterpret_cast<const float2*>(ws + (kp * K + q) * MB + m);
            wr[q][m] = w2.x;
            wr[q][m + 1] = w2.y;
          }
#pragma unroll
        for (int dr = 0; dr < 2; ++dr) {
          float v[NV + 1];
          const float* row = xs + (kp + dr) * p.pitch;
#pragma unroll
          for (int u = 0; u < NV; u += 2) {
            const float2 x2 = *reinterpret_cast<const float2*>(row + u);
            v[u] = x2.x;
            v[u + 1] = x2.y;
          }
#pragma unroll
          for (int q = 0; q < K; ++q)
#pragma unroll
            for (int m = 0; m < MB; ++m) {
              acc[m][0][2 * dr + 0] = fmaf(v[q + 0], wr[q][m], acc[m][0][2 * dr + 0]);
              acc[m][0][2 * dr + 1] = fmaf(v[q + 1], wr[q][m], acc[m][0][2 * dr + 1]);
              acc[m][1][2 * dr + 0] = fmaf(v[q + 2], wr[q][m], acc[m][1][2 * dr + 0]);
              acc[m][1][2 * dr + 1] = fmaf(v[q + 3], wr[q][m], acc[m][1][2 * dr + 1]);
            }
        }
      }
    }
    const long long b = b0 + img;
#pragma unroll
    for (int m = 0; m < MB; ++m) {
      const int mo = mg * MB + m;
      if (mo < p.M) {
        float* yo = y + ((size_t(b) * p.M + mo) * p.Hp + i) * p.Wp + 2 * jp;
#pragma unroll
        for (int u = 0; u < 2; ++u)
          if (2 * jp + u < p.Wp)
            yo[u] = tanhf(fmaxf(fmaxf(acc[m][u][0], acc[m][u][1]), fmaxf(acc[m][u][2], acc[m][u][3])));
      }
    }
  }
}

// Any shape: one thread per pooled output y[b][m][i][j], x and k read through the read-only cache.
template <typename TIn>
__global__ void conv_tanh_pool_generic_kernel(const TIn* __restrict__ x, const float* __restrict__ k,
                                              float* __restrict__ y, int C, int H, int W, int M, int K, int Hp,
                                              int Wp, long long total) {
  for (long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x; o < total;
       o += (long long)gridDim.x * blockDim.x) {
    const int j = int(o % Wp), i = int((o / Wp) % Hp), m = int((o / (Wp * (long long)Hp)) % M);
    const long long b = o / (Wp * (long long)Hp * M);
    float a00 = 0.0f, a01 = 0.0f, a10 = 0.0f, a11 = 0.0f;
    for (int c = 0; c < C; ++c) {
      const TIn* xc = x + (size_t(b) * C + c) * H * W + size_t(2 * i) * W + 2 * j;
      const float* kc = k + (size_t(m) * C + c) * K * K;
      for (int kp = 0; kp < K; ++kp)
        for (int q = 0; q < K; ++q) {
          const float w = __ldg(&kc[kp * K + q]);
          const TIn* r0 = xc + size_t(kp) * W + q;
          a00 = fmaf(float(__ldg(r0)), w, a00);
          a01 = fmaf(float(__ldg(r0 + 1)), w, a01);
          a10 = fmaf(float(__ldg(r0 + W)), w, a10);
          a11 = fmaf(float(__ldg(r0 + W + 1)), w, a11);
        }
    }
    y[o] = tanhf(fmaxf(fmaxf(a00, a01), fmaxf(a10, a11)));
  }
}

// Shared memory of the specialised kernel for `ipb` images, or 0 when even one image does not fit.
size_t fused_smem(const ConvShape& s, int mb, int pitch, int ipb) {
  const size_t w = size_t((s.M + mb - 1) / mb) * s.C * s.K * s.K * mb * 4;
  const size_t img = size_t(s.C) * s.H * pitch * 4;
  if (w > SMEM_WEIGHTS || img > SMEM_IMAGES) return 0;
  return w + img * ipb;
}

template <int K, int MB, typename TIn>
bool launch_specialised(const TIn* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  FusedParams p{};
  p.B = int(s.B); p.C = int(s.C); p.H = int(s.H); p.W = int(s.W); p.M = int(s.M); p.K = K;
  p.Hp = int(s.Ho() / 2); p.Wp = int(s.Wo() / 2);
  p.pitch = int((s.W + 2 + 1) / 2 * 2);
  p.mgroups = int((s.M + MB - 1) / MB);
  if (fused_smem(s, MB, p.pitch, 1) == 0) return false;
  const size_t img_bytes = size_t(s.C) * s.H * p.pitch * 4;
  p.ipb = int(std::max<size_t>(1, std::min<size_t>(size_t(s.B), SMEM_IMAGES / img_bytes)));
  const size_t smem = fused_smem(s, MB, p.pitch, p.ipb);
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(conv_tanh_pool_kernel<K, MB, TIn>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem)));
  const long long blocks = (s.B + p.ipb - 1) / p.ipb;
  conv_tanh_pool_kernel<K, MB, TIn><<<unsigned(blocks), THREADS, smem, st>>>(x, k, y, p);
  CUDA_CHECK_LAUNCH();
  return true;
}

template <typename TIn>
void launch_fused(const TIn* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  const bool six = s.M % 6 == 0 && s.M <= 12;  // sp18/sp19 conv1 (M=6), fa18 conv1 (M=12): no masked channels
  if (s.K == 5 && (six ? launch_specialised<5, 6>(x, k, y, s, st) : launch_specialised<5, 8>(x, k, y, s, st)))
    return;
  if (s.K == 7 && (six ? launch_specialised<7, 6>(x, k, y, s, st) : launch_specialised<7, 8>(x, k, y, s, st)))
    return;
  const long long Hp = s.Ho() / 2, Wp = s.Wo() / 2, total = s.B * s.M * Hp * Wp;
  if (total == 0) return;  // output under 2x2: nothing to write (the registry refuses such shapes anyway)
  const long long blocks = std::min<long long>((total + THREADS - 1) / THREADS, 1LL << 20);
  conv_tanh_pool_generic_kernel<TIn><<<unsigned(blocks), THREADS, 0, st>>>(
      x, k, y, int(s.C), int(s.H), int(s.W), int(s.M), int(s.K), int(Hp), int(Wp), total);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void conv_fwd_gpu_fused_tanh_pool(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  launch_fused(x, k, y, s, st);
}

void conv_fwd_gpu_fused_tanh_pool_u8(const uint8_t* x, const float* k, float* y, const ConvShape& s,
                                     cudaStream_t st) {
  launch_fused(x, k, y, s, st);
}

std::string conv_supports_gpu_fused_tanh_pool(const ConvShape& s) {
  if (s.C * s.H * s.W > (1LL << 31) - 1 || s.M * s.C * s.K * s.K > (1LL << 31) - 1)
    return "gpu-fused-tanh-pool: an image or the weights are too large for 32-bit offsets";
  return "";
}

// One of milestone 4's three optimisations; final's choice, without measurements of this GPU, for a layer
// followed by tanh + max-pool 2/2.
PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-fused-tanh-pool",
    .step = 10,
    .summary = "conv + tanh + 2x2 max pool in one kernel: the un-pooled output never leaves the SM",
    .epilogue = Epilogue::TanhMaxPool2,
    .launch = conv_fwd_gpu_fused_tanh_pool,
    .launch_u8 = conv_fwd_gpu_fused_tanh_pool_u8,
    .supports = conv_supports_gpu_fused_tanh_pool,
    .roles = {.m3 = on_request(kNotM3), .m4 = candidate(), .final = default_role()},
});

}  // namespace pyconv
