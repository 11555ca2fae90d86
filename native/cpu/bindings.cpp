// pyconv._cpu: thin bindings over the CPU convolution registry.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <omp.h>

#include <cstdint>
#include <optional>

#include "common/pyarray.hpp"
#include "common/variant_dict.hpp"
#include "cpu/runtime/registry.hpp"
#include "minidnn/bindings.hpp"

namespace py = pybind11;
using namespace pyconv;

namespace {
// Byte ranges of two C-contiguous arrays (conv_shape_of and require_array insist on that layout).
bool overlap(const py::array& a, const py::array& b) {
  const auto a0 = reinterpret_cast<std::uintptr_t>(a.data()), b0 = reinterpret_cast<std::uintptr_t>(b.data());
  return a0 < b0 + static_cast<std::uintptr_t>(b.nbytes()) && b0 < a0 + static_cast<std::uintptr_t>(a.nbytes());
}
}  // namespace

PYBIND11_MODULE(_cpu, m) {
  m.doc() = "pyconv CPU convolutions (milestone 2)";

  cpu_conv_registry().check();  // a malformed variant file: ImportError naming it
  minidnn::bind(m);  // the Mini-DNN student slot: student_conv, student_times, ...

  m.def(
      "variants",
      [] {
        py::list out;
        for (const auto& v : cpu_conv_variants())
        {
          py::dict d = variant_dict(v.name, v.step, v.summary, Epilogue::None, v.precision, v.rtol, false, false,
                                    "cpu", {{"m2", v.roles.m2}});
          d["single_thread"] = v.single_thread;
          out.append(d);
        }
        return out;
      },
      "The registry in step order: one dict per CPU variant with name, step, summary, epilogue, precision, rtol,\n"
      "x_on_host, reads_u8, device ('cpu'), single_thread and roles {m2, m3, m4, final: {role, reason}}.");

  m.def(
      "why_unsupported",
      [](const std::string& name, int64_t B, int64_t C, int64_t H, int64_t W, int64_t M, int64_t K) {
        const ConvShape s = make_conv_shape(B, C, H, W, M, C, K, K);
        return why_unsupported(find_cpu_conv_variant(name), s);
      },
      py::arg("name"), py::arg("B"), py::arg("C"), py::arg("H"), py::arg("W"), py::arg("M"), py::arg("K"),
      "'' when the variant supports the shape, else the reason.");

  m.def(
      "conv",
      [](const std::string& name, const py::array& x, const py::array& k, std::optional<py::array> out) {
        const CpuConvVariant& v = find_cpu_conv_variant(name);
        const ConvShape s = conv_shape_of(x, k);
        const std::string why = why_unsupported(v, s);
        if (!why.empty()) throw std::invalid_argument(why);
        py::array y = out ? *out : py::array(py::array_t<float>({s.B, s.M, s.Ho(), s.Wo()}));
        require_array<float>(y, "out", 4);
        if (y.shape(0) != s.B || y.shape(1) != s.M || y.shape(2) != s.Ho() || y.shape(3) != s.Wo())
          throw std::invalid_argument("out: shape must be [" + std::to_string(s.B) + ", " + std::to_string(s.M) +
                                      ", " + std::to_string(s.Ho()) + ", " + std::to_string(s.Wo()) + "]");
        if (!y.writeable()) throw std::invalid_argument("out: array is read-only");
        // Written while x and k are still being read: an overlap gives a result that depends on the variant's
        // loop order (cpu-naive and cpu-fast disagree), so it is refused.
        if (overlap(y, x)) throw std::invalid_argument("out: shares memory with x; give a separate output array");
        if (overlap(y, k)) throw std::invalid_argument("out: shares memory with k; give a separate output array");
        const float* xp = static_cast<const float*>(x.data());
        const float* kp = static_cast<const float*>(k.data());
        float* yp = static_cast<float*>(y.mutable_data());
        {
          py::gil_scoped_release release;
          v.launch(xp, kp, yp, s);
        }
        return y;
      },
      py::arg("name"), py::arg("x"), py::arg("k"), py::arg("out") = py::none(),
      "y = conv(name, x, k, out=None): valid, stride-1, no-bias cross-correlation of x[B][C][H][W] (float32,\n"
      "C-contiguous) with k[M][C][K][K], giving y[B][M][H-K+1][W-K+1], written into `out` when given (tests\n"
      "poison it first). Raises ValueError on a wrong dtype, rank, layout or shape, an `out` that shares memory\n"
      "with x or k, or an unknown variant; MemoryError when a buffer cannot be allocated.");

  m.def(
      "max_threads", [] { return omp_get_max_threads(); }, "OpenMP threads cpu-fast will use.");
}
