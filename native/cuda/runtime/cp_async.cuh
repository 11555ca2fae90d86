// Asynchronous global -> shared copies (cp.async, sm_80+) shared by the persistent-block steps (20-22): a block
// queues the copy of the next image (or band) while it computes on the current one.
#pragma once
#include <cuda_runtime.h>

namespace pyconv {

// Queues the copy of n floats from global `src` to shared `dst`, every thread of the block taking a share:
// 16-byte pieces (cp.async.cg, past L1) when `vec4` (n, dst and src multiples of 4 floats), else 4-byte ones. Not
// committed: the caller groups copies with cp_async_commit().
__device__ __forceinline__ void cp_async_floats(float* dst, const float* src, int n, bool vec4) {
  if (vec4) {
    for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
      const unsigned s = unsigned(__cvta_generic_to_shared(dst + 4 * i));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src + 4 * i));
    }
  } else {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const unsigned s = unsigned(__cvta_generic_to_shared(dst + i));
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(src + i));
    }
  }
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// Waits until at most depth - 1 committed groups are in flight (depth 2: the oldest of two has landed; 1 or 0: all).
// Each thread waits for its own copies: a barrier must follow before other threads' data is read.
__device__ __forceinline__ void cp_async_wait(int depth) {
  if (depth == 2)
    asm volatile("cp.async.wait_group 1;" ::: "memory");
  else
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}

}  // namespace pyconv
