// The Network binding's arguments as the network engine takes them: the model's layer dicts
// (pyconv.model.Layer.spec()) and (weight, bias) arrays become LayerDescs, a batch of images is checked against
// the network's input shape. Conversions only: the network validates the model itself.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "cuda/runtime/network.cuh"

namespace pyconv {
namespace py = pybind11;

// layers: the model's layer dicts; weights: one (weight|None, bias|None) tuple per layer, float32 C-contiguous;
// input_shape: (C, H, W); device: the GPU ordinal. std::invalid_argument on a malformed model.
std::unique_ptr<GpuNetwork> make_network(const py::list& layers, const py::list& weights,
                                         const std::vector<int64_t>& input_shape, int device);

// images[N][C][H][W], uint8 or float32, C-contiguous, matching input_shape (C, H, W).
InputType check_images(const py::array& images, const std::vector<int64_t>& input_shape);

}  // namespace pyconv
