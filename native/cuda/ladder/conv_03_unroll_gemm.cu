// Step 3 -- gpu-unroll-gemm: the convolution as a matrix multiply. An unroll (im2col) kernel writes the input
// patches as a matrix U[C*K*K][n] (one column per output pixel n = b*Ho*Wo + h*Wo + w of a chunk of the batch),
// then a shared-memory tiled matrix multiply computes W[M][C*K*K] x U and stores each column straight into
// y[B][M][Ho][Wo]. Why: it turns the irregular convolution into the regular, well-understood GEMM loop.
// Cost: U is K*K times larger than x and goes through global memory twice (write, then read), so this step is
// expected to be SLOWER than steps 1-2 on the memory-bound conv1; it is the stepping stone to step 4.
// Measured: results/bench-nvidia-h200-2026-11-22.json (`invoke bench`, NVIDIA H200, batch 10000,
// median of 20): this step's row per course layer, cuDNN's beside it.
// Predicted before measuring, batch 10000: sp19 conv1 ~1.5-2.5 ms (unrolled matrix 25 x 19.4M floats = 1.9 GB
// written and read), conv2 ~1-1.5 ms (1.9 GB unrolled; a 16x16 tiled GEMM at ~10-15 TFLOP/s).
// Measurements and what was tried: docs/ladder-findings/03.md (docs/ladder.md).
#include <climits>
#include <map>
#include <mutex>
#include <string>

#include "cuda/runtime/registry.cuh"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/device_buffer.cuh"

namespace pyconv {
namespace {

constexpr int TILE = 16;  // GEMM tile edge; block = TILE x TILE threads, one output each
constexpr long long kMaxUnrolledFloats = 64ll << 20;  // 256 MiB of float32

// U[kk][j] = x[b][c][h+p][w+q] with kk = (c*K + p)*K + q and n0 + j = b*Ho*Wo + h*Wo + w.
__global__ void conv_unroll_kernel(const float* x, float* U, int C, int H, int W, int K, int Wo, long long HoWo,
                                   long long n0, long long nc, long long total) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    const int kk = int(i / nc);
    const long long j = i % nc;
    const long long n = n0 + j;
    const long long b = n / HoWo;
    const int pix = int(n % HoWo);
    const int h = pix / Wo, w = pix % Wo;
    const int c = kk / (K * K), p = (kk / K) % K, q = kk % K;
    U[i] = x[((b * C + c) * H + h + p) * W + w + q];
  }
}

// y columns n0..n0+nc-1 = A[M][Kd] x U[Kd][nc]; classic two-tile shared-memory GEMM.
__global__ void conv_gemm_kernel(const float* A, const float* U, float* y, int M, int Kd, long long nc,
                                 long long n0, long long HoWo, int m_tiles) {
  __shared__ float As[TILE][TILE];  // As[ty][kk] is the same address across a half-warp: a broadcast
  __shared__ float Bs[TILE][TILE];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const long long col = blockIdx.x * (long long)TILE + tx;
  for (int mt = blockIdx.y; mt < m_tiles; mt += gridDim.y) {  // block-uniform bound
    const int row = mt * TILE + ty;
    float acc = 0.0f;
    for (int k0 = 0; k0 < Kd; k0 += TILE) {
      As[ty][tx] = (row < M && k0 + tx < Kd) ? A[size_t(row) * Kd + k0 + tx] : 0.0f;
      Bs[ty][tx] = (k0 + ty < Kd && col < nc) ? U[size_t(k0 + ty) * nc + col] : 0.0f;
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < TILE; ++kk) acc += As[ty][kk] * Bs[kk][tx];
      __syncthreads();  // the tiles are read before the next iteration overwrites them
    }
    if (row < M && col < nc) {
      const long long n = n0 + col;
      const long long b = n / HoWo, pix = n % HoWo;
      y[(b * M + row) * HoWo + pix] = acc;
    }
  }
}

struct UnrolledBuffers {
  std::mutex mu;
  std::map<int, DeviceBuffer<float>> by_device;
};

float* unrolled_buffer(size_t floats) {
  static UnrolledBuffers buffers;  // lives until process exit; freeing then never throws
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(buffers.mu);
  DeviceBuffer<float>& buf = buffers.by_device[dev];
  buf.resize(floats);
  return buf.get();
}

}  // namespace

std::string conv_supports_gpu_unroll_gemm(const ConvShape& s) {
  if (s.C * s.K * s.K > INT_MAX || s.M > INT_MAX / 2)
    return "gpu-unroll-gemm indexes the C*K*K reduction and M with 32-bit integers: C*K*K=" +
           std::to_string(s.C * s.K * s.K) + ", M=" + std::to_string(s.M);
  return {};
}

void conv_fwd_gpu_unroll_gemm(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  const long long Kd = s.C * s.K * s.K, HoWo = s.Ho() * s.Wo(), N = s.B * HoWo;
  long long cols = kMaxUnrolledFloats / Kd;
  if (cols < 1) cols = 1;
  if (cols > N) cols = N;
  float* U = unrolled_buffer(size_t(Kd * cols));
  const int m_tiles = int((s.M + TILE - 1) / TILE);
  for (long long n0 = 0; n0 < N; n0 += cols) {
    const long long nc = N - n0 < cols ? N - n0 : cols;
    const long long total = Kd * nc;
    const long long blocks = (total + 255) / 256;
    conv_unroll_kernel<<<unsigned(blocks < INT_MAX ? blocks : INT_MAX), 256, 0, st>>>(
        x, U, int(s.C), int(s.H), int(s.W), int(s.K), int(s.Wo()), HoWo, n0, nc, total);
    CUDA_CHECK_LAUNCH();
    const long long col_tiles = (nc + TILE - 1) / TILE;  // nc <= 64M: fits gridDim.x
    dim3 grid(unsigned(col_tiles), unsigned(m_tiles < 65535 ? m_tiles : 65535));
    conv_gemm_kernel<<<grid, dim3(TILE, TILE), 0, st>>>(k, U, y, int(s.M), int(Kd), nc, n0, HoWo, m_tiles);
    CUDA_CHECK_LAUNCH();
  }
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-unroll-gemm",
    .step = 3,
    .summary = "explicit unroll (im2col) into a global buffer, then a shared-memory tiled GEMM",
    .launch = conv_fwd_gpu_unroll_gemm,
    .supports = conv_supports_gpu_unroll_gemm,
    .graph_capturable = false,  // the unrolled buffer grows (moves) when a larger layer comes
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
