// Step 7 -- gpu-channel-parallel: parallelism over images and input channels.
// Measurements and what was tried: docs/ladder-findings/07.md (docs/ladder.md).
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/runtime/registry.cuh"
#include "cuda/runtime/cuda_check.cuh"

namespace pyconv {
namespace {

constexpr int PIX = 32;  // output pixels per warp (one per lane)
constexpr int MB = 8;    // output channels per pass (accumulators per thread)
constexpr int MAX_THREADS = 256;

__global__ void __launch_bounds__(MAX_THREADS)
    conv_fwd_gpu_channel_parallel_kernel(const float* __restrict__ x, const float* __restrict__ k,
                                         float* __restrict__ y, int B, int C, int H, int W, int M, int K, int CG,
                                         int IPB, long long items, int pix_tiles) {
  __shared__ float red[MAX_THREADS * MB];  // [img][group][pixel][j]
  const int px = threadIdx.x, grp = threadIdx.y, img = threadIdx.z;
  const int Ho = H - K + 1, Wo = W - K + 1, HWo = Ho * Wo, KK = K * K;
  for (long long item = blockIdx.x; item < items; item += gridDim.x) {
    const long long b = (item / pix_tiles) * IPB + img;
    const int pix = int(item % pix_tiles) * PIX + px;
    const bool valid = b < B && pix < HWo;
    const int h = valid ? pix / Wo : 0, w = valid ? pix % Wo : 0;
    const float* xb = x + (size_t(valid ? b : 0) * C) * H * W + size_t(h) * W + w;
    for (int m0 = 0; m0 < M; m0 += MB) {
      float acc[MB];
#pragma unroll
      for (int j = 0; j < MB; ++j) acc[j] = 0.0f;
      if (valid) {
        for (int c = grp; c < C; c += CG) {
          const float* xc = xb + size_t(c) * H * W;
          for (int p = 0; p < K; ++p)
            for (int q = 0; q < K; ++q) {
              const float xv = __ldg(&xc[p * W + q]);
              const int tap = c * KK + p * K + q;
#pragma unroll
              for (int j = 0; j < MB; ++j) {
                const int m = min(m0 + j, M - 1);  // clamped rows are computed but never stored
                acc[j] = fmaf(xv, __ldg(&k[size_t(m) * C * KK + tap]), acc[j]);
              }
            }
        }
      }
      float* mine = red + ((img * CG + grp) * PIX + px) * MB;
#pragma unroll
      for (int j = 0; j < MB; ++j) mine[j] = acc[j];
      __syncthreads();
      if (grp == 0 && valid) {
        for (int j = 0; j < MB && m0 + j < M; ++j) {
          float sum = 0.0f;
          for (int gi = 0; gi < CG; ++gi) sum += red[((img * CG + gi) * PIX + px) * MB + j];
          y[(size_t(b) * M + m0 + j) * HWo + pix] = sum;
        }
      }
      __syncthreads();  // red is rewritten by the next pass
    }
  }
}

}  // namespace

void conv_fwd_gpu_channel_parallel(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  const int C = int(s.C);
  const int per_group = (C + 7) / 8;                 // channels per warp group
  const int CG = (C + per_group - 1) / per_group;    // 1..8 groups, as even as possible
  const int IPB = std::max(1, MAX_THREADS / (PIX * CG));
  const long long HWo = s.Ho() * s.Wo();
  const long long pix_tiles = (HWo + PIX - 1) / PIX;
  const long long items = (s.B + IPB - 1) / IPB * pix_tiles;
  const long long blocks = std::min<long long>(items, 1LL << 20);
  const dim3 block{unsigned(PIX), unsigned(CG), unsigned(IPB)};
  conv_fwd_gpu_channel_parallel_kernel<<<unsigned(blocks), block, 0, st>>>(
      x, k, y, int(s.B), C, int(s.H), int(s.W), int(s.M), int(s.K), CG, IPB, items, int(pix_tiles));
  CUDA_CHECK_LAUNCH();
}

std::string conv_supports_gpu_channel_parallel(const ConvShape& s) {
  if (s.B > (1LL << 31) - 1 || s.C * s.H * s.W > (1LL << 31) - 1 || s.Ho() * s.Wo() > (1LL << 31) - 1 - 32)
    return "gpu-channel-parallel: an image or the batch is too large for 32-bit pixel indices";
  return "";
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-channel-parallel",
    .step = 7,
    .summary = "several images per block, input channels split across warps, shared-memory reduction",
    .launch = conv_fwd_gpu_channel_parallel,
    .supports = conv_supports_gpu_channel_parallel,
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
