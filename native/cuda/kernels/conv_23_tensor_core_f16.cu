// Step 23 -- gpu-tensor-core-f16: one FP16 tensor-core pass (m16n8k16, float32 accumulators) on step 22's
// structure, the image staged as channel pairs so that every B register is one aligned 32-bit load holding two
// k values.
// Measurements and what was tried: docs/ladder-findings/23.md (docs/ladder.md).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/runtime/lean_tiles.cuh"
#include "cuda/runtime/pixel_pair_store.cuh"
#include "cuda/runtime/cp_async.cuh"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/fast_div.cuh"
#include "cuda/runtime/mma_f16.cuh"
#include "cuda/runtime/persistent.cuh"
#include "cuda/runtime/registry.cuh"

namespace pyconv {
namespace {

constexpr size_t kSmemLimit = 220 * 1024;  // per block, opted in (sm_90 allows 227 KB)
// Blocks per SM the registers must allow: six accumulator tiles per warp (1 x 6 or 2 x 3) in blocks of up to 8
// warps take three (1 x 6: 80 registers. With an earlier epilogue, on sp19 conv2: 0.147 ms against 0.150 with two
// blocks of 116 registers, and 0.154 with 3 n-tiles per warp in two blocks of 14 warps; H200, NVBench, batch
// 10000, measured while developing).
// Four blocks of 1 x 6 (72 registers through __maxnreg__, 40 bytes spilled) were slower: sp19 conv2 0.143 ms
// against 0.139, and the sp19 pinned pass unchanged (0.517 ms both; H200, NVBench and host-timed calls, a probe build
// with both kernels side by side).
__host__ __device__ constexpr int min_blocks(int acc_tiles) { return acc_tiles == 6 ? 3 : 2; }

struct F16Params {
  int C, H, W, M, K, Ho, Wo;
  long long B;
  int P;           // Ho * Wo
  int tiles;       // ceil(P / 8): 8-pixel n-tiles
  int C2;          // ceil(C / 2): channel pairs
  int npairs;      // C2 * K * K: the GEMM depth in k pairs
  int ksteps;      // ceil(npairs / 8): one m16n8k16 k-step takes 8 pairs
  int mtiles;      // ceil(M / 16), even when > 1 (two m-tiles per pass)
  int HW;          // H * W
  int img_floats;  // C * H * W
  int img_pitch;   // img_floats rounded up to 4 (each slot 16-byte aligned)
  bool vec4;       // img_floats % 4 == 0: 16-byte copies
  int a_off, off_off, pair_off, stage_off, out_off, total;  // shared memory layout, bytes
  bool staged_out;  // the image's output goes through shared memory (out_off) and leaves as one contiguous block
  bool out_vec4;    // M * P % 4 == 0: the output block leaves in 16-byte stores
  FastDiv div_wo;
  FastDiv div_hw2;  // H * W / 2 (H * W even): the conversion takes two pixels per item
};

__device__ __forceinline__ uint32_t ldx(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr));
  return v;
}

// The fp32 image in a staging slot rewritten as channel-pair planes of halves (round to nearest), once per image:
// every value is read by up to K*K windows. With H * W even, one item is two neighbouring pixels of a pair plane
// (two 8-byte loads, one 8-byte store) and the planes are one flat loop (per-plane loops cost ~880 instructions
// per sp19 conv2 image, Nsight Compute's per-instruction counts).
__device__ __forceinline__ void to_pairs(uint32_t* pairs, const float* img, const F16Params& p) {
  if ((p.HW & 1) == 0) {
    const int hw2 = p.HW / 2;
    for (int i = threadIdx.x; i < p.C2 * hw2; i += blockDim.x) {
      const int c2 = int(p.div_hw2.div(uint32_t(i))), q = i - c2 * hw2;
      const float2 lo = reinterpret_cast<const float2*>(img + 2 * c2 * p.HW)[q];
      const float2 hi = 2 * c2 + 1 < p.C ? reinterpret_cast<const float2*>(img + (2 * c2 + 1) * p.HW)[q]
                                         : make_float2(0.0f, 0.0f);
      const __half2 h0 = __floats2half2_rn(lo.x, hi.x), h1 = __floats2half2_rn(lo.y, hi.y);
      reinterpret_cast<uint2*>(pairs + c2 * p.HW)[q] =
          make_uint2(*reinterpret_cast<const uint32_t*>(&h0), *reinterpret_cast<const uint32_t*>(&h1));
    }
    return;
  }
  for (int c2 = 0; c2 < p.C2; ++c2) {
    const float* lo = img + 2 * c2 * p.HW;
    const bool has_hi = 2 * c2 + 1 < p.C;
    uint32_t* dst = pairs + c2 * p.HW;
    for (int i = threadIdx.x; i < p.HW; i += blockDim.x) {
      const __half2 h = __floats2half2_rn(lo[i], has_hi ? lo[p.HW + i] : 0.0f);
      dst[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
  }
}

// The k-steps of MT m-tiles over the warp's n-tiles (GUARDED: only the first nv are real).
template <int MT, int NT, bool GUARDED>
__device__ __forceinline__ void k_loop(float (&acc)[MT][NT][4], const uint32_t (&pix)[NT], int nv, const uint4* a_p,
                                       int mt_stride, const uint32_t* off_p, int ksteps) {
#pragma unroll 2
  for (int ks = 0; ks < ksteps; ++ks) {
    uint4 a[MT];
#pragma unroll
    for (int j = 0; j < MT; ++j) a[j] = a_p[j * mt_stride + ks * 32];
    const uint32_t o = off_p[ks * 4];  // words: pair t (low half), pair t+4 (high half) of this k-step
    const uint32_t o0 = 4u * (o & 0xffffu), o1 = 4u * (o >> 16);
#pragma unroll
    for (int i = 0; i < NT; ++i) {
      if (GUARDED && i >= nv) continue;
      const uint32_t b0 = ldx(pix[i] + o0), b1 = ldx(pix[i] + o1);
#pragma unroll
      for (int j = 0; j < MT; ++j) mma_f16(acc[j][i], a[j].x, a[j].y, a[j].z, a[j].w, b0, b1);
    }
  }
}

// TOut: float, or __half for launch_f16_out (the output rounded to nearest as it leaves: staged in float32).
template <int MT, int NT, typename TOut>
__global__ void __launch_bounds__(lean_max_warps(MT * NT) * 32, min_blocks(MT * NT))
    conv_fwd_gpu_f16_kernel(const float* __restrict__ x, const float* __restrict__ k, TOut* __restrict__ y,
                            const F16Params p) {
  extern __shared__ uint4 smem[];
  unsigned char* base = reinterpret_cast<unsigned char*>(smem);
  uint4* s_a = reinterpret_cast<uint4*>(base + p.a_off);            // [mtiles][ksteps][32 lanes]: A fragments
  uint32_t* s_off = reinterpret_cast<uint32_t*>(base + p.off_off);  // [ksteps][t]: word offsets of pairs t, t+4
  uint32_t* s_pair = reinterpret_cast<uint32_t*>(base + p.pair_off);  // [C2][H][W]: the image as half2 pairs
  float* s_stage = reinterpret_cast<float*>(base + p.stage_off);      // [2][img_pitch]: fp32 images in flight
  float* s_out = reinterpret_cast<float*>(base + p.out_off);          // [M][P]: one image's output (staged_out)
  const int warps = int(blockDim.x) / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;

  long long b = blockIdx.x;
  if (b < p.B) {  // the first image flies while the tables are built
    cp_async_floats(s_stage, x + b * p.img_floats, p.img_floats, p.vec4);
    cp_async_commit();
  }

  // A fragments: a0 (filter g, pair t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4) of each m-tile and k-step, the
  // lower channel of the pair in the low half. Pair (c2, tap) = channels 2 c2, 2 c2 + 1 at tap (ky, kx).
  const int KK = p.K * p.K;
  uint32_t* s_au = reinterpret_cast<uint32_t*>(s_a);
  for (int i = threadIdx.x; i < p.mtiles * p.ksteps * 128; i += blockDim.x) {
    const int reg = i & 3, l = (i >> 2) & 31, rest = i >> 7;
    const int mt = rest / p.ksteps, ks = rest - mt * p.ksteps;
    const int m = mt * 16 + (l >> 2) + 8 * (reg & 1), pair = ks * 8 + (l & 3) + 4 * (reg >> 1);
    float w0 = 0.0f, w1 = 0.0f;
    if (m < p.M && pair < p.npairs) {
      const int c2 = pair / KK, tap = pair - c2 * KK;
      const float* wr = k + (size_t(m) * p.C + 2 * c2) * KK + tap;
      w0 = __ldg(wr);
      if (2 * c2 + 1 < p.C) w1 = __ldg(wr + KK);
    }
    const __half2 h = __floats2half2_rn(w0, w1);
    s_au[i] = *reinterpret_cast<const uint32_t*>(&h);
  }
  // Pair -> word offset from a pixel's base; padded pairs read the pixel itself (their weights are 0).
  for (int i = threadIdx.x; i < p.ksteps * 4; i += blockDim.x) {
    const int ks = i >> 2, tt = i & 3;
    uint32_t o = 0;
    for (int h = 0; h < 2; ++h) {
      const int pair = ks * 8 + tt + 4 * h;
      int off = 0;
      if (pair < p.npairs) {
        const int c2 = pair / KK, tap = pair - c2 * KK, ky = tap / p.K;
        off = c2 * p.HW + ky * p.W + (tap - ky * p.K);
      }
      o |= uint32_t(off) << (16 * h);
    }
    s_off[i] = o;
  }
  // This lane's B column (pixel g) of each of its n-tiles as a byte address in the pair planes.
  const uint32_t s_x = smem_addr(s_pair);
  const bool one_group = p.tiles <= warps * NT;
  auto bases = [&](uint32_t (&pix)[NT], int first) {
#pragma unroll
    for (int i = 0; i < NT; ++i) {
      const int n = (first + i * warps) * 8 + g;
      int w = 0;
      if (n < p.P) {
        const int oy = int(p.div_wo.div(uint32_t(n)));
        w = oy * p.W + (n - oy * p.Wo);
      }
      pix[i] = s_x + 4u * uint32_t(w);
    }
  };
  uint32_t pix0[NT];
  bases(pix0, warp);
  const int nv0 = warp < p.tiles ? min(NT, (p.tiles - warp + warps - 1) / warps) : 0;

  // One group of n-tiles for m-tiles mt0 .. mt0+MT-1 of image b: accumulate, then straight to y.
  auto group = [&](const uint32_t (&pix)[NT], int nv, int first, int mt0) {
    float acc[MT][NT][4];
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
      for (int i = 0; i < NT; ++i) acc[j][i][0] = acc[j][i][1] = acc[j][i][2] = acc[j][i][3] = 0.0f;
    const uint4* a_p = s_a + mt0 * p.ksteps * 32 + lane;
    const uint32_t* off_p = s_off + t;
    if (nv == NT)
      k_loop<MT, NT, false>(acc, pix, nv, a_p, p.ksteps * 32, off_p, p.ksteps);
    else
      k_loop<MT, NT, true>(acc, pix, nv, a_p, p.ksteps * 32, off_p, p.ksteps);
    // D rows g and g+8 are filters, columns 2t and 2t+1 consecutive pixels: into the staged output, or straight
    // to y.
    const int m_lane = mt0 * 16 + g;
    // One loop body per destination, the choice made once per group: with the choice per store, sp19 conv2 took
    // 0.150 ms (H200, NVBench, measured while developing); as here, 0.140
    // (results/bench-nvidia-h200-2026-11-24-step23-stores.json), 80 registers and no spill.
    auto store_all = [&](auto to_global, auto* out) {
#pragma unroll
      for (int i = 0; i < NT; ++i) {
        if (i >= nv) continue;
        const int n = (first + i * warps) * 8 + 2 * t;
#pragma unroll
        for (int jh = 0; jh < 2 * MT; ++jh) {
          const int j = jh / 2, h = jh % 2;
          if (m_lane + 16 * j + 8 * h >= p.M) continue;
          store_pixel_pair<decltype(to_global)::value>(out + uint32_t((16 * j + 8 * h) * p.P + n), n, p.P,
                                                       acc[j][i][2 * h], acc[j][i][2 * h + 1]);
        }
      }
    };
    if (p.staged_out)
      store_all(std::false_type{}, s_out + m_lane * p.P);
    else
      store_all(std::true_type{}, y + (size_t(b) * p.M + m_lane) * size_t(p.P));
  };

  // The staged output of image `ob` leaves as one contiguous block: y[ob] is M * P consecutive values.
  auto copy_out = [&](long long ob) {
    TOut* yo = y + size_t(ob) * p.M * p.P;
    if constexpr (std::is_same_v<TOut, __half>) {
      if (p.out_vec4) {  // 4 floats -> 4 halves, one 8-byte store
        const float4* src = reinterpret_cast<const float4*>(s_out);
        for (int i = threadIdx.x; i < p.M * p.P / 4; i += blockDim.x) {
          const float4 v = src[i];
          const __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
          __stcs(reinterpret_cast<uint2*>(yo) + i, make_uint2(*reinterpret_cast<const unsigned*>(&lo),
                                                              *reinterpret_cast<const unsigned*>(&hi)));
        }
      } else {
        for (int i = threadIdx.x; i < p.M * p.P; i += blockDim.x) yo[i] = __float2half_rn(s_out[i]);
      }
    } else if (p.out_vec4) {
      const float4* src = reinterpret_cast<const float4*>(s_out);
      for (int i = threadIdx.x; i < p.M * p.P / 4; i += blockDim.x) __stcs(reinterpret_cast<float4*>(yo) + i, src[i]);
    } else {
      for (int i = threadIdx.x; i < p.M * p.P; i += blockDim.x) __stcs(yo + i, s_out[i]);
    }
  };

  int slot = 0;
  long long prev = -1;  // the image whose output waits in s_out (staged_out)
  for (; b < p.B; b += gridDim.x, slot ^= 1) {
    cp_async_wait(0);
    __syncthreads();  // image b is in `slot`; every warp is done with image b - grid (its pairs and its slot)
    const long long nb = b + gridDim.x;
    if (nb < p.B) {
      cp_async_floats(s_stage + (slot ^ 1) * p.img_pitch, x + nb * p.img_floats, p.img_floats, p.vec4);
      cp_async_commit();
    }
    if (p.staged_out && prev >= 0) copy_out(prev);  // every warp wrote it before the barrier above
    to_pairs(s_pair, s_stage + slot * p.img_pitch, p);
    __syncthreads();  // the pairs are written; the staged output is out
    prev = b;
    for (int mt0 = 0; mt0 < p.mtiles; mt0 += MT) {  // p.mtiles is a multiple of MT (zero filters pad it)
      if (one_group) {
        if (nv0 > 0) group(pix0, nv0, warp, mt0);
        continue;
      }
      for (int tg = 0; tg < p.tiles; tg += warps * NT) {
        const int first = tg + warp;
        if (first >= p.tiles) continue;
        uint32_t pix[NT];
        bases(pix, first);
        group(pix, min(NT, (p.tiles - first + warps - 1) / warps), first, mt0);
      }
    }
  }
  if (p.staged_out && prev >= 0) {
    __syncthreads();  // every warp wrote the last image's output
    copy_out(prev);
  }
}

template <typename TOut>
struct Config {
  int mt, nt;
  void (*kernel)(const float*, const float*, TOut*, const F16Params);
};

// The tiling rule of lean_tiles.cuh over this step's kernels.
template <typename TOut>
const Config<TOut>& pick(int M, int tiles, int& warps) {
  static const Config<TOut> configs[] = {
      {1, 1, conv_fwd_gpu_f16_kernel<1, 1, TOut>}, {1, 2, conv_fwd_gpu_f16_kernel<1, 2, TOut>},
      {1, 3, conv_fwd_gpu_f16_kernel<1, 3, TOut>}, {1, 6, conv_fwd_gpu_f16_kernel<1, 6, TOut>},
      {2, 1, conv_fwd_gpu_f16_kernel<2, 1, TOut>}, {2, 3, conv_fwd_gpu_f16_kernel<2, 3, TOut>},
  };
  return pick_lean_tiles(configs, M, tiles, warps);
}

std::string plan(const ConvShape& s, F16Params& p) {
  const int64_t img = s.C * s.H * s.W, P = s.Ho() * s.Wo(), C2 = (s.C + 1) / 2, npairs = C2 * s.K * s.K;
  if (img > (int64_t(1) << 24) || npairs > (int64_t(1) << 20) || s.M > (int64_t(1) << 20))
    return "gpu-tensor-core-f16: image or weights too large";
  p.C = int(s.C); p.H = int(s.H); p.W = int(s.W); p.M = int(s.M); p.K = int(s.K);
  p.Ho = int(s.Ho()); p.Wo = int(s.Wo()); p.B = s.B; p.P = int(P);
  p.tiles = int((P + 7) / 8);
  p.C2 = int(C2);
  p.npairs = int(npairs);
  p.ksteps = int((npairs + 7) / 8);
  p.mtiles = int((s.M + 15) / 16);
  if (p.mtiles > 1) p.mtiles += p.mtiles % 2;
  p.HW = int(s.H * s.W);
  p.img_floats = int(img);
  p.img_pitch = int((img + 3) / 4 * 4);
  p.vec4 = img % 4 == 0;
  p.div_wo = FastDiv(uint32_t(p.Wo));
  p.div_hw2 = FastDiv(uint32_t(std::max(1, p.HW / 2)));
  const size_t a = size_t(p.mtiles) * p.ksteps * 32 * 16, off = size_t(p.ksteps) * 16,
               pairs = (size_t(C2) * p.HW * 4 + 15) / 16 * 16, stage = size_t(2) * p.img_pitch * 4;
  p.a_off = 0;
  p.off_off = int(a);
  p.pair_off = int(a + off);
  p.stage_off = int(a + off + pairs);
  p.out_off = int(a + off + pairs + stage);
  // Within the limit, the pair planes hold fewer than 2^16 words: their offsets fit the 16-bit halves of s_off.
  size_t total = a + off + pairs + stage;
  // The output staged in shared memory when it fits beside the rest: one contiguous block per image in 16-byte
  // stores instead of each lane's 8-byte pixel pairs, which straddle 32-byte sectors whenever a plane's P * 4
  // bytes are not a multiple of 32 (sp19 conv2: Nsight Compute counted 41% excess sectors and ~2,100 of ~7,000
  // instructions per image in the direct stores' address arithmetic).
  const size_t out = (size_t(s.M) * P * 4 + 15) / 16 * 16;
  p.staged_out = total + out <= kSmemLimit;
  p.out_vec4 = (s.M * P) % 4 == 0;
  if (p.staged_out) total += out;
  p.total = total > kSmemLimit ? int(kSmemLimit + 1) : int(total);
  if (total > kSmemLimit)
    return "gpu-tensor-core-f16: two " + std::to_string(s.C) + "x" + std::to_string(s.H) + "x" +
           std::to_string(s.W) + " images, their FP16 pairs and " + std::to_string(s.M) + " filters need " +
           std::to_string(total / 1024) + " KB of shared memory (limit " + std::to_string(kSmemLimit / 1024) +
           " KB)";
  return "";
}

}  // namespace

std::string conv_supports_gpu_tensor_core_f16(const ConvShape& s) {
  F16Params p{};
  return plan(s, p);
}

namespace {
template <typename TOut>
void launch(const float* x, const float* k, TOut* y, const ConvShape& s, cudaStream_t st) {
  F16Params p{};
  const std::string why = plan(s, p);
  if (!why.empty()) throw std::invalid_argument(why);
  if (s.B == 0) return;
  int warps = 0;
  const Config<TOut>& c = pick<TOut>(p.M, p.tiles, warps);
  const size_t smem = size_t(p.total);
  const int threads = warps * 32;
  // Persistent blocks: each walks images blockIdx.x, +gridDim.x, ...
  const dim3 grid = persistent_grid("gpu-tensor-core-f16", c.kernel, threads, smem, s.B);
  c.kernel<<<grid, threads, smem, st>>>(x, k, y, p);
  CUDA_CHECK_LAUNCH();
}
}  // namespace

void conv_fwd_gpu_tensor_core_f16(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  launch(x, k, y, s, st);
}

void conv_fwd_gpu_tensor_core_f16_half_out(const float* x, const float* k, __half* y, const ConvShape& s,
                                           cudaStream_t st) {
  launch(x, k, y, s, st);
}

// One FP16 rounding per operand (relative 2^-11, TF32's), held to step 22's 2e-3. Reduced precision: final uses it
// only where the end-to-end bench of the model's weights on this GPU allowed reduced precision.
PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-tensor-core-f16",
    .step = 23,
    .summary = "one FP16 tensor-core pass (m16n8k16) on step 22's structure: the image staged as channel pairs, "
               "half the k-steps of TF32",
    .precision = Precision::F16,
    .rtol = 2e-3,
    .launch = conv_fwd_gpu_tensor_core_f16,
    .launch_f16_out = conv_fwd_gpu_tensor_core_f16_half_out,
    .supports = conv_supports_gpu_tensor_core_f16,
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
