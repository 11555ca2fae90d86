// n / d for 0 <= n < 2^31 as a multiply-high and a shift (Granlund-Montgomery; the same scheme as PyTorch's
// IntDivider): m = floor(2^32 * (2^s - d) / d) + 1 with 2^s >= d, then n / d = (umulhi(n, m) + n) >> s. Exact for
// every n < 2^31 (t + n stays below 2^32 because t <= n). The divisor is set up on the host; a kernel dividing by
// a run-time value per work item would otherwise spend ~20 instructions per division.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace pyconv {

struct FastDiv {
  uint32_t d = 1, m = 1;
  int s = 0;
  FastDiv() = default;
  explicit FastDiv(uint32_t div) : d(div) {
    s = 0;
    while (s < 32 && (uint64_t(1) << s) < div) ++s;
    m = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << s) - div)) / div + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, m) + n) >> s; }
};

}  // namespace pyconv
