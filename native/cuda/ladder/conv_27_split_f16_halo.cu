// Step 27 -- gpu-split-f16-halo: step 26's split channels-last planes, but a block loads the input rows its 128
// output pixels need ONCE per 16 channels (the tile and its halo) and forms every tap's im2col view from shared
// memory, where steps 25 and 26 gather each input pixel once per tap (K*K times) from L2.
//
// Why: after step 26, the sweep's rows on small images still lost to cuDNN FP32 (a probe launching the variants
// on device buffers, H200, batch 10000): s37 (C=29 29x29 M=19 K=5) 4.2 ms against cuDNN's 2.2, s17 (C=26 26x26
// M=25 K=5) 3.3 against 2.3, s08 (C=11 31x31 M=27 K=5) 3.3 against 1.6, s02 (C=15 24x24 M=38 K=7) 2.8 against
// 2.65. Step 26 moves pixels x K*K*Cp x 4 bytes from L2 into shared memory: 20 GB on s37, 4.4 TB/s over its 4.2
// ms, about what L2 delivers. Here that traffic is the tile's rows (about 2-3x the tile's pixels on these
// shapes) plus the weights, per 16 channels: several times less.
// Measurements and what was tried: docs/ladder-findings/27.md (docs/ladder.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/runtime/igemm_tiles.cuh"
#include "cuda/runtime/split_planes.cuh"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/mma_f16.cuh"
#include "cuda/runtime/registry.cuh"

namespace pyconv {
namespace {

using igemm::BM;   // 128 pixels per block (GEMM rows)
using igemm::LDC;  // pitch of the output staging tile
constexpr int CU = 16;         // channels per depth unit
constexpr int PIX_BYTES = 32;  // one slab pixel of one plane: 16 halves
constexpr size_t kSmemLimit = igemm::kSmemLimit;

struct Params {
  int H, W, K, Cp, Wo, P;
  int cunits;        // Cp / 16
  int slab_rows;     // the most flattened input rows a block's slab holds
  int slab_bytes;    // one plane of one slab buffer: slab_rows * W * 32
  int slab_bufs;     // 2, or 1 when there is one channel unit
  int wpitch;        // bytes of one filter's weights row in shared memory: K * 32 + 16
  int w_bytes;       // one plane of one weights buffer: BN * wpitch
  int m_blocks;      // ceil(M / BN)
  igemm::Params out;  // what store_tile reads: pixels (of this batch chunk), M, P, vec4
};

template <int BN>
struct Tiles {
  static constexpr int WARPS_N = BN >= 48 ? 2 : 1, WARPS_M = 4, THREADS = 32 * WARPS_M * WARPS_N;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, MT = WM / 16, NT = WN / 8;
  static_assert(BN % (8 * WARPS_N) == 0 && MT == 2, "warp tile: 32 pixels x a multiple of 8 filters");
};

// Shared memory: the slab buffers (hi plane, lo plane each), then the two weights buffers (hi, lo each); the
// output staging tile aliases the front.
size_t smem_bytes(const Params& p, int bn) {
  const size_t pipe = size_t(p.slab_bufs) * 2 * p.slab_bytes + size_t(2) * 2 * p.w_bytes;
  return std::max(pipe, size_t(bn) * LDC * 4);
}

// Byte offset of 16-byte piece q (0, 1) of slab pixel s.
__device__ __forceinline__ uint32_t slab_at(int s, int q) {
  return uint32_t(s * PIX_BYTES + ((q ^ ((s >> 2) & 1)) << 4));
}

// k[m][c][kh][kw] -> wh/wl[m][Cp/16][kh][kw][16], zero past C: one thread per 8 halves.
__global__ void split_weights(const float* __restrict__ k, uint4* __restrict__ wh, uint4* __restrict__ wl, int M,
                              int C, int K, int Cp) {
  const long long n = (long long)M * Cp / 8 * K * K;
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int piece = int(i % 2), tap = int(i / 2 % (K * K));
  const long long mc = i / 2 / (K * K);  // m * (Cp / 16) + channel unit
  const int cu = int(mc % (Cp / CU)), m = int(mc / (Cp / CU)), c0 = cu * CU + piece * 8;
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = c0 + j < C ? k[((long long)m * C + c0 + j) * K * K + tap] : 0.0f;
  planes::split8(v, wh[i], wl[i]);
}

template <int BN>
__global__ void __launch_bounds__(Tiles<BN>::THREADS, 512 / Tiles<BN>::THREADS)  // <= 128 registers
    conv27_kernel(const __half* __restrict__ xh, const __half* __restrict__ xl, const __half* __restrict__ wh,
                  const __half* __restrict__ wl, float* __restrict__ y, const Params p) {
  using T = Tiles<BN>;
  constexpr int MT = T::MT, NT = T::NT;
  extern __shared__ float4 smem4[];
  const uint32_t smem_base = smem_addr(smem4);
  const uint32_t w_base = smem_base + uint32_t(p.slab_bufs * 2 * p.slab_bytes);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int mb = int(blockIdx.x % unsigned(p.m_blocks));
  const long long p0 = (long long)(blockIdx.x / unsigned(p.m_blocks)) * BM;  // first pixel (chunk-relative)
  const int n0 = mb * BN;
  const int last = int(min(p0 + BM, p.out.pixels) - 1);

  // The slab: flattened input rows r_first .. r_last_out + K - 1 (row = b*H + h), all W pixels of each.
  auto flat_row = [&](int px) {
    const int b = px / p.P, r = px - b * p.P;
    return b * p.H + r / p.Wo;
  };
  const int r_first = flat_row(int(p0));
  const int slab_pixels = (flat_row(last) - r_first + p.K) * p.W;
  const long long slab_src0 = (long long)r_first * p.W;  // the slab's first pixel in the planes

  // Lane l's pixel in each of its m-tiles, as a slab index (pixels past the chunk take its last pixel).
  const int wm = (warp % T::WARPS_M) * T::WM, wn = (warp / T::WARPS_M) * T::WN;
  int spix[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int px = min(int(p0) + wm + 16 * mt + (lane & 15), last);
    const int b = px / p.P, r = px - b * p.P, oh = r / p.Wo;
    spix[mt] = (b * p.H + oh - r_first) * p.W + (r - oh * p.Wo);
  }

  auto load_slab = [&](int cu) {
    const uint32_t dst = smem_base + uint32_t((cu % p.slab_bufs) * 2 * p.slab_bytes);
    for (int i = tid; i < 2 * slab_pixels; i += T::THREADS) {
      const int s = i >> 1, q = i & 1;
      const long long src = (slab_src0 + s) * p.Cp + cu * CU + 8 * q;
      planes::cp_async16(dst + slab_at(s, q), xh + src, true);
      planes::cp_async16(dst + p.slab_bytes + slab_at(s, q), xl + src, true);
    }
  };
  const int KK = p.K * p.K, pieces = 2 * p.K;  // pieces of 8 channels in one filter's weights row
  auto load_weights = [&](int u) {                // unit u = (channel unit u / K, filter row u % K)
    const int cu = u / p.K, kh = u - cu * p.K;
    const uint32_t dst = w_base + uint32_t((u & 1) * 2 * p.w_bytes);
    for (int i = tid; i < BN * pieces; i += T::THREADS) {
      const int n = i / pieces, j = i - n * pieces;
      const bool valid = n0 + n < p.out.M;
      const long long src = valid ? ((((long long)(n0 + n) * p.cunits + cu) * KK + kh * p.K) * CU + 8 * j) : 0;
      planes::cp_async16(dst + uint32_t(n * p.wpitch + 16 * j), wh + src, valid);
      planes::cp_async16(dst + p.w_bytes + uint32_t(n * p.wpitch + 16 * j), wl + src, valid);
    }
  };

  float acc[MT][NT][4], cor[MT][NT][4];  // hi*hi; hi*lo + lo*hi (scaled by 2^11)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[mt][nt][r] = cor[mt][nt][r] = 0.0f;

  // ldmatrix: A x4 = (pixels 0-7, channels 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) = a0..a3 of an m-tile;
  // B x4 over two n-tiles = (filters 0-7, channels 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15).
  const int a_q = lane >> 4;
  const uint32_t b_lane = uint32_t((wn + (lane & 7) + 8 * (lane >> 4)) * p.wpitch + 16 * ((lane >> 3) & 1));
  const uint32_t b_lane2 = uint32_t((wn + (lane & 7)) * p.wpitch + 16 * ((lane >> 3) & 1));  // an odd last n-tile

  // Groups: the first holds slab 0 and weights 0; unit u then commits two, weights u + 1 and (possibly empty) the
  // next channel unit's slab, so waiting for all but the newest leaves only a slab prefetch in flight.
  load_slab(0);
  load_weights(0);
  asm volatile("cp.async.commit_group;");
  const int units = p.cunits * p.K;
  for (int u = 0; u < units; ++u) {
    const int cu = u / p.K, kh = u - cu * p.K;
    if (u == 0 || p.K == 1)  // K = 1: the newest group is the slab this unit needs
      cp_async_wait_group<0>();
    else
      cp_async_wait_group<1>();
    __syncthreads();  // unit u's operands are in for every thread; unit u - 1's buffers are free
    if (u + 1 < units) load_weights(u + 1);
    asm volatile("cp.async.commit_group;");
    if (kh == 0 && cu + 1 < p.cunits) load_slab(cu + 1);
    asm volatile("cp.async.commit_group;");

    const uint32_t s_h = smem_base + uint32_t((cu % p.slab_bufs) * 2 * p.slab_bytes), s_l = s_h + p.slab_bytes;
    const uint32_t w_h = w_base + uint32_t((u & 1) * 2 * p.w_bytes);
#pragma unroll 1
    for (int kw = 0; kw < p.K; ++kw) {
      const int shift = kh * p.W + kw;
      uint32_t ah[MT][4], al[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const uint32_t at = slab_at(spix[mt] + shift, a_q);
        igemm::ldsm_x4(s_h + at, ah[mt][0], ah[mt][1], ah[mt][2], ah[mt][3]);
        igemm::ldsm_x4(s_l + at, al[mt][0], al[mt][1], al[mt][2], al[mt][3]);
      }
      planes::mma_split_kstep(acc, cor, ah, al,
                              [&](int nt, bool x4) {
                                return w_h + (x4 ? b_lane : b_lane2) + uint32_t(8 * nt * p.wpitch + 32 * kw);
                              },
                              uint32_t(p.w_bytes));
    }
  }

  planes::finish_tile<BN, T::THREADS>(reinterpret_cast<float*>(smem4), acc, cor, wm, wn, y, p.out, p0, n0);
}

using Kernel = void (*)(const __half*, const __half*, const __half*, const __half*, float*, const Params);

struct Config {
  int bn, threads;
  Kernel kernel;
};

template <int BN>
constexpr Config config() {
  return {BN, Tiles<BN>::THREADS, conv27_kernel<BN>};
}

// The narrowest filter tile that holds M (wider M runs as several blocks of 64 filters).
const Config& pick(int64_t M) {
  static const Config configs[] = {config<8>(), config<16>(), config<24>(), config<32>(), config<48>(), config<64>()};
  return igemm::narrowest_holding(configs, M);
}

constexpr const char* kName = "gpu-split-f16-halo";

// Fills p for s (the batch chunk's pixel count is set per launch); "" when supported, else why not.
std::string plan(const ConvShape& s, Params& p, const Config& c) {
  const int64_t Cp = (s.C + CU - 1) / CU * CU, Ho = s.Ho(), Wo = s.Wo(), P = Ho * Wo;
  // Offsets into a chunk's planes are 32-bit (a chunk is at most 256 MB of planes, or one image).
  if (s.H * s.W * Cp > (int64_t(1) << 30) || s.M * Cp * s.K * s.K > INT_MAX)
    return std::string(kName) + ": an image of " + std::to_string(s.H * s.W * Cp) + " padded values or weights of " +
           std::to_string(s.M * Cp * s.K * s.K) + " exceed its 32-bit offsets";
  // The rows a block's 128 consecutive pixels reach: the output rows they span, the rows between images where
  // they cross an image boundary, and the K - 1 rows of the window below the last.
  const int64_t spans = (BM - 1) / Wo + 2, crossings = std::min<int64_t>(s.B - 1, (BM - 1) / P + 1);
  const int64_t rows = std::min<int64_t>(spans + crossings * (s.K - 1), s.B * s.H) + s.K - 1;
  p.H = int(s.H); p.W = int(s.W); p.K = int(s.K); p.Cp = int(Cp);
  p.Wo = int(Wo); p.P = int(P);
  p.cunits = int(Cp / CU);
  p.slab_rows = int(std::min<int64_t>(rows, INT_MAX / 64 / s.W));
  p.slab_bytes = p.slab_rows * p.W * PIX_BYTES;
  p.slab_bufs = p.cunits > 1 ? 2 : 1;
  p.wpitch = p.K * PIX_BYTES + 16;
  p.w_bytes = c.bn * p.wpitch;
  p.m_blocks = int((s.M + c.bn - 1) / c.bn);
  const size_t smem = smem_bytes(p, c.bn);
  if (int64_t(p.slab_rows) < rows || smem > kSmemLimit)
    return std::string(kName) + ": a slab of " + std::to_string(rows) + " rows of " + std::to_string(s.W) +
           " pixels and " + std::to_string(c.bn) + " filters' weights need " + std::to_string(smem / 1024) +
           " KB of shared memory (limit " + std::to_string(kSmemLimit / 1024) + " KB)";
  p.out = igemm::Params{};
  p.out.M = int(s.M);
  p.out.P = p.P;
  p.out.vec4 = p.P % 4 == 0;
  return "";
}

}  // namespace

std::string conv_supports_gpu_split_f16_halo(const ConvShape& s) {
  Params p{};
  return plan(s, p, pick(s.M));
}

void conv_fwd_gpu_split_f16_halo(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  const Config& c = pick(s.M);
  Params p{};
  const std::string why = plan(s, p, c);
  if (!why.empty()) throw std::invalid_argument(why);
  if (s.B == 0 || s.M == 0) return;

  const size_t smem = smem_bytes(p, c.bn);
  CUDA_CHECK(cudaFuncSetAttribute(c.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  planes::run_in_chunks(
      x, s, p.Cp, size_t(s.M) * p.Cp * s.K * s.K, st,
      [&](uint4* wh, uint4* wl, unsigned blocks) {
        split_weights<<<blocks, 256, 0, st>>>(k, wh, wl, int(s.M), int(s.C), int(s.K), p.Cp);
      },
      [&](const __half* xh, const __half* xl, const __half* wh, const __half* wl, int64_t b0, int64_t nb) {
        p.out.pixels = nb * p.P;
        const long long blocks = (p.out.pixels + BM - 1) / BM * p.m_blocks;
        c.kernel<<<unsigned(blocks), c.threads, smem, st>>>(xh, xl, wh, wl, y + b0 * s.M * p.P, p);
      });
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-split-f16-halo",
    .step = 27,
    .summary = "step 26's split channels-last planes, each block's input rows (tile + halo) loaded once per 16 "
               "channels and every tap read from shared memory as a shift",
    .launch = conv_fwd_gpu_split_f16_halo,
    .supports = conv_supports_gpu_split_f16_halo,
    .graph_capturable = false,  // the planes' workspace grows (moves) when a larger layer comes
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
