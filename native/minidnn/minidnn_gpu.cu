// gpu-student for the Mini-DNN editions (2020 onward): the student's GPUInterface (new-forward.cu or the file the
// edition used, compiled unchanged as a source of its own) called as the course's framework called it. The
// framework held the layer in host memory: the student allocates, copies, launches and frees. Timed as the course
// timed it: Op Time is conv_forward_gpu alone, Layer Time is prolog + conv_forward_gpu + epilog, each call
// followed by cudaDeviceSynchronize. The 2020fa interface has one host call: its Op Time is that call.
// Built instead of native/student/student_gpu.cu when the build names a Mini-DNN edition.
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/runtime/registry.cuh"
#include "minidnn/minidnn_glue.hpp"

#include "gpu-new-forward.h"
#include "minidnn-generation.h"

namespace pyconv {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// The glue's own copies (cuda_check.cuh would bring cuBLAS's header into a target that needs none).
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("gpu-student: ") + what + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
}

// Everything the student queued has finished; a failure is theirs (an unchecked launch, a fault in their kernel).
void sync_student(const char* after) {
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string("gpu-student: CUDA reported ") + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ") after the student's " + after + " returned");
  }
}

// Host arrays in and out, as the framework gave them (pageable memory, y zeroed: see minidnn_cpu.cpp).
void call_student(float* y, const float* x, const float* k, int B, int M, int C, int H, int W, int K, int S) {
#if !PYCONV_MINIDNN_STRIDE
  if (S != 1)
    throw std::invalid_argument(std::string("the ") + PYCONV_MINIDNN_GENERATION + " interface has no stride (S=" +
                                std::to_string(S) + " asked)");
#endif
  const std::string why = minidnn::why_unsupported(B, M, C, H, W, K, S);
  if (!why.empty()) throw std::invalid_argument("gpu-student: " + why);
  const size_t ny = size_t(B) * M * minidnn::out_size(H, K, S) * minidnn::out_size(W, K, S);
  std::memset(y, 0, ny * sizeof(float));
  sync_student("previous work");  // nothing of ours may still run when the student's timed calls start
  GPUInterface gpu;
  double op_ms = 0, layer_ms = 0;
#if PYCONV_MINIDNN_PROLOG_EPILOG
  float *device_y = nullptr, *device_x = nullptr, *device_k = nullptr;
#if PYCONV_MINIDNN_STRIDE
#define PYCONV_MINIDNN_DIMS B, M, C, H, W, K, S
#else
#define PYCONV_MINIDNN_DIMS B, M, C, H, W, K
#endif
  const auto t0 = Clock::now();
  gpu.conv_forward_gpu_prolog(y, x, k, &device_y, &device_x, &device_k, PYCONV_MINIDNN_DIMS);
  sync_student("conv_forward_gpu_prolog");
  const auto t1 = Clock::now();
  gpu.conv_forward_gpu(device_y, device_x, device_k, PYCONV_MINIDNN_DIMS);
  sync_student("conv_forward_gpu");
  op_ms = ms_since(t1);
  gpu.conv_forward_gpu_epilog(y, device_y, device_x, device_k, PYCONV_MINIDNN_DIMS);
  sync_student("conv_forward_gpu_epilog");
  layer_ms = ms_since(t0);
#undef PYCONV_MINIDNN_DIMS
#else
  const auto t0 = Clock::now();
  gpu.conv_forward_gpu(y, x, k, B, M, C, H, W, K);
  sync_student("conv_forward_gpu");
  op_ms = layer_ms = ms_since(t0);
#endif
  minidnn::slot().times.op_ms.push_back(op_ms);
  minidnn::slot().times.layer_ms.push_back(layer_ms);
  minidnn::check_written("gpu-student", "GPUInterface", "new-forward.cu", y, ny, x, size_t(B) * C * H * W, k,
                         size_t(M) * C * K * K);
}

// The registry's layer: device arrays on `st`, staged through host memory for the student and back.
void launch(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  std::vector<float> hx(size_t(s.x_size())), hk(size_t(s.k_size())), hy(size_t(s.y_size()));
  check(cudaMemcpyAsync(hx.data(), x, hx.size() * sizeof(float), cudaMemcpyDeviceToHost, st), "copying x");
  check(cudaMemcpyAsync(hk.data(), k, hk.size() * sizeof(float), cudaMemcpyDeviceToHost, st), "copying k");
  check(cudaStreamSynchronize(st), "copying x and k");
  call_student(hy.data(), hx.data(), hk.data(), int(s.B), int(s.M), int(s.C), int(s.H), int(s.W), int(s.K), 1);
  check(cudaMemcpyAsync(y, hy.data(), hy.size() * sizeof(float), cudaMemcpyHostToDevice, st), "copying y");
  check(cudaStreamSynchronize(st), "copying y");  // hy is freed on return
}

const bool slot_set = [] {
  minidnn::slot().generation = PYCONV_MINIDNN_GENERATION;
  minidnn::slot().conv = call_student;
  return true;
}();

}  // namespace

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-student",
    .step = 100,  // after every ladder step
    .summary = "your GPUInterface (Mini-DNN " PYCONV_MINIDNN_GENERATION " interface), compiled unchanged",
    // The course allowed half precision and top teams used it (cuda_fp16.h): hold a student's kernel to what fp16
    // products and sums reach. A wrong index is still caught: it is off by the size of the value itself.
    .rtol = 1e-2,
    .launch = launch,
    .supports = minidnn::why_unsupported,
    .graph_capturable = false,  // host round trips and the student's own allocations
    .roles = {.m3 = on_request("the student's file: runs only when named with --impl gpu-student"),
              .m4 = on_request("the student's file: runs only when named with --impl gpu-student"),
              .final = on_request("the student's file: runs only when named with --impl gpu-student")},
});

}  // namespace pyconv
