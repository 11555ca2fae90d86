// cpu-fast: OpenMP over images; per image a "wide-row" direct convolution, register-blocked over output
// channels and SIMD over output pixels.
//
// Wide rows: with the output flattened as o = h*W + w (row stride W, not Wo), every tap (c,p,q) reads the
// contiguous run x[c][o + p*W + q], so a vector of consecutive outputs is one unaligned load per tap; the
// W-Wo columns per row computed in vain (8% for 48->44, 18% for 22->18) cost less than gathering rows.
// Register blocking: MB output channels x NV vectors of accumulators stay in registers across all C*K*K taps;
// each tap is NV loads + MB broadcasts for MB*NV FMAs. Weights are repacked once per call to [mb][c][p][q][MB]
// so the broadcasts stream through memory in order. Each image is copied into a zero-padded buffer first so the
// last vectors may over-read safely.
// Measured on a 2-core AVX-512 Xeon (invoke bench --cpu, batch 10000): see README "CPU" table.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <vector>

#include "cpu/runtime/registry.hpp"

namespace pyconv {
namespace {

#if defined(__AVX512F__)
constexpr int VL = 16;
#else
constexpr int VL = 8;
#endif
typedef float vfloat __attribute__((vector_size(VL * sizeof(float))));
constexpr int NV = 4;         // vectors per output block
constexpr int VB = NV * VL;   // outputs per block
constexpr int MB_MAX = 4;     // output channels per register block

inline vfloat loadu(const float* p) {
  vfloat v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void storeu(float* p, vfloat v) { std::memcpy(p, &v, sizeof v); }

// acc[MB][NV] over one block of VB wide outputs starting at o.
template <int MB>
inline void conv_block(const float* __restrict xp, int64_t plane, const float* __restrict wpk, int64_t C,
                       int64_t K, int64_t W, int64_t o, float* __restrict yw, int64_t ystride) {
  vfloat acc[MB][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MB; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) acc[i][j] = vfloat{} ;
  const float* wp = wpk;
  for (int64_t c = 0; c < C; ++c) {
    const float* xc = xp + c * plane + o;
    for (int64_t p = 0; p < K; ++p) {
      const float* xr = xc + p * W;
      for (int64_t q = 0; q < K; ++q, wp += MB_MAX) {
        vfloat xv[NV];
#pragma GCC unroll 8
        for (int j = 0; j < NV; ++j) xv[j] = loadu(xr + q + j * VL);
#pragma GCC unroll 8
        for (int i = 0; i < MB; ++i) {
          const float wv = wp[i];
#pragma GCC unroll 8
          for (int j = 0; j < NV; ++j) acc[i][j] += xv[j] * wv;
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MB; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) storeu(yw + i * ystride + o + j * VL, acc[i][j]);
}

}  // namespace

void conv_fwd_cpu_fast(const float* x, const float* k, float* y, const ConvShape& s) {
  const int64_t C = s.C, H = s.H, W = s.W, M = s.M, K = s.K, Ho = s.Ho(), Wo = s.Wo();
  const int64_t wide = (Ho * W + VB - 1) / VB * VB;          // wide outputs per channel, whole blocks
  const int64_t plane = wide + (K - 1) * W + K + VL;         // padded input plane: covers every over-read
  const int64_t nmb = (M + MB_MAX - 1) / MB_MAX;

  // Weights repacked to [mb][c][p][q][MB_MAX] (tail blocks zero-filled), once per call.
  std::vector<float> wpk(static_cast<size_t>(nmb * C * K * K * MB_MAX), 0.0f);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t t = 0; t < C * K * K; ++t)
      wpk[((m / MB_MAX) * C * K * K + t) * MB_MAX + m % MB_MAX] = k[m * C * K * K + t];

  // No exception may leave an OpenMP region (the runtime would call std::terminate and end the process): a
  // failed allocation of a thread's buffers is kept and rethrown after the region (pybind11: MemoryError).
  // Every thread still reaches the worksharing loop (skipping a barrier would hang the others); one without
  // buffers skips its images, whose outputs do not matter once the call fails.
  std::exception_ptr error;
#pragma omp parallel
  {
    std::vector<float> xp, yw;
    bool ready = true;
    try {
      xp.assign(static_cast<size_t>(C * plane), 0.0f);
      yw.resize(static_cast<size_t>(MB_MAX * wide));
    } catch (...) {
      ready = false;
#pragma omp critical(pyconv_cpu_fast_error)
      if (!error) error = std::current_exception();
    }
#pragma omp for schedule(static)
    for (int64_t b = 0; b < s.B; ++b) {
      if (!ready) continue;
      for (int64_t c = 0; c < C; ++c)
        std::memcpy(&xp[c * plane], x + (b * C + c) * H * W, sizeof(float) * H * W);
      for (int64_t mb = 0; mb < nmb; ++mb) {
        const int64_t m0 = mb * MB_MAX, mcount = std::min<int64_t>(MB_MAX, M - m0);
        const float* wb = &wpk[mb * C * K * K * MB_MAX];
        // The packed weights keep stride MB_MAX; a tail block instantiates only the channels it has.
        for (int64_t o = 0; o < wide; o += VB) {
          switch (mcount) {
            case 4: conv_block<4>(xp.data(), plane, wb, C, K, W, o, yw.data(), wide); break;
            case 3: conv_block<3>(xp.data(), plane, wb, C, K, W, o, yw.data(), wide); break;
            case 2: conv_block<2>(xp.data(), plane, wb, C, K, W, o, yw.data(), wide); break;
            default: conv_block<1>(xp.data(), plane, wb, C, K, W, o, yw.data(), wide); break;
          }
        }
        for (int64_t i = 0; i < mcount; ++i) {
          float* yo = y + (b * M + m0 + i) * Ho * Wo;
          const float* yi = &yw[i * wide];
          for (int64_t h = 0; h < Ho; ++h) std::memcpy(yo + h * Wo, yi + h * W, sizeof(float) * Wo);
        }
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

// Float32 sums in a different order than the reference: held to 1e-5 relative, like cpu-naive.
PYCONV_REGISTER_CPU_CONV(CpuConvVariant{
    .name = "cpu-fast",
    .step = 1,
    .summary = "OpenMP over images, register-blocked SIMD over output channels and wide rows",
    .rtol = 1e-5,
    .launch = conv_fwd_cpu_fast,
    .roles = {.m2 = default_role()},
});

}  // namespace pyconv
