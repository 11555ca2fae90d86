// The Mini-DNN student slot's Python functions, added to pyconv._cpu and pyconv._gpu (each module has its own
// slot: its cpu-student or gpu-student). In a module built without a Mini-DNN student they exist and say so.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "common/pyarray.hpp"
#include "minidnn/minidnn_glue.hpp"

namespace pyconv {
namespace minidnn {

inline void bind(pybind11::module_& m) {
  namespace py = pybind11;
  m.def(
      "student_generation", [] { return std::string(slot().generation); },
      "The Mini-DNN interface generation this module's student was compiled for (e.g. '2021sp'); '' when the\n"
      "module holds no Mini-DNN student.");
  m.def(
      "student_times",
      [] {
        py::dict d;
        d["op_ms"] = py::cast(slot().times.op_ms);
        d["layer_ms"] = py::cast(slot().times.layer_ms);
        return d;
      },
      "{'op_ms': [...], 'layer_ms': [...]}: milliseconds per call of the student's convolution since the last\n"
      "student_reset_times(), in call order (one entry per conv layer run). op_ms is the course's Op Time\n"
      "(conv_forward_cpu; on the GPU conv_forward_gpu alone), layer_ms its Layer Time (prolog + conv_forward_gpu\n"
      "+ epilog; on the CPU equal to op_ms).");
  m.def(
      "student_reset_times", [] { slot().times = StudentTimes{}; }, "Forget the recorded times.");
  m.def(
      "student_conv",
      [](const py::array& x, const py::array& k, int stride) {
        if (!slot().conv) throw std::invalid_argument("this module was built without a Mini-DNN student");
        if (stride < 1) throw std::invalid_argument("stride must be >= 1, got " + std::to_string(stride));
        const ConvShape s = conv_shape_of(x, k);
        const std::string why = why_unsupported(s.B, s.M, s.C, s.H, s.W, s.K, stride);
        if (!why.empty()) throw std::invalid_argument(why);
        py::array_t<float> y({s.B, s.M, out_size(s.H, s.K, stride), out_size(s.W, s.K, stride)});
        const float* xp = static_cast<const float*>(x.data());
        const float* kp = static_cast<const float*>(k.data());
        float* yp = y.mutable_data();
        {
          py::gil_scoped_release release;
          slot().conv(yp, xp, kp, int(s.B), int(s.M), int(s.C), int(s.H), int(s.W), int(s.K), stride);
        }
        return y;
      },
      py::arg("x"), py::arg("k"), py::arg("stride") = 1,
      "y = student_conv(x, k, stride=1): the student's convolution called as the course's framework called it,\n"
      "on host arrays x[B][C][H][W] and k[M][C][K][K] (float32, C-contiguous), giving y[B][M][Ho][Wo] with\n"
      "Ho = (H - K) / stride + 1. A stride other than 1 only for an interface with one (2023fa). Records its times.");
}

}  // namespace minidnn
}  // namespace pyconv
