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
  CudaError(const std::string& what, cudaError_t c) : std::runtime_error(what), code(c) {}
  // The runtime's error code when one caused this (callers recover from cudaErrorMemoryAllocation only).
  cudaError_t code = cudaErrorUnknown;
};

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  // The runtime also records e as the "last error"; clear it, or the next CUDA_CHECK_LAUNCH would report this
  // failure again against an innocent launch (a sticky error, e.g. an illegal address, stays regardless).
  cudaGetLastError();
  throw CudaError(std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e) + " in `" + expr + "` at " +
                      file + ":" + std::to_string(line),
                  e);
}
[[noreturn]] inline void throw_cublas(cublasStatus_t s, const char* expr, const char* file, int line) {
  throw CudaError(std::string(cublasGetStatusName(s)) + ": " + cublasGetStatusString(s) + " in `" + expr +
                  "` at " + file + ":" + std::to_string(line));
}

// Throws CudaError naming why no GPU can be used (no driver, too old a driver, no device).
inline void require_gpu() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the recorded error so a later call reports afresh
    throw CudaError(std::string("no usable CUDA GPU: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e), e);
  }
  if (n == 0) throw CudaError("no usable CUDA GPU: the driver reports 0 devices", cudaErrorNoDevice);
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
