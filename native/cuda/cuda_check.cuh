// Every CUDA runtime call, cuBLAS call and kernel launch goes through these: a failure becomes a C++ exception
// carrying the error name, the message and the call site (pybind11 turns it into pyconv._gpu.CudaError).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace pyconv {

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  throw CudaError(std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e) + " in `" + expr + "` at " +
                  file + ":" + std::to_string(line));
}
[[noreturn]] inline void throw_cublas(cublasStatus_t s, const char* expr, const char* file, int line) {
  throw CudaError(std::string(cublasGetStatusName(s)) + ": " + cublasGetStatusString(s) + " in `" + expr +
                  "` at " + file + ":" + std::to_string(line));
}

}  // namespace pyconv

#define CUDA_CHECK(expr)                                                              \
  do {                                                                                \
    cudaError_t pyconv_err_ = (expr);                                                 \
    if (pyconv_err_ != cudaSuccess) ::pyconv::throw_cuda(pyconv_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// After every <<<...>>>: launch-configuration errors surface here, asynchronous faults at the next sync.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(expr)                                                              \
  do {                                                                                  \
    cublasStatus_t pyconv_st_ = (expr);                                                 \
    if (pyconv_st_ != CUBLAS_STATUS_SUCCESS) ::pyconv::throw_cublas(pyconv_st_, #expr, __FILE__, __LINE__); \
  } while (0)
