// Roofline probes measured on the GPU in use: what bandwidth and FP32 rate the convolutions can be held to.
#pragma once
#include <cstddef>
#include <vector>

namespace pyconv {

// Device-to-device copy of nbytes with 16-byte loads and stores; GB/s per rep counting bytes read + written.
std::vector<double> measure_copy_bandwidth(size_t nbytes, int reps);
// An FFMA-bound kernel (independent chains per thread, enough blocks to fill every SM); GFLOP/s per rep, 2 flops
// per FMA.
std::vector<double> measure_fma_rate(int reps);
// cublasSgemm in FP32 (no TF32) on n x n matrices; GFLOP/s per rep (2 n^3 flops).
std::vector<double> measure_sgemm_rate(int n, int reps);

}  // namespace pyconv
