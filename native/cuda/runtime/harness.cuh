// Running and timing one registry variant from host arrays: what pyconv._gpu.conv, time_conv,
// time_conv_tanh_pool and autotune_time_config do between their argument conversions. Every function needs a
// GPU (require_gpu() is the caller's first step) and may be called without the GIL.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/conv_shape.hpp"
#include "cuda/runtime/registry.cuh"

namespace pyconv {

// y's shape for this variant: [B][M][Ho][Wo], or [B][M][Ho/2][Wo/2] when its epilogue pools.
std::vector<int64_t> conv_out_shape(const GpuConvVariant& v, const ConvShape& s);

// The variant `name`, or std::invalid_argument: unknown name, or the variant's reason for refusing s.
const GpuConvVariant& checked_gpu_variant(const std::string& name, const ConvShape& s);

// y = the variant on host arrays x, k (y has conv_out_shape elements). The device output is poisoned with NaN
// first, so an element the kernel forgets shows up in every test.
void run_conv(const GpuConvVariant& v, const ConvShape& s, const float* x, const float* k, float* y);

// run_conv through the variant's uint8 input path (launch_u8; std::invalid_argument when it has none).
void run_conv_u8(const GpuConvVariant& v, const ConvShape& s, const uint8_t* x, const float* k, float* y);

// Milliseconds of each of `reps` launches after `warmup` untimed ones, CUDA events around each launch. Inputs are
// uploaded once (an x_on_host variant reads pinned host memory). tanh_pool: conv + tanh + max-pool 2/2 -- the
// variant's own launch when its epilogue pools, else followed by the shared max-pool + tanh kernel.
std::vector<float> time_conv(const GpuConvVariant& v, const ConvShape& s, const float* x, const float* k, int warmup,
                             int reps, bool tanh_pool);

// One unit of work on buffers the caller owns (device pointers; x on the host for an x_on_host variant): the
// variant's launch, then the shared max-pool + tanh kernel (pool2d, tanh on each window's max) when tanh_pool is
// asked of a variant that does not pool (y then holds the conv output, tmp the pooled one). Queued on `st`, nothing
// synchronised. x8 (not null): uint8 images, run through the variant's launch_u8 instead of x.
void launch_unit(const GpuConvVariant& v, const ConvShape& s, const float* x, const float* k, float* y, float* tmp,
                 bool tanh_pool, cudaStream_t st, const uint8_t* x8 = nullptr);

// A variant with its inputs uploaded once (as time_conv stages them), launched on any stream the caller gives: what
// an external benchmark harness (NVBench, pyconv.bench.nvbench) times, with its own stream, L2 flushes and stopping
// rule. The constructor runs the work once and waits for it.
class StagedConv {
 public:
  StagedConv(const GpuConvVariant& v, const ConvShape& s, const float* x, const float* k, bool tanh_pool);
  // x: uint8 images, run through the variant's launch_u8 (std::invalid_argument when it has none).
  StagedConv(const GpuConvVariant& v, const ConvShape& s, const uint8_t* x, const float* k, bool tanh_pool);
  ~StagedConv();
  StagedConv(const StagedConv&) = delete;
  StagedConv& operator=(const StagedConv&) = delete;
  // Queues the work on `st` (nothing is synchronised).
  void launch(cudaStream_t st) const;

 private:
  struct Inputs;
  const GpuConvVariant& v_;
  ConvShape s_;
  bool tanh_pool_;
  std::unique_ptr<Inputs> in_;
};

// Median milliseconds of one configuration of step 11's kernel family on host arrays x, k (uploaded once).
double time_autotune_config(int config, const ConvShape& s, const float* x, const float* k, int reps);

}  // namespace pyconv
