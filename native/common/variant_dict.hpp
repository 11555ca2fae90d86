// A variant descriptor as Python sees it (pyconv._cpu.variants(), pyconv._gpu.variants()): one dict per variant,
// the same keys for both devices, every milestone present in "roles".
#pragma once
#include <pybind11/pybind11.h>

#include <string>
#include <utility>
#include <vector>

#include "common/variant.hpp"

namespace pyconv {
namespace py = pybind11;

inline constexpr const char* kMilestones[] = {"m2", "m3", "m4", "final"};

// roles: the milestones this device takes part in; every other milestone is "never" with the reason
// "not a CPU variant" (m2) or "not a GPU variant" (m3, m4, final).
inline py::dict variant_dict(const char* name, int step, const char* summary, Epilogue epilogue, Precision precision,
                             double rtol, bool x_on_host, bool reads_u8, const char* device,
                             const std::vector<std::pair<const char*, MilestoneRole>>& roles) {
  py::dict d;
  d["name"] = name;
  d["step"] = step;
  d["summary"] = summary;
  d["epilogue"] = epilogue_name(epilogue);
  d["precision"] = precision_name(precision);
  d["rtol"] = rtol > 0 ? rtol : kDefaultRtol;
  d["x_on_host"] = x_on_host;
  d["reads_u8"] = reads_u8;
  d["device"] = device;
  py::dict rd;
  for (const char* m : kMilestones) {
    MilestoneRole r = never("");
    // Milestone 2 runs on the CPU, the others on the GPU.
    std::string reason = std::string("not a ") + (std::string(m) == "m2" ? "CPU" : "GPU") + " variant";
    for (const auto& [mm, role] : roles)
      if (std::string(mm) == m) {
        r = role;
        reason = role.reason ? role.reason : "";
      }
    py::dict one;
    one["role"] = role_name(r.role);
    one["reason"] = reason;
    rd[m] = one;
  }
  d["roles"] = rd;
  return d;
}

}  // namespace pyconv
