// Test harness: one folder's Mini-DNN files behind the glue that cpu-student / gpu-student use in the modules
// (native/minidnn/minidnn_cpu.cpp or minidnn_gpu.cu, compiled beside this file), as C functions for ctypes.
// Built by tests/test_minidnn.py, with g++ for the CPU half and nvcc (-x cu) for the GPU half.
#include <cstring>
#include <exception>
#include <stdexcept>

#include "minidnn/minidnn_glue.hpp"

using pyconv::minidnn::slot;

// The student's convolution on host arrays, as the course's framework called it; 0, or 1 with the error in `err`.
extern "C" int pyconv_minidnn_conv(float* y, const float* x, const float* k, int B, int M, int C, int H, int W,
                                   int K, int S, char* err, int err_len) {
  try {
    if (!slot().conv) throw std::logic_error("the glue registered no student");
    slot().conv(y, x, k, B, M, C, H, W, K, S);
    return 0;
  } catch (const std::exception& e) {
    std::strncpy(err, e.what(), size_t(err_len) - 1);
    err[err_len - 1] = '\0';
    return 1;
  }
}

extern "C" const char* pyconv_minidnn_generation() { return slot().generation; }

// The last call's Op Time and Layer Time (ms); -1 before any call.
extern "C" double pyconv_minidnn_last_time(int layer) {
  const auto& v = layer ? slot().times.layer_ms : slot().times.op_ms;
  return v.empty() ? -1.0 : v.back();
}
