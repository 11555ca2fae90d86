// Step 6 -- gpu-specialised: a direct convolution compiled for the course's (C, K) pairs, instead of a GEMM.
// Changes from step 5 and why:
// - One block owns a band of TH full-width output rows of one image and copies the C-channel input band
//   (TH + K - 1 rows, 2-D halo included) into shared memory once; it then loops over ALL output channels in
//   groups of MB, so x is read from global memory exactly once per band (steps 1-5 reread it per m or per tile).
// - Register blocking: each thread computes TNP adjacent pixels of a row for MB output channels. Per (c, p) it
//   loads TNP+K-1 inputs once (float4/float2 loads) and reuses them across the K taps and MB channels: the
//   sliding window lives in registers, which the GEMM view cannot exploit.
// - The MB weights of one tap are stored contiguously in shared memory and read as float4 broadcasts.
// - C, K, MB, TNP are template parameters: every loop bound is a compile-time constant, the (c, p, q) loops are
//   fully unrolled (#pragma unroll), shared-memory offsets fold into immediates, pointers are __restrict__.
// Measurements and what was tried: docs/ladder-findings/06.md (docs/ladder.md).
#include <algorithm>
#include <climits>
#include <string>

#include "cuda/runtime/fallback_steps.cuh"
#include "cuda/runtime/registry.cuh"
#include "cuda/runtime/cuda_check.cuh"

namespace pyconv {
namespace {

constexpr int kMaxThreads = 256;
constexpr size_t kSharedBudget = 96 * 1024;  // opted in per launch (sm_80: 163 KiB, sm_90: 227 KiB available)

constexpr int round_up(int v, int to) { return (v + to - 1) / to * to; }

template <int C, int K, int MB, int TNP>
struct Spec {
  static constexpr int VEC = TNP % 4 == 0 ? 4 : (TNP % 2 == 0 ? 2 : 1);  // width of the shared input loads
  static constexpr int XR = round_up(TNP + K - 1, VEC);  // inputs a thread holds per (c, p)
  static constexpr int MBP = round_up(MB, 4);            // weights per tap, padded to whole float4s
  static constexpr int CKK = C * K * K;
  // Output columns come in G = ceil(Wo/TNP) groups; the last group reads up to column (G-1)*TNP + XR - 1.
  static int pitch(int W, int Wo) { return round_up(std::max(W, (Wo + TNP - 1) / TNP * TNP - TNP + XR), 4); }
  static size_t weight_bytes() { return size_t(CKK) * MBP * sizeof(float); }
  static size_t band_bytes(int TH, int pitch) { return size_t(C) * (TH + K - 1) * pitch * sizeof(float); }
};

template <int C, int K, int MB, int TNP>
__global__ void __launch_bounds__(kMaxThreads, 3)  // <= 85 registers: 3+ blocks per SM
    conv_fwd_gpu_specialised_kernel(const float* __restrict__ x, const float* __restrict__ k,
                                    float* __restrict__ y, int H, int W, int M, int Ho, int Wo, int TH, int WP,
                                    int n_bands, long long n_blocks) {
  using S = Spec<C, K, MB, TNP>;
  constexpr int MBP = S::MBP, XR = S::XR, VEC = S::VEC, CKK = S::CKK;
  extern __shared__ float4 smem[];
  float4* ws = smem;                                          // [CKK][MBP/4]: the current channel group
  float* xs = reinterpret_cast<float*>(smem + CKK * MBP / 4);  // [C][TH+K-1][WP]: the input band
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int G = (Wo + TNP - 1) / TNP;
  const int rows_cap = TH + K - 1;  // rows per channel in xs

  for (long long blk = blockIdx.x; blk < n_blocks; blk += gridDim.x) {  // block-uniform: barriers are safe
    const long long b = blk / n_bands;
    const int r0 = int(blk % n_bands) * TH;
    const int th = min(TH, Ho - r0);  // output rows of this band
    const int rin = th + K - 1;       // input rows r0 .. r0+rin-1 <= H-1
    const float* xb = x + b * C * H * W;

    __syncthreads();  // the previous band is no longer read
    for (int i = tid; i < C * rin * WP; i += nthreads) {
      const int c = i / (rin * WP), rem = i % (rin * WP), r = rem / WP, col = rem % WP;
      xs[(c * rows_cap + r) * WP + col] = col < W ? xb[(c * H + r0 + r) * W + col] : 0.0f;
    }

    const int items = th * G;
    for (int g0 = 0; g0 < M; g0 += MB) {
      __syncthreads();  // the previous group's weights are no longer read (and the band is complete)
      float* wsf = reinterpret_cast<float*>(ws);
      for (int i = tid; i < MBP * CKK; i += nthreads) {  // coalesced over k's rows
        const int mb = i / CKK, kk = i % CKK;
        wsf[kk * MBP + mb] = (mb < MB && g0 + mb < M) ? k[size_t(g0 + mb) * CKK + kk] : 0.0f;
      }
      __syncthreads();

      for (int it = tid; it < items; it += nthreads) {
        const int row = it / G, col0 = (it % G) * TNP;
        float acc[MB][TNP];
#pragma unroll
        for (int mb = 0; mb < MB; ++mb)
#pragma unroll
          for (int t = 0; t < TNP; ++t) acc[mb][t] = 0.0f;

        // The c loop stays rolled and each (c, p) step is fenced by a compiler-only barrier. Without that the
        // weight loads (invariant over the items) were hoisted out of the item loop and, with a fully unrolled
        // C*K*K body, hundreds of shared loads were scheduled ahead: ptxas reported up to 4 KB of spills per
        // thread. One (c, p) step still offers K*MB*TNP independent FMAs (160 for conv2).
#pragma unroll 1
        for (int c = 0; c < C; ++c) {
#pragma unroll
          for (int p = 0; p < K; ++p) {
            asm volatile("" ::: "memory");
            const float* src = xs + (c * rows_cap + row + p) * WP + col0;  // 4*VEC-byte aligned: WP%4 == 0
            float xr[XR];
#pragma unroll
            for (int v = 0; v < XR / VEC; ++v) {
              if constexpr (VEC == 4) {
                const float4 f = reinterpret_cast<const float4*>(src)[v];
                xr[4 * v] = f.x; xr[4 * v + 1] = f.y; xr[4 * v + 2] = f.z; xr[4 * v + 3] = f.w;
              } else if constexpr (VEC == 2) {
                const float2 f = reinterpret_cast<const float2*>(src)[v];
                xr[2 * v] = f.x; xr[2 * v + 1] = f.y;
              } else {
                xr[v] = src[v];
              }
            }
#pragma unroll
            for (int q = 0; q < K; ++q) {
              float w[MBP];
#pragma unroll
              for (int v = 0; v < MBP / 4; ++v) {
                const float4 f = ws[((c * K + p) * K + q) * (MBP / 4) + v];
                w[4 * v] = f.x; w[4 * v + 1] = f.y; w[4 * v + 2] = f.z; w[4 * v + 3] = f.w;
              }
#pragma unroll
              for (int mb = 0; mb < MB; ++mb)
#pragma unroll
                for (int t = 0; t < TNP; ++t) acc[mb][t] = fmaf(w[mb], xr[t + q], acc[mb][t]);
            }
          }
        }

        const int h = r0 + row;
#pragma unroll
        for (int mb = 0; mb < MB; ++mb) {
          const int m = g0 + mb;
          if (m >= M) break;
          float* yrow = y + ((b * M + m) * Ho + h) * (long long)Wo;
#pragma unroll
          for (int t = 0; t < TNP; ++t)
            if (col0 + t < Wo) yrow[col0 + t] = acc[mb][t];
        }
      }
    }
  }
}

size_t shared_budget() {
  int dev = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return std::min(kSharedBudget, size_t(optin));
}

// Launches the (C, K, MB, TNP) kernel, or returns false when even a one-row band does not fit.
template <int C, int K, int MB, int TNP>
bool try_launch(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  using S = Spec<C, K, MB, TNP>;
  const int H = int(s.H), W = int(s.W), M = int(s.M), Ho = int(s.Ho()), Wo = int(s.Wo());
  const int WP = S::pitch(W, Wo);
  const size_t budget = shared_budget(), per_row = S::band_bytes(1, WP) - S::band_bytes(0, WP);
  if (S::weight_bytes() + S::band_bytes(1, WP) > budget) return false;
  const int fit = int(std::min<size_t>((budget - S::weight_bytes()) / per_row - (K - 1), size_t(Ho)));
  const int n_bands = (Ho + fit - 1) / fit;
  const int TH = (Ho + n_bands - 1) / n_bands;  // balanced bands, TH <= fit
  const int G = (Wo + TNP - 1) / TNP;
  const int threads = std::min(kMaxThreads, round_up(TH * G, 32));
  const size_t smem = S::weight_bytes() + S::band_bytes(TH, WP);
  const long long n_blocks = s.B * n_bands;
  auto kernel = conv_fwd_gpu_specialised_kernel<C, K, MB, TNP>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<unsigned(std::min<long long>(n_blocks, INT_MAX)), threads, smem, st>>>(x, k, y, H, W, M, Ho, Wo, TH,
                                                                                 WP, n_bands, n_blocks);
  CUDA_CHECK_LAUNCH();
  return true;
}

// Of two channel-group sizes, the one that leaves fewer idle channels in the last group (ties: the larger).
bool prefer_first(int64_t M, int mb1, int mb2) {
  const int64_t waste1 = (M + mb1 - 1) / mb1 * mb1 - M, waste2 = (M + mb2 - 1) / mb2 * mb2 - M;
  return waste1 < waste2 || (waste1 == waste2 && mb1 >= mb2);
}

template <int C, int K, int TNP, int MB1, int MB2>
bool dispatch_mb(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  return prefer_first(s.M, MB1, MB2) ? try_launch<C, K, MB1, TNP>(x, k, y, s, st)
                                     : try_launch<C, K, MB2, TNP>(x, k, y, s, st);
}

bool launch_specialised(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  if (s.C == 1 && s.K == 5) return dispatch_mb<1, 5, 4, 6, 10>(x, k, y, s, st);
  if (s.C == 6 && s.K == 5) return dispatch_mb<6, 5, 2, 16, 8>(x, k, y, s, st);
  if (s.C == 1 && s.K == 7) return dispatch_mb<1, 7, 4, 12, 6>(x, k, y, s, st);
  if (s.C == 12 && s.K == 7) return dispatch_mb<12, 7, 2, 12, 8>(x, k, y, s, st);
  return false;
}

}  // namespace

std::string conv_supports_gpu_specialised(const ConvShape& s) {
  // The specialised kernels index one image with 32-bit integers, as does the step-5 fallback.
  const std::string why = conv_supports_gpu_register_tiled(s);
  return why.empty() ? why : "gpu-specialised (generic path = gpu-register-tiled): " + why;
}

void conv_fwd_gpu_specialised(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  if (!launch_specialised(x, k, y, s, st)) conv_fwd_gpu_register_tiled(x, k, y, s, st);
}

// Milestone 4's default optimisation; final's choice, without measurements of this GPU, for a layer that no
// fused variant can take.
PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-specialised",
    .step = 6,
    .summary = "direct conv compiled per (C, K): input band in shared memory, register blocking",
    .launch = conv_fwd_gpu_specialised,
    .supports = conv_supports_gpu_specialised,
    .roles = {.m3 = on_request(kNotM3), .m4 = default_role(), .final = default_role()},
});

}  // namespace pyconv
