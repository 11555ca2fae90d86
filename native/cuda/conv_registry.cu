#include <stdexcept>

#include "cuda/conv_registry.cuh"

namespace pyconv {

const std::vector<GpuConvVariant>& gpu_conv_variants() {
  // Ladder order. Adding a variant: its own file, one line here, one source line in CMakeLists.txt.
  static const std::vector<GpuConvVariant> v = {
      {"gpu-baseline", 0, "milestone 3: one thread per output element, global memory only", conv_fwd_gpu_baseline,
       conv_fwd_gpu_baseline_supports},
      {"gpu-shared-tiled", 1, "input tile + halo per (image, channel) in shared memory, one output per thread",
       conv_fwd_gpu_shared_tiled, conv_supports_gpu_shared_tiled},
      {"gpu-const-weights", 2, "step 1 with the weights in __constant__ memory (broadcast reads)",
       conv_fwd_gpu_const_weights, conv_supports_gpu_const_weights},
      {"gpu-unroll-gemm", 3, "explicit unroll (im2col) into a global buffer, then a shared-memory tiled GEMM",
       conv_fwd_gpu_unroll_gemm, conv_supports_gpu_unroll_gemm},
      {"gpu-implicit-gemm", 4, "GEMM whose input tile is gathered from x on the fly (no unrolled matrix)",
       conv_fwd_gpu_implicit_gemm, conv_supports_gpu_implicit_gemm},
      {"gpu-register-tiled", 5, "implicit GEMM with per-thread register micro-tiles and double-buffered slices",
       conv_fwd_gpu_register_tiled, conv_supports_gpu_register_tiled},
      {"gpu-specialised", 6, "direct conv compiled per (C, K): input band in shared memory, register blocking",
       conv_fwd_gpu_specialised, conv_supports_gpu_specialised},
      {"gpu-channel-parallel", 7, "several images per block, input channels split across warps, shared-memory reduction",
       conv_fwd_gpu_channel_parallel, conv_gpu_channel_parallel_unsupported},
      {"gpu-tensor-core", 8, "implicit GEMM on tensor cores (mma.sync TF32), 3xTF32 split for ~fp32 accuracy",
       conv_fwd_gpu_tensor_core, conv_gpu_tensor_core_unsupported, Epilogue::None, false},
      {"gpu-streams", 9, "x in pinned host memory: chunked copies overlap tensor-core compute on 4 streams",
       conv_fwd_gpu_streams, conv_gpu_streams_unsupported, Epilogue::None, true},
      {"gpu-fused-tanh-pool", 10, "conv + tanh + 2x2 max pool in one kernel: the un-pooled output never leaves the SM",
       conv_fwd_gpu_fused_tanh_pool, conv_gpu_fused_tanh_pool_unsupported, Epilogue::TanhMaxPool2, false, 0.0,
       conv_fwd_gpu_fused_tanh_pool_u8},
      {"gpu-autotuned", 11, "tensor-core kernel with its tile configuration chosen per layer shape by measurement",
       conv_fwd_gpu_autotuned, conv_gpu_autotuned_unsupported, Epilogue::None, false},
      {"gpu-constant-operand", 12, "direct conv per (C, K, M): weights as constant-bank FFMA operands, all M per thread",
       conv_fwd_gpu_constant_operand, conv_supports_gpu_constant_operand},
      // One TF32 rounding per operand (relative 2^-11): held to 2e-3 instead of the default 1e-4.
      {"gpu-tensor-core-tf32", 13, "one TF32 tensor-core pass, whole images in shared memory, next image prefetched",
       conv_fwd_gpu_tensor_core_tf32, conv_supports_gpu_tensor_core_tf32, Epilogue::None, false, 2e-3},
      // The weights (and float inputs) rounded to TF32 once: held to 2e-3 like step 13.
      {"gpu-tensor-core-fused", 14, "conv + tanh + 2x2 max pool on TF32 tensor cores: pixels x channels, pool in the fragments",
       conv_fwd_gpu_tensor_core_fused, conv_supports_gpu_tensor_core_fused, Epilogue::TanhMaxPool2, false, 2e-3,
       conv_fwd_gpu_tensor_core_fused_u8},
  };
  return v;
}

const GpuConvVariant& find_gpu_conv_variant(const std::string& name) {
  std::string known;
  for (const auto& v : gpu_conv_variants()) {
    if (name == v.name) return v;
    known += (known.empty() ? "" : ", ") + std::string(v.name);
  }
  throw std::invalid_argument("unknown GPU convolution '" + name + "' (known: " + known + ")");
}

std::string why_unsupported(const GpuConvVariant& v, const ConvShape& s) {
  // Every kernel of the ladder indexes within one image plane with 32-bit integers (the course's planes are a
  // few thousand pixels); refusing here keeps that limit in one place instead of in each variant.
  constexpr int64_t kPlaneLimit = int64_t(1) << 31;
  if (s.H * s.W >= kPlaneLimit || s.H >= kPlaneLimit / 2 || s.W >= kPlaneLimit / 2)
    return std::string(v.name) + ": one image plane of " + std::to_string(s.H) + "x" + std::to_string(s.W) +
           " pixels is beyond the 32-bit in-plane indexing of the GPU kernels";
  if (v.epilogue == Epilogue::TanhMaxPool2 && (s.Ho() < 2 || s.Wo() < 2))
    return std::string(v.name) + " fuses a 2x2 pool: the output must be at least 2x2";
  return v.supports ? v.supports(s) : std::string();
}

}  // namespace pyconv
