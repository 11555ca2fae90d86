// pyconv._cpu: thin bindings over the CPU convolution registry.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <omp.h>

#include "common/pyarray.hpp"
#include "cpu/conv_cpu.hpp"

namespace py = pybind11;
using namespace pyconv;

PYBIND11_MODULE(_cpu, m) {
  m.doc() = "pyconv CPU convolutions (milestone 2)";

  m.def(
      "variants",
      [] {
        py::list out;
        for (const auto& v : cpu_conv_variants()) {
          py::dict d;
          d["name"] = v.name;
          d["summary"] = v.summary;
          out.append(d);
        }
        return out;
      },
      "The registry: a list of {name, summary} for every CPU convolution variant.");

  m.def(
      "conv",
      [](const std::string& name, const py::array& x, const py::array& k) {
        const CpuConvVariant& v = find_cpu_conv_variant(name);
        const ConvShape s = conv_shape_of(x, k);
        py::array_t<float> y({s.B, s.M, s.Ho(), s.Wo()});
        const float* xp = static_cast<const float*>(x.data());
        const float* kp = static_cast<const float*>(k.data());
        float* yp = y.mutable_data();
        {
          py::gil_scoped_release release;
          v.fn(xp, kp, yp, s);
        }
        return y;
      },
      py::arg("name"), py::arg("x"), py::arg("k"),
      "y = conv(name, x, k): valid, stride-1, no-bias cross-correlation of x[B][C][H][W] (float32, C-contiguous)\n"
      "with k[M][C][K][K], giving y[B][M][H-K+1][W-K+1]. Raises ValueError on a wrong dtype, rank, layout or\n"
      "shape, or an unknown variant name.");

  m.def(
      "max_threads", [] { return omp_get_max_threads(); }, "OpenMP threads cpu-fast will use.");
}
