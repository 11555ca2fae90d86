// cpu-student for the Mini-DNN editions (2020 onward): the student's conv_forward_cpu (cpu-new-forward.cc,
// compiled unchanged as a source of its own) called as the course's framework called it, and timed: the course's
// CPU "Op Time". Built instead of native/student/student_cpu.cpp when the build names a Mini-DNN edition.
#include <chrono>
#include <cstring>

#include "cpu/runtime/registry.hpp"
#include "minidnn/minidnn_glue.hpp"

#include "cpu-new-forward.h"
#include "minidnn-generation.h"

namespace pyconv {
namespace {

// The course's framework handed over a freshly allocated output; fresh memory is usually zeros, and students who
// accumulated into it without clearing it got away with that. Zeros, then.
void call_student(float* y, const float* x, const float* k, int B, int M, int C, int H, int W, int K, int S) {
#if !PYCONV_MINIDNN_STRIDE
  if (S != 1)
    throw std::invalid_argument(std::string("the ") + PYCONV_MINIDNN_GENERATION + " interface has no stride (S=" +
                                std::to_string(S) + " asked)");
#endif
  const std::string why = minidnn::why_unsupported(B, M, C, H, W, K, S);
  if (!why.empty()) throw std::invalid_argument("cpu-student: " + why);
  const size_t ny = size_t(B) * M * minidnn::out_size(H, K, S) * minidnn::out_size(W, K, S);
  std::memset(y, 0, ny * sizeof(float));
  const auto t0 = std::chrono::steady_clock::now();
#if PYCONV_MINIDNN_STRIDE
  conv_forward_cpu(y, x, k, B, M, C, H, W, K, S);
#else
  conv_forward_cpu(y, x, k, B, M, C, H, W, K);
#endif
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  minidnn::StudentTimes& t = minidnn::slot().times;
  t.op_ms.push_back(ms);
  t.layer_ms.push_back(ms);
  minidnn::check_written("cpu-student", "conv_forward_cpu", "cpu-new-forward.cc", y, ny, x,
                         size_t(B) * C * H * W, k, size_t(M) * C * K * K);
}

void launch(const float* x, const float* k, float* y, const ConvShape& s) {
  call_student(y, x, k, int(s.B), int(s.M), int(s.C), int(s.H), int(s.W), int(s.K), 1);
}

const bool slot_set = [] {
  minidnn::slot().generation = PYCONV_MINIDNN_GENERATION;
  minidnn::slot().conv = call_student;
  return true;
}();

}  // namespace

PYCONV_REGISTER_CPU_CONV(CpuConvVariant{
    .name = "cpu-student",
    .step = 100,  // after every variant of ours
    .summary = "your cpu-new-forward.cc (Mini-DNN " PYCONV_MINIDNN_GENERATION " interface), compiled unchanged",
    .launch = launch,
    .supports = minidnn::why_unsupported,
    .roles = {.m2 = on_request("the student's file: runs only when named with --impl cpu-student")},
});

}  // namespace pyconv
