// Step 1 -- gpu-shared-tiled: the baseline's one-thread-per-output mapping, but each block first copies the input
// tile it needs (TILE x TILE outputs + a K-1 halo) of one channel into shared memory, so every x element is read
// from global memory once per (block, channel) instead of up to K*K times; the block loops over C.
// Why: the baseline issues C*K*K global loads per output and leans on L1 to find the reuse.
// Measured: results/bench-nvidia-h200-2026-11-22.json (`invoke bench`, NVIDIA H200, batch 10000,
// median of 20): this step's row per course layer, cuDNN's beside it.
// Predicted before measuring: roughly 1.5-2x faster than the baseline on sp19 conv2; little gain on conv1,
// which is bound by writing its 464 MB output, and each block still reloads its tile once per output channel m.
#include <climits>
#include <string>

#include "cuda/runtime/registry.cuh"
#include "cuda/runtime/cuda_check.cuh"

namespace pyconv {
namespace {

constexpr int TILE = 16;                        // outputs per block edge; block = TILE x TILE threads
constexpr size_t kSharedBudget = 48 * 1024;     // default dynamic shared memory limit, no opt-in needed

size_t shared_bytes(int64_t K) { return size_t(TILE + K - 1) * size_t(TILE + K - 1) * sizeof(float); }

// One block per (b, m, tile row, tile column), walked with a grid-stride loop so any B*M fits the grid.
__global__ void conv_fwd_gpu_shared_tiled_kernel(const float* x, const float* k, float* y, int C, int H, int W,
                                                 int M, int K, int Ho, int Wo, int tiles_h, int tiles_w,
                                                 long long n_tiles) {
  extern __shared__ float tile[];  // [S][S], S = TILE + K - 1: one channel of the input patch
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
      __syncthreads();  // everyone is done reading the previous channel (or tile) before it is overwritten
      const float* xc = x + (size_t(b) * C + c) * H * W;
      for (int i = tid; i < S * S; i += TILE * TILE) {
        const int r = h0 + i / S, col = w0 + i % S;
        tile[i] = (r < H && col < W) ? xc[size_t(r) * W + col] : 0.0f;
      }
      __syncthreads();
      if (valid) {
        const float* kc = k + (size_t(m) * C + c) * K * K;
        for (int p = 0; p < K; ++p)
          for (int q = 0; q < K; ++q) acc += tile[(ty + p) * S + tx + q] * kc[p * K + q];
      }
    }
    if (valid) y[((size_t(b) * M + m) * Ho + h) * Wo + w] = acc;
  }
}

}  // namespace

std::string conv_supports_gpu_shared_tiled(const ConvShape& s) {
  if (shared_bytes(s.K) > kSharedBudget)
    return "gpu-shared-tiled keeps a (16+K-1)^2 input tile in 48 KiB of shared memory: K=" + std::to_string(s.K) +
           " needs " + std::to_string(shared_bytes(s.K)) + " bytes (K <= 94 fits)";
  return {};
}

void conv_fwd_gpu_shared_tiled(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  const int Ho = int(s.Ho()), Wo = int(s.Wo());
  const int tiles_h = (Ho + TILE - 1) / TILE, tiles_w = (Wo + TILE - 1) / TILE;
  const long long n_tiles = (long long)s.B * s.M * tiles_h * tiles_w;
  const unsigned grid = unsigned(n_tiles < INT_MAX ? n_tiles : INT_MAX);
  conv_fwd_gpu_shared_tiled_kernel<<<grid, dim3(TILE, TILE), shared_bytes(s.K), st>>>(
      x, k, y, int(s.C), int(s.H), int(s.W), int(s.M), int(s.K), Ho, Wo, tiles_h, tiles_w, n_tiles);
  CUDA_CHECK_LAUNCH();
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-shared-tiled",
    .step = 1,
    .summary = "input tile + halo per (image, channel) in shared memory, one output per thread",
    .launch = conv_fwd_gpu_shared_tiled,
    .supports = conv_supports_gpu_shared_tiled,
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
