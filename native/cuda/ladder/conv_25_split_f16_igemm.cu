// Step 25 -- gpu-split-f16-igemm: a tiled implicit GEMM over the batch's pixels (step 18's structure) whose
// products are as accurate as float32 (step 20's split operands on the FP16 tensor cores), for every valid
// stride-1 shape.
//
// Why: on the general-shape sweep (results/bench-nvidia-h200-2026-11-24-sweep-step23.json, H200, batch 10000) the
// rows where cuDNN FP32 wins by the most are shapes whose split weights do not fit one block's shared memory
// beside a band of the image (steps 20 and 21 refuse them): s02 (C=15 24x24 M=38 K=7) at 0.28x cuDNN, s35 (C=24
// 46x46 M=64 K=7) at 0.43x, s21, s03, s22. Their best float32 variant was step 17's FFMA implicit GEMM (20-34
// TFLOP/s), while cuDNN FP32 reaches 47-79 TFLOP/s counted as direct convolution flops (it runs transforms that
// need fewer). Here the weights never need to fit: like step 18, the depth C*K*K streams through shared memory in
// chunks of 32 taps, so only one chunk of weights and one chunk of the im2col gather are resident.
// Measurements and what was tried: docs/ladder-findings/25.md (docs/ladder.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/runtime/igemm_tiles.cuh"
#include "cuda/runtime/mma_f16.cuh"
#include "cuda/runtime/registry.cuh"

namespace pyconv {
namespace {

using namespace igemm;  // BM = 128 pixels, BK = 32 taps per stage, 3 stages, pitches LDA and LDC

// Two float32 words (as loaded) -> the hi and lo halves of one fragment register, `a` in the low half.
__device__ __forceinline__ uint2 split_pair(uint32_t a, uint32_t b) {
  return split_f16x2(__uint_as_float(a), __uint_as_float(b));
}

template <int BN>
struct Tiles {
  static constexpr int WARPS_N = BN >= 48 ? 2 : 1, WARPS_M = 4, THREADS = 32 * WARPS_M * WARPS_N;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, MT = WM / 16, NT = WN / 8;
  static constexpr int KG = 8 / WARPS_N;  // groups of 4 taps each lane gathers per chunk
  static constexpr int A_FLOATS = BM * LDA, STAGE_FLOATS = A_FLOATS + BN * LDA;
  static_assert(BN % (8 * WARPS_N) == 0 && MT == 2, "warp tile: 32 pixels x a multiple of 8 filters");
  static_assert(BN * LDC <= STAGES * STAGE_FLOATS, "the output staging tile aliases the pipeline stages");
  static_assert((BN * BK) % THREADS == 0, "every thread copies the same number of weights per stage");
};

template <int BN>
__global__ void __launch_bounds__(Tiles<BN>::THREADS, 512 / Tiles<BN>::THREADS)  // <= 128 registers
    conv25_kernel(const float* __restrict__ x, const float* __restrict__ k, float* __restrict__ y, const Params p) {
  using T = Tiles<BN>;
  constexpr int MT = T::MT, NT = T::NT;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  int* s_kofs = reinterpret_cast<int*>(smem + STAGES * T::STAGE_FLOATS);  // [kchunks][4 kl][8 kg]

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int mb = int(blockIdx.x % unsigned(p.m_blocks));
  const long long p0 = (long long)(blockIdx.x / unsigned(p.m_blocks)) * BM;  // first pixel (GEMM row)
  const int n0 = mb * BN;                                                      // first filter
  const long long b_first = p0 / p.P;
  const int r_first = int(p0 - b_first * p.P);  // pixel index of p0 inside its image
  const float* xt = x + b_first * (long long)p.chw;

  // The tap table (igemm_tiles.cuh). Taps past C*K*K read the window's top-left input itself (offset 0): their
  // weights are 0, and an inf or NaN there only reaches the output whose window holds it anyway, so the gather
  // needs no zero-fill and no test.
  build_tap_table<T::THREADS>(s_kofs, p, 0);
  // Gather roles: each warp instruction copies 8 pixels (pl) x 4 consecutive taps (kl). Warp w owns pixels
  // 32*(w % 4) + 8*i + pl (i < 4) and tap groups kg0 .. kg0 + KG - 1 of every chunk (the second row of warps, when
  // there is one, the upper half). A pixel past the batch gathers the batch's last pixel (its outputs are never
  // stored), so every copy is a plain 4-byte cp.async from xp[i] + tap offset.
  const int pl = lane & 7, kl = lane >> 3, pw = warp % 4, kg0 = (warp / 4) * T::KG;
  const float* xp[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int lp = int(min(p0 + 32 * pw + 8 * i + pl, p.pixels - 1) - p0);
    int r = r_first + lp;
    const int db = r / p.P;
    r -= db * p.P;
    xp[i] = xt + (db * p.chw + (r / p.Wo) * p.W + r % p.Wo);
  }
  // Weight roles: lane l copies depth kq = l of filters warp + NW*j (NW warps), zero past M and past C*K*K.
  constexpr int NW = T::THREADS / 32;
  const float* kw = k + size_t(n0 + warp) * p.ckk + lane;
  __syncthreads();  // the tap table is in

  const uint32_t smem_base = smem_addr(smem);
  auto load_stage = [&](int kb, int s) {
    const uint32_t a_s = smem_base + uint32_t(s * T::STAGE_FLOATS) * 4;
    const uint32_t b_s = a_s + T::A_FLOATS * 4;
    const int kread = p.ckk_mma - kb * BK;  // taps of this chunk the MMAs read (the others are never looked at)
    const uint32_t a_lane = a_s + uint32_t((32 * pw + pl) * LDA + kl + 4 * kg0) * 4;
    const int* kofs = s_kofs + kb * BK + kl * 8 + kg0;
#pragma unroll 1  // rolled: unrolled, all 4 x KG 64-bit source addresses were live at once and spilled
    for (int j = 0; j < T::KG; ++j) {
      if (4 * (kg0 + j) >= kread) break;  // warp-uniform
      const int ko = kofs[j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(a_lane + uint32_t(8 * i * LDA + 4 * j) * 4),
                     "l"(xp[i] + ko));
    }
    const bool k_ok = kb * BK + lane < p.ckk;
#pragma unroll
    for (int j = 0; j < BN / NW; ++j) {
      const bool valid = k_ok && n0 + warp + NW * j < p.M;
      cp_async4(b_s + uint32_t((warp + NW * j) * LDA + lane) * 4, valid ? kw + (size_t(NW * j) * p.ckk + kb * BK) : k,
                valid);
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

  // ldmatrix row addresses: lane l feeds row l % 8 of matrix l / 8. A x4 over 8 words: (rows 0-7, words 0-3),
  // (rows 8-15, 0-3), (rows 0-7, 4-7), (rows 8-15, 4-7). B x4 over 16 words: (filters 0-7, words 0-3, 4-7, 8-11,
  // 12-15).
  const uint32_t a_frag = uint32_t((wm + (lane & 7) + 8 * ((lane >> 3) & 1)) * LDA + 4 * (lane >> 4)) * 4;
  const uint32_t b_frag = uint32_t((wn + (lane & 7)) * LDA + 4 * (lane >> 3)) * 4;

  for (int kb = 0; kb < p.kchunks; ++kb) {
    cp_async_wait_group<STAGES - 2>();
    __syncthreads();  // chunk kb is in for every thread; everyone is done with the stage the next load overwrites
    {
      const int next = kb + STAGES - 1;
      if (next < p.kchunks) load_stage(next, next % STAGES);
      asm volatile("cp.async.commit_group;");
    }
    const uint32_t a_s = smem_base + uint32_t((kb % STAGES) * T::STAGE_FLOATS) * 4;
    const uint32_t b_s = a_s + T::A_FLOATS * 4;
    const int ksub = min(BK / 16, (p.ckk_mma - kb * BK) / 16);
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      if (kk >= ksub) break;  // block-uniform: past the padded depth
      uint32_t ah[MT][4], al[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t v[8];  // v[0..3]: words 0-7 of the k-step, v[4..7]: words 8-15 (rows g, g+8 x words t, t+4)
        ldsm_x4(a_s + a_frag + uint32_t(mt * 16 * LDA + kk * 16) * 4, v[0], v[1], v[2], v[3]);
        ldsm_x4(a_s + a_frag + uint32_t(mt * 16 * LDA + kk * 16 + 8) * 4, v[4], v[5], v[6], v[7]);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int row = 0; row < 2; ++row) {  // a0 (g, taps 0-7), a1 (g+8, 0-7), a2 (g, 8-15), a3 (g+8, 8-15)
            const uint2 s = split_pair(v[4 * h + row], v[4 * h + row + 2]);
            ah[mt][2 * h + row] = s.x;
            al[mt][2 * h + row] = s.y;
          }
      }
      // One n-tile's B fragment at a time (4 registers live, not 4 x NT: with NT = 4 holding them all spilled
      // under the 128-register bound). Its 3 x MT MMAs go to 2 x MT accumulators, corrections last.
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        uint32_t v[4];  // filter g x words t, t+4, 8+t, 12+t
        ldsm_x4(b_s + b_frag + uint32_t(nt * 8 * LDA + kk * 16) * 4, v[0], v[1], v[2], v[3]);
        const uint2 s0 = split_pair(v[0], v[1]), s1 = split_pair(v[2], v[3]);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          mma_f16(acc[mt][nt], ah[mt][0], ah[mt][1], ah[mt][2], ah[mt][3], s0.x, s1.x);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          mma_f16(cor[mt][nt], ah[mt][0], ah[mt][1], ah[mt][2], ah[mt][3], s0.y, s1.y);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          mma_f16(cor[mt][nt], al[mt][0], al[mt][1], al[mt][2], al[mt][3], s0.x, s1.x);
      }
    }
  }

  // Stage the tile as [filter][pixel]: d0 (pixel g, filter 2t), d1 (g, 2t+1), d2 (g+8, 2t), d3 (g+8, 2t+1).
  cp_async_wait_group<0>();
  __syncthreads();  // every warp is done with the stages the staging tile aliases
  float* cs = smem;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int px = wm + mt * 16 + g, n = wn + nt * 8 + 2 * t;
      float d[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) d[r] = fmaf(cor[mt][nt][r], kSplitUnscale, acc[mt][nt][r]);
      stage_fragment(cs, px, n, d[0], d[1], d[2], d[3]);
    }
  __syncthreads();
  store_tile<BN, T::THREADS>(cs, y, p, p0, n0);
}

struct Config {
  int bn, threads;
  Kernel kernel;
};

// The narrowest filter tile that holds M (wider M runs as several blocks of 64 filters).
const Config& pick(int64_t M) {
  static const Config configs[] = {
      {8, Tiles<8>::THREADS, conv25_kernel<8>},    {16, Tiles<16>::THREADS, conv25_kernel<16>},
      {24, Tiles<24>::THREADS, conv25_kernel<24>}, {32, Tiles<32>::THREADS, conv25_kernel<32>},
      {48, Tiles<48>::THREADS, conv25_kernel<48>}, {64, Tiles<64>::THREADS, conv25_kernel<64>},
  };
  return igemm::narrowest_holding(configs, M);
}

constexpr const char* kName = "gpu-split-f16-igemm";
constexpr int kStep = 16;  // m16n8k16: the depth is padded to 16 (weights 0 there)

}  // namespace

std::string conv_supports_gpu_split_f16_igemm(const ConvShape& s) {
  igemm::Params p{};
  return igemm::plan(s, p, kName, pick(s.M).bn, kStep);
}

void conv_fwd_gpu_split_f16_igemm(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  const Config& c = pick(s.M);
  igemm::launch(c.kernel, c.threads, x, k, y, s, st, kName, c.bn, kStep);
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-split-f16-igemm",
    .step = 25,
    .summary = "implicit GEMM for any shape on the FP16 tensor cores, split operands (FP32-accurate), depth streamed",
    .launch = conv_fwd_gpu_split_f16_igemm,
    .supports = conv_supports_gpu_split_f16_igemm,
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
