// Strict checks for numpy arrays crossing into native code: float32 (or uint8 where stated), C-contiguous,
// the expected rank. No silent conversion: a wrong array is the caller's bug and gets a ValueError naming it.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/conv_shape.hpp"

namespace pyconv {
namespace py = pybind11;

template <typename T>
inline void require_array(const py::array& a, const char* what, int ndim) {
  if (!py::dtype::of<T>().is(a.dtype()))
    throw std::invalid_argument(std::string(what) + ": dtype must be " +
                                std::string(py::str(py::dtype::of<T>())) + ", got " +
                                std::string(py::str(a.dtype())));
  if (a.ndim() != ndim)
    throw std::invalid_argument(std::string(what) + ": expected a " + std::to_string(ndim) +
                                "-D array, got " + std::to_string(a.ndim()) + "-D");
  if (!(a.flags() & py::array::c_style))
    throw std::invalid_argument(std::string(what) + ": array must be C-contiguous (use np.ascontiguousarray)");
}

// x[B][C][H][W] and k[M][C][K][K], both float32 C-contiguous.
inline ConvShape conv_shape_of(const py::array& x, const py::array& k) {
  require_array<float>(x, "x", 4);
  require_array<float>(k, "k", 4);
  return make_conv_shape(x.shape(0), x.shape(1), x.shape(2), x.shape(3), k.shape(0), k.shape(1), k.shape(2),
                         k.shape(3));
}

// The same with x as uint8 pixels (a network's raw images: a variant's launch_u8 path).
inline ConvShape conv_shape_of_u8(const py::array& x, const py::array& k) {
  require_array<uint8_t>(x, "x", 4);
  require_array<float>(k, "k", 4);
  return make_conv_shape(x.shape(0), x.shape(1), x.shape(2), x.shape(3), k.shape(0), k.shape(1), k.shape(2),
                         k.shape(3));
}

}  // namespace pyconv
