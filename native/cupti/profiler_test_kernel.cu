// The known workload of the profiler's own test: a named kernel launched a known number of times, so the test
// can check that the trace counts every launch and demangles the name. Not a convolution; never used for one.
#include <cuda_runtime.h>

#include <string>

#include "cupti/activity_trace.hpp"

// Global namespace, C++ linkage: CUPTI reports the mangled `_Z27pyconv_profiler_test_kernelPy`, the trace
// must turn it into `pyconv_profiler_test_kernel(unsigned long long*)`.
__global__ void pyconv_profiler_test_kernel(unsigned long long* counter) {
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(counter, 1ULL);
}

namespace pyconv {
namespace {

void check(cudaError_t e, const char* expr) {
  if (e != cudaSuccess)
    throw CuptiError(std::string("CUDA error ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + " in `" +
                     expr + "`");
}
#define TEST_CUDA_CHECK(expr) check((expr), #expr)

}  // namespace

long long launch_profiler_test_kernel(int n_launches) {
  if (n_launches < 0) throw std::invalid_argument("n_launches must be >= 0, got " + std::to_string(n_launches));
  unsigned long long* d_counter = nullptr;
  TEST_CUDA_CHECK(cudaMalloc(&d_counter, sizeof(unsigned long long)));
  unsigned long long count = 0;
  try {
    TEST_CUDA_CHECK(cudaMemset(d_counter, 0, sizeof(unsigned long long)));
    for (int i = 0; i < n_launches; ++i) {
      pyconv_profiler_test_kernel<<<1, 32>>>(d_counter);
      TEST_CUDA_CHECK(cudaGetLastError());
    }
    TEST_CUDA_CHECK(cudaDeviceSynchronize());
    TEST_CUDA_CHECK(cudaMemcpy(&count, d_counter, sizeof(count), cudaMemcpyDeviceToHost));
  } catch (...) {
    cudaFree(d_counter);
    throw;
  }
  TEST_CUDA_CHECK(cudaFree(d_counter));
  return static_cast<long long>(count);
}

}  // namespace pyconv
