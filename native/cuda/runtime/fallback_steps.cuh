// Launchers of live steps that other steps fall back to, for shapes their own kernels do not cover:
// step 6 (specialised) runs step 5 (register-tiled) and step 16 (fused-warp-specialised) runs step 15
// (fused-pipelined) for the first layers it has no kernel for; of the ladder's history, step 12
// (constant-operand) runs step 6. Only live steps are declared here: a live file never calls a ladder file.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/conv_shape.hpp"

namespace pyconv {

void conv_fwd_gpu_register_tiled(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
std::string conv_supports_gpu_register_tiled(const ConvShape& s);
void conv_fwd_gpu_specialised(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
std::string conv_supports_gpu_specialised(const ConvShape& s);
void conv_fwd_gpu_fused_pipelined(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
void conv_fwd_gpu_fused_pipelined_u8(const uint8_t* x, const float* k, float* y, const ConvShape& s,
                                     cudaStream_t st);
std::string conv_supports_gpu_fused_pipelined(const ConvShape& s);

}  // namespace pyconv
