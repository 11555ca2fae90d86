#include <algorithm>
#include <stdexcept>
#include <string>

#include "cuda/runtime/cp_async.cuh"
#include "cuda/runtime/layers.cuh"

namespace pyconv {
namespace {

constexpr int THREADS = 256;

// Grid for an element-wise grid-stride loop: enough blocks to fill any current GPU, never more than needed.
unsigned blocks_for(size_t n) {
  const size_t b = (n + THREADS - 1) / THREADS;
  return unsigned(b < 65536 ? (b ? b : 1) : 65536);
}

__global__ void u8_to_f32_kernel(const uint8_t* __restrict__ in, float* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = float(in[i]);
}

__global__ void f32_to_f16_kernel(const float* __restrict__ in, __half* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = __float2half_rn(in[i]);
}

// One step of numpy's argmax in class order: class c's value v takes the lead when it is larger or NaN, unless the
// lead is NaN already (the first NaN wins, as the first largest does).
__device__ __forceinline__ void argmax_step(float v, int c, float& bv, int& best) {
  if (bv == bv && (v > bv || v != v)) {
    bv = v;
    best = c;
  }
}

__device__ __forceinline__ float activate(float v, Activation a) {
  switch (a) {
    case Activation::Tanh: return tanhf(v);
    case Activation::Relu: return fmaxf(v, 0.0f);
    case Activation::Sigmoid: return 1.0f / (1.0f + expf(-v));
    default: return v;
  }
}

__global__ void activation_kernel(float* x, size_t n, Activation a) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] = activate(x[i], a);
}

// One thread per output element; the window lies wholly inside the input by construction of Ho, Wo.
__global__ void pool2d_kernel(const float* __restrict__ x, float* __restrict__ y, size_t total, int H, int W,
                              int Ho, int Wo, int kernel, int stride, bool max_mode) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const int wo = int(i % Wo);
    const int ho = int((i / Wo) % Ho);
    const size_t plane = i / (size_t(Wo) * Ho);
    const float* src = x + (plane * H + size_t(ho) * stride) * W + size_t(wo) * stride;
    float acc = max_mode ? src[0] : 0.0f;
    for (int p = 0; p < kernel; ++p)
      for (int q = 0; q < kernel; ++q) {
        const float v = src[p * W + q];
        if (max_mode) {
          // NaN propagates as in numpy's max
          acc = (v > acc || v != v) && acc == acc ? v : acc;
        } else {
          acc += v;
        }
      }
    y[i] = max_mode ? acc : acc / float(kernel * kernel);
  }
}

__global__ void bias_activation_kernel(float* y, const float* __restrict__ b, size_t total, int64_t cols,
                                       Activation a) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x)
    y[i] = activate(y[i] + b[i % cols], a);
}

__global__ void argmax_rows_kernel(const float* __restrict__ x, int32_t* __restrict__ labels, int64_t rows,
                                   int64_t cols) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x) {
    const float* row = x + r * cols;
    int64_t best = 0;
    float bv = row[0];
    for (int64_t c = 1; c < cols && bv == bv; ++c) {
      const float v = row[c];
      if (v > bv || v != v) {
        bv = v;
        best = c;
      }
    }
    labels[r] = int32_t(best);
  }
}

// One warp per row: lane l holds a[l], a[l + 32], ... (kHeadMaxHidden / 32 registers at most), each class is a
// warp-wide dot product (shuffle reduction), and lane 0 keeps the logits to take the argmax in order. W2 and the
// biases sit in shared memory, read by every row.
// Q: registers of a per lane (ceil(hidden / 32) rounded up to a power of two).
constexpr int kHeadWarps = 8;
template <int Q>
__global__ void __launch_bounds__(kHeadWarps * 32) fc_head_kernel(const float* __restrict__ h, int64_t ldh,
                                                                   const float* __restrict__ b1, Activation act,
                                                                   const float* __restrict__ w2,
                                                                   const float* __restrict__ b2, float* logits,
                                                                   int32_t* __restrict__ labels, int64_t rows,
                                                                   int hidden, int classes) {
  extern __shared__ float s_head[];
  float* s_w2 = s_head;                       // [classes][hidden]
  float* s_b1 = s_w2 + classes * hidden;      // [hidden]
  float* s_b2 = s_b1 + hidden;                // [classes]
  for (int i = threadIdx.x; i < classes * hidden; i += blockDim.x) s_w2[i] = w2[i];
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) s_b1[i] = b1[i];
  for (int i = threadIdx.x; i < classes; i += blockDim.x) s_b2[i] = b2[i];
  __syncthreads();
  const int lane = threadIdx.x % 32;
  for (int64_t r = blockIdx.x * int64_t(kHeadWarps) + threadIdx.x / 32; r < rows;
       r += int64_t(gridDim.x) * kHeadWarps) {
    const float* hr = h + r * ldh;
    float a[Q];
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      const int j = lane + 32 * q;
      a[q] = j < hidden ? activate(hr[j] + s_b1[j], act) : 0.0f;
    }
    float mine = 0.0f;  // lane c keeps logit c
    for (int c = 0; c < classes; ++c) {
      const float* wc = s_w2 + c * hidden;
      float sum = 0.0f;
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        const int j = lane + 32 * q;
        if (j < hidden) sum = fmaf(wc[j], a[q], sum);
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      if (lane == c) mine = sum + s_b2[c];
    }
    if (lane < classes) logits[r * classes + lane] = mine;
    // argmax in class order (argmax_step), as argmax_rows_kernel
    int best = 0;
    float bv = __shfl_sync(0xffffffffu, mine, 0);
    for (int c = 1; c < classes; ++c) argmax_step(__shfl_sync(0xffffffffu, mine, c), c, bv, best);
    if (lane == 0) labels[r] = best;
  }
}

// The head with LPR lanes per row, for hidden a multiple of 4 up to kHeadQuadMaxHidden (sp19: 140): the lanes read
// their row in 16-byte pieces (lane q takes pieces q, q + LPR, ...) and reduce each class in log2(LPR) shuffles, so a
// warp handles 32 / LPR rows at a time; the warp-per-row kernel above spends 5 dependent shuffles per class on one
// row. sp19's 10000 rows in one pass on an H200 (CUPTI kernel list of a resident pass): 15.4 us with the warp per
// row, 9.7 us with four lanes per row and W2 filled in 16-byte pieces (the pinned traces of
// results/bench-e2e-nvidia-h200-2026-11-24-sp19-trace2.json and -sp19-fc16-4x4.json). Four lanes per row leave one
// long chain per warp: Nsight Compute on the sp19 pipeline's last part (1734 rows) counted 1885 instructions per
// warp (each lane's 36 tanh alone ~900), 55 blocks on the 132 SMs, the SMs active a third of the kernel's 12.7 us
// (an earlier trial of 8 lanes per row, on the 10000-row pass only, had measured the same as 4 there: 10.0 us).
// From hidden 64 on it takes 16 lanes per row (3 pieces per lane on sp19), four times the warps on a quarter of
// the chain each: 8.5 us at 1734 rows and 12.6 at 10000 under Nsight Compute's locked clocks (12.7 and 14.8
// before); as the last kernel of a pinned call, 6.6 us on a 2500-row part where four lanes took 8.1 on a 1734-row
// one (results/bench-e2e-nvidia-h200-2026-11-25-sp19-head16.json, -2026-11-24-sp19-step24-vpairs.json). QV:
// 16-byte pieces per lane, ceil(hidden / (4 LPR)) (LPR 4: rounded up to a multiple of 4).
constexpr int kHeadQuadThreads = 128;
constexpr int64_t kHeadQuadMaxHidden = 256;
constexpr int64_t kHeadWideMinPieces = 16;  // hidden >= 64: 16 lanes per row
constexpr int kHeadQuadMaxWeights = 4096;  // W2 entries (classes x hidden) it takes: 8 float4 loads per thread
static_assert(kHeadQuadMaxWeights % (4 * kHeadQuadThreads) == 0 && kHeadMaxClasses <= kHeadQuadThreads);
template <int LPR, int QV>
__global__ void __launch_bounds__(kHeadQuadThreads) fc_head_quad_kernel(const float* __restrict__ h, int64_t ldh,
                                                                        const float* __restrict__ b1, Activation act,
                                                                        const float* __restrict__ w2,
                                                                        const float* __restrict__ b2, float* logits,
                                                                        int32_t* __restrict__ labels, int64_t rows,
                                                                        int hidden, int classes) {
  extern __shared__ float4 s_head4[];
  float* s_w2 = reinterpret_cast<float*>(s_head4);  // [classes][hidden], each row 16-byte aligned (hidden % 4 == 0)
  float* s_b1 = s_w2 + classes * hidden;            // [hidden]
  float* s_b2 = s_b1 + hidden;                      // [classes]
  // 16-byte pieces, all loads of a thread issued before its stores: a block works on a few rows only, so this fill
  // is a good part of its time
  {
    const float4* w4 = reinterpret_cast<const float4*>(w2);
    const float4* b4 = reinterpret_cast<const float4*>(b1);
    const int nw = classes * hidden / 4, nb = hidden / 4;
    constexpr int kFill = kHeadQuadMaxWeights / 4 / kHeadQuadThreads;
    float4 v[kFill];
#pragma unroll
    for (int k = 0; k < kFill; ++k) {
      const int i = threadIdx.x + k * kHeadQuadThreads;
      if (i < nw) v[k] = __ldg(w4 + i);
    }
#pragma unroll
    for (int k = 0; k < kFill; ++k) {
      const int i = threadIdx.x + k * kHeadQuadThreads;
      if (i < nw) s_head4[i] = v[k];
    }
    for (int i = threadIdx.x; i < nb; i += kHeadQuadThreads) reinterpret_cast<float4*>(s_b1)[i] = __ldg(b4 + i);
    if (threadIdx.x < classes) s_b2[threadIdx.x] = __ldg(b2 + threadIdx.x);
  }
  __syncthreads();
  constexpr int RPW = 32 / LPR;  // rows per warp
  const int lane = threadIdx.x % 32, q = lane % LPR, sub = lane / LPR;
  const int nvec = hidden / 4;
  const int64_t warps = int64_t(gridDim.x) * (kHeadQuadThreads / 32);
  // r0 is the same for the whole warp (the shuffles need every lane); rows past the end compute on zeros
  for (int64_t r0 = (blockIdx.x * int64_t(kHeadQuadThreads / 32) + threadIdx.x / 32) * RPW; r0 < rows;
       r0 += warps * RPW) {
    const int64_t r = r0 + sub;
    const bool live = r < rows;
    const float4* hr = reinterpret_cast<const float4*>(h + (live ? r : 0) * ldh);
    const float4* bv4 = reinterpret_cast<const float4*>(s_b1);
    float4 a[QV];
#pragma unroll
    for (int i = 0; i < QV; ++i) {
      const int j = q + LPR * i;
      a[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (live && j < nvec) {
        const float4 v = hr[j], bb = bv4[j];
        a[i] = make_float4(activate(v.x + bb.x, act), activate(v.y + bb.y, act), activate(v.z + bb.z, act),
                           activate(v.w + bb.w, act));
      }
    }
    int best = 0;
    float bv = 0.0f;
    for (int c = 0; c < classes; ++c) {
      const float4* wc = reinterpret_cast<const float4*>(s_w2 + c * hidden);
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < QV; ++i) {
        const int j = q + LPR * i;
        if (j < nvec) {
          const float4 w = wc[j];
          sum = fmaf(w.x, a[i].x, sum);
          sum = fmaf(w.y, a[i].y, sum);
          sum = fmaf(w.z, a[i].z, sum);
          sum = fmaf(w.w, a[i].w, sum);
        }
      }
#pragma unroll
      for (int o = 1; o < LPR; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      const float v = sum + s_b2[c];
      if (live && q == c % LPR) logits[r * classes + c] = v;
      if (c == 0)
        bv = v;
      else
        argmax_step(v, c, bv, best);
    }
    if (live && q == 0) labels[r] = best;
  }
}

// The FP16 head (fc16_head in layers.cuh): h = x W1^T on the tensor cores, split along K, then the head of fc_head
// in the block that finishes each row tile. Block: 8 warps on a 64-row tile, warp (wm, wn) = (warp % 4, warp / 4)
// computes rows 16 wm.. by the n8 tiles wn NT.. (BN = 16 NT columns). kFhStages-deep cp.async pipeline of
// kFhBK-wide K steps; shared rows of kFhLd halves (144 bytes: the 8 rows one ldmatrix reads land on distinct banks).
constexpr int kFhThreads = 256, kFhBK = 64, kFhStages = 3, kFhLd = kFhBK + 8;

__device__ __forceinline__ void cp_async16(void* dst, const void* src, int bytes) {  // bytes < 16: zero-filled
  const unsigned s = unsigned(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(src), "r"(bytes));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __half* p) {
  const unsigned s = unsigned(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const __half* p) {
  const unsigned s = unsigned(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
}

__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int NT>
__global__ void __launch_bounds__(kFhThreads, 2) fc16_head_kernel(
    const __half* __restrict__ x, const __half* __restrict__ w1, const float* __restrict__ b1, Activation act,
    const float* __restrict__ w2, const float* __restrict__ b2, float* __restrict__ ws, unsigned* __restrict__ counts,
    float* __restrict__ logits, int32_t* __restrict__ labels, int64_t rows, int in, int hidden, int classes,
    int slices, int kslice) {
  constexpr int BN = 16 * NT;
  extern __shared__ __align__(16) unsigned char fh_smem[];
  __half* sA = reinterpret_cast<__half*>(fh_smem);  // [stage][64][kFhLd]
  __half* sB = sA + kFhStages * 64 * kFhLd;           // [stage][BN][kFhLd]
  const int slice = blockIdx.y;
  const int64_t row0 = int64_t(blockIdx.x) * 64;
  const int k0 = slice * kslice, k1 = min(in, k0 + kslice);
  const int nk = (k1 - k0 + kFhBK - 1) / kFhBK;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wm = warp & 3, wn = warp >> 2;

  // One K step into a stage: 16-byte pieces, rows past the batch and K past the slice zero-filled (in % 8 == 0:
  // no piece straddles the end). W1's rows past `hidden` are the zero padding of fc16_rows. Each thread copies the
  // same pieces at every step, so where they come from and go is worked out once, here: per step only the K offset
  // moves (the address arithmetic per piece and step had made the loop issue-bound).
  constexpr int kPieces = (64 + BN) * (kFhBK / 8), kMine = (kPieces + kFhThreads - 1) / kFhThreads;
  const __half* src[kMine];
  unsigned dst[kMine];  // shared address in stage 0
  int col[kMine];       // K offset of the piece in the step; past kFhBK: no piece, or a row past the batch
  static_assert(64 * (kFhBK / 8) == 2 * kFhThreads, "pieces 0 and 1 of a thread are A's, the others B's");
  const unsigned s_base = unsigned(__cvta_generic_to_shared(fh_smem));
#pragma unroll
  for (int m = 0; m < kMine; ++m) {
    const int i = threadIdx.x + m * kFhThreads;
    const int r = i / (kFhBK / 8), c = (i % (kFhBK / 8)) * 8;
    const bool live = i < kPieces && (m >= 2 || row0 + r < rows);
    src[m] = m < 2 ? x + (live ? (row0 + r) * in : 0) + k0 + c : w1 + int64_t(r - 64) * in + k0 + c;
    dst[m] = s_base + unsigned(((m < 2 ? r : kFhStages * 64 + (r - 64)) * kFhLd + c) * sizeof(__half));
    col[m] = live ? c : 1 << 30;
  }
  const auto load = [&](int stage, int kt) {
    const int left = k1 - k0 - kt * kFhBK;  // K still in the slice from this step on
#pragma unroll
    for (int m = 0; m < kMine; ++m) {
      if (m == kMine - 1 && threadIdx.x + m * kFhThreads >= kPieces) break;
      const bool ok = col[m] < left;
      const unsigned d = dst[m] + unsigned(stage * (m < 2 ? 64 : BN) * kFhLd * sizeof(__half));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(ok ? src[m] + kt * kFhBK : x),
                   "r"(ok ? 16 : 0));
    }
  };

  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
  for (int s = 0; s < kFhStages - 1; ++s) {
    if (s < nk) load(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < nk; ++kt) {
    asm volatile("cp.async.wait_group %0;" ::"n"(kFhStages - 2) : "memory");
    __syncthreads();  // step kt has landed for every thread, and step kt - 1's stage is free to refill
    if (kt + kFhStages - 1 < nk) load((kt + kFhStages - 1) % kFhStages, kt + kFhStages - 1);
    cp_async_commit();
    const __half* a = sA + (kt % kFhStages) * 64 * kFhLd;
    const __half* b = sB + (kt % kFhStages) * BN * kFhLd;
#pragma unroll
    for (int kk = 0; kk < kFhBK; kk += 16) {
      uint32_t af[4];
      ldmatrix_x4(af, a + (wm * 16 + (lane & 15)) * kFhLd + kk + (lane >> 4) * 8);
#pragma unroll
      for (int j = 0; j + 1 < NT; j += 2) {  // two n8 tiles per ldmatrix
        uint32_t bf[4];
        ldmatrix_x4(bf, b + ((wn * NT + j) * 8 + (lane & 7) + ((lane >> 4) << 3)) * kFhLd + kk + ((lane >> 3) & 1) * 8);
        mma_m16n8k16(acc[j], af, bf[0], bf[1]);
        mma_m16n8k16(acc[j + 1], af, bf[2], bf[3]);
      }
      if constexpr (NT % 2) {
        uint32_t bf[2];
        ldmatrix_x2(bf, b + ((wn * NT + NT - 1) * 8 + (lane & 7)) * kFhLd + kk + ((lane >> 3) & 1) * 8);
        mma_m16n8k16(acc[NT - 1], af, bf[0], bf[1]);
      }
    }
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");

  // The sums: this slice's own, or (slices > 1) every slice's partial in slice order, added by the block that
  // finishes the tile last: the same order whichever block that is, so the same bits every run.
  const int g = lane >> 2, t = lane & 3;
  if (slices > 1) {
    float* mine = ws + int64_t(slice) * rows * BN;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int64_t r = row0 + wm * 16 + g + 8 * hh;
        if (r < rows)
          *reinterpret_cast<float2*>(mine + r * BN + (wn * NT + j) * 8 + 2 * t) =
              make_float2(acc[j][2 * hh], acc[j][2 * hh + 1]);
      }
    __threadfence();
    __syncthreads();
    __shared__ bool s_last;
    if (threadIdx.x == 0) {
      s_last = atomicAdd(counts + blockIdx.x, 1u) == unsigned(slices - 1);
      if (s_last) counts[blockIdx.x] = 0;  // ready for the next launch (graph replays included)
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    // slice by slice, each slice's loads all issued before its adds (one round trip to L2 per slice)
    float sum[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) sum[j][0] = sum[j][1] = sum[j][2] = sum[j][3] = 0.0f;
    for (int s = 0; s < slices; ++s) {
      float v[NT][4];
      if (s == slice) {
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) v[j][e] = acc[j][e];
      } else {
        const float* part = ws + int64_t(s) * rows * BN;
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int64_t r = row0 + wm * 16 + g + 8 * hh;
            const float2 p = r < rows ? __ldcg(reinterpret_cast<const float2*>(part + r * BN + (wn * NT + j) * 8 + 2 * t))
                                      : make_float2(0.0f, 0.0f);
            v[j][2 * hh] = p.x;
            v[j][2 * hh + 1] = p.y;
          }
      }
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) sum[j][e] += v[j][e];
    }
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] = sum[j][e];
  }
  // h into shared memory (over the pipeline's stages: every thread is past its last ldmatrix)
  __syncthreads();
  constexpr int kHLd = BN + 4;
  float* sH = reinterpret_cast<float*>(fh_smem);  // [64][kHLd]
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
      *reinterpret_cast<float2*>(sH + (wm * 16 + g + 8 * hh) * kHLd + (wn * NT + j) * 8 + 2 * t) =
          make_float2(acc[j][2 * hh], acc[j][2 * hh + 1]);
  __syncthreads();
  // The head. First a = act(h + b1) in place, a loop not unrolled: unrolled per register, the activation's code
  // came 36 times over (43 KB of SASS run once per warp, waiting on instruction fetch). Then four lanes per row,
  // lane q over j = q, q + 4, ...; each class a dot product over the four lanes (two shuffles). Rows past the
  // batch compute on their (zero) sums and store nothing.
#pragma unroll 1
  for (int e = threadIdx.x; e < 64 * BN; e += kFhThreads) {
    const int j = e % BN;
    float* p = sH + (e / BN) * kHLd + j;
    *p = j < hidden ? activate(*p + __ldg(b1 + j), act) : 0.0f;
  }
  __syncthreads();
  const int rr = threadIdx.x >> 2, q = threadIdx.x & 3;
  const int64_t r = row0 + rr;
  const float* ar = sH + rr * kHLd;
  int best = 0;
  float bv = 0.0f;
  for (int c = 0; c < classes; ++c) {
    const float* wc = w2 + int64_t(c) * hidden;
    float sum = 0.0f;
#pragma unroll 4
    for (int j = q; j < hidden; j += 4) sum = fmaf(__ldg(wc + j), ar[j], sum);
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float v = sum + __ldg(b2 + c);
    if (r < rows && q == c % 4) logits[r * classes + c] = v;
    if (c == 0)
      bv = v;
    else
      argmax_step(v, c, bv, best);
  }
  if (r < rows && q == 0) labels[r] = best;
}

}  // namespace

Activation activation_from_name(const std::string& name) {
  if (name == "tanh") return Activation::Tanh;
  if (name == "relu") return Activation::Relu;
  if (name == "sigmoid") return Activation::Sigmoid;
  throw std::invalid_argument("unknown activation '" + name + "' (known: tanh, relu, sigmoid)");
}

FcMath fc_math_from_name(const std::string& name) {
  if (name == "fp32") return FcMath::FP32;
  if (name == "tf32") return FcMath::TF32;
  if (name == "fp16") return FcMath::FP16;
  throw std::invalid_argument("unknown FC math '" + name + "' (known: fp32, tf32, fp16)");
}

const char* fc_math_name(FcMath m) {
  switch (m) {
    case FcMath::TF32: return "tf32";
    case FcMath::FP16: return "fp16";
    default: return "fp32";
  }
}

void f32_to_f16(const float* in, __half* out, size_t n, cudaStream_t st) {
  if (!n) return;
  f32_to_f16_kernel<<<blocks_for(n), THREADS, 0, st>>>(in, out, n);
  CUDA_CHECK_LAUNCH();
}

void u8_to_f32(const uint8_t* in, float* out, size_t n, cudaStream_t st) {
  if (!n) return;
  u8_to_f32_kernel<<<blocks_for(n), THREADS, 0, st>>>(in, out, n);
  CUDA_CHECK_LAUNCH();
}

void activation_inplace(float* x, size_t n, Activation a, cudaStream_t st) {
  if (!n || a == Activation::None) return;
  activation_kernel<<<blocks_for(n), THREADS, 0, st>>>(x, n, a);
  CUDA_CHECK_LAUNCH();
}

void pool2d(const float* x, float* y, int64_t planes, int H, int W, int kernel, int stride, bool max_mode,
            cudaStream_t st) {
  if (kernel < 1 || stride < 1 || kernel > H || kernel > W)
    throw std::invalid_argument("pool2d: need 1 <= kernel <= H, W and stride >= 1 (kernel " +
                                std::to_string(kernel) + ", stride " + std::to_string(stride) + ", input " +
                                std::to_string(H) + "x" + std::to_string(W) + ")");
  const int Ho = (H - kernel) / stride + 1, Wo = (W - kernel) / stride + 1;
  const size_t total = size_t(planes) * Ho * Wo;
  if (!total) return;
  pool2d_kernel<<<blocks_for(total), THREADS, 0, st>>>(x, y, total, H, W, Ho, Wo, kernel, stride, max_mode);
  CUDA_CHECK_LAUNCH();
}

void fc_gemm(cublasHandle_t h, const float* x, const float* w, float* y, int64_t rows, int64_t in, int64_t out,
             FcMath math, cudaStream_t st) {
  if (rows <= 0) return;
  if (rows > INT32_MAX || in > INT32_MAX || out > INT32_MAX)
    throw std::invalid_argument("fully_connected: dimensions beyond 2^31 are not supported by cuBLAS");
  // Row-major trick: cuBLAS is column-major, and a row-major [r][c] matrix is a column-major [c][r] one. So
  // y^T[out][rows] = W[out][in] . x^T[in][rows], i.e. C = op(A) B with A = W stored column-major as [in][out]
  // (lda = in, transposed), B = x stored column-major as [in][rows] (ldb = in), C = y as [out][rows] (ldc = out).
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_CHECK(cublasSetStream(h, st));
  if (math == FcMath::FP16) throw std::logic_error("fc_gemm: FP16 operands go through fc_gemm_f16");
  if (math == FcMath::TF32)
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(out), int(rows), int(in), &one, w, CUDA_R_32F, int(in),
                              x, CUDA_R_32F, int(in), &zero, y, CUDA_R_32F, int(out), CUBLAS_COMPUTE_32F_FAST_TF32,
                              CUBLAS_GEMM_DEFAULT));
  else
    CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, int(out), int(rows), int(in), &one, w, int(in), x,
                             int(in), &zero, y, int(out)));
}

void fc_gemm_f16(cublasHandle_t h, const __half* x, const __half* w, float* y, int64_t rows, int64_t in,
                 int64_t out, int64_t ldy, cudaStream_t st) {
  if (rows <= 0) return;
  if (rows > INT32_MAX || in > INT32_MAX || ldy > INT32_MAX || out > ldy)
    throw std::invalid_argument("fully_connected: dimensions beyond 2^31 are not supported by cuBLAS");
  // As fc_gemm: y^T[out][rows] (ldc = ldy) = W[out][in] . x^T[in][rows], both operands half, sums in float32.
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_CHECK(cublasSetStream(h, st));
  CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(out), int(rows), int(in), &one, w, CUDA_R_16F, int(in), x,
                            CUDA_R_16F, int(in), &zero, y, CUDA_R_32F, int(ldy), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

void fully_connected_f16(cublasHandle_t h, const __half* x, const __half* w, const float* b, float* y, int64_t rows,
                         int64_t in, int64_t out, Activation act, cudaStream_t st) {
  if (rows <= 0) return;
  fc_gemm_f16(h, x, w, y, rows, in, out, out, st);
  const size_t total = size_t(rows) * size_t(out);
  bias_activation_kernel<<<blocks_for(total), THREADS, 0, st>>>(y, b, total, out, act);
  CUDA_CHECK_LAUNCH();
}

void fully_connected(cublasHandle_t h, const float* x, const float* w, const float* b, float* y, int64_t rows,
                     int64_t in, int64_t out, Activation act, FcMath math, cudaStream_t st) {
  if (rows <= 0) return;
  fc_gemm(h, x, w, y, rows, in, out, math, st);
  const size_t total = size_t(rows) * size_t(out);
  bias_activation_kernel<<<blocks_for(total), THREADS, 0, st>>>(y, b, total, out, act);
  CUDA_CHECK_LAUNCH();
}

void argmax_rows(const float* x, int32_t* labels, int64_t rows, int64_t cols, cudaStream_t st) {
  if (rows <= 0) return;
  if (cols < 1) throw std::invalid_argument("argmax_rows: need at least one column");
  argmax_rows_kernel<<<blocks_for(size_t(rows)), THREADS, 0, st>>>(x, labels, rows, cols);
  CUDA_CHECK_LAUNCH();
}

void fc_head(const float* h, int64_t ldh, const float* b1, Activation act, const float* w2, const float* b2,
             float* logits, int32_t* labels, int64_t rows, int64_t hidden, int64_t classes, cudaStream_t st) {
  if (rows <= 0) return;
  if (ldh < hidden) throw std::invalid_argument("fc_head: row stride below the hidden width");
  if (!fits_head(hidden, classes))
    throw std::invalid_argument("fc_head: takes 1.." + std::to_string(kHeadMaxHidden) + " hidden features, 1.." +
                                std::to_string(kHeadMaxClasses) + " classes and at most " +
                                std::to_string(kHeadMaxWeights) + " weights (got " + std::to_string(hidden) + " x " +
                                std::to_string(classes) + ")");
  const size_t smem = size_t(classes * hidden + hidden + classes) * sizeof(float);
  const int64_t blocks = std::min<int64_t>((rows + kHeadWarps - 1) / kHeadWarps, 4096);
  auto launch = [&](auto kernel) {
    kernel<<<unsigned(blocks), kHeadWarps * 32, smem, st>>>(h, ldh, b1, act, w2, b2, logits, labels, rows, int(hidden),
                                                           int(classes));
  };
  const bool aligned = reinterpret_cast<uintptr_t>(h) % 16 == 0 && reinterpret_cast<uintptr_t>(w2) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(b1) % 16 == 0 && ldh % 4 == 0;
  if (hidden % 4 == 0 && hidden <= kHeadQuadMaxHidden && hidden * classes <= kHeadQuadMaxWeights && aligned) {
    const int64_t nvec = hidden / 4;
    auto launch_quad = [&](auto kernel, int lpr) {
      const int64_t rows_per_block = kHeadQuadThreads / lpr;
      const int64_t quad_blocks = std::min<int64_t>((rows + rows_per_block - 1) / rows_per_block, 8192);
      kernel<<<unsigned(quad_blocks), kHeadQuadThreads, smem, st>>>(h, ldh, b1, act, w2, b2, logits, labels, rows,
                                                                    int(hidden), int(classes));
    };
    if (nvec >= kHeadWideMinPieces) {  // 16 lanes per row
      const int64_t qv = (nvec + 15) / 16;
      if (qv <= 1) launch_quad(fc_head_quad_kernel<16, 1>, 16);
      else if (qv <= 2) launch_quad(fc_head_quad_kernel<16, 2>, 16);
      else if (qv <= 3) launch_quad(fc_head_quad_kernel<16, 3>, 16);
      else launch_quad(fc_head_quad_kernel<16, 4>, 16);
    } else {
      const int64_t qv = (hidden + 15) / 16;
      if (qv <= 4) launch_quad(fc_head_quad_kernel<4, 4>, 4);
      else if (qv <= 8) launch_quad(fc_head_quad_kernel<4, 8>, 4);
      else if (qv <= 12) launch_quad(fc_head_quad_kernel<4, 12>, 4);
      else launch_quad(fc_head_quad_kernel<4, 16>, 4);
    }
    CUDA_CHECK_LAUNCH();
    return;
  }
  const int64_t q = (hidden + 31) / 32;
  if (q <= 2) launch(fc_head_kernel<2>);
  else if (q <= 4) launch(fc_head_kernel<4>);
  else if (q <= 8) launch(fc_head_kernel<8>);
  else if (q <= 16) launch(fc_head_kernel<16>);
  else launch(fc_head_kernel<32>);
  CUDA_CHECK_LAUNCH();
}


namespace {
// The kernel's n8 tiles per warp for `hidden` columns: the fewest of those built that cover them.
constexpr int kFhTiles[] = {4, 8, 9, 10, 12, 16};
int fc16_head_nt(int64_t hidden) {
  for (int nt : kFhTiles)
    if (16 * nt >= hidden) return nt;
  throw std::invalid_argument("fc16_head: more than " + std::to_string(kFc16HeadMaxHidden) + " hidden features");
}
}  // namespace

int64_t fc16_head_width(int64_t hidden) { return 16 * fc16_head_nt(hidden); }

float* fc16_head(const __half* x, const __half* w1, const float* b1, Activation act, const float* w2, const float* b2,
                 float* scratch, int64_t scratch_floats, unsigned* counts, int32_t* labels, int64_t rows, int64_t in,
                 int64_t hidden, int64_t classes, cudaStream_t st) {
  if (!fits_fc16_head(in, hidden, classes))
    throw std::invalid_argument("fc16_head: takes in a multiple of 8, 1.." + std::to_string(kFc16HeadMaxHidden) +
                                " hidden features and 1.." + std::to_string(kHeadMaxClasses) + " classes (got " +
                                std::to_string(in) + " -> " + std::to_string(hidden) + " -> " +
                                std::to_string(classes) + ")");
  if (scratch_floats < fc16_head_scratch(rows, hidden, classes, 1))
    throw std::invalid_argument("fc16_head: scratch too small for the logits");
  if (rows <= 0) return scratch;
  const int nt = fc16_head_nt(hidden);
  const int64_t bn = 16 * nt, tiles = fc16_head_tiles(rows);
  if (tiles > INT32_MAX) throw std::invalid_argument("fc16_head: too many rows");
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  // Slices: one wave of blocks at two per SM, each slice at least kFc16HeadMinSteps K steps, the partials within
  // the scratch.
  const int64_t ksteps = (in + kFhBK - 1) / kFhBK;
  int64_t slices = std::max<int64_t>(1, 2 * sms / tiles);
  slices = std::min(slices, std::max<int64_t>(1, ksteps / kFc16HeadMinSteps));
  while (slices > 1 && fc16_head_scratch(rows, hidden, classes, int(slices)) > scratch_floats) --slices;
  const int64_t kslice = (ksteps + slices - 1) / slices * kFhBK;
  slices = (in + kslice - 1) / kslice;  // every slice non-empty
  float* logits = scratch + (slices > 1 ? slices * rows * bn : 0);
  const size_t smem = std::max<size_t>(size_t(kFhStages) * (64 + bn) * kFhLd * sizeof(__half),
                                       size_t(64) * (bn + 4) * sizeof(float));
  const dim3 grid{unsigned(tiles), unsigned(slices)};
  auto launch = [&](auto kernel) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    kernel<<<grid, kFhThreads, smem, st>>>(x, w1, b1, act, w2, b2, scratch, counts, logits, labels, rows, int(in),
                                           int(hidden), int(classes), int(slices), int(kslice));
  };
  switch (nt) {
    case 4: launch(fc16_head_kernel<4>); break;
    case 8: launch(fc16_head_kernel<8>); break;
    case 9: launch(fc16_head_kernel<9>); break;
    case 10: launch(fc16_head_kernel<10>); break;
    case 12: launch(fc16_head_kernel<12>); break;
    default: launch(fc16_head_kernel<16>); break;
  }
  CUDA_CHECK_LAUNCH();
  return logits;
}

}  // namespace pyconv
