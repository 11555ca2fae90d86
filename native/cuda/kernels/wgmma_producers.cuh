// The producer warpgroup that steps 29 and 30 share: it copies each tile's slab of split planes into shared memory
// (wgmma_slab.cuh) for the consumer warpgroups' wgmmas, and stores the (filter, tap column) products they stage,
// each output the sum of its K staged columns. The two steps differ in how their consumers multiply and stage, not
// in this.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/kernels/wgmma_slab.cuh"
#include "cuda/runtime/mbarrier.cuh"
#include "cuda/runtime/named_barrier.cuh"

namespace pyconv::slab {

// Named barriers (named_barrier.cuh) between the warpgroups that multiply (consumers) and the warpgroup that copies
// and stores (producers): slab buffer b empty, the staging area full / empty. A slab buffer is announced full by
// its mbarrier (landed[b]), on which every producer thread's copies arrive as they land: the producers never wait
// for their own copies.
enum Barrier { kEmpty0 = 1, kStageFull = 3, kStageEmpty = 4 };

// The first pixel (of the launch's planes) of tile t: tiles start at each image's first pixel (per_image) or run
// on across images, TOUT outputs apart.
template <int TOUT, class Params>
__device__ __forceinline__ long long first_pixel(const Params& p, long long tile) {
  if (!p.per_image) return tile * TOUT;
  const uint32_t b = p.by_tiles.div(uint32_t(tile));
  return (long long)b * p.H * p.W + (uint32_t(tile) - b * p.tiles_per_image) * TOUT;
}

// The producers' part of a block of THREADS threads whose last PRODUCERS are this warpgroup (pt = this thread's
// index among them), over tiles of TILE positions t0, t0 + t_step, ... of the launch: slab buffers at shared
// address slab0 (p.nbuf of p.slab_bytes), bands of ch channels; the staging area `stage` of STAGE_STRIDE floats a
// row, a filter's K rows (its tap columns) one after another; outputs to y (the launch's first image), groups
// p.g0 .. p.g0 + p.gl - 1 of p.Mg filters each.
template <int TILE, int K, int THREADS, int PRODUCERS, int STAGE_STRIDE, class Params>
__device__ __forceinline__ void produce(const Params& p, const __half* __restrict__ xh, const __half* __restrict__ xl,
                                        float* __restrict__ y, const float* stage, uint64_t* landed, uint32_t slab0,
                                        int ch, int pt, long long t0, long long t_step) {
  static_assert(TILE <= PRODUCERS, "a producer thread stores one position of a tile");
  constexpr int TOUT = TILE - (K - 1);  // outputs a tile stores
  const int HW = p.H * p.W;
  // Tile t's slab into buffer buf: row r of band b is pixel first(t) + r's channels b*ch .. b*ch + ch - 1, hi then
  // lo, swizzled; rows past the launch's pixels are zero. The buffer's mbarrier completes its phase when every
  // producer's copies have landed.
  auto load_slab = [&](long long tile, int buf) {
    queue<PRODUCERS>(slab0 + uint32_t(buf * p.slab_bytes), xh, xl, first_pixel<TOUT>(p, tile), p.slab_rows, p.bands,
                     p.band_bytes, p.Cp, ch, p.pixels, pt);
    mbar_arrive_on_copies(&landed[buf]);
  };
  // Where this thread's output of tile t goes (its position pt of the tile): its offset in y at the layer's first
  // filter, or -1 where the position is no output (past the image or the launch, or in the flat grid's last K - 1
  // rows or columns). Once a tile for all its groups, and with multiply-high divisions: per group and with 64-bit
  // divisions, it was half of what the producers did (step 29's header).
  auto out_offset = [&](long long tile) -> long long {
    uint32_t b, j;
    if (p.per_image) {
      b = p.by_tiles.div(uint32_t(tile));
      j = (uint32_t(tile) - b * p.tiles_per_image) * TOUT + pt;
      if (j >= uint32_t(HW)) return -1;  // the next image's: its own tile stores it
    } else {
      const uint32_t pos = uint32_t(tile) * TOUT + pt;
      if (pos >= p.pixels) return -1;
      b = p.by_hw.div(pos);
      j = pos - b * HW;
    }
    const uint32_t oh = p.by_w.div(j), ow = j - oh * p.W;
    if (pt >= TOUT || oh >= uint32_t(p.Ho) || ow >= uint32_t(p.Wo)) return -1;
    return (long long)b * p.Mtot * p.P + oh * p.Wo + ow;
  };
  // Tile t's outputs of group g from the staging area: thread pt takes position pt and every filter of the group,
  // each output the sum of its K staged columns pt .. pt + K - 1 (consecutive threads, consecutive columns and
  // outputs).
  auto store = [&](long long off, int g) {
    if (off < 0) return;
    const int f0 = (p.g0 + g) * p.Mg, nf = min(p.Mg, p.Mtot - f0);
    float* out = y + off + (long long)f0 * p.P;
    const float* s = stage + pt;
#pragma unroll 4
    for (int f = 0; f < nf; ++f, s += K * STAGE_STRIDE) {
      float sum = s[0];
#pragma unroll
      for (int kw = 1; kw < K; ++kw) sum += s[kw * STAGE_STRIDE + kw];
      out[(long long)f * p.P] = sum;
    }
  };
  for (int b = 0; b < p.nbuf && t0 + b * t_step < p.tiles; ++b) load_slab(t0 + b * t_step, b);
  for (long long i = 0, t = t0; t < p.tiles; ++i, t += t_step) {
    const int buf = int(i) & (p.nbuf - 1);
    const long long off = out_offset(t);
    for (int g = 0; g < p.gl; ++g) {
      // Before the last group's store: tile t + nbuf into tile t's buffer, landing while t is stored. The consumers
      // free the buffer after the last group's wgmmas, and stage a group only once the one before is stored, so
      // waiting for it before an earlier group's store would wait forever.
      if (g + 1 == p.gl && t + p.nbuf * t_step < p.tiles) {
        bar_sync(kEmpty0 + buf, THREADS);
        load_slab(t + p.nbuf * t_step, buf);
      }
      bar_sync(kStageFull, THREADS);
      store(off, g);
      if (g + 1 < p.gl || t + t_step < p.tiles) bar_arrive(kStageEmpty, THREADS);
    }
  }
}

}  // namespace pyconv::slab
