// The producer warpgroup that steps 29-31 share: it copies each tile's slab of split planes into shared memory
// (wgmma_slab.cuh) for the consumer warpgroups' wgmmas, and stores the (filter, tap column) products they stage,
// each output the sum of its K staged columns. The steps differ in how their consumers multiply and stage, not in
// this; step 31 (POOL) also pools: see Pooled below.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/kernels/first_layer.cuh"
#include "cuda/kernels/wgmma_slab.cuh"
#include "cuda/runtime/mbarrier.cuh"
#include "cuda/runtime/named_barrier.cuh"

namespace pyconv::slab {

// Named barriers (named_barrier.cuh) between the warpgroups that multiply (consumers) and the warpgroup that copies
// and stores (producers): slab buffer b empty, the staging area full / empty. A slab buffer is announced full by
// its mbarrier (landed[b]), on which every producer thread's copies arrive as they land: the producers never wait
// for their own copies.
// kProducers: the producers alone (step 31's pooling reads what the others stored).
enum Barrier { kEmpty0 = 1, kStageFull = 3, kStageEmpty = 4, kProducers = 5 };

// Step 31 (tanh + max-pool 2/2 fused): a block takes units of consecutive tiles, each unit `pool_rows` pooled rows
// of one image (its tiles start at the unit's first pixel, TOUT outputs apart), units blockIdx.x, + gridDim.x, ...
// The producers store each output into the block's ring of `ring` floats per filter (global memory that stays in
// L2: `scratch`), by its position in the unit, and pool the rows a tile completes from it: the un-pooled output
// never reaches DRAM, and a window's four outputs need not be in one tile.
// A unit's i-th tile for a block: the unit blockIdx.x + (i / tiles_per_image) gridDim.x (tiles_per_image is then
// the tiles of a unit), so a tile's index is unit * tiles_per_image + its place in the unit.

// The tiles block blockIdx.x takes: t0, t0 + t_step, ... below p.tiles, or (POOL) its units' tiles.
template <bool POOL, class Params>
__device__ __forceinline__ long long tile_count(const Params& p, long long t0, long long t_step) {
  if constexpr (POOL) {
    const long long b = blockIdx.x;
    return b < p.units ? (p.units - b + gridDim.x - 1) / gridDim.x * p.tiles_per_image : 0;
  } else {
    return p.tiles > t0 ? (p.tiles - t0 + t_step - 1) / t_step : 0;
  }
}

// The first pixel (of the launch's planes) of tile t: tiles start at each image's first pixel (per_image) or run
// on across images, TOUT outputs apart.
template <int TOUT, class Params>
__device__ __forceinline__ long long first_pixel(const Params& p, long long tile) {
  if (!p.per_image) return tile * TOUT;
  const uint32_t b = p.by_tiles.div(uint32_t(tile));
  return (long long)b * p.H * p.W + (uint32_t(tile) - b * p.tiles_per_image) * TOUT;
}
// The same for step 31's tiles: a unit's, TOUT outputs apart from its first pixel (2 pool_rows rows a unit).
template <int TOUT, class Params>
__device__ __forceinline__ long long first_pixel_pooled(const Params& p, long long tile) {
  const uint32_t u = p.by_tiles.div(uint32_t(tile)), b = p.by_units.div(u);
  return (long long)b * p.H * p.W + (long long)(u - b * p.units_per_image) * 2 * p.pool_rows * p.W +
         (uint32_t(tile) - u * p.tiles_per_image) * TOUT;
}

// The producers' part of a block of THREADS threads whose last PRODUCERS are this warpgroup (pt = this thread's
// index among them), over tiles of TILE positions t0, t0 + t_step, ... of the launch (POOL: its units' tiles): slab
// buffers at shared address slab0 (p.nbuf of p.slab_bytes), bands of ch channels; the staging area `stage` of
// STAGE_STRIDE floats a row, a filter's K rows (its tap columns) one after another; outputs to y (the launch's
// first image; POOL: its pooled outputs), groups p.g0 .. p.g0 + p.gl - 1 of p.Mg filters each.
template <int TILE, int K, int THREADS, int PRODUCERS, int STAGE_STRIDE, bool POOL = false, class Params>
__device__ __forceinline__ void produce(const Params& p, const __half* __restrict__ xh, const __half* __restrict__ xl,
                                        float* __restrict__ y, const float* stage, uint64_t* landed, uint32_t slab0,
                                        int ch, int pt, long long t0, long long t_step) {
  static_assert(TILE <= PRODUCERS, "a producer thread stores one position of a tile");
  constexpr int TOUT = TILE - (K - 1);  // outputs a tile stores
  const int HW = p.H * p.W;
  const long long n = tile_count<POOL>(p, t0, t_step);
  // The block's i-th tile.
  auto tile_at = [&](long long i) -> long long {
    if constexpr (POOL) {
      const uint32_t q = p.by_tiles.div(uint32_t(i));
      return (long long)(blockIdx.x + q * gridDim.x) * p.tiles_per_image + (uint32_t(i) - q * p.tiles_per_image);
    } else {
      return t0 + i * t_step;
    }
  };
  // Tile t's slab into buffer buf: row r of band b is pixel first(t) + r's channels b*ch .. b*ch + ch - 1, hi then
  // lo, swizzled; rows past the launch's pixels are zero. The buffer's mbarrier completes its phase when every
  // producer's copies have landed.
  auto load_slab = [&](long long tile, int buf) {
    long long first;
    if constexpr (POOL) first = first_pixel_pooled<TOUT>(p, tile);
    else first = first_pixel<TOUT>(p, tile);
    queue<PRODUCERS>(slab0 + uint32_t(buf * p.slab_bytes), xh, xl, first, p.slab_rows, p.bands, p.band_bytes, p.Cp,
                     ch, p.pixels, pt);
    mbar_arrive_on_copies(&landed[buf]);
  };
  // Where this thread's output of tile t goes (its position pt of the tile): its offset in y at the layer's first
  // filter, or -1 where the position is no output (past the image or the launch, or in the flat grid's last K - 1
  // rows or columns). Once a tile for all its groups, and with multiply-high divisions: per group and with 64-bit
  // divisions, it was half of what the producers did (step 29's header). POOL: its slot in the block's ring (the
  // position in the unit, modulo the ring), or -1 past the tile's outputs.
  auto out_offset = [&](long long tile) -> long long {
    if constexpr (POOL) {
      if (pt >= TOUT) return -1;
      const uint32_t j = (uint32_t(tile) - p.by_tiles.div(uint32_t(tile)) * p.tiles_per_image) * TOUT + pt;
      return j - p.by_ring.div(j) * p.ring;
    }
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
  // POOL: the block's ring, a filter's `ring` floats after the one before.
  float* ring = nullptr;
  if constexpr (POOL) ring = p.scratch + (long long)blockIdx.x * p.Mtot * p.ring;
  // Tile t's outputs of group g from the staging area: thread pt takes position pt and every filter of the group,
  // each output the sum of its K staged columns pt .. pt + K - 1 (consecutive threads, consecutive columns and
  // outputs).
  auto store = [&](long long off, int g) {
    if (off < 0) return;
    const int f0 = (p.g0 + g) * p.Mg, nf = min(p.Mg, p.Mtot - f0);
    long long fstride;
    float* out;
    if constexpr (POOL) fstride = p.ring, out = ring + off + (long long)f0 * fstride;
    else fstride = p.P, out = y + off + (long long)f0 * fstride;
    const float* s = stage + pt;
#pragma unroll 4
    for (int f = 0; f < nf; ++f, s += K * STAGE_STRIDE) {
      float sum = s[0];
#pragma unroll
      for (int kw = 1; kw < K; ++kw) sum += s[kw * STAGE_STRIDE + kw];
      out[(long long)f * fstride] = sum;
    }
  };
  // POOL: the windows tile t completes in its unit, tanh(max of each 2x2 window) of the launch's filters, from the
  // ring. Window (r, c) of the unit's pooled rows ends at position (2r + 1) W + 2c + 1, so once the unit's tiles
  // 0 .. k - 1 are stored the windows before done(k) in raster order are complete, and each tile pools about a
  // quarter of its outputs: the work spread evenly, not a burst a row pair. Thread pt takes (filter, window) pt,
  // + PRODUCERS, ..., kBatch at a time, their 4 kBatch loads issued before any store: one wait for L2 a batch, not
  // one an item (a burst an item at a time cost more than the separate pool pass saved).
  auto pool = [&](long long tile) {
    if constexpr (POOL) {
      constexpr int kBatch = 8;
      const uint32_t u = p.by_tiles.div(uint32_t(tile)), k = uint32_t(tile) - u * p.tiles_per_image;
      const uint32_t b = p.by_units.div(u), r0 = (u - b * p.units_per_image) * p.pool_rows;
      const int rows = min(p.pool_rows, p.Hp - int(r0));
      const auto done = [&](uint32_t tiles) {  // complete windows once `tiles` tiles are stored
        const int end = int(tiles) * TOUT;     // positions stored: 0 .. end - 1
        const int full = end - p.W - 2 * p.Wp < 0 ? 0 : min(rows, (end - p.W - 2 * p.Wp) / (2 * p.W) + 1);
        if (full == rows) return rows * p.Wp;
        const int part = end - 2 - (2 * full + 1) * p.W;  // row `full`: windows c with 2c <= part
        return full * p.Wp + (part < 0 ? 0 : min(p.Wp, part / 2 + 1));
      };
      const int w0 = done(k), nw = done(k + 1) - w0;
      if (nw <= 0) return;
      bar_sync(kProducers, PRODUCERS);  // every producer's stores of the windows
      const int f0 = p.g0 * p.Mg, nfl = min(p.gl * p.Mg, p.Mtot - f0), items = nfl * nw;
      const float inv_nw = 1.0f / float(nw);
      float* out = y + ((long long)b * p.Mtot + f0) * p.Hp * p.Wp + (long long)r0 * p.Wp;
      using first_layer::max_nan;
      for (int q0 = pt; q0 < items; q0 += kBatch * PRODUCERS) {
        float v[kBatch];
        long long o[kBatch];
#pragma unroll
        for (int e = 0; e < kBatch; ++e) {
          const int q = q0 + e * PRODUCERS;
          o[e] = -1;
          if (q >= items) continue;
          // q / nw exactly: q < 2^22, and (q + 0.5) / nw is at least 0.5 / nw from an integer.
          const int fi = int((float(q) + 0.5f) * inv_nw), w = w0 + q - fi * nw;
          const uint32_t r = p.by_wp.div(uint32_t(w)), c = uint32_t(w) - r * p.Wp;
          const uint32_t j = 2 * r * p.W + 2 * c;
          const uint32_t a = j - p.by_ring.div(j) * p.ring;  // even, and the ring even: a + 1 stays in it
          uint32_t d = a + p.W;
          if (d >= uint32_t(p.ring)) d -= p.ring;
          const uint32_t d1 = d + 1 == uint32_t(p.ring) ? 0 : d + 1;
          const float* s = ring + (long long)(f0 + fi) * p.ring;
          // NaN-propagating, as numpy's: an input beyond FP16's range (a NaN output) never drops out of a window.
          v[e] = max_nan(max_nan(__ldcg(s + a), __ldcg(s + a + 1)), max_nan(__ldcg(s + d), __ldcg(s + d1)));
          o[e] = (long long)fi * p.Hp * p.Wp + w;
        }
#pragma unroll
        for (int e = 0; e < kBatch; ++e)
          if (o[e] >= 0) out[o[e]] = tanhf(v[e]);
      }
    }
  };
  for (int b = 0; b < p.nbuf && b < n; ++b) load_slab(tile_at(b), b);
  for (long long i = 0; i < n; ++i) {
    const long long t = tile_at(i);
    const int buf = int(i) & (p.nbuf - 1);
    const long long off = out_offset(t);
    for (int g = 0; g < p.gl; ++g) {
      // Before the last group's store: tile i + nbuf into tile i's buffer, landing while i is stored. The consumers
      // free the buffer after the last group's wgmmas, and stage a group only once the one before is stored, so
      // waiting for it before an earlier group's store would wait forever.
      if (g + 1 == p.gl && i + p.nbuf < n) {
        bar_sync(kEmpty0 + buf, THREADS);
        load_slab(tile_at(i + p.nbuf), buf);
      }
      bar_sync(kStageFull, THREADS);
      store(off, g);
      if (g + 1 < p.gl || i + 1 < n) bar_arrive(kStageEmpty, THREADS);
    }
    // The next tile's first store waits at kStageFull for every producer: none reuses the ring before this pooling
    // is done.
    pool(t);
  }
}

}  // namespace pyconv::slab
