#include <algorithm>
#include <stdexcept>
#include <string>

#include "cuda/runtime/layers.cuh"

#include "cuda/runtime/fast_div.cuh"

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

// The running max of a window with v: numpy's max, where a NaN wins and stays.
__device__ __forceinline__ float max_step(float acc, float v) { return (v > acc || v != v) && acc == acc ? v : acc; }

// One thread per output element; the window lies wholly inside the input by construction of Ho, Wo.
// act after the window: max-pooling only (the caller checks), where act is monotonic non-decreasing and
// act(max) = max(act) with one act per output instead of one per input.
__global__ void pool2d_kernel(const float* __restrict__ x, float* __restrict__ y, size_t total, int H, int W,
                              int Ho, int Wo, int kernel, int stride, bool max_mode, Activation act) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const int wo = int(i % Wo);
    const int ho = int((i / Wo) % Ho);
    const size_t plane = i / (size_t(Wo) * Ho);
    const float* src = x + (plane * H + size_t(ho) * stride) * W + size_t(wo) * stride;
    float acc = max_mode ? src[0] : 0.0f;
    for (int p = 0; p < kernel; ++p)
      for (int q = 0; q < kernel; ++q) {
        const float v = src[p * W + q];
        acc = max_mode ? max_step(acc, v) : acc + v;
      }
    y[i] = max_mode ? activate(acc, act) : acc / float(kernel * kernel);
  }
}

// Max-pool 2/2 then act (see pool2d_kernel), every output once: a thread per output over the flat index, so
// consecutive lanes take consecutive outputs whatever the width (float2 loads of the two input rows where W is
// even), 32-bit indices (the caller checks the sizes) and multiply-high divisions: output row r = i / Wo reads
// input rows 2r and 2r + 1 of the flat [planes * H] rows, plus r / Ho more where H is odd (each plane's last row
// unused). Measured (`invoke bench --sweep`, H200, batch 10000, a plain variant's conv then this):
// - against the generic kernel above (three 64-bit divisions per output) after a separate activation pass over the
//   whole conv output, with a warp per 32 outputs of one row: the 40 rows with tanh + pool 22% faster in geometric
//   mean, s08 (C=11 31x31 M=27 K=5) 2.80 -> 2.42 ms (results/bench-nvidia-h200-2026-11-29-sweep-pool-act.json
//   against -2026-11-28-sweep-step29-producer.json);
// - a thread per output against that warp per row, whose lanes past a narrow row idled: the same 40 rows 6% faster
//   in geometric mean, s01 (6x6 pooled outputs) 0.461 -> 0.315 ms, s21 (7x7) 2.64 -> 2.25, s08 (13x13) 2.42 -> 2.21,
//   the widest (47x47) 33.8 -> 32.7 (results/bench-nvidia-h200-2026-11-29-sweep-pool-flat.json against -sweep-pool-
//   act.json).
template <bool EVEN_W, bool ODD_H>
__global__ void max_pool2_act_kernel(const float* __restrict__ x, float* __restrict__ y, uint32_t total,
                                     FastDiv by_wo, FastDiv by_ho, int W, Activation act) {
  const uint32_t step = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    const uint32_t r = by_wo.div(i), wo = i - r * by_wo.d;
    const uint32_t in_row = 2 * r + (ODD_H ? by_ho.div(r) : 0u);
    const float* src = x + size_t(in_row) * W + 2 * wo;
    float a0, a1, b0, b1;
    if constexpr (EVEN_W) {
      const float2 u = __ldg(reinterpret_cast<const float2*>(src));
      const float2 v = __ldg(reinterpret_cast<const float2*>(src + W));
      a0 = u.x; a1 = u.y; b0 = v.x; b1 = v.y;
    } else {
      a0 = __ldg(src); a1 = __ldg(src + 1); b0 = __ldg(src + W); b1 = __ldg(src + W + 1);
    }
    // the generic kernel's window order
    y[i] = activate(max_step(max_step(max_step(a0, a1), b0), b1), act);
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
            cudaStream_t st, Activation act) {
  if (act != Activation::None && !max_mode)
    throw std::invalid_argument("pool2d: an activation after the window needs max-pooling (it commutes with max)");
  if (kernel < 1 || stride < 1 || kernel > H || kernel > W)
    throw std::invalid_argument("pool2d: need 1 <= kernel <= H, W and stride >= 1 (kernel " +
                                std::to_string(kernel) + ", stride " + std::to_string(stride) + ", input " +
                                std::to_string(H) + "x" + std::to_string(W) + ")");
  const int Ho = (H - kernel) / stride + 1, Wo = (W - kernel) / stride + 1;
  const size_t total = size_t(planes) * Ho * Wo;
  if (!total) return;
  if (max_mode && kernel == 2 && stride == 2 && total < (size_t(1) << 31) && planes * H < (int64_t(1) << 31)) {
    const bool even = W % 2 == 0 && reinterpret_cast<uintptr_t>(x) % 8 == 0, odd_h = H % 2 == 1;
    const unsigned blocks = blocks_for(total);
    const FastDiv by_wo{uint32_t(Wo)}, by_ho{uint32_t(Ho)};
    const auto kernel2 = even ? (odd_h ? max_pool2_act_kernel<true, true> : max_pool2_act_kernel<true, false>)
                              : (odd_h ? max_pool2_act_kernel<false, true> : max_pool2_act_kernel<false, false>);
    kernel2<<<blocks, THREADS, 0, st>>>(x, y, uint32_t(total), by_wo, by_ho, W, act);
    CUDA_CHECK_LAUNCH();
    return;
  }
  pool2d_kernel<<<blocks_for(total), THREADS, 0, st>>>(x, y, total, H, W, Ho, Wo, kernel, stride, max_mode, act);
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

}  // namespace pyconv
