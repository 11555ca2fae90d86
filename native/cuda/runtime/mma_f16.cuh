// Split-FP16 tensor-core primitives (steps 19 and 20): FP32-accurate products on the FP16 tensor cores.
//
// A float v is held as two halves, v ~ hi + lo * 2^-11 with hi = fp16(v) and lo = fp16((v - hi) * 2^11): hi keeps
// 11 significant bits and lo the next 11, so the pair represents v to about 2^-22 relative (FP32 keeps 2^-24). A
// product of two halves is exact in the float32 accumulator (11 x 11 bits), so
//   x * w ~ x.hi * w.hi + 2^-11 * (x.hi * w.lo + x.lo * w.hi)
// needs three m16n8k16 MMAs (the x.lo * w.lo term is below 2^-22 and dropped, as 3xTF32 drops its small * small
// term). The two correction products share one accumulator, scaled by 2^-11 once at the end. A uint8 image is
// exact in one half (integers up to 2048 are), so x.lo = 0 and two MMAs do.
// Range: fp16 holds |v| < 65504. Values beyond it become inf and the outputs they reach inf or NaN (never a quietly
// wrong finite number); the course's images (0..255), tanh outputs and weights are far inside it.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace pyconv {

constexpr float kSplitScale = 2048.0f;          // 2^11: lo is stored scaled up, so it stays a normal half
constexpr float kSplitUnscale = 1.0f / 2048.0f;

struct SplitHalf {
  __half hi, lo;
};

__device__ __forceinline__ SplitHalf split_f16(float v) {
  const __half hi = __float2half_rn(v);
  return {hi, __float2half_rn((v - __half2float(hi)) * kSplitScale)};
}

// Two halves in one 32-bit register, `first` in the low 16 bits (the lower k index of an MMA fragment pair).
__device__ __forceinline__ uint32_t pack_half2(__half first, __half second) {
  return uint32_t(__half_as_ushort(first)) | (uint32_t(__half_as_ushort(second)) << 16);
}

// split_f16 of two values at once, packed: .x = (hi(a), hi(b)), .y = (lo(a), lo(b)), `a` in the low halves. The
// same operations as split_f16 (so bit for bit the same halves), but each rounding to FP16 is one packed
// cvt.rn.f16x2.f32 for both values: 2 conversions to FP16 for two values where split_f16 spends 4.
__device__ __forceinline__ uint2 split_f16x2(float a, float b) {
  const __half2 hi = __floats2half2_rn(a, b);
  const float2 h = __half22float2(hi);
  const __half2 lo = __floats2half2_rn((a - h.x) * kSplitScale, (b - h.y) * kSplitScale);
  return make_uint2(*reinterpret_cast<const uint32_t*>(&hi), *reinterpret_cast<const uint32_t*>(&lo));
}

// The weights k [M][C][K][K] of a plain convolution as split A fragments of m16n8k16 (filters x tap pairs), in
// fragment order: s_ah / s_al [mtiles][ksteps][32 lanes] of 4 registers, hi and lo halves. The depth is tap PAIRS
// (c, ky, q) = taps (c, ky, 2q), (c, ky, 2q + 1), q < ceil(K/2), the second 0 past the filter row; a lane's a0
// holds (filter g, pair t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4) of its m-tile and k-step, the lower tap in the
// low half. Filters past M and pairs past C*K*ceil(K/2) are 0. Every thread of the block takes a share (steps 20
// and 21 build them once per block).
__device__ __forceinline__ void split_weight_fragments(uint4* s_ah, uint4* s_al, const float* __restrict__ k, int M,
                                                       int C, int K, int mtiles, int ksteps) {
  const int KH = (K + 1) / 2, npairs = C * K * KH;
  uint32_t* ahu = reinterpret_cast<uint32_t*>(s_ah);
  uint32_t* alu = reinterpret_cast<uint32_t*>(s_al);
  for (int i = threadIdx.x; i < mtiles * ksteps * 128; i += blockDim.x) {
    const int reg = i & 3, l = (i >> 2) & 31, rest = i >> 7;
    const int mt = rest / ksteps, ks = rest - mt * ksteps;
    const int m = mt * 16 + (l >> 2) + 8 * (reg & 1), pair = ks * 8 + (l & 3) + 4 * (reg >> 1);
    float w0 = 0.0f, w1 = 0.0f;
    if (m < M && pair < npairs) {
      const int per_c = K * KH, c = pair / per_c, rem = pair - c * per_c, ky = rem / KH;
      const int kx = 2 * (rem - ky * KH);
      const float* wr = k + ((size_t(m) * C + c) * K + ky) * K;
      w0 = __ldg(wr + kx);
      if (kx + 1 < K) w1 = __ldg(wr + kx + 1);
    }
    const SplitHalf h0 = split_f16(w0), h1 = split_f16(w1);
    ahu[i] = pack_half2(h0.hi, h1.hi);
    alu[i] = pack_half2(h0.lo, h1.lo);
  }
}

// D += A B, mma.sync m16n8k16, FP16 operands, float32 accumulators (PTX ISA, "Matrix Fragments for mma.m16n8k16"
// with floating point types), lane = 4g + t, each register two halves (lower k in the low 16 bits):
//   A (16x16, row): a0 (row g, k 2t..2t+1), a1 (row g+8, k 2t..2t+1), a2 (row g, k 2t+8..2t+9), a3 (row g+8, k 2t+8..)
//   B (16x8, col):  b0 (k 2t..2t+1, col g), b1 (k 2t+8..2t+9, col g)
//   D (16x8):       d0 (g, 2t), d1 (g, 2t+1), d2 (g+8, 2t), d3 (g+8, 2t+1)
__device__ __forceinline__ void mma_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace pyconv
