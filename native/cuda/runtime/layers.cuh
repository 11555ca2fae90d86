// The network's small layers on the GPU, shared by every convolution variant: uint8 -> float32 input
// conversion, activations, pooling, the fully connected layer (cuBLAS), argmax. All work is queued on the given
// stream and every launch is checked; nothing synchronises.
#pragma once
#include <cublas_v2.h>
#include <cuda_fp16.h>
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
// run past the edge are dropped), max or average over the kernel x kernel window. act (max only): applied to each
// window's max, which equals the max of the activated window for tanh, relu and sigmoid (monotonic), with one
// activation per output: an activation layer before a max-pool runs here instead of over the whole input.
void pool2d(const float* x, float* y, int64_t planes, int H, int W, int kernel, int stride, bool max_mode,
            cudaStream_t st, Activation act = Activation::None);

// How the fully connected layers multiply. FP32: cublasSgemm, exact float32 products. TF32: the tensor cores
// (CUBLAS_COMPUTE_32F_FAST_TF32): operands rounded to 10 mantissa bits, products summed in float32. Measured on
// an H200 for the sp19 FC1 (10000 x 5184 -> 140): 0.53 ms FP32, 0.13 ms TF32; the labels of every shipped model
// and of the course checkpoint did not change (`invoke bench --end-to-end` counts the images that differ).
// FP16: operands in half (round to nearest: TF32's 10 mantissa bits, FP16's narrower range), products summed in
// float32 (cublasGemmEx, CUBLAS_COMPUTE_32F). The input arrives in half from a conv variant that writes it
// (launch_f16_out, registry.cuh), else one kernel rounds it (f32_to_f16). sp19's FC1 on an H200, per 2500-row part
// of the pipeline (the CUPTI traces of one pinned call in the end-to-end bench files): 30-34 us in TF32
// (results/bench-e2e-nvidia-h200-2026-11-24-sp19-trace2.json), 17 us in FP16 with the width padded (fc16_rows,
// -sp19-fc16-4x4.json); the labels of every shipped model and the course checkpoint stayed PyTorch's.
enum class FcMath { FP32, TF32, FP16 };
FcMath fc_math_from_name(const std::string& name);  // "fp32" | "tf32" | "fp16"; else invalid_argument
const char* fc_math_name(FcMath m);

// The rows of an FP16 weight matrix [out][in] as the network stores it: out rounded up to a multiple of 64, the
// extra rows zero. cuBLAS's FP16 GEMM picks a slow kernel at sp19's out = 140: timed with torch.matmul on an H200
// (10000 x 5184 -> out), 0.108 ms at 140, 0.048 at 144, 0.036 at 192 (TF32: 0.10 at each). The GEMM feeding the
// head computes all the padded columns, and the head reads the first `out` of each row.
inline int64_t fc16_rows(int64_t out) { return (out + 63) / 64 * 64; }

// out[i] = half(in[i]), round to nearest.
void f32_to_f16(const float* in, __half* out, size_t n, cudaStream_t st);

// y[rows][out] = act(x[rows][in] W^T + b), W[out][in] row-major, through cuBLAS (the handle is bound to `st`
// here) followed by one bias + activation kernel.
void fully_connected(cublasHandle_t h, const float* x, const float* w, const float* b, float* y, int64_t rows,
                     int64_t in, int64_t out, Activation act, FcMath math, cudaStream_t st);

// y[rows][out] = x[rows][in] W^T without bias or activation: the GEMM half of fully_connected (the head below
// adds both).
void fc_gemm(cublasHandle_t h, const float* x, const float* w, float* y, int64_t rows, int64_t in, int64_t out,
             FcMath math, cudaStream_t st);

// FcMath::FP16: y[rows][ldy] (the first `out` columns written) = x[rows][in] W^T in float32, x and W[out][in] in
// half.
void fc_gemm_f16(cublasHandle_t h, const __half* x, const __half* w, float* y, int64_t rows, int64_t in,
                 int64_t out, int64_t ldy, cudaStream_t st);
// fully_connected with fc_gemm_f16 (y dense, [rows][out]).
void fully_connected_f16(cublasHandle_t h, const __half* x, const __half* w, const float* b, float* y, int64_t rows,
                         int64_t in, int64_t out, Activation act, cudaStream_t st);

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
// ldh: the stride of h's rows (>= hidden: the padded width of an FP16 GEMM's output, fc16_rows).
void fc_head(const float* h, int64_t ldh, const float* b1, Activation act, const float* w2, const float* b2,
             float* logits, int32_t* labels, int64_t rows, int64_t hidden, int64_t classes, cudaStream_t st);

}  // namespace pyconv
