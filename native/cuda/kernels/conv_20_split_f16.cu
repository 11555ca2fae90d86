// Step 20 -- gpu-split-f16: a plain convolution as accurate as float32 on the FP16 tensor cores: every operand
// split into two halves (cuda/runtime/mma_f16.cuh), three m16n8k16 MMAs per product, whole images (or bands of
// output rows of larger ones) in shared memory, split once when they land.
// Measurements and what was tried: docs/ladder-findings/20.md (docs/ladder.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "cuda/runtime/cp_async.cuh"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/fast_div.cuh"
#include "cuda/runtime/mma_f16.cuh"
#include "cuda/runtime/persistent.cuh"
#include "cuda/runtime/registry.cuh"

namespace pyconv {
namespace {

constexpr size_t kSmemLimit = 220 * 1024;  // per block, opted in (sm_90 allows 227 KB)
constexpr int kMaxWarps = 8;

struct SplitParams {
  int C, H, W, M, K, Ho, Wo;
  long long B;      // images of this launch
  int Pimg;         // Ho * Wo: output pixels of one image (the stride of y's filter planes)
  // Bands: a work unit is `bh` output rows of one image (the whole image when it fits: nbands = 1, bh = Ho). A
  // band needs input rows [y0, y0 + R) of every channel, R = bh + K - 1; band i starts at y0 = i * bh, the last at
  // Ho - bh (it overlaps the one before rather than being shorter: every band has the same pixels, rows and
  // staging runs, and the overlapped rows are written twice with the same values).
  int bh, nbands;
  long long units;  // B * nbands: (image, band) pairs, walked by the persistent blocks
  int R;            // input rows per channel in the planes: H for a whole image
  int P;            // bh * Wo: output pixels of one band
  int tiles;        // ceil(P / 8): 8-pixel n-tiles of one band
  int KH;           // ceil(K / 2): tap pairs per filter row
  int npairs;       // C * K * KH
  int ksteps;       // ceil(npairs / 8): one m16n8k16 k-step is 8 pairs
  int mtiles;       // ceil(M / 16), rounded up to even when > 1 (two m-tiles per pass)
  int Wh;           // 8-byte words per plane row: columns 0 .. 2*Wh-1 cover W plus at least one zero column
  int Wq;           // ceil(Wh / 2): runs of 4 columns (2 words of each copy) per plane row, one per split thread
  int rows;         // C * R
  int plane_words;  // rows * Wh: one copy (E or O)
  int o_base;       // first word of copy O
  int split_words;  // words of both copies (even: what follows stays 16-byte aligned)
  int img_floats;   // C * H * W: one image
  // What one unit stages: `runs` contiguous runs of `run` floats, run i at x + i * run_stride in the image (from
  // the band's first row) and at i * run in the staging buffer: the whole image as one run, or a band's R rows of
  // each channel (C runs of R * W floats).
  int runs, run, run_stride;
  int slot_pitch;   // runs * run rounded up to 4: staging buffers start 16-byte aligned
  bool vec4;        // runs are copied in 16-byte pieces (every run and offset a multiple of 4 floats)
  bool vec2;        // every pixel pair (n, n + 1), n even, of every band lies 8-byte aligned in y
  int depth;        // staging buffers (units in flight per block); 0: the split reads global memory (whole images)
  FastDiv div_wq, div_wo, div_bands;
};

// Queues the copy of one unit (its runs, from `src`: the band's first row in the image) into a staging buffer (not
// committed: the caller commits one group per slot, empty or not, so that wait_group(depth - 1) always means "the
// oldest unit has landed").
__device__ __forceinline__ void stage_unit(float* dst, const float* src, const SplitParams& p) {
  for (int r = 0; r < p.runs; ++r, dst += p.run, src += p.run_stride) cp_async_floats(dst, src, p.run, p.vec4);
}

// Image and first output row of unit u. One band per image: the unit is the image (no division).
__device__ __forceinline__ void unit_coords(long long u, const SplitParams& p, long long& b, int& y0) {
  if (p.nbands == 1) {
    b = u, y0 = 0;
  } else {  // u < 2^31 (the launcher splits larger batches)
    const int bi = int(p.div_bands.div(uint32_t(u)));
    b = bi, y0 = min((int(u) - bi * p.nbands) * p.bh, p.Ho - p.bh);
  }
}

// src (a unit's fp32 rows: plane row r at src + r * W; staging buffer or global memory) -> copies E and O of the
// split planes. Word j of row r: E = (hi(col 2j), hi(col 2j+1)), (lo(..), lo(..)); O the same for columns 2j+1,
// 2j+2. Columns >= W are zero, so the second half of a pair past the filter's last tap reads a finite value (its
// weight is 0). A thread takes a run of 4 columns 4q .. 4q+3: two packed splits (split_f16x2) make E words 2q and
// 2q+1, byte permutes of their halves make O word 2q, and O word 2q+1 needs column 4q+4 as well, split again here
// (5 instructions; taking it from the lane of the next run would cost 2 shuffles, and the lanes at a row's end or
// the warp's edge, which every warp has, would still split it). Threads walk (row, run) by adding blockDim.x runs,
// pointers included, with one carry: no division per word. PAIRS (W even): columns come in aligned float2 loads,
// each pair inside the row or past it as a whole.
template <bool PAIRS>
__device__ __forceinline__ void split_rows(uint2* s_img, const float* src, const SplitParams& p) {
  const int step_r = int(p.div_wq.div(blockDim.x)), step_q = int(blockDim.x) - step_r * p.Wq;
  int r = int(p.div_wq.div(threadIdx.x)), q = int(threadIdx.x) - r * p.Wq;
  const float* in = src + r * p.W + 4 * q;
  uint2* out = s_img + r * p.Wh + 2 * q;
  const int in_step = step_r * p.W + 4 * step_q, in_carry = p.W - 4 * p.Wq;
  const int out_step = step_r * p.Wh + 2 * step_q, out_carry = p.Wh - 2 * p.Wq;
  while (r < p.rows) {
    const int c0 = 4 * q;
    float v[5];
    if (PAIRS) {
      const float2 z = make_float2(0.0f, 0.0f);
      const float2 v01 = c0 < p.W ? *reinterpret_cast<const float2*>(in) : z;
      const float2 v23 = c0 + 2 < p.W ? *reinterpret_cast<const float2*>(in + 2) : z;
      v[0] = v01.x, v[1] = v01.y, v[2] = v23.x, v[3] = v23.y;
      v[4] = c0 + 4 < p.W ? in[4] : 0.0f;
    } else {
#pragma unroll
      for (int j = 0; j < 5; ++j) v[j] = c0 + j < p.W ? in[j] : 0.0f;
    }
    const uint2 e0 = split_f16x2(v[0], v[1]), e1 = split_f16x2(v[2], v[3]);
    const SplitHalf h4 = split_f16(v[4]);
    out[0] = e0;
    out[p.o_base] = make_uint2(__byte_perm(e0.x, e1.x, 0x5432), __byte_perm(e0.y, e1.y, 0x5432));
    if (2 * q + 1 < p.Wh) {  // an odd Wh: the row's last run has one word of each copy
      out[1] = e1;
      out[p.o_base + 1] = make_uint2(__byte_perm(e1.x, __half_as_ushort(h4.hi), 0x5432),
                                     __byte_perm(e1.y, __half_as_ushort(h4.lo), 0x5432));
    }
    q += step_q, r += step_r, in += in_step, out += out_step;
    if (q >= p.Wq) q -= p.Wq, ++r, in += in_carry, out += out_carry;
  }
}

__device__ __forceinline__ void split_image(uint2* s_img, const float* src, const SplitParams& p) {
  if (p.W % 2 == 0)
    split_rows<true>(s_img, src, p);
  else
    split_rows<false>(s_img, src, p);
}

// Word offset of pair `pair` (c, ky, q) from a pixel's base word; padded pairs (weight 0) read word 0 of it.
__host__ __device__ __forceinline__ int pair_offset(int pair, const SplitParams& p) {
  if (pair >= p.npairs) return 0;
  const int per_c = p.K * p.KH, c = pair / per_c, rem = pair - c * per_c, ky = rem / p.KH;
  return (c * p.R + ky) * p.Wh + (rem - ky * p.KH);
}

// Base word of output pixel (oy, ox) of a band (oy counted from the band's first row): copy E for an even column,
// O for an odd one (the pair then starts one element into the word before).
__host__ __device__ __forceinline__ int pixel_word(int oy, int ox, const SplitParams& p) {
  return ((ox & 1) ? p.o_base : 0) + oy * p.Wh + (ox >> 1);
}

// The k-steps of MT m-tiles over the warp's n-tiles: each image load feeds the MMAs of every m-tile. GUARDED:
// only the first nv n-tiles are real (the warp-uniform test per n-tile is compiled only into the partial case, so
// a full warp's loads and MMAs are free to interleave).
template <int MT, int NT, bool GUARDED>
__device__ __forceinline__ void k_loop(float (&acc)[MT][NT][4], float (&cor)[MT][NT][4], const int (&base)[NT],
                                       int nv, const uint4* ah_p, const uint4* al_p, int mt_stride,
                                       const int2* off_p, const uint2* s_img, int ksteps) {
  for (int ks = 0; ks < ksteps; ++ks) {
    uint4 ah[MT], al[MT];
#pragma unroll
    for (int j = 0; j < MT; ++j) ah[j] = ah_p[j * mt_stride + ks * 32], al[j] = al_p[j * mt_stride + ks * 32];
    const int2 o = off_p[ks * 4];
#pragma unroll
    for (int i = 0; i < NT; ++i) {
      if (GUARDED && i >= nv) continue;
      const uint2 v0 = s_img[base[i] + o.x], v1 = s_img[base[i] + o.y];  // pairs t, t+4: (hi, lo) each
#pragma unroll
      for (int j = 0; j < MT; ++j) {
        mma_f16(acc[j][i], ah[j].x, ah[j].y, ah[j].z, ah[j].w, v0.x, v1.x);
        mma_f16(cor[j][i], ah[j].x, ah[j].y, ah[j].z, ah[j].w, v0.y, v1.y);
        mma_f16(cor[j][i], al[j].x, al[j].y, al[j].z, al[j].w, v0.x, v1.x);
      }
    }
  }
}

template <int MT, int NT>
__global__ void __launch_bounds__(kMaxWarps * 32)
    conv_fwd_gpu_split_f16_kernel(const float* __restrict__ x, const float* __restrict__ k, float* __restrict__ y,
                                  const SplitParams p) {
  extern __shared__ uint4 smem[];
  const int afrags = p.mtiles * p.ksteps * 32;
  uint4* s_ah = smem;                                              // [mtiles][ksteps][32 lanes]: A hi
  uint4* s_al = s_ah + afrags;                                     // the same, lo
  int2* s_off = reinterpret_cast<int2*>(s_al + afrags);            // [ksteps][t]: offsets of pairs t and t+4
  uint2* s_img = reinterpret_cast<uint2*>(s_off + p.ksteps * 4);   // [split_words]: copies E and O
  float* s_stage = reinterpret_cast<float*>(s_img + p.split_words);  // [depth][slot_pitch]: fp32 units in flight
  const int warps = int(blockDim.x) / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;

  // Queues unit v (if there is one) into staging slot s and commits the group, empty or not.
  auto stage = [&](long long v, int s) {
    if (v < p.units) {
      long long bv;
      int y0;
      unit_coords(v, p, bv, y0);
      stage_unit(s_stage + s * p.slot_pitch, x + bv * p.img_floats + y0 * p.W, p);
    }
    cp_async_commit();
  };
  long long u = blockIdx.x;  // this block's units: u, u + gridDim.x, ...
  for (int s = 0; s < p.depth; ++s) stage(u + (long long)s * gridDim.x, s);  // fly while the weights are split

  split_weight_fragments(s_ah, s_al, k, p.M, p.C, p.K, p.mtiles, p.ksteps);  // (cuda/runtime/mma_f16.cuh)
  for (int i = threadIdx.x; i < p.ksteps * 4; i += blockDim.x)
    s_off[i] = make_int2(pair_offset((i >> 2) * 8 + (i & 3), p), pair_offset((i >> 2) * 8 + (i & 3) + 4, p));

  int slot = 0;
  for (; u < p.units; u += gridDim.x) {
    cp_async_wait(p.depth);
    __syncthreads();  // unit u is staged; every warp is done with the previous unit's planes (and the tables)
    if (p.depth > 0)
      split_image(s_img, s_stage + slot * p.slot_pitch, p);
    else  // whole images only (plan): unit u is image u
      split_image(s_img, x + u * p.img_floats, p);
    __syncthreads();  // the planes are complete; the staging slot is free
    if (p.depth > 0) {
      stage(u + (long long)p.depth * gridDim.x, slot);
      slot = slot + 1 == p.depth ? 0 : slot + 1;
    }

    for (int mt0 = 0; mt0 < p.mtiles; mt0 += MT) {  // p.mtiles is a multiple of MT (zero filters pad it)
      const uint4* ah_p = s_ah + mt0 * p.ksteps * 32 + lane;
      const uint4* al_p = s_al + mt0 * p.ksteps * 32 + lane;
      for (int tg = 0; tg < p.tiles; tg += warps * NT) {
        // This warp's n-tiles of the group: tg + warp, + warps, ... (nv of them, warp-uniform); per tile the base
        // word of this lane's pixel (column g): copy E for an even pixel column, O for an odd one.
        const int first = tg + warp;
        if (first >= p.tiles) continue;  // a last group with fewer n-tiles than warps (no barrier inside)
        const int nv = min(NT, (p.tiles - first + warps - 1) / warps);
        int base[NT];
#pragma unroll
        for (int i = 0; i < NT; ++i) {
          const int n = (first + i * warps) * 8 + g;
          int w = 0;
          if (n < p.P) {
            const int oy = int(p.div_wo.div(uint32_t(n))), ox = n - oy * p.Wo;
            w = pixel_word(oy, ox, p);
          }
          base[i] = w;
        }
        float acc[MT][NT][4], cor[MT][NT][4];
#pragma unroll
        for (int j = 0; j < MT; ++j)
#pragma unroll
          for (int i = 0; i < NT; ++i)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[j][i][r] = cor[j][i][r] = 0.0f;
        if (nv == NT)
          k_loop<MT, NT, false>(acc, cor, base, nv, ah_p, al_p, p.ksteps * 32, s_off + t, s_img, p.ksteps);
        else
          k_loop<MT, NT, true>(acc, cor, base, nv, ah_p, al_p, p.ksteps * 32, s_off + t, s_img, p.ksteps);
        // D rows g and g+8 are filters, columns 2t and 2t+1 consecutive pixels of the band: straight to y. (The
        // band's place in y is worked out here, not kept across the k-loop: two registers fewer there.)
        long long b;
        int y0;
        unit_coords(u, p, b, y0);
        float* const yb = y + b * p.M * p.Pimg + y0 * p.Wo;  // the band's first output of filter 0
#pragma unroll
        for (int i = 0; i < NT; ++i) {
          if (i >= nv) continue;
          const int n = (first + i * warps) * 8 + 2 * t;
#pragma unroll
          for (int jh = 0; jh < 2 * MT; ++jh) {
            const int j = jh / 2, h = jh % 2, m = (mt0 + j) * 16 + g + 8 * h;
            if (m >= p.M) continue;
            const float o0 = fmaf(cor[j][i][2 * h], kSplitUnscale, acc[j][i][2 * h]);
            const float o1 = fmaf(cor[j][i][2 * h + 1], kSplitUnscale, acc[j][i][2 * h + 1]);
            float* yo = yb + (long long)m * p.Pimg + n;
            if (p.vec2 && n + 1 < p.P) {
              __stcs(reinterpret_cast<float2*>(yo), make_float2(o0, o1));  // y is written once: evict first
            } else {
              if (n < p.P) yo[0] = o0;
              if (n + 1 < p.P) yo[1] = o1;
            }
          }
        }
      }
    }
  }
}

using SplitKernel = void (*)(const float*, const float*, float*, const SplitParams);

struct Config {
  int mt, nt;
  SplitKernel kernel;
};

// MT = 2 m-tiles per pass when M > 16 (each image load feeds 6 MMAs, not 3), else 1. Then the fewest n-tiles per
// warp (accumulators: 8 per n-tile and m-tile, 48 at most) that let at most 8 warps cover an image in one group;
// the largest beyond that (the groups then loop). 64 accumulators (NT = 8) took 128 registers and spilled.
const Config& pick(int M, int tiles, int& warps) {
  static const Config configs[] = {
      {1, 2, conv_fwd_gpu_split_f16_kernel<1, 2>}, {1, 4, conv_fwd_gpu_split_f16_kernel<1, 4>},
      {1, 6, conv_fwd_gpu_split_f16_kernel<1, 6>}, {2, 1, conv_fwd_gpu_split_f16_kernel<2, 1>},
      {2, 2, conv_fwd_gpu_split_f16_kernel<2, 2>}, {2, 3, conv_fwd_gpu_split_f16_kernel<2, 3>},
  };
  const int mt = M > 16 ? 2 : 1;
  const Config* c = nullptr;
  for (const Config& cc : configs) {
    if (cc.mt != mt) continue;
    c = &cc;  // the last of this MT when none covers the image
    if (tiles <= cc.nt * kMaxWarps) break;
  }
  warps = std::min(kMaxWarps, (tiles + c->nt - 1) / c->nt);
  return *c;
}

size_t weight_bytes(const SplitParams& p) {  // A fragments (hi and lo) and the pair offsets
  return size_t(p.mtiles) * p.ksteps * 32 * 16 * 2 + size_t(p.ksteps) * 4 * 8;
}
size_t fixed_bytes(const SplitParams& p) { return weight_bytes(p) + size_t(p.split_words) * 8; }
size_t smem_bytes(const SplitParams& p) { return fixed_bytes(p) + size_t(p.depth) * p.slot_pitch * 4; }

// Row pitch (Wh: (W + 2) / 2 words plus `extra`) and where copy O starts (o_shift words past a 128-byte line
// boundary); then the deepest staging ring that fits.
void set_layout(SplitParams& p, int extra, int o_shift) {
  p.Wh = (p.W + 2) / 2 + extra;
  p.Wq = (p.Wh + 1) / 2;
  p.plane_words = p.rows * p.Wh;
  p.o_base = (p.plane_words + 15) / 16 * 16 + o_shift;
  p.split_words = (p.o_base + p.plane_words + 1) / 2 * 2;
  p.div_wq = FastDiv(uint32_t(p.Wq));
  p.depth = 2;
  while (p.depth > 0 && smem_bytes(p) > kSmemLimit) --p.depth;
}

// Bands of bh output rows (bh = Ho: the whole image, one run of the image staged as it lies).
void set_band(SplitParams& p, int bh) {
  p.bh = bh;
  p.nbands = (p.Ho + bh - 1) / bh;
  p.units = p.B * p.nbands;
  p.R = bh + p.K - 1;
  p.rows = p.C * p.R;
  p.P = bh * p.Wo;
  p.tiles = (p.P + 7) / 8;
  if (p.nbands == 1) {
    p.runs = 1, p.run = p.img_floats, p.run_stride = 0;
    p.vec4 = p.img_floats % 4 == 0;
  } else {  // a band's rows of channel c: R * W floats from row y0 of plane c
    p.runs = p.C, p.run = p.R * p.W, p.run_stride = p.H * p.W;
    p.vec4 = p.W % 4 == 0;
  }
  p.slot_pitch = (p.runs * p.run + 3) / 4 * 4;
  // Pixel pairs start at even n of a band, at y0 * Wo + n in the filter's plane: aligned when planes and every
  // band's first row (i * bh, and Ho - bh) are even.
  p.vec2 = p.Pimg % 2 == 0 && (p.nbands == 1 || p.Wo % 2 == 0 || (bh % 2 == 0 && p.Ho % 2 == 0));
  p.div_bands = FastDiv(uint32_t(p.nbands));
}

std::string kb(size_t bytes) { return std::to_string((bytes + 1023) / 1024) + " KB"; }

// The whole image when its split planes and the weights fit (any staging depth, 0 included: today's shapes keep
// their one-band plan); else the tallest band that fits with one staging buffer, then evened out over the bands it
// takes (ceil(Ho / nbands) rows each: the last band's overlap with the one before stays below nbands rows).
std::string plan(const ConvShape& s, SplitParams& p) {
  const int64_t img = s.C * s.H * s.W, P = s.Ho() * s.Wo(), KH = (s.K + 1) / 2;
  const int64_t npairs = s.C * s.K * KH;
  if (img > (int64_t(1) << 24) || npairs > (int64_t(1) << 20) || s.M > (int64_t(1) << 20))
    return "gpu-split-f16: image or weights too large";
  p.C = int(s.C); p.H = int(s.H); p.W = int(s.W); p.M = int(s.M); p.K = int(s.K);
  p.Ho = int(s.Ho()); p.Wo = int(s.Wo()); p.B = s.B; p.Pimg = int(P);
  p.KH = int(KH);
  p.npairs = int(npairs);
  p.ksteps = int((npairs + 7) / 8);
  p.mtiles = int((s.M + 15) / 16);
  if (p.mtiles > 1) p.mtiles += p.mtiles % 2;  // M > 16 runs two m-tiles per pass (pick)
  p.img_floats = int(img);
  p.div_wo = FastDiv(uint32_t(p.Wo));
  set_band(p, p.Ho);
  set_layout(p, 0, 8);  // the tightest pitch; the launcher may pad it (choose_layout)
  if (smem_bytes(p) <= kSmemLimit) return "";
  int bh = p.Ho - 1;
  for (; bh >= 1; --bh) {
    set_band(p, bh);
    set_layout(p, 0, 8);
    if (p.depth >= 1) break;
  }
  if (bh < 1) {  // p holds the band of one output row
    return "gpu-split-f16: " + std::to_string(s.M) + " split filters of " + std::to_string(s.C) + "x" +
           std::to_string(s.K) + "x" + std::to_string(s.K) + " taps (" + kb(weight_bytes(p)) +
           ") and a band of one output row (" + std::to_string(s.C) + " channels x " + std::to_string(p.R) +
           " input rows: " + kb(size_t(p.split_words) * 8) + " split, " + kb(size_t(p.slot_pitch) * 4) +
           " staged) need more than the " + std::to_string(kSmemLimit / 1024) +
           " KB of shared memory one block has";
  }
  set_band(p, (p.Ho + p.nbands - 1) / p.nbands);
  set_layout(p, 0, 8);
  return "";
}

// The bank model of the image loads: a warp's LDS.64 is served per half-warp (lanes g = 0..3 or 4..7, t = 0..3);
// equal words are broadcast, distinct words in the same one of the 16 eight-byte slots of a 128-byte line take a
// wavefront each. Summed over the loads of the first 24 n-tiles and 12 k-steps of an image.
long bank_wavefronts(const SplitParams& p) {
  long total = 0;
  for (int tile = 0; tile < std::min(p.tiles, 24); ++tile) {
    int base[8];
    for (int g = 0; g < 8; ++g) {
      const int n = tile * 8 + g;
      base[g] = n < p.P ? pixel_word(n / p.Wo, n % p.Wo, p) : 0;
    }
    for (int ks = 0; ks < std::min(p.ksteps, 12); ++ks)
      for (int h = 0; h < 2; ++h) {
        int off[4];
        for (int t = 0; t < 4; ++t) off[t] = pair_offset(ks * 8 + t + 4 * h, p);
        for (int half = 0; half < 2; ++half) {
          int words[16], n = 0;
          for (int g = 4 * half; g < 4 * half + 4; ++g)
            for (int t = 0; t < 4; ++t) {
              const int w = base[g] + off[t];
              if (std::find(words, words + n, w) == words + n) words[n++] = w;
            }
          int per_slot[16] = {}, worst = 0;
          for (int i = 0; i < n; ++i) worst = std::max(worst, ++per_slot[words[i] & 15]);
          total += worst;
        }
      }
  }
  return total;
}

// Which pixels of an n-tile share a half-warp, and so which words collide, depends on Wo, Wh and where copy O
// starts: per shape (once, then cached) the layout with the fewest modelled wavefronts among up to 7 extra words
// of row pitch and 8 positions of O that keep the staging ring as deep.
void choose_layout(SplitParams& p) {
  static std::mutex mu;
  static std::map<std::array<int, 5>, std::pair<int, int>> chosen;
  const std::array<int, 5> key{p.C, p.H, p.W, p.M, p.K};  // (the band follows from these)
  {
    const std::lock_guard<std::mutex> lock(mu);
    const auto it = chosen.find(key);
    if (it != chosen.end()) return set_layout(p, it->second.first, it->second.second);
  }
  std::pair<int, int> best{0, 8};
  long best_cost = bank_wavefronts(p);
  for (int extra = 0; extra <= 7; ++extra)
    for (int o_shift : {8, 4, 12, 6, 10, 2, 14, 0}) {
      SplitParams q = p;
      set_layout(q, extra, o_shift);
      if (q.depth < p.depth || smem_bytes(q) > kSmemLimit) continue;  // (a band keeps depth >= 1)
      const long cost = bank_wavefronts(q);
      if (cost < best_cost) best_cost = cost, best = {extra, o_shift};
    }
  {
    const std::lock_guard<std::mutex> lock(mu);
    chosen[key] = best;
  }
  set_layout(p, best.first, best.second);
}

}  // namespace

std::string conv_supports_gpu_split_f16(const ConvShape& s) {
  SplitParams p{};
  return plan(s, p);
}

void conv_fwd_gpu_split_f16(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  SplitParams p{};
  const std::string why = plan(s, p);
  if (!why.empty()) throw std::invalid_argument(why);
  if (s.B == 0) return;
  choose_layout(p);
  int warps = 0;
  const Config& c = pick(p.M, p.tiles, warps);
  const size_t smem = smem_bytes(p);
  const int threads = warps * 32;
  const long long fit = persistent_blocks("gpu-split-f16", c.kernel, threads, smem);
  // Persistent blocks: each walks units blockIdx.x, +gridDim.x, ... so the weights are split once per block and
  // the cp.async ring always has the next units to fetch. With bands, a launch takes fewer than 2^31 units (the
  // kernel divides a unit's index in 32 bits): larger batches go in several launches.
  const long long per_launch = p.nbands == 1 ? s.B : ((1LL << 31) - 1) / p.nbands;
  for (long long b0 = 0; b0 < s.B; b0 += per_launch) {
    SplitParams q = p;
    q.B = std::min(per_launch, s.B - b0);
    q.units = q.B * q.nbands;
    const dim3 grid{unsigned(std::min<long long>(q.units, fit)), 1u, 1u};
    c.kernel<<<grid, threads, smem, st>>>(x + b0 * p.img_floats, k, y + b0 * p.M * p.Pimg, q);
    CUDA_CHECK_LAUNCH();
  }
}

// Split operands: float32 accuracy (products to ~2^-22 relative, float32 sums), the default tolerance.
PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-split-f16",
    .step = 20,
    .summary = "float32-accurate convolution on the FP16 tensor cores: operands split into hi + lo halves, 3 MMAs; "
               "images beyond shared memory in bands of output rows",
    .precision = Precision::F16x3,
    .launch = conv_fwd_gpu_split_f16,
    .supports = conv_supports_gpu_split_f16,
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
