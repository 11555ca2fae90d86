// Shared by the constant-operand ladder steps (conv_12_constant_operand.cu, conv_13_fused_constant_operand.cu):
// the weights live in a __constant__ bank so that every FFMA takes its weight as an immediate constant-bank
// operand (c[0x3][imm] in SASS) instead of loading it.
//
// A __constant__ bank is one per CUDA module, and each .cu file of the project is its own module. Everything here
// sits in an anonymous namespace on purpose: each including file gets its own copy of the ordering state below,
// which guards exactly that file's bank.
//
// Why the ordering: the weights are copied into the bank on the launch's stream just before the kernel. Two
// launches on different streams (chunked mode runs one layer on several streams) would otherwise overwrite the
// bank while the other kernel reads it; with different weights (two layers of one instance in flight) that is a
// wrong result, not only a benign same-value race. So every upload first waits (cudaStreamWaitEvent) for the
// event recorded after the previous kernel that read the same bank region: uploads and kernels of one instance
// run one after another across streams. Copies of other chunks still overlap them.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "cuda/runtime/cuda_check.cuh"

namespace pyconv {
namespace {

// Runs `enqueue(st)` (upload + launch of bank region `region`) after every earlier enqueue of the same region on
// any stream has finished on the device. The events are never destroyed: they live as long as the module, and
// destroying them at process exit could run after the CUDA context is gone.
template <class Enqueue>
void ordered_bank_use(int region, cudaStream_t st, Enqueue&& enqueue) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, cudaEvent_t> last_reader;  // (device, region) -> after the last kernel
  std::lock_guard<std::mutex> lock(mu);
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cudaEvent_t& ev = last_reader[{dev, region}];
  if (ev == nullptr) CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CUDA_CHECK(cudaStreamWaitEvent(st, ev, 0));  // a never-recorded event: no wait
  enqueue(st);
  CUDA_CHECK(cudaEventRecord(ev, st));
}

// k[M][CKK] -> out[CKK][M]: the bank holds the M weights of one tap contiguously, in the order the unrolled
// kernels consume them, so consecutive FFMAs read the same 64-byte constant-cache line.
__global__ void transpose_weights_kernel(const float* __restrict__ k, float* __restrict__ out, int M, int CKK) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < M * CKK; i += gridDim.x * blockDim.x)
    out[(i % CKK) * M + i / CKK] = k[i];
}

struct BlockShape {
  int ipb = 0;      // images staged per block
  int threads = 0;  // threads per block
};

// Picks images per block and threads per block for a kernel that stages `bytes_per_image` of each of its images
// in shared memory and then spreads ipb * items_per_image equal work items over its threads. Score: the fraction
// of lanes busy in the item loop (last round) x the fraction of block slots busy in the last wave x occupancy up
// to 16 warps per SM (enough to hide shared-load latency with 16+ independent FMA chains per thread). Exact
// occupancy comes from the runtime (registers + shared memory). Cached per shape; returns ipb = 0 when not even
// one image fits.
inline BlockShape choose_block_shape(const void* kernel, long long B, long long items_per_image,
                                     size_t bytes_per_image, int max_threads, int max_ipb) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, long long, long long, size_t>, BlockShape> cache;
  int dev = 0, sms = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const auto key = std::make_tuple(kernel, dev, B, items_per_image, bytes_per_image);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
  cudaFuncAttributes attr{};
  CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));  // the running binary's __launch_bounds__
  max_threads = std::min(max_threads, attr.maxThreadsPerBlock);
  BlockShape best;
  double best_score = -1.0;
  const int ipb_cap = int(std::min<long long>(B, max_ipb));
  for (int ipb = 1; ipb <= ipb_cap; ++ipb) {
    const size_t smem = bytes_per_image * ipb;
    if (smem > size_t(optin)) break;
    const long long items = items_per_image * ipb;
    const long long blocks = (B + ipb - 1) / ipb;
    for (int threads = 64; threads <= max_threads; threads += 32) {
      int per_sm = 0;
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
      if (per_sm == 0) continue;
      const long long rounds = (items + threads - 1) / threads;
      const double lanes = double(items) / double(rounds * threads);
      const long long slots = (long long)per_sm * sms, waves = (blocks + slots - 1) / slots;
      const double wave = double(blocks) / double(waves * slots);
      const double occ = std::min(1.0, per_sm * threads / 32 / 16.0);
      const double score = lanes * wave * occ;
      if (score > best_score + 1e-9) {
        best_score = score;
        best = {ipb, threads};
      }
    }
  }
  cache[key] = best;
  return best;
}

}  // namespace
}  // namespace pyconv
