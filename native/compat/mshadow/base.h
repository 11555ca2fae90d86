// mshadow's basics as the course's student files use them (MXNet 1.x's mshadow), written for this project:
// the cpu/gpu device tags, index_t, Shape<N> with Shape1..Shape5, Stream<gpu> holding a real cudaStream_t,
// MSHADOW_CUDA_CALL and the MSHADOW_*INLINE qualifiers. Only what students' files were seen to use; no
// expression templates (no finished solution in the survey used them).
#ifndef MSHADOW_BASE_H_
#define MSHADOW_BASE_H_
#if defined(__GNUC__)
#pragma GCC system_header
#endif

#include <cstddef>
#include <cstdint>
#include <ostream>

#include "dmlc/logging.h"

#ifdef __CUDACC__
#include <cuda_runtime.h>
#define MSHADOW_USE_CUDA 1
#define MSHADOW_XINLINE inline __attribute__((always_inline)) __device__ __host__
#else
#define MSHADOW_USE_CUDA 0
#define MSHADOW_XINLINE inline __attribute__((always_inline))
#endif
#define MSHADOW_CINLINE inline __attribute__((always_inline))
#define MSHADOW_FORCE_INLINE inline __attribute__((always_inline))
#define MSHADOW_ALLOC_PAD true
#define MSHADOW_DEFAULT_DTYPE float

namespace mshadow {

// MXNet 1.x before its large-tensor option (the course's build): 32-bit unsigned. Students write
// `const int B = x.shape_[0];` and compare shapes with ints; both behave as they did then.
typedef unsigned index_t;
typedef float default_real_t;

struct cpu {
  static const bool kDevCPU = true;
  static const int kDevMask = 1 << 0;
};
struct gpu {
  static const bool kDevCPU = false;
  static const int kDevMask = 1 << 1;
};

template <int dimension>
struct Shape {
  static const int kDimension = dimension;
  static const int kSubdim = dimension - 1;
  index_t shape_[kDimension];

  MSHADOW_XINLINE Shape() {}
  MSHADOW_XINLINE index_t& operator[](int idx) { return shape_[idx]; }
  MSHADOW_XINLINE const index_t& operator[](int idx) const { return shape_[idx]; }
  MSHADOW_XINLINE bool operator==(const Shape<kDimension>& s) const {
    for (int i = 0; i < kDimension; ++i)
      if (s.shape_[i] != shape_[i]) return false;
    return true;
  }
  MSHADOW_XINLINE bool operator!=(const Shape<kDimension>& s) const { return !(*this == s); }
  MSHADOW_XINLINE index_t Size() const {
    index_t size = shape_[0];
    for (int i = 1; i < kDimension; ++i) size *= shape_[i];
    return size;
  }
  // Product of shape_[dimstart, dimend).
  MSHADOW_XINLINE index_t ProdShape(int dimstart, int dimend) const {
    index_t num = 1;
    for (int i = dimstart; i < dimend; ++i) num *= shape_[i];
    return num;
  }
  MSHADOW_XINLINE Shape<kSubdim> SubShape() const {
    Shape<kSubdim> s;
    for (int i = 0; i < kSubdim; ++i) s.shape_[i] = shape_[i + 1];
    return s;
  }
  MSHADOW_XINLINE Shape<2> FlatTo2D() const {
    Shape<2> s;
    s.shape_[1] = shape_[kDimension - 1];
    index_t ymax = 1;
    for (int i = 0; i < kDimension - 1; ++i) ymax *= shape_[i];
    s.shape_[0] = ymax;
    return s;
  }
};

template <int ndim>
inline std::ostream& operator<<(std::ostream& os, const Shape<ndim>& shape) {
  os << '(';
  for (int i = 0; i < ndim; ++i) os << (i ? "," : "") << shape[i];
  if (ndim == 1) os << ',';
  return os << ')';
}

MSHADOW_XINLINE Shape<1> Shape1(index_t s0) {
  Shape<1> s;
  s[0] = s0;
  return s;
}
MSHADOW_XINLINE Shape<2> Shape2(index_t s0, index_t s1) {
  Shape<2> s;
  s[0] = s0; s[1] = s1;
  return s;
}
MSHADOW_XINLINE Shape<3> Shape3(index_t s0, index_t s1, index_t s2) {
  Shape<3> s;
  s[0] = s0; s[1] = s1; s[2] = s2;
  return s;
}
MSHADOW_XINLINE Shape<4> Shape4(index_t s0, index_t s1, index_t s2, index_t s3) {
  Shape<4> s;
  s[0] = s0; s[1] = s1; s[2] = s2; s[3] = s3;
  return s;
}
MSHADOW_XINLINE Shape<5> Shape5(index_t s0, index_t s1, index_t s2, index_t s3, index_t s4) {
  Shape<5> s;
  s[0] = s0; s[1] = s1; s[2] = s2; s[3] = s3; s[4] = s4;
  return s;
}

// The stream the framework hands a student: y.stream_->stream_ is the real CUDA stream the layer runs on.
template <typename Device>
struct Stream;
template <>
struct Stream<cpu> {
  void Wait() {}
};
#ifdef __CUDACC__
template <>
struct Stream<gpu> {
  cudaStream_t stream_ = nullptr;
  static cudaStream_t GetStream(Stream<gpu>* stream) { return stream != nullptr ? stream->stream_ : nullptr; }
  void Wait();  // defined after MSHADOW_CUDA_CALL below
};

namespace cuda {
const int kBaseThreadBits = 8;
const int kBaseThreadNum = 1 << kBaseThreadBits;
const int kMaxGridNum = 65535;
const int kMaxGridDim = 65535;
const int kWarpSize = 32;
}  // namespace cuda
#endif

namespace expr {}  // students wrote `using namespace mshadow::expr;` from the examples

}  // namespace mshadow

#ifdef __CUDACC__
// As mshadow: a brace block (a student's `MSHADOW_CUDA_CALL(f)` without a semicolon still compiles). The error is
// cleared so the next check reports afresh (a sticky error, e.g. an illegal address, stays regardless).
#define MSHADOW_CUDA_CALL(pyconv_func)                                                                     \
  {                                                                                                        \
    cudaError_t pyconv_cuda_status_ = (pyconv_func);                                                      \
    if (pyconv_cuda_status_ != cudaSuccess) {                                                              \
      cudaGetLastError();                                                                                  \
      ::dmlc::logging_detail::FatalMessage(                                                                \
          __FILE__, __LINE__,                                                                              \
          std::string("CUDA: ") + cudaGetErrorName(pyconv_cuda_status_) + ": " +                         \
              cudaGetErrorString(pyconv_cuda_status_) + " in `" #pyconv_func "`");                         \
    }                                                                                                      \
  }

inline void mshadow::Stream<mshadow::gpu>::Wait() { MSHADOW_CUDA_CALL(cudaStreamSynchronize(stream_)); }
#endif

#endif  // MSHADOW_BASE_H_
