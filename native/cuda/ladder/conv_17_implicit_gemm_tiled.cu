// Step 17 -- gpu-implicit-gemm-tiled: an SGEMM-class implicit GEMM for any shape, exact float32 (FFMA only).
//
// Why: the sweep over drawn layer shapes (results/bench-nvidia-h200-2026-11-23-sweep.json, `invoke bench
// --sweep`, NVIDIA H200, batch 10000) found steps 5, 6 and 12 at a fraction of FFMA peak on shapes the course does
// not have (deep C*K*K, M of 20-64), well behind cuDNN FP32 there (worst row s37: C=29 29x29 M=19 K=5). Step 5 is
// an implicit GEMM too, but its tiles are small (BM <= 32 channels x 4 pixels per thread, one warp row per
// channel group), it stages the gather in registers and its pixel operand is read with scalar shared loads.
// Measurements and what was tried: docs/ladder-findings/17.md (docs/ladder.md).
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <string>

#include "cuda/runtime/cp_async.cuh"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/fast_div.cuh"
#include "cuda/runtime/registry.cuh"

namespace pyconv {
namespace {

struct Geometry {
  int C, H, W, K, Wo, M, Kd;  // Kd = C*K*K, the reduction
  int HoWo, CHW;
  int row_jump, chan_jump;  // walking the reduction: (q = K-1 -> 0) adds W-K+1 ... see advance()
  long long N;              // B*Ho*Wo output pixels
  bool fast_n;              // N < 2^31: pixel numbers divide with FastDiv
  FastDiv div_howo, div_wo;
};

constexpr int kThreads = 256, kTP = 8, kBK = 8, kStages = 3;

template <int BP, int BC, int TC>
struct Tile {
  static constexpr int PG = BP / kTP, CG = BC / TC;        // pixel groups, channel groups
  static constexpr int LC = CG < 4 ? CG : 4, LP = 32 / LC;  // a warp's lanes along channels, along pixels
  static constexpr int WP = PG / LP;                        // warps along pixels
  static constexpr int WPITCH = BC + 4;  // padded: the 4-byte weight copies of one slice hit distinct banks
  static constexpr int XS = kBK * BP, STAGE = XS + kBK * WPITCH;
  static constexpr int PX = BP / kThreads;  // pixels each thread gathers per reduction row
  static constexpr int WCOPIES = (kBK * BC + kThreads - 1) / kThreads;
  static constexpr size_t smem_bytes = size_t(kStages) * STAGE * sizeof(float);
  static_assert(PG * CG == kThreads, "the micro-tiles must cover the block tile with 256 threads");
  static_assert(TC % 4 == 0 && BP % kThreads == 0 && PG % LP == 0 && CG % LC == 0, "tile shape");
};

// Copies 4 bytes, or writes 0.0f when !valid (src-size 0: nothing is read).
__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 4 : 0)
               : "memory");
}

// Pixel n -> (image b, pixel within the image).
__device__ __forceinline__ void split_pixel(long long n, const Geometry& g, long long& b, int& pix) {
  if (g.fast_n) {
    const uint32_t bb = g.div_howo.div(uint32_t(n));
    b = bb;
    pix = int(uint32_t(n) - bb * uint32_t(g.HoWo));
  } else {
    b = n / g.HoWo;
    pix = int(n - b * g.HoWo);
  }
}

template <int BP, int BC, int TC>
__global__ void __launch_bounds__(kThreads, 2)  // <= 128 registers: two blocks (16 warps) per SM
    conv17_kernel(const float* __restrict__ x, const float* __restrict__ k, float* __restrict__ y, Geometry g,
                  int m_tiles) {
  using T = Tile<BP, BC, TC>;
  extern __shared__ __align__(16) float smem[];  // kStages x { xs[kBK][BP], ws[kBK][WPITCH] }
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int pg = (warp % T::WP) * T::LP + lane % T::LP;  // this thread's pixel group
  const int cg = (warp / T::WP) * T::LC + lane / T::LP;  // this thread's channel group
  const int mt = int(blockIdx.x % unsigned(m_tiles));
  const long long n0 = (long long)(blockIdx.x / unsigned(m_tiles)) * BP;
  const int m0 = mt * BC;

  const float* xb[T::PX];  // &x[b][0][oh][ow] of each gathered pixel, nullptr past N
#pragma unroll
  for (int j = 0; j < T::PX; ++j) {
    const long long n = n0 + tid + j * kThreads;
    xb[j] = nullptr;
    if (n < g.N) {
      long long b;
      int pix;
      split_pixel(n, g, b, pix);
      const int oh = int(g.div_wo.div(uint32_t(pix))), ow = pix - oh * g.Wo;
      xb[j] = x + b * g.CHW + oh * g.W + ow;
    }
  }

  int off = 0, q = 0, p = 0;  // the next reduction row to gather: off = c*H*W + p*W + q
  auto load_slice = [&](int stage, int t) {  // called for t = 0, 1, 2, ... in order (the walk advances)
    float* xs = smem + stage * T::STAGE;
    float* ws = xs + T::XS;
    const int k0 = t * kBK;
#pragma unroll
    for (int r = 0; r < T::WCOPIES; ++r) {
      const int e = tid + r * kThreads;
      if (T::WCOPIES * kThreads == kBK * BC || e < kBK * BC) {
        const int c = e / kBK, kk = e % kBK;  // 8 consecutive lanes read 32 contiguous bytes of a weight row
        const bool ok = m0 + c < g.M && k0 + kk < g.Kd;
        cp_async4(ws + kk * T::WPITCH + c, ok ? k + size_t(m0 + c) * g.Kd + k0 + kk : k, ok);
      }
    }
#pragma unroll 1  // the walk is a chain; unrolled, the copies' addresses would all be live at once
    for (int kk = 0; kk < kBK; ++kk) {
      const bool row_ok = k0 + kk < g.Kd;
#pragma unroll
      for (int j = 0; j < T::PX; ++j) {
        const bool ok = row_ok && xb[j] != nullptr;
        cp_async4(xs + kk * BP + tid + j * kThreads, ok ? xb[j] + off : x, ok);
      }
      ++off;  // advance (c, p, q) by one row
      if (++q == g.K) {
        q = 0;
        off += g.row_jump;
        if (++p == g.K) {
          p = 0;
          off += g.chan_jump;
        }
      }
    }
  };

  float acc[kTP][TC];
#pragma unroll
  for (int i = 0; i < kTP; ++i)
#pragma unroll
    for (int j = 0; j < TC; ++j) acc[i][j] = 0.0f;

  const int n_slices = (g.Kd + kBK - 1) / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_slices) load_slice(s, s);
    cp_async_commit();  // empty groups keep the count uniform
  }
  for (int t = 0; t < n_slices; ++t) {
    cp_async_wait_group<kStages - 2>();  // this thread's copies of slice t have landed ...
    __syncthreads();               // ... and everyone's; stage (t-1) % kStages is no longer read
    const int tn = t + kStages - 1;
    if (tn < n_slices) load_slice(tn % kStages, tn);
    cp_async_commit();

    const float* xs = smem + (t % kStages) * T::STAGE;
    const float* ws = xs + T::XS;
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      float a[kTP], w[TC];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float4 v = *reinterpret_cast<const float4*>(xs + kk * BP + h * (BP / 2) + pg * 4);
        a[4 * h] = v.x; a[4 * h + 1] = v.y; a[4 * h + 2] = v.z; a[4 * h + 3] = v.w;
      }
#pragma unroll
      for (int h = 0; h < TC / 4; ++h) {
        const float4 v = *reinterpret_cast<const float4*>(ws + kk * T::WPITCH + h * (BC * 4 / TC) + cg * 4);
        w[4 * h] = v.x; w[4 * h + 1] = v.y; w[4 * h + 2] = v.z; w[4 * h + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < kTP; ++i)
#pragma unroll
        for (int j = 0; j < TC; ++j) acc[i][j] = fmaf(a[i], w[j], acc[i][j]);
    }
  }
  cp_async_wait_group<0>();  // nothing may be in flight when the block exits

  // acc[4h + u][4hc + i]: pixel n0 + h*BP/2 + pg*4 + u, channel m0 + hc*(BC*4/TC) + cg*4 + i.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long n = n0 + h * (BP / 2) + pg * 4;
    if (g.HoWo % 4 == 0) {  // N is a multiple of 4 too: the group is wholly in or out
      if (n < g.N) {
        long long b;
        int pix;
        split_pixel(n, g, b, pix);
        float* yb = y + b * g.M * g.HoWo + pix;
#pragma unroll
        for (int hc = 0; hc < TC / 4; ++hc)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int m = m0 + hc * (BC * 4 / TC) + cg * 4 + i;
            if (m < g.M)
              *reinterpret_cast<float4*>(yb + (long long)m * g.HoWo) =
                  make_float4(acc[4 * h][4 * hc + i], acc[4 * h + 1][4 * hc + i], acc[4 * h + 2][4 * hc + i],
                              acc[4 * h + 3][4 * hc + i]);
          }
      }
    } else {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (n + u >= g.N) break;
        long long b;
        int pix;
        split_pixel(n + u, g, b, pix);
        float* yb = y + b * g.M * g.HoWo + pix;
#pragma unroll
        for (int hc = 0; hc < TC / 4; ++hc)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int m = m0 + hc * (BC * 4 / TC) + cg * 4 + i;
            if (m < g.M) yb[(long long)m * g.HoWo] = acc[4 * h + u][4 * hc + i];
          }
      }
    }
  }
}

template <int BP, int BC, int TC>
void launch(const float* x, const float* k, float* y, const Geometry& g, cudaStream_t st) {
  using T = Tile<BP, BC, TC>;
  const long long n_tiles = (g.N + BP - 1) / BP;
  const int m_tiles = (g.M + BC - 1) / BC;
  const auto kernel = conv17_kernel<BP, BC, TC>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(T::smem_bytes)));
  kernel<<<unsigned(n_tiles * m_tiles), kThreads, T::smem_bytes, st>>>(x, k, y, g, m_tiles);
  CUDA_CHECK_LAUNCH();
}

// The pixel tile of each channel tile: 256 threads; TC = 8 for BC >= 32, else 4 (an 8 x 8 tile of 1024 x 16
// holds four gathered pixel addresses and spilled past 128 registers).
constexpr int kBC[] = {8, 16, 32, 64};
// Guessed relative FFMA efficiency per channel tile (fewer FFMAs per gathered element and per pixel index
// below 64); replace by measurement when the sweep has this step's rows per configuration.
constexpr double kEfficiency[] = {0.55, 0.7, 0.95, 1.0};

int choose_bc(long long M) {
  int best = 3;
  double best_cost = 1e300;
  for (int i = 3; i >= 0; --i) {
    const double cost = double((M + kBC[i] - 1) / kBC[i] * kBC[i]) / kEfficiency[i];
    if (cost < best_cost) { best_cost = cost; best = i; }
  }
  return kBC[best];
}

}  // namespace

std::string conv_supports_gpu_implicit_gemm_tiled(const ConvShape& s) {
  const long long n = s.B * s.Ho() * s.Wo();
  const int bc = choose_bc(s.M), bp = bc == 64 ? 256 : bc == 8 ? 1024 : 512;  // as the launcher picks
  const long long blocks = (n + bp - 1) / bp * ((s.M + bc - 1) / bc);
  if (s.C * s.H * s.W > INT_MAX || s.C * s.K * s.K > INT_MAX - 16 || s.M > INT_MAX / 2 || blocks > INT_MAX)
    return "gpu-implicit-gemm-tiled indexes one image (C*H*W), the C*K*K reduction, M and its blocks with 32-bit "
           "integers: C*H*W=" + std::to_string(s.C * s.H * s.W) + ", C*K*K=" + std::to_string(s.C * s.K * s.K) +
           ", M=" + std::to_string(s.M) + ", blocks=" + std::to_string(blocks);
  return {};
}

void conv_fwd_gpu_implicit_gemm_tiled(const float* x, const float* k, float* y, const ConvShape& s,
                                      cudaStream_t st) {
  Geometry g{};
  g.C = int(s.C); g.H = int(s.H); g.W = int(s.W); g.K = int(s.K); g.Wo = int(s.Wo()); g.M = int(s.M);
  g.Kd = int(s.C * s.K * s.K);
  g.HoWo = int(s.Ho() * s.Wo());
  g.CHW = int(s.C * s.H * s.W);
  g.row_jump = g.W - g.K;                // q wrapped: from (p, K) to (p+1, 0)
  g.chan_jump = g.H * g.W - g.K * g.W;   // p wrapped: from (c, K, 0) to (c+1, 0, 0)
  g.N = s.B * s.Ho() * s.Wo();
  g.fast_n = g.N < (1LL << 31);
  g.div_howo = FastDiv(uint32_t(g.HoWo));
  g.div_wo = FastDiv(uint32_t(g.Wo));
  switch (choose_bc(s.M)) {
    case 8: launch<1024, 8, 4>(x, k, y, g, st); break;
    case 16: launch<512, 16, 4>(x, k, y, g, st); break;
    case 32: launch<512, 32, 8>(x, k, y, g, st); break;
    default: launch<256, 64, 8>(x, k, y, g, st); break;
  }
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-implicit-gemm-tiled",
    .step = 17,
    .summary = "implicit GEMM for any shape: 8x8 FFMA micro-tiles, channel tile per M, 3-stage cp.async gather",
    .launch = conv_fwd_gpu_implicit_gemm_tiled,
    .supports = conv_supports_gpu_implicit_gemm_tiled,
    .roles = {.m3 = on_request(kNotM3), .m4 = candidate(), .final = candidate()},
});

}  // namespace pyconv
