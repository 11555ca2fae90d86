// Step 2 -- gpu-const-weights: step 1 with the weights in __constant__ memory. Every thread of a warp reads the
// same weight k[m][c][p][q] at the same time, which is exactly the access the constant cache broadcasts in one
// transaction; the global-memory path is left to the input tile.
// Cost: the weights are copied device-to-device into the constant bank on the stream before every launch
// (at most 64 KiB, a few microseconds). Because the bank is one per module, two launches of this variant on
// different streams at the same time would race on it; the project launches it from one stream.
// Measured: results/bench-nvidia-h200-2026-11-22.json (`invoke bench`, NVIDIA H200, batch 10000,
// median of 20): this step's row per course layer, cuDNN's beside it.
// Predicted before measuring: 1.1-1.3x over step 1 on sp19 conv2 (the inner loop loses its global weight
// load); conv1 unchanged (output-write bound).
#include <climits>
#include <string>

#include "cuda/runtime/registry.cuh"
#include "cuda/runtime/cuda_check.cuh"

namespace pyconv {
namespace {

constexpr int TILE = 16;
constexpr size_t kSharedBudget = 48 * 1024;
constexpr int kMaxWeights = 16 * 1024;  // 64 KiB: the whole constant bank a module may declare

__constant__ float c_weights[kMaxWeights];  // k[M][C][K][K], refreshed before every launch

size_t shared_bytes(int64_t K) { return size_t(TILE + K - 1) * size_t(TILE + K - 1) * sizeof(float); }

__global__ void conv_fwd_gpu_const_weights_kernel(const float* x, float* y, int C, int H, int W, int M, int K,
                                                  int Ho, int Wo, int tiles_h, int tiles_w, long long n_tiles) {
  extern __shared__ float tile[];  // [S][S], S = TILE + K - 1
  const int S = TILE + K - 1;
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TILE + tx;
  const long long per_map = (long long)tiles_h * tiles_w;
  for (long long t = blockIdx.x; t < n_tiles; t += gridDim.x) {  // block-uniform bound: barriers are safe
    const long long bm = t / per_map;
    const int rem = int(t % per_map);
    const int b = int(bm / M), m = int(bm % M);
    const int h0 = (rem / tiles_w) * TILE, w0 = (rem % tiles_w) * TILE;
    const int h = h0 + ty, w = w0 + tx;
    const bool valid = h < Ho && w < Wo;
    float acc = 0.0f;
    for (int c = 0; c < C; ++c) {
      __syncthreads();  // the previous channel (or tile) is no longer read
      const float* xc = x + (size_t(b) * C + c) * H * W;
      for (int i = tid; i < S * S; i += TILE * TILE) {
        const int r = h0 + i / S, col = w0 + i % S;
        tile[i] = (r < H && col < W) ? xc[size_t(r) * W + col] : 0.0f;
      }
      __syncthreads();
      if (valid) {
        const float* kc = c_weights + (m * C + c) * K * K;  // M*C*K*K <= kMaxWeights: int is enough
        for (int p = 0; p < K; ++p)
          for (int q = 0; q < K; ++q) acc += tile[(ty + p) * S + tx + q] * kc[p * K + q];
      }
    }
    if (valid) y[((size_t(b) * M + m) * Ho + h) * Wo + w] = acc;
  }
}

}  // namespace

std::string conv_supports_gpu_const_weights(const ConvShape& s) {
  if (s.k_size() > kMaxWeights)
    return "gpu-const-weights holds the weights in 64 KiB of constant memory: M*C*K*K=" +
           std::to_string(s.k_size()) + " exceeds " + std::to_string(kMaxWeights) + " floats";
  if (shared_bytes(s.K) > kSharedBudget)
    return "gpu-const-weights keeps a (16+K-1)^2 input tile in 48 KiB of shared memory: K=" + std::to_string(s.K) +
           " needs " + std::to_string(shared_bytes(s.K)) + " bytes (K <= 94 fits)";
  return {};
}

void conv_fwd_gpu_const_weights(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  CUDA_CHECK(cudaMemcpyToSymbolAsync(c_weights, k, size_t(s.k_size()) * sizeof(float), 0,
                                     cudaMemcpyDeviceToDevice, st));
  const int Ho = int(s.Ho()), Wo = int(s.Wo());
  const int tiles_h = (Ho + TILE - 1) / TILE, tiles_w = (Wo + TILE - 1) / TILE;
  const long long n_tiles = (long long)s.B * s.M * tiles_h * tiles_w;
  const unsigned grid = unsigned(n_tiles < INT_MAX ? n_tiles : INT_MAX);
  conv_fwd_gpu_const_weights_kernel<<<grid, dim3(TILE, TILE), shared_bytes(s.K), st>>>(
      x, y, int(s.C), int(s.H), int(s.W), int(s.M), int(s.K), Ho, Wo, tiles_h, tiles_w, n_tiles);
  CUDA_CHECK_LAUNCH();
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-const-weights",
    .step = 2,
    .summary = "step 1 with the weights in __constant__ memory (broadcast reads)",
    .launch = conv_fwd_gpu_const_weights,
    .supports = conv_supports_gpu_const_weights,
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
