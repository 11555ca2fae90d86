// CPU convolutions (milestone 2) and their registry. Each variant computes exactly the ConvShape semantics and
// describes and registers itself at the end of its file: PYCONV_REGISTER_CPU_CONV(CpuConvVariant{...}).
#pragma once
#include <string>
#include <vector>

#include "common/conv_shape.hpp"
#include "common/variant.hpp"

namespace pyconv {

using CpuConvFn = void (*)(const float* x, const float* k, float* y, const ConvShape& s);
// Returns an empty string when the shape is supported, else why not (shown to the user verbatim).
using CpuSupportsFn = std::string (*)(const ConvShape& s);

// Milestone 2 is the only CPU milestone.
struct CpuRoles {
  MilestoneRole m2;
};

// Written with designated initializers in this order (fields left out keep the defaults below).
struct CpuConvVariant {
  const char* name = nullptr;     // e.g. "cpu-fast"; CLI --impl and bench rows use it
  int step = -1;                  // position among the CPU variants (simplest first)
  const char* summary = nullptr;  // one line
  Precision precision = Precision::Fp32;
  double rtol = 0.0;  // relative tolerance the tests hold it to; 0 means kDefaultRtol
  // Runs on one thread whatever OpenMP offers (the course's seven loops): the bench records one thread and, unless
  // --batch is given, times it on a smaller batch.
  bool single_thread = false;
  CpuConvFn launch = nullptr;
  CpuSupportsFn supports = nullptr;  // nullptr: every valid shape
  CpuRoles roles;
  const char* source = "";  // filled by the registrar: the file that registered it

  std::string incomplete() const {  // "" when the descriptor is complete (checked at registration)
    if (!launch) return "no launch function";
    return role_incomplete(roles.m2, "m2");
  }
};

VariantRegistry<CpuConvVariant>& cpu_conv_registry();
inline const std::vector<CpuConvVariant>& cpu_conv_variants() { return cpu_conv_registry().all(); }
inline const CpuConvVariant& find_cpu_conv_variant(const std::string& name) {  // throws std::invalid_argument
  return cpu_conv_registry().find(name);
}
inline std::string why_unsupported(const CpuConvVariant& v, const ConvShape& s) {
  return v.supports ? v.supports(s) : std::string();
}

struct CpuConvRegistrar {
  CpuConvRegistrar(const CpuConvVariant& v, const char* file) noexcept { cpu_conv_registry().add(v, file); }
};

}  // namespace pyconv

// At the end of a variant's file, inside namespace pyconv: PYCONV_REGISTER_CPU_CONV(CpuConvVariant{...});
#define PYCONV_REGISTER_CPU_CONV(...)                                                                  \
  static const ::pyconv::CpuConvRegistrar PYCONV_CONCAT(pyconv_cpu_conv_registrar_, __COUNTER__)( \
      __VA_ARGS__, __FILE__)
