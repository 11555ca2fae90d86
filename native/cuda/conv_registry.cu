#include <stdexcept>

#include "cuda/conv_registry.cuh"

namespace pyconv {

const std::vector<GpuConvVariant>& gpu_conv_variants() {
  // Ladder order. Adding a variant: its own file, one line here, one source line in CMakeLists.txt.
  static const std::vector<GpuConvVariant> v = {
      {"gpu-baseline", 0, "milestone 3: one thread per output element, global memory only", conv_fwd_gpu_baseline,
       conv_fwd_gpu_baseline_supports},
  };
  return v;
}

const GpuConvVariant& find_gpu_conv_variant(const std::string& name) {
  std::string known;
  for (const auto& v : gpu_conv_variants()) {
    if (name == v.name) return v;
    known += (known.empty() ? "" : ", ") + std::string(v.name);
  }
  throw std::invalid_argument("unknown GPU convolution '" + name + "' (known: " + known + ")");
}

std::string why_unsupported(const GpuConvVariant& v, const ConvShape& s) {
  if (v.epilogue == Epilogue::TanhMaxPool2 && (s.Ho() < 2 || s.Wo() < 2))
    return std::string(v.name) + " fuses a 2x2 pool: the output must be at least 2x2";
  return v.supports ? v.supports(s) : std::string();
}

}  // namespace pyconv
