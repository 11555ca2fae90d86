// CPU convolutions (milestone 2) and their registry. Each variant computes exactly the ConvShape semantics.
#pragma once
#include <string>
#include <vector>

#include "common/conv_shape.hpp"

namespace pyconv {

using CpuConvFn = void (*)(const float* x, const float* k, float* y, const ConvShape& s);

struct CpuConvVariant {
  const char* name;
  const char* summary;
  CpuConvFn fn;
};

void conv_fwd_cpu_naive(const float* x, const float* k, float* y, const ConvShape& s);
void conv_fwd_cpu_fast(const float* x, const float* k, float* y, const ConvShape& s);

const std::vector<CpuConvVariant>& cpu_conv_variants();
const CpuConvVariant& find_cpu_conv_variant(const std::string& name);  // throws std::invalid_argument

}  // namespace pyconv
