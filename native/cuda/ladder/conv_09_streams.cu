// Step 9 -- gpu-streams: x arrives in pinned host memory (x_on_host); the batch is split into chunks whose
// host-to-device copies overlap the convolution of earlier chunks on a pool of streams.
// Measurements and what was tried: docs/ladder-findings/09.md (docs/ladder.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/ladder/conv_08_tensor_core.cuh"
#include "cuda/runtime/registry.cuh"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/device_buffer.cuh"

namespace pyconv {
namespace {

constexpr int N_STREAMS = 4;
constexpr size_t CHUNK_BYTES = 8u << 20;  // ~8 MB per copy: long enough to run near the link's peak
constexpr long long MAX_CHUNKS = 16;

struct StreamPool {
  std::vector<Stream> streams;
  std::vector<Event> done;  // recorded on each stream at the end of a call
  Event start;
  DeviceBuffer<float> x_dev;
  StreamPool() {
    for (int i = 0; i < N_STREAMS; ++i) {
      streams.emplace_back();
      done.emplace_back();
    }
  }
};

std::mutex pools_mutex;
std::map<int, std::unique_ptr<StreamPool>>& pools() {  // one pool per device: streams belong to a device
  static std::map<int, std::unique_ptr<StreamPool>> p;
  return p;
}

}  // namespace

// Step 7 (conv_07_channel_parallel.cu): the shapes the tensor-core kernel refuses.
void conv_fwd_gpu_channel_parallel(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
std::string conv_supports_gpu_channel_parallel(const ConvShape& s);

void conv_fwd_gpu_streams(const float* x_host, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  std::lock_guard<std::mutex> lock(pools_mutex);
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  auto& slot = pools()[dev];
  if (!slot) slot = std::make_unique<StreamPool>();
  StreamPool& pool = *slot;

  const size_t img = size_t(s.C) * s.H * s.W;
  const size_t out_img = size_t(s.M) * s.Ho() * s.Wo();
  // Growing the buffer frees the old one; cudaFree waits for the device, so earlier calls are done with it.
  pool.x_dev.resize(img * s.B);
  const long long chunks =
      std::max(1LL, std::min({MAX_CHUNKS, (long long)s.B, (long long)((img * s.B * 4 + CHUNK_BYTES - 1) / CHUNK_BYTES)}));
  const long long per_chunk = (s.B + chunks - 1) / chunks;
  const int tc_config = tensor_core_default_config(s);
  const bool use_tc = tensor_core_config_supports(tc_config, s).empty();

  pool.start.record(st);
  for (int i = 0; i < N_STREAMS; ++i) {
    CUDA_CHECK(cudaStreamWaitEvent(pool.streams[i].get(), pool.start.get(), 0));
    for (int j = 0; j < N_STREAMS; ++j)  // the previous call's readers of x_dev (no-op before the first call)
      CUDA_CHECK(cudaStreamWaitEvent(pool.streams[i].get(), pool.done[j].get(), 0));
  }
  for (long long c = 0; c * per_chunk < s.B; ++c) {
    const long long b0 = c * per_chunk, nb = std::min(per_chunk, s.B - b0);
    cudaStream_t cs = pool.streams[size_t(c % N_STREAMS)].get();
    float* xd = pool.x_dev.get() + b0 * img;
    CUDA_CHECK(cudaMemcpyAsync(xd, x_host + b0 * img, nb * img * sizeof(float), cudaMemcpyHostToDevice, cs));
    ConvShape part = s;
    part.B = nb;
    if (use_tc)
      conv_fwd_gpu_tensor_core_config(tc_config, xd, k, y + b0 * out_img, part, cs);
    else
      conv_fwd_gpu_channel_parallel(xd, k, y + b0 * out_img, part, cs);
  }
  for (int i = 0; i < N_STREAMS; ++i) {
    pool.done[i].record(pool.streams[i].get());
    CUDA_CHECK(cudaStreamWaitEvent(st, pool.done[i].get(), 0));
  }
}

std::string conv_supports_gpu_streams(const ConvShape& s) {
  if (tensor_core_config_supports(tensor_core_default_config(s), s).empty()) return "";
  return conv_supports_gpu_channel_parallel(s);
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-streams",
    .step = 9,
    .summary = "x in pinned host memory: chunked copies overlap tensor-core compute on 4 streams",
    .precision = Precision::Tf32x3,
    .x_on_host = true,
    .launch = conv_fwd_gpu_streams,
    .supports = conv_supports_gpu_streams,
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = on_request(
                  "reads x from pinned host memory, and final keeps the activations on the device: it runs only "
                  "when named with --impl, and only on a network's first conv layer")},
});

}  // namespace pyconv
