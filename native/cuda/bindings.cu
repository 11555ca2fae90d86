// pyconv._gpu: thin bindings over the GPU registry and the network engine. Importing works on a machine with
// no GPU or no driver; the first call that needs a GPU raises pyconv._gpu.CudaError naming why.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <vector>

#include "common/pyarray.hpp"
#include "cuda/conv_registry.cuh"
#include "cuda/cuda_check.cuh"
#include "cuda/device_buffer.cuh"

namespace py = pybind11;
using namespace pyconv;

namespace {

void require_gpu() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so a later call reports afresh
    throw CudaError(std::string("no usable CUDA GPU: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
  }
  if (n == 0) throw CudaError("no usable CUDA GPU: the driver reports 0 devices");
}

const char* epilogue_name(Epilogue e) { return e == Epilogue::TanhMaxPool2 ? "tanh-maxpool2" : "none"; }

std::vector<int64_t> out_shape(const GpuConvVariant& v, const ConvShape& s) {
  if (v.epilogue == Epilogue::TanhMaxPool2) return {s.B, s.M, s.Ho() / 2, s.Wo() / 2};
  return {s.B, s.M, s.Ho(), s.Wo()};
}

}  // namespace

PYBIND11_MODULE(_gpu, m) {
  m.doc() = "pyconv CUDA convolutions (milestone 3, 4, final) and the whole network on the GPU";
  py::register_exception<CudaError>(m, "CudaError", PyExc_RuntimeError);

  m.def(
      "available",
      [] {
        int n = 0;
        const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
        cudaGetLastError();
        return ok;
      },
      "True when a CUDA GPU is usable from this process.");

  m.def(
      "device_info",
      [] {
        require_gpu();
        int dev = 0, drv = 0, rt = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        cudaDeviceProp p{};
        CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
        CUDA_CHECK(cudaDriverGetVersion(&drv));
        CUDA_CHECK(cudaRuntimeGetVersion(&rt));
        py::dict d;
        d["name"] = std::string(p.name);
        d["compute_capability"] = std::to_string(p.major) + "." + std::to_string(p.minor);
        d["multiprocessors"] = p.multiProcessorCount;
        d["global_memory_bytes"] = p.totalGlobalMem;
        d["l2_bytes"] = p.l2CacheSize;
        d["shared_memory_per_block_optin"] = p.sharedMemPerBlockOptin;
        d["cuda_driver_version"] = drv;
        d["cuda_runtime_version"] = rt;
        return d;
      },
      "Name, compute capability and sizes of the current GPU, plus driver and runtime versions.");

  m.def(
      "variants",
      [] {
        py::list out;
        for (const auto& v : gpu_conv_variants()) {
          py::dict d;
          d["name"] = v.name;
          d["step"] = v.step;
          d["summary"] = v.summary;
          d["epilogue"] = epilogue_name(v.epilogue);
          d["x_on_host"] = v.x_on_host;
          out.append(d);
        }
        return out;
      },
      "The registry, in ladder order: {name, step, summary, epilogue, x_on_host} per variant.");

  m.def(
      "why_unsupported",
      [](const std::string& name, int64_t B, int64_t C, int64_t H, int64_t W, int64_t M, int64_t K) {
        const ConvShape s = make_conv_shape(B, C, H, W, M, C, K, K);
        return why_unsupported(find_gpu_conv_variant(name), s);
      },
      py::arg("name"), py::arg("B"), py::arg("C"), py::arg("H"), py::arg("W"), py::arg("M"), py::arg("K"),
      "'' when the variant supports the shape, else the reason.");

  m.def(
      "conv",
      [](const std::string& name, const py::array& x, const py::array& k) {
        const GpuConvVariant& v = find_gpu_conv_variant(name);
        const ConvShape s = conv_shape_of(x, k);
        const std::string why = why_unsupported(v, s);
        if (!why.empty()) throw std::invalid_argument(why);
        require_gpu();
        const std::vector<int64_t> shape = out_shape(v, s);
        py::array_t<float> y(shape);
        const size_t ny = size_t(y.size());
        {
          py::gil_scoped_release release;
          DeviceBuffer<float> dk(size_t(s.k_size())), dy(ny);
          dk.upload(static_cast<const float*>(k.data()), size_t(s.k_size()));
          // Poison the output (all-ones bytes = NaN) so an element the kernel forgets shows up in every test.
          CUDA_CHECK(cudaMemset(dy.get(), 0xFF, ny * sizeof(float)));
          if (v.x_on_host) {
            PinnedBuffer<float> hx(size_t(s.x_size()));
            std::memcpy(hx.get(), x.data(), size_t(s.x_size()) * sizeof(float));
            v.launch(hx.get(), dk.get(), dy.get(), s, nullptr);
            CUDA_CHECK(cudaDeviceSynchronize());
          } else {
            DeviceBuffer<float> dx(size_t(s.x_size()));
            dx.upload(static_cast<const float*>(x.data()), size_t(s.x_size()));
            v.launch(dx.get(), dk.get(), dy.get(), s, nullptr);
            CUDA_CHECK(cudaDeviceSynchronize());
          }
          dy.download(y.mutable_data(), ny);
          CUDA_CHECK(cudaDeviceSynchronize());
        }
        return y;
      },
      py::arg("name"), py::arg("x"), py::arg("k"),
      "y = conv(name, x, k) on the GPU, host arrays in and out (float32, C-contiguous). For a variant with a\n"
      "tanh-maxpool2 epilogue, y is the pooled activation. Raises ValueError on bad arrays or an unsupported\n"
      "shape, CudaError when CUDA fails.");
}
