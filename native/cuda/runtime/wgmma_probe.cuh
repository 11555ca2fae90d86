// Whether the code that runs is the sm_90a code of the file that includes this header. Hopper's warpgroup MMA
// (wgmma) exists only in sm_90a code; CMakeLists.txt compiles files named *_wgmma.cu for sm_90a besides the
// build's architectures, and the driver picks which of them runs. So a variant in such a file asks, once per
// device, before it accepts a shape. Each including file gets its own probe kernel (an unnamed namespace): it
// answers for that file's own code.
#pragma once
#include <cuda_runtime.h>

#include <mutex>
#include <string>
#include <vector>

#include "cuda/runtime/cuda_check.cuh"

namespace pyconv::wgmma {
namespace {

// 1 where the code that runs was compiled for sm_90a, else 0.
__global__ void runs_sm90a(int* flag) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *flag = 1;
#else
  *flag = 0;
#endif
}

// "" when the current device runs this file's sm_90a code, else `variant`: why not.
std::string unavailable(const char* variant) {
  static std::mutex mu;
  static std::vector<int> known;  // per device: -1 not asked, 0 no, 1 yes
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return std::string(variant) + ": no CUDA device";
  }
  std::lock_guard<std::mutex> lock(mu);
  if (known.size() <= size_t(dev)) known.resize(dev + 1, -1);
  if (known[dev] < 0) {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    int yes = 0;
    if (prop.major == 9 && prop.minor == 0) {
      int* flag = nullptr;
      CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
      runs_sm90a<<<1, 1>>>(flag);
      const cudaError_t launched = cudaGetLastError();
      if (launched == cudaSuccess) CUDA_CHECK(cudaMemcpy(&yes, flag, sizeof(int), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaFree(flag));
    }
    known[dev] = yes;
  }
  return known[dev] ? "" : std::string(variant) + ": needs a GPU of compute capability 9.0 and this build's sm_90a "
                                                  "code (wgmma)";
}

}  // namespace
}  // namespace pyconv::wgmma
