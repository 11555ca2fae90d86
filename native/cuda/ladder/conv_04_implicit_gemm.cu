// Step 4 -- gpu-implicit-gemm: step 3's matrix multiply with the unroll fused into it. The B-operand tile
// (16 rows of the C*K*K reduction x 16 output pixels) is gathered from x straight into shared memory, so the
// unrolled matrix never exists in global memory and there is no second kernel or buffer.
// Why: step 3 moves K*K times the input through DRAM twice; here the K*K-fold reuse is served from L1/L2.
// Measured: results/bench-nvidia-h200-2026-11-22.json (`invoke bench`, NVIDIA H200, batch 10000,
// median of 20): this step's row per course layer, cuDNN's beside it.
// Predicted before measuring, batch 10000: sp19 conv1 ~0.6-0.9 ms, conv2 ~0.8-1.2 ms (the 16x16 one-output-
// per-thread GEMM does 2 shared loads per FMA, so it is shared-memory bound near 10-15 TFLOP/s).
#include <climits>
#include <string>

#include "cuda/runtime/registry.cuh"
#include "cuda/runtime/cuda_check.cuh"

namespace pyconv {
namespace {

constexpr int TILE = 16;

// Column n = b*Ho*Wo + h*Wo + w of the implicit matrix U[C*K*K][B*Ho*Wo]; row kk = (c*K + p)*K + q.
// Each thread loads the column of Bs it also computes, so its column's base offset in x is computed once.
__global__ void conv_fwd_gpu_implicit_gemm_kernel(const float* x, const float* A, float* y, int C, int H, int W,
                                                  int M, int K, int Wo, long long HoWo, long long N, int Kd,
                                                  long long n_tiles, int m_tiles) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int KK = K * K;
  for (long long nt = blockIdx.x; nt < n_tiles; nt += gridDim.x) {  // block-uniform bounds: barriers are safe
    const long long col = nt * TILE + tx;
    const bool col_ok = col < N;
    long long b = 0, base = 0;
    if (col_ok) {
      b = col / HoWo;
      const int pix = int(col % HoWo);
      base = b * C * H * W + (long long)(pix / Wo) * W + pix % Wo;  // &x[b][0][h][w]
    }
    for (int mt = blockIdx.y; mt < m_tiles; mt += gridDim.y) {
      const int row = mt * TILE + ty;
      float acc = 0.0f;
      for (int k0 = 0; k0 < Kd; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < Kd) ? A[size_t(row) * Kd + k0 + tx] : 0.0f;
        const int kk = k0 + ty;
        float v = 0.0f;
        if (col_ok && kk < Kd) {
          const int c = kk / KK, p = (kk % KK) / K, q = kk % K;
          v = x[base + (long long)c * H * W + p * W + q];
        }
        Bs[ty][tx] = v;
        __syncthreads();
#pragma unroll
        for (int i = 0; i < TILE; ++i) acc += As[ty][i] * Bs[i][tx];
        __syncthreads();  // tiles fully read before the next iteration overwrites them
      }
      if (row < M && col_ok) y[(b * M + row) * HoWo + col % HoWo] = acc;
    }
  }
}

}  // namespace

std::string conv_supports_gpu_implicit_gemm(const ConvShape& s) {
  if (s.C * s.K * s.K > INT_MAX || s.M > INT_MAX / 2)
    return "gpu-implicit-gemm indexes the C*K*K reduction and M with 32-bit integers: C*K*K=" +
           std::to_string(s.C * s.K * s.K) + ", M=" + std::to_string(s.M);
  return {};
}

void conv_fwd_gpu_implicit_gemm(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  const long long HoWo = s.Ho() * s.Wo(), N = s.B * HoWo;
  const long long n_tiles = (N + TILE - 1) / TILE;
  const int m_tiles = int((s.M + TILE - 1) / TILE);
  dim3 grid(unsigned(n_tiles < INT_MAX ? n_tiles : INT_MAX), unsigned(m_tiles < 65535 ? m_tiles : 65535));
  conv_fwd_gpu_implicit_gemm_kernel<<<grid, dim3(TILE, TILE), 0, st>>>(
      x, k, y, int(s.C), int(s.H), int(s.W), int(s.M), int(s.K), int(s.Wo()), HoWo, N, int(s.C * s.K * s.K),
      n_tiles, m_tiles);
  CUDA_CHECK_LAUNCH();
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-implicit-gemm",
    .step = 4,
    .summary = "GEMM whose input tile is gathered from x on the fly (no unrolled matrix)",
    .launch = conv_fwd_gpu_implicit_gemm,
    .supports = conv_supports_gpu_implicit_gemm,
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
