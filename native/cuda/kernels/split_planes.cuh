// What steps 26 and 27 share: the batch's images split once into FP16 hi/lo planes laid out channels-last,
// xh[b][h][w][Cp] and xl[b][h][w][Cp] (v ~ hi + 2^-11 lo, cuda/runtime/mma_f16.cuh; channels C..Cp-1 zero), written
// a chunk of the batch at a time into a workspace kept per device and stream.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "common/conv_shape.hpp"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/device_buffer.cuh"
#include "cuda/runtime/mma_f16.cuh"

namespace pyconv::planes {

// The planes of up to this many bytes of images (hi + lo) are written, then multiplied, chunk after chunk, so the
// workspace stays bounded whatever the batch. Timed with step 26 against chunks of 8, 24 and 64 MB (H200, batch
// 10000, a probe launching the variant on device buffers): fastest on 9 of 11 small-image rows of the sweep (s37
// 4.21 ms against 4.95 at 8 MB). Each chunk's launches drain the GPU once, and that costs more than the planes'
// round trip through DRAM that chunks small enough for the 50 MB L2 would save.
constexpr int64_t kChunkBytes = int64_t(256) << 20;

// Images per chunk: as many as kChunkBytes of planes hold, at least one.
inline int64_t chunk_images(const ConvShape& s, int64_t Cp) {
  return std::min<int64_t>(s.B, std::max<int64_t>(1, kChunkBytes / (s.H * s.W * Cp * 4)));
}

// One thread per pixel and 8-channel group, groups fastest: thread i writes 16-byte piece i of each plane, so a
// warp's stores are one contiguous run, and its reads of one channel row cover whole 32-byte sectors (8 pixels x
// 4 bytes when Cp = 32). Static: each file that includes this has its own copy, so the program links (one extern
// definition per including file would clash). Measured forms (Nsight Compute, H200, the sweep's s37 at batch 2000,
// 195 MB read and 215 MB written): pixels fastest, 261 us (each warp store spread over 32 pieces 64 bytes apart);
// before it, 32 channels x 64 pixels of a row staged in shared memory per block, slower still on small images,
// where most of each block sat idle.
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
  uint32_t hi[4], lo[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint2 s = split_f16x2(v[2 * j], v[2 * j + 1]);
    hi[j] = s.x;
    lo[j] = s.y;
  }
  xh[i] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
  xl[i] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
}

// Queues the split of images b0 .. b0 + nb - 1 of x into planes xh / xl (nb images each, channel pitch Cp).
inline void split_chunk(const float* x, __half* xh, __half* xl, const ConvShape& s, int64_t b0, int64_t nb, int Cp,
                        cudaStream_t st) {
  const long long total = nb * s.H * s.W * (Cp / 8);
  split_images<<<unsigned((total + 255) / 256), 256, 0, st>>>(x + b0 * s.C * s.H * s.W, reinterpret_cast<uint4*>(xh),
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

}  // namespace pyconv::planes
