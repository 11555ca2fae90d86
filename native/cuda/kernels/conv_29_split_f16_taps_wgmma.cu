// Step 29 -- gpu-split-f16-taps-wgmma: step 28 with the filter taps kw folded into the wgmma's M, so that few
// filters no longer leave most of its 64 rows empty.
//
// Why: step 28 is tensor-bound on the sweep's small-image rows where cuDNN FP32 still wins, and 64% of what its
// tensor cores compute there is padding (s37: C=29 29x29 M=19 K=5; 19 filters' hi and lo rows fill 38 of a
// wgmma's 64 rows, their hi rows 19 of the other's; Nsight Compute in step 28's header;
// results/bench-nvidia-h200-2026-11-25-sweep-step28.json: s37 0.72x cuDNN FP32, s17 0.93x).
// Measurements and what was tried: docs/ladder-findings/29.md (docs/ladder.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/runtime/igemm_tiles.cuh"
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

constexpr int TILE = 128;        // positions per tile: the N of every wgmma
constexpr int WG_THREADS = 128;  // a warpgroup
constexpr int MAX_WG = 2;        // 128 accumulators per thread: at most 168 registers a thread beside the producers
constexpr int PRODUCERS = 128;   // a warpgroup that copies the slabs and stores the outputs
constexpr int STAGE_STRIDE = TILE + 8;  // floats per staged row: float2 writes of 8 rows fall in distinct banks
constexpr size_t kSmemLimit = 227 * 1024;
constexpr size_t kMbarBytes = 64;  // an mbarrier per slab buffer, after the staging area
constexpr int64_t kFixedBytes = 1024 + kMbarBytes;  // the swizzle's alignment and the mbarriers

// The producers' part (wgmma_producers.cuh; slab_rows = TILE + (K - 1) * W, and two slab buffers let the next
// tile's slab land while this one is multiplied) and the consumers'.
struct Params : slab::Tiling {
  int R;                // Mg * K (filter, tap column) pairs
  int ch;               // channels per band: 16 (C <= 16) or 32
  int w_bytes;          // a group's weights: K * bands * warpgroups * 2 (hi, lo) tiles of 64 rows of 2 ch bytes
  int stage_bytes;      // R rows of STAGE_STRIDE floats
};

// Shared memory: the weights of gl_max groups, nbuf slab buffers and the staging area, from a 1024-byte aligned
// base (the swizzle's origin).
size_t smem_bytes(const Params& p) {
  return size_t(kFixedBytes) + size_t(p.gl_max) * size_t(p.w_bytes) + size_t(p.nbuf) * size_t(p.slab_bytes) +
         size_t(p.stage_bytes);
}

// k[m][c][kh][kw] -> w[kh][band][warpgroup][hi, lo][64 rows: pairs r = f K + kw][ch halves], zero past C and R,
// each tile swizzled as wgmma reads it (wgmma_f16.cuh): the image of the weights in shared memory. One thread per
// 16 bytes.
__global__ void split_weights(const float* __restrict__ k, uint4* __restrict__ w, int M, int C, int K, int ch,
                              int bands, int wgs, int pieces) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= pieces) return;
  const int per_row = ch / 8, q = i % per_row, row_i = i / per_row, tile = row_i / 64;
  const int part = tile % 2, g = (tile / 2) % wgs, band = (tile / 2 / wgs) % bands, kh = tile / 2 / wgs / bands;
  const int r = 64 * g + row_i % 64, f = r / K, kw = r % K;
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int c = band * ch + 8 * q + j;
    v[j] = (f < M && c < C) ? k[(((long long)f * C + c) * K + kh) * K + kw] : 0.0f;
  }
  uint4 hi, lo;
  planes::split8(v, hi, lo);
  w[wgmma::swizzle(uint32_t(16 * i), 2 * ch) / 16] = part == 0 ? hi : lo;
}

using slab::kEmpty0, slab::kStageEmpty, slab::kStageFull;  // the named barriers (wgmma_producers.cuh)

template <int NWG, int K, int KS>
__global__ void __launch_bounds__(NWG * WG_THREADS + PRODUCERS, 1)
    conv29_kernel(const __half* __restrict__ xh, const __half* __restrict__ xl, const uint4* __restrict__ w,
                  float* __restrict__ y, const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int CONSUMERS = NWG * WG_THREADS, THREADS = CONSUMERS + PRODUCERS;
  constexpr int ch = 16 * KS;           // channels per band
  constexpr int ra = 4 * ch, rb = 2 * ch;  // row bytes of the slab and of the weights
  extern __shared__ float4 smem4[];
  const uint32_t base = smem_addr(smem4), w_s = (base + 1023u) & ~1023u;
  const uint32_t slab0 = w_s + uint32_t(p.gl_max * p.w_bytes);
  float* stage = reinterpret_cast<float*>(reinterpret_cast<char*>(smem4) + (slab0 - base) + p.nbuf * p.slab_bytes);
  uint64_t* landed = reinterpret_cast<uint64_t*>(stage + p.R * STAGE_STRIDE);
  const int tid = threadIdx.x;
  const long long t0 = blockIdx.x, t_step = gridDim.x;
  if (tid < p.nbuf) mbar_init(&landed[tid], PRODUCERS);

  for (int i = tid; i < p.gl * p.w_bytes / 16; i += THREADS) planes::cp_async16(w_s + 16 * i, w + i, true);
  cp_async_commit();
  cp_async_wait(1);
  wgmma::fence_proxy_async();
  __syncthreads();

  // The role, warp-uniform to the compiler (a lane's broadcast): wgmmas in code it sees as divergent are serialised.
  const int warp_id = __shfl_sync(0xffffffffu, tid / 32, 0);
  if (warp_id >= CONSUMERS / 32) {
    // Producers: copy the slabs, store the staged outputs (wgmma_producers.cuh).
    slab::produce<TILE, K, THREADS, PRODUCERS, STAGE_STRIDE>(p, xh, xl, y, stage, landed, slab0, ch,
                                                            tid - CONSUMERS, t0, t_step);
  } else {
    // Consumers: warpgroup g holds pairs 64 g .. 64 g + 63; this thread rows 16 warp + g8 and + 8 of them, columns
    // 8j + c2 + e (j < 16, e < 2).
    const int wg = warp_id >> 2, warp = warp_id & 3, lane = tid & 31;
    const int g8 = lane >> 2, c2 = 2 * (lane & 3), r_lo = 64 * wg + 16 * warp + g8;
    float hi[TILE / 2], lo[TILE / 2];  // W.hi X.hi; W.lo X.hi + W.hi X.lo
    const uint32_t w_tile = uint32_t(64 * rb), row_step = uint32_t(p.W * ra);
    for (long long i = 0, t = t0; t < p.tiles; ++i, t += t_step) {
      const int buf = int(i) & (p.nbuf - 1);
      // Tile t's slab is in (the buffer's use i / nbuf), and its copies made visible to the wgmmas (async proxy).
      mbar_wait(&landed[buf], unsigned(i / p.nbuf) & 1u);
      wgmma::fence_proxy_async();
      wgmma::fence();
      const uint64_t x_t = wgmma::desc(slab0 + uint32_t(buf * p.slab_bytes), ra);
      // The launch's groups in turn over the same slab: each group's rows, staged and stored before the next's.
#pragma unroll 1
      for (int g = 0; g < p.gl; ++g) {
        const uint64_t w_g = wgmma::desc(w_s + uint32_t(g * p.w_bytes + wg * 2 * 64 * rb), rb);
        if (g > 0) wgmma::fence();
#pragma unroll 1
        for (int band = 0; band < p.bands; ++band) {
#pragma unroll
          for (int ks = 0; ks < KS; ++ks) {
            const uint64_t x_bk = wgmma::advance(x_t, uint32_t(band * p.band_bytes + 32 * ks));
            const uint64_t w_bk = wgmma::advance(w_g, uint32_t(band * NWG * 2) * w_tile + uint32_t(32 * ks));
#pragma unroll
            for (int kh = 0; kh < K; ++kh) {
              const int accumulate = band | ks | kh;
              const uint64_t a_hi = wgmma::advance(w_bk, uint32_t(kh * p.bands * NWG * 2) * w_tile);
              const uint64_t x = wgmma::advance(x_bk, kh * row_step);
              wgmma::mma_f16<TILE>(hi, a_hi, x, accumulate);
              wgmma::mma_f16<TILE>(lo, wgmma::advance(a_hi, w_tile), x, accumulate);
              wgmma::mma_f16<TILE>(lo, a_hi, wgmma::advance(x, ra / 2), 1);
            }
          }
        }
        wgmma::commit();
        wgmma::wait<0>();
        // its slab buffer may be refilled after the last group
        if (g + 1 == p.gl && t + p.nbuf * t_step < p.tiles) bar_arrive(kEmpty0 + buf, THREADS);
        if (i > 0 || g > 0) bar_sync(kStageEmpty, THREADS);  // the producers have stored the last group
        // hi + 2^-11 lo, one float per pair and column.
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (r_lo + 8 * h >= p.R) continue;
          float* st = stage + (r_lo + 8 * h) * STAGE_STRIDE + c2;
#pragma unroll
          for (int n = 0; n < TILE / 8; ++n)
            *reinterpret_cast<float2*>(st + 8 * n) =
                make_float2(fmaf(lo[4 * n + 2 * h], kSplitUnscale, hi[4 * n + 2 * h]),
                            fmaf(lo[4 * n + 2 * h + 1], kSplitUnscale, hi[4 * n + 2 * h + 1]));
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

// The kernel of ceil(R / 64) warpgroups for K = 1, 3, 5 or 7 (R <= 128) and bands of 16 or 32 channels; nullptr
// for another K.
template <int K, int KS>
Kernel pick_k(int64_t R) {
  static const Kernel kernels[] = {conv29_kernel<1, K, KS>, conv29_kernel<2, K, KS>};
  return kernels[std::max<int64_t>(1, (R + 63) / 64) - 1];
}
template <int KS>
Kernel pick_ks(int64_t R, int64_t K) {
  switch (K) {
    case 1: return pick_k<1, KS>(R);
    case 3: return pick_k<3, KS>(R);
    case 5: return pick_k<5, KS>(R);
    case 7: return pick_k<7, KS>(R);
    default: return nullptr;
  }
}
Kernel pick(int64_t R, int64_t K, int ch) { return ch == 16 ? pick_ks<1>(R, K) : pick_ks<2>(R, K); }

constexpr const char* kName = "gpu-split-f16-taps-wgmma";

// Fills p for s (the launch's pixels and tiles are set per chunk of images); "" when supported, else why not.
std::string plan(const ConvShape& s, Params& p) {
  if (s.K != 1 && s.K != 3 && s.K != 5 && s.K != 7)
    return std::string(kName) + ": K = " + std::to_string(s.K) + "; its kernels are built for K = 1, 3, 5 and 7";
  // Filter groups: at most 64 * MAX_WG pairs fit the accumulators, so a layer with more runs its filters in G
  // groups of Mg, one after another over each tile's slab: the G whose groups multiply the fewest rows (64 per
  // warpgroup), the fewest groups among equals. s08 (M=27 K=5, 135 pairs): 3 groups of 9 filters, 3 x 64 rows,
  // where 2 groups of 14 would take 2 x 128.
  int64_t G = 0, Mg = 0, rows_best = 0;
  for (int64_t g = 1; g <= s.M; ++g) {
    const int64_t mg = (s.M + g - 1) / g;
    if (mg * s.K > 64 * MAX_WG || (g - 1) * mg >= s.M) continue;
    const int64_t rows_g = g * 64 * ((mg * s.K + 63) / 64);
    if (!G || rows_g < rows_best) G = g, Mg = mg, rows_best = rows_g;
  }
  const int64_t R = Mg * s.K;
  const int64_t ch = s.C <= 16 ? 16 : 32, Cp = (s.C + ch - 1) / ch * ch;
  if (s.H * s.W * Cp > (int64_t(1) << 30))
    return std::string(kName) + ": an image of " + std::to_string(s.H * s.W * Cp) +
           " padded values exceeds its 32-bit offsets";
  const int64_t wgs = std::max<int64_t>(1, (R + 63) / 64), rows = TILE + (s.K - 1) * s.W, bands = Cp / ch;
  const int64_t band_bytes = (rows * 4 * ch + 1023) / 1024 * 1024, slab = bands * band_bytes;
  const int64_t wts = s.K * bands * wgs * 2 * 64 * 2 * ch, stage = R * STAGE_STRIDE * 4;
  const int64_t room = int64_t(kSmemLimit) - kFixedBytes - stage;  // for the weights and the slabs
  // Two slab buffers where they fit beside one group's weights and the staging area, else one (wide images with
  // K = 7: s07, C=29 87x87 M=5, and s35, C=24 46x46 M=64, were refused with two).
  const int64_t nbuf = wts + 2 * slab <= room ? 2 : 1;
  // As many groups' weights as fit beside the slabs and the staging area run in one launch, each group over the
  // slab in turn: the slab copied once for them (s08, three groups: 2.30 ms in one launch, 3.16 in three; the
  // header).
  const int64_t gl_max = std::max<int64_t>(1, std::min(G, (room - nbuf * slab) / wts));
  if (wts + slab > room)
    return std::string(kName) + ": weights (" + std::to_string(wts / 1024) + " KB), a slab of " +
           std::to_string(rows) + " rows (" + std::to_string(slab / 1024) + " KB) and " + std::to_string(R) +
           " staged rows (" + std::to_string(stage / 1024) + " KB) exceed " + std::to_string(kSmemLimit / 1024) +
           " KB of shared memory";
  slab::set_tiling(p, s, TILE, Cp, bands, rows, band_bytes, nbuf, G, Mg, gl_max);
  p.R = int(R);
  p.ch = int(ch);
  p.w_bytes = int(wts);
  p.stage_bytes = int(stage);
  return "";
}

}  // namespace

std::string conv_supports_gpu_split_f16_taps_wgmma(const ConvShape& s) {
  Params p{};
  const std::string why = plan(s, p);
  return why.empty() ? wgmma::unavailable(kName) : why;
}

void conv_fwd_gpu_split_f16_taps_wgmma(const float* x, const float* k, float* y, const ConvShape& s,
                                       cudaStream_t st) {
  Params p{};
  std::string why = plan(s, p);
  if (why.empty()) why = wgmma::unavailable(kName);
  if (!why.empty()) throw std::invalid_argument(why);
  if (s.B == 0 || s.M == 0) return;

  const int64_t R = p.R, wgs = std::max<int64_t>(1, (R + 63) / 64);
  const Kernel kernel = pick(R, s.K, p.ch);
  const int64_t G = p.groups, Mg = p.Mg;
  const auto group_filters = [&](int64_t g) { return std::min(Mg, s.M - g * Mg); };
  const int threads = int(wgs * WG_THREADS + PRODUCERS);
  const size_t smem = smem_bytes(p);
  const long long resident = persistent_blocks(kName, kernel, threads, smem);
  // Each group's weights' image is w_bytes, one after the other; run_in_chunks keeps two planes of wplane halves
  // for them, one after the other.
  const size_t wplane = (size_t(G) * size_t(p.w_bytes) / 2 + 1) / 2;
  planes::run_in_chunks(
      x, s, p.Cp, wplane, st,
      [&](uint4* w, uint4*, unsigned) {
        const int pieces = p.w_bytes / 16;
        for (int64_t g = 0; g < G; ++g)
          split_weights<<<unsigned((pieces + 255) / 256), 256, 0, st>>>(
              k + g * Mg * s.C * s.K * s.K, w + g * pieces, int(group_filters(g)), int(s.C), int(s.K), p.ch, p.bands,
              int(wgs), pieces);
      },
      [&](const __half* xh, const __half* xl, const __half* w, const __half*, int64_t b0, int64_t nb) {
        slab::queue_chunk(p, TILE, s.K, nb, resident, [&](unsigned blocks, int64_t g0) {
          kernel<<<blocks, unsigned(threads), smem, st>>>(
              xh, xl, reinterpret_cast<const uint4*>(w) + g0 * (p.w_bytes / 16), y + b0 * s.M * p.P, p);
        });
      });
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-split-f16-taps-wgmma",
    .step = 29,
    .summary = "step 28 with the taps kw folded into the wgmma's M: (filter, tap column) pairs x 128 positions, "
               "the epilogue adding the K columns; warp-specialised (a producer warpgroup copies and stores); over 128 "
               "pairs, the filters in groups over the same slab",
    .launch = conv_fwd_gpu_split_f16_taps_wgmma,
    .supports = conv_supports_gpu_split_f16_taps_wgmma,
    .graph_capturable = false,  // the planes' workspace grows (moves) when a larger layer comes
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
