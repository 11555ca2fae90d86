// The network's small layers on the GPU, shared by every convolution variant: uint8 -> float32 input
// conversion, activations, pooling, the fully connected layer (cuBLAS), argmax. All work is queued on the given
// stream and every launch is checked; nothing synchronises.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "cuda/runtime/cuda_check.cuh"

namespace pyconv {

enum class Activation { None, Tanh, Relu, Sigmoid };
Activation activation_from_name(const std::string& name);  // "tanh" | "relu" | "sigmoid"; else invalid_argument

// Owns one cuBLAS handle, kept in pure FP32: CUBLAS_DEFAULT_MATH never takes the TF32 path on its own (it would
// round the FC inputs to 10 mantissa bits and the GPU's predictions could drift from the CPU engine's). TF32 is
// asked for explicitly, per call, with FcMath::TF32.
class CublasHandle {
 public:
  CublasHandle() {
    CUBLAS_CHECK(cublasCreate(&h_));
    CUBLAS_CHECK(cublasSetMathMode(h_, CUBLAS_DEFAULT_MATH));
  }
  ~CublasHandle() { if (h_) cublasDestroy(h_); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  CublasHandle(CublasHandle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

// out[i] = float(in[i]): images travel to the device as uint8 (4x fewer bytes) and widen there.
void u8_to_f32(const uint8_t* in, float* out, size_t n, cudaStream_t st);

// x[i] = act(x[i]) in place.
void activation_inplace(float* x, size_t n, Activation a, cudaStream_t st);

// Pooling of x[planes][H][W] into y[planes][Ho][Wo], Ho = (H - kernel) / stride + 1 (floor mode: windows that
// run past the edge are dropped), max or average over the kernel x kernel window.
void pool2d(const float* x, float* y, int64_t planes, int H, int W, int kernel, int stride, bool max_mode,
            cudaStream_t st);

// How the fully connected layers multiply. FP32: cublasSgemm, exact float32 products. TF32: the tensor cores
// (CUBLAS_COMPUTE_32F_FAST_TF32): operands rounded to 10 mantissa bits, products summed in float32. Measured on
// an H200 for the sp19 FC1 (10000 x 5184 -> 140): 0.53 ms FP32, 0.13 ms TF32; the labels of every shipped model
// and of the course checkpoint did not change (`invoke bench --end-to-end` counts the images that differ).
enum class FcMath { FP32, TF32 };
FcMath fc_math_from_name(const std::string& name);  // "fp32" | "tf32"; else invalid_argument

// y[rows][out] = act(x[rows][in] W^T + b), W[out][in] row-major, through cuBLAS (the handle is bound to `st`
// here) followed by one bias + activation kernel.
void fully_connected(cublasHandle_t h, const float* x, const float* w, const float* b, float* y, int64_t rows,
                     int64_t in, int64_t out, Activation act, FcMath math, cudaStream_t st);

// y[rows][out] = x[rows][in] W^T without bias or activation: the GEMM half of fully_connected (the head below
// adds both).
void fc_gemm(cublasHandle_t h, const float* x, const float* w, float* y, int64_t rows, int64_t in, int64_t out,
             FcMath math, cudaStream_t st);

// labels[r] = the first index of the largest value of x[r][0..cols) (numpy's argmax: a NaN counts as largest).
void argmax_rows(const float* x, int32_t* labels, int64_t rows, int64_t cols, cudaStream_t st);

// A network's head in one kernel: for each row r of h[rows][hidden] (a fully connected layer's output before its
// bias), a = act(h[r] + b1), logits[r] = W2[classes][hidden] a + b2 (float32 products, exact FP32 arithmetic
// whatever FcMath the GEMM before used), labels[r] = argmax as argmax_rows. Replaces a bias + activation kernel,
// a small GEMM, a bias kernel and argmax: four dependent launches per batch (chunk) become one. Sizes it takes:
// fits_head (W2 in 32 KB of shared memory, a in at most 32 registers per lane).
constexpr int64_t kHeadMaxHidden = 1024, kHeadMaxClasses = 32, kHeadMaxWeights = 8192;
inline bool fits_head(int64_t hidden, int64_t classes) {
  return hidden >= 1 && hidden <= kHeadMaxHidden && classes >= 1 && classes <= kHeadMaxClasses &&
         hidden * classes <= kHeadMaxWeights;
}
void fc_head(const float* h, const float* b1, Activation act, const float* w2, const float* b2, float* logits,
             int32_t* labels, int64_t rows, int64_t hidden, int64_t classes, cudaStream_t st);

}  // namespace pyconv
