#include <stdexcept>

#include "cuda/runtime/device_buffer.cuh"
#include "cuda/runtime/layers.cuh"
#include "cuda/runtime/probes.cuh"

namespace pyconv {
namespace {

constexpr int FMA_CHAINS = 8;    // independent accumulators per thread: hides the FMA latency
constexpr int FMA_ITERS = 65536;  // FMAs per chain per launch: milliseconds at full rate, launch cost negligible

__global__ void copy16_kernel(const float4* __restrict__ src, float4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

__global__ void fma_kernel(float* out, float a, float b) {
  float acc[FMA_CHAINS];
#pragma unroll
  for (int j = 0; j < FMA_CHAINS; ++j) acc[j] = float(threadIdx.x + j);
  for (int i = 0; i < FMA_ITERS; ++i) {
#pragma unroll
    for (int j = 0; j < FMA_CHAINS; ++j) acc[j] = fmaf(acc[j], a, b);
  }
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < FMA_CHAINS; ++j) s += acc[j];
  out[blockIdx.x * size_t(blockDim.x) + threadIdx.x] = s;  // keeps the chains alive
}

__global__ void fill_kernel(float* p, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u;
    h ^= h >> 15;
    p[i] = float(h & 0xFFFF) / 65536.0f - 0.5f;
  }
}

int current_sms() {
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

}  // namespace

std::vector<double> measure_copy_bandwidth(size_t nbytes, int reps) {
  if (nbytes < 16 || reps < 1) throw std::invalid_argument("measure_copy_bandwidth: need nbytes >= 16, reps >= 1");
  const size_t n = nbytes / 16;
  DeviceBuffer<float4> src(n), dst(n);
  CUDA_CHECK(cudaMemset(src.get(), 0, n * 16));
  const int blocks = current_sms() * 8;
  Event start, stop;
  std::vector<double> out;
  for (int i = 0; i <= reps; ++i) {  // the first launch is a warm-up
    start.record();
    copy16_kernel<<<blocks, 256>>>(src.get(), dst.get(), n);
    CUDA_CHECK_LAUNCH();
    stop.record();
    const double ms = stop.since(start);
    if (i) out.push_back(2.0 * double(n) * 16 / (ms * 1e-3) / 1e9);
  }
  return out;
}

std::vector<double> measure_fma_rate(int reps) {
  if (reps < 1) throw std::invalid_argument("measure_fma_rate: need reps >= 1");
  const int threads = 256, blocks = current_sms() * 8;  // 2048 threads per SM: full occupancy on sm_80/sm_90
  DeviceBuffer<float> out(size_t(blocks) * threads);
  Event start, stop;
  std::vector<double> rates;
  for (int i = 0; i <= reps; ++i) {
    start.record();
    fma_kernel<<<blocks, threads>>>(out.get(), 0.999f, 0.001f);
    CUDA_CHECK_LAUNCH();
    stop.record();
    const double ms = stop.since(start);
    const double flops = 2.0 * double(blocks) * threads * FMA_CHAINS * FMA_ITERS;
    if (i) rates.push_back(flops / (ms * 1e-3) / 1e9);
  }
  return rates;
}

std::vector<double> measure_sgemm_rate(int n, int reps) {
  if (n < 1 || reps < 1) throw std::invalid_argument("measure_sgemm_rate: need n >= 1, reps >= 1");
  const size_t nn = size_t(n) * n;
  DeviceBuffer<float> a(nn), b(nn), c(nn);
  fill_kernel<<<1024, 256>>>(a.get(), nn);
  CUDA_CHECK_LAUNCH();
  fill_kernel<<<1024, 256>>>(b.get(), nn);
  CUDA_CHECK_LAUNCH();
  CublasHandle h;  // CUBLAS_DEFAULT_MATH: FP32, no TF32
  const float one = 1.0f, zero = 0.0f;
  Event start, stop;
  std::vector<double> rates;
  for (int i = 0; i <= reps; ++i) {
    start.record();
    CUBLAS_CHECK(cublasSgemm(h.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.get(), n, b.get(), n, &zero, c.get(), n));
    stop.record();
    const double ms = stop.since(start);
    if (i) rates.push_back(2.0 * double(n) * n * n / (ms * 1e-3) / 1e9);
  }
  return rates;
}

}  // namespace pyconv
