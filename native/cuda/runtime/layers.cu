#include <stdexcept>

#include "cuda/runtime/layers.cuh"

namespace pyconv {
namespace {

constexpr int THREADS = 256;

// Grid for an element-wise grid-stride loop: enough blocks to fill any current GPU, never more than needed.
unsigned blocks_for(size_t n) {
  const size_t b = (n + THREADS - 1) / THREADS;
  return unsigned(b < 65536 ? (b ? b : 1) : 65536);
}

__global__ void u8_to_f32_kernel(const uint8_t* __restrict__ in, float* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = float(in[i]);
}

__device__ __forceinline__ float activate(float v, Activation a) {
  switch (a) {
    case Activation::Tanh: return tanhf(v);
    case Activation::Relu: return fmaxf(v, 0.0f);
    case Activation::Sigmoid: return 1.0f / (1.0f + expf(-v));
    default: return v;
  }
}

__global__ void activation_kernel(float* x, size_t n, Activation a) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] = activate(x[i], a);
}

// One thread per output element; the window lies wholly inside the input by construction of Ho, Wo.
__global__ void pool2d_kernel(const float* __restrict__ x, float* __restrict__ y, size_t total, int H, int W,
                              int Ho, int Wo, int kernel, int stride, bool max_mode) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const int wo = int(i % Wo);
    const int ho = int((i / Wo) % Ho);
    const size_t plane = i / (size_t(Wo) * Ho);
    const float* src = x + (plane * H + size_t(ho) * stride) * W + size_t(wo) * stride;
    float acc = max_mode ? src[0] : 0.0f;
    for (int p = 0; p < kernel; ++p)
      for (int q = 0; q < kernel; ++q) {
        const float v = src[p * W + q];
        if (max_mode) {
          // NaN propagates as in numpy's max
          acc = (v > acc || v != v) && acc == acc ? v : acc;
        } else {
          acc += v;
        }
      }
    y[i] = max_mode ? acc : acc / float(kernel * kernel);
  }
}

__global__ void bias_activation_kernel(float* y, const float* __restrict__ b, size_t total, int64_t cols,
                                       Activation a) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x)
    y[i] = activate(y[i] + b[i % cols], a);
}

__global__ void argmax_rows_kernel(const float* __restrict__ x, int32_t* __restrict__ labels, int64_t rows,
                                   int64_t cols) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x) {
    const float* row = x + r * cols;
    int64_t best = 0;
    float bv = row[0];
    for (int64_t c = 1; c < cols && bv == bv; ++c) {
      const float v = row[c];
      if (v > bv || v != v) {
        bv = v;
        best = c;
      }
    }
    labels[r] = int32_t(best);
  }
}

}  // namespace

Activation activation_from_name(const std::string& name) {
  if (name == "tanh") return Activation::Tanh;
  if (name == "relu") return Activation::Relu;
  if (name == "sigmoid") return Activation::Sigmoid;
  throw std::invalid_argument("unknown activation '" + name + "' (known: tanh, relu, sigmoid)");
}

FcMath fc_math_from_name(const std::string& name) {
  if (name == "fp32") return FcMath::FP32;
  if (name == "tf32") return FcMath::TF32;
  throw std::invalid_argument("unknown FC math '" + name + "' (known: fp32, tf32)");
}

void u8_to_f32(const uint8_t* in, float* out, size_t n, cudaStream_t st) {
  if (!n) return;
  u8_to_f32_kernel<<<blocks_for(n), THREADS, 0, st>>>(in, out, n);
  CUDA_CHECK_LAUNCH();
}

void activation_inplace(float* x, size_t n, Activation a, cudaStream_t st) {
  if (!n || a == Activation::None) return;
  activation_kernel<<<blocks_for(n), THREADS, 0, st>>>(x, n, a);
  CUDA_CHECK_LAUNCH();
}

void pool2d(const float* x, float* y, int64_t planes, int H, int W, int kernel, int stride, bool max_mode,
            cudaStream_t st) {
  if (kernel < 1 || stride < 1 || kernel > H || kernel > W)
    throw std::invalid_argument("pool2d: need 1 <= kernel <= H, W and stride >= 1 (kernel " +
                                std::to_string(kernel) + ", stride " + std::to_string(stride) + ", input " +
                                std::to_string(H) + "x" + std::to_string(W) + ")");
  const int Ho = (H - kernel) / stride + 1, Wo = (W - kernel) / stride + 1;
  const size_t total = size_t(planes) * Ho * Wo;
  if (!total) return;
  pool2d_kernel<<<blocks_for(total), THREADS, 0, st>>>(x, y, total, H, W, Ho, Wo, kernel, stride, max_mode);
  CUDA_CHECK_LAUNCH();
}

void fully_connected(cublasHandle_t h, const float* x, const float* w, const float* b, float* y, int64_t rows,
                     int64_t in, int64_t out, Activation act, FcMath math, cudaStream_t st) {
  if (rows <= 0) return;
  if (rows > INT32_MAX || in > INT32_MAX || out > INT32_MAX)
    throw std::invalid_argument("fully_connected: dimensions beyond 2^31 are not supported by cuBLAS");
  // Row-major trick: cuBLAS is column-major, and a row-major [r][c] matrix is a column-major [c][r] one. So
  // y^T[out][rows] = W[out][in] . x^T[in][rows], i.e. C = op(A) B with A = W stored column-major as [in][out]
  // (lda = in, transposed), B = x stored column-major as [in][rows] (ldb = in), C = y as [out][rows] (ldc = out).
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_CHECK(cublasSetStream(h, st));
  if (math == FcMath::TF32)
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(out), int(rows), int(in), &one, w, CUDA_R_32F, int(in),
                              x, CUDA_R_32F, int(in), &zero, y, CUDA_R_32F, int(out), CUBLAS_COMPUTE_32F_FAST_TF32,
                              CUBLAS_GEMM_DEFAULT));
  else
    CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, int(out), int(rows), int(in), &one, w, int(in), x,
                             int(in), &zero, y, int(out)));
  const size_t total = size_t(rows) * size_t(out);
  bias_activation_kernel<<<blocks_for(total), THREADS, 0, st>>>(y, b, total, out, act);
  CUDA_CHECK_LAUNCH();
}

void argmax_rows(const float* x, int32_t* labels, int64_t rows, int64_t cols, cudaStream_t st) {
  if (rows <= 0) return;
  if (cols < 1) throw std::invalid_argument("argmax_rows: need at least one column");
  argmax_rows_kernel<<<blocks_for(size_t(rows)), THREADS, 0, st>>>(x, labels, rows, cols);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pyconv
