// The GPU convolution variants (the optimisation ladder) describe and register themselves: each file
// native/cuda/kernels/conv_NN_<technique>.cu (a live step) or native/cuda/ladder/conv_NN_<technique>.cu (the
// ladder's history, built with PYCONV_LADDER) ends with PYCONV_REGISTER_GPU_CONV(GpuConvVariant{...}). Python asks the
// registry, through pyconv._gpu.variants(), for names, steps, roles and tolerances; nothing else holds a list.
//
// Every launcher has the same contract: x[B][C][H][W] and k[M][C][K][K] are float32 on the device (or, when
// x_on_host is set, x is pinned host memory the variant streams itself), y is a device buffer, the work is queued
// on `stream`, every launch is checked, nothing is synchronised unless the variant needs it.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/conv_shape.hpp"
#include "common/variant.hpp"

namespace pyconv {

using ConvLaunchFn = void (*)(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t stream);
// The same with x as uint8 pixels on the device (a network's raw images), widened to float inside the kernel.
using ConvLaunchU8Fn = void (*)(const uint8_t* x, const float* k, float* y, const ConvShape& s,
                                cudaStream_t stream);
// The same with y written in half (round to nearest): see GpuConvVariant::launch_f16_out.
using ConvLaunchF16OutFn = void (*)(const float* x, const float* k, __half* y, const ConvShape& s,
                                    cudaStream_t stream);
// launch_u8's input with launch_f16_out's output: see GpuConvVariant::launch_u8_f16_out.
using ConvLaunchU8F16OutFn = void (*)(const uint8_t* x, const float* k, __half* y, const ConvShape& s,
                                      cudaStream_t stream);
// Returns an empty string when the shape is supported, else why not (shown to the user verbatim).
using ConvSupportsFn = std::string (*)(const ConvShape& s);

// A kernel family whose tile configuration is chosen per layer shape by measurement (step 11). The runtime's
// autotune functions (cuda/runtime/autotune.cuh) time and record the configurations of the first variant in
// ladder order that has one.
struct TunableFamily {
  std::vector<std::string> (*configs)();                       // names; a configuration's number is its index
  std::string (*supports)(int config, const ConvShape& s);    // "" when `config` can run s, else why not
  void (*launch)(int config, const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st);
};

// The GPU milestones. Milestone 2 runs on the CPU: a GPU variant is never part of it.
struct GpuRoles {
  MilestoneRole m3, m4, final;
};

// Written with designated initializers in this order (fields left out keep the defaults below).
struct GpuConvVariant {
  const char* name = nullptr;     // e.g. "gpu-baseline"; CLI --impl and bench rows use it
  int step = -1;                  // position on the ladder: the NN of its file's name, conv_NN_<technique>.cu
  const char* summary = nullptr;  // one line: what this step changes
  Epilogue epilogue = Epilogue::None;
  Precision precision = Precision::Fp32;
  // Relative tolerance the tests hold this variant to; 0 means kDefaultRtol. Only variants that round on purpose
  // (one TF32 or FP16 tensor-core pass) set it, and say why in their file.
  double rtol = 0.0;
  bool x_on_host = false;  // x is pinned host memory; the variant overlaps its own copies with compute
  ConvLaunchFn launch = nullptr;
  // Optional: reads uint8 x directly. The network then skips its uint8 -> float32 pass when this variant runs
  // its first layer (the images never exist as float32 on the device).
  ConvLaunchU8Fn launch_u8 = nullptr;
  // Optional: the same products and sums as launch, y stored in half (round to nearest) instead of float32. The
  // network uses it for a conv whose output feeds a fully connected layer on the FP16 tensor cores (FcMath::FP16,
  // layers.cuh), which would round that input to half anyway: half the bytes written and read, no rounding pass.
  ConvLaunchF16OutFn launch_f16_out = nullptr;
  // Optional: the same for launch_u8 (the uint8 images of a network's first layer in, y in half out).
  ConvLaunchU8F16OutFn launch_u8_f16_out = nullptr;
  ConvSupportsFn supports = nullptr;  // nullptr: every valid shape
  const TunableFamily* tunable = nullptr;  // optional: its configurations, for the per-shape sweep
  // A network may capture this launcher's work once into a CUDA graph and replay it while its arguments stay
  // the same (the chunked pipeline from pinned memory, GpuNetwork). False for a launcher whose work points into
  // memory it may move on a later call (a buffer it grows), or whose code is not the project's (the student's).
  // Allocating or synchronising inside the launch needs no flag: stream capture refuses both, and the network
  // then runs the pass without a graph.
  bool graph_capturable = true;
  GpuRoles roles;
  const char* source = "";  // filled by the registrar: the file that registered it

  double rtol_or_default() const { return rtol > 0 ? rtol : kDefaultRtol; }
  std::string incomplete() const;  // "" when the descriptor is complete (checked at registration)
};

VariantRegistry<GpuConvVariant>& gpu_conv_registry();
inline const std::vector<GpuConvVariant>& gpu_conv_variants() { return gpu_conv_registry().all(); }
inline const GpuConvVariant& find_gpu_conv_variant(const std::string& name) {  // throws std::invalid_argument
  return gpu_conv_registry().find(name);
}
std::string why_unsupported(const GpuConvVariant& v, const ConvShape& s);  // "" when supported

// Why most ladder steps are not chosen by milestones 3 and 4 (on_request(kNotM3), on_request(kNotM4)).
inline constexpr const char* kNotM3 =
    "milestone 3 runs the course's baseline kernel: other variants run only when named with --impl";
inline constexpr const char* kNotM4 =
    "not one of milestone 4's three optimisations: runs only when named with --impl";

struct GpuConvRegistrar {
  GpuConvRegistrar(const GpuConvVariant& v, const char* file) noexcept { gpu_conv_registry().add(v, file); }
};

}  // namespace pyconv

// At the end of a variant's file, inside namespace pyconv: PYCONV_REGISTER_GPU_CONV(GpuConvVariant{...});
#define PYCONV_REGISTER_GPU_CONV(...)                                                                  \
  static const ::pyconv::GpuConvRegistrar PYCONV_CONCAT(pyconv_gpu_conv_registrar_, __COUNTER__)( \
      __VA_ARGS__, __FILE__)
