// Per-shape configuration choice for step 11 (gpu-autotuned), like cuDNN's benchmark mode: the sweep times every
// configuration of the tunable kernel family (the variant whose descriptor has `tunable`: step 8's tensor-core
// configurations) on a layer shape and records the winner; the launcher uses the recorded configuration, or the
// fixed default when the shape was never tuned. pyconv/tuning.py drives the sweep and keeps the winners in a JSON
// cache per GPU. A build without a tunable variant has no configurations.
#pragma once
#include <string>
#include <vector>

#include "common/conv_shape.hpp"

namespace pyconv {

// Configuration names, index = configuration number.
std::vector<std::string> autotune_configs();
// Median milliseconds of `reps` launches (CUDA events, after one warm-up launch) of configuration `config` on
// device buffers x, k, y of shape s. Throws std::invalid_argument when the configuration cannot run s.
double autotune_time_config(int config, const float* x, const float* k, float* y, const ConvShape& s, int reps);
// Record (config >= 0) or forget (config < 0) the configuration used for shape s.
void autotune_set(const ConvShape& s, int config);
// The recorded configuration for s, -1 when none.
int autotune_get(const ConvShape& s);

}  // namespace pyconv
