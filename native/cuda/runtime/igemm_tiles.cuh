// What steps 18 and 25 share as tiled implicit GEMMs over the batch's pixels: GEMM rows are the B*Ho*Wo output
// pixels in (b, oh, ow) order, cut into tiles of 128 that may straddle images, columns the M filters in blocks of
// BN, depth C*K*K streamed in chunks of 32 taps through a 3-stage cp.async pipeline. Here: the tile constants, the
// shape plan (and its refusals), the tap table, the launch, and the store of a finished tile.
#pragma once
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/conv_shape.hpp"
#include "cuda/runtime/cp_async.cuh"
#include "cuda/runtime/cuda_check.cuh"

namespace pyconv::igemm {

constexpr int BM = 128;      // output pixels per block (GEMM rows)
constexpr int BK = 32;       // depth (taps) per pipeline stage
constexpr int STAGES = 3;    // cp.async stages: STAGES - 1 chunks load while one is multiplied
constexpr int LDA = BK + 4;  // row pitch (words) of the float32 A (pixel) and B (filter) tiles: conflict-free
constexpr int LDC = BM + 4;  // row pitch (words) of the output staging tile: conflict-free fragment stores
constexpr size_t kSmemLimit = 220 * 1024;  // per block, opted in (sm_90 allows 227 KB)

struct Params {
  long long pixels;  // B * Ho * Wo: the GEMM rows
  int C, H, W, M, K, Ho, Wo;
  int P;         // Ho * Wo
  int chw;       // C * H * W: one input image
  int ckk;       // C * K * K: the GEMM depth
  int ckk_mma;   // ckk rounded up to the MMA's k-step: the depth the MMAs read (the rest of a chunk is skipped)
  int kchunks;   // ceil(ckk / BK)
  int m_blocks;  // ceil(M / BN)
  bool vec4;     // P % 4 == 0: four consecutive pixels of a tile are one aligned float4 of y
};

// Shared memory of a block: the stages of both operand tiles, then the tap table.
inline size_t smem_bytes(const Params& p, int bn) {
  return size_t(STAGES) * (BM + bn) * LDA * 4 + size_t(p.kchunks) * BK * 4;
}

// Fills p for shape s with filter blocks of bn and MMA k-steps of kstep taps; "" when supported, else why not.
inline std::string plan(const ConvShape& s, Params& p, const char* name, int bn, int kstep) {
  const int64_t chw = s.C * s.H * s.W, ckk = s.C * s.K * s.K;
  // Offsets inside one tile span up to 129 images (a tile of 128 one-pixel images plus its window).
  if (chw * (BM + 1) > INT_MAX || s.M * ckk > INT_MAX)
    return std::string(name) + ": an image of " + std::to_string(chw) + " floats or weights of " +
           std::to_string(s.M * ckk) + " floats exceed its 32-bit offsets";
  p.C = int(s.C); p.H = int(s.H); p.W = int(s.W); p.M = int(s.M); p.K = int(s.K);
  p.Ho = int(s.Ho()); p.Wo = int(s.Wo()); p.P = p.Ho * p.Wo;
  p.pixels = s.B * int64_t(p.P);
  p.chw = int(chw);
  p.ckk = int(ckk);
  p.ckk_mma = int((ckk + kstep - 1) / kstep * kstep);
  p.kchunks = int((ckk + BK - 1) / BK);
  p.m_blocks = int((s.M + bn - 1) / bn);
  p.vec4 = p.P % 4 == 0;
  if (smem_bytes(p, bn) > kSmemLimit)
    return std::string(name) + ": a depth of " + std::to_string(ckk) + " taps needs a tap table beyond " +
           std::to_string(kSmemLimit / 1024) + " KB of shared memory";
  const int64_t tiles = (p.pixels + BM - 1) / BM;
  if (tiles * p.m_blocks > INT_MAX)
    return std::string(name) + ": " + std::to_string(tiles * p.m_blocks) + " blocks exceed the grid";
  return "";
}

using Kernel = void (*)(const float*, const float*, float*, const Params);

// A step's configuration for M filters: the narrowest of its filter tiles (configs ordered by their .bn) that holds
// M; wider M runs as several blocks of the widest. Steps 18 and 25-27 choose their tiles so.
template <class Config, size_t N>
const Config& narrowest_holding(const Config (&configs)[N], int64_t M) {
  for (const Config& c : configs)
    if (M <= c.bn) return c;
  return configs[N - 1];
}

// Plans (throwing std::invalid_argument on a refused shape) and launches one block per (128-pixel tile, filter
// block), filter blocks fastest: blocks resident together cover neighbouring rows of the same images, whose K*K
// shifted reads then hit L2.
inline void launch(Kernel kernel, int threads, const float* x, const float* k, float* y, const ConvShape& s,
                   cudaStream_t st, const char* name, int bn, int kstep) {
  Params p{};
  const std::string why = plan(s, p, name, bn, kstep);
  if (!why.empty()) throw std::invalid_argument(why);
  if (p.pixels == 0 || s.M == 0) return;
  const size_t smem = smem_bytes(p, bn);
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const long long blocks = (p.pixels + BM - 1) / BM * p.m_blocks;
  kernel<<<unsigned(blocks), threads, smem, st>>>(x, k, y, p);
  CUDA_CHECK_LAUNCH();
}

// 4-byte asynchronous copy; valid == false writes a zero and reads nothing.
__device__ __forceinline__ void cp_async4(uint32_t dst, const float* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// The tap table, stored so that a lane with tap-lane kl reads its taps 4*kg + kl of a chunk as int4s:
// s_kofs[chunk][kl][kg] = c*H*W + kh*W + kw of that tap, `pad` past C*K*K. Each of the block's THREADS takes a
// share.
template <int THREADS>
__device__ __forceinline__ void build_tap_table(int* s_kofs, const Params& p, int pad) {
  const int KK = p.K * p.K;
  for (int i = threadIdx.x; i < p.kchunks * BK; i += THREADS) {
    const int kb = i / BK, kl = (i % BK) / 8, kg = i % 8;
    const int kk = kb * BK + 4 * kg + kl;
    int off = pad;
    if (kk < p.ckk) {
      const int c = kk / KK, q = kk % KK;
      off = (c * p.H + q / p.K) * p.W + q % p.K;
    }
    s_kofs[i] = off;
  }
}

// One m16n8 accumulator fragment into the staging tile cs[filter][LDC]: d0 (pixel px, filter n), d1 (px, n + 1),
// d2 (px + 8, n), d3 (px + 8, n + 1), with px = row g of the fragment's 16 pixels and n = its filter 2t.
__device__ __forceinline__ void stage_fragment(float* cs, int px, int n, float d0, float d1, float d2, float d3) {
  cs[n * LDC + px] = d0;
  cs[(n + 1) * LDC + px] = d1;
  cs[n * LDC + px + 8] = d2;
  cs[(n + 1) * LDC + px + 8] = d3;
}

// Writes a finished tile staged in shared memory as cs[filter][LDC] (pixel lp of the tile at column lp) to y: a
// warp writes runs of consecutive pixels of one filter (broken only where the tile crosses an image), float4 when
// Ho*Wo % 4 == 0, each of the block's THREADS taking a share. Streaming stores: y is written once and is larger than L2, so x's rows stay there.
template <int BN, int THREADS>
__device__ __forceinline__ void store_tile(const float* cs, float* __restrict__ y, const Params& p, long long p0,
                                           int n0) {
  const long long b_first = p0 / p.P;
  const int r_first = int(p0 - b_first * p.P);
  if (p.vec4) {
    for (int e = threadIdx.x; e < BN * BM / 4; e += THREADS) {
      const int n = e / (BM / 4), lp = 4 * (e % (BM / 4)), m = n0 + n;
      if (m >= p.M || p0 + lp >= p.pixels) continue;  // pixels % 4 == 0: the whole float4 is in or out
      int r = r_first + lp;
      const int db = r / p.P;
      r -= db * p.P;
      const float4 v = *reinterpret_cast<const float4*>(cs + n * LDC + lp);
      __stcs(reinterpret_cast<float4*>(y + ((b_first + db) * p.M + m) * (long long)p.P + r), v);
    }
  } else {
    for (int e = threadIdx.x; e < BN * BM; e += THREADS) {
      const int n = e / BM, lp = e % BM, m = n0 + n;
      if (m >= p.M || p0 + lp >= p.pixels) continue;
      int r = r_first + lp;
      const int db = r / p.P;
      r -= db * p.P;
      __stcs(y + ((b_first + db) * p.M + m) * (long long)p.P + r, cs[n * LDC + lp]);
    }
  }
}

}  // namespace pyconv::igemm
