// Step 5 -- gpu-register-tiled: step 4's implicit GEMM with register tiling and a double-buffered pipeline.
// A block computes a BM (output channels) x BN (pixels) tile; each thread holds a TM x TN micro-tile of
// accumulators in registers, so every shared-memory load feeds TM or TN FMAs instead of one. With TM = 8 or 16
// output channels per thread and TN = 4 pixels, the weight row is a broadcast float4 load and the pixel values
// are conflict-free scalar loads, which makes the inner loop FMA-bound rather than shared-memory bound.
// While one BK-slice of the reduction is multiplied, the next slice is already being gathered from x into
// registers (two shared buffers, one barrier per slice).
// Pixel columns of a thread are strided by NT (tn, tn+NT, ...) so a warp's loads and stores stay coalesced.
// Configurations (chosen by M): M <= 8: 8x512 tile, 8x4 per thread; M <= 16: 16x512, 16x4; else 32x256, 16x4
// (M = 50 runs as two 32-channel tiles).
// Measured: results/bench-nvidia-h200-2026-11-22.json (`invoke bench`, NVIDIA H200, batch 10000,
// median of 20): this step's row per course layer, cuDNN's beside it.
// Measurements and what was tried: docs/ladder-findings/05.md (docs/ladder.md).
#include <climits>
#include <string>

#include "cuda/runtime/fallback_steps.cuh"
#include "cuda/runtime/registry.cuh"
#include "cuda/runtime/cuda_check.cuh"

namespace pyconv {
namespace {

struct GatherGeometry {  // the implicit matrix U[C*K*K][B*Ho*Wo]
  int C, H, W, K, Wo, M, Kd;
  long long HoWo, N;
};

template <int BM, int TM, int TN, int NT, int BK>
__global__ void __launch_bounds__((BM / TM) * NT)
    conv_fwd_gpu_register_tiled_kernel(const float* __restrict__ x, const float* __restrict__ A,
                                       float* __restrict__ y, GatherGeometry g, long long n_tiles, int m_tiles) {
  constexpr int THREADS = (BM / TM) * NT;
  constexpr int BN = TN * NT;
  constexpr int COLS = BN / THREADS;                   // pixel columns each thread gathers
  constexpr int AREGS = (BK * BM + THREADS - 1) / THREADS;  // weight elements each thread loads per slice
  static_assert(TM % 4 == 0, "TM must be a multiple of 4: the weight column is read as float4");
  static_assert(BM % TM == 0 && BN % THREADS == 0, "tile must split evenly over the threads");
  static_assert(NT % 32 == 0, "a warp must share one TM row group so its weight reads are broadcasts");

  __shared__ __align__(16) float As[2][BK][BM];  // As[s][kk][m] = A[m0 + m][k0 + kk]
  __shared__ float Bs[2][BK][BN];                // Bs[s][kk][j] = U[k0 + kk][n0 + j]

  const int tid = threadIdx.x;
  const int tn = tid % NT, tm = tid / NT;
  const int KK = g.K * g.K, HW = g.H * g.W;

  for (int mt = blockIdx.y; mt < m_tiles; mt += gridDim.y) {         // both loop bounds are block-uniform,
    for (long long nt = blockIdx.x; nt < n_tiles; nt += gridDim.x) {  // so the barriers inside are safe
      const int m0 = mt * BM;
      const long long n0 = nt * BN;

      long long base[COLS];  // &x[b][0][h][w] of each gathered column, -1 past the end
#pragma unroll
      for (int i = 0; i < COLS; ++i) {
        const long long n = n0 + tid + i * THREADS;
        if (n < g.N) {
          const long long b = n / g.HoWo;
          const int pix = int(n % g.HoWo);
          base[i] = b * g.C * HW + (long long)(pix / g.Wo) * g.W + pix % g.Wo;
        } else {
          base[i] = -1;
        }
      }

      float a_reg[AREGS];
      float b_reg[BK][COLS];
      auto load_slice = [&](int k0) {  // global -> registers
#pragma unroll
        for (int r = 0; r < AREGS; ++r) {
          const int e = tid + r * THREADS;
          const int kk = e / BM, m = e % BM;
          a_reg[r] = (e < BK * BM && m0 + m < g.M && k0 + kk < g.Kd) ? A[size_t(m0 + m) * g.Kd + k0 + kk] : 0.0f;
        }
        int c = k0 / KK, p = (k0 % KK) / g.K, q = k0 % g.K;  // walked row by row, no division per row
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
          const bool row_ok = k0 + kk < g.Kd;
          const int off = c * HW + p * g.W + q;
#pragma unroll
          for (int i = 0; i < COLS; ++i) b_reg[kk][i] = (row_ok && base[i] >= 0) ? x[base[i] + off] : 0.0f;
          if (++q == g.K) {
            q = 0;
            if (++p == g.K) { p = 0; ++c; }
          }
        }
      };
      auto store_slice = [&](int s) {  // registers -> shared buffer s
#pragma unroll
        for (int r = 0; r < AREGS; ++r) {
          const int e = tid + r * THREADS;
          if (e < BK * BM) As[s][e / BM][e % BM] = a_reg[r];
        }
#pragma unroll
        for (int kk = 0; kk < BK; ++kk)
#pragma unroll
          for (int i = 0; i < COLS; ++i) Bs[s][kk][tid + i * THREADS] = b_reg[kk][i];
      };

      float acc[TM][TN];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

      const int n_slices = (g.Kd + BK - 1) / BK;
      load_slice(0);
      store_slice(0);
      __syncthreads();
      for (int t = 0; t < n_slices; ++t) {
        const int cur = t & 1;
        const bool more = t + 1 < n_slices;
        if (more) load_slice((t + 1) * BK);  // in flight while this slice is multiplied
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
          float a[TM], bv[TN];
#pragma unroll
          for (int i = 0; i < TM / 4; ++i) {
            const float4 v = reinterpret_cast<const float4*>(&As[cur][kk][tm * TM])[i];
            a[4 * i] = v.x; a[4 * i + 1] = v.y; a[4 * i + 2] = v.z; a[4 * i + 3] = v.w;
          }
#pragma unroll
          for (int j = 0; j < TN; ++j) bv[j] = Bs[cur][kk][tn + j * NT];
#pragma unroll
          for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
        }
        // Buffer cur^1 was last read in iteration t-1, which every thread finished before the barrier below.
        if (more) store_slice(cur ^ 1);
        __syncthreads();
      }

#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const long long n = n0 + tn + j * NT;
        if (n >= g.N) continue;
        const long long b = n / g.HoWo, pix = n % g.HoWo;
#pragma unroll
        for (int i = 0; i < TM; ++i) {
          const int m = m0 + tm * TM + i;
          if (m < g.M) y[(b * g.M + m) * g.HoWo + pix] = acc[i][j];
        }
      }
    }
  }
}

template <int BM, int TM, int TN, int NT, int BK>
void launch(const float* x, const float* k, float* y, const GatherGeometry& g, cudaStream_t st) {
  constexpr int BN = TN * NT;
  const long long n_tiles = (g.N + BN - 1) / BN;
  const int m_tiles = (g.M + BM - 1) / BM;
  dim3 grid(unsigned(n_tiles < INT_MAX ? n_tiles : INT_MAX), unsigned(m_tiles < 65535 ? m_tiles : 65535));
  conv_fwd_gpu_register_tiled_kernel<BM, TM, TN, NT, BK><<<grid, (BM / TM) * NT, 0, st>>>(x, k, y, g, n_tiles,
                                                                                          m_tiles);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

std::string conv_supports_gpu_register_tiled(const ConvShape& s) {
  if (s.C * s.K * s.K > INT_MAX / 2 || s.C * s.H * s.W > INT_MAX || s.M > INT_MAX / 2)
    return "gpu-register-tiled indexes one image (C*H*W), the C*K*K reduction and M with 32-bit integers: "
           "C*H*W=" + std::to_string(s.C * s.H * s.W) + ", C*K*K=" + std::to_string(s.C * s.K * s.K) +
           ", M=" + std::to_string(s.M);
  return {};
}

void conv_fwd_gpu_register_tiled(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  const GatherGeometry g{int(s.C), int(s.H), int(s.W), int(s.K), int(s.Wo()), int(s.M), int(s.C * s.K * s.K),
                         s.Ho() * s.Wo(), s.B * s.Ho() * s.Wo()};
  if (s.M <= 8)
    launch<8, 8, 4, 128, 8>(x, k, y, g, st);
  else if (s.M <= 16)
    launch<16, 16, 4, 128, 8>(x, k, y, g, st);
  else
    launch<32, 16, 4, 64, 8>(x, k, y, g, st);
}

// One of milestone 4's three optimisations (with gpu-specialised and gpu-fused-tanh-pool).
PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-register-tiled",
    .step = 5,
    .summary = "implicit GEMM with per-thread register micro-tiles and double-buffered slices",
    .launch = conv_fwd_gpu_register_tiled,
    .supports = conv_supports_gpu_register_tiled,
    .roles = {.m3 = on_request(kNotM3), .m4 = candidate(), .final = candidate()},
});

}  // namespace pyconv
