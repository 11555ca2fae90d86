// What the course's framework (new-inl.h, NewOp::Forward) did around a student's forward(), for the glue files
// student_cpu.cpp / student_gpu.cu and the tests' harness. Include this, then the student's file, then expand
// PYCONV_STUDENT_BIND_CPU or PYCONV_STUDENT_BIND_GPU (once):
//   - the general template `forward<xpu, DType>(y, x, w)` is declared first, as new-inl.h did, so the student's
//     file may specialise it (forward<gpu, float>) or define it (the 2017 skeletons);
//   - y is zeroed before the call (several solutions accumulate with += or atomicAdd);
//   - the tensors carry a real stream (y.stream_->stream_) and the GPU work is synchronised after the call.
//
// Everything that names M, C, H, W, K or B (ConvShape's fields) is defined here, BEFORE the student's file:
// students #define those letters. After the student's file only the one-line BIND macro is expanded, and it names
// nothing shorter than `forward`. The call into the student goes through a function pointer that BIND sets at
// load time, so nothing here instantiates forward<> before the student's specialisation is seen.
#pragma once
#include <mxnet/base.h>

// What new-inl.h itself included; students' files used these without including them.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/conv_shape.hpp"

namespace mxnet {
namespace op {
template <typename xpu, typename DType>
void forward(mshadow::Tensor<xpu, 4, DType>& y, const mshadow::Tensor<xpu, 4, DType>& x,
             const mshadow::Tensor<xpu, 4, DType>& w);
}  // namespace op
}  // namespace mxnet

namespace pyconv {
namespace student {
// Internal linkage: one glue per module, and a process may load several (the tests load one harness per student
// folder). With external linkage the slot below would be a process-wide "unique" symbol, and the last module
// loaded would bind every module to its student's forward().
namespace {

template <typename Device>
using Forward = void (*)(mshadow::Tensor<Device, 4, float>&, const mshadow::Tensor<Device, 4, float>&,
                         const mshadow::Tensor<Device, 4, float>&);

template <typename Device>
inline Forward<Device>& forward_slot() {
  static Forward<Device> slot = nullptr;
  return slot;
}

template <typename Device>
inline bool bind(Forward<Device> fn) {
  forward_slot<Device>() = fn;
  return true;
}

// The course's index_t is 32-bit and students index with int: refuse what their arithmetic cannot address.
inline std::string why_unsupported(const ConvShape& s) {
  const int64_t limit = int64_t(1) << 31;
  if (s.x_size() >= limit || s.y_size() >= limit || s.k_size() >= limit)
    return "a student's file indexes with 32-bit ints (the course's mshadow::index_t): x, k and y must each hold "
           "fewer than 2^31 elements (" + s.str() + ")";
  return {};
}

template <typename Device>
inline Forward<Device> bound_forward(const char* variant) {
  Forward<Device> fn = forward_slot<Device>();
  if (fn == nullptr)  // a glue file without its BIND line: a build mistake, not the student's
    throw std::logic_error(std::string(variant) + ": the student's forward() was never bound (PYCONV_STUDENT_BIND_* "
                                                  "missing after the student's file)");
  return fn;
}

// The names the out-of-range message uses: the skeleton's parameter names.
template <typename Tensor4>
inline void name_tensors(Tensor4& y, Tensor4& x, Tensor4& k) {
  y.pyconv_name_ = "y";
  x.pyconv_name_ = "x";
  k.pyconv_name_ = "k";
}

// cpu-student: x[B][C][H][W], k[M][C][K][K] and y[B][M][Ho][Wo] are host arrays.
inline void run_cpu(const float* x, const float* k, float* y, const ConvShape& s) {
  Forward<mshadow::cpu> fn = bound_forward<mshadow::cpu>("cpu-student");
  mshadow::Stream<mshadow::cpu> stream;
  using Tensor4 = mshadow::Tensor<mshadow::cpu, 4, float>;
  Tensor4 yt(y, mshadow::Shape4(s.B, s.M, s.Ho(), s.Wo()), &stream);
  Tensor4 xt(const_cast<float*>(x), mshadow::Shape4(s.B, s.C, s.H, s.W), &stream);
  Tensor4 kt(const_cast<float*>(k), mshadow::Shape4(s.M, s.C, s.K, s.K), &stream);
  name_tensors(yt, xt, kt);
  std::memset(y, 0, size_t(s.y_size()) * sizeof(float));
  fn(yt, xt, kt);
}

#ifdef __CUDACC__
// gpu-student: device arrays; the layer's stream is the one the student sees as y.stream_->stream_.
inline void run_gpu(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  Forward<mshadow::gpu> fn = bound_forward<mshadow::gpu>("gpu-student");
  mshadow::Stream<mshadow::gpu> stream;
  stream.stream_ = st;
  using Tensor4 = mshadow::Tensor<mshadow::gpu, 4, float>;
  Tensor4 yt(y, mshadow::Shape4(s.B, s.M, s.Ho(), s.Wo()), &stream);
  Tensor4 xt(const_cast<float*>(x), mshadow::Shape4(s.B, s.C, s.H, s.W), &stream);
  Tensor4 kt(const_cast<float*>(k), mshadow::Shape4(s.M, s.C, s.K, s.K), &stream);
  name_tensors(yt, xt, kt);
  MSHADOW_CUDA_CALL(cudaMemsetAsync(y, 0, size_t(s.y_size()) * sizeof(float), st));
  // Many students launch on the legacy default stream or streams of their own: x (written by the previous layer
  // on `st`) and the zeroed y must be complete before any of them starts, as they were under MXNet.
  MSHADOW_CUDA_CALL(cudaStreamSynchronize(st));
  fn(yt, xt, kt);
  // ... and everything the student queued, on whatever stream, is finished when the layer returns. A failure
  // here is the student's (a bad launch they never checked, a fault in their kernel): say so.
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw ::dmlc::Error(std::string("gpu-student: CUDA reported ") + cudaGetErrorName(e) + " (" +
                        cudaGetErrorString(e) + ") after the student's forward() returned");
  }
}
#endif

}  // namespace
}  // namespace student
}  // namespace pyconv

// Expanded once, AFTER the student's file: binds forward<cpu|gpu, float> (the student's specialisation, or their
// general template instantiated for float) at load time.
#define PYCONV_STUDENT_BIND_CPU \
  static const bool pyconv_student_cpu_bound_ = ::pyconv::student::bind<::mshadow::cpu>(&::mxnet::op::forward<::mshadow::cpu, float>)
#define PYCONV_STUDENT_BIND_GPU \
  static const bool pyconv_student_gpu_bound_ = ::pyconv::student::bind<::mshadow::gpu>(&::mxnet::op::forward<::mshadow::gpu, float>)
