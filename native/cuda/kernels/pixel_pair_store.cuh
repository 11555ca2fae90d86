// The two outputs a lane holds per row of an m16n8 accumulator fragment (columns 2t and 2t+1: two horizontally
// adjacent pixels n and n+1 of an output plane of P pixels), stored straight to y (steps 21 and 22).
#pragma once
#include <cuda_runtime.h>

namespace pyconv {

// yo = the plane's address of pixel n (n even). With P even, n < P means both pixels exist and the pair is one
// 8-byte aligned float2, written evict-first (y is written once); else two scalar stores, each only inside the plane.
__device__ __forceinline__ void store_pixel_pair(float* yo, int n, int P, float o0, float o1) {
  if ((P & 1) == 0) {
    if (n < P) __stcs(reinterpret_cast<float2*>(yo), make_float2(o0, o1));
  } else {
    if (n < P) yo[0] = o0;
    if (n + 1 < P) yo[1] = o1;
  }
}

}  // namespace pyconv
