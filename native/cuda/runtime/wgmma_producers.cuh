// The producer warpgroup that steps 29 and 30 share: it copies each tile's slab of split planes into shared memory
// (wgmma_slab.cuh) for the consumer warpgroups' wgmmas, and stores the (filter, tap column) products they stage,
// each output the sum of its K staged columns. The two steps differ in how their consumers multiply and stage, not
// in this.
#pragma once
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "common/conv_shape.hpp"
#include "cuda/runtime/wgmma_slab.cuh"
#include "cuda/runtime/fast_div.cuh"
#include "cuda/runtime/mbarrier.cuh"
#include "cuda/runtime/named_barrier.cuh"

namespace pyconv::slab {

// Named barriers (named_barrier.cuh) between the warpgroups that multiply (consumers) and the warpgroup that copies
// and stores (producers): slab buffer b empty, the staging area full / empty. A slab buffer is announced full by
// its mbarrier (landed[b]), on which every producer thread's copies arrive as they land: the producers never wait
// for their own copies.
enum Barrier { kEmpty0 = 1, kStageFull = 3, kStageEmpty = 4 };

// What the producers read of a launch: sizes, filter groups, tiles and slab. Each step's Params derives from it and
// adds what its consumers read; its plan() fills this part with set_tiling.
struct Tiling {
  int H, W, Cp, Ho, Wo, P;
  int Mtot;             // the layer's filters: an output image is Mtot * P floats
  int groups, Mg;       // filter groups of Mg filters (the last possibly fewer), each group's pairs in turn
  int gl_max;           // groups a launch holds the weights of (shared memory): launches of gl_max groups
  int g0, gl;           // this launch's first group and its number of groups
  int bands;            // Cp / the channels a band holds
  int per_image;        // 1: tiles start at each image's first position; 0: tiles run on across images
  int tiles_per_image;  // ceil(Ho * W / (TILE - K + 1)) when per_image
  int slab_rows;        // a tile's slab: TILE rows and the rows its taps reach below them
  int band_bytes;       // one band of a slab: slab_rows rows of 4 ch bytes (hi, lo), rounded up to 1024
  int slab_bytes;       // one slab buffer: bands * band_bytes
  int nbuf;             // slab buffers: 2, or 1 where two do not fit beside the weights and the staging area
  long long pixels;     // this launch's images' pixels: images * H * W (below 2^31: a chunk of planes)
  long long tiles;      // this launch's tiles
  FastDiv by_w, by_hw, by_tiles;  // W, H * W, tiles_per_image
};

// Fills t for shape s and the step's choices (tiles of `tile` positions; pixels and tiles are set per chunk of
// images). Tiles per image (each starting at the image's first position) or running on across images: whichever
// computes fewer positions that are never stored.
inline void set_tiling(Tiling& t, const ConvShape& s, int64_t tile, int64_t Cp, int64_t bands, int64_t slab_rows,
                       int64_t band_bytes, int64_t nbuf, int64_t groups, int64_t Mg, int64_t gl_max) {
  const int64_t Ho = s.Ho(), Wo = s.Wo(), tout = tile - (s.K - 1);
  t.H = int(s.H); t.W = int(s.W); t.Cp = int(Cp);
  t.Ho = int(Ho); t.Wo = int(Wo); t.P = int(Ho * Wo); t.Mtot = int(s.M);
  t.groups = int(groups); t.Mg = int(Mg); t.gl_max = int(gl_max); t.g0 = 0; t.gl = int(gl_max);
  t.bands = int(bands);
  t.tiles_per_image = int((Ho * s.W + tout - 1) / tout);
  t.per_image = int64_t(t.tiles_per_image) * tout <= s.H * s.W;
  t.slab_rows = int(slab_rows);
  t.band_bytes = int(band_bytes);
  t.slab_bytes = int(bands * band_bytes);
  t.nbuf = int(nbuf);
  t.pixels = t.tiles = 0;
  t.by_w = FastDiv(uint32_t(s.W));
  t.by_hw = FastDiv(uint32_t(s.H * s.W));
  t.by_tiles = FastDiv(uint32_t(t.tiles_per_image));
}

// Queues a chunk of nb images of the planes: t's pixels and tiles set for it, then launch(blocks, g0) for each
// launch of at most gl_max groups (the weights shared memory holds), from group g0 on, its tiles over at most
// `resident` persistent blocks.
template <class Launch>
void queue_chunk(Tiling& t, int64_t tile, int64_t K, int64_t nb, long long resident, Launch launch) {
  const int64_t tout = tile - (K - 1);
  t.pixels = nb * t.H * t.W;
  t.tiles = t.per_image ? nb * t.tiles_per_image : (t.pixels + tout - 1) / tout;
  const unsigned blocks = unsigned(std::min<long long>(t.tiles, resident));
  for (int64_t g0 = 0; g0 < t.groups; g0 += t.gl_max) {
    t.g0 = int(g0);
    t.gl = int(std::min<int64_t>(t.gl_max, t.groups - g0));
    launch(blocks, g0);
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
