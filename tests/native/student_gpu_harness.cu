// Test harness: one folder's new-forward.cuh behind the same glue as the gpu-student variant (student_glue.hpp),
// exposed through a C function for ctypes (host arrays in and out). Built by tests/test_student.py with nvcc and
// -I <the folder>. The layer runs on a non-blocking stream, as the GPU engine's are: students who launch on the
// legacy default stream must still see x and the zeroed y complete.
#include <cuda_runtime.h>

#include <cstring>
#include <exception>
#include <string>

#include "student/student_glue.hpp"

namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
}  // namespace

extern "C" int pyconv_student_gpu(const float* x, const float* k, float* y, long long B, long long C, long long H,
                                  long long W, long long M, long long K, char* err, int err_len) {
  float *dx = nullptr, *dk = nullptr, *dy = nullptr;
  cudaStream_t st = nullptr;
  int rc = 0;
  try {
    const pyconv::ConvShape s = pyconv::make_conv_shape(B, C, H, W, M, C, K, K);
    const std::string why = pyconv::student::why_unsupported(s);
    if (!why.empty()) throw std::invalid_argument(why);
    check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaMalloc(&dx, s.x_size() * sizeof(float)), "cudaMalloc x");
    check(cudaMalloc(&dk, s.k_size() * sizeof(float)), "cudaMalloc k");
    check(cudaMalloc(&dy, s.y_size() * sizeof(float)), "cudaMalloc y");
    check(cudaMemcpy(dx, x, s.x_size() * sizeof(float), cudaMemcpyHostToDevice), "copy x");
    check(cudaMemcpy(dk, k, s.k_size() * sizeof(float), cudaMemcpyHostToDevice), "copy k");
    check(cudaMemcpy(dy, y, s.y_size() * sizeof(float), cudaMemcpyHostToDevice), "copy y (the caller's poison)");
    pyconv::student::run_gpu(dx, dk, dy, s, st);
    check(cudaMemcpy(y, dy, s.y_size() * sizeof(float), cudaMemcpyDeviceToHost), "copy y back");
  } catch (const std::exception& e) {
    std::strncpy(err, e.what(), size_t(err_len) - 1);
    err[err_len - 1] = '\0';
    rc = 1;
  }
  cudaFree(dx);
  cudaFree(dk);
  cudaFree(dy);
  if (st) cudaStreamDestroy(st);
  return rc;
}

#include <new-forward.cuh>
PYCONV_STUDENT_BIND_GPU;
