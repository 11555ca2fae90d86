#include "cuda/runtime/registry.cuh"

namespace pyconv {

VariantRegistry<GpuConvVariant>& gpu_conv_registry() {
  // Built on first use: the variants' static registrars may run before any other static of this module.
  static VariantRegistry<GpuConvVariant> registry("GPU");
  return registry;
}

std::string GpuConvVariant::incomplete() const {
  if (!launch) return "no launch function";
  for (const auto& [r, m] : {std::pair{roles.m3, "m3"}, std::pair{roles.m4, "m4"}, std::pair{roles.final, "final"}}) {
    const std::string why = role_incomplete(r, m);
    if (!why.empty()) return why;
  }
  return {};
}

std::string why_unsupported(const GpuConvVariant& v, const ConvShape& s) {
  // Every kernel of the ladder indexes within one image plane with 32-bit integers (the course's planes are a
  // few thousand pixels); refusing here keeps that limit in one place instead of in each variant.
  constexpr int64_t kPlaneLimit = int64_t(1) << 31;
  if (s.H * s.W >= kPlaneLimit || s.H >= kPlaneLimit / 2 || s.W >= kPlaneLimit / 2)
    return std::string(v.name) + ": one image plane of " + std::to_string(s.H) + "x" + std::to_string(s.W) +
           " pixels is beyond the 32-bit in-plane indexing of the GPU kernels";
  if (v.epilogue == Epilogue::TanhMaxPool2 && (s.Ho() < 2 || s.Wo() < 2))
    return std::string(v.name) + " fuses a 2x2 pool: the output must be at least 2x2";
  return v.supports ? v.supports(s) : std::string();
}

}  // namespace pyconv
