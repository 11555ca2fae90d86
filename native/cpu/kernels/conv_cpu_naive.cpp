// cpu-naive: the straightforward seven-loop convolution milestone 2 asks for. One thread, no blocking;
// it is the readable statement of the semantics and the slowest thing we measure.
#include "cpu/runtime/registry.hpp"

namespace pyconv {

void conv_fwd_cpu_naive(const float* x, const float* k, float* y, const ConvShape& s) {
  const int64_t Ho = s.Ho(), Wo = s.Wo();
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t m = 0; m < s.M; ++m)
      for (int64_t h = 0; h < Ho; ++h)
        for (int64_t w = 0; w < Wo; ++w) {
          float acc = 0.0f;
          for (int64_t c = 0; c < s.C; ++c)
            for (int64_t p = 0; p < s.K; ++p)
              for (int64_t q = 0; q < s.K; ++q)
                acc += x[((b * s.C + c) * s.H + h + p) * s.W + w + q] * k[((m * s.C + c) * s.K + p) * s.K + q];
          y[((b * s.M + m) * Ho + h) * Wo + w] = acc;
        }
}

// Milestone 2 runs cpu-fast unless asked: this one is the statement of the semantics, kept for comparison.
PYCONV_REGISTER_CPU_CONV(CpuConvVariant{
    .name = "cpu-naive",
    .step = 0,
    .summary = "the course's milestone-2 seven-loop convolution, single thread",
    .rtol = 1e-5,
    .single_thread = true,
    .launch = conv_fwd_cpu_naive,
    .roles = {.m2 = on_request("the course's single-thread seven-loop version: runs only when named with --impl")},
});

}  // namespace pyconv
