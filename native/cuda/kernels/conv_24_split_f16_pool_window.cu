// Step 24 -- gpu-split-f16-pool-window: convolution + tanh + 2x2/2 max pooling for a network's first layer (one
// input channel, K <= 7) on the FP16 tensor cores with split operands, FP32-accurate, with each MMA accumulator
// holding whole pool windows.
// Measurements and what was tried: docs/ladder-findings/24.md (docs/ladder.md).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/runtime/first_layer.cuh"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/fast_div.cuh"
#include "cuda/runtime/mma_f16.cuh"
#include "cuda/runtime/registry.cuh"

namespace pyconv {
namespace {

using namespace first_layer;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxK = 7;
constexpr int kMaxM = 64;
constexpr size_t kSmemBudget = 227 * 1024;  // sm_90's opt-in shared memory per block: what supports() assumes

// The pair slots of kernel size K (see the header): P vertical pairs, QA form-A column groups per pair row, RB
// form-B columns, SLOTS registers of four pairs, KS k-steps.
template <int K>
struct Win {
  static constexpr int P = (K + 2) / 2;
  static constexpr int QA = K / 4;
  static constexpr int RB = K % 4;
  static constexpr int SLOTS = P * QA + RB;
  static constexpr int KS = (SLOTS + 1) / 2;
};

// Win<K>::KS for a K known at run time (the shared memory layout).
int ksteps(int K) {
  switch (K) {
    case 1: return Win<1>::KS;
    case 2: return Win<2>::KS;
    case 3: return Win<3>::KS;
    case 4: return Win<4>::KS;
    case 5: return Win<5>::KS;
    case 6: return Win<6>::KS;
    default: return Win<7>::KS;
  }
}

// Which vertical pair slot j holds for lane column t: pair row p (image rows 2p, 2p + 1 from the m-tile's top),
// kernel column kx, and whether it is a real pair.
struct Pair {
  int p, kx;
  bool valid;
};
__host__ __device__ inline Pair pair_of(int K, int j, int t) {
  const int P = (K + 2) / 2, QA = K / 4, na = P * QA;
  if (j < na) return {j / QA, 4 * (j % QA) + t, true};
  if (j < na + K % 4) return {t < P ? t : P - 1, 4 * QA + (j - na), t < P};
  return {0, 0, false};
}

struct Params {
  long long B;
  int H, W, M, Hp, Wp;
  int NX;           // m-tiles per output row pair: ceil(2 * Wp / 8)
  int n_mtiles;     // Hp * NX
  int n_vtiles;     // vertical pairs of m-tiles (output rows 4r .. 4r + 3): ceil(Hp / 2) * NX
  int groups;       // filter groups of 8: ceil(M / 8)
  int RV;           // rows of the pair copy: Hp + P - 1
  int cols;         // entries per pair-copy row that lanes read: 8 * NX + K - 1
  int pitch;        // entries per pair-copy row (= 8 mod 16)
  int copy_bytes;   // one plane of the pair copy (hi; float input adds lo at + copy_bytes)
  int img_bytes;    // one raw image
  int raw_stride;   // one raw slot, bytes (multiple of 16)
  int piece;        // cp.async bytes (16, 8, 4) or 0: plain loads
  int out_per_img;  // M * Hp * Wp
  int plane;        // staging floats per filter: Hp * Wp rounded up to 4 mod 32
  int vec_out;      // 1: a pooled plane is whole float4s and y is 16-byte aligned
  int rowb[5];      // bytes from pair row 0 to pair row p of the copy: 4 * p * pitch
  int wp4;          // bytes from a pooled row to the next in the staging: 4 * Wp
  int w_off, raw_off, copy_off, stage_off, tab_off, vtab_off, max_off;  // shared memory layout, bytes
  int quads;             // uint8 input with W % 4 == 0: 4-column units per pair-copy row (ceil(cols / 4)), else 0
  FastDiv hw, cols_div, quads_div;  // by Hp * Wp, by cols, by quads
};

// Raw image -> the pair copy: entry (r, c) = {img[2r][c], img[2r + 1][c]} for r < RV, c < cols (zero outside the
// image). uint8 pixels become exact halves with the 1024-bias trick: 0x6400 | v is the half 1024 + v (v < 256),
// so a PRMT, a LOP3 and one HADD2 make two halves. Float pixels are split into hi and lo planes (mma_f16.cuh).
// Two uint8 pixels -> the half2 {a, b}: 0x6400 | v is the half 1024 + v (v < 256), less 1024, both exact.
__device__ __forceinline__ uint32_t u8_pair_to_half2(uint32_t biased) {
  const __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&biased), __floats2half2_rn(1024.0f, 1024.0f));
  return *reinterpret_cast<const uint32_t*>(&h);
}

template <typename TIn>
__device__ __forceinline__ void build_pairs(const unsigned char* raw, uint32_t* copy, const Params& p) {
  if constexpr (sizeof(TIn) == 1) {
    if (p.quads) {  // W % 4 == 0: four columns of both rows per thread, two 32-bit loads, one 16-byte store
      const int n = p.RV * p.quads;
      for (int i = threadIdx.x; i < n; i += kThreads) {
        const int r = int(p.quads_div.div(uint32_t(i))), u = i - r * p.quads, y = 2 * r, c = 4 * u;
        const bool in_c = c < p.W;
        const uint32_t a = in_c && y < p.H ? *reinterpret_cast<const uint32_t*>(raw + y * p.W + c) : 0u;
        const uint32_t b = in_c && y + 1 < p.H ? *reinterpret_cast<const uint32_t*>(raw + (y + 1) * p.W + c) : 0u;
        // Interleave the rows' bytes (a0 b0 a1 b1, a2 b2 a3 b3), then put 0x64 above each byte.
        const uint32_t t01 = __byte_perm(a, b, 0x5140), t23 = __byte_perm(a, b, 0x7362);
        constexpr uint32_t kBias = 0x64646464u;
        *reinterpret_cast<uint4*>(copy + r * p.pitch + c) =
            make_uint4(u8_pair_to_half2(__byte_perm(t01, kBias, 0x4140)),
                       u8_pair_to_half2(__byte_perm(t01, kBias, 0x4342)),
                       u8_pair_to_half2(__byte_perm(t23, kBias, 0x4140)),
                       u8_pair_to_half2(__byte_perm(t23, kBias, 0x4342)));
      }
      return;
    }
  }
  const int n = p.RV * p.cols;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const int r = int(p.cols_div.div(uint32_t(i))), c = i - r * p.cols;
    const int y = 2 * r;
    const bool in_c = c < p.W;
    uint32_t* dst = copy + r * p.pitch + c;
    if constexpr (sizeof(TIn) == 4) {
      const float* img = reinterpret_cast<const float*>(raw);
      const float a = in_c && y < p.H ? img[y * p.W + c] : 0.0f;
      const float b = in_c && y + 1 < p.H ? img[(y + 1) * p.W + c] : 0.0f;
      const uint2 s = split_f16x2(a, b);
      dst[0] = s.x;
      dst[p.copy_bytes / 4] = s.y;
    } else {
      const uint32_t a = in_c && y < p.H ? raw[y * p.W + c] : 0u;
      const uint32_t b = in_c && y + 1 < p.H ? raw[(y + 1) * p.W + c] : 0u;
      dst[0] = u8_pair_to_half2(a | (b << 16) | 0x64006400u);
    }
  }
}

// A lane's weight fragments of one filter group and k-step: {hi a0..a3} and {lo a0..a3}.
struct WFrag {
  uint4 hi, lo;
};

// The MMAs of one m-tile and filter group, and the epilogue: pool in-lane, tanh, stage. The weights are scaled by
// 2^s (see the kernel) and their lo halves are not scaled apart, so whi * x and wlo * x add in ONE accumulator
// (uint8 input: no combine step); float input adds the pixels' lo halves (scaled by 2^11, mma_f16.cuh) in a second
// one. `zscale` = 2 * log2(e) * 2^-s undoes the weights' scale inside the tanh (max commutes with a positive scale).
template <int K, typename TIn>
__device__ __forceinline__ void tile_group(const uint32_t (&bh)[2 * Win<K>::KS], const uint32_t (&bl)[2 * Win<K>::KS],
                                           const WFrag (&w)[Win<K>::KS], bool store, uint32_t st, float zscale) {
  constexpr int KS = Win<K>::KS;
  constexpr bool kFloat = sizeof(TIn) == 4;
  float acc[4], cor[4];
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) {
    const uint32_t b0 = bh[2 * ks], b1 = bh[2 * ks + 1];
    if (ks == 0)
      mma_f16_first(acc, w[ks].hi.x, w[ks].hi.y, w[ks].hi.z, w[ks].hi.w, b0, b1);
    else
      mma_f16(acc, w[ks].hi.x, w[ks].hi.y, w[ks].hi.z, w[ks].hi.w, b0, b1);
    mma_f16(acc, w[ks].lo.x, w[ks].lo.y, w[ks].lo.z, w[ks].lo.w, b0, b1);
    if constexpr (kFloat) {
      if (ks == 0)
        mma_f16_first(cor, w[ks].hi.x, w[ks].hi.y, w[ks].hi.z, w[ks].hi.w, bl[0], bl[1]);
      else
        mma_f16(cor, w[ks].hi.x, w[ks].hi.y, w[ks].hi.z, w[ks].hi.w, bl[2 * ks], bl[2 * ks + 1]);
    }
  }
  if constexpr (kFloat) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[i] = fmaf(cor[i], kSplitUnscale, acc[i]);
  }
  const float m = max_nan(max_nan(acc[0], acc[1]), max_nan(acc[2], acc[3]));
  if (store) {
    const float out = tanh_from_scaled_fma(zscale, m);
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(st), "f"(out) : "memory");
  }
}

// __launch_bounds__: K <= 5 at most 64 registers (4 blocks of 8 warps per SM; sp19 from uint8 uses 56), K = 6, 7 at
// most 80 (their 4 k-steps of weights in registers spill under 64; -Xptxas -v, CUDA 13, sm_90). K = 3 from float32
// spills 8 bytes under 64 (no course network has it).
template <int K, typename TIn, typename TOut>
__global__ void __launch_bounds__(kThreads, K <= 5 ? 4 : 3)
    conv24_kernel(const TIn* __restrict__ x, const float* __restrict__ k, TOut* __restrict__ y, Params p) {
  using W_ = Win<K>;
  constexpr int KS = W_::KS, P = W_::P, QA = W_::QA, NA = W_::P * W_::QA;
  constexpr bool kFloat = sizeof(TIn) == 4;
  extern __shared__ uint4 smem[];
  unsigned char* base = reinterpret_cast<unsigned char*>(smem);
  WFrag* s_w = reinterpret_cast<WFrag*>(base + p.w_off);  // [groups][KS][32 lanes]
  unsigned char* raw = base + p.raw_off;                  // [2][raw_stride]
  uint32_t* copy = reinterpret_cast<uint32_t*>(base + p.copy_off);
  float* stage = reinterpret_cast<float*>(base + p.stage_off);
  // m-tile -> {origin in the pair copy (bytes), its pooled outputs' offset in a staged plane, its first pooled
  // column}: one LDS.128 per m-tile instead of index arithmetic.
  int4* s_tab = reinterpret_cast<int4*>(base + p.tab_off);
  // Vertical pairs of m-tiles (one filter group): {the upper one's origin, its staging offset, the first pooled
  // column, the same column for the lower one or INT_MAX where Hp is odd and it does not exist}.
  int4* s_vtab = reinterpret_cast<int4*>(base + p.vtab_off);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const unsigned char* xb = reinterpret_cast<const unsigned char*>(x);

  long long b = blockIdx.x;
  // The first image flies during the setup.
  if (b < p.B) fetch_image(raw, xb + size_t(b) * p.img_bytes, p.img_bytes, p.piece);

  // The layer's scale 2^s, s = 15 - e for max |w| = f * 2^e (f in [0.5, 1)): the largest scaled weight lies in
  // [2^14, 2^15), inside fp16's range, and the lo half of every weight down to max |w| * 2^-17 stays a normal half,
  // so hi and lo need no scale of their own. Not finite or zero: s = 0 (a NaN or inf weight still reaches its
  // outputs as NaN). Weights of any finite magnitude then fit (step 19 needs |w| < 65504).
  // (In the dynamic shared memory: a static __shared__ variable would take from the opt-in size the launch sets.)
  unsigned* s_wmax = reinterpret_cast<unsigned*>(base + p.max_off);
  if (tid == 0) *s_wmax = 0u;
  __syncthreads();
  {
    unsigned mx = 0u;
    for (int i = tid; i < p.M * K * K; i += kThreads) mx = max(mx, __float_as_uint(fabsf(__ldg(k + i))));
    atomicMax(s_wmax, mx);
  }
  __syncthreads();
  int e2 = 0;
  const float wmax = __uint_as_float(*s_wmax);
  const int scale_exp = isfinite(wmax) && wmax > 0.0f ? (frexpf(wmax, &e2), min(max(15 - e2, -100), 100)) : 0;
  const float wscale = ldexpf(1.0f, scale_exp);
  const float zscale = kTwoLog2e * ldexpf(1.0f, -scale_exp);

  // Weight fragments: lane (g, t) of group grp, k-step ks: a0 = row g (filter 8 grp + g, dy 0) at slot 2 ks,
  // a1 = row g + 8 (dy 1) at slot 2 ks, a2 / a3 the same at slot 2 ks + 1; each register the pair's two rows.
  for (int i = tid; i < p.groups * KS * 32; i += kThreads) {
    const int l = i & 31, ks = (i >> 5) % KS, grp = (i >> 5) / KS;
    const int m = 8 * grp + (l >> 2), tt = l & 3;
    uint32_t hi[4], lo[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int dy = r & 1;
      const Pair pr = pair_of(K, 2 * ks + (r >> 1), tt);
      float w[2] = {0.0f, 0.0f};
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int ky = 2 * pr.p + e - dy;
        if (pr.valid && m < p.M && ky >= 0 && ky < K) w[e] = __ldg(k + (size_t(m) * K + ky) * K + pr.kx) * wscale;
      }
      const __half2 h = __floats2half2_rn(w[0], w[1]);
      const float2 hf = __half22float2(h);
      const __half2 rest = __floats2half2_rn(w[0] - hf.x, w[1] - hf.y);
      hi[r] = *reinterpret_cast<const uint32_t*>(&h);
      lo[r] = *reinterpret_cast<const uint32_t*>(&rest);
    }
    s_w[i] = {make_uint4(hi[0], hi[1], hi[2], hi[3]), make_uint4(lo[0], lo[1], lo[2], lo[3])};
  }

  for (int i = tid; i < p.n_mtiles; i += kThreads) {
    const int pr = i / p.NX, xg = i - pr * p.NX;
    s_tab[i] = make_int4(4 * (pr * p.pitch + 8 * xg), pr * p.Wp + 4 * xg, 4 * xg, 0);
  }
  for (int i = tid; i < p.n_vtiles; i += kThreads) {
    const int pr = 2 * (i / p.NX), xg = i % p.NX;
    s_vtab[i] = make_int4(4 * (pr * p.pitch + 8 * xg), pr * p.Wp + 4 * xg, 4 * xg, pr + 1 < p.Hp ? 4 * xg : INT_MAX);
  }

  // This lane's load bases (shared-window bytes, relative to an m-tile's origin): form A at pixel column g + t,
  // form B at pair row t (clamped: a padded lane reads a real pair against zero weights) and column g.
  const uint32_t s_copy = smem_addr(copy);
  uint32_t baseA = s_copy + 4u * uint32_t(g + t);
  uint32_t baseB = s_copy + 4u * uint32_t(g + min(t, P - 1) * p.pitch);
  auto load_b = [&](uint32_t (&bh)[2 * KS], uint32_t (&bl)[2 * KS], uint32_t origin) {
#pragma unroll
    for (int j = 0; j < 2 * KS; ++j) {
      uint32_t a;
      if (j < NA) {
        a = baseA + origin + uint32_t(p.rowb[j / (QA > 0 ? QA : 1)]) + 16u * uint32_t(j % (QA > 0 ? QA : 1));
      } else {
        // A padded slot (zero weights) reads column 0: every entry it may touch is written (0 * garbage could be
        // NaN).
        a = baseB + origin + 4u * uint32_t(j - NA < W_::RB ? 4 * QA + (j - NA) : 0);
      }
      bh[j] = lds32<0>(a);
      if constexpr (kFloat) bl[j] = lds32<0>(a + uint32_t(p.copy_bytes));
    }
  };
  // The B fragments of the m-tile one pair row below (output rows y0 + 2, y0 + 3), from the upper one's: its
  // form-A slot (p, q) is the upper one's (p + 1, q) while p + 1 < P; the rest are loaded a pair row further.
  auto load_b_below = [&](uint32_t (&ch)[2 * KS], uint32_t (&cl)[2 * KS], const uint32_t (&bh)[2 * KS],
                          const uint32_t (&bl)[2 * KS], uint32_t origin) {
    constexpr int Q1 = QA > 0 ? QA : 1;
#pragma unroll
    for (int j = 0; j < 2 * KS; ++j) {
      uint32_t a;
      if (j < NA) {
        if (j / Q1 + 1 < P) {
          ch[j] = bh[j + Q1];
          if constexpr (kFloat) cl[j] = bl[j + Q1];
          continue;
        }
        a = baseA + origin + uint32_t(p.rowb[j / Q1 + 1]) + 16u * uint32_t(j % Q1);
      } else {
        a = baseB + origin + uint32_t(p.rowb[1]) + 4u * uint32_t(j - NA < W_::RB ? 4 * QA + (j - NA) : 0);
      }
      ch[j] = lds32<0>(a);
      if constexpr (kFloat) cl[j] = lds32<0>(a + uint32_t(p.copy_bytes));
    }
  };
  // This lane's staged output: filter g of a group, pooled column t of an m-tile (it exists while the m-tile's
  // first pooled column < Wp - t).
  int pc_lim = p.Wp - t;
  uint32_t st_lane = smem_addr(stage + g * p.plane + t);
  const uint32_t group_stride = 4u * 8u * uint32_t(p.plane);
  bool lane_filter = g < p.M;  // group 0 (the only one when one_group)
  // Opaque to the compiler: left visible, nvcc sinks these lane constants into the m-tile loop and recomputes
  // them there every iteration (~15 SASS instructions of 47 per sp19 m-tile, cuobjdump --dump-sass, sm_90).
  asm volatile("" : "+r"(baseA), "+r"(baseB), "+r"(pc_lim), "+r"(st_lane));

  const bool one_group = p.groups == 1;
  WFrag w1[KS];  // group 0's weights, kept in registers when it is the only one
  if (one_group) {
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) w1[ks] = s_w[ks * 32 + lane];
  }
  int buf = 0;
  for (; b < p.B; b += gridDim.x, buf ^= 1) {
    cp_async_wait_group<0>();
    __syncthreads();  // raw image b is in; the last image's m-tiles (copy, stage) are done
    const long long next = b + gridDim.x;
    if (next < p.B)
      fetch_image(raw + (buf ^ 1) * p.raw_stride, xb + size_t(next) * p.img_bytes, p.img_bytes, p.piece);
    build_pairs<TIn>(raw + buf * p.raw_stride, copy, p);
    if (b >= gridDim.x) write_out(stage, y, b - gridDim.x, p.out_per_img, p.hw, p.plane, p.vec_out);
    __syncthreads();  // the copy is in; the stage is free

    if (one_group) {
      // Two vertically adjacent m-tiles per iteration: their MMA chains interleave, filling the issue slots a
      // single chain leaves to NOPs between dependent MMAs; the lower one takes P - 1 of its form-A B registers
      // from the upper one's; the loop's own instructions are shared. Where Hp is odd the last lower m-tile does
      // not exist: it reads the zero row past the image and stores nothing.
      const int one_pc_lim = lane_filter ? pc_lim : INT_MIN;
#pragma unroll 1
      for (int vt = warp; vt < p.n_vtiles; vt += kWarps) {
        const int4 e = s_vtab[vt];
        uint32_t bh[2 * KS], bl[2 * KS], ch[2 * KS], cl[2 * KS];
        load_b(bh, bl, uint32_t(e.x));
        load_b_below(ch, cl, bh, bl, uint32_t(e.x));
        const uint32_t st = st_lane + 4u * uint32_t(e.y);
        tile_group<K, TIn>(bh, bl, w1, e.z < one_pc_lim, st, zscale);
        tile_group<K, TIn>(ch, cl, w1, e.w < one_pc_lim, st + uint32_t(p.wp4), zscale);
      }
    } else {
#pragma unroll 1
      for (int mt = warp; mt < p.n_mtiles; mt += kWarps) {
        const int4 e = s_tab[mt];
        uint32_t bh[2 * KS], bl[2 * KS];
        load_b(bh, bl, uint32_t(e.x));
        uint32_t st = st_lane + 4u * uint32_t(e.y);
        const bool col = e.z < pc_lim;
#pragma unroll 1
        for (int grp = 0; grp < p.groups; ++grp, st += group_stride) {
          WFrag w[KS];
#pragma unroll
          for (int ks = 0; ks < KS; ++ks) w[ks] = s_w[(grp * KS + ks) * 32 + lane];
          tile_group<K, TIn>(bh, bl, w, col && 8 * grp + g < p.M, st, zscale);
        }
      }
    }
  }
  __syncthreads();  // the last image's stage is complete
  const long long last = b - gridDim.x;
  if (last >= 0 && last < p.B) write_out(stage, y, last, p.out_per_img, p.hw, p.plane, p.vec_out);
}

template <typename TIn, typename TOut>
const void* kernel_for(int K) {
  switch (K) {
    case 1: return reinterpret_cast<const void*>(conv24_kernel<1, TIn, TOut>);
    case 2: return reinterpret_cast<const void*>(conv24_kernel<2, TIn, TOut>);
    case 3: return reinterpret_cast<const void*>(conv24_kernel<3, TIn, TOut>);
    case 4: return reinterpret_cast<const void*>(conv24_kernel<4, TIn, TOut>);
    case 5: return reinterpret_cast<const void*>(conv24_kernel<5, TIn, TOut>);
    case 6: return reinterpret_cast<const void*>(conv24_kernel<6, TIn, TOut>);
    default: return reinterpret_cast<const void*>(conv24_kernel<7, TIn, TOut>);
  }
}

// The block's shared memory layout for shape s and input element size elt (bytes); "" or why it does not fit.
std::string layout(const ConvShape& s, size_t elt, Params& p, size_t& smem) {
  const std::string name = "gpu-split-f16-pool-window: ";
  if (s.C != 1) return name + "a first-layer kernel, C must be 1 (got " + std::to_string(s.C) + ")";
  if (s.K > kMaxK) return name + "K up to " + std::to_string(kMaxK) + " (got " + std::to_string(s.K) + ")";
  if (s.Ho() < 2 || s.Wo() < 2) return name + "the conv output is under 2x2 (nothing to pool)";
  if (s.M > kMaxM) return name + "M up to " + std::to_string(kMaxM) + " (got " + std::to_string(s.M) + ")";
  if (s.H > 2048 || s.W > 2048) return name + "an image is too large for shared memory";
  const int K = int(s.K), P = (K + 2) / 2;
  p.B = s.B; p.H = int(s.H); p.W = int(s.W); p.M = int(s.M);
  p.Hp = int(s.Ho() / 2); p.Wp = int(s.Wo() / 2);
  p.NX = (2 * p.Wp + 7) / 8;
  p.n_mtiles = p.Hp * p.NX;
  p.groups = (p.M + 7) / 8;
  p.RV = p.Hp + P - 1 + (p.Hp & 1);  // odd Hp: one more (zero) row for the last vertical pair's missing half
  p.cols = 8 * p.NX + K - 1;
  p.pitch = up_to_residue(p.cols, 8, 16);
  for (int r = 0; r < 5; ++r) p.rowb[r] = 4 * r * p.pitch;
  p.wp4 = 4 * p.Wp;
  p.n_vtiles = (p.Hp + 1) / 2 * p.NX;
  const bool f32 = elt == 4;
  p.copy_bytes = round_up(p.RV * p.pitch * 4, 128);
  p.img_bytes = int(s.H * s.W * int64_t(elt));
  p.raw_stride = round_up(p.img_bytes, 16);
  p.out_per_img = p.M * p.Hp * p.Wp;
  p.plane = up_to_residue(p.Hp * p.Wp, 4, 32);
  size_t off = 0;
  p.w_off = int(off); off += size_t(p.groups) * ksteps(K) * 32 * sizeof(WFrag);
  p.raw_off = int(off); off += 2 * size_t(p.raw_stride);
  p.copy_off = int(off); off += size_t(p.copy_bytes) * (f32 ? 2 : 1);
  p.stage_off = int(off); off += size_t(p.M) * p.plane * 4;  // lanes of filters past M store nothing
  p.tab_off = int(off); off += size_t(p.n_mtiles) * 16;
  p.vtab_off = int(off); off += size_t(p.n_vtiles) * 16;
  p.max_off = int(off); off += 16;
  smem = off;
  if (smem > kSmemBudget)
    return name + "an image and its pooled output need " + std::to_string(smem / 1024) + " KB of shared memory, over " +
           std::to_string(kSmemBudget / 1024) + " KB";
  p.hw = FastDiv(uint32_t(p.Hp * p.Wp));
  p.cols_div = FastDiv(uint32_t(p.cols));
  // The pitch is a multiple of 4 >= cols, so whole units fit a row; W % 4 == 0 keeps every row's words aligned.
  p.quads = !f32 && p.W % 4 == 0 ? (p.cols + 3) / 4 : 0;
  p.quads_div = FastDiv(uint32_t(std::max(p.quads, 1)));
  return "";
}

template <typename TIn, typename TOut>
void launch(const TIn* x, const float* k, TOut* y, const ConvShape& s, cudaStream_t st) {
  Params p{};
  size_t smem = 0;
  const std::string why = layout(s, sizeof(TIn), p, smem);
  if (!why.empty()) throw std::invalid_argument(why);
  if (s.B <= 0) return;
  p.piece = fetch_piece(p.img_bytes, x);
  p.vec_out = (p.Hp * p.Wp) % 4 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;

  void* args[] = {&x, &k, &y, &p};
  launch_persistent(kernel_for<TIn, TOut>(int(s.K)), "gpu-split-f16-pool-window", kThreads, smem, s.B, args, st);
}

}  // namespace

void conv_fwd_gpu_split_f16_pool_window(const float* x, const float* k, float* y, const ConvShape& s,
                                        cudaStream_t st) {
  launch(x, k, y, s, st);
}

void conv_fwd_gpu_split_f16_pool_window_u8(const uint8_t* x, const float* k, float* y, const ConvShape& s,
                                           cudaStream_t st) {
  launch(x, k, y, s, st);
}

void conv_fwd_gpu_split_f16_pool_window_u8_half_out(const uint8_t* x, const float* k, __half* y, const ConvShape& s,
                                                    cudaStream_t st) {
  launch(x, k, y, s, st);
}

// Host code only (no GPU needed): the shape checks and the shared-memory budget of the float32 layout (the larger).
std::string conv_supports_gpu_split_f16_pool_window(const ConvShape& s) {
  Params p{};
  size_t smem = 0;
  return layout(s, 4, p, smem);
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-split-f16-pool-window",
    .step = 24,
    .summary = "conv + tanh + 2x2 max pool, C=1, K<=7, split FP16 tensor cores (FP32-accurate) with the weights "
               "banded over two output rows, so each accumulator holds whole pool windows: pooled in-lane",
    .epilogue = Epilogue::TanhMaxPool2,
    .precision = Precision::F16x3,
    .launch = conv_fwd_gpu_split_f16_pool_window,
    .launch_u8 = conv_fwd_gpu_split_f16_pool_window_u8,
    .launch_u8_f16_out = conv_fwd_gpu_split_f16_pool_window_u8_half_out,
    .supports = conv_supports_gpu_split_f16_pool_window,
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
