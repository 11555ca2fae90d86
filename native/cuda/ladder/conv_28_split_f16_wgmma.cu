// Step 28 -- gpu-split-f16-wgmma: step 27's slab (a block's input rows loaded once, every tap a shift in shared
// memory) multiplied by Hopper's warpgroup MMA (wgmma), which reads both operands from shared memory itself: no
// ldmatrix, no operand registers, and MMAs queued asynchronously, many deep.
//
// Why: steps 26 and 27 are latency-bound on the sweep's small-image rows, where cuDNN FP32 still wins (s37: C=29
// 29x29 M=19 K=5, 0.64x cuDNN; s17, s08; results/bench-nvidia-h200-2026-11-25-sweep-step27.json). Nsight Compute on
// step 26 there: issue slots 39% busy, 0.55 eligible warps per scheduler, the largest stall waiting on ldmatrix
// results; step 27 cut the L2 traffic and was no faster. mma.sync needs a warp to load every fragment into
// registers and wait for it; wgmma takes a descriptor of the operand in shared memory.
// Measurements and what was tried: docs/ladder-findings/28.md (docs/ladder.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/runtime/igemm_tiles.cuh"
#include "cuda/runtime/split_planes.cuh"
#include "cuda/runtime/wgmma_slab.cuh"
#include "cuda/runtime/cp_async.cuh"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/mma_f16.cuh"
#include "cuda/runtime/named_barrier.cuh"
#include "cuda/runtime/persistent.cuh"
#include "cuda/runtime/registry.cuh"
#include "cuda/runtime/wgmma_f16.cuh"
#include "cuda/runtime/wgmma_probe.cuh"

namespace pyconv {
namespace {

constexpr int TILE = 128;     // positions per tile: the N of a warpgroup's wgmmas
constexpr int THREADS = 256;  // two warpgroups, each on its own tiles
constexpr size_t kSmemLimit = 227 * 1024;  // sm_90's most per block (opted in): the sweep's s17 needs 221 KB

struct Params {
  int H, W, K, Cp, Ho, Wo, P, M;
  int ch;               // channels per band: 16 (C <= 16) or 32
  int bands;            // Cp / ch
  int per_image;        // 1: tiles start at each image's first position (ceil(Ho * W / TILE) per image); 0: tiles
                        // run on across images
  int tiles_per_image;  // ceil(Ho * W / TILE) when per_image
  int slab_rows;        // TILE + (K - 1) * W + K - 1
  int band_bytes;       // one band of a slab: slab_rows rows of 4 ch bytes (hi, lo), rounded up to 1024
  int slab_bytes;       // one slab buffer: bands * band_bytes
  int w_bytes;          // the weights: K * K * bands tiles of 2 BN rows of 2 ch bytes, + the rows the last
                        // tile's 64-row reads run past its 2 BN
  long long pixels;     // this launch's images' pixels: images * H * W
  long long tiles;      // this launch's tiles
};

// Shared memory: the weights, then two slab buffers per warpgroup, from a 1024-byte aligned base (the swizzle's
// origin).
size_t smem_bytes(const Params& p) { return 1024 + size_t(p.w_bytes) + 4 * size_t(p.slab_bytes); }

// Row R of a (tap, band) weight tile: warp R / 16's rows hold filters 8 (R / 16) .. + 7, hi halves in its rows 0-7
// and lo halves in 8-15, so that an accumulator thread holds a filter's hi and lo products (rows g and g + 8).
__host__ __device__ constexpr int tile_row_filter(int R) { return 8 * (R / 16) + R % 8; }

// k[m][c][kh][kw] -> w[tap][band][2 BN rows (tile_row_filter)][ch halves], zero past C and M and in the rows past
// the last tile, each tile swizzled as wgmma reads it (wgmma_f16.cuh): the image of the weights in shared memory.
// One thread per 16 bytes.
__global__ void split_weights(const float* __restrict__ k, uint4* __restrict__ w, int M, int C, int K, int ch,
                              int bands, int BN, int pieces) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= pieces) return;
  const int per_row = ch / 8, q = i % per_row, row_i = i / per_row, R = row_i % (2 * BN), tile = row_i / (2 * BN);
  const int band = tile % bands, tap = tile / bands, m = tile_row_filter(R);
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int c = band * ch + 8 * q + j;
    v[j] = (m < M && c < C && tap < K * K) ? k[((long long)m * C + c) * K * K + tap] : 0.0f;
  }
  uint4 hi, lo;
  planes::split8(v, hi, lo);
  w[wgmma::swizzle(uint32_t(16 * i), 2 * ch) / 16] = (R % 16) < 8 ? hi : lo;
}

template <int BN, int K>
__global__ void __launch_bounds__(THREADS, 1)
    conv28_kernel(const __half* __restrict__ xh, const __half* __restrict__ xl, const uint4* __restrict__ w,
                  float* __restrict__ y, const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int WG_N = TILE, WG_THREADS = 128;  // a warpgroup's wgmma width and threads
  extern __shared__ float4 smem4[];
  const uint32_t w_s = (smem_addr(smem4) + 1023u) & ~1023u, slab0 = w_s + uint32_t(p.w_bytes);
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int HW = p.H * p.W, ra = 4 * p.ch, rb = 2 * p.ch;  // row bytes of the slab and of the weights
  const int wtid = tid & (WG_THREADS - 1);
  long long t = 2 * (long long)blockIdx.x + wg;  // this warpgroup's tiles: t, t + 2 gridDim.x, ...
  const long long t_step = 2 * (long long)gridDim.x;

  // The weights, by the whole block, before the warpgroups part ways.
  for (int i = tid; i < p.w_bytes / 16; i += THREADS) planes::cp_async16(w_s + 16 * i, w + i, true);
  cp_async_commit();
  cp_async_wait(1);
  wgmma::fence_proxy_async();
  __syncthreads();
  // The first pixel (of the launch's planes) of tile t.
  auto first = [&](long long tile) -> long long {
    if (!p.per_image) return tile * TILE;
    const long long b = tile / p.tiles_per_image;
    return b * HW + (tile - b * p.tiles_per_image) * TILE;
  };
  // Tile t's slab into this warpgroup's buffer buf (wgmma_slab.cuh), by the warpgroup: row r of band b is pixel
  // first(t) + r's channels b*ch .. b*ch + ch - 1, hi then lo, swizzled; rows past the launch's pixels are zero
  // (they reach only positions that are not stored).
  auto load_slab = [&](long long tile, int buf) {
    slab::queue<WG_THREADS>(slab0 + uint32_t((2 * wg + buf) * p.slab_bytes), xh, xl, first(tile), p.slab_rows,
                            p.bands, p.band_bytes, p.Cp, p.ch, p.pixels, wtid);
  };
  if (t < p.tiles) load_slab(t, 0);
  cp_async_commit();

  const int ksteps = p.ch / 16;
  // This thread's filter and positions: rows g (hi) and g + 8 (lo) of its warp's 16 hold filter 8 warp + g;
  // columns 8j + 2c + e (j < 16, e < 2) of its warpgroup's 128 positions.
  const int g = lane >> 2, c2 = 2 * (lane & 3), f = 8 * warp + g;
  float xh_acc[WG_N / 2], xl_acc[WG_N / 2];  // (W.hi | W.lo) * X.hi and (W.hi | W.lo) * X.lo
  // The two warpgroups run their tiles independently (a named barrier each), so that one's epilogue and copies
  // overlap the other's wgmmas.
  for (int it = 0; t < p.tiles; ++it, t += t_step) {
    cp_async_wait(1);  // this tile's slab is in
    wgmma::fence_proxy_async();
    bar_sync(1 + wg, WG_THREADS);  // ... for the warpgroup, and it is done with tile it - 1 and that buffer

    wgmma::fence();
    // A: the (tap, band) weight tile (64 rows read; past 2 BN they are the next tile's, and their products are
    // never used); B: this warpgroup's 128 slab rows from row `shift` (hi at the row's start, lo half a row on).
    const uint64_t x_t = wgmma::desc(slab0 + uint32_t((2 * wg + (it & 1)) * p.slab_bytes), ra);
    const uint64_t w_t = wgmma::desc(w_s, rb);
    // The taps unrolled (K is a template argument): the warps must issue the wgmmas as fast as the tensor cores
    // run them, and a division per tap held them back (Nsight Compute's stall sampling on the sweep's s08).
    const uint32_t row_step = uint32_t(p.W * ra), w_tile = uint32_t(2 * BN * rb);
#pragma unroll 1
    for (int band = 0; band < p.bands; ++band) {
#pragma unroll 1
      for (int ks = 0; ks < ksteps; ++ks) {
        const uint64_t x_bk = wgmma::advance(x_t, uint32_t(band * p.band_bytes + 32 * ks));
        const uint64_t w_bk = wgmma::advance(w_t, uint32_t(band * w_tile + 32 * ks));
#pragma unroll
        for (int kh = 0; kh < K; ++kh)
#pragma unroll
          for (int kw = 0; kw < K; ++kw) {
            const int accumulate = band | ks | kh | kw;
            const uint64_t a = wgmma::advance(w_bk, uint32_t((kh * K + kw) * p.bands) * w_tile);
            const uint64_t x = wgmma::advance(x_bk, kh * row_step + uint32_t(kw * ra));
            wgmma::mma_f16<WG_N>(xh_acc, a, x, accumulate);
            wgmma::mma_f16<WG_N>(xl_acc, a, wgmma::advance(x, ra / 2), accumulate);
          }
      }
    }
    wgmma::commit();
    // While the tensor cores work: the next tile's slab into the other buffer (tile it - 1's, done with).
    if (t + t_step < p.tiles) load_slab(t + t_step, (it + 1) & 1);
    cp_async_commit();
    wgmma::wait<0>();

    // Epilogue: out = W.hi X.hi + 2^-11 (W.lo X.hi + W.hi X.lo), position by position, walking (b, oh, ow) and
    // the output row they fall in.
    if (f < p.M && 8 * warp < BN) {
      const long long pos0 = first(t) + c2;
      long long b = pos0 / HW;
      int j = int(pos0 - b * HW), oh = j / p.W, ow = j - oh * p.W;
      float* row = y + (b * p.M + f) * (long long)p.P + (long long)oh * p.Wo;
      const int n_valid = int(min((long long)(WG_N / 8), (p.pixels - pos0 + 7) / 8));
#pragma unroll
      for (int n = 0; n < WG_N / 8; ++n) {
        if (n >= n_valid) break;
        const int r = 4 * n;
        if (oh < p.Ho && ow < p.Wo) row[ow] = fmaf(xh_acc[r + 2] + xl_acc[r], kSplitUnscale, xh_acc[r]);
        if (ow + 1 < p.W) {  // the second position is on the same input row
          if (oh < p.Ho && ow + 1 < p.Wo) row[ow + 1] = fmaf(xh_acc[r + 3] + xl_acc[r + 1], kSplitUnscale, xh_acc[r + 1]);
        } else if (pos0 + 8 * n + 1 < p.pixels) {  // it starts the next input row (W = ow + 1)
          const bool next_image = oh + 1 == p.H;
          const int h = next_image ? 0 : oh + 1;
          float* r1 = next_image ? y + ((b + 1) * p.M + f) * (long long)p.P : row + p.Wo;
          if (h < p.Ho && p.Wo > 0) r1[0] = fmaf(xh_acc[r + 3] + xl_acc[r + 1], kSplitUnscale, xh_acc[r + 1]);
        }
        ow += 8;  // the next n8 column tile
        while (ow >= p.W) {
          ow -= p.W;
          row += p.Wo;
          if (++oh == p.H) {
            oh = 0;
            ++b;
            row = y + (b * p.M + f) * (long long)p.P;
          }
        }
      }
    }
  }
  cp_async_wait(1);
#else
  __trap();  // never launched: supports() refuses where this code runs (wgmma_probe.cuh)
#endif
}

using Kernel = void (*)(const __half*, const __half*, const uint4*, float*, const Params);

struct Config {
  int bn;
  Kernel kernel;
};

// The narrowest filter tile that holds M (M <= 32: each warp's 16 accumulator rows are 8 filters' hi and lo), for
// K = 1, 3, 5 or 7; nullptr for another K.
template <int K>
const Config& pick_k(int64_t M) {
  static const Config configs[] = {{8, conv28_kernel<8, K>}, {16, conv28_kernel<16, K>}, {24, conv28_kernel<24, K>},
                                   {32, conv28_kernel<32, K>}};
  return igemm::narrowest_holding(configs, M);
}
const Config* pick(int64_t M, int64_t K) {
  switch (K) {
    case 1: return &pick_k<1>(M);
    case 3: return &pick_k<3>(M);
    case 5: return &pick_k<5>(M);
    case 7: return &pick_k<7>(M);
    default: return nullptr;
  }
}

constexpr const char* kName = "gpu-split-f16-wgmma";

// Fills p for s (the launch's pixels and tiles are set per chunk of images); "" when supported, else why not.
std::string plan(const ConvShape& s, Params& p) {
  if (s.M > 32)
    return std::string(kName) + ": M = " + std::to_string(s.M) + " filters; at most 32 (8 per warp, hi and lo in its "
                                                                 "16 accumulator rows)";
  if (!pick(s.M, s.K))
    return std::string(kName) + ": K = " + std::to_string(s.K) + "; its kernels are built for K = 1, 3, 5 and 7";
  const Config& c = *pick(s.M, s.K);
  const int64_t ch = s.C <= 16 ? 16 : 32, Cp = (s.C + ch - 1) / ch * ch, Ho = s.Ho(), Wo = s.Wo();
  if (s.H * s.W * Cp > (int64_t(1) << 30) || s.M * Cp * s.K * s.K > INT_MAX)
    return std::string(kName) + ": an image of " + std::to_string(s.H * s.W * Cp) + " padded values or weights of " +
           std::to_string(s.M * Cp * s.K * s.K) + " exceed its 32-bit offsets";
  const int64_t rows = TILE + (s.K - 1) * s.W + s.K - 1, bands = Cp / ch;
  const int64_t band_bytes = (rows * 4 * ch + 1023) / 1024 * 1024, slab = bands * band_bytes;
  const int64_t wts = (s.K * s.K * bands * 2 * c.bn + 64 - 2 * c.bn) * 2 * ch;
  const int64_t smem = 1024 + wts + 4 * slab;
  if (smem > int64_t(kSmemLimit))
    return std::string(kName) + ": " + std::to_string(c.bn) + " filters' weights (" + std::to_string(wts / 1024) +
           " KB) and four slabs of " + std::to_string(rows) + " rows (" + std::to_string(slab / 1024) +
           " KB each) exceed " + std::to_string(kSmemLimit / 1024) + " KB of shared memory";
  p.H = int(s.H); p.W = int(s.W); p.K = int(s.K); p.Cp = int(Cp);
  p.Ho = int(Ho); p.Wo = int(Wo); p.P = int(Ho * Wo); p.M = int(s.M);
  p.ch = int(ch);
  p.bands = int(bands);
  // Tiles per image (each starting at the image's first position) or running on across images: whichever
  // computes fewer positions that are never stored.
  p.tiles_per_image = int((Ho * s.W + TILE - 1) / TILE);
  p.per_image = int64_t(p.tiles_per_image) * TILE <= s.H * s.W;
  p.slab_rows = int(rows);
  p.band_bytes = int(band_bytes);
  p.slab_bytes = int(slab);
  p.w_bytes = int(wts);
  p.pixels = p.tiles = 0;
  return "";
}

}  // namespace

std::string conv_supports_gpu_split_f16_wgmma(const ConvShape& s) {
  Params p{};
  const std::string why = plan(s, p);
  return why.empty() ? wgmma::unavailable(kName) : why;
}

void conv_fwd_gpu_split_f16_wgmma(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  Params p{};
  std::string why = plan(s, p);
  if (why.empty()) why = wgmma::unavailable(kName);
  if (!why.empty()) throw std::invalid_argument(why);
  if (s.B == 0 || s.M == 0) return;

  const Config& c = *pick(s.M, s.K);
  const size_t smem = smem_bytes(p);
  const long long resident = persistent_blocks(kName, c.kernel, THREADS, smem);
  // The weights' image is w_bytes; run_in_chunks keeps two planes of wplane halves for it, one after the other.
  const size_t wplane = (size_t(p.w_bytes) / 2 + 1) / 2;
  planes::run_in_chunks(
      x, s, p.Cp, wplane, st,
      [&](uint4* w, uint4*, unsigned) {
        const int pieces = p.w_bytes / 16;
        split_weights<<<unsigned((pieces + 255) / 256), 256, 0, st>>>(k, w, int(s.M), int(s.C), int(s.K), p.ch,
                                                                      p.bands, c.bn, pieces);
      },
      [&](const __half* xh, const __half* xl, const __half* w, const __half*, int64_t b0, int64_t nb) {
        p.pixels = nb * s.H * s.W;
        p.tiles = p.per_image ? nb * p.tiles_per_image : (p.pixels + TILE - 1) / TILE;
        const long long blocks = std::min((p.tiles + 1) / 2, resident);
        c.kernel<<<unsigned(blocks), THREADS, smem, st>>>(xh, xl, reinterpret_cast<const uint4*>(w),
                                                         y + b0 * s.M * p.P, p);
      });
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-split-f16-wgmma",
    .step = 28,
    .summary = "step 27's slab on Hopper's warpgroup MMA (sm_90a): filters x 128 positions per wgmma, every tap a "
               "shifted shared-memory descriptor, the weights resident; M <= 32",
    .launch = conv_fwd_gpu_split_f16_wgmma,
    .supports = conv_supports_gpu_split_f16_wgmma,
    .graph_capturable = false,  // the planes' workspace grows (moves) when a larger layer comes
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
