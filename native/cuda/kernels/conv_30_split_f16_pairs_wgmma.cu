// Step 30 -- gpu-split-f16-pairs-wgmma: step 29 with the wgmma's operands swapped: 64 positions of the slab in its
// M, the (filter, tap column) pairs in its N, so that a layer's pairs are padded to a multiple of 8, not of 64.
//
// Why: on the sweep's worst row, s08 (C=11 31x31 M=27 K=5: 135 pairs), step 29 multiplies 3 groups of 9 filters x 5
// taps in 64-row warpgroups, 192 rows for 135 pairs, and its tensor pipe is 53% active (Nsight Compute in step 29's
// header): cuDNN FP32's FFT was faster there (results/bench-nvidia-h200-2026-11-29-sweep-pool-flat.json, 0.87x).
// Measurements and what was tried: docs/ladder-findings/30.md (docs/ladder.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "cuda/runtime/split_planes.cuh"
#include "cuda/runtime/wgmma_producers.cuh"
#include "cuda/runtime/wgmma_slab.cuh"
#include "cuda/runtime/cp_async.cuh"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/fast_div.cuh"
#include "cuda/runtime/mbarrier.cuh"
#include "cuda/runtime/mma_f16.cuh"
#include "cuda/runtime/named_barrier.cuh"
#include "cuda/runtime/persistent.cuh"
#include "cuda/runtime/registry.cuh"
#include "cuda/runtime/wgmma_f16.cuh"
#include "cuda/runtime/wgmma_probe.cuh"

namespace pyconv {
namespace {

constexpr int TILE = 128;        // positions per tile: two warpgroups' 64, the wgmma's M
constexpr int WG_THREADS = 128;  // a warpgroup
constexpr int CONSUMERS = 2 * WG_THREADS;
constexpr int PRODUCERS = 128;  // a warpgroup that copies the slabs and stores the outputs
constexpr int THREADS = CONSUMERS + PRODUCERS;
constexpr int N_MAX = 136;  // pairs a group: hi and lo accumulators of N / 2 floats fit 168 registers a thread
constexpr int STAGE_STRIDE = TILE + 4;  // floats per staged row: a warp's stores of 8 positions x 4 pairs in 32 banks
constexpr size_t kSmemLimit = 227 * 1024;
constexpr size_t kMbarBytes = 64;  // an mbarrier per slab buffer, after the staging area
constexpr int64_t kFixedBytes = 1024 + kMbarBytes;  // the swizzle's alignment and the mbarriers

// The producers' part (wgmma_producers.cuh; slab_rows = TILE + (steps - 1) * rows * W) and the consumers'.
struct Params : slab::Tiling {
  int R;                // Mg * K (filter, tap column) pairs
  int N;                // R padded to a multiple of 8 (at least 16): the wgmma's N
  int ch;               // channels per band: 8 (C <= 8), 16 (C <= 16) or 32
  int rows;             // image rows stacked in a pixel of the planes: 8 / C capped at K where C <= 4, else 1
  int steps;            // tap-row steps: ceil(K / rows), each `rows` image rows (slab rows rows * W) on
  int w_pieces;         // a group's weights in 16-byte pieces: steps * bands * 2 tiles of N rows of 32 or 64 bytes
  int w_bytes;          // 16 w_pieces rounded up to 1024 (the slab after the weights keeps the swizzle's origin)
  int stage_bytes;      // R rows of STAGE_STRIDE floats
};

size_t smem_bytes(const Params& p) {
  return size_t(kFixedBytes) + size_t(p.gl_max) * size_t(p.w_bytes) + size_t(p.nbuf) * size_t(p.slab_bytes) +
         size_t(p.stage_bytes);
}

// Bytes of a row of the weights' tiles (wgmma's B: 16 halves deep, or 32 for bands of 32 channels).
__host__ __device__ constexpr int weight_row_bytes(int ch) { return ch == 32 ? 64 : 32; }

// k[m][c][kh][kw] -> w[step][band][tile 0, 1][N rows: pairs r = f K + kw][16 or 32 halves], zero past C, K and
// R, swizzled as wgmma reads its B operand (wgmma_f16.cuh). A step's channel j is channel j % C of tap row
// step * rows + j / C (the planes' stacking: split_images_stacked). Tiles 0 and 1 hold a band's hi and lo halves;
// for bands of 8 channels, whose slab rows are [x hi | x lo], [w hi | 0] and [w lo | w hi] (see the kernel). One
// thread per 16 bytes.
__global__ void split_weights(const float* __restrict__ k, uint4* __restrict__ w, int M, int C, int K, int ch,
                              int bands, int rows, int N, int pieces) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= pieces) return;
  const int rb = weight_row_bytes(ch), per_row = rb / 16, q = i % per_row, row_i = i / per_row, tile = row_i / N;
  const int part = tile % 2, band = (tile / 2) % bands, step = tile / 2 / bands;
  const int r = row_i % N, f = r / K, kw = r % K;
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int cc = band * ch + (ch == 8 ? 0 : 8 * q) + j, c = cc % C, kh = step * rows + cc / C;
    v[j] = (f < M && cc < rows * C && kh < K) ? k[(((long long)f * C + c) * K + kh) * K + kw] : 0.0f;
  }
  uint4 hi, lo;
  planes::split8(v, hi, lo);
  const uint4 piece = ch != 8 ? (part == 0 ? hi : lo) : part == 0 ? (q == 0 ? hi : make_uint4(0, 0, 0, 0))
                                                                  : (q == 0 ? lo : hi);
  w[wgmma::swizzle(uint32_t(16 * i), rb) / 16] = piece;
}

using slab::kEmpty0, slab::kStageEmpty, slab::kStageFull;  // the named barriers (wgmma_producers.cuh)

// N pairs, K x K taps in STEPS tap-row steps (K, or fewer where image rows are stacked), bands of 8, 16 or 32
// channels (KS = 0, 1, 2).
template <int N, int K, int KS, int STEPS>
__global__ void __launch_bounds__(THREADS, 1)
    conv30_kernel(const __half* __restrict__ xh, const __half* __restrict__ xl, const uint4* __restrict__ w,
                  float* __restrict__ y, const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int ch = KS == 0 ? 8 : 16 * KS;                // channels per band
  constexpr int ra = 4 * ch, rb = weight_row_bytes(ch);  // row bytes of the slab and of the weights
  extern __shared__ float4 smem4[];
  const uint32_t base = smem_addr(smem4), w_s = (base + 1023u) & ~1023u;
  const uint32_t slab0 = w_s + uint32_t(p.gl_max * p.w_bytes);
  float* stage = reinterpret_cast<float*>(reinterpret_cast<char*>(smem4) + (slab0 - base) + p.nbuf * p.slab_bytes);
  uint64_t* landed = reinterpret_cast<uint64_t*>(stage + p.R * STAGE_STRIDE);
  const int tid = threadIdx.x;
  const long long t0 = blockIdx.x, t_step = gridDim.x;
  if (tid < p.nbuf) mbar_init(&landed[tid], PRODUCERS);

  for (int g = 0; g < p.gl; ++g)
    for (int i = tid; i < p.w_pieces; i += THREADS)
      planes::cp_async16(w_s + uint32_t(g * p.w_bytes + 16 * i), w + g * (p.w_bytes / 16) + i, true);
  cp_async_commit();
  cp_async_wait(1);
  wgmma::fence_proxy_async();
  __syncthreads();

  // The role, warp-uniform to the compiler (a lane's broadcast): wgmmas in code it sees as divergent are serialised.
  const int warp_id = __shfl_sync(0xffffffffu, tid / 32, 0);
  if (warp_id >= CONSUMERS / 32) {
    // Producers: step 29's (wgmma_producers.cuh), with this step's staging stride.
    slab::produce<TILE, K, THREADS, PRODUCERS, STAGE_STRIDE>(p, xh, xl, y, stage, landed, slab0, ch,
                                                            tid - CONSUMERS, t0, t_step);
  } else {
    // Consumers: warpgroup wg holds positions 64 wg .. 64 wg + 63 of the tile; this thread positions 16 warp + g8
    // and + 8 of them, pairs 8j + c2 + e (j < N / 8, e < 2).
    const int wg = warp_id >> 2, warp = warp_id & 3, lane = tid & 31;
    const int g8 = lane >> 2, c2 = 2 * (lane & 3), pos = 64 * wg + 16 * warp + g8;
    float hi[N / 2], lo[N / 2];  // X.hi W.hi; X.hi W.lo + X.lo W.hi
    const uint32_t w_tile = uint32_t(N * rb), row_step = uint32_t(p.rows * p.W * ra);
    for (long long i = 0, t = t0; t < p.tiles; ++i, t += t_step) {
      const int buf = int(i) & (p.nbuf - 1);
      mbar_wait(&landed[buf], unsigned(i / p.nbuf) & 1u);
      wgmma::fence_proxy_async();
      wgmma::fence();
      const uint64_t x_t = wgmma::desc(slab0 + uint32_t(buf * p.slab_bytes + 64 * wg * ra), ra);
#pragma unroll 1
      for (int g = 0; g < p.gl; ++g) {
        const uint64_t w_g = wgmma::desc(w_s + uint32_t(g * p.w_bytes), rb);
        if (g > 0) wgmma::fence();
#pragma unroll 1
        for (int band = 0; band < p.bands; ++band) {
#pragma unroll
          for (int ks = 0; ks < (KS > 0 ? KS : 1); ++ks) {
            const uint64_t x_bk = wgmma::advance(x_t, uint32_t(band * p.band_bytes + 32 * ks));
            const uint64_t w_bk = wgmma::advance(w_g, uint32_t(band * 2) * w_tile + uint32_t(32 * ks));
#pragma unroll
            for (int kh = 0; kh < STEPS; ++kh) {  // tap-row step kh (a tap row each but where rows are stacked)
              const int accumulate = band | ks | kh;
              const uint64_t b_hi = wgmma::advance(w_bk, uint32_t(kh * p.bands * 2) * w_tile);
              const uint64_t x = wgmma::advance(x_bk, kh * row_step);
              if constexpr (KS == 0) {
                // Bands of 8 channels: a slab row [x hi | x lo] is one k16 step, so two wgmmas, not three, at
                // full depth: against [w hi | 0] the hi product, against [w lo | w hi] both corrections.
                wgmma::mma_f16<N>(hi, x, b_hi, accumulate);
                wgmma::mma_f16<N>(lo, x, wgmma::advance(b_hi, w_tile), accumulate);
              } else {
                wgmma::mma_f16<N>(hi, x, b_hi, accumulate);
                wgmma::mma_f16<N>(lo, x, wgmma::advance(b_hi, w_tile), accumulate);
                wgmma::mma_f16<N>(lo, wgmma::advance(x, ra / 2), b_hi, 1);
              }
            }
          }
        }
        wgmma::commit();
        wgmma::wait<0>();
        if (g + 1 == p.gl && t + p.nbuf * t_step < p.tiles) bar_arrive(kEmpty0 + buf, THREADS);
        if (i > 0 || g > 0) bar_sync(kStageEmpty, THREADS);  // the producers have stored the last group
        // hi + 2^-11 lo, one float per pair and position; padded pairs are not staged.
#pragma unroll
        for (int j = 0; j < N / 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int r = 8 * j + c2 + e;
            if (r >= p.R) continue;
            float* st = stage + r * STAGE_STRIDE + pos;
            st[0] = fmaf(lo[4 * j + e], kSplitUnscale, hi[4 * j + e]);
            st[8] = fmaf(lo[4 * j + 2 + e], kSplitUnscale, hi[4 * j + 2 + e]);
          }
        bar_arrive(kStageFull, THREADS);
      }
    }
  }
#else
  __trap();  // never launched: supports() refuses where this code runs (wgmma_probe.cuh)
#endif
}

using Kernel = void (*)(const __half*, const __half*, const uint4*, float*, const Params);

// The kernel of N = 16 .. N_MAX pairs (a multiple of 8) for K, bands of 8, 16 or 32 channels (KS 0, 1, 2) and
// the tap-row steps plan() gives.
using Ns = std::make_integer_sequence<int, N_MAX / 8 - 1>;
template <int K, int KS, int STEPS, int... Is>
Kernel pick_n(int N, std::integer_sequence<int, Is...>) {
  static const Kernel kernels[] = {conv30_kernel<8 * (Is + 2), K, KS, STEPS>...};
  return kernels[N / 8 - 2];
}
template <int KS>
Kernel pick_ks(int N, int64_t K) {
  switch (K) {
    case 1: return pick_n<1, KS, 1>(N, Ns{});
    case 3: return pick_n<3, KS, 3>(N, Ns{});
    case 5: return pick_n<5, KS, 5>(N, Ns{});
    case 7: return pick_n<7, KS, 7>(N, Ns{});
    default: return nullptr;
  }
}
// Bands of 8 channels: C <= 4 stacks 8 / C image rows (at most K), so K taps take ceil(K / rows) steps.
Kernel pick_stacked(int N, int64_t K, int64_t steps) {
  if (steps == K) return pick_ks<0>(N, K);
  switch (K * 8 + steps) {
    case 3 * 8 + 1: return pick_n<3, 0, 1>(N, Ns{});
    case 3 * 8 + 2: return pick_n<3, 0, 2>(N, Ns{});
    case 5 * 8 + 1: return pick_n<5, 0, 1>(N, Ns{});
    case 5 * 8 + 2: return pick_n<5, 0, 2>(N, Ns{});
    case 5 * 8 + 3: return pick_n<5, 0, 3>(N, Ns{});
    case 7 * 8 + 1: return pick_n<7, 0, 1>(N, Ns{});
    case 7 * 8 + 2: return pick_n<7, 0, 2>(N, Ns{});
    case 7 * 8 + 4: return pick_n<7, 0, 4>(N, Ns{});
    default: return nullptr;
  }
}
Kernel pick(int N, int64_t K, int ch, int64_t steps) {
  return ch == 8 ? pick_stacked(N, K, steps) : ch == 16 ? pick_ks<1>(N, K) : pick_ks<2>(N, K);
}

constexpr const char* kName = "gpu-split-f16-pairs-wgmma";

// The padded pairs of mg filters of K taps: a multiple of 8, at least 16 (the smallest N built).
int64_t padded(int64_t mg, int64_t K) { return std::max<int64_t>(16, (mg * K + 7) / 8 * 8); }

// Fills p for s (the launch's pixels and tiles are set per chunk of images); "" when supported, else why not.
std::string plan(const ConvShape& s, Params& p) {
  if (s.K != 1 && s.K != 3 && s.K != 5 && s.K != 7)
    return std::string(kName) + ": K = " + std::to_string(s.K) + "; its kernels are built for K = 1, 3, 5 and 7";
  // Bands of 8 channels where C <= 8: half the planes' bytes and two wgmmas a tap row, not three (the kernel); where
  // C <= 4, 8 / C tap rows (at most K) stacked in them, a step of two wgmmas for them all.
  const int64_t ch = s.C <= 8 ? 8 : s.C <= 16 ? 16 : 32, Cp = (s.C + ch - 1) / ch * ch;
  const int64_t stacked = s.C <= 4 ? std::min<int64_t>(s.K, 8 / std::max<int64_t>(s.C, 1)) : 1;
  const int64_t steps = (s.K + stacked - 1) / stacked;
  if (s.H * s.W * Cp > (int64_t(1) << 30))
    return std::string(kName) + ": an image of " + std::to_string(s.H * s.W * Cp) +
           " padded values exceeds its 32-bit offsets";
  const int64_t rows = TILE + (steps - 1) * stacked * s.W, bands = Cp / ch;
  const int64_t band_bytes = (rows * 4 * ch + 1023) / 1024 * 1024, slab = bands * band_bytes;
  // Filter groups: at most N_MAX pairs fit the accumulators, so a layer with more runs its filters in G groups of
  // Mg, one after another over each tile's slab. Of the groupings whose weights, slab and staging area fit shared
  // memory, the one whose wgmmas cost the fewest cycles, the fewest groups among equals. Per wgmma (64 x N x 16):
  // the larger of its tensor work, N / 2 cycles at 2048 products a cycle, and its reading of A (2 KB) and B (32 N
  // bytes) from shared memory at 128 bytes a cycle, 16 + N / 4.
  struct Layout {
    int64_t g, mg, n, R, pieces, wts, stage, room;
  };
  const auto layout = [&](int64_t g) {
    Layout l{g, (s.M + g - 1) / g};
    l.n = padded(l.mg, s.K);
    l.R = l.mg * s.K;
    l.pieces = steps * bands * 2 * l.n * weight_row_bytes(int(ch)) / 16;
    l.wts = (16 * l.pieces + 1023) / 1024 * 1024;
    l.stage = l.R * STAGE_STRIDE * 4;
    l.room = int64_t(kSmemLimit) - kFixedBytes - l.stage;  // for the weights and the slabs
    return l;
  };
  Layout best{}, least{};  // the cheapest that fits; the one needing the least shared memory
  int64_t cost_best = 0;
  for (int64_t g = 1; g <= s.M; ++g) {
    const Layout l = layout(g);
    if (l.n > N_MAX || (g - 1) * l.mg >= s.M) continue;
    if (!least.g || l.wts + l.stage < least.wts + least.stage) least = l;
    const int64_t cost = g * std::max(l.n / 2, 16 + l.n / 4);
    if (l.wts + slab <= l.room && (!best.g || cost < cost_best)) best = l, cost_best = cost;
  }
  if (!best.g)
    return std::string(kName) + ": weights (" + std::to_string(least.wts / 1024) + " KB), a slab of " +
           std::to_string(rows) + " rows (" + std::to_string(slab / 1024) + " KB) and " + std::to_string(least.R) +
           " staged rows (" + std::to_string(least.stage / 1024) + " KB) exceed " +
           std::to_string(kSmemLimit / 1024) + " KB of shared memory (" + std::to_string(least.g) + " groups of " + std::to_string(least.mg) +
           " filters)";
  const int64_t G = best.g, Mg = best.mg, N = best.n, R = best.R, pieces = best.pieces, wts = best.wts;
  const int64_t stage = best.stage, room = best.room;
  const int64_t nbuf = wts + 2 * slab <= room ? 2 : 1;
  const int64_t gl_max = std::max<int64_t>(1, std::min(G, (room - nbuf * slab) / wts));
  slab::set_tiling(p, s, TILE, Cp, bands, rows, band_bytes, nbuf, G, Mg, gl_max);
  p.R = int(R);
  p.N = int(N);
  p.ch = int(ch);
  p.rows = int(stacked);
  p.steps = int(steps);
  p.w_pieces = int(pieces);
  p.w_bytes = int(wts);
  p.stage_bytes = int(stage);
  return "";
}

}  // namespace

std::string conv_supports_gpu_split_f16_pairs_wgmma(const ConvShape& s) {
  Params p{};
  const std::string why = plan(s, p);
  return why.empty() ? wgmma::unavailable(kName) : why;
}

void conv_fwd_gpu_split_f16_pairs_wgmma(const float* x, const float* k, float* y, const ConvShape& s,
                                        cudaStream_t st) {
  Params p{};
  std::string why = plan(s, p);
  if (why.empty()) why = wgmma::unavailable(kName);
  if (!why.empty()) throw std::invalid_argument(why);
  if (s.B == 0 || s.M == 0) return;

  const int64_t G = p.groups, Mg = p.Mg;
  const Kernel kernel = pick(p.N, s.K, p.ch, p.steps);
  const auto group_filters = [&](int64_t g) { return std::min(Mg, s.M - g * Mg); };
  const size_t smem = smem_bytes(p);
  const long long resident = persistent_blocks(kName, kernel, THREADS, smem);
  // Each group's weights' image is w_bytes, one after the other; run_in_chunks keeps two planes of wplane halves
  // for them, one after the other.
  const size_t wplane = (size_t(G) * size_t(p.w_bytes) / 2 + 1) / 2;
  planes::run_in_chunks(
      x, s, p.Cp, wplane, st,
      [&](uint4* w, uint4*, unsigned) {
        for (int64_t g = 0; g < G; ++g)
          split_weights<<<unsigned((p.w_pieces + 255) / 256), 256, 0, st>>>(
              k + g * Mg * s.C * s.K * s.K, w + g * (p.w_bytes / 16), int(group_filters(g)), int(s.C), int(s.K),
              p.ch, p.bands, p.rows, p.N, p.w_pieces);
      },
      [&](const __half* xh, const __half* xl, const __half* w, const __half*, int64_t b0, int64_t nb) {
        slab::queue_chunk(p, TILE, s.K, nb, resident, [&](unsigned blocks, int64_t g0) {
          kernel<<<blocks, unsigned(THREADS), smem, st>>>(
              xh, xl, reinterpret_cast<const uint4*>(w) + g0 * (p.w_bytes / 16), y + b0 * s.M * p.P, p);
        });
      },
      p.rows);
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-split-f16-pairs-wgmma",
    .step = 30,
    .summary = "step 29 with the wgmma's operands swapped: 64 positions in its M, the (filter, tap column) pairs in "
               "its N (padded to 8, not 64); warp-specialised, the filters in groups over the same slab; C <= 8 in "
               "bands of 8 channels, image rows stacked in them where C <= 4",
    .launch = conv_fwd_gpu_split_f16_pairs_wgmma,
    .supports = conv_supports_gpu_split_f16_pairs_wgmma,
    .graph_capturable = false,  // the planes' workspace grows (moves) when a larger layer comes
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
