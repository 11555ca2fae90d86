// The slab that steps 28 and 29 multiply with wgmma: consecutive pixels (rows) of the split channels-last planes
// (split_planes.cuh) in shared memory as wgmma reads its K-major operand: bands of ch channels, each row the band's
// ch hi halves then its ch lo halves (4 ch bytes), swizzled (cuda/runtime/wgmma_f16.cuh).
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/runtime/split_planes.cuh"
#include "cuda/runtime/wgmma_f16.cuh"

namespace pyconv::slab {

// Queues (cp.async, not committed) rows p0 .. p0 + rows - 1 of planes xh / xl (channel pitch Cp) into the slab at
// shared address dst (bands of band_bytes); pixels at or past `pixels` are zeros. Thread t of THREADS copies the
// 16-byte piece q = t % per_row of rows t / per_row + k * stride: the same swizzled piece in every row it copies
// (stride = THREADS / per_row is a multiple of the swizzle's 8-row pattern), so each copy costs a few additions.
template <int THREADS>
__device__ __forceinline__ void queue(uint32_t dst, const __half* xh, const __half* xl, long long p0, int rows,
                                      int bands, int band_bytes, int Cp, int ch, long long pixels, int t) {
  static_assert(THREADS % 64 == 0, "a thread's rows must keep their swizzle phase");
  const int ra = 4 * ch, per_row = ra / 16, half_row = per_row / 2, stride = THREADS / per_row;
  const int q = t % per_row, r0 = t / per_row;
  const bool q_lo = q >= half_row;
  const __half* plane = q_lo ? xl : xh;
  const int chan = 8 * (q - (q_lo ? half_row : 0));
  const uint32_t at = wgmma::swizzle(uint32_t(r0 * ra + 16 * q), ra);  // the same for r0 + k * stride
  for (int band = 0; band < bands; ++band) {
    uint32_t d = dst + uint32_t(band * band_bytes) + at;
    long long pix = p0 + r0;
    const __half* src = plane + pix * Cp + band * ch + chan;
    for (int r = r0; r < rows; r += stride) {
      const bool valid = pix < pixels;
      planes::cp_async16(d, valid ? src : plane, valid);
      d += uint32_t(stride * ra);
      src += (long long)stride * Cp;
      pix += stride;
    }
  }
}

}  // namespace pyconv::slab
