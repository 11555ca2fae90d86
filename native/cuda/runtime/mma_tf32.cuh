// The TF32 tensor-core primitives shared by the ladder's tensor-core steps (8, 11, 13, 14): one rounding, one
// warp-wide m16n8k8 multiply-accumulate.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace pyconv {

// v rounded to TF32 (10 mantissa bits, round to nearest, ties away): the bits of a float whose low 13 are 0.
__device__ __forceinline__ uint32_t to_tf32(float v) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
  return r;
}

// D += A B, mma.sync m16n8k8, TF32 operands, float32 accumulators (PTX ISA, "Matrix Fragments for mma.m16n8k8"
// with .tf32), lane = 4g + t:
//   A (16x8, row): a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4)
//   B (8x8, col):  b0 (k=t, n=g), b1 (k=t+4, n=g)
//   D (16x8):      d0 (g, 2t), d1 (g, 2t+1), d2 (g+8, 2t), d3 (g+8, 2t+1)
__device__ __forceinline__ void mma_tf32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace pyconv
