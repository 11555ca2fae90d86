// The one list of GPU convolution variants (the optimisation ladder). Python asks this registry, through
// pyconv._gpu.variants(), for names, ladder steps and supported shapes; nothing else holds a list.
//
// Every launcher has the same contract: x[B][C][H][W] and k[M][C][K][K] are float32 on the device (or, when
// x_on_host is set, x is pinned host memory the variant streams itself), y is a device buffer, the work is queued
// on `stream`, every launch is checked, nothing is synchronised unless the variant needs it.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/conv_shape.hpp"

namespace pyconv {

// What the variant writes to y.
enum class Epilogue {
  None,          // y[B][M][Ho][Wo] = conv(x, k)
  TanhMaxPool2,  // y[B][M][Ho/2][Wo/2] = maxpool2x2/2(tanh(conv(x, k))) -- the layer never stores un-pooled
};

using ConvLaunchFn = void (*)(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t stream);
// The same with x as uint8 pixels on the device (a network's raw images), widened to float inside the kernel.
using ConvLaunchU8Fn = void (*)(const uint8_t* x, const float* k, float* y, const ConvShape& s,
                                cudaStream_t stream);
// Returns an empty string when the shape is supported, else why not (shown to the user verbatim).
using ConvSupportsFn = std::string (*)(const ConvShape& s);

struct GpuConvVariant {
  const char* name;     // e.g. "gpu-baseline"; CLI --impl and bench rows use it
  int step;             // position on the ladder (file native/cuda/conv_NN_*.cu)
  const char* summary;  // one line: what this step changes
  ConvLaunchFn launch;
  ConvSupportsFn supports;  // nullptr: every valid shape
  Epilogue epilogue = Epilogue::None;
  bool x_on_host = false;   // x is pinned host memory; the variant overlaps its own copies with compute
  // Relative tolerance the tests hold this variant to; 0 means the project's default (1e-4). Only variants
  // that round on purpose (tensor cores, half precision) set it, and say why in their file.
  double tolerance = 0.0;
  // Optional: reads uint8 x directly. The network then skips its uint8 -> float32 pass when this variant runs
  // its first layer (the images never exist as float32 on the device).
  ConvLaunchU8Fn launch_u8 = nullptr;
};

const std::vector<GpuConvVariant>& gpu_conv_variants();
const GpuConvVariant& find_gpu_conv_variant(const std::string& name);  // throws std::invalid_argument
std::string why_unsupported(const GpuConvVariant& v, const ConvShape& s);  // "" when supported

// The ladder's launchers, one per file native/cuda/conv_NN_<technique>.cu.
void conv_fwd_gpu_baseline(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
std::string conv_fwd_gpu_baseline_supports(const ConvShape& s);
void conv_fwd_gpu_shared_tiled(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
std::string conv_supports_gpu_shared_tiled(const ConvShape& s);
void conv_fwd_gpu_const_weights(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
std::string conv_supports_gpu_const_weights(const ConvShape& s);
void conv_fwd_gpu_unroll_gemm(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
std::string conv_supports_gpu_unroll_gemm(const ConvShape& s);
void conv_fwd_gpu_implicit_gemm(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
std::string conv_supports_gpu_implicit_gemm(const ConvShape& s);
void conv_fwd_gpu_register_tiled(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
std::string conv_supports_gpu_register_tiled(const ConvShape& s);
void conv_fwd_gpu_specialised(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
std::string conv_supports_gpu_specialised(const ConvShape& s);
void conv_fwd_gpu_channel_parallel(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
std::string conv_gpu_channel_parallel_unsupported(const ConvShape& s);
void conv_fwd_gpu_tensor_core(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
std::string conv_gpu_tensor_core_unsupported(const ConvShape& s);
void conv_fwd_gpu_streams(const float* x_host, const float* k, float* y, const ConvShape& s, cudaStream_t st);
std::string conv_gpu_streams_unsupported(const ConvShape& s);
void conv_fwd_gpu_fused_tanh_pool(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
void conv_fwd_gpu_fused_tanh_pool_u8(const uint8_t* x, const float* k, float* y, const ConvShape& s,
                                     cudaStream_t st);
std::string conv_gpu_fused_tanh_pool_unsupported(const ConvShape& s);
void conv_fwd_gpu_autotuned(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
std::string conv_gpu_autotuned_unsupported(const ConvShape& s);
void conv_fwd_gpu_constant_operand(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
std::string conv_supports_gpu_constant_operand(const ConvShape& s);
void conv_fwd_gpu_tensor_core_tf32(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
std::string conv_supports_gpu_tensor_core_tf32(const ConvShape& s);
void conv_fwd_gpu_tensor_core_fused(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
void conv_fwd_gpu_tensor_core_fused_u8(const uint8_t* x, const float* k, float* y, const ConvShape& s,
                                       cudaStream_t st);
std::string conv_supports_gpu_tensor_core_fused(const ConvShape& s);

}  // namespace pyconv
