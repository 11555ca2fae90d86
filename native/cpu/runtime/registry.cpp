#include "cpu/runtime/registry.hpp"

namespace pyconv {

VariantRegistry<CpuConvVariant>& cpu_conv_registry() {
  // Built on first use: the variants' static registrars may run before any other static of this module.
  static VariantRegistry<CpuConvVariant> registry("CPU");
  return registry;
}

}  // namespace pyconv
