// Named barriers (bar.sync / bar.arrive, ids 1-15; 0 is __syncthreads): a barrier of `threads` threads (a multiple
// of 32) that only some warps of a block take part in, so that warpgroups can wait for each other, or one for
// another, without stopping the whole block. Memory accesses a participant made before it arrives are visible to
// those that pass the barrier.
#pragma once

namespace pyconv {

// Arrives at barrier `id` and waits until `threads` threads have arrived.
__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Arrives at barrier `id` (of `threads` threads) and goes on.
__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace pyconv
