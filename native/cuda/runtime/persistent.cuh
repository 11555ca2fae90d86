// Persistent blocks (steps 20-23): a kernel whose blocks each walk work items blockIdx.x, +gridDim.x, ... is
// launched with as many blocks as fit on the GPU at once, so each block sets up its tables (weight fragments, tap
// offsets) once and its copy ring always has a next item to fetch.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "cuda/runtime/cuda_check.cuh"

namespace pyconv {

// Opts `kernel` in to `smem` bytes of dynamic shared memory and returns how many of its blocks of `threads` fit on
// the current GPU at once (SMs x blocks per SM); throws std::invalid_argument, naming `variant`, when none fits.
template <typename Kernel>
long long persistent_blocks(const char* variant, Kernel kernel, int threads, size_t smem) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int dev = 0, sms = 0, per_sm = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  if (per_sm < 1) throw std::invalid_argument(std::string(variant) + ": a block does not fit on an SM");
  return (long long)(sms) * per_sm;
}

// The grid of a persistent launch over `items` work items: as many blocks as fit, never more than items.
template <typename Kernel>
dim3 persistent_grid(const char* variant, Kernel kernel, int threads, size_t smem, long long items) {
  const long long fit = persistent_blocks(variant, kernel, threads, smem);
  return dim3{unsigned(items < fit ? items : fit), 1u, 1u};
}

}  // namespace pyconv
