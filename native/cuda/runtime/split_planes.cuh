// What steps 26 and 27 share: the batch's images split once into FP16 hi/lo planes laid out channels-last,
// xh[b][h][w][Cp] and xl[b][h][w][Cp] (v ~ hi + 2^-11 lo, cuda/runtime/mma_f16.cuh; channels C..Cp-1 zero), written
// a chunk of the batch at a time into a workspace kept per device and stream; and the MMA k-step and the output
// tile of an implicit GEMM over such planes (step 25's warp tiles: 32 pixels x WN filters per warp).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "common/conv_shape.hpp"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/igemm_tiles.cuh"
#include "cuda/runtime/device_buffer.cuh"
#include "cuda/runtime/mma_f16.cuh"

namespace pyconv::planes {

// The planes of up to this many bytes of images (hi + lo) are written, then multiplied, chunk after chunk, so the
// workspace stays bounded whatever the batch. Timed with step 26 against chunks of 8 and 64 MB (H200, batch 10000,
// a probe launching the variant on device buffers, 11 of the sweep's rows; 256 MB on another machine of the same
// kind): fastest on all 11 (s37 4.21 ms, 4.50 at 64 MB, 4.95 at 8 MB). Each chunk's launches drain the GPU once,
// and that costs more than the planes' round trip through DRAM that chunks small enough for L2 (60 MB on the
// H200) would save.
constexpr int64_t kChunkBytes = int64_t(256) << 20;

// Images per chunk: as many as kChunkBytes of planes hold, at least one.
inline int64_t chunk_images(const ConvShape& s, int64_t Cp) {
  return std::min<int64_t>(s.B, std::max<int64_t>(1, kChunkBytes / (s.H * s.W * Cp * 4)));
}

// Eight floats split into their hi and lo halves, 16 bytes each (the lower index in the low half of each word).
__device__ __forceinline__ void split8(const float (&v)[8], uint4& hi, uint4& lo) {
  uint32_t h[4], l[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint2 s = split_f16x2(v[2 * j], v[2 * j + 1]);
    h[j] = s.x;
    l[j] = s.y;
  }
  hi = make_uint4(h[0], h[1], h[2], h[3]);
  lo = make_uint4(l[0], l[1], l[2], l[3]);
}

// 16-byte asynchronous copy past L1; valid == false writes zeros and reads nothing.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void ldsm_x2(uint32_t addr, uint32_t& r0, uint32_t& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(addr));
}

// One 16-deep k-step of a warp's MT x NT tiles from operands already split: the A fragments (hi, lo) of its
// m-tiles, the B fragments loaded here two n-tiles per ldmatrix.x4 (an odd last one by .x2) from b_hi(nt, x4),
// the shared-memory address lane l gives for n-tiles nt and nt + 1 (x4) or nt alone (x2), its lo plane lo_offset
// bytes further. Three MMAs per product: acc += hi*hi, cor += hi*lo + lo*hi.
template <int MT, int NT, class BAddr>
__device__ __forceinline__ void mma_split_kstep(float (&acc)[MT][NT][4], float (&cor)[MT][NT][4],
                                                const uint32_t (&ah)[MT][4], const uint32_t (&al)[MT][4],
                                                BAddr b_hi, uint32_t lo_offset) {
#pragma unroll
  for (int nt = 0; nt < NT; nt += 2) {
    uint32_t bh[4], bl[4];
    if (nt + 1 < NT) {
      const uint32_t bt = b_hi(nt, true);
      igemm::ldsm_x4(bt, bh[0], bh[1], bh[2], bh[3]);
      igemm::ldsm_x4(bt + lo_offset, bl[0], bl[1], bl[2], bl[3]);
    } else {
      const uint32_t bt = b_hi(nt, false);
      ldsm_x2(bt, bh[0], bh[1]);
      ldsm_x2(bt + lo_offset, bl[0], bl[1]);
      bh[2] = bh[3] = bl[2] = bl[3] = 0u;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (nt + h >= NT) break;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_f16(acc[mt][nt + h], ah[mt][0], ah[mt][1], ah[mt][2], ah[mt][3], bh[2 * h], bh[2 * h + 1]);
        mma_f16(cor[mt][nt + h], ah[mt][0], ah[mt][1], ah[mt][2], ah[mt][3], bl[2 * h], bl[2 * h + 1]);
        mma_f16(cor[mt][nt + h], al[mt][0], al[mt][1], al[mt][2], al[mt][3], bh[2 * h], bh[2 * h + 1]);
      }
    }
  }
}

// The end of a block: every copy landed and every warp done with the pipeline's shared memory, the tile staged
// there as [filter][pixel] (acc + 2^-11 cor) and written to y (step 25's epilogue, igemm_tiles.cuh).
template <int BN, int THREADS, int MT, int NT>
__device__ __forceinline__ void finish_tile(float* cs, const float (&acc)[MT][NT][4], const float (&cor)[MT][NT][4],
                                            int wm, int wn, float* __restrict__ y, const igemm::Params& out,
                                            long long p0, int n0) {
  const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  cp_async_wait_group<0>();
  __syncthreads();  // every warp is done with the buffers the staging tile aliases
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      float d[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) d[r] = fmaf(cor[mt][nt][r], kSplitUnscale, acc[mt][nt][r]);
      igemm::stage_fragment(cs, wm + mt * 16 + g, wn + nt * 8 + 2 * t, d[0], d[1], d[2], d[3]);
    }
  __syncthreads();
  igemm::store_tile<BN, THREADS>(cs, y, out, p0, n0);
}

// One thread per pixel and 8-channel group, groups fastest: thread i writes 16-byte piece i of each plane, so a
// warp's stores are one contiguous run, and its reads of one channel row cover whole 32-byte sectors (8 pixels x
// 4 bytes when Cp = 32). Static: each file that includes this has its own copy, so the program links (one extern
// definition per including file would clash). Measured (Nsight Compute, H200, the sweep's s37 at batch 2000, 195
// MB read and 215 MB written): 111 us; with the pixels fastest, 261 us (each warp's stores spread over 32 pieces
// 64 bytes apart).
static __global__ void split_images(const float* __restrict__ x, uint4* __restrict__ xh, uint4* __restrict__ xl,
                                    int C, int HW, int groups, long long total) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int gi = int(i % groups);
  const long long bp = i / groups;  // b * HW + pixel
  const int px = int(bp % HW);
  const long long b = bp / HW;
  const float* src = x + (b * C + 8 * gi) * (long long)HW + px;
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = 8 * gi + j < C ? __ldcs(src + (long long)j * HW) : 0.0f;
  split8(v, xh[i], xl[i]);
}

// split_images with `rows` image rows stacked in each pixel's 8 channels (rows * C <= 8): channel j of pixel (h, w)
// is channel j % C of pixel (h + j / C, w), zero past rows * C channels and past the image's last row. A kernel
// whose taps are rows h .. h + K - 1 then multiplies `rows` of them in one 8-channel step (step 30, C <= 4). Built
// per C, so that j % C and j / C are constants: with C known only at run time the divisions made it issue-bound
// (Nsight Compute on the sweep's s11, C = 4: 2.43 TB/s with issue slots 82% busy, where split_images moves 3.8).
// Step 30 then, against the sweep before (results/bench-nvidia-h200-2026-11-29-sweep-tiling.json, -c8-stacked.json;
// ms at batch 10000): s36 (C=2) 1.72 -> 1.63, s15 (C=3) 3.82 -> 3.73, s20 (C=3) 2.30 -> 2.28, s11 (C=4) 13.0 -> 13.1,
// in a run whose unchanged variants were 0.5-1.2% slower in geometric mean than in the one before.
template <int C>
static __global__ void split_images_stacked(const float* __restrict__ x, uint4* __restrict__ xh,
                                            uint4* __restrict__ xl, int H, int W, int rows, long long total) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int HW = H * W, px = int(i % HW), h = px / W;
  const float* img = x + (i / HW) * C * (long long)HW + px;
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int c = j % C, dh = j / C;
    v[j] = dh < rows && h + dh < H ? __ldg(img + (long long)c * HW + dh * W) : 0.0f;
  }
  split8(v, xh[i], xl[i]);
}

// Queues the split of images b0 .. b0 + nb - 1 of x into planes xh / xl (nb images each, channel pitch Cp), with
// `rows` image rows stacked in each pixel where rows > 1 (split_images_stacked; Cp = 8).
inline void split_chunk(const float* x, __half* xh, __half* xl, const ConvShape& s, int64_t b0, int64_t nb, int Cp,
                        cudaStream_t st, int rows = 1) {
  const long long total = nb * s.H * s.W * (Cp / 8);
  if (rows > 1) {
    const auto kernel = s.C == 1 ? split_images_stacked<1> : s.C == 2 ? split_images_stacked<2>
                        : s.C == 3 ? split_images_stacked<3> : s.C == 4 ? split_images_stacked<4> : nullptr;
    if (!kernel) throw std::invalid_argument("split_chunk: rows are stacked only where C <= 4");
    kernel<<<unsigned((total + 255) / 256), 256, 0, st>>>(x + b0 * s.C * s.H * s.W, reinterpret_cast<uint4*>(xh),
                                                          reinterpret_cast<uint4*>(xl), int(s.H), int(s.W), rows,
                                                          total);
  } else
    split_images<<<unsigned((total + 255) / 256), 256, 0, st>>>(x + b0 * s.C * s.H * s.W,
                                                                reinterpret_cast<uint4*>(xh),
                                                                reinterpret_cast<uint4*>(xl), int(s.C),
                                                                int(s.H * s.W), Cp / 8, total);
  CUDA_CHECK_LAUNCH();
}

// The planes a launch needs, per device and stream (launches on two streams at once must not share them), grown
// only when a larger layer comes: a variant that uses it is not graph-capturable. cudaFree on growth waits for
// the device to go idle, so work still queued on the stream is safe.
struct Workspace {
  DeviceBuffer<__half> weights, images;
};
inline Workspace& workspace(cudaStream_t st) {
  static std::mutex mu;
  static std::map<std::pair<int, cudaStream_t>, Workspace> by_stream;  // lives until process exit
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  return by_stream[{dev, st}];
}

// Queues one layer over split planes on stream st: the stream's workspace grown to two weight planes of wplane
// halves and two planes of a chunk of images, split_weights(wh, wl, blocks) queued once (one 256-thread block per
// 2048 halves of a plane), then for each chunk of images b0 .. b0 + nb - 1 their planes' split (`rows` image rows
// stacked in each pixel: split_chunk) and gemm(xh, xl, wh, wl, b0, nb). Every launch is checked.
template <class SplitWeights, class Gemm>
void run_in_chunks(const float* x, const ConvShape& s, int Cp, size_t wplane, cudaStream_t st,
                   SplitWeights split_weights, Gemm gemm, int rows = 1) {
  const int64_t chunk = chunk_images(s, Cp);
  const size_t plane = size_t(chunk) * s.H * s.W * Cp;
  Workspace& ws = workspace(st);
  ws.weights.resize(2 * wplane);
  ws.images.resize(2 * plane);
  __half *wh = ws.weights.get(), *wl = wh + wplane, *xh = ws.images.get(), *xl = xh + plane;
  split_weights(reinterpret_cast<uint4*>(wh), reinterpret_cast<uint4*>(wl), unsigned((wplane / 8 + 255) / 256));
  CUDA_CHECK_LAUNCH();
  for (int64_t b0 = 0; b0 < s.B; b0 += chunk) {
    const int64_t nb = std::min(chunk, s.B - b0);
    split_chunk(x, xh, xl, s, b0, nb, Cp, st, rows);
    gemm(xh, xl, wh, wl, b0, nb);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace pyconv::planes
