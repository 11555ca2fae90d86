// Step 28 -- gpu-split-f16-wgmma: step 27's slab (a block's input rows loaded once, every tap a shift in shared
// memory) multiplied by Hopper's warpgroup MMA (wgmma), which reads both operands from shared memory itself: no
// ldmatrix, no operand registers, and MMAs queued asynchronously, many deep.
//
// Why: steps 26 and 27 are latency-bound on the sweep's small-image rows, where cuDNN FP32 still wins (s37: C=29
// 29x29 M=19 K=5, 0.64x cuDNN; s17, s08; results/bench-nvidia-h200-2026-11-25-sweep-step27.json). Nsight Compute on
// step 26 there: issue slots 39% busy, 0.55 eligible warps per scheduler, the largest stall waiting on ldmatrix
// results; step 27 cut the L2 traffic and was no faster. mma.sync needs a warp to load every fragment into
// registers and wait for it; wgmma takes a descriptor of the operand in shared memory.
//
// How:
// - The output tile is 128 consecutive positions j = oh * W + ow of one image's FLAT input grid (ow up to W - 1,
//   not Wo - 1): then tap (kh, kw) of the whole tile is the slab's rows j + kh * W + kw, a contiguous run, and the
//   tap's A operand is one descriptor with a shifted start. Positions with ow >= Wo or oh >= Ho are computed and
//   not stored: W / Wo more work (s37: 16%) for operands that need no gather at all.
// - The slab: rows j0 .. j0 + 127 + (K - 1) * W + K - 1 of the image's planes (split_planes.cuh; channels padded
//   to 16), all channels, laid out [plane hi/lo][8-channel group][row] with 16-byte rows: wgmma's no-swizzle
//   K-major layout (cuda/runtime/wgmma_f16.cuh) with the two 8-channel halves of a k16 step one group apart.
//   Double-buffered: the next tile's slab loads (cp.async) while this tile multiplies.
// - The weights of the block's BN filters, all taps and channels, stay in shared memory for the block's life, laid
//   out [tap][8-channel group][hi rows 0..BN-1, lo rows BN..2BN-1][16 bytes]. Blocks are persistent (as many as
//   fit on the GPU), each looping over tiles, so the weights are read from L2 once per block.
// - Per tap and k16 step two wgmmas per warpgroup (2 warpgroups, 64 positions each): A.hi x [B.hi | B.lo] with N =
//   2 BN gives hi*hi and hi*lo side by side, and A.lo x B.hi with N = BN gives lo*hi: step 25's three products per
//   term, with A.hi read once for two of them.
// - Epilogue from registers: each valid position's BN filters written to y (NCHW) as out = hi*hi + 2^-11 (hi*lo +
//   lo*hi).
// - Refused: weights plus two slabs beyond shared memory (deep, wide-filter or wide-image layers; steps 26 and 27
//   take those), and any GPU or build without sm_90a code (wgmma exists only there; the file is compiled for
//   sm_90a besides the build's architectures, CMakeLists.txt).
// - Range: as steps 19-27, a value beyond the FP16 range (|v| > 65504) becomes inf, and the outputs it reaches inf
//   or NaN, never a quietly wrong number.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/kernels/igemm_tiles.cuh"
#include "cuda/kernels/split_planes.cuh"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/mma_f16.cuh"
#include "cuda/runtime/registry.cuh"
#include "cuda/runtime/wgmma_f16.cuh"

namespace pyconv {
namespace {

constexpr int TILE = 128;     // flat positions per tile: one m64 wgmma row block per warpgroup
constexpr int THREADS = 256;  // two warpgroups
constexpr size_t kSmemLimit = igemm::kSmemLimit;

struct Params {
  int H, W, K, Cp, Ho, Wo, P, M;
  int ch;               // channels per band: 16 (C <= 16) or 32
  int bands;            // Cp / ch
  int tiles_per_image;  // ceil(Ho * W / TILE)
  int slab_rows;        // TILE + (K - 1) * W + K - 1
  int band_bytes;       // one band of a slab: slab_rows rows of 4 ch bytes (hi, lo), rounded up to 1024
  int slab_bytes;       // one slab buffer: bands * band_bytes
  int w_bytes;          // the block's weights: K * K * bands tiles of 2 BN rows of 2 ch bytes
  int m_blocks;         // ceil(M / BN)
  int bo;               // base-offset mode of the descriptors
  long long tiles;      // tiles of this launch's images: images * tiles_per_image
};

// Shared memory: the weights, then two slab buffers, from a 1024-byte aligned base (the swizzle's origin).
size_t smem_bytes(const Params& p) { return 1024 + size_t(p.w_bytes) + 2 * size_t(p.slab_bytes); }

// k[m][c][kh][kw] -> w[mb][tap][band][2 BN rows: hi of filters mb*BN.., then their lo][ch halves], zero past C
// and M, each (tap, band) tile swizzled as wgmma reads it (wgmma_f16.cuh): the image of one block's weights in
// shared memory. One thread per 16-byte piece.
__global__ void split_weights(const float* __restrict__ k, uint4* __restrict__ w, int M, int C, int K, int ch,
                              int bands, int BN, long long pieces) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= pieces) return;
  const int per_row = ch / 8, q = int(i % per_row);
  const long long row_i = i / per_row;  // over mb, tap, band, row
  const int row = int(row_i % (2 * BN));
  const long long tile = row_i / (2 * BN);
  const int band = int(tile % bands), tap = int(tile / bands % (K * K));
  const long long mb = tile / bands / (K * K);
  const int m = int(mb) * BN + row % BN;
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int c = band * ch + 8 * q + j;
    v[j] = (m < M && c < C) ? k[((long long)m * C + c) * K * K + tap] : 0.0f;
  }
  uint4 hi, lo;
  planes::split8(v, hi, lo);
  const long long image = (long long)K * K * bands * 2 * BN * 2 * ch;  // bytes of one mb's image
  const uint32_t in_image = uint32_t((tile - mb * K * K * bands) * 2 * BN * 2 * ch + row * 2 * ch + 16 * q);
  w[(mb * image + wgmma::swizzle(in_image, 2 * ch)) / 16] = row < BN ? hi : lo;
}

// 1 where the code that runs was compiled for sm_90a (the only target with wgmma), else 0.
__global__ void has_wgmma(int* flag) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *flag = 1;
#else
  *flag = 0;
#endif
}

template <int BN>
__global__ void __launch_bounds__(THREADS, 1)
    conv28_kernel(const __half* __restrict__ xh, const __half* __restrict__ xl, const uint4* __restrict__ w,
                  float* __restrict__ y, const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ float4 smem4[];
  const uint32_t w_s = (igemm::smem_u32(smem4) + 1023u) & ~1023u, slab0 = w_s + uint32_t(p.w_bytes);
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int mb = int(blockIdx.x % unsigned(p.m_blocks)), n0 = mb * BN;
  const long long step = gridDim.x / unsigned(p.m_blocks);
  long long t = blockIdx.x / unsigned(p.m_blocks);
  const int HW = p.H * p.W, ra = 4 * p.ch, rb = 2 * p.ch;  // row bytes of the slab (A) and the weights (B)

  {  // the block's weights: one contiguous image, already swizzled
    const uint4* src = w + (long long)mb * (p.w_bytes / 16);
    for (int i = tid; i < p.w_bytes / 16; i += THREADS) planes::cp_async16(w_s + 16 * i, src + i, true);
  }
  // Tile t's slab into buffer buf: row r of band b is pixel j0 + r's channels b*ch .. b*ch + ch - 1, hi then lo,
  // swizzled; rows past the image are zero (they reach only positions that are not stored).
  const int per_row = ra / 16, half_row = per_row / 2;
  auto load_slab = [&](long long tile, int buf) {
    const long long b = tile / p.tiles_per_image;
    const int j0 = int(tile - b * p.tiles_per_image) * TILE;
    const long long src0 = (b * HW + j0) * p.Cp;
    const uint32_t dst = slab0 + uint32_t(buf * p.slab_bytes);
    const int pieces = p.slab_rows * p.bands * per_row;
    for (int i = tid; i < pieces; i += THREADS) {
      const int q = i % per_row, rb_i = i / per_row, band = rb_i % p.bands, r = rb_i / p.bands;
      const bool valid = j0 + r < HW, lo = q >= half_row;
      const long long src = valid ? src0 + (long long)r * p.Cp + band * p.ch + 8 * (q - (lo ? half_row : 0)) : 0;
      planes::cp_async16(dst + uint32_t(band * p.band_bytes) + wgmma::swizzle(uint32_t(r * ra + 16 * q), ra),
                         (lo ? xl : xh) + src, valid);
    }
  };
  if (t < p.tiles) load_slab(t, 0);
  asm volatile("cp.async.commit_group;");

  const int KK = p.K * p.K, ksteps = p.ch / 16;
  float hh[BN], lh[BN / 2];  // [hi*hi | hi*lo] and lo*hi; each tile's first wgmma overwrites them
  for (int it = 0; t < p.tiles; ++it, t += step) {
    __syncthreads();  // every warpgroup is done with the buffer the next load overwrites (tile it - 1's)
    if (t + step < p.tiles) load_slab(t + step, (it + 1) & 1);
    asm volatile("cp.async.commit_group;");
    asm volatile("cp.async.wait_group 1;" ::: "memory");  // this tile's slab (and the weights) are in
    wgmma::fence_proxy_async();
    __syncthreads();

    wgmma::fence();
    // A: this warpgroup's 64 rows from row `shift` of a band (hi at the row's start, lo half a row further);
    // B: the (tap, band) tile's 2 BN rows (the first BN alone for lo*hi).
    const uint32_t a_t = slab0 + uint32_t((it & 1) * p.slab_bytes + wg * 64 * ra);
#pragma unroll 1
    for (int tap = 0; tap < KK; ++tap) {
      const int kh = tap / p.K, shift = kh * p.W + (tap - kh * p.K);
#pragma unroll 1
      for (int band = 0; band < p.bands; ++band) {
        const uint32_t a_b = a_t + uint32_t(band * p.band_bytes + shift * ra);
        const uint32_t b_b = w_s + uint32_t((tap * p.bands + band) * 2 * BN * rb);
        for (int ks = 0; ks < ksteps; ++ks) {
          const int accumulate = tap | band | ks;
          const uint64_t b = wgmma::desc(b_b + 32 * ks, rb, p.bo);
          wgmma::mma_f16<2 * BN>(hh, wgmma::desc(a_b + 32 * ks, ra, p.bo), b, accumulate);
          wgmma::mma_f16<BN>(lh, wgmma::desc(a_b + 32 * ks + ra / 2, ra, p.bo), b, accumulate);
        }
      }
    }
    wgmma::commit();
    wgmma::wait<0>();

    // Epilogue: this thread's rows g and g + 8 of its warp's 16, columns 8j + 2c and + 1.
    const long long b = t / p.tiles_per_image;
    const int j0 = int(t - b * p.tiles_per_image) * TILE;
    const int g = lane >> 2, c2 = 2 * (lane & 3);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int j = j0 + wg * 64 + warp * 16 + g + 8 * half, oh = j / p.W, ow = j - oh * p.W;
      if (oh >= p.Ho || ow >= p.Wo) continue;
      float* out = y + (b * p.M + n0) * (long long)p.P + oh * p.Wo + ow;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int n = 8 * nt + c2 + e, r = 4 * nt + 2 * half + e;
          if (n0 + n < p.M) out[(long long)n * p.P] = fmaf(hh[r + BN / 2] + lh[r], kSplitUnscale, hh[r]);
        }
    }
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
#else
  __trap();  // never launched: supports() refuses where this code runs (has_wgmma)
#endif
}

using Kernel = void (*)(const __half*, const __half*, const uint4*, float*, const Params);

struct Config {
  int bn;
  Kernel kernel;
};

// The narrowest filter tile that holds M (wider M runs as several blocks of 64 filters).
const Config& pick(int64_t M) {
  static const Config configs[] = {{8, conv28_kernel<8>},   {16, conv28_kernel<16>}, {24, conv28_kernel<24>},
                                   {32, conv28_kernel<32>}, {48, conv28_kernel<48>}, {64, conv28_kernel<64>}};
  return igemm::narrowest_holding(configs, M);
}

constexpr const char* kName = "gpu-split-f16-wgmma";

// "" when the current device runs this file's sm_90a code, else why not; asked once per device.
std::string wgmma_available() {
  static std::mutex mu;
  static std::vector<int> known;  // per device: -1 not asked, 0 no, 1 yes
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return std::string(kName) + ": no CUDA device";
  }
  std::lock_guard<std::mutex> lock(mu);
  if (known.size() <= size_t(dev)) known.resize(dev + 1, -1);
  if (known[dev] < 0) {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    int yes = 0;
    if (prop.major == 9 && prop.minor == 0) {
      int* flag = nullptr;
      CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
      has_wgmma<<<1, 1>>>(flag);
      const cudaError_t launched = cudaGetLastError();
      if (launched == cudaSuccess) CUDA_CHECK(cudaMemcpy(&yes, flag, sizeof(int), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaFree(flag));
    }
    known[dev] = yes;
  }
  return known[dev] ? "" : std::string(kName) + ": needs a GPU of compute capability 9.0 and this build's sm_90a code "
                                                "(wgmma)";
}

// Fills p for s (the launch's tile count is set per chunk of images); "" when supported, else why not.
std::string plan(const ConvShape& s, Params& p, const Config& c) {
  const int64_t ch = s.C <= 16 ? 16 : 32, Cp = (s.C + ch - 1) / ch * ch, Ho = s.Ho(), Wo = s.Wo();
  if (s.H * s.W * Cp > (int64_t(1) << 30) || s.M * Cp * s.K * s.K > INT_MAX)
    return std::string(kName) + ": an image of " + std::to_string(s.H * s.W * Cp) + " padded values or weights of " +
           std::to_string(s.M * Cp * s.K * s.K) + " exceed its 32-bit offsets";
  const int64_t rows = TILE + (s.K - 1) * s.W + s.K - 1, bands = Cp / ch;
  const int64_t band_bytes = (rows * 4 * ch + 1023) / 1024 * 1024, slab = bands * band_bytes;
  const int64_t wts = s.K * s.K * bands * 2 * c.bn * 2 * ch;
  const int64_t smem = 1024 + wts + 2 * slab;
  if (smem > int64_t(kSmemLimit))
    return std::string(kName) + ": " + std::to_string(c.bn) + " filters' weights (" + std::to_string(wts / 1024) +
           " KB) and two slabs of " + std::to_string(rows) + " rows (" + std::to_string(slab / 1024) +
           " KB each) exceed " + std::to_string(kSmemLimit / 1024) + " KB of shared memory";
  p.H = int(s.H); p.W = int(s.W); p.K = int(s.K); p.Cp = int(Cp);
  p.Ho = int(Ho); p.Wo = int(Wo); p.P = int(Ho * Wo); p.M = int(s.M);
  p.ch = int(ch);
  p.bands = int(bands);
  p.tiles_per_image = int((Ho * s.W + TILE - 1) / TILE);
  p.slab_rows = int(rows);
  p.band_bytes = int(band_bytes);
  p.slab_bytes = int(slab);
  p.w_bytes = int(wts);
  p.m_blocks = int((s.M + c.bn - 1) / c.bn);
  const char* bo = std::getenv("PYCONV_WGMMA_BO");
  p.bo = bo && bo[0] == '1';
  p.tiles = 0;
  return "";
}

}  // namespace

std::string conv_supports_gpu_split_f16_wgmma(const ConvShape& s) {
  Params p{};
  const std::string why = plan(s, p, pick(s.M));
  return why.empty() ? wgmma_available() : why;
}

void conv_fwd_gpu_split_f16_wgmma(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  const Config& c = pick(s.M);
  Params p{};
  std::string why = plan(s, p, c);
  if (why.empty()) why = wgmma_available();
  if (!why.empty()) throw std::invalid_argument(why);
  if (s.B == 0 || s.M == 0) return;

  const size_t smem = smem_bytes(p);
  CUDA_CHECK(cudaFuncSetAttribute(c.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int dev = 0, sms = 0, per_sm = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, c.kernel, THREADS, smem));
  const long long resident = std::max<long long>(1, (long long)sms * std::max(per_sm, 1) / p.m_blocks);
  // The weights' image: m_blocks x (w_bytes / 2) halves, split into "hi" and "lo" halves of the workspace's
  // weight buffer by run_in_chunks (wplane each), which this layout fills as one.
  const size_t wplane = size_t(p.m_blocks) * p.w_bytes / 4;
  planes::run_in_chunks(
      x, s, p.Cp, wplane, st,
      [&](uint4* w, uint4*, unsigned) {
        const long long pieces = (long long)p.m_blocks * p.w_bytes / 16;
        split_weights<<<unsigned((pieces + 255) / 256), 256, 0, st>>>(k, w, int(s.M), int(s.C), int(s.K), p.ch,
                                                                      p.bands, c.bn, pieces);
      },
      [&](const __half* xh, const __half* xl, const __half* w, const __half*, int64_t b0, int64_t nb) {
        p.tiles = nb * p.tiles_per_image;
        const long long blocks = std::min(p.tiles, resident) * p.m_blocks;
        c.kernel<<<unsigned(blocks), THREADS, smem, st>>>(xh, xl, reinterpret_cast<const uint4*>(w),
                                                         y + b0 * s.M * p.P, p);
      });
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-split-f16-wgmma",
    .step = 28,
    .summary = "step 27's slab with Hopper's warpgroup MMA: every tap a shifted shared-memory descriptor, the "
               "weights resident in persistent blocks",
    .launch = conv_fwd_gpu_split_f16_wgmma,
    .supports = conv_supports_gpu_split_f16_wgmma,
    .graph_capturable = false,  // the planes' workspace grows (moves) when a larger layer comes
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
