#include <stdexcept>
#include <string>

#include "common/pyarray.hpp"
#include "cuda/runtime/network_args.cuh"

namespace pyconv {
namespace {

std::vector<float> to_float_vector(const py::handle& a, const char* what, int ndim, std::vector<int64_t>& shape) {
  const py::array arr = py::reinterpret_borrow<py::array>(a);
  require_array<float>(arr, what, ndim);
  shape.assign(arr.shape(), arr.shape() + arr.ndim());
  const float* p = static_cast<const float*>(arr.data());
  return std::vector<float>(p, p + arr.size());
}

int64_t dict_int(const py::dict& d, const char* key) {
  if (!d.contains(key)) throw std::invalid_argument(std::string("layer dict misses '") + key + "'");
  return d[key].cast<int64_t>();
}

}  // namespace

std::unique_ptr<GpuNetwork> make_network(const py::list& layers, const py::list& weights,
                                         const std::vector<int64_t>& input_shape, int device) {
  if (layers.size() != weights.size())
    throw std::invalid_argument("Network: one (weight, bias) pair per layer expected, got " +
                                std::to_string(weights.size()) + " for " + std::to_string(layers.size()) + " layers");
  if (input_shape.size() != 3) throw std::invalid_argument("Network: input_shape must be (C, H, W)");
  std::vector<LayerDesc> descs;
  for (size_t i = 0; i < layers.size(); ++i) {
    const py::dict d = layers[i].cast<py::dict>();
    LayerDesc L;
    L.type = d["type"].cast<std::string>();
    const py::tuple wb = weights[i].cast<py::tuple>();
    if (wb.size() != 2) throw std::invalid_argument("Network: weights[" + std::to_string(i) + "] must be (weight, bias)");
    std::vector<int64_t> bshape;
    if (L.type == "conv") {
      L.out_channels = dict_int(d, "out_channels");
      L.kernel = dict_int(d, "kernel");
      if (wb[0].is_none()) throw std::invalid_argument("Network: conv layer " + std::to_string(i) + " has no weight");
      L.weight = to_float_vector(wb[0], "conv weight", 4, L.weight_shape);
    } else if (L.type == "fc") {
      L.out_features = dict_int(d, "out_features");
      if (wb[0].is_none() || wb[1].is_none())
        throw std::invalid_argument("Network: fc layer " + std::to_string(i) + " needs a weight and a bias");
      L.weight = to_float_vector(wb[0], "fc weight", 2, L.weight_shape);
      L.bias = to_float_vector(wb[1], "fc bias", 1, bshape);
    } else if (L.type == "pool") {
      L.mode = d["mode"].cast<std::string>();
      L.kernel = dict_int(d, "kernel");
      L.stride = dict_int(d, "stride");
    }
    descs.push_back(std::move(L));
  }
  return std::make_unique<GpuNetwork>(std::move(descs), input_shape[0], input_shape[1], input_shape[2], device);
}

InputType check_images(const py::array& images, const std::vector<int64_t>& input_shape) {
  InputType t;
  if (py::dtype::of<uint8_t>().is(images.dtype())) {
    require_array<uint8_t>(images, "images", 4);
    t = InputType::U8;
  } else {
    require_array<float>(images, "images", 4);
    t = InputType::F32;
  }
  for (int i = 0; i < 3; ++i)
    if (images.shape(i + 1) != input_shape[size_t(i)])
      throw std::invalid_argument("images: each image must be " + std::to_string(input_shape[0]) + "x" +
                                  std::to_string(input_shape[1]) + "x" + std::to_string(input_shape[2]));
  if (images.shape(0) < 1) throw std::invalid_argument("images: need at least one image");
  return t;
}

}  // namespace pyconv
