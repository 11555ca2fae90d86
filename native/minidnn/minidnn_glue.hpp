// What the course's Mini-DNN framework (2020 onward) did around a student's files, shared by minidnn_cpu.cpp,
// minidnn_gpu.cu and the bindings (bindings.hpp). The framework handed the student host arrays of one layer and
// timed the calls; this glue does the same behind the project's registries (cpu-student / gpu-student).
//
// Which interface is compiled comes from minidnn-generation.h, found in the generation folder the build puts on
// the include path (native/minidnn/<generation>/): whether GPUInterface has prolog / kernel / epilog, and whether
// every function takes a stride S.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/conv_shape.hpp"

namespace pyconv {
namespace minidnn {

// Milliseconds per call, in call order (one entry per convolution layer run), until reset.
struct StudentTimes {
  std::vector<double> op_ms;     // CPU: conv_forward_cpu; GPU: conv_forward_gpu alone (the course's Op Time)
  std::vector<double> layer_ms;  // GPU: prolog + conv_forward_gpu + epilog (Layer Time); CPU: as op_ms
};

// A student's convolution on host arrays with a stride, as the framework called it (y[B][M][Ho][Wo] with
// Ho = (H - K) / S + 1). Generations without a stride refuse S != 1.
using HostConvFn = void (*)(float* y, const float* x, const float* k, int B, int M, int C, int H, int W, int K,
                            int S);

// One per module: every file of the module shares it. Empty when the module holds no Mini-DNN student.
struct Slot {
  const char* generation = "";
  HostConvFn conv = nullptr;
  StudentTimes times;
};
// Hidden: with default visibility the static of an inline function is a process-wide unique symbol
// (STB_GNU_UNIQUE), and pyconv._cpu and pyconv._gpu (or two test harnesses) would share one student.
__attribute__((visibility("hidden"))) inline Slot& slot() {
  static Slot s;
  return s;
}

inline int64_t out_size(int64_t in, int64_t K, int64_t S) { return (in - K) / S + 1; }

// The students index with int: refuse what their arithmetic cannot address.
inline std::string why_unsupported(int64_t B, int64_t M, int64_t C, int64_t H, int64_t W, int64_t K, int64_t S) {
  const int64_t limit = int64_t(1) << 31;
  const int64_t ys = B * M * out_size(H, K, S) * out_size(W, K, S);
  if (B * C * H * W >= limit || M * C * K * K >= limit || ys >= limit)
    return "a student's file indexes with 32-bit ints: x, k and y must each hold fewer than 2^31 elements";
  return {};
}
inline std::string why_unsupported(const ConvShape& s) { return why_unsupported(s.B, s.M, s.C, s.H, s.W, s.K, 1); }

// The course's skeleton writes nothing. Its output stays as the glue left it (zeros) although x and k are not
// all zeros: say so in one line instead of letting the layer check report a wrong result.
inline void check_written(const char* variant, const char* function, const char* file, const float* y, size_t ny,
                          const float* x, size_t nx, const float* k, size_t nk) {
  auto all_zero = [](const float* p, size_t n) {
    for (size_t i = 0; i < n; ++i)
      if (p[i] != 0.0f) return false;
    return true;
  };
  if (all_zero(y, ny) && !all_zero(x, nx) && !all_zero(k, nk))
    throw std::runtime_error(std::string(variant) + ": " + function + " wrote nothing to the output (all zeros) " +
                             "from a non-zero input and kernel: is " + file + " still the course's skeleton?");
}

}  // namespace minidnn
}  // namespace pyconv
