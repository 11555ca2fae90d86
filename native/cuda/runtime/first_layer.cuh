// What the fused first-layer kernels on the split-FP16 tensor cores (steps 19 and 24) share: one image at a time
// per block, fetched with cp.async one image ahead, the pooled outputs staged per filter plane in shared memory
// and written out coalesced, the pool's NaN-propagating max and the tanh of step 16; and the persistent-grid
// sizing step 16 uses too.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

#include "cuda/runtime/cp_async.cuh"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/fast_div.cuh"

namespace pyconv {
namespace first_layer {

constexpr float kTwoLog2e = 2.8853900817779268f;  // 2 * log2(e): tanh(x) = 1 - 2 / (1 + 2^(kTwoLog2e * x))

__host__ __device__ constexpr int round_up(int v, int to) { return (v + to - 1) / to * to; }
// Smallest v' >= v with v' % mod == rem.
__host__ __device__ constexpr int up_to_residue(int v, int rem, int mod) {
  return v + ((rem - v % mod) % mod + mod) % mod;
}

__device__ __forceinline__ float max_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// The same formula as step 16: tanh(x) from z = 2*log2(e)*x as 1 - 2 / (1 + 2^z); +-inf give +-1, NaN gives NaN.
__device__ __forceinline__ float tanh_from_scaled(float z) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(z));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(e + 1.0f));
  return fmaf(r, -2.0f, 1.0f);
}

// tanh(x) for z = zs * m = 2*log2(e)*x, the same formula with its constants moved so that each instruction has
// one immediate: 2^(z - 1) from one FFMA, then 1 - 1 / (2^(z - 1) + 0.5) = 1 - 2 / (1 + 2^z). (The form above
// needs the -2 of its last FMA in a register, which nvcc re-materialises in every m-tile.)
__device__ __forceinline__ float tanh_from_scaled_fma(float zs, float m) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(fmaf(zs, m, -1.0f)));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(e + 0.5f));
  return 1.0f - r;
}

// D = A B (no accumulator input: the zero C operand is the RZ register, so no accumulator is zeroed per tile).
__device__ __forceinline__ void mma_f16_first(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
}

// 32 bits at a shared-window address plus an immediate offset (bytes).
template <int OFF>
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1+%2];\n" : "=r"(v) : "r"(addr), "n"(OFF) : "memory");
  return v;
}

// Queues the copy of one raw image (img_bytes) into a raw slot: cp.async pieces of `piece` bytes (16, 8 or 4), or
// plain loads where piece is 0 (the image is not whole aligned words: uint8 images of odd sizes).
__device__ __forceinline__ void fetch_image(unsigned char* dst, const unsigned char* src, int img_bytes, int piece) {
  if (piece == 0) {
    for (int i = threadIdx.x; i < img_bytes; i += blockDim.x) dst[i] = __ldg(src + i);
    return;
  }
  for (int i = threadIdx.x; i < img_bytes / piece; i += blockDim.x) {
    const unsigned d = smem_addr(dst + size_t(i) * piece);
    const unsigned char* s = src + size_t(i) * piece;
    if (piece == 16)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(s) : "memory");
    else if (piece == 8)
      asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(d), "l"(s) : "memory");
    else
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(s) : "memory");
  }
  cp_async_commit();
}

// The largest cp.async piece (16, 8, 4) that divides the image and the batch's address, 0 for plain loads.
inline int fetch_piece(int img_bytes, const void* x) {
  const uintptr_t xa = reinterpret_cast<uintptr_t>(x);
  for (int piece : {16, 8, 4})
    if (img_bytes % piece == 0 && xa % piece == 0) return piece;
  return 0;
}

// The staged pooled image [M][plane] -> y[b][M][Hp][Wp] (out_per_img = M * Hp * Wp, hw divides by Hp * Wp),
// coalesced: float4 where vec_out (a pooled plane is whole float4s and y is 16-byte aligned). TOut = __half: each
// value rounded to nearest as it leaves, four in one 8-byte store.
template <typename TOut>
__device__ __forceinline__ void write_out(const float* stage, TOut* __restrict__ y, long long b, int out_per_img,
                                          const FastDiv& hw_div, int plane, bool vec_out) {
  TOut* yo = y + size_t(b) * size_t(out_per_img);
  const int hw = int(hw_div.d);
  if (vec_out) {
    for (int i = threadIdx.x; i < out_per_img / 4; i += blockDim.x) {
      const int n = int(hw_div.div(uint32_t(4 * i)));
      const float4 v = *reinterpret_cast<const float4*>(stage + n * plane + (4 * i - n * hw));
      if constexpr (std::is_same_v<TOut, __half>) {
        const __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
        reinterpret_cast<uint2*>(yo)[i] = make_uint2(*reinterpret_cast<const uint32_t*>(&lo),
                                                     *reinterpret_cast<const uint32_t*>(&hi));
      } else {
        reinterpret_cast<float4*>(yo)[i] = v;
      }
    }
  } else {
    for (int i = threadIdx.x; i < out_per_img; i += blockDim.x) {
      const int n = int(hw_div.div(uint32_t(i)));
      yo[i] = TOut(stage[n * plane + (i - n * hw)]);
    }
  }
}

// Where persistent blocks of `kernel` (`threads` each, `smem` bytes of dynamic shared memory) stand on the current
// device: its SM count, its opt-in shared memory per block, and how many such blocks one SM holds (0 when smem is
// beyond the opt-in size, or the block does not fit). Raises the kernel's dynamic shared memory limit to the opt-in
// size once per kernel and device. Steps 16, 19 and 24 size their persistent grids with it.
struct Residency {
  int sms = 0, per_sm = 0;
  size_t optin = 0;
};
inline Residency residency(const void* kernel, int threads, size_t smem) {
  int dev = 0, optin = 0;
  Residency r;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&r.sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  r.optin = size_t(optin);
  if (smem > r.optin) return r;
  static std::mutex mu;
  static std::map<std::tuple<const void*, int>, bool> configured;
  {
    std::lock_guard<std::mutex> lock(mu);
    bool& done = configured[{kernel, dev}];
    if (!done) {
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
      done = true;
    }
  }
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&r.per_sm, kernel, threads, smem));
  return r;
}

// Launches a persistent kernel (blocks of `threads`, each looping over images b += gridDim.x) with `smem` bytes of
// dynamic shared memory: as many blocks as fit on the GPU's SMs, at most one per image. `name` heads the errors.
inline void launch_persistent(const void* kernel, const char* name, int threads, size_t smem, long long images,
                              void** args, cudaStream_t st) {
  const Residency r = residency(kernel, threads, smem);
  if (smem > r.optin)
    throw std::invalid_argument(std::string(name) + ": needs " + std::to_string(smem) +
                                " bytes of shared memory per block, this GPU allows " + std::to_string(r.optin));
  if (r.per_sm < 1) throw std::invalid_argument(std::string(name) + ": the block does not fit on an SM");
  const long long blocks = std::min<long long>(images, (long long)r.sms * r.per_sm);
  CUDA_CHECK(cudaLaunchKernel(kernel, dim3(unsigned(blocks)), dim3(threads), args, smem, st));
  CUDA_CHECK_LAUNCH();
}

}  // namespace first_layer
}  // namespace pyconv
