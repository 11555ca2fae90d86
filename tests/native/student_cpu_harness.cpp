// Test harness: one folder's new-forward.h behind the same glue as the cpu-student variant (student_glue.hpp),
// exposed through a C function for ctypes. Built by tests/test_student.py with -I <the folder>.
#include <cstring>
#include <exception>

#include "student/student_glue.hpp"

// Defined before the student's file (which may #define B, C, H, W, M or K).
extern "C" int pyconv_student_cpu(const float* x, const float* k, float* y, long long B, long long C, long long H,
                                  long long W, long long M, long long K, char* err, int err_len) {
  try {
    const pyconv::ConvShape s = pyconv::make_conv_shape(B, C, H, W, M, C, K, K);
    const std::string why = pyconv::student::why_unsupported(s);
    if (!why.empty()) throw std::invalid_argument(why);
    pyconv::student::run_cpu(x, k, y, s);
    return 0;
  } catch (const std::exception& e) {
    std::strncpy(err, e.what(), size_t(err_len) - 1);
    err[err_len - 1] = '\0';
    return 1;
  }
}

#include <new-forward.h>
PYCONV_STUDENT_BIND_CPU;
