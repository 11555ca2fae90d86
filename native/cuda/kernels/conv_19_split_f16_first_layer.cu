// Step 19 -- gpu-split-f16-fused: convolution + tanh + 2x2/2 max pooling for a network's first layer (one input
// channel, K <= 7) on the FP16 tensor cores with split operands (cuda/runtime/mma_f16.cuh), FP32-accurate.
// Measurements and what was tried: docs/ladder-findings/19.md (docs/ladder.md).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

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
constexpr int kMaxM = 64;                   // 8 n-tiles of weight fragments in shared memory
constexpr size_t kSmemBudget = 227 * 1024;  // sm_90's opt-in shared memory per block: what supports() assumes

// The pair columns of kernel size K (see the header): P pairs per kernel row, RC columns of four slots, KS k-steps.
template <int K>
struct Taps {
  static constexpr int P = (K + 1) / 2;
  static constexpr int RC = K <= 4 ? P : P + K - 4;
  static constexpr int KS = (RC + 1) / 2;
};

// Which tap pair slot t of column j holds: kernel row ky, pair q (taps 2q, 2q+1), and whether it is a real pair.
struct Slot {
  int ky, q;
  bool valid;
};
__host__ __device__ inline Slot slot_of(int K, int j, int t) {
  const int P = (K + 1) / 2, RC = K <= 4 ? P : P + K - 4;
  if (j < P) return {t, j, t < K};
  if (j < RC) return {4 + j - P, t, t < P};
  return {0, 0, false};
}

struct Params {
  long long B;
  int H, W, M, Hp, Wp;
  int NX;             // m-tile columns per row pair: ceil(2 * Wp / 8)
  int n_mtiles;       // Hp * NX
  int ntiles;         // ceil(M / 8)
  int R;              // image rows the m-tiles read: 2 * Hp + K - 1 (<= H)
  int units;          // convert units per row: each writes entries 2u, 2u + 1 of both copies
  int pitch;          // entries per copy row (>= 2 * units)
  int copy_stride;    // entries per copy
  int img_bytes;      // one raw image
  int raw_stride;     // one raw slot, bytes (multiple of 16)
  int piece;          // bytes per cp.async (16, 8 or 4); 0: plain loads (an unaligned uint8 image)
  int out_per_img;    // M * Hp * Wp
  int plane;          // staging stride of one filter's pooled plane: Hp * Wp rounded up to 4 mod 8 floats, so
                      // the 8 filters an m-tile's lanes store to fall in 8 different groups of 4 banks
  int vec_out;        // 1: a pooled plane (Hp * Wp) is whole float4s and y is 16-byte aligned
  int pitch4, lo4;    // bytes: a copy row; hi plane -> lo plane (2 copies)
  int w_off, raw_off, split_off, stage_off, tab_off;  // shared memory layout, bytes
  FastDiv units_div, hw;  // by units, Hp * Wp
};

// Raw image -> the E/O copies. A unit (row r, u) reads pixels 4u .. 4u+4 (zero past the right edge) and writes
// entries 2u and 2u+1 of copy E (pairs (4u, 4u+1), (4u+2, 4u+3)) and of copy O ((4u+1, 4u+2), (4u+3, 4u+4)).
template <typename TIn>
__device__ __forceinline__ void split_image(const unsigned char* raw, uint32_t* split, const Params& p) {
  const int n = p.R * p.units;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const int r = int(p.units_div.div(uint32_t(i))), u = i - r * p.units;
    const int c0 = 4 * u;
    float v[5];
#pragma unroll
    for (int e = 0; e < 5; ++e) {
      const int col = c0 + e;
      if constexpr (sizeof(TIn) == 4)
        v[e] = col < p.W ? reinterpret_cast<const float*>(raw)[r * p.W + col] : 0.0f;
      else
        v[e] = col < p.W ? float(raw[r * p.W + col]) : 0.0f;
    }
    // Entry index in the hi plane's copy E; copy O at + copy_stride, the lo plane (float input) at + 2 copies.
    uint2* ent = reinterpret_cast<uint2*>(split + r * p.pitch + 2 * u);  // 2 entries of 4 bytes
    const size_t copy = p.copy_stride / 2;                              // in uint2
    if constexpr (sizeof(TIn) == 4) {
      SplitHalf s[5];
#pragma unroll
      for (int e = 0; e < 5; ++e) s[e] = split_f16(v[e]);
      ent[0] = make_uint2(pack_half2(s[0].hi, s[1].hi), pack_half2(s[2].hi, s[3].hi));
      ent[copy] = make_uint2(pack_half2(s[1].hi, s[2].hi), pack_half2(s[3].hi, s[4].hi));
      ent[2 * copy] = make_uint2(pack_half2(s[0].lo, s[1].lo), pack_half2(s[2].lo, s[3].lo));
      ent[3 * copy] = make_uint2(pack_half2(s[1].lo, s[2].lo), pack_half2(s[3].lo, s[4].lo));
    } else {
      __half h[5];
#pragma unroll
      for (int e = 0; e < 5; ++e) h[e] = __float2half_rn(v[e]);  // 0..255: exact
      ent[0] = make_uint2(pack_half2(h[0], h[1]), pack_half2(h[2], h[3]));
      ent[copy] = make_uint2(pack_half2(h[1], h[2]), pack_half2(h[3], h[4]));
    }
  }
}

// A lane's A fragment registers of one m-tile: hi (and lo: float input) pairs [column j][row half h: g, g+8].
template <int K, typename TIn>
struct Frag {
  uint32_t h[Taps<K>::RC][2];
  uint32_t l[sizeof(TIn) == 4 ? Taps<K>::RC : 1][2];
};

// One m-tile x one n-tile: the MMAs and the epilogue (combine, pool, tanh, stage). `store`: this lane's filter
// and pooled column exist; `odd`: it takes filter 2t+1 (g odd), else 2t; `st`: the shared-window address of its
// staged output.
template <int K, typename TIn>
__device__ __forceinline__ void tile_ntile(const Frag<K, TIn>& f, const uint4 (&w)[Taps<K>::KS], bool store,
                                           bool odd, uint32_t st) {
  constexpr int RC = Taps<K>::RC, KS = Taps<K>::KS;
  constexpr bool kFloat = sizeof(TIn) == 4;
  float acc[4], cor[4];
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) {
    const int j0 = 2 * ks, j1 = 2 * ks + 1 < RC ? 2 * ks + 1 : 2 * ks;  // a padded column reuses j0 (weight 0)
    const uint32_t h[4] = {f.h[j0][0], f.h[j0][1], f.h[j1][0], f.h[j1][1]};
    if (ks == 0) {
      mma_f16_first(acc, h[0], h[1], h[2], h[3], w[ks].x, w[ks].y);
      mma_f16_first(cor, h[0], h[1], h[2], h[3], w[ks].z, w[ks].w);
    } else {
      mma_f16(acc, h[0], h[1], h[2], h[3], w[ks].x, w[ks].y);
      mma_f16(cor, h[0], h[1], h[2], h[3], w[ks].z, w[ks].w);
    }
    if constexpr (kFloat) mma_f16(cor, f.l[j0][0], f.l[j0][1], f.l[j1][0], f.l[j1][1], w[ks].x, w[ks].y);
  }
  float v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = fmaf(cor[i], kSplitUnscale, acc[i]);
  // Rows g and g+8 are vertically adjacent pixels, lanes g and g^1 horizontally adjacent ones.
  float m0 = max_nan(v[0], v[2]), m1 = max_nan(v[1], v[3]);
  m0 = max_nan(m0, __shfl_xor_sync(0xffffffffu, m0, 4));
  m1 = max_nan(m1, __shfl_xor_sync(0xffffffffu, m1, 4));
  if (store) {
    const float out = tanh_from_scaled(kTwoLog2e * (odd ? m1 : m0));
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(st), "f"(out) : "memory");
  }
}

// __launch_bounds__(256, 2): up to 128 registers. Asking for 4 blocks (<= 64 registers) made ptxas recompute the
// lane constants in every m-tile (67 SASS instructions instead of 59 for sp19, float) and spill for K >= 6; the
// K <= 5 kernels use 48-64 registers anyway (-Xptxas -v, CUDA 13, sm_90; no kernel spills), so where shared memory
// allows (sp19, fa17: ~55 KB per block) 4 blocks of 8 warps share an SM regardless.
template <int K, typename TIn, typename TOut>
__global__ void __launch_bounds__(kThreads, 2)
    conv19_kernel(const TIn* __restrict__ x, const float* __restrict__ k, TOut* __restrict__ y, Params p) {
  constexpr int P = Taps<K>::P, RC = Taps<K>::RC, KS = Taps<K>::KS;
  extern __shared__ uint4 smem[];
  unsigned char* base = reinterpret_cast<unsigned char*>(smem);
  uint4* s_w = reinterpret_cast<uint4*>(base + p.w_off);  // [ntiles][KS][32 lanes] {whi b0, whi b1, wlo b0, wlo b1}
  unsigned char* raw = base + p.raw_off;                  // [2][raw_stride]
  uint32_t* split = reinterpret_cast<uint32_t*>(base + p.split_off);  // [hi, lo][E, O][copy_stride] half2
  float* stage = reinterpret_cast<float*>(base + p.stage_off);
  // m-tile mt -> {origin (bytes, relative to a lane's base), its pooled outputs' offset in a staged plane,
  // its first pooled column 4 * xg}: one LDS.128 per m-tile instead of index arithmetic.
  int4* s_tab = reinterpret_cast<int4*>(base + p.tab_off);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const unsigned char* xb = reinterpret_cast<const unsigned char*>(x);

  long long b = blockIdx.x;
  // The first image flies during the setup.
  if (b < p.B) fetch_image(raw, xb + size_t(b) * p.img_bytes, p.img_bytes, p.piece);

  // Weight fragments: lane (g, t) of n-tile nt, k-step ks holds filter 8 nt + g, slots t of columns 2ks, 2ks+1.
  for (int i = tid; i < p.ntiles * KS * 32; i += kThreads) {
    const int l = i & 31, ks = (i >> 5) % KS, nt = (i >> 5) / KS;
    const int n = 8 * nt + (l >> 2), tt = l & 3;
    uint32_t hi[2], lo[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const Slot s = slot_of(K, 2 * ks + h, tt);
      float w0 = 0.0f, w1 = 0.0f;
      if (s.valid && n < p.M) {
        const float* kr = k + (size_t(n) * K + s.ky) * K;
        w0 = __ldg(kr + 2 * s.q);
        if (2 * s.q + 1 < K) w1 = __ldg(kr + 2 * s.q + 1);
      }
      const SplitHalf a = split_f16(w0), c = split_f16(w1);
      hi[h] = pack_half2(a.hi, c.hi);
      lo[h] = pack_half2(a.lo, c.lo);
    }
    s_w[i] = make_uint4(hi[0], hi[1], lo[0], lo[1]);
  }

  for (int i = tid; i < p.n_mtiles; i += kThreads) {
    const int pr = i / p.NX, xg = i - pr * p.NX;
    s_tab[i] = make_int4(pr * 2 * p.pitch4 + 16 * xg, pr * p.Wp + 4 * xg, 4 * xg, 0);
  }

  // This lane's fragment bases (shared-window bytes; the loads add an immediate per pair q of columns j < P):
  // its copy (the parity of g), its pair (g / 2), per column form a base, relative to an m-tile's origin
  // y0 * pitch + x0 / 2. Computed once: per m-tile only the origin is added.
  const int lane_off = (g & 1) * p.copy_stride + (g >> 1);
  const uint32_t s_split = smem_addr(split);
  const uint32_t baseA = s_split + 4u * uint32_t(lane_off + min(t, K - 1) * p.pitch);
  uint32_t baseB[RC - P + 1 > 0 ? RC - P + 1 : 1];  // rows 4 + r, r = 0 .. RC - P (the last only for rows g+8)
#pragma unroll
  for (int r = 0; r <= RC - P; ++r) baseB[r] = s_split + 4u * uint32_t(lane_off + (4 + r) * p.pitch + min(t, P - 1));
  // The m-tile's A fragments: origin (bytes) = y0 * pitch + x0 / 2 entries. Row g+8 is one pitch further, the lo
  // plane two copies further: both kernel parameters (uniform registers, added in the load's address).
  auto load_frag = [&](Frag<K, TIn>& f, int origin) {
    const uint32_t a = baseA + uint32_t(origin), a8 = a + p.pitch4;
#pragma unroll
    for (int j = 0; j < P; ++j) {
      f.h[j][0] = j == 0 ? lds32<0>(a) : j == 1 ? lds32<4>(a) : j == 2 ? lds32<8>(a) : lds32<12>(a);
      f.h[j][1] = j == 0 ? lds32<0>(a8) : j == 1 ? lds32<4>(a8) : j == 2 ? lds32<8>(a8) : lds32<12>(a8);
      if constexpr (sizeof(TIn) == 4) {
        const uint32_t l = a + p.lo4, l8 = a8 + p.lo4;
        f.l[j][0] = j == 0 ? lds32<0>(l) : j == 1 ? lds32<4>(l) : j == 2 ? lds32<8>(l) : lds32<12>(l);
        f.l[j][1] = j == 0 ? lds32<0>(l8) : j == 1 ? lds32<4>(l8) : j == 2 ? lds32<8>(l8) : lds32<12>(l8);
      }
    }
#pragma unroll
    for (int j = P; j < RC; ++j) {
      const uint32_t b0 = baseB[j - P] + uint32_t(origin), b1 = baseB[j - P + 1] + uint32_t(origin);
      f.h[j][0] = lds32<0>(b0);
      f.h[j][1] = lds32<0>(b1);
      if constexpr (sizeof(TIn) == 4) {
        f.l[j][0] = lds32<0>(b0 + p.lo4);
        f.l[j][1] = lds32<0>(b1 + p.lo4);
      }
    }
  };
  // This lane's staged output: filter n_lane = 2t + (g & 1) of an n-tile, pooled column g / 2 of an m-tile (it
  // exists while the m-tile's first pooled column 4 * xg < pc_lim).
  const int n_lane = 2 * t + (g & 1), pc_lim = p.Wp - (g >> 1);
  const bool odd = g & 1;
  const uint32_t st_lane = smem_addr(stage + n_lane * p.plane + (g >> 1));

  const bool one_ntile = p.ntiles == 1;
  uint4 w1[KS];  // the weights of n-tile 0, kept when it is the only one
  int buf = 0;
  for (; b < p.B; b += gridDim.x, buf ^= 1) {
    cp_async_wait_group<0>();
    __syncthreads();  // raw image b is in; the last image's m-tiles (split, stage) are done
    const long long next = b + gridDim.x;
    if (next < p.B)
      fetch_image(raw + (buf ^ 1) * p.raw_stride, xb + size_t(next) * p.img_bytes, p.img_bytes, p.piece);
    split_image<TIn>(raw + buf * p.raw_stride, split, p);
    if (b >= gridDim.x) write_out(stage, y, b - gridDim.x, p.out_per_img, p.hw, p.plane, p.vec_out);
    __syncthreads();  // the copies are in; the stage is free
    if (one_ntile) {
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) w1[ks] = s_w[ks * 32 + lane];
    }

    // m-tiles warp, warp + 8, ...; one n-tile (weights in registers) or several (weights from shared memory).
    if (one_ntile) {
#pragma unroll 1
      for (int mt = warp; mt < p.n_mtiles; mt += kWarps) {
        const int4 e = s_tab[mt];
        Frag<K, TIn> f;
        load_frag(f, e.x);
        tile_ntile<K, TIn>(f, w1, n_lane < p.M && e.z < pc_lim, odd, st_lane + 4u * uint32_t(e.y));
      }
    } else {
#pragma unroll 1
      for (int mt = warp; mt < p.n_mtiles; mt += kWarps) {
        const int4 e = s_tab[mt];
        Frag<K, TIn> f;
        load_frag(f, e.x);
        uint32_t st = st_lane + 4u * uint32_t(e.y);
        const bool col = e.z < pc_lim;
#pragma unroll 1
        for (int nt = 0; nt < p.ntiles; ++nt, st += 32u * uint32_t(p.plane)) {
          uint4 w[KS];
#pragma unroll
          for (int ks = 0; ks < KS; ++ks) w[ks] = s_w[(nt * KS + ks) * 32 + lane];
          tile_ntile<K, TIn>(f, w, col && 8 * nt + n_lane < p.M, odd, st);
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
    case 1: return reinterpret_cast<const void*>(conv19_kernel<1, TIn, TOut>);
    case 2: return reinterpret_cast<const void*>(conv19_kernel<2, TIn, TOut>);
    case 3: return reinterpret_cast<const void*>(conv19_kernel<3, TIn, TOut>);
    case 4: return reinterpret_cast<const void*>(conv19_kernel<4, TIn, TOut>);
    case 5: return reinterpret_cast<const void*>(conv19_kernel<5, TIn, TOut>);
    case 6: return reinterpret_cast<const void*>(conv19_kernel<6, TIn, TOut>);
    default: return reinterpret_cast<const void*>(conv19_kernel<7, TIn, TOut>);
  }
}

int ksteps(int K) { return K <= 4 ? 1 : K == 5 ? 2 : K == 6 ? 3 : 4; }

// The block's shared memory layout for shape s and input element size elt (bytes); "" or why it does not fit.
std::string layout(const ConvShape& s, size_t elt, Params& p, size_t& smem) {
  if (s.C != 1) return "gpu-split-f16-fused: a first-layer kernel, C must be 1 (got " + std::to_string(s.C) + ")";
  if (s.K > kMaxK)
    return "gpu-split-f16-fused: K up to " + std::to_string(kMaxK) + " (got " + std::to_string(s.K) + ")";
  if (s.Ho() < 2 || s.Wo() < 2) return "gpu-split-f16-fused: the conv output is under 2x2 (nothing to pool)";
  if (s.M > kMaxM)
    return "gpu-split-f16-fused: M up to " + std::to_string(kMaxM) + " (got " + std::to_string(s.M) + ")";
  if (s.H > 2048 || s.W > 2048) return "gpu-split-f16-fused: an image is too large for shared memory";
  const int K = int(s.K), P = (K + 1) / 2;
  p.B = s.B; p.H = int(s.H); p.W = int(s.W); p.M = int(s.M);
  p.Hp = int(s.Ho() / 2); p.Wp = int(s.Wo() / 2);
  p.NX = (2 * p.Wp + 7) / 8;
  p.n_mtiles = p.Hp * p.NX;
  p.ntiles = (p.M + 7) / 8;
  p.R = 2 * p.Hp + K - 1;
  // Lanes read entries up to 4 NX - 1 + P - 1 of a copy row (pixel column 8 NX - 1, pair P - 1).
  p.units = (4 * p.NX + P - 1 + 1) / 2;
  const bool f32 = elt == 4;
  p.pitch = up_to_residue(2 * p.units, 4, 8);
  p.copy_stride = up_to_residue(p.R * p.pitch, 16, 32);
  p.img_bytes = int(s.H * s.W * int64_t(elt));
  p.raw_stride = round_up(p.img_bytes, 16);
  p.out_per_img = p.M * p.Hp * p.Wp;
  p.plane = up_to_residue(p.Hp * p.Wp, 4, 8);
  const int nks = ksteps(K);
  size_t off = 0;
  p.w_off = int(off); off += size_t(p.ntiles) * nks * 32 * 16;
  p.raw_off = int(off); off += 2 * size_t(p.raw_stride);
  p.split_off = int(off); off += size_t(p.copy_stride) * (f32 ? 4 : 2) * 4;
  p.stage_off = int(off); off += size_t(p.M) * p.plane * 4;
  p.tab_off = int(off); off += size_t(p.n_mtiles) * 16;
  p.pitch4 = 4 * p.pitch;
  p.lo4 = 8 * p.copy_stride;
  smem = off;
  if (smem > kSmemBudget)
    return "gpu-split-f16-fused: an image and its pooled output need " + std::to_string(smem / 1024) +
           " KB of shared memory, over " + std::to_string(kSmemBudget / 1024) + " KB";
  p.units_div = FastDiv(uint32_t(p.units));
  p.hw = FastDiv(uint32_t(p.Hp * p.Wp));
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
  launch_persistent(kernel_for<TIn, TOut>(int(s.K)), "gpu-split-f16-fused", kThreads, smem, s.B, args, st);
}

}  // namespace

void conv_fwd_gpu_split_f16_fused(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  launch(x, k, y, s, st);
}

void conv_fwd_gpu_split_f16_fused_u8(const uint8_t* x, const float* k, float* y, const ConvShape& s,
                                     cudaStream_t st) {
  launch(x, k, y, s, st);
}

void conv_fwd_gpu_split_f16_fused_u8_half_out(const uint8_t* x, const float* k, __half* y, const ConvShape& s,
                                              cudaStream_t st) {
  launch(x, k, y, s, st);
}

// Host code only (no GPU needed): the shape checks and the shared-memory budget of the float32 layout (the larger).
std::string conv_supports_gpu_split_f16_fused(const ConvShape& s) {
  Params p{};
  size_t smem = 0;
  return layout(s, 4, p, smem);
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-split-f16-fused",
    .step = 19,
    .summary = "conv + tanh + 2x2 max pool, C=1, K<=7, on the FP16 tensor cores with split operands (hi + lo "
               "halves, 3 MMAs; uint8 input 2): FP32-accurate, pixel pairs from even/odd image copies, in-lane pool",
    .epilogue = Epilogue::TanhMaxPool2,
    .precision = Precision::F16x3,
    .launch = conv_fwd_gpu_split_f16_fused,
    .launch_u8 = conv_fwd_gpu_split_f16_fused_u8,
    .launch_u8_f16_out = conv_fwd_gpu_split_f16_fused_u8_half_out,
    .supports = conv_supports_gpu_split_f16_fused,
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
