// Step 20 -- gpu-split-f16: a plain convolution as accurate as float32 on the FP16 tensor cores: every operand
// split into two halves (cuda/runtime/mma_f16.cuh), three m16n8k16 MMAs per product, whole images in shared
// memory split once when they land.
//
// Changes from step 13 (gpu-tensor-core-tf32, one TF32 pass) and why:
// - Precision: x * w ~ x.hi w.hi + 2^-11 (x.hi w.lo + x.lo w.hi), the main product and the two corrections in two
//   accumulators, combined once per output (main + corr * 2^-11): float32 accuracy (held to the default tolerance),
//   where step 13 rounds both operands to TF32. An input beyond the FP16 range (|v| > 65504) becomes inf and the
//   outputs it reaches inf or NaN, never a quietly wrong number (so may the output one column left of its windows:
//   the zero-weighted second half of a filter row's last pair reads it, and 0 * inf is NaN).
// - The image is split ONCE, as it moves from its cp.async staging buffer (fp32, as it lies in global memory) into
//   the planes the MMAs read: every input value is read by up to K*K windows, so splitting per MMA operand (as step
//   13 rounds per load) would repeat the conversion K*K times.
// - Depth order: the taps of a filter row in horizontal PAIRS (c, ky, 2q), (c, ky, 2q+1), q < ceil(K/2); a pair
//   with 2q+1 = K has weight 0 in its second half. The two halves of one B register of m16n8k16 are two consecutive
//   depth indices, so one register is one pair = two horizontally adjacent inputs. For an even pixel column they are
//   an aligned half2 of the row; for an odd one they straddle two words, so every plane is kept twice: E as it lies
//   and O shifted by one element, and a lane whose pixel column is odd reads copy O. hi and lo of the same two
//   inputs are interleaved into one 8-byte word: one LDS.64 fetches both operands of a B register, so per 8-pixel
//   n-tile and k-step (8 pairs) a lane issues 2 LDS.64 and 3 MMAs (step 13: 2 LDS + 2 CVT + 1 MMA per 8 taps).
// - Why step 13 takes about twice its own prediction (its header) on sp19 conv2
//   (results/bench-nvidia-h200-2026-11-23-steps16-18.json): per k-step each lane runs a dependent chain (offset
//   table -> image load -> cvt -> MMA) across a 4-warp block, one image at a time between two __syncthreads, and
//   its n-tiles are guarded by a branch each. Here: up to 6 n-tiles per warp with no dependence between them (12
//   independent LDS.64 and 18 MMAs per k-step once the k-step's two pair offsets are in registers; the per-tile
//   test is compiled only into the loop of a warp whose last n-tiles fall past the image), all of an image's
//   n-tiles in one block of up to 8 warps (sp19 conv2: 41 n-tiles = 7 warps x 6, one slot idle), two images in
//   flight per block in the cp.async ring (when shared memory allows), and the weights' A fragments (hi and lo)
//   built once per block in fragment order (two LDS.128 per lane per k-step, shared by the warp's n-tiles).
// - Generality: any C, H, W, M, K whose image (split, two copies: 8 bytes per input) and weights (4 bytes per
//   filter tap, split, padded to 16 filters) fit in shared memory; output images of any pixel count (n-tiles loop
//   in groups of warps x NT over the image); M > 16 runs two m-tiles per pass on the image already loaded, each
//   image load feeding both (step 13 reloads the image per 16 filters, in another block). With no room for a
//   staging buffer the split reads global memory.
// Bank conflicts of the image loads: the row pitch and where copy O starts are chosen per shape with a model of the
// 64-bit loads (bank_wavefronts); on sp19 conv2 the model puts the chosen layout at 1.1x the conflict-free count
// (1.3x with the tightest pitch), sp18 conv2 at 1.1x (2.0x); fa19 conv2 stays at 1.8x (the pitches the model
// prefers leave no room for its staging buffer).
// Predicted before measuring (H200, sp19 conv2, B=10000; 41 n-tiles x 12 k-steps per image, 7 warps of 127
// registers: 2 blocks = 14 warps per SM):
//   MMAs 41 x 12 x 3 = 1476 per image, 14.8 M in all (112 K per SM: 0.06-0.12 ms at 1-0.5 MMA/clock/SM);
//   shared memory per image: image loads 41 x 12 x 2 x 256 B = 252 KB (x1.1 conflicts = 277 KB), A fragments
//   7 warps x 12 x 1 KB = 84 KB, split 19 KB read + 25 KB written, staging 12 KB: ~420 KB, 32 MB per SM (76
//   images) at 128 B/clock = 0.14 ms at 1.8 GHz (the bound); DRAM 116 MB + 207 MB = 323 MB (~0.08 ms)
//   overlapped. ~0.14 ms.
// Measured: results/bench-nvidia-h200-2026-11-24-steps19-20.json and -split-f16.json (`invoke bench`, NVBench,
// H200): the fastest float32-accurate variant on every course conv2 (fa19 and fa18 conv2 more than twice as fast as
// cuDNN FP32), but on sp19 conv2 above the 0.14 ms predicted and behind step 13's one TF32 pass. Nsight Compute on
// sp19 conv2 (one launch): issue slots 44% busy, 2 blocks of 7 warps per SM (127 registers, and shared memory),
// 20% occupancy, 28% of the stall samples on the image loop's first barrier (every warp waits while the next image
// is split), stores using 21 of 32 bytes per sector (an image's 324-pixel rows are 16- but not 32-byte aligned).
// Tried and not kept: two split images per block (the next one split while this one is computed, one barrier per
// image): 3% slower in the same bench. Not tried: fewer registers per warp for more warps, output staged through
// shared memory for whole-sector stores, images larger than shared memory (bands of output rows): the shape sweep
// (results/bench-nvidia-h200-2026-11-24-sweep-split-f16.json) finds most of its shapes refused for that reason.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "cuda/kernels/fast_div.cuh"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/mma_f16.cuh"
#include "cuda/runtime/registry.cuh"

namespace pyconv {
namespace {

constexpr size_t kSmemLimit = 220 * 1024;  // per block, opted in (sm_90 allows 227 KB)
constexpr int kMaxWarps = 8;

struct SplitParams {
  int C, H, W, M, K, Ho, Wo;
  long long B;
  int P;            // Ho * Wo: output pixels of one image
  int tiles;        // ceil(P / 8): 8-pixel n-tiles of one image
  int KH;           // ceil(K / 2): tap pairs per filter row
  int npairs;       // C * K * KH
  int ksteps;       // ceil(npairs / 8): one m16n8k16 k-step is 8 pairs
  int mtiles;       // ceil(M / 16), rounded up to even when > 1 (two m-tiles per pass)
  int Wh;           // 8-byte words per plane row: columns 0 .. 2*Wh-1 cover W plus at least one zero column
  int rows;         // C * H
  int plane_words;  // rows * Wh: one copy (E or O)
  int o_base;       // first word of copy O
  int split_words;  // words of both copies (even: what follows stays 16-byte aligned)
  int img_floats;   // C * H * W: one image
  int img_pitch;    // img_floats rounded up to 4: staging buffers start 16-byte aligned
  bool vec4;        // img_floats % 4 == 0: images are copied in 16-byte pieces
  int depth;        // staging buffers (images in flight per block); 0: the split reads global memory
  FastDiv div_wh, div_wo;
};

__device__ __forceinline__ void cp_async_wait(int depth) {
  if (depth == 2)
    asm volatile("cp.async.wait_group 1;" ::: "memory");
  else
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}

// Queues the copy of one image into a staging buffer (not committed: the caller commits one group per image slot,
// empty or not, so that wait_group(depth - 1) always means "the oldest image has landed").
__device__ __forceinline__ void stage_image(float* dst, const float* src, const SplitParams& p) {
  if (p.vec4) {
    for (int i = threadIdx.x; i < p.img_floats / 4; i += blockDim.x) {
      const unsigned s = unsigned(__cvta_generic_to_shared(dst + 4 * i));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src + 4 * i));
    }
  } else {
    for (int i = threadIdx.x; i < p.img_floats; i += blockDim.x) {
      const unsigned s = unsigned(__cvta_generic_to_shared(dst + i));
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(src + i));
    }
  }
}

// src (one fp32 image, staging buffer or global memory) -> copies E and O of the split image. Word j of row r:
// E = (hi(col 2j), hi(col 2j+1)), (lo(..), lo(..)); O the same for columns 2j+1, 2j+2. Columns >= W are zero, so
// the second half of a pair past the filter's last tap reads a finite value (its weight is 0).
__device__ __forceinline__ void split_image(uint2* s_img, const float* src, const SplitParams& p) {
  const int n = p.rows * p.Wh;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int r = int(p.div_wh.div(uint32_t(i))), c0 = 2 * (i - r * p.Wh);
    const float* row = src + r * p.W;
    const SplitHalf h0 = split_f16(c0 < p.W ? row[c0] : 0.0f);
    const SplitHalf h1 = split_f16(c0 + 1 < p.W ? row[c0 + 1] : 0.0f);
    const SplitHalf h2 = split_f16(c0 + 2 < p.W ? row[c0 + 2] : 0.0f);
    s_img[i] = make_uint2(pack_half2(h0.hi, h1.hi), pack_half2(h0.lo, h1.lo));
    s_img[p.o_base + i] = make_uint2(pack_half2(h1.hi, h2.hi), pack_half2(h1.lo, h2.lo));
  }
}

// Word offset of pair `pair` (c, ky, q) from a pixel's base word; padded pairs (weight 0) read word 0 of it.
__host__ __device__ __forceinline__ int pair_offset(int pair, const SplitParams& p) {
  if (pair >= p.npairs) return 0;
  const int per_c = p.K * p.KH, c = pair / per_c, rem = pair - c * per_c, ky = rem / p.KH;
  return (c * p.H + ky) * p.Wh + (rem - ky * p.KH);
}

// Base word of output pixel (oy, ox): copy E for an even column, O for an odd one (the pair then starts one
// element into the word before).
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
  float* s_stage = reinterpret_cast<float*>(s_img + p.split_words);  // [depth][img_pitch]: fp32 images in flight
  const int warps = int(blockDim.x) / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;

  long long b = blockIdx.x;
  for (int s = 0; s < p.depth; ++s) {  // the first images fly while the weights are split
    const long long bs = b + (long long)s * gridDim.x;
    if (bs < p.B) stage_image(s_stage + s * p.img_pitch, x + bs * p.img_floats, p);
    asm volatile("cp.async.commit_group;");
  }

  // A fragments (filters x pairs), m16n8k16 layout: a0 (row g, pair t), a1 (row g+8, pair t), a2 (row g, pair t+4),
  // a3 (row g+8, pair t+4); each register the pair's two taps, the lower in the low half.
  uint32_t* s_ahu = reinterpret_cast<uint32_t*>(s_ah);
  uint32_t* s_alu = reinterpret_cast<uint32_t*>(s_al);
  for (int i = threadIdx.x; i < afrags * 4; i += blockDim.x) {
    const int reg = i & 3, l = (i >> 2) & 31, rest = i >> 7;
    const int mt = rest / p.ksteps, ks = rest - mt * p.ksteps;
    const int m = mt * 16 + (l >> 2) + 8 * (reg & 1), pair = ks * 8 + (l & 3) + 4 * (reg >> 1);
    float w0 = 0.0f, w1 = 0.0f;
    if (m < p.M && pair < p.npairs) {
      const int per_c = p.K * p.KH, c = pair / per_c, rem = pair - c * per_c, ky = rem / p.KH;
      const int kx = 2 * (rem - ky * p.KH);
      const float* wr = k + ((size_t(m) * p.C + c) * p.K + ky) * p.K;
      w0 = __ldg(wr + kx);
      if (kx + 1 < p.K) w1 = __ldg(wr + kx + 1);
    }
    const SplitHalf h0 = split_f16(w0), h1 = split_f16(w1);
    s_ahu[i] = pack_half2(h0.hi, h1.hi);
    s_alu[i] = pack_half2(h0.lo, h1.lo);
  }
  for (int i = threadIdx.x; i < p.ksteps * 4; i += blockDim.x)
    s_off[i] = make_int2(pair_offset((i >> 2) * 8 + (i & 3), p), pair_offset((i >> 2) * 8 + (i & 3) + 4, p));

  int slot = 0;
  for (; b < p.B; b += gridDim.x) {
    cp_async_wait(p.depth);
    __syncthreads();  // image b is staged; every warp is done with the previous image's planes (and the tables)
    if (p.depth > 0)
      split_image(s_img, s_stage + slot * p.img_pitch, p);
    else
      split_image(s_img, x + b * p.img_floats, p);
    __syncthreads();  // the planes are complete; the staging slot is free
    if (p.depth > 0) {
      const long long nb = b + (long long)p.depth * gridDim.x;
      if (nb < p.B) stage_image(s_stage + slot * p.img_pitch, x + nb * p.img_floats, p);
      asm volatile("cp.async.commit_group;");
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
        // D rows g and g+8 are filters, columns 2t and 2t+1 consecutive pixels of the image: straight to y.
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
            float* yo = y + (b * p.M + m) * p.P + n;
            if ((p.P % 2) == 0 && n + 1 < p.P) {
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

size_t fixed_bytes(const SplitParams& p) {
  return size_t(p.mtiles) * p.ksteps * 32 * 16 * 2 + size_t(p.ksteps) * 4 * 8 + size_t(p.split_words) * 8;
}
size_t smem_bytes(const SplitParams& p) { return fixed_bytes(p) + size_t(p.depth) * p.img_pitch * 4; }

// Row pitch (Wh: (W + 2) / 2 words plus `extra`) and where copy O starts (o_shift words past a 128-byte line
// boundary); then the deepest staging ring that fits.
void set_layout(SplitParams& p, int extra, int o_shift) {
  p.Wh = (p.W + 2) / 2 + extra;
  p.plane_words = p.rows * p.Wh;
  p.o_base = (p.plane_words + 15) / 16 * 16 + o_shift;
  p.split_words = (p.o_base + p.plane_words + 1) / 2 * 2;
  p.div_wh = FastDiv(uint32_t(p.Wh));
  p.depth = 2;
  while (p.depth > 0 && smem_bytes(p) > kSmemLimit) --p.depth;
}

std::string plan(const ConvShape& s, SplitParams& p) {
  const int64_t img = s.C * s.H * s.W, P = s.Ho() * s.Wo(), KH = (s.K + 1) / 2;
  const int64_t npairs = s.C * s.K * KH;
  if (img > (int64_t(1) << 24) || npairs > (int64_t(1) << 20) || s.M > (int64_t(1) << 20))
    return "gpu-split-f16: image or weights too large";
  p.C = int(s.C); p.H = int(s.H); p.W = int(s.W); p.M = int(s.M); p.K = int(s.K);
  p.Ho = int(s.Ho()); p.Wo = int(s.Wo()); p.B = s.B; p.P = int(P);
  p.tiles = int((P + 7) / 8);
  p.KH = int(KH);
  p.npairs = int(npairs);
  p.ksteps = int((npairs + 7) / 8);
  p.mtiles = int((s.M + 15) / 16);
  if (p.mtiles > 1) p.mtiles += p.mtiles % 2;  // M > 16 runs two m-tiles per pass (pick)
  p.rows = int(s.C * s.H);
  p.img_floats = int(img);
  p.img_pitch = int((img + 3) / 4 * 4);
  p.vec4 = img % 4 == 0;
  p.div_wo = FastDiv(uint32_t(p.Wo));
  set_layout(p, 0, 8);  // the tightest pitch; the launcher may pad it (choose_layout)
  if (smem_bytes(p) > kSmemLimit) {
    const size_t weights = fixed_bytes(p) - size_t(p.split_words) * 8;
    return "gpu-split-f16: a " + std::to_string(s.C) + "-channel " + std::to_string(s.H) + "x" +
           std::to_string(s.W) + " image split into two FP16 copies (" +
           std::to_string(size_t(p.split_words) * 8 / 1024) + " KB) and " + std::to_string(s.M) +
           " split filters (" + std::to_string(weights / 1024) + " KB) need more than the " +
           std::to_string(kSmemLimit / 1024) + " KB of shared memory one block has";
  }
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
  const std::array<int, 5> key{p.C, p.H, p.W, p.M, p.K};
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
      if (q.depth < p.depth || smem_bytes(q) > kSmemLimit) continue;
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
  CUDA_CHECK(cudaFuncSetAttribute(c.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int dev = 0, sms = 0, per_sm = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, c.kernel, threads, smem));
  if (per_sm < 1) throw std::invalid_argument("gpu-split-f16: a block does not fit on an SM");
  // Persistent blocks: each walks images blockIdx.x, +gridDim.x, ... so the weights are split once per block and
  // the cp.async ring always has the next images to fetch.
  const dim3 grid{unsigned(std::min<long long>(s.B, (long long)(sms) * per_sm)), 1u, 1u};
  c.kernel<<<grid, threads, smem, st>>>(x, k, y, p);
  CUDA_CHECK_LAUNCH();
}

// Split operands: float32 accuracy (products to ~2^-22 relative, float32 sums), the default tolerance.
PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-split-f16",
    .step = 20,
    .summary = "float32-accurate convolution on the FP16 tensor cores: operands split into hi + lo halves, 3 MMAs",
    .precision = Precision::F16x3,
    .launch = conv_fwd_gpu_split_f16,
    .supports = conv_supports_gpu_split_f16,
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
