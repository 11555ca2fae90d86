#include <cstring>
#include <memory>
#include <stdexcept>

#include "cuda/runtime/autotune.cuh"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/device_buffer.cuh"
#include "cuda/runtime/harness.cuh"
#include "cuda/runtime/layers.cuh"

namespace pyconv {
namespace {

int64_t product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t d : v) n *= d;
  return n;
}

// Times `reps` runs of `launch(stream)` after `warmup` untimed ones, CUDA events around each; milliseconds.
template <typename F>
std::vector<float> time_launches(F&& launch, int warmup, int reps) {
  if (warmup < 0 || reps < 1) throw std::invalid_argument("timing: need warmup >= 0 and reps >= 1");
  Stream stream;
  Event start, stop;
  std::vector<float> ms;
  for (int i = 0; i < warmup + reps; ++i) {
    start.record(stream.get());
    launch(stream.get());
    stop.record(stream.get());
    const float t = stop.since(start);
    if (i >= warmup) ms.push_back(t);
  }
  return ms;
}

// The inputs of a timed convolution, uploaded once (x in pinned host memory for an x_on_host variant; x8: uint8
// images, run through the variant's launch_u8).
struct ConvInputs {
  DeviceBuffer<float> dx, dk, dy, tmp;
  DeviceBuffer<uint8_t> dx8;
  PinnedBuffer<float> hx;
  const float* x = nullptr;
  const uint8_t* x8 = nullptr;
  ConvInputs(const GpuConvVariant& v, const ConvShape& s, const uint8_t* x_host, const float* k_host, size_t ny) {
    dk.upload(k_host, size_t(s.k_size()));
    dy.resize(ny);
    dx8.upload(x_host, size_t(s.x_size()));
    x8 = dx8.get();
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  ConvInputs(const GpuConvVariant& v, const ConvShape& s, const float* x_host, const float* k_host, size_t ny) {
    dk.upload(k_host, size_t(s.k_size()));
    dy.resize(ny);
    if (v.x_on_host) {
      hx.resize(size_t(s.x_size()));
      std::memcpy(hx.get(), x_host, size_t(s.x_size()) * sizeof(float));
      x = hx.get();
    } else {
      dx.upload(x_host, size_t(s.x_size()));
      x = dx.get();
    }
    CUDA_CHECK(cudaDeviceSynchronize());  // the uploads ran on the legacy stream; timing runs on another
  }
};

}  // namespace

std::vector<int64_t> conv_out_shape(const GpuConvVariant& v, const ConvShape& s) {
  if (v.epilogue == Epilogue::TanhMaxPool2) return {s.B, s.M, s.Ho() / 2, s.Wo() / 2};
  return {s.B, s.M, s.Ho(), s.Wo()};
}

const GpuConvVariant& checked_gpu_variant(const std::string& name, const ConvShape& s) {
  const GpuConvVariant& v = find_gpu_conv_variant(name);
  const std::string why = why_unsupported(v, s);
  if (!why.empty()) throw std::invalid_argument(why);
  return v;
}

static const GpuConvVariant& require_u8(const GpuConvVariant& v) {
  if (!v.launch_u8) throw std::invalid_argument(std::string(v.name) + " has no uint8 input path (launch_u8)");
  return v;
}

namespace {

// run_conv and run_conv_u8: the inputs staged as the timed paths stage them (ConvInputs), y poisoned, one launch.
template <typename X>
void run_once(const GpuConvVariant& v, const ConvShape& s, const X* x, const float* k, float* y) {
  const size_t ny = size_t(product(conv_out_shape(v, s)));
  ConvInputs in(v, s, x, k, ny);
  // Poison the output (all-ones bytes = NaN) so an element the kernel forgets shows up in every test.
  CUDA_CHECK(cudaMemset(in.dy.get(), 0xFF, ny * sizeof(float)));
  launch_unit(v, s, in.x, in.dk.get(), in.dy.get(), nullptr, false, nullptr, in.x8);
  CUDA_CHECK(cudaDeviceSynchronize());
  in.dy.download(y, ny);
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace

void run_conv(const GpuConvVariant& v, const ConvShape& s, const float* x, const float* k, float* y) {
  run_once(v, s, x, k, y);
}

void run_conv_u8(const GpuConvVariant& v, const ConvShape& s, const uint8_t* x, const float* k, float* y) {
  run_once(require_u8(v), s, x, k, y);
}

void launch_unit(const GpuConvVariant& v, const ConvShape& s, const float* x, const float* k, float* y, float* tmp,
                 bool tanh_pool, cudaStream_t st, const uint8_t* x8) {
  if (x8)
    require_u8(v).launch_u8(x8, k, y, s, st);
  else
    v.launch(x, k, y, s, st);
  if (tanh_pool && v.epilogue != Epilogue::TanhMaxPool2) {
    pool2d(y, tmp, s.B * s.M, int(s.Ho()), int(s.Wo()), 2, 2, true, st, Activation::Tanh);  // tanh after the max
  }
}

namespace {

// One timed unit of work: the variant's launch, followed by the shared max-pool + tanh kernel when tanh_pool is
// asked of a variant whose epilogue does not pool.
void launch_staged(const GpuConvVariant& v, const ConvShape& s, const ConvInputs& in, bool tanh_pool,
                   cudaStream_t st) {
  launch_unit(v, s, in.x, in.dk.get(), in.dy.get(), in.tmp.get(), tanh_pool, st, in.x8);
}

template <typename Inputs = ConvInputs, typename X = float>
std::unique_ptr<Inputs> stage_inputs(const GpuConvVariant& v, const ConvShape& s, const X* x, const float* k,
                                     bool tanh_pool) {
  const bool fused = v.epilogue == Epilogue::TanhMaxPool2;
  auto in = std::make_unique<Inputs>(v, s, x, k,
                                     size_t(!tanh_pool || fused ? product(conv_out_shape(v, s)) : s.y_size()));
  if (tanh_pool && !fused) in->tmp.resize(size_t(s.B * s.M * (s.Ho() / 2) * (s.Wo() / 2)));
  return in;
}

}  // namespace

std::vector<float> time_conv(const GpuConvVariant& v, const ConvShape& s, const float* x, const float* k, int warmup,
                             int reps, bool tanh_pool) {
  const auto in = stage_inputs(v, s, x, k, tanh_pool);
  return time_launches([&](cudaStream_t st) { launch_staged(v, s, *in, tanh_pool, st); }, warmup, reps);
}

struct StagedConv::Inputs : ConvInputs {
  using ConvInputs::ConvInputs;
};

StagedConv::StagedConv(const GpuConvVariant& v, const ConvShape& s, const float* x, const float* k, bool tanh_pool)
    : v_(v), s_(s), tanh_pool_(tanh_pool), in_(stage_inputs<Inputs>(v, s, x, k, tanh_pool)) {
  // One untimed run, waited for: buffers a variant grows on its first call (a cudaFree waits for the whole
  // device) are allocated now, never inside a launch the harness times behind its blocking kernel.
  launch(nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
}

StagedConv::StagedConv(const GpuConvVariant& v, const ConvShape& s, const uint8_t* x, const float* k,
                       bool tanh_pool)
    : v_(require_u8(v)), s_(s), tanh_pool_(tanh_pool), in_(stage_inputs<Inputs>(v, s, x, k, tanh_pool)) {
  launch(nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
}

StagedConv::~StagedConv() = default;

void StagedConv::launch(cudaStream_t st) const {
  launch_staged(v_, s_, *in_, tanh_pool_, st);
  CUDA_CHECK(cudaGetLastError());
}

double time_autotune_config(int config, const ConvShape& s, const float* x, const float* k, int reps) {
  DeviceBuffer<float> dx(size_t(s.x_size())), dk(size_t(s.k_size())), dy(size_t(s.y_size()));
  dx.upload(x, size_t(s.x_size()));
  dk.upload(k, size_t(s.k_size()));
  CUDA_CHECK(cudaDeviceSynchronize());
  return autotune_time_config(config, dx.get(), dk.get(), dy.get(), s, reps);
}

}  // namespace pyconv
