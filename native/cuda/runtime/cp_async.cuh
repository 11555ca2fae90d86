// Asynchronous global -> shared copies (cp.async, sm_80+) shared by the persistent-block steps (20-22): a block
// queues the copy of the next image (or band) while it computes on the current one. And the shared-window address
// that every PTX instruction on shared memory takes (cp.async, ldmatrix, mbarrier, wgmma descriptors).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace pyconv {

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// Queues the copy of n floats from global `src` to shared `dst`, every thread of the block taking a share:
// 16-byte pieces (cp.async.cg, past L1) when `vec4` (n, dst and src multiples of 4 floats), else 4-byte ones. Not
// committed: the caller groups copies with cp_async_commit(). THREADS: the block's size where the kernel knows it
// at compile time (a constant stride: step 13's kernel spilled registers with blockDim.x), else 0.
template <int THREADS = 0>
__device__ __forceinline__ void cp_async_floats(float* dst, const float* src, int n, bool vec4) {
  const int stride = THREADS > 0 ? THREADS : int(blockDim.x);
  if (vec4) {
    for (int i = threadIdx.x; i < n / 4; i += stride) {
      const uint32_t s = smem_addr(dst + 4 * i);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src + 4 * i));
    }
  } else {
    for (int i = threadIdx.x; i < n; i += stride) {
      const uint32_t s = smem_addr(dst + i);
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(src + i));
    }
  }
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// Waits until at most N committed groups of this thread are in flight (the PTX instruction's own count).
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Waits until at most depth - 1 committed groups are in flight (depth 2: the oldest of two has landed; 1 or 0: all).
// Each thread waits for its own copies: a barrier must follow before other threads' data is read.
__device__ __forceinline__ void cp_async_wait(int depth) {
  if (depth == 2)
    cp_async_wait_group<1>();
  else
    cp_async_wait_group<0>();
}

}  // namespace pyconv
