// The two outputs a lane holds per row of an m16n8 accumulator fragment (columns 2t and 2t+1: two horizontally
// adjacent pixels n and n+1 of an output plane of P pixels), stored straight to y or to a plane staged in shared
// memory (steps 21-23).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace pyconv {

// yo = the plane's address of pixel n (n even). With P even, n < P means both pixels exist and the pair is one
// 8-byte aligned float2, written evict-first when kToGlobal (y in global memory is written once; a plane staged in
// shared memory takes plain stores); else two scalar stores, each only inside the plane.
template <bool kToGlobal = true>
__device__ __forceinline__ void store_pixel_pair(float* yo, int n, int P, float o0, float o1) {
  if ((P & 1) == 0) {
    if (n < P) {
      if constexpr (kToGlobal)
        __stcs(reinterpret_cast<float2*>(yo), make_float2(o0, o1));
      else
        *reinterpret_cast<float2*>(yo) = make_float2(o0, o1);
    }
  } else {
    if (n < P) yo[0] = o0;
    if (n + 1 < P) yo[1] = o1;
  }
}

// The same pair rounded to half (round to nearest), for a y in global memory that a fully connected layer on the
// FP16 tensor cores reads next (launch_f16_out, registry.cuh): one 4-byte store when P is even.
template <bool kToGlobal = true>
__device__ __forceinline__ void store_pixel_pair(__half* yo, int n, int P, float o0, float o1) {
  static_assert(kToGlobal, "half pairs go to global memory only");
  if ((P & 1) == 0) {
    if (n < P) {
      const __half2 h = __floats2half2_rn(o0, o1);
      __stcs(reinterpret_cast<unsigned*>(yo), *reinterpret_cast<const unsigned*>(&h));
    }
  } else {
    if (n < P) yo[0] = __float2half_rn(o0);
    if (n + 1 < P) yo[1] = __float2half_rn(o1);
  }
}

}  // namespace pyconv
