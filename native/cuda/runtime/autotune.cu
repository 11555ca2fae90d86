#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <stdexcept>

#include "cuda/runtime/autotune.cuh"
#include "cuda/runtime/device_buffer.cuh"
#include "cuda/runtime/registry.cuh"

namespace pyconv {
namespace {

using ShapeKey = std::array<int64_t, 6>;
ShapeKey key_of(const ConvShape& s) { return {s.B, s.C, s.H, s.W, s.M, s.K}; }

std::mutex cache_mutex;
std::map<ShapeKey, int>& cache() {
  static std::map<ShapeKey, int> c;
  return c;
}

const TunableFamily* family() {
  for (const auto& v : gpu_conv_variants())
    if (v.tunable) return v.tunable;
  return nullptr;
}

}  // namespace

std::vector<std::string> autotune_configs() {
  const TunableFamily* f = family();
  return f ? f->configs() : std::vector<std::string>{};
}

void autotune_set(const ConvShape& s, int config) {
  if (config >= int(autotune_configs().size()))
    throw std::invalid_argument("autotune: no configuration " + std::to_string(config));
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (config < 0)
    cache().erase(key_of(s));
  else
    cache()[key_of(s)] = config;
}

int autotune_get(const ConvShape& s) {
  std::lock_guard<std::mutex> lock(cache_mutex);
  const auto it = cache().find(key_of(s));
  return it == cache().end() ? -1 : it->second;
}

double autotune_time_config(int config, const float* x, const float* k, float* y, const ConvShape& s, int reps) {
  const TunableFamily* f = family();
  if (!f) throw std::invalid_argument("autotune: this build has no variant with tunable configurations");
  if (reps < 1) throw std::invalid_argument("autotune: reps must be >= 1");
  const std::string why = f->supports(config, s);
  if (!why.empty()) throw std::invalid_argument(why);
  Stream st;
  f->launch(config, x, k, y, s, st.get());  // warm-up: caches, clocks, attributes
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    Event a, b;
    a.record(st.get());
    f->launch(config, x, k, y, s, st.get());
    b.record(st.get());
    ms.push_back(b.since(a));
  }
  std::sort(ms.begin(), ms.end());
  return ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
}

}  // namespace pyconv
