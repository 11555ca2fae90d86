// Step 16 -- gpu-fused-warp-specialised: convolution + tanh + 2x2/2 max pooling for a network's first layer (one
// input channel, K = 5), FP32 FFMAs, with one producer warp streaming images into a ring of shared-memory slots
// and consumer warps that never wait on each other.
// Measurements and what was tried: docs/ladder-findings/16.md (docs/ladder.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <mutex>
#include <string>

#include "cuda/runtime/fallback_steps.cuh"
#include "cuda/runtime/first_layer.cuh"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/fast_div.cuh"
#include "cuda/runtime/mbarrier.cuh"
#include "cuda/runtime/registry.cuh"

namespace pyconv {
namespace {

constexpr int kK = 5;            // the one kernel size specialised here (sp18, sp19, fa17, fa19 conv1)
constexpr int kTile = 4;         // conv outputs per item: kTile x kTile (2 x 2 pooled), per channel
constexpr int kXR = 8;           // input columns a row load brings: kTile + kK - 1 = 8, two float4
constexpr int kSlots = 8;        // float image slots in the ring
constexpr int kRawSlots = 4;     // uint8 landing slots (uint8 input only)
constexpr float kTwoLog2e = 2.8853900817779268f;  // 2 * log2(e): tanh(x) = 1 - 2 / (1 + 2^(kTwoLog2e * x))

__host__ __device__ constexpr int round_up(int v, int to) { return (v + to - 1) / to * to; }

struct Params {
  long long B;
  int H, W, M, Hp, Wp;
  int TH, TW;           // item rows / columns per image: ceil(Hp / 2), ceil(Wp / 2)
  int groups;           // channel groups (M / MB)
  int pitch;            // row pitch (floats) of a float slot
  int slot_floats;      // one float slot, pad rows included (multiple of 4)
  int img_bytes;        // one raw image (H * W * element size)
  int raw_stride;       // one raw slot (bytes, multiple of 16); uint8 input only
  int piece;            // bytes per cp.async (16, 8 or 4): the largest that rows / images are made of
  int by_rows;          // 1: the slot's rows are padded (pitch > W): float rows are copied one by one, uint8
                        // bytes widened row by row; 0: an image is one contiguous run of 16-byte pieces
  FastDiv row_pieces;   // pieces per image row (by_rows, float input)
  int w_floats;         // groups * K * KPAD
  int vec_store;        // 1: pooled pairs stored as float2 (Wp even, y 8-byte aligned)
  FastDiv per_img, tiles, tw;  // by groups * TH * TW, TH * TW, TW
};

// --- cp.async (PTX; sm_80+); the mbarriers are cuda/runtime/mbarrier.cuh's ----------------------------------
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
}
// 16, 8 or 4 bytes (a warp-uniform choice): images or rows that are not whole 16-byte blocks.
__device__ __forceinline__ void cp_async_piece(void* smem, const void* gmem, int bytes) {
  if (bytes == 16)
    cp_async16(smem, gmem);
  else if (bytes == 8)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
}

// tanh(x) from z = 2*log2(e)*x: 1 - 2 / (1 + 2^z). z -> +inf: 2^z = inf, rcp = 0, 1. z -> -inf: 2^z = 0, -1.
__device__ __forceinline__ float tanh_from_scaled(float z) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(z));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(e + 1.0f));
  return fmaf(-2.0f, r, 1.0f);
}

// The producer warp: copies the block's images, in order, into the float slots and signals full[slot]. Slots have
// row pitch p.pitch >= W; past the image they stay zero.
template <int NC, typename TIn>
__device__ void produce(const TIn* __restrict__ x, long long img0, int nimg, float* slots, unsigned char* raw,
                        uint64_t* full, uint64_t* empty, const Params& p) {
  const int lane = threadIdx.x & 31;
  const unsigned char* src = reinterpret_cast<const unsigned char*>(x) + size_t(img0) * p.img_bytes;
  const int npieces = p.img_bytes / p.piece;
  if constexpr (sizeof(TIn) == 4) {
    // Float input is read in place: the copy lands in the slot as it is, whole (pitch W) or row by row.
    const int row_bytes = p.W * 4, nrp = p.by_rows ? int(p.row_pieces.d) : 0;
    for (int j = 0; j < nimg; ++j) {
      const int s = j % kSlots;
      if (j >= kSlots) mbar_wait(&empty[s], unsigned((j / kSlots - 1) & 1));
      unsigned char* dst = reinterpret_cast<unsigned char*>(slots + size_t(s) * p.slot_floats);
      const unsigned char* img = src + size_t(j) * p.img_bytes;
      if (!p.by_rows) {
        for (int i = lane; i < npieces; i += 32) cp_async16(dst + 16 * i, img + 16 * size_t(i));
      } else {
        for (int i = lane; i < npieces; i += 32) {
          const int r = int(p.row_pieces.div(uint32_t(i))), c = (i - r * nrp) * p.piece;
          cp_async_piece(dst + size_t(r) * p.pitch * 4 + c, img + size_t(r) * row_bytes + c, p.piece);
        }
      }
      mbar_arrive_on_copies(&full[s]);
    }
  } else {
    // uint8: bytes land in a raw slot (cp.async groups, one per image, kRawSlots in flight), then are widened
    // into the float slot; each lane arrives on full after its own stores.
    for (int j = 0; j < kRawSlots; ++j) {
      if (j < nimg)
        for (int i = lane; i < npieces; i += 32)
          cp_async_piece(raw + size_t(j) * p.raw_stride + p.piece * i,
                         src + size_t(j) * p.img_bytes + p.piece * size_t(i), p.piece);
      cp_async_commit();
    }
    for (int j = 0; j < nimg; ++j) {
      const int s = j % kSlots, rs = j % kRawSlots;
      cp_async_wait_group<kRawSlots - 1>();  // this lane's copies of image j have landed ...
      __syncwarp();                    // ... and every lane's
      if (j >= kSlots) mbar_wait(&empty[s], unsigned((j / kSlots - 1) & 1));
      const unsigned char* rb8 = raw + size_t(rs) * p.raw_stride;
      float* fs = slots + size_t(s) * p.slot_floats;
      if (!p.by_rows) {
        // Pitch W: byte i becomes float i, 16 bytes per step, then the last (img_bytes % 16) / 4 words.
        const uint4* rb = reinterpret_cast<const uint4*>(rb8);
        float4* dst = reinterpret_cast<float4*>(fs);
        const int n16 = p.img_bytes / 16;
        for (int i = lane; i < n16; i += 32) {
          const uint4 u = rb[i];
          const unsigned wd[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
          for (int e = 0; e < 4; ++e)
            dst[4 * i + e] = make_float4(float(wd[e] & 0xffu), float((wd[e] >> 8) & 0xffu),
                                         float((wd[e] >> 16) & 0xffu), float(wd[e] >> 24));
        }
        for (int i = 4 * n16 + lane; i < p.img_bytes / 4; i += 32) {
          const unsigned wd = reinterpret_cast<const unsigned*>(rb8)[i];
          dst[i] = make_float4(float(wd & 0xffu), float((wd >> 8) & 0xffu), float((wd >> 16) & 0xffu),
                               float(wd >> 24));
        }
      } else {
        // Padded rows (W % 4 != 0): one byte per lane and step, row by row.
        for (int r = 0; r < p.H; ++r)
          for (int c = lane; c < p.W; c += 32) fs[r * p.pitch + c] = float(rb8[r * p.W + c]);
      }
      mbar_arrive(&full[s]);
      __syncwarp();  // every lane is done reading raw slot rs before it is refilled
      if (j + kRawSlots < nimg)
        for (int i = lane; i < npieces; i += 32)
          cp_async_piece(raw + size_t(rs) * p.raw_stride + p.piece * i,
                         src + size_t(j + kRawSlots) * p.img_bytes + p.piece * size_t(i), p.piece);
      cp_async_commit();
    }
    cp_async_wait_group<0>();
  }
}

template <int MB, int NC, int MINB, typename TIn>
__global__ void __launch_bounds__((NC + 1) * 32, MINB)
    conv16_kernel(const TIn* __restrict__ x, const float* __restrict__ k, float* __restrict__ y, Params p) {
  constexpr int KPAD = round_up(kK * MB, 4);  // weights of one kernel row, [q][m], padded to whole float4s
  extern __shared__ float4 smem4[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem4);
  uint64_t* empty = full + kSlots;
  int* next_chunk = reinterpret_cast<int*>(empty + kSlots);  // the consumers' work counter (16 bytes kept)
  float* s_w = reinterpret_cast<float*>(empty + kSlots + 2);  // [groups][kK][KPAD], scaled by 2*log2(e)
  float* slots = s_w + p.w_floats;                         // kSlots x slot_floats (16-byte aligned: see host)
  unsigned char* raw = reinterpret_cast<unsigned char*>(slots + size_t(kSlots) * p.slot_floats);
  constexpr int kThreads = (NC + 1) * 32;  // NC consumer warps + the producer warp
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

  // This block's images: a contiguous range, sizes differing by at most one between blocks.
  const long long img0 = p.B * blockIdx.x / gridDim.x, img1 = p.B * (blockIdx.x + 1) / gridDim.x;
  const int nimg = int(img1 - img0);

  if (tid == 0) {
    *next_chunk = 0;
    for (int s = 0; s < kSlots; ++s) {
      mbar_init(&full[s], 32);                          // one arrival per producer lane
      mbar_init(&empty[s], NC * 32);                    // one arrival per consumer lane
    }
  }
  for (int i = tid; i < p.w_floats; i += kThreads) {
    const int qm = i % KPAD, kp = (i / KPAD) % kK, g = i / (KPAD * kK);
    const int q = qm / MB, m = qm - q * MB;
    s_w[i] = qm < kK * MB ? kTwoLog2e * __ldg(&k[(size_t(g * MB + m) * kK + kp) * kK + q]) : 0.0f;
  }
  // Slots start zeroed: copies and widening write only the image, and the pad rows/columns are read (for conv
  // outputs the pooling drops) but never written.
  for (int i = tid; i < kSlots * p.slot_floats; i += kThreads) slots[i] = 0.0f;
  __syncthreads();  // the only block-wide barrier: roles split below
  if (nimg <= 0) return;

  if (warp == NC) {
    produce<NC>(x, img0, nimg, slots, raw, full, empty, p);
    return;
  }

  const int ipi = p.groups * p.TH * p.TW;  // items per image
  const int nitems = nimg * ipi;           // < 2^31 (checked on the host)
  const int nchunks = (nitems + 31) / 32;
  int released = 0;  // images below this have been released by this warp (empty arrived)
  // Chunks are taken in increasing order from a shared counter, so a warp that shares its scheduler with the
  // producer takes fewer of them instead of setting the pace (static round-robin would). Each warp's chunks still
  // increase, which the release order below relies on.
  for (;;) {
    int c = 0;
    if (lane == 0) c = atomicAdd(next_chunk, 1);
    c = __shfl_sync(0xffffffffu, c, 0);
    if (c >= nchunks) break;
    const int item0 = c * 32;
    const int j0 = int(p.per_img.div(uint32_t(item0)));
    const int j1 = int(p.per_img.div(uint32_t(min(item0 + 31, nitems - 1))));
    // Release the images this warp has moved past. An image is waited for (full) before it is released, even
    // one this warp never touched: its empty arrival must count for its own use of the slot, not the previous.
    for (; released < j0; ++released) {
      mbar_wait(&full[released % kSlots], unsigned((released / kSlots) & 1));
      mbar_arrive(&empty[released % kSlots]);
    }
    for (int j = j0; j <= j1; ++j) mbar_wait(&full[j % kSlots], unsigned((j / kSlots) & 1));

    const int item = item0 + lane;
    if (item < nitems) {
      const int j = int(p.per_img.div(uint32_t(item)));
      const int rem = item - j * ipi;
      const int cg = int(p.tiles.div(uint32_t(rem)));
      const int t = rem - cg * (p.TH * p.TW);
      const int ti = int(p.tw.div(uint32_t(t)));
      const int tj = t - ti * p.TW;
      const float* xt = slots + (j % kSlots) * p.slot_floats + (kTile * ti) * p.pitch + kTile * tj;
      const float* wt = s_w + cg * (kK * KPAD);

      float acc[MB][kTile][kTile];
#pragma unroll
      for (int m = 0; m < MB; ++m)
#pragma unroll
        for (int r = 0; r < kTile; ++r)
#pragma unroll
          for (int cc = 0; cc < kTile; ++cc) acc[m][r][cc] = 0.0f;

      // Kernel rows stay rolled: one iteration is the hot code (see the header).
#pragma unroll 1
      for (int kp = 0; kp < kK; ++kp, xt += p.pitch, wt += KPAD) {
        float w[KPAD];
#pragma unroll
        for (int i = 0; i < KPAD; i += 4) {
          const float4 f = *reinterpret_cast<const float4*>(wt + i);
          w[i] = f.x; w[i + 1] = f.y; w[i + 2] = f.z; w[i + 3] = f.w;
        }
#pragma unroll
        for (int r = 0; r < kTile; ++r) {
          float v[kXR];
#pragma unroll
          for (int u = 0; u < kXR; u += 4) {
            const float4 f = *reinterpret_cast<const float4*>(xt + r * p.pitch + u);
            v[u] = f.x; v[u + 1] = f.y; v[u + 2] = f.z; v[u + 3] = f.w;
          }
#pragma unroll
          for (int q = 0; q < kK; ++q)
#pragma unroll
            for (int m = 0; m < MB; ++m)
#pragma unroll
              for (int cc = 0; cc < kTile; ++cc) acc[m][r][cc] = fmaf(v[q + cc], w[q * MB + m], acc[m][r][cc]);
        }
      }

      // Pool first (the scale is positive: the same maximum), then one tanh per pooled value. Pooled row 2*ti
      // always exists; row 2*ti+1 and column 2*tj+1 only when Hp / Wp allow. The common case (both exist, float2
      // stores) is straight-line code with pointer increments; the edge tiles take the general path.
      const int plane = p.Hp * p.Wp;
      float* yo = y + ((size_t(img0 + j) * p.M + cg * MB) * p.Hp + 2 * ti) * p.Wp + 2 * tj;
      const bool row1 = 2 * ti + 1 < p.Hp;
      if (p.vec_store && row1) {
#pragma unroll
        for (int m = 0; m < MB; ++m, yo += plane) {
#pragma unroll
          for (int pr = 0; pr < 2; ++pr) {
            const float z0 = fmaxf(fmaxf(acc[m][2 * pr][0], acc[m][2 * pr][1]),
                                   fmaxf(acc[m][2 * pr + 1][0], acc[m][2 * pr + 1][1]));
            const float z1 = fmaxf(fmaxf(acc[m][2 * pr][2], acc[m][2 * pr][3]),
                                   fmaxf(acc[m][2 * pr + 1][2], acc[m][2 * pr + 1][3]));
            *reinterpret_cast<float2*>(yo + pr * p.Wp) = make_float2(tanh_from_scaled(z0), tanh_from_scaled(z1));
          }
        }
      } else {
        const bool col1 = 2 * tj + 1 < p.Wp;
#pragma unroll
        for (int m = 0; m < MB; ++m, yo += plane) {
#pragma unroll
          for (int pr = 0; pr < 2; ++pr) {
            if (pr == 1 && !row1) continue;
            const float z0 = fmaxf(fmaxf(acc[m][2 * pr][0], acc[m][2 * pr][1]),
                                   fmaxf(acc[m][2 * pr + 1][0], acc[m][2 * pr + 1][1]));
            const float z1 = fmaxf(fmaxf(acc[m][2 * pr][2], acc[m][2 * pr][3]),
                                   fmaxf(acc[m][2 * pr + 1][2], acc[m][2 * pr + 1][3]));
            yo[pr * p.Wp] = tanh_from_scaled(z0);
            if (col1) yo[pr * p.Wp + 1] = tanh_from_scaled(z1);
          }
        }
      }
    }
  }
  // Release the rest: every image is waited for (so no copy is in flight when the block exits) and every empty
  // phase the producer may wait on completes.
  for (; released < nimg; ++released) {
    mbar_wait(&full[released % kSlots], unsigned((released / kSlots) & 1));
    mbar_arrive(&empty[released % kSlots]);
  }
}

// Launch configurations, chosen once per process by PYCONV_STEP16_CONFIG (default kDefaultConfig):
//   a: 8 consumer warps + the producer, one block per SM, MB = 6 (M % 6 == 0) or 5 (M % 5 == 0);
//   b: 11 consumer warps + the producer (12 warps: <= 168 registers, registers being allocated to blocks in
//      groups of 4 warps), MB = 6 or 5: ~3 consumer warps per scheduler instead of 2, to hide the LDS latency at
//      the top of each kernel row and the epilogue;
//   c: 7 consumer warps + the producer, two blocks per SM (16 warps, <= 128 registers: a ring each), MB = 3
//      when M % 3 == 0 (else b's kernels: MB = 5 spills at 128 registers).
struct Config {
  char name;
  int consumers, min_blocks;
  bool mb3;
};
constexpr Config kConfigs[] = {{'a', 8, 1, false}, {'b', 11, 1, false}, {'c', 7, 2, true}};
constexpr char kDefaultConfig = 'b';

const Config& step16_config() {
  static const Config* cfg = nullptr;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (!cfg) {
    const char* e = std::getenv("PYCONV_STEP16_CONFIG");
    const std::string want = e && *e ? e : std::string(1, kDefaultConfig);
    for (const Config& c : kConfigs)
      if (want == std::string(1, c.name)) cfg = &c;
    if (!cfg) throw std::invalid_argument("PYCONV_STEP16_CONFIG must be a, b or c, not '" + want + "'");
  }
  return *cfg;
}

struct Plan {
  Params p{};
  const void* kernel = nullptr;
  unsigned blocks = 0, threads = 0;
  size_t smem = 0;
};

int pick_mb(long long M, bool mb3) {
  if (mb3) return M % 3 == 0 ? 3 : M % 5 == 0 ? 5 : 0;
  return M % 6 == 0 ? 6 : M % 5 == 0 ? 5 : 0;
}

template <typename TIn>
const void* kernel_for(const Config& c, int mb) {
  const bool six = mb == 6;
  switch (c.name) {
    case 'a': return six ? reinterpret_cast<const void*>(conv16_kernel<6, 8, 1, TIn>)
                         : reinterpret_cast<const void*>(conv16_kernel<5, 8, 1, TIn>);
    case 'b': return six ? reinterpret_cast<const void*>(conv16_kernel<6, 11, 1, TIn>)
                         : reinterpret_cast<const void*>(conv16_kernel<5, 11, 1, TIn>);
    default: return mb == 3 ? reinterpret_cast<const void*>(conv16_kernel<3, 7, 2, TIn>)
                            : reinterpret_cast<const void*>(conv16_kernel<5, 11, 1, TIn>);
  }
}

int largest_piece(size_t bytes, uintptr_t addr) {
  for (int b : {16, 8, 4})
    if (bytes % b == 0 && addr % b == 0) return b;
  return 0;
}

// Why this step has no kernel for the shape ("" when it has one), and the plan when it has.
template <typename TIn>
std::string make_plan(const TIn* x, const float* y, const ConvShape& s, Plan& out) {
  const size_t elt = sizeof(TIn);
  const Config& cfg = step16_config();
  if (s.C != 1) return "more than one input channel";
  if (s.K != kK) return "K is not 5";
  const int mb = pick_mb(s.M, cfg.mb3);
  if (mb == 0) return "M is not a multiple of 6 or 5";
  if (s.M > 4096) return "too many output channels";
  if (s.Ho() < 2 || s.Wo() < 2) return "the output is under 2x2";
  if (s.H > 4096 || s.W > 4096) return "an image is too large";
  const size_t img_bytes = size_t(s.H) * s.W * elt;
  const uintptr_t xa = reinterpret_cast<uintptr_t>(x);

  Params& p = out.p;
  p.B = s.B; p.H = int(s.H); p.W = int(s.W); p.M = int(s.M);
  p.Hp = int(s.Ho() / 2); p.Wp = int(s.Wo() / 2);
  p.TH = (p.Hp + 1) / 2; p.TW = (p.Wp + 1) / 2;
  p.groups = int(s.M / mb);
  // A tile reads rows 4*ti .. 4*ti + 7 and columns 4*tj .. 4*tj + 7 (outputs past the image are dropped by the
  // pooling; their reads must stay inside the slot, which is zero past the image). Rows are padded to a whole
  // number of float4s covering every column a tile reads: pitch = W when W % 4 == 0 (then 4*TW + 4 = W), else
  // the copy (float) or the widening (uint8) lays the image out row by row.
  const int rows_read = kTile * p.TH + kK - 1;
  p.pitch = round_up(std::max(p.W, kTile * p.TW + kK - 1), 4);
  p.slot_floats = round_up((std::max(p.H, rows_read) + 1) * p.pitch, 4);
  p.img_bytes = int(img_bytes);
  if (elt == 4) {
    p.by_rows = p.pitch != p.W || xa % 16 != 0;
    p.piece = p.by_rows ? largest_piece(size_t(p.W) * 4, xa) : 16;
    if (p.piece == 0) return "the input is not 4-byte aligned";
    p.row_pieces = FastDiv(uint32_t(p.W * 4 / p.piece));
    p.raw_stride = 0;
  } else {
    p.by_rows = p.pitch != p.W;
    p.piece = largest_piece(img_bytes, xa);
    if (p.piece == 0) return "uint8 images are not whole 4-byte words";
    p.raw_stride = round_up(p.img_bytes, 16);
  }
  const int kpad = round_up(kK * mb, 4);
  p.w_floats = round_up(p.groups * kK * kpad, 4);
  const size_t smem = (2 * kSlots + 2) * sizeof(uint64_t) + size_t(p.w_floats) * 4 + size_t(kSlots) * p.slot_floats * 4 +
                      (elt == 1 ? size_t(kRawSlots) * p.raw_stride : 0);

  const void* kernel = kernel_for<TIn>(cfg, mb);
  const bool c_as_b = cfg.name == 'c' && mb != 3;
  const int threads = ((c_as_b ? 11 : cfg.consumers) + 1) * 32;
  // Persistent blocks: as many as are resident at once (config c: two per SM where both rings fit).
  const first_layer::Residency r = first_layer::residency(kernel, threads, smem);
  if (smem > r.optin) return "the image ring does not fit in shared memory";
  if (r.per_sm < 1) return "the block does not fit on an SM";
  const long long blocks =
      std::min<long long>(s.B, (long long)r.sms * std::min(r.per_sm, c_as_b ? 1 : cfg.min_blocks));
  const long long per_block = (s.B + blocks - 1) / blocks;
  const long long ipi = (long long)p.groups * p.TH * p.TW;
  if (per_block * ipi + 32 >= (1LL << 31)) return "too many work items per block";
  // A chunk of 32 items spans up to 1 + ceil(31 / ipi) images, all resident at once: more than the ring holds
  // would deadlock (the slowest warp could never get its images).
  if (1 + (31 + ipi - 1) / ipi > kSlots) return "images too small for the ring (under 5 work items each)";

  p.per_img = FastDiv(uint32_t(ipi));
  p.tiles = FastDiv(uint32_t(p.TH * p.TW));
  p.tw = FastDiv(uint32_t(p.TW));
  p.vec_store = p.Wp % 2 == 0 && reinterpret_cast<uintptr_t>(y) % 8 == 0;
  out.kernel = kernel;
  out.blocks = unsigned(blocks);
  out.threads = unsigned(threads);
  out.smem = smem;
  return "";
}

template <typename TIn>
void launch(const TIn* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  Plan plan;
  if (s.B <= 0 || !make_plan(x, y, s, plan).empty()) {  // a shape without a kernel here: step 15's launcher
    if constexpr (sizeof(TIn) == 1)
      conv_fwd_gpu_fused_pipelined_u8(x, k, y, s, st);
    else
      conv_fwd_gpu_fused_pipelined(x, k, y, s, st);
    return;
  }
  void* args[] = {&x, &k, &y, &plan.p};
  CUDA_CHECK(cudaLaunchKernel(plan.kernel, dim3(plan.blocks), dim3(plan.threads), args, plan.smem, st));
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void conv_fwd_gpu_fused_warp_specialised(const float* x, const float* k, float* y, const ConvShape& s,
                                         cudaStream_t st) {
  launch(x, k, y, s, st);
}

void conv_fwd_gpu_fused_warp_specialised_u8(const uint8_t* x, const float* k, float* y, const ConvShape& s,
                                            cudaStream_t st) {
  launch(x, k, y, s, st);
}

// Shapes without a kernel here run step 15, so this step refuses exactly what step 15 refuses.
std::string conv_supports_gpu_fused_warp_specialised(const ConvShape& s) {
  const std::string why = conv_supports_gpu_fused_pipelined(s);
  return why.empty() ? why : "gpu-fused-warp-specialised (generic path = gpu-fused-pipelined): " + why;
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-fused-warp-specialised",
    .step = 16,
    .summary = "conv + tanh + 2x2 max pool, FP32, C=1, K=5: a producer warp streams images into a shared-memory "
               "ring, consumer warps run a compact 4x4-tile loop, pool first, exp2/rcp tanh",
    .epilogue = Epilogue::TanhMaxPool2,
    .precision = Precision::Fp32,
    .launch = conv_fwd_gpu_fused_warp_specialised,
    .launch_u8 = conv_fwd_gpu_fused_warp_specialised_u8,
    .supports = conv_supports_gpu_fused_warp_specialised,
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
