// pyconv._gpu: thin bindings over the GPU registry and the network engine. Importing works on a machine with
// no GPU or no driver; the first call that needs a GPU raises pyconv._gpu.CudaError naming why.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/pyarray.hpp"
#include "common/variant_dict.hpp"
#include "cuda/runtime/autotune.cuh"
#include "cuda/runtime/registry.cuh"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/harness.cuh"
#include "cuda/runtime/layers.cuh"
#include "cuda/runtime/network.cuh"
#include "cuda/runtime/network_args.cuh"
#include "cuda/runtime/probes.cuh"
#include "minidnn/bindings.hpp"

namespace py = pybind11;
using namespace pyconv;

namespace {

struct PyNetwork {
  std::unique_ptr<GpuNetwork> net;
  std::vector<int64_t> input_shape;
};

}  // namespace

PYBIND11_MODULE(_gpu, m) {
  m.doc() = "pyconv CUDA convolutions (milestone 3, 4, final) and the whole network on the GPU";
  gpu_conv_registry().check();  // a malformed variant file: ImportError naming it
  minidnn::bind(m);  // the Mini-DNN student slot: student_conv, student_times, ...
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

  m.def("chunk_starts", &GpuNetwork::chunk_starts, py::arg("rows"), py::arg("chunks"), py::arg("taper") = 1.0,
        "Where each part of a chunked pass starts (GpuNetwork.forward's split): min(chunks, rows) + 1 offsets from 0\n"
        "to rows, each part `taper` times the one before, every part at least one image. ValueError unless\n"
        "rows, chunks >= 1 and 0 < taper <= 4. Needs no GPU.");

  m.def(
      "device_count",
      [] {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
        cudaGetLastError();
        return n;
      },
      "Number of usable CUDA GPUs (0 without a GPU or a driver).");

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
          py::dict d = variant_dict(v.name, v.step, v.summary, v.epilogue, v.precision, v.rtol, v.x_on_host,
                                    v.launch_u8 != nullptr, "gpu",
                                    {{"m3", v.roles.m3}, {"m4", v.roles.m4}, {"final", v.roles.final}});
          d["tunable"] = v.tunable != nullptr;  // its configurations are autotune_configs()
          // can write its output in half (FcMath::FP16's input) on the path a network runs it: from float32 (any
          // layer) or from the uint8 images (a first layer with launch_u8)
          d["writes_f16"] = v.launch_f16_out != nullptr || (v.launch_u8 && v.launch_u8_f16_out);
          out.append(d);
        }
        return out;
      },
      "The registry in ladder order: one dict per GPU variant with name, step, summary, epilogue, precision,\n"
      "rtol (the relative error its tests allow), x_on_host, reads_u8, tunable, writes_f16, device ('gpu') and\n"
      "roles {m2, m3, m4, final: {role, reason}}. Needs no GPU.");

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
        py::array_t<float> y(conv_out_shape(v, s));
        const float* xp = static_cast<const float*>(x.data());
        const float* kp = static_cast<const float*>(k.data());
        float* yp = y.mutable_data();
        {
          py::gil_scoped_release release;
          run_conv(v, s, xp, kp, yp);
        }
        return y;
      },
      py::arg("name"), py::arg("x"), py::arg("k"),
      "y = conv(name, x, k) on the GPU, host arrays in and out (float32, C-contiguous). For a variant with a\n"
      "tanh-maxpool2 epilogue, y is the pooled activation. Raises ValueError on bad arrays or an unsupported\n"
      "shape, CudaError when CUDA fails.");

  m.def(
      "conv_u8",
      [](const std::string& name, const py::array& x, const py::array& k) {
        const ConvShape s = conv_shape_of_u8(x, k);
        const GpuConvVariant& v = checked_gpu_variant(name, s);
        if (!v.launch_u8) throw std::invalid_argument(name + " has no uint8 input path (launch_u8)");
        require_gpu();
        py::array_t<float> y(conv_out_shape(v, s));
        const uint8_t* xp = static_cast<const uint8_t*>(x.data());
        const float* kp = static_cast<const float*>(k.data());
        float* yp = y.mutable_data();
        {
          py::gil_scoped_release release;
          run_conv_u8(v, s, xp, kp, yp);
        }
        return y;
      },
      py::arg("name"), py::arg("x"), py::arg("k"),
      "conv for uint8 images x (a network's raw pixels) through the variant's launch_u8 path (reads_u8 in\n"
      "variants()); k float32. ValueError for a variant without one.");

  m.def(
      "time_conv",
      [](const std::string& name, const py::array& x, const py::array& k, int warmup, int reps) {
        const ConvShape s = conv_shape_of(x, k);
        const GpuConvVariant& v = checked_gpu_variant(name, s);
        require_gpu();
        py::gil_scoped_release release;
        return time_conv(v, s, static_cast<const float*>(x.data()), static_cast<const float*>(k.data()), warmup, reps,
                         false);
      },
      py::arg("name"), py::arg("x"), py::arg("k"), py::arg("warmup") = 5, py::arg("reps") = 20,
      "Milliseconds of each of `reps` launches of the variant (after `warmup` untimed ones), by CUDA events around\n"
      "each launch. Inputs are uploaded once; an x_on_host variant is timed from pinned host memory.");

  m.def(
      "time_conv_tanh_pool",
      [](const std::string& name, const py::array& x, const py::array& k, int warmup, int reps) {
        const ConvShape s = conv_shape_of(x, k);
        const GpuConvVariant& v = checked_gpu_variant(name, s);
        if (s.Ho() < 2 || s.Wo() < 2) throw std::invalid_argument("time_conv_tanh_pool: the conv output must be >= 2x2");
        require_gpu();
        py::gil_scoped_release release;
        return time_conv(v, s, static_cast<const float*>(x.data()), static_cast<const float*>(k.data()), warmup, reps,
                         true);
      },
      py::arg("name"), py::arg("x"), py::arg("k"), py::arg("warmup") = 5, py::arg("reps") = 20,
      "Like time_conv, for conv + tanh + max-pool 2/2: a variant with the tanh-maxpool2 epilogue is its one\n"
      "launch; any other is timed with the shared max-pool + tanh kernel after it.");

  py::class_<StagedConv>(m, "StagedConv",
                         "A variant with its inputs uploaded once, launched on a stream the caller owns: what\n"
                         "an external harness (NVBench) times. Construction runs the work once and waits.")
      .def(py::init([](const std::string& name, const py::array& x, const py::array& k, bool tanh_pool) {
             const bool u8 = py::dtype::of<uint8_t>().is(x.dtype());
             const ConvShape s = u8 ? conv_shape_of_u8(x, k) : conv_shape_of(x, k);
             const GpuConvVariant& v = checked_gpu_variant(name, s);
             if (tanh_pool && (s.Ho() < 2 || s.Wo() < 2))
               throw std::invalid_argument("StagedConv: conv + tanh + pool needs a conv output >= 2x2");
             if (u8 && !v.launch_u8) throw std::invalid_argument(name + " has no uint8 input path (launch_u8)");
             require_gpu();
             const float* kp = static_cast<const float*>(k.data());
             py::gil_scoped_release release;
             if (u8) return std::make_unique<StagedConv>(v, s, static_cast<const uint8_t*>(x.data()), kp, tanh_pool);
             return std::make_unique<StagedConv>(v, s, static_cast<const float*>(x.data()), kp, tanh_pool);
           }),
           py::arg("name"), py::arg("x"), py::arg("k"), py::arg("tanh_pool") = false,
           "x, k: host arrays (C-contiguous; k float32, x float32, or uint8 images for a variant that reads them:\n"
           "its launch_u8 path), uploaded once; tanh_pool: conv + tanh + max-pool 2/2 as time_conv_tanh_pool runs\n"
           "it. ValueError on bad arrays or an unsupported shape.")
      .def(
          "launch",
          [](const StagedConv& self, uintptr_t stream) {
            py::gil_scoped_release release;
            self.launch(reinterpret_cast<cudaStream_t>(stream));
          },
          py::arg("stream"),
          "Queue the work on the raw cudaStream_t `stream` (an integer address; 0 is the legacy stream).");

  m.def(
      "launch_on_device",
      [](const std::string& name, uintptr_t x, uintptr_t k, uintptr_t y, uintptr_t tmp,
         const std::vector<int64_t>& shape, bool tanh_pool, uintptr_t stream) {
        if (shape.size() != 6) throw std::invalid_argument("launch_on_device: shape is (B, C, H, W, M, K)");
        const ConvShape s = make_conv_shape(shape[0], shape[1], shape[2], shape[3], shape[4], shape[1], shape[5],
                                            shape[5]);
        const GpuConvVariant& v = checked_gpu_variant(name, s);
        if (v.x_on_host) throw std::invalid_argument(name + " reads x from host memory, not from a device buffer");
        if (!x || !k || !y || (tanh_pool && v.epilogue != Epilogue::TanhMaxPool2 && !tmp))
          throw std::invalid_argument("launch_on_device: a null buffer");
        if (tanh_pool && (s.Ho() < 2 || s.Wo() < 2))
          throw std::invalid_argument("launch_on_device: conv + tanh + pool needs a conv output >= 2x2");
        require_gpu();
        py::gil_scoped_release release;
        launch_unit(v, s, reinterpret_cast<const float*>(x), reinterpret_cast<const float*>(k),
                    reinterpret_cast<float*>(y), reinterpret_cast<float*>(tmp), tanh_pool,
                    reinterpret_cast<cudaStream_t>(stream));
        CUDA_CHECK(cudaGetLastError());
      },
      py::arg("name"), py::arg("x"), py::arg("k"), py::arg("y"), py::arg("tmp"), py::arg("shape"),
      py::arg("tanh_pool") = false, py::arg("stream") = 0,
      "Queue one unit of work of variant `name` on device buffers the caller owns (integer addresses, e.g. torch's\n"
      "data_ptr()): x (B, C, H, W), k (M, C, K, K), y (the variant's output; with tanh_pool and a variant that\n"
      "does not pool, the conv output, and tmp the pooled result), on the raw stream `stream`. Nothing is\n"
      "synchronised. ValueError on an unsupported shape or a variant that reads x from the host.");
  m.def(
      "measure_copy_bandwidth",
      [](size_t nbytes, int reps) {
        require_gpu();
        py::gil_scoped_release release;
        return measure_copy_bandwidth(nbytes, reps);
      },
      py::arg("nbytes") = size_t(1) << 30, py::arg("reps") = 20,
      "GB/s of a device-to-device copy of nbytes (16-byte loads/stores), counting bytes read + written, per rep.");
  m.def(
      "measure_fma_rate",
      [](int reps) {
        require_gpu();
        py::gil_scoped_release release;
        return measure_fma_rate(reps);
      },
      py::arg("reps") = 20, "GFLOP/s of an FFMA-bound kernel filling the GPU (2 flops per FMA), per rep.");
  m.def(
      "measure_sgemm_rate",
      [](int n, int reps) {
        require_gpu();
        py::gil_scoped_release release;
        return measure_sgemm_rate(n, reps);
      },
      py::arg("n") = 8192, py::arg("reps") = 10, "GFLOP/s of cuBLAS FP32 SGEMM (no TF32) on n x n matrices, per rep.");

  m.def(
      "autotune_configs", [] { return autotune_configs(); },
      "Names of gpu-autotuned's configurations; a configuration's number is its index.");
  m.def(
      "autotune_time_config",
      [](int config, const py::array& x, const py::array& k, int reps) {
        const ConvShape s = conv_shape_of(x, k);
        if (reps < 1) throw std::invalid_argument("reps must be >= 1");
        require_gpu();
        py::gil_scoped_release release;
        return time_autotune_config(config, s, static_cast<const float*>(x.data()), static_cast<const float*>(k.data()),
                                    reps);
      },
      py::arg("config"), py::arg("x"), py::arg("k"), py::arg("reps") = 20,
      "Median milliseconds of one configuration on x, k (host arrays, uploaded once). ValueError when the\n"
      "configuration cannot run the shape.");
  m.def(
      "autotune_set",
      [](int64_t B, int64_t C, int64_t H, int64_t W, int64_t M, int64_t K, int config) {
        const auto n = int(autotune_configs().size());
        if (config >= n) throw std::invalid_argument("autotune_set: no configuration " + std::to_string(config));
        autotune_set(make_conv_shape(B, C, H, W, M, C, K, K), config);
      },
      py::arg("B"), py::arg("C"), py::arg("H"), py::arg("W"), py::arg("M"), py::arg("K"), py::arg("config"),
      "Use configuration `config` for this layer shape (a negative value forgets the shape).");
  m.def(
      "autotune_get",
      [](int64_t B, int64_t C, int64_t H, int64_t W, int64_t M, int64_t K) {
        return autotune_get(make_conv_shape(B, C, H, W, M, C, K, K));
      },
      py::arg("B"), py::arg("C"), py::arg("H"), py::arg("W"), py::arg("M"), py::arg("K"),
      "The configuration recorded for this shape, -1 when none (the launcher then uses its default).");

  py::class_<PyNetwork>(m, "Network",
                        "The whole network on one GPU, weights uploaded once, buffers reused across calls.")
      .def(py::init([](const py::list& layers, const py::list& weights, const std::vector<int64_t>& input_shape,
                       int device) {
             auto p = std::make_unique<PyNetwork>();
             p->net = make_network(layers, weights, input_shape, device);
             p->input_shape = input_shape;
             return p;
           }),
           py::arg("layers"), py::arg("weights"), py::arg("input_shape"), py::arg("device") = 0,
           "layers: the model's layer dicts (pyconv.model.Layer.spec()); weights: one (weight|None, bias|None) per\n"
           "layer, float32 C-contiguous; input_shape: (C, H, W); device: the GPU ordinal. ValueError on a\n"
           "malformed model, CudaError when no GPU is usable.")
      .def(
          "forward",
          [](PyNetwork& self, const py::array& images, const std::vector<std::string>& impls, int chunks,
             int streams, bool op_times, double taper, int tail_pieces, bool gpu_span) {
            const InputType t = check_images(images, self.input_shape);
            // the pass writes the labels here, not into a buffer copied after it
            py::array_t<int32_t> labels(py::ssize_t(images.shape(0)));
            int32_t* out = labels.mutable_data();
            ForwardResult r;
            {
              py::gil_scoped_release release;
              r = self.net->forward(images.data(), t, images.shape(0), out, impls, chunks, streams, op_times, taper,
                                    tail_pieces, gpu_span);
            }
            py::dict d;
            d["labels"] = labels;
            d["op_times"] = r.op_seconds;
            d["peak_bytes"] = r.peak_bytes;
            d["passes"] = r.passes;
            d["rows_per_pass"] = r.rows_per_pass;
            d["replayed"] = r.replayed;
            d["gpu_ms"] = gpu_span ? py::object(py::float_(r.gpu_ms)) : py::object(py::none());
            return d;
          },
          py::arg("images"), py::arg("impls"), py::arg("chunks") = 1, py::arg("streams") = 2,
          py::arg("op_times") = true, py::arg("taper") = 1.0, py::arg("tail_pieces") = GpuNetwork::kTailPieces,
          py::arg("gpu_span") = false,
          "Predicted labels of images[N][C][H][W] (uint8 or float32). impls: one registry variant per conv layer.\n"
          "Returns dict(labels=int32[N], op_times=[seconds per conv layer], peak_bytes, passes, rows_per_pass,\n"
          "replayed, gpu_ms). chunks=1 times each conv as the course did (device sync, host clock, the conv,\n"
          "device sync); chunks>1 splits the batch over `streams` streams (copies in order overlap compute), each\n"
          "part `taper` times the one before (0 < taper <= 4), the last part's copy in tail_pieces pieces whose conv\n"
          "layers run as each lands (1..64; where the first conv reads uint8 images), and times convs by\n"
          "events; from pinned memory the same chunked pass the second time on is one replayed CUDA graph\n"
          "(replayed=True). op_times=False: no per-layer timing (op_times is then empty), which also takes the\n"
          "timing's own cost out of the pass.\n"
          "gpu_span=True: gpu_ms, the milliseconds on the GPU's clock from just before each pass's first copy to\n"
          "the end of its last work (CUDA events, summed over passes); otherwise gpu_ms is None.\n"
          "A batch too large for the GPU is split into passes automatically (passes > 1).")
      .def(
          "forward_resident",
          [](PyNetwork& self, const py::array& images, const std::vector<std::string>& impls, int warmup, int reps,
             int chunks, int streams, double taper) {
            const InputType t = check_images(images, self.input_shape);
            py::gil_scoped_release release;
            return self.net->forward_resident(images.data(), t, images.shape(0), impls, warmup, reps, chunks,
                                              streams, taper);
          },
          py::arg("images"), py::arg("impls"), py::arg("warmup") = 2, py::arg("reps") = 10, py::arg("chunks") = 1,
          py::arg("streams") = 1, py::arg("taper") = 1.0,
          "Milliseconds per rep of the whole network with the images already on the device (CUDA events).\n"
          "chunks > 1: in parts on `streams` streams as forward runs them, without the copies.")
      .def(
          "logits",
          [](PyNetwork& self, const py::array& images, const std::vector<std::string>& impls) {
            const InputType t = check_images(images, self.input_shape);
            std::vector<float> out;
            {
              py::gil_scoped_release release;
              out = self.net->logits(images.data(), t, images.shape(0), impls);
            }
            py::array_t<float> a({py::ssize_t(images.shape(0)), py::ssize_t(self.net->classes())});
            std::memcpy(a.mutable_data(), out.data(), out.size() * sizeof(float));
            return a;
          },
          py::arg("images"), py::arg("impls"),
          "The last layer's activations float32[N][classes] (a trailing softmax is not applied: it cannot change\n"
          "the labels); one pass, no splitting. For tests of the layer kernels.")
      .def_property_readonly("peak_bytes", [](const PyNetwork& self) { return self.net->peak_bytes(); },
                             "Most device bytes this network's buffers (weights included) have held.")
      .def_property(
          "fc_math", [](const PyNetwork& self) { return fc_math_name(self.net->fc_math()); },
          [](PyNetwork& self, const std::string& name) { self.net->set_fc_math(fc_math_from_name(name)); },
          "How the fully connected layers multiply: 'fp32' (cublasSgemm, the default), 'tf32' (tensor cores,\n"
          "operands rounded to 10 mantissa bits, float32 sums) or 'fp16' (tensor cores, operands in half, float32\n"
          "sums; a conv variant with an FP16 output path writes the FC layer's input in half itself).")
      .def_property_readonly("conv_layers", [](const PyNetwork& self) { return self.net->conv_count(); })
      .def_property_readonly("device", [](const PyNetwork& self) { return self.net->device(); });
}
