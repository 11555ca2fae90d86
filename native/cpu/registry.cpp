#include <stdexcept>

#include "cpu/conv_cpu.hpp"

namespace pyconv {

const std::vector<CpuConvVariant>& cpu_conv_variants() {
  static const std::vector<CpuConvVariant> variants = {
      {"cpu-naive", "the course's milestone-2 seven-loop convolution, single thread", conv_fwd_cpu_naive},
      {"cpu-fast", "OpenMP over images, register-blocked SIMD over output channels and wide rows",
       conv_fwd_cpu_fast},
  };
  return variants;
}

const CpuConvVariant& find_cpu_conv_variant(const std::string& name) {
  std::string known;
  for (const auto& v : cpu_conv_variants()) {
    if (name == v.name) return v;
    known += (known.empty() ? "" : ", ") + std::string(v.name);
  }
  throw std::invalid_argument("unknown CPU convolution '" + name + "' (known: " + known + ")");
}

}  // namespace pyconv
