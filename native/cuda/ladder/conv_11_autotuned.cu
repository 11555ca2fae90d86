// Step 11 -- gpu-autotuned: step 8's tensor-core kernel with its tile configuration chosen per layer shape.
//
// Changes from step 10: instead of one rule (m-tiles from M, 6 n-tiles, 8 warps), the configuration is looked up
// in a per-shape cache filled by measurement (pyconv.tuning.tune: every configuration timed on the shape, the
// fastest kept, the cache stored as JSON per GPU and loaded before a run). Unknown shapes use the default.
// Why: the best balance of m-tiles (weight reuse), n-tiles per warp (accumulators and B-fragment reuse vs.
// occupancy) and warps per block (tile size vs. ragged edges: 324 pixels of sp19 conv2 fill 384-pixel tiles,
// 576 of fa17 fill 96-pixel tiles exactly) depends on the layer shape and the GPU, and is cheap to measure.
// Configurations: tc-m{1,2,4}-n{3,4,6,8,12}-w{4,8} (see tensor_core_configs()).
// Measured: results/bench-nvidia-h200-2026-11-22.json (`invoke bench`, NVIDIA H200, batch 10000,
// median of 20): this step's row per course layer, cuDNN's beside it.
// Predicted before measuring (H100, B=10000): 0-10% faster than step 8 per layer: sp19 conv2 ~0.18 ms, fa17 ~0.36 ms.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "cuda/runtime/autotune.cuh"
#include "cuda/ladder/conv_08_tensor_core.cuh"
#include "cuda/runtime/registry.cuh"
#include "cuda/runtime/cuda_check.cuh"

namespace pyconv {
namespace {

int config_for(const ConvShape& s) {
  const int tuned = autotune_get(s);
  if (tuned >= 0 && tensor_core_config_supports(tuned, s).empty()) return tuned;
  return tensor_core_default_config(s);
}

std::vector<std::string> tensor_core_config_names() {
  std::vector<std::string> names;
  for (const auto& c : tensor_core_configs()) names.emplace_back(c.name);
  return names;
}

// What the runtime's sweep (cuda/runtime/autotune.cuh) times and records: step 8's configurations.
const TunableFamily kTensorCoreFamily{tensor_core_config_names, tensor_core_config_supports,
                                      conv_fwd_gpu_tensor_core_config};

}  // namespace

void conv_fwd_gpu_autotuned(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  conv_fwd_gpu_tensor_core_config(config_for(s), x, k, y, s, st);
}

std::string conv_supports_gpu_autotuned(const ConvShape& s) {
  return tensor_core_config_supports(tensor_core_default_config(s), s);
}

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-autotuned",
    .step = 11,
    .summary = "tensor-core kernel with its tile configuration chosen per layer shape by measurement",
    .precision = Precision::Tf32x3,
    .launch = conv_fwd_gpu_autotuned,
    .supports = conv_supports_gpu_autotuned,
    .tunable = &kTensorCoreFamily,
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
