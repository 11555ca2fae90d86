// Step 12 -- gpu-constant-operand: a direct convolution compiled per (C, K, M) whose weights are immediate
// constant-bank operands of the FFMAs.
// Changes from step 6 (gpu-specialised) and why:
// - Step 6 reads every weight from shared memory (LDS.128 broadcasts: 1 load per 4 weights, each feeding TNP=2
//   FMAs, ~1/8 of the issue slots) and reached 36% of the FFMA roofline on sp19 conv2. Here the weights sit in
//   __constant__ memory and the (p, q, m) loops are fully unrolled with compile-time bounds, so every weight
//   address is a compile-time offset into the constant bank: no shared-memory bandwidth, no address arithmetic.
// Measurements and what was tried: docs/ladder-findings/12.md (docs/ladder.md).
#include <algorithm>
#include <climits>
#include <string>

#include "cuda/ladder/constant_operand.cuh"
#include "cuda/runtime/fallback_steps.cuh"
#include "cuda/runtime/registry.cuh"
#include "cuda/runtime/cuda_check.cuh"

namespace pyconv {
namespace {

constexpr int kMaxThreads = 512;  // the host's cap; the kernel's own bound (below) may be lower
// ptxas caps registers at 64K / bound: 128 at 512 threads is enough on sm_90 (no spills, (6,5,16): 128 used), but
// sm_80's ptxas spilled 312 bytes there, so the sm_80 build bounds blocks at 256 threads (255 registers). The
// launcher asks the runtime for the bound of the binary that runs (cudaFuncAttributes::maxThreadsPerBlock).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define PYCONV_CONSTANT_OPERAND_BOUND 256
#else
#define PYCONV_CONSTANT_OPERAND_BOUND 512
#endif
constexpr int kMaxImagesPerBlock = 16;

// Bank regions, one per instance: offset (floats) of its [C*K*K][M] weights.
constexpr int kOff_1_5_6 = 0;
constexpr int kOff_6_5_16 = kOff_1_5_6 + 1 * 5 * 5 * 6;
constexpr int kOff_1_5_50 = kOff_6_5_16 + 6 * 5 * 5 * 16;
constexpr int kOff_1_7_12 = kOff_1_5_50 + 1 * 5 * 5 * 50;
constexpr int kBankFloats = kOff_1_7_12 + 1 * 7 * 7 * 12;
static_assert(kBankFloats * 4 <= 64 * 1024, "a module's constant bank holds at most 64 KiB");

__constant__ float c_weights[kBankFloats];      // the instances' weights, [C*K*K][M] each
__device__ float g_weights_staging[kBankFloats];  // transposed here, then copied into the bank

template <int C, int K, int M, int P, int OFF>
__global__ void __launch_bounds__(PYCONV_CONSTANT_OPERAND_BOUND)
    conv_fwd_gpu_constant_operand_kernel(const float* __restrict__ x, float* __restrict__ y, long long B, int H,
                                         int W, int WP, int ipb) {
  extern __shared__ float xs[];  // [ipb][C][H][WP], columns W..WP-1 zero
  const int Ho = H - K + 1, Wo = W - K + 1, G = (Wo + P - 1) / P, per_img = Ho * G, plane = Ho * Wo;
  const long long b0 = (long long)blockIdx.x * ipb;
  const int nimg = int(B - b0 < ipb ? B - b0 : ipb);  // >= 1: the grid is ceil(B / ipb)
  const int rows = nimg * C * H;                       // image rows of this block, contiguous in x
  const float* xb = x + b0 * C * H * W;
#pragma unroll 4
  for (int i = threadIdx.x; i < rows * WP; i += blockDim.x) {
    const int row = i / WP, col = i - row * WP;
    xs[i] = col < W ? __ldg(xb + row * W + col) : 0.0f;
  }
  __syncthreads();  // the only barrier: the staged images are read-only from here on

  for (int it = threadIdx.x; it < nimg * per_img; it += blockDim.x) {
    const int img = it / per_img, rg = it - img * per_img;
    const int r = rg / G, w0 = (rg - r * G) * P;
    // Window rows r..r+K-1 <= H-1; columns w0..w0+P+K-2 <= G*P+K-2 <= WP-1 (the pad is zero, and feeds only
    // outputs at columns >= Wo, which are not stored).
    const float* src = xs + (img * C * H + r) * WP + w0;
    float acc[M][P];
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int t = 0; t < P; ++t) acc[m][t] = 0.0f;
    // The c loop stays rolled: the body (K*K*M*P FFMAs) is what the instruction cache has to hold. The weight
    // offsets stay compile-time constants plus the uniform c: ptxas reads them with uniform constant loads.
#pragma unroll 1
    for (int c = 0; c < C; ++c) {
#pragma unroll
      for (int p = 0; p < K; ++p) {
        const float* row = src + (c * H + p) * WP;
        float v[P + K - 1];
#pragma unroll
        for (int u = 0; u < P + K - 1; ++u) v[u] = row[u];
#pragma unroll
        for (int q = 0; q < K; ++q)
#pragma unroll
          for (int m = 0; m < M; ++m) {
            const float w = c_weights[OFF + ((c * K + p) * K + q) * M + m];
#pragma unroll
            for (int t = 0; t < P; ++t) acc[m][t] = fmaf(w, v[t + q], acc[m][t]);
          }
      }
    }
    float* yo = y + (b0 + img) * M * plane + r * Wo + w0;
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int t = 0; t < P; ++t)
        if (P == 1 || t < Wo - w0) yo[m * plane + t] = acc[m][t];
  }
}

template <int C, int K, int M, int P, int OFF>
bool try_launch(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  if (s.C != C || s.K != K || s.M != M) return false;
  const void* kernel = reinterpret_cast<const void*>(conv_fwd_gpu_constant_operand_kernel<C, K, M, P, OFF>);
  const long long G = (s.Wo() + P - 1) / P;
  const long long WP = std::max<long long>(s.W, G * P + K - 1);
  const size_t img_bytes = size_t(C) * s.H * WP * sizeof(float);
  const BlockShape bs = choose_block_shape(kernel, s.B, s.Ho() * G, img_bytes, kMaxThreads, kMaxImagesPerBlock);
  if (bs.ipb == 0) return false;  // one image does not fit in shared memory
  const long long blocks = (s.B + bs.ipb - 1) / bs.ipb;
  if (blocks > INT_MAX) return false;
  const size_t smem = size_t(bs.ipb) * img_bytes;
  constexpr int kFloats = C * K * K * M;
  ordered_bank_use(OFF, st, [&](cudaStream_t stream) {
    float* staging = nullptr;
    CUDA_CHECK(cudaGetSymbolAddress(reinterpret_cast<void**>(&staging), g_weights_staging));
    transpose_weights_kernel<<<(kFloats + 255) / 256, 256, 0, stream>>>(k, staging + OFF, M, C * K * K);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpyToSymbolAsync(c_weights, staging + OFF, kFloats * sizeof(float), OFF * sizeof(float),
                                       cudaMemcpyDeviceToDevice, stream));
    conv_fwd_gpu_constant_operand_kernel<C, K, M, P, OFF><<<unsigned(blocks), bs.threads, smem, stream>>>(
        x, y, s.B, int(s.H), int(s.W), int(WP), bs.ipb);
    CUDA_CHECK_LAUNCH();
  });
  return true;
}

}  // namespace

std::string conv_supports_gpu_constant_operand(const ConvShape& s) {
  const std::string why = conv_supports_gpu_specialised(s);
  return why.empty() ? why : "gpu-constant-operand (generic path = gpu-specialised): " + why;
}

void conv_fwd_gpu_constant_operand(const float* x, const float* k, float* y, const ConvShape& s,
                                   cudaStream_t st) {
  // Images of one block are indexed with 32-bit ints below: ipb * C*H*W floats fit in shared memory, so they do.
  if (try_launch<6, 5, 16, 6, kOff_6_5_16>(x, k, y, s, st) || try_launch<1, 5, 6, 4, kOff_1_5_6>(x, k, y, s, st) ||
      try_launch<1, 5, 50, 1, kOff_1_5_50>(x, k, y, s, st) || try_launch<1, 7, 12, 4, kOff_1_7_12>(x, k, y, s, st))
    return;
  conv_fwd_gpu_specialised(x, k, y, s, st);
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-constant-operand",
    .step = 12,
    .summary = "direct conv per (C, K, M): weights as constant-bank FFMA operands, all M per thread",
    .launch = conv_fwd_gpu_constant_operand,
    .supports = conv_supports_gpu_constant_operand,
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
