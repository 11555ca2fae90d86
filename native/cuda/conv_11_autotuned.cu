// Step 11 -- gpu-autotuned: step 8's tensor-core kernel with its tile configuration chosen per layer shape.
//
// Changes from step 10: instead of one rule (m-tiles from M, 6 n-tiles, 8 warps), the configuration is looked up
// in a per-shape cache filled by measurement (pyconv.tuning.tune: every configuration timed on the shape, the
// fastest kept, the cache stored as JSON per GPU and loaded before a run). Unknown shapes use the default.
// Why: the best balance of m-tiles (weight reuse), n-tiles per warp (accumulators and B-fragment reuse vs.
// occupancy) and warps per block (tile size vs. ragged edges: 324 pixels of sp19 conv2 fill 384-pixel tiles,
// 576 of fa17 fill 96-pixel tiles exactly) depends on the layer shape and the GPU, and is cheap to measure.
// Configurations: tc-m{1,2,4}-n{3,4,6,8,12}-w{4,8} (see tensor_core_configs()).
// Measured (NVIDIA H200, batch 10000, median of 20, `invoke bench`, results/bench-nvidia-h200-2026-11-22.json):
// sp19 conv1 1.94 ms (+tanh+pool 2.48); sp19 conv2 1.05 ms; fa17 conv 2.3 ms (+tanh+pool 3.59).
// cuDNN fp32 on the same layers: 2.23 ms, 1.03 ms, 1.16 ms (conv+tanh+pool: 2.81, -, 2.54).
// Predicted before measuring (H100, B=10000): 0-10% faster than step 8 per layer: sp19 conv2 ~0.18 ms, fa17 ~0.36 ms.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <stdexcept>

#include "cuda/autotune.cuh"
#include "cuda/conv_08_tensor_core.cuh"
#include "cuda/conv_registry.cuh"
#include "cuda/cuda_check.cuh"
#include "cuda/device_buffer.cuh"

namespace pyconv {
namespace {

using ShapeKey = std::array<int64_t, 6>;
ShapeKey key_of(const ConvShape& s) { return {s.B, s.C, s.H, s.W, s.M, s.K}; }

std::mutex cache_mutex;
std::map<ShapeKey, int>& cache() {
  static std::map<ShapeKey, int> c;
  return c;
}

int config_for(const ConvShape& s) {
  const int tuned = autotune_get(s);
  if (tuned >= 0 && tensor_core_unsupported(tuned, s).empty()) return tuned;
  return tensor_core_default_config(s);
}

}  // namespace

std::vector<std::string> autotune_configs() {
  std::vector<std::string> names;
  for (const auto& c : tensor_core_configs()) names.emplace_back(c.name);
  return names;
}

void autotune_set(const ConvShape& s, int config) {
  if (config >= int(tensor_core_configs().size()))
    throw std::invalid_argument("autotune: no configuration " + std::to_string(config));
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (config < 0)
    cache().erase(key_of(s));
  else
    cache()[key_of(s)] = config;
}

int autotune_get(const ConvShape& s) {
  std::lock_guard<std::mutex> lock(cache_mutex);
  const auto it = cache().find(key_of(s));
  return it == cache().end() ? -1 : it->second;
}

double autotune_time_config(int config, const float* x, const float* k, float* y, const ConvShape& s, int reps) {
  if (reps < 1) throw std::invalid_argument("autotune: reps must be >= 1");
  const std::string why = tensor_core_unsupported(config, s);
  if (!why.empty()) throw std::invalid_argument(why);
  Stream st;
  conv_fwd_gpu_tensor_core_config(config, x, k, y, s, st.get());  // warm-up: caches, clocks, attributes
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    Event a, b;
    a.record(st.get());
    conv_fwd_gpu_tensor_core_config(config, x, k, y, s, st.get());
    b.record(st.get());
    ms.push_back(b.since(a));
  }
  std::sort(ms.begin(), ms.end());
  return ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
}

void conv_fwd_gpu_autotuned(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  conv_fwd_gpu_tensor_core_config(config_for(s), x, k, y, s, st);
}

std::string conv_gpu_autotuned_unsupported(const ConvShape& s) {
  return tensor_core_unsupported(tensor_core_default_config(s), s);
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-autotuned",
    .step = 11,
    .summary = "tensor-core kernel with its tile configuration chosen per layer shape by measurement",
    .precision = Precision::Tf32x3,
    .launch = conv_fwd_gpu_autotuned,
    .supports = conv_gpu_autotuned_unsupported,
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
