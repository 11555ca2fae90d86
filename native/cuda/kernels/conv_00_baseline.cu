// Step 0 -- gpu-baseline, the course's milestone-3 kernel: one thread per output element y[b][m][h][w], the
// C*K*K taps read straight from global memory, no shared memory, no reuse beyond what the caches find.
// A 2-D block covers a tile of (h, w); the grid's z dimension walks (b, m) so any batch size fits.
// Measured: results/bench-nvidia-h200-2026-11-22.json (`invoke bench`, NVIDIA H200, batch 10000,
// median of 20): this step's row per course layer, cuDNN's beside it.
#include "cuda/runtime/registry.cuh"
#include "cuda/runtime/cuda_check.cuh"

#include <cstdint>
#include <string>

namespace pyconv {
namespace {

constexpr int TILE = 16;

__global__ void conv_fwd_gpu_baseline_kernel(const float* x, const float* k, float* y, int C, int H, int W, int M,
                                             int K, int Ho, int Wo) {
  const int bm = blockIdx.z;  // b * M + m
  const int b = bm / M, m = bm % M;
  const int h = (blockIdx.y) * TILE + threadIdx.y;
  const int w = blockIdx.x * TILE + threadIdx.x;
  if (h >= Ho || w >= Wo) return;
  float acc = 0.0f;
  for (int c = 0; c < C; ++c)
    for (int p = 0; p < K; ++p)
      for (int q = 0; q < K; ++q)
        acc += x[((size_t(b) * C + c) * H + h + p) * W + w + q] * k[((size_t(m) * C + c) * K + p) * K + q];
  y[((size_t(b) * M + m) * Ho + h) * Wo + w] = acc;
}

}  // namespace

// gridDim.z carries (b, m) pairs in slices of whole images, so M itself must fit in one slice (65535), and
// gridDim.y carries the row tiles. Larger shapes are refused here instead of looping or failing at launch.
std::string conv_supports_gpu_baseline(const ConvShape& s) {
  if (s.M > 65535)
    return "gpu-baseline: M = " + std::to_string(s.M) + " output channels exceed the grid's z limit (65535)";
  if ((s.Ho() + TILE - 1) / TILE > 65535)
    return "gpu-baseline: " + std::to_string(s.Ho()) + " output rows exceed the grid's y limit (65535 tiles of " +
           std::to_string(TILE) + ")";
  if (s.C * s.H * s.W > INT32_MAX || s.M * s.C * s.K * s.K > INT32_MAX)
    return "gpu-baseline: one image or the kernel has more than 2^31 elements";
  return {};
}

void conv_fwd_gpu_baseline(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  const int Ho = int(s.Ho()), Wo = int(s.Wo());
  const int tiles_w = (Wo + TILE - 1) / TILE, tiles_h = (Ho + TILE - 1) / TILE;
  // gridDim.z is limited to 65535: launch in slices of whole images.
  const long long per_slice = 65535 / s.M;
  for (long long b0 = 0; b0 < s.B; b0 += per_slice) {
    const long long nb = s.B - b0 < per_slice ? s.B - b0 : per_slice;
    dim3 grid(tiles_w, tiles_h, unsigned(nb * s.M));
    dim3 block(TILE, TILE);
    conv_fwd_gpu_baseline_kernel<<<grid, block, 0, st>>>(x + b0 * s.C * s.H * s.W, k, y + b0 * s.M * Ho * Wo,
                                                        int(s.C), int(s.H), int(s.W), int(s.M), int(s.K), Ho, Wo);
    CUDA_CHECK_LAUNCH();
  }
}

// Milestone 3's kernel; in milestone 4 the layer where gpu-specialised refuses the shape falls back to it.
PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-baseline",
    .step = 0,
    .summary = "milestone 3: one thread per output element, global memory only",
    .launch = conv_fwd_gpu_baseline,
    .supports = conv_supports_gpu_baseline,
    .roles = {.m3 = default_role(), .m4 = candidate(), .final = candidate()},
});

}  // namespace pyconv
