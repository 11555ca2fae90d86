// The tensor-core implicit GEMM of step 8, as a family of tile configurations. Step 8 launches the default
// configuration for the shape; step 9 (streams) calls it per chunk; step 11 (autotuned) picks a configuration per
// layer shape from a measured cache. One kernel, one owner: conv_08_tensor_core.cu.
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "common/conv_shape.hpp"

namespace pyconv {

struct TensorCoreConfig {
  const char* name;  // e.g. "tc-m1-n6-w8": 1 m-tile of 16 output channels per warp column, 6 n-tiles, 8 warps
  int m_tiles;       // 16-channel tiles per block (warps are split across them)
  int n_tiles;       // 8-pixel tiles per warp (accumulators: 4 * n_tiles registers)
  int warps;         // warps per block
};

// Every instantiated configuration, in a fixed order (indices are stable within one build).
const std::vector<TensorCoreConfig>& tensor_core_configs();
// The configuration step 8 uses when nothing better is known: chosen from M only.
int tensor_core_default_config(const ConvShape& s);
// "" when `config` can run `s`, else why not.
std::string tensor_core_config_supports(int config, const ConvShape& s);
// Queue the convolution with configuration `config` on `st` (device pointers; no synchronisation).
void conv_fwd_gpu_tensor_core_config(int config, const float* x, const float* k, float* y, const ConvShape& s,
                                     cudaStream_t st);

}  // namespace pyconv
