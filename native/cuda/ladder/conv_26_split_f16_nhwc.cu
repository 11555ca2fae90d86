// Step 26 -- gpu-split-f16-nhwc: step 25's FP32-accurate implicit GEMM with its operands split ONCE, before the
// GEMM, into FP16 hi/lo planes laid out channels-last (NHWC, channels padded to a multiple of 8), so that the
// im2col gather moves 16 bytes (8 channels) per copy and the MMA loop runs ldmatrix + mma.sync only.
//
// Why: on the general-shape sweep (results/bench-nvidia-h200-2026-11-24-sweep-step25.json, H200, batch 10000) the
// rows where cuDNN FP32 still wins are mid-depth layers on small images: s37 (C=29 29x29 M=19 K=5) at 0.42x
// cuDNN, s02 (C=15 24x24 M=38 K=7) 0.56x, s17 (C=26 26x26 M=25 K=5) 0.62x, s35 (C=24 46x46 M=64 K=7) 0.70x, s21
// 0.98x. Their best float32 variants (steps 20 and 25) reach 32-47 TFLOP/s counted as direct convolution flops.
// Nsight Compute on step 25 (its file) found it issue- and L1-bound at once: a 4-byte cp.async per gathered
// float (4096 per 128x32 chunk), and every operand split into hi + lo halves inside the MMA loop by each warp
// that reads it (A by 1-2 warps, B by 4).
// Measurements and what was tried: docs/ladder-findings/26.md (docs/ladder.md).
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

using igemm::BM;      // 128 pixels per block (GEMM rows)
using igemm::LDC;     // pitch of the output staging tile
constexpr int STAGES = 2;  // cp.async stages: 2, 3 and 4 timed (the file's header)
constexpr int BKH = 32;           // depth (halves) per pipeline stage: 4 groups of 8 channels
constexpr int ROW_BYTES = 64;     // one tile row: 32 halves
constexpr size_t kSmemLimit = igemm::kSmemLimit;

struct Params {
  int H, W, K, Cp, Wo, P;  // Cp: channels rounded up to 8 (the planes' channel pitch)
  int D;                   // K*K*Cp: the GEMM depth
  int Dp;                  // D rounded up to BKH: the weight planes' row pitch (zeros past D)
  int kchunks;             // Dp / BKH
  int m_blocks;            // ceil(M / BN)
  igemm::Params out;       // what store_tile reads: pixels (of this batch chunk), M, P, vec4
};

template <int BN>
struct Tiles {
  static constexpr int WARPS_N = BN >= 48 ? 2 : 1, WARPS_M = 4, THREADS = 32 * WARPS_M * WARPS_N;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, MT = WM / 16, NT = WN / 8;
  static constexpr int A_BYTES = BM * ROW_BYTES, B_BYTES = BN * ROW_BYTES;
  static constexpr int STAGE_BYTES = 2 * (A_BYTES + B_BYTES);  // hi then lo of A, then hi then lo of B
  static constexpr int ROWS_PER_PASS = THREADS / 4;            // rows one copy instruction of the block covers
  static_assert(BN % (8 * WARPS_N) == 0 && MT == 2, "warp tile: 32 pixels x a multiple of 8 filters");
  static_assert(BN * LDC * 4 <= STAGES * STAGE_BYTES, "the output staging tile aliases the pipeline stages");
  static_assert(BM % ROWS_PER_PASS == 0 && BN <= ROWS_PER_PASS, "A in whole passes, B in one");
};

// Byte offset of 16-byte piece `q` (0..3) of tile row `row`: swizzled so that an ldmatrix phase (8 consecutive
// rows, one piece) touches 8 distinct 16-byte bank groups: rows 2j and 2j+1 share a 128-byte line.
__device__ __forceinline__ uint32_t swz(int row, int q) {
  return uint32_t(row * ROW_BYTES + ((q ^ ((row >> 1) & 3)) << 4));
}

// --- the pre-passes ---------------------------------------------------------------------------------------------

// k[m][c][kh][kw] -> wh/wl[m][Dp] in depth order (kh, kw, c), zero past C and past D: one thread per 8 halves.
__global__ void split_weights(const float* __restrict__ k, uint4* __restrict__ wh, uint4* __restrict__ wl, int M,
                              int C, int K, int Cp, int Dp) {
  const int groups = Dp / 8;
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= (long long)M * groups) return;
  const int m = int(i / groups), d = int(i % groups) * 8, tap = d / Cp, c0 = d % Cp;
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int c = c0 + j;
    v[j] = (tap < K * K && c < C) ? k[((long long)m * C + c) * K * K + tap] : 0.0f;
  }
  planes::split8(v, wh[i], wl[i]);
}

// --- the GEMM ---------------------------------------------------------------------------------------------------

template <int BN>
__global__ void __launch_bounds__(Tiles<BN>::THREADS, 512 / Tiles<BN>::THREADS)  // <= 128 registers
    conv26_kernel(const __half* __restrict__ xh, const __half* __restrict__ xl, const __half* __restrict__ wh,
                  const __half* __restrict__ wl, float* __restrict__ y, const Params p) {
  using T = Tiles<BN>;
  constexpr int MT = T::MT, NT = T::NT, RPP = T::ROWS_PER_PASS;
  extern __shared__ float4 smem4[];
  int* s_tap = reinterpret_cast<int*>(reinterpret_cast<char*>(smem4) + STAGES * T::STAGE_BYTES);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int mb = int(blockIdx.x % unsigned(p.m_blocks));
  const long long p0 = (long long)(blockIdx.x / unsigned(p.m_blocks)) * BM;  // first pixel of the chunk's rows
  const int n0 = mb * BN;

  // The tap table: offset (in halves, from a pixel's window corner) of each 8-channel group of the depth.
  // Groups past D point at the corner itself: their weights are 0, and an inf or NaN there only reaches an
  // output whose window holds it anyway.
  for (int i = tid; i < p.kchunks * 4; i += T::THREADS) {
    const int d = 8 * i, tap = d / p.Cp;
    s_tap[i] = d < p.D ? ((tap / p.K) * p.W + tap % p.K) * p.Cp + d % p.Cp : 0;
  }
  // Copy roles: 8-channel group q = tid % 4 of rows tid / 4 + RPP * j. A pixel past the chunk gathers its last
  // pixel (never stored); a filter past M is zero-filled.
  const int q = tid & 3, r0 = tid >> 2;
  constexpr int AJ = BM / RPP;
  int abase[AJ];
#pragma unroll
  for (int j = 0; j < AJ; ++j) {
    const int px = int(min(p0 + r0 + RPP * j, p.out.pixels - 1));
    const int b = px / p.P, r = px - b * p.P, oh = r / p.Wo, ow = r - oh * p.Wo;
    abase[j] = ((b * p.H + oh) * p.W + ow) * p.Cp;  // the tap table holds each group's channel offset
  }
  const bool b_row = r0 < BN, b_valid = b_row && n0 + r0 < p.out.M;
  const int wrow = b_valid ? (n0 + r0) * p.Dp + 8 * q : 0;
  __syncthreads();  // the tap table is in

  const uint32_t smem_base = smem_addr(smem4);
  auto load_stage = [&](int kb, int s) {
    const uint32_t st = smem_base + uint32_t(s * T::STAGE_BYTES);
    const int ofs = s_tap[kb * 4 + q];
#pragma unroll
    for (int j = 0; j < AJ; ++j) {
      const uint32_t dst = st + swz(r0 + RPP * j, q);
      planes::cp_async16(dst, xh + (abase[j] + ofs), true);
      planes::cp_async16(dst + T::A_BYTES, xl + (abase[j] + ofs), true);
    }
    if (b_row) {
      const uint32_t dst = st + 2 * T::A_BYTES + swz(r0, q);
      planes::cp_async16(dst, wh + (wrow + kb * BKH), b_valid);
      planes::cp_async16(dst + T::B_BYTES, wl + (wrow + kb * BKH), b_valid);
    }
  };

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < p.kchunks) load_stage(s, s);
    asm volatile("cp.async.commit_group;");
  }

  const int wm = (warp % T::WARPS_M) * T::WM, wn = (warp / T::WARPS_M) * T::WN;
  float acc[MT][NT][4], cor[MT][NT][4];  // hi*hi; hi*lo + lo*hi (scaled by 2^11)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[mt][nt][r] = cor[mt][nt][r] = 0.0f;

  // ldmatrix rows: A x4 = (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) = a0..a3; B x4 over two
  // n-tiles = (filters 0-7, k 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15) = b0, b1 of each.
  const int a_row = wm + (lane & 15), a_q = lane >> 4;
  const int b_row0 = wn + (lane & 7) + 8 * (lane >> 4), b_q = (lane >> 3) & 1;

  for (int kb = 0; kb < p.kchunks; ++kb) {
    cp_async_wait_group<STAGES - 2>();
    __syncthreads();  // chunk kb is in for every thread; everyone is done with the stage the next load overwrites
    {
      const int next = kb + STAGES - 1;
      if (next < p.kchunks) load_stage(next, next % STAGES);
      asm volatile("cp.async.commit_group;");
    }
    const uint32_t a_s = smem_base + uint32_t((kb % STAGES) * T::STAGE_BYTES);
    const uint32_t b_s = a_s + 2 * T::A_BYTES;
#pragma unroll
    for (int kk = 0; kk < BKH / 16; ++kk) {
      uint32_t ah[MT][4], al[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const uint32_t at = a_s + swz(a_row + 16 * mt, 2 * kk + a_q);
        igemm::ldsm_x4(at, ah[mt][0], ah[mt][1], ah[mt][2], ah[mt][3]);
        igemm::ldsm_x4(at + T::A_BYTES, al[mt][0], al[mt][1], al[mt][2], al[mt][3]);
      }
      planes::mma_split_kstep(acc, cor, ah, al,
                              [&](int nt, bool x4) {
                                return b_s + swz((x4 ? b_row0 : wn + (lane & 7)) + 8 * nt, 2 * kk + b_q);
                              },
                              uint32_t(T::B_BYTES));
    }
  }

  planes::finish_tile<BN, T::THREADS>(reinterpret_cast<float*>(smem4), acc, cor, wm, wn, y, p.out, p0, n0);
}

using Kernel = void (*)(const __half*, const __half*, const __half*, const __half*, float*, const Params);

struct Config {
  int bn, threads, stage_bytes;
  Kernel kernel;
};

template <int BN>
constexpr Config config() {
  return {BN, Tiles<BN>::THREADS, Tiles<BN>::STAGE_BYTES, conv26_kernel<BN>};
}

// The narrowest filter tile that holds M (wider M runs as several blocks of 64 filters).
const Config& pick(int64_t M) {
  static const Config configs[] = {config<8>(), config<16>(), config<24>(), config<32>(), config<48>(), config<64>()};
  return igemm::narrowest_holding(configs, M);
}

constexpr const char* kName = "gpu-split-f16-nhwc";

int64_t padded_channels(const ConvShape& s) { return (s.C + 7) / 8 * 8; }

// Shared memory of a block: the pipeline's stages, then the tap table (one int per 8-channel group of the depth).
size_t smem_bytes(int stage_bytes, int kchunks) { return size_t(STAGES) * stage_bytes + size_t(kchunks) * 16; }

// Fills p for s (the batch chunk's pixel count is set per launch); "" when supported, else why not.
std::string plan(const ConvShape& s, Params& p, const Config& c) {
  const int64_t Cp = padded_channels(s), D = s.K * s.K * Cp, Dp = (D + BKH - 1) / BKH * BKH;
  // Offsets into a chunk's planes and the weights' are 32-bit: one image's planes (a chunk holds at least one)
  // and the weight planes must stay below 2^31 halves.
  if (s.H * s.W * Cp > (int64_t(1) << 30) || s.M * Dp > INT_MAX)
    return std::string(kName) + ": an image of " + std::to_string(s.H * s.W * Cp) + " padded values or weights of " +
           std::to_string(s.M * Dp) + " exceed its 32-bit offsets";
  const int64_t kchunks = Dp / BKH;
  const size_t smem = smem_bytes(c.stage_bytes, int(kchunks));
  if (smem > kSmemLimit)
    return std::string(kName) + ": a depth of " + std::to_string(D) + " padded taps needs a tap table beyond " +
           std::to_string(kSmemLimit / 1024) + " KB of shared memory";
  p.H = int(s.H); p.W = int(s.W); p.K = int(s.K); p.Cp = int(Cp);
  p.Wo = int(s.Wo()); p.P = int(s.Ho() * s.Wo());
  p.D = int(D); p.Dp = int(Dp); p.kchunks = int(kchunks);
  p.m_blocks = int((s.M + c.bn - 1) / c.bn);
  p.out = igemm::Params{};
  p.out.M = int(s.M);
  p.out.P = p.P;
  p.out.vec4 = p.P % 4 == 0;
  return "";
}

}  // namespace

std::string conv_supports_gpu_split_f16_nhwc(const ConvShape& s) {
  Params p{};
  return plan(s, p, pick(s.M));
}

void conv_fwd_gpu_split_f16_nhwc(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  const Config& c = pick(s.M);
  Params p{};
  const std::string why = plan(s, p, c);
  if (!why.empty()) throw std::invalid_argument(why);
  if (s.B == 0 || s.M == 0) return;

  const size_t smem = smem_bytes(c.stage_bytes, p.kchunks);
  CUDA_CHECK(cudaFuncSetAttribute(c.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  planes::run_in_chunks(
      x, s, p.Cp, size_t(s.M) * p.Dp, st,
      [&](uint4* wh, uint4* wl, unsigned blocks) {
        split_weights<<<blocks, 256, 0, st>>>(k, wh, wl, int(s.M), int(s.C), int(s.K), p.Cp, p.Dp);
      },
      [&](const __half* xh, const __half* xl, const __half* wh, const __half* wl, int64_t b0, int64_t nb) {
        p.out.pixels = nb * p.P;
        const long long blocks = (p.out.pixels + BM - 1) / BM * p.m_blocks;
        c.kernel<<<unsigned(blocks), c.threads, smem, st>>>(xh, xl, wh, wl, y + b0 * s.M * p.P, p);
      });
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-split-f16-nhwc",
    .step = 26,
    .summary = "step 25 with the operands split once into channels-last FP16 hi/lo planes (the batch in chunks): "
               "16-byte gathers, no conversions in the MMA loop",
    .launch = conv_fwd_gpu_split_f16_nhwc,
    .supports = conv_supports_gpu_split_f16_nhwc,
    .graph_capturable = false,  // the workspace grows (moves) when a larger layer comes
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
