// Step 15 -- gpu-fused-pipelined: convolution + tanh + 2x2/2 max pooling in exact FP32 for a network's first
// layers (one input channel), with the images streamed into shared memory while the previous ones are computed.
// Measurements and what was tried: docs/ladder-findings/15.md (docs/ladder.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "cuda/runtime/cp_async.cuh"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/fast_div.cuh"
#include "cuda/runtime/registry.cuh"

namespace pyconv {

// Step 10 (conv_10_fused_tanh_pool.cu): every shape this step has no kernel for.
void conv_fwd_gpu_fused_tanh_pool(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
void conv_fwd_gpu_fused_tanh_pool_u8(const uint8_t* x, const float* k, float* y, const ConvShape& s,
                                     cudaStream_t st);
std::string conv_supports_gpu_fused_tanh_pool(const ConvShape& s);

namespace {

constexpr int kMaxThreads = 384;           // __launch_bounds__: up to 168 registers, no spills for MB = 10
constexpr int kMaxImagesPerGroup = 32;
constexpr size_t kWeightBytesMax = 32 * 1024;
constexpr int kSlackFloats = 16;  // after each buffer: in-place reads of the last row run past it (unstored outputs)

__host__ __device__ constexpr int round_up(int v, int to) { return (v + to - 1) / to * to; }

enum CopyMode : int { kCopy16 = 0, kCopy4 = 1, kCopySync = 2 };

struct Params {
  long long B, ngroups;          // images, image groups (ceil(B / ipb))
  int H, W, M, Hp, Wp, nb;       // nb: pairs of pooled columns per pooled row (ceil(Wp / 2))
  int groups;                    // channel groups (ceil(M / MB))
  int ipb;                       // images per group
  int pitch;                     // row pitch (floats) of the buffer the FFMAs read
  int in_place;                  // 1: read the raw float buffer (pitch == W), 0: widen into xf first
  int copy;                      // CopyMode
  int vec_store;                 // 1: pooled pairs stored as float2 (Wp even, y 8-byte aligned)
  int raw_bytes;                 // one raw buffer, rounded up to 16, slack included
  int w_floats;                  // groups * K*K * MBP
  FastDiv per_img, nb_div, groups_div;  // by Hp*nb, nb, groups
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const uint32_t s = smem_addr(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  const uint32_t s = smem_addr(smem);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem) : "memory");
}

// Queues the copy of image group `g` (raw bytes, contiguous in x) into `dst`; the caller commits.
template <typename TIn>
__device__ __forceinline__ void stage(unsigned char* dst, const TIn* __restrict__ x, long long g, const Params& p) {
  const long long b0 = g * p.ipb;
  const int n = int(p.B - b0 < p.ipb ? p.B - b0 : p.ipb);
  const size_t img = size_t(p.H) * p.W;
  const unsigned char* src = reinterpret_cast<const unsigned char*>(x + size_t(b0) * img);
  const int bytes = int(n * img * sizeof(TIn));  // <= one raw buffer (checked on the host)
  if (p.copy == kCopy16) {
    for (int i = threadIdx.x; i < bytes / 16; i += blockDim.x) cp_async16(dst + 16 * i, src + 16 * size_t(i));
  } else if (p.copy == kCopy4) {
    for (int i = threadIdx.x; i < bytes / 4; i += blockDim.x) cp_async4(dst + 4 * i, src + 4 * size_t(i));
  } else {
    for (int i = threadIdx.x; i < bytes; i += blockDim.x) dst[i] = __ldg(src + i);
  }
}

template <int K, int MB, typename TIn>
__global__ void __launch_bounds__(kMaxThreads, 1)
    conv15_kernel(const TIn* __restrict__ x, const float* __restrict__ k, float* __restrict__ y, Params p) {
  constexpr int KK = K * K;
  constexpr int MBP = round_up(MB, 4);       // weights of one tap, padded to whole float4s
  constexpr int XR = round_up(K + 3, 4);     // input columns a thread loads per row (K+3 used)
  static_assert(MB % 2 == 0, "weights are read as float4 + float2");
  extern __shared__ float4 smem4[];
  float* s_w = reinterpret_cast<float*>(smem4);  // [groups][K*K][MBP], zero past M
  // Two raw buffers, raw0 + j * raw_bytes (addressed arithmetically: an array of the two pointers indexed at run
  // time went to the stack).
  unsigned char* raw0 = reinterpret_cast<unsigned char*>(s_w + p.w_floats);
  float* xf = reinterpret_cast<float*>(raw0 + 2 * p.raw_bytes);  // widened [ipb][H][pitch] (+ slack)
  const int tid = threadIdx.x, T = blockDim.x;

  for (int i = tid; i < p.w_floats; i += T) {
    const int m = i % MBP, tap = (i / MBP) % KK, g = i / (MBP * KK), mo = g * MB + m;
    s_w[i] = (m < MB && mo < p.M) ? __ldg(&k[size_t(mo) * KK + tap]) : 0.0f;
  }
  // The slack after each buffer is read only for outputs that are never stored; zero it so it is defined.
  for (int i = tid; i < kSlackFloats; i += T) {
    reinterpret_cast<float*>(raw0 + p.raw_bytes)[i - kSlackFloats] = 0.0f;
    reinterpret_cast<float*>(raw0 + 2 * p.raw_bytes)[i - kSlackFloats] = 0.0f;
    if (!p.in_place) xf[size_t(p.ipb) * p.H * p.pitch + i] = 0.0f;
  }

  long long g = blockIdx.x;
  if (g < p.ngroups) stage(raw0, x, g, p);
  cp_async_commit();
  for (int it = 0; g < p.ngroups; g += gridDim.x, ++it) {  // block-uniform: the barriers below are safe
    const long long gn = g + gridDim.x;
    // Buffer (it+1)&1 was last read in iteration it-1, which ended with a barrier.
    if (gn < p.ngroups) stage(raw0 + ((it + 1) & 1) * p.raw_bytes, x, gn, p);
    cp_async_commit();
    cp_async_wait(2);  // this thread's copies of group g are complete ...
    __syncthreads();    // ... and everyone's are visible (also: the synchronous copy mode's stores)

    const long long b0 = g * p.ipb;
    const int n = int(p.B - b0 < p.ipb ? p.B - b0 : p.ipb);
    const float* xs;
    if (p.in_place) {
      xs = reinterpret_cast<const float*>(raw0 + (it & 1) * p.raw_bytes);
    } else {
      // Widen into xf[img][row][pitch], zero past W: each thread keeps one column quad and walks rows.
      const TIn* src = reinterpret_cast<const TIn*>(raw0 + (it & 1) * p.raw_bytes);
      const int rows = n * p.H;
      if (p.W % 4 == 0) {
        const int q = p.pitch / 4, rq = T / q, c = tid % q;
        if (tid / q < rq) {
          for (int r = tid / q; r < rows; r += rq) {
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (4 * c < p.W) {
              if constexpr (sizeof(TIn) == 1) {
                const uchar4 u = *reinterpret_cast<const uchar4*>(src + size_t(r) * p.W + 4 * c);
                v = make_float4(float(u.x), float(u.y), float(u.z), float(u.w));
              } else {
                v = *reinterpret_cast<const float4*>(src + size_t(r) * p.W + 4 * c);
              }
            }
            *reinterpret_cast<float4*>(xf + size_t(r) * p.pitch + 4 * c) = v;
          }
        }
      } else {
        const int rt = T / p.pitch, c = tid % p.pitch;  // pitch <= T is checked on the host
        if (tid / p.pitch < rt)
          for (int r = tid / p.pitch; r < rows; r += rt)
            xf[size_t(r) * p.pitch + c] = c < p.W ? float(src[size_t(r) * p.W + c]) : 0.0f;
      }
      __syncthreads();
      xs = xf;
    }

    // Items of this group: image, channel group, pooled row, pair of pooled columns (the lanes of a warp mostly
    // share one channel group, so the weight loads are broadcasts).
    const int per_img = p.Hp * p.nb;
    const int items = n * per_img * p.groups;
    const int img_stride = p.H * p.pitch;
    for (int item = tid; item < items; item += T) {
      const uint32_t ig = p.per_img.div(uint32_t(item));  // img * groups + channel group
      const int rem = item - int(ig) * per_img;
      const int i = int(p.nb_div.div(uint32_t(rem)));
      const int jb = rem - i * p.nb;
      const int img = int(p.groups_div.div(ig));
      const int cg = int(ig) - img * p.groups;
      const float* xrow = xs + img * img_stride + (2 * i) * p.pitch + 4 * jb;
      const float* ws = s_w + cg * (KK * MBP);

      float acc[MB][2][4];
#pragma unroll
      for (int m = 0; m < MB; ++m)
#pragma unroll
        for (int r = 0; r < 2; ++r) acc[m][r][0] = acc[m][r][1] = acc[m][r][2] = acc[m][r][3] = 0.0f;

#pragma unroll
      for (int kp = 0; kp < K; ++kp) {
        float v[2][XR];
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int u = 0; u < XR; u += 4) {
            const float4 f = *reinterpret_cast<const float4*>(xrow + (kp + r) * p.pitch + u);
            v[r][u] = f.x; v[r][u + 1] = f.y; v[r][u + 2] = f.z; v[r][u + 3] = f.w;
          }
#pragma unroll
        for (int q = 0; q < K; ++q) {
          float w[MBP];
          const float* wt = ws + (kp * K + q) * MBP;
#pragma unroll
          for (int m = 0; m + 4 <= MB; m += 4) {
            const float4 f = *reinterpret_cast<const float4*>(wt + m);
            w[m] = f.x; w[m + 1] = f.y; w[m + 2] = f.z; w[m + 3] = f.w;
          }
          if constexpr (MB % 4 == 2) {
            const float2 f = *reinterpret_cast<const float2*>(wt + MB - 2);
            w[MB - 2] = f.x; w[MB - 1] = f.y;
          }
#pragma unroll
          for (int m = 0; m < MB; ++m)
#pragma unroll
            for (int r = 0; r < 2; ++r)
#pragma unroll
              for (int c = 0; c < 4; ++c) acc[m][r][c] = fmaf(v[r][q + c], w[m], acc[m][r][c]);
        }
      }

      // Pool first, one tanhf per pooled value. Pooled column 2*jb+1 exists only when 2*jb+1 < Wp (odd Wp).
      const long long b = b0 + img;
      const bool second = 2 * jb + 1 < p.Wp;
#pragma unroll
      for (int m = 0; m < MB; ++m) {
        const int mo = cg * MB + m;
        if (mo < p.M) {
          const float t0 = tanhf(fmaxf(fmaxf(acc[m][0][0], acc[m][0][1]), fmaxf(acc[m][1][0], acc[m][1][1])));
          const float t1 = tanhf(fmaxf(fmaxf(acc[m][0][2], acc[m][0][3]), fmaxf(acc[m][1][2], acc[m][1][3])));
          float* yo = y + ((size_t(b) * p.M + mo) * p.Hp + i) * p.Wp + 2 * jb;
          if (p.vec_store) {  // Wp even: the pair always exists
            *reinterpret_cast<float2*>(yo) = make_float2(t0, t1);
          } else {
            yo[0] = t0;
            if (second) yo[1] = t1;
          }
        }
      }
    }
    __syncthreads();  // buffer it&1 (and xf) are no longer read: the next iteration may overwrite them
  }
  cp_async_wait(0);  // nothing is left in flight when the block exits (the last commit was empty)
}

struct Plan {
  Params p{};
  int threads = 0;
  unsigned blocks = 0;
  size_t smem = 0;
};

int pick_mb(const ConvShape& s) {
  if (s.K == 5 && s.M % 10 == 0) return 10;  // fa17 (M = 50): 5 groups, 80 accumulators
  if (s.M % 8 == 0) return 8;
  if (s.M % 6 == 0) return 6;
  return (s.M + 5) / 6 * 6 < (s.M + 7) / 8 * 8 ? 6 : 8;  // the fewest masked channels
}

template <int K, int MB, typename TIn>
const void* kernel_of() {
  return reinterpret_cast<const void*>(conv15_kernel<K, MB, TIn>);
}

template <typename TIn>
const void* pick_kernel(int K, int MB) {
  if (K == 3) return MB == 6 ? kernel_of<3, 6, TIn>() : kernel_of<3, 8, TIn>();
  if (K == 5) return MB == 6 ? kernel_of<5, 6, TIn>() : MB == 8 ? kernel_of<5, 8, TIn>() : kernel_of<5, 10, TIn>();
  return MB == 6 ? kernel_of<7, 6, TIn>() : kernel_of<7, 8, TIn>();
}

// Geometry and the shared-memory bytes for `ipb` images, or why this step has no kernel for the shape.
std::string geometry(const ConvShape& s, size_t elt, bool x_aligned16, bool x_aligned4, int ipb, Params& p,
                     size_t& smem) {
  if (s.C != 1) return "more than one input channel";
  if (s.K != 3 && s.K != 5 && s.K != 7) return "K is not 3, 5 or 7";
  const int K = int(s.K), MB = pick_mb(s), MBP = round_up(MB, 4), XR = round_up(K + 3, 4);
  p.B = s.B; p.H = int(s.H); p.W = int(s.W); p.M = int(s.M);
  p.Hp = int(s.Ho() / 2); p.Wp = int(s.Wo() / 2); p.nb = (p.Wp + 1) / 2;
  if (p.Hp < 1 || p.Wp < 1) return "the output is under 2x2";
  if (s.M > (1 << 20)) return "too many output channels";
  p.groups = int((s.M + MB - 1) / MB);
  p.w_floats = p.groups * K * K * MBP;
  if (size_t(p.w_floats) * 4 > kWeightBytesMax) return "the weights do not fit in shared memory";
  const size_t img = size_t(s.H) * s.W;
  const size_t img_bytes = img * elt;
  p.copy = img_bytes % 16 == 0 && x_aligned16 ? kCopy16 : (img_bytes % 4 == 0 && x_aligned4 ? kCopy4 : kCopySync);
  const int need = 4 * (p.nb - 1) + XR;  // columns the last pair of pooled columns reads
  p.in_place = elt == 4 && s.W % 4 == 0 && s.W >= need;
  p.pitch = p.in_place ? int(s.W) : round_up(std::max<int>(int(s.W), need), 4);
  p.ipb = ipb;
  p.raw_bytes = int(round_up(int(std::min<size_t>(img_bytes * ipb, size_t(1) << 30)), 16) + kSlackFloats * 4);
  if (img_bytes * ipb > (size_t(1) << 28)) return "an image is too large";
  const size_t xf = p.in_place ? 0 : (size_t(ipb) * s.H * p.pitch + kSlackFloats) * 4;
  smem = size_t(p.w_floats) * 4 + 2 * size_t(p.raw_bytes) + xf;
  p.per_img = FastDiv(uint32_t(p.Hp * p.nb));
  p.nb_div = FastDiv(uint32_t(p.nb));
  p.groups_div = FastDiv(uint32_t(p.groups));
  return "";
}

template <typename TIn>
std::string search_plan(const ConvShape& s, size_t elt, bool a16, bool a4, int dev, Plan& out) {
  Params p{};
  size_t smem = 0;
  std::string why = geometry(s, elt, a16, a4, 1, p, smem);
  if (!why.empty()) return why;
  int sms = 0, optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (smem > size_t(optin)) return "one image does not fit in shared memory";
  const void* kernel = pick_kernel<TIn>(int(s.K), pick_mb(s));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
  cudaFuncAttributes attr{};
  CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  const int max_threads = std::min(kMaxThreads, attr.maxThreadsPerBlock);
  // Score = busy lanes in the last item round x busy blocks in the last group round x occupancy up to 8 warps
  // per SM (each thread has 8*MB independent FFMA chains) x a term for the first group's copy, which nothing
  // overlaps (worth about half a group when a block computes few groups).
  double best = -1.0;
  const int ipb_cap = int(std::min<long long>(s.B, kMaxImagesPerGroup));
  for (int ipb = 1; ipb <= ipb_cap; ++ipb) {
    Params q{};
    size_t bytes = 0;
    if (!geometry(s, elt, a16, a4, ipb, q, bytes).empty() || bytes > size_t(optin)) break;
    const long long items = (long long)ipb * q.Hp * q.nb * q.groups;
    const long long ngroups = (s.B + ipb - 1) / ipb;
    for (int threads = 64; threads <= max_threads; threads += 32) {
      if (!q.in_place && q.W % 4 != 0 && q.pitch > threads) continue;  // the scalar widening needs pitch <= T
      if (!q.in_place && q.W % 4 == 0 && q.pitch / 4 > threads) continue;
      int per_sm = 0;
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, bytes));
      if (per_sm == 0) continue;
      const long long rounds = (items + threads - 1) / threads;
      const double lanes = double(items) / double(rounds * threads);
      const long long blocks = std::min<long long>(ngroups, (long long)per_sm * sms);
      const long long waves = (ngroups + blocks - 1) / blocks;
      const double wave = double(ngroups) / double(waves * blocks);
      const double occ = std::min(1.0, per_sm * threads / 32 / 8.0);
      const double first = double(waves) / (double(waves) + 0.5);
      const double score = lanes * wave * occ * first;
      if (score > best + 1e-9) {
        best = score;
        out.p = q;
        out.threads = threads;
        out.blocks = unsigned(blocks);
        out.smem = bytes;
      }
    }
  }
  if (best < 0) return "no block shape fits on an SM";
  out.p.ngroups = (s.B + out.p.ipb - 1) / out.p.ipb;
  return "";
}

// Chooses images per group and threads per block (cached: the search makes a few hundred occupancy queries,
// which must not run inside every timed launch). Returns why there is no plan ("" when there is one).
template <typename TIn>
std::string make_plan(const TIn* x, const float* y, const ConvShape& s, Plan& result) {
  const size_t elt = sizeof(TIn);
  const bool a16 = reinterpret_cast<uintptr_t>(x) % 16 == 0, a4 = reinterpret_cast<uintptr_t>(x) % 4 == 0;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  using Key = std::tuple<size_t, int, long long, long long, long long, long long, long long, bool, bool>;
  static std::mutex mu;
  static std::map<Key, std::pair<std::string, Plan>> cache;
  const Key key{elt, dev, s.B, s.H, s.W, s.M, s.K * (s.C == 1 ? 1 : -1), a16, a4};
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it == cache.end()) {
    Plan out;
    const std::string why = search_plan<TIn>(s, elt, a16, a4, dev, out);
    cache[key] = {why, out};
  }
  const auto& [why, plan] = cache[key];
  if (!why.empty()) return why;
  result = plan;
  result.p.vec_store = result.p.Wp % 2 == 0 && reinterpret_cast<uintptr_t>(y) % 8 == 0;
  return "";
}

template <typename TIn>
void launch(const TIn* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  Plan plan;
  if (!make_plan(x, y, s, plan).empty()) {  // a shape this step has no kernel for: step 10's launcher
    if constexpr (sizeof(TIn) == 1)
      conv_fwd_gpu_fused_tanh_pool_u8(x, k, y, s, st);
    else
      conv_fwd_gpu_fused_tanh_pool(x, k, y, s, st);
    return;
  }
  const int K = int(s.K), MB = pick_mb(s);
  // The same instance pick_kernel chose, launched with its template arguments.
#define PYCONV_CONV15_LAUNCH(KK_, MB_)                                                                   \
  if (K == KK_ && MB == MB_) {                                                                         \
    conv15_kernel<KK_, MB_, TIn><<<plan.blocks, plan.threads, plan.smem, st>>>(x, k, y, plan.p);      \
    CUDA_CHECK_LAUNCH();                                                                               \
    return;                                                                                            \
  }
  PYCONV_CONV15_LAUNCH(3, 6)
  PYCONV_CONV15_LAUNCH(3, 8)
  PYCONV_CONV15_LAUNCH(5, 6)
  PYCONV_CONV15_LAUNCH(5, 8)
  PYCONV_CONV15_LAUNCH(5, 10)
  PYCONV_CONV15_LAUNCH(7, 6)
  PYCONV_CONV15_LAUNCH(7, 8)
#undef PYCONV_CONV15_LAUNCH
  throw CudaError("gpu-fused-pipelined: no kernel instance for K=" + std::to_string(K) + " MB=" +
                  std::to_string(MB));
}

}  // namespace

void conv_fwd_gpu_fused_pipelined(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  launch(x, k, y, s, st);
}

void conv_fwd_gpu_fused_pipelined_u8(const uint8_t* x, const float* k, float* y, const ConvShape& s,
                                     cudaStream_t st) {
  launch(x, k, y, s, st);
}

// Shapes without a kernel here run step 10, so this step refuses exactly what step 10 refuses.
std::string conv_supports_gpu_fused_pipelined(const ConvShape& s) {
  const std::string why = conv_supports_gpu_fused_tanh_pool(s);
  return why.empty() ? why : "gpu-fused-pipelined (generic path = gpu-fused-tanh-pool): " + why;
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-fused-pipelined",
    .step = 15,
    .summary = "conv + tanh + 2x2 max pool, FP32, C=1: persistent blocks stream the next images (cp.async) "
               "while computing, pool first",
    .epilogue = Epilogue::TanhMaxPool2,
    .precision = Precision::Fp32,
    .launch = conv_fwd_gpu_fused_pipelined,
    .launch_u8 = conv_fwd_gpu_fused_pipelined_u8,
    .supports = conv_supports_gpu_fused_pipelined,
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
