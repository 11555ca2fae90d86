// cpu-fast: OpenMP over images; per image one of two register-blocked direct convolutions (no im2col, no GEMM
// library), chosen per layer by how few SIMD lanes it wastes; each image's output leaves in one streamed piece.
//
// 1. Pixel lanes ("wide rows"), for few output channels (sp19 conv1: M=6, C=1). With the output flattened as
//    o = h*W + w (row stride W, not Wo), every tap (c,p,q) reads the contiguous run x[c][o + p*W + q], so a
//    vector of consecutive outputs is one unaligned load per tap; the W-Wo columns per row computed in vain
//    (8% for 48->44) cost less than gathering rows. MB output channels x NV vectors of accumulators stay in
//    registers across all C*K*K taps: each tap is NV loads + MB broadcasts for MB*NV FMAs. MB is 6 with
//    AVX-512 (24 accumulators + 4 inputs of 32 registers) so that the course's 6-channel first layers take
//    one pass over the image, not a 4-channel and a half-empty 2-channel one. Each image is first copied into
//    a zero-padded buffer so the last vectors may over-read safely.
// 2. Channel lanes, for 16 output channels or more on small rows (sp19 conv2: M=16, 18x18 out). One vector
//    holds VL output channels of one pixel; a row chunk of PB pixels (a whole 18-pixel row) keeps PB
//    accumulators in registers, and each tap is one weight-vector load + PB FMAs whose input operand is a
//    broadcast straight from the image (no padding, no copy). Wide rows would waste 28% of their lanes there
//    (18 rows of 22 rounded up to whole 64-output blocks, for 18x18 useful); this wastes none when VL divides M.
//    K=5 and K=7 (every course layer) are compile-time constants, so the tap loop unrolls fully. The
//    accumulators (one pixel per vector) are transposed to [m][h][w] in registers, 16x16 at a time.
// Both write an image's whole output (contiguous in y) with non-temporal stores: at batch 10000 y is the
// largest array (sp19 conv1: 465 MB of y for 92 MB of x) and a plain store would first read every line of it
// (write-allocate); sp19 conv1 is then bound by the two cores' write bandwidth about as much as by FMAs.
// Measured (invoke bench --cpu, batch 10000, beside PyTorch's CPU conv2d on the same 2 threads): the CPU
// bench file of 2026-11-23 in results/ (bench-cpu-<cpu>-<date>.json). The design was tuned on a 2-core
// AVX-512 machine with two 512-bit FMA pipes per core.
//
// Without AVX-512 (another CPU, or `invoke build --portable`) the same code compiles with GCC vector
// extensions of 8 lanes (AVX2) or 4 (SSE), register blocks sized for 16 registers, and a scalar transpose.
#include <omp.h>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "cpu/runtime/registry.hpp"

namespace pyconv {
namespace {

#if defined(__AVX512F__)
constexpr int VL = 16;    // floats per vector
constexpr int NREG = 32;  // vector registers
#elif defined(__AVX__)
constexpr int VL = 8;
constexpr int NREG = 16;
#else
constexpr int VL = 4;
constexpr int NREG = 16;
#endif
typedef float vfloat __attribute__((vector_size(VL * sizeof(float))));

inline vfloat loadu(const float* p) {
  vfloat v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void storeu(float* p, vfloat v) { std::memcpy(p, &v, sizeof v); }

// dst[0..n) = src[0..n) with non-temporal stores for every whole 64-byte line of dst (plain stores for the
// partial lines at both ends, which a neighbouring image's thread may share). Call stream_fence() before the
// results are read.
inline void stream_copy(float* dst, const float* src, int64_t n) {
#if defined(__AVX512F__) || defined(__AVX__) || defined(__SSE2__)
  const uintptr_t a = reinterpret_cast<uintptr_t>(dst);
  if (a % sizeof(float) != 0) {
    std::memcpy(dst, src, sizeof(float) * n);
    return;
  }
  const int64_t head = std::min<int64_t>(n, static_cast<int64_t>((64 - a % 64) % 64 / sizeof(float)));
  std::memcpy(dst, src, sizeof(float) * head);
  int64_t i = head;
  for (; i + 16 <= n; i += 16) {
#if defined(__AVX512F__)
    _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
#elif defined(__AVX__)
    _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
    _mm256_stream_ps(dst + i + 8, _mm256_loadu_ps(src + i + 8));
#else
    for (int j = 0; j < 16; j += 4) _mm_stream_ps(dst + i + j, _mm_loadu_ps(src + i + j));
#endif
  }
  std::memcpy(dst + i, src + i, sizeof(float) * (n - i));
#else
  std::memcpy(dst, src, sizeof(float) * n);
#endif
}
inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// ---- 1. pixel lanes (wide rows) ----
constexpr int NV = 4;                           // vectors per output block
constexpr int VB = NV * VL;                     // wide outputs per block
// Output channels per register block: MB_MAX*NV accumulators + NV inputs fill the registers (the weight
// broadcasts are FMA memory operands). With 16 registers (AVX2) 3 beat 2 and 4 (spills) on sp19 conv1.
constexpr int MB_MAX = NREG >= 32 ? 6 : 3;

// acc[MB][NV] over one block of VB wide outputs starting at o; packed weights [c][p][q][MB_MAX].
template <int MB>
inline void wide_block(const float* __restrict xp, int64_t plane, const float* __restrict wpk, int64_t C,
                       int64_t K, int64_t W, int64_t o, float* __restrict yw, int64_t ystride) {
  vfloat acc[MB][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MB; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) acc[i][j] = vfloat{};
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

using WideBlockFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, int64_t, int64_t, float*,
                             int64_t);
template <std::size_t... I>
constexpr std::array<WideBlockFn, sizeof...(I)> wide_table(std::index_sequence<I...>) {
  return {&wide_block<int(I) + 1>...};
}
constexpr auto kWideBlocks = wide_table(std::make_index_sequence<MB_MAX>{});

int64_t wide_outputs(const ConvShape& s) { return (s.Ho() * s.W + VB - 1) / VB * VB; }

// ---- 2. channel lanes ----
constexpr int MV_MAX = 2;  // vectors of output channels per register block
// Pixels per register block for MV vectors: MV*PB accumulators + MV weight vectors + a broadcast <= NREG.
constexpr int pb_max(int mv) { return (NREG - 2 * mv - 2) / mv; }

// acc[PB][MV]: PB pixels of output row h from column w0, MV*VL channels; packed weights [c][p][q][MV*VL];
// result to t[(h*Wo + w0 + j) * MV*VL + lane]. KT: the kernel size when known at compile time (the course's 5
// and 7, whose tap loop then unrolls: no loop counter among the PB FMAs), else 0 and K is read at run time.
template <int MV, int PB, int KT>
void lanes_block(const float* __restrict x, const float* __restrict wpk, int64_t C, int64_t H, int64_t W,
                 int64_t K_, int64_t Wo, int64_t h, int64_t w0, float* __restrict t) {
  const int64_t K = KT ? KT : K_;
  vfloat acc[PB][MV];
#pragma GCC unroll 32
  for (int j = 0; j < PB; ++j)
#pragma GCC unroll 4
    for (int v = 0; v < MV; ++v) acc[j][v] = vfloat{};
  const float* wp = wpk;
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t p = 0; p < K; ++p) {
      const float* xr = x + (c * H + h + p) * W + w0;
      for (int64_t q = 0; q < K; ++q, wp += MV * VL) {
        const float* xq = xr + q;
        // Hides from the compiler that xq[j] is the next tap's xq[j-1]: it would otherwise keep the row in
        // scalar registers and broadcast each with a shuffle (register pressure, spills); a broadcast FMA from
        // memory costs no extra instruction.
        asm("" : "+r"(xq));
        vfloat wv[MV];
#pragma GCC unroll 4
        for (int v = 0; v < MV; ++v) wv[v] = loadu(wp + v * VL);
#pragma GCC unroll 32
        for (int j = 0; j < PB; ++j) {
          const float xs = xq[j];
#pragma GCC unroll 4
          for (int v = 0; v < MV; ++v) acc[j][v] += wv[v] * xs;
        }
      }
    }
  }
  float* tp = t + (h * Wo + w0) * MV * VL;
#pragma GCC unroll 32
  for (int j = 0; j < PB; ++j)
#pragma GCC unroll 4
    for (int v = 0; v < MV; ++v) storeu(tp + (j * MV + v) * VL, acc[j][v]);
}

using LanesBlockFn = void (*)(const float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                              int64_t, float*);
template <int MV, int KT, std::size_t... I>
constexpr std::array<LanesBlockFn, sizeof...(I)> lanes_table(std::index_sequence<I...>) {
  return {&lanes_block<MV, int(I) + 1, KT>...};
}
template <int KT>
struct LanesTables {
  static constexpr auto mv1 = lanes_table<1, KT>(std::make_index_sequence<pb_max(1)>{});
  static constexpr auto mv2 = lanes_table<2, KT>(std::make_index_sequence<pb_max(2)>{});
  static LanesBlockFn get(int64_t mv, int64_t pb) { return mv == 1 ? mv1[pb - 1] : mv2[pb - 1]; }
};
LanesBlockFn lanes_block_for(int64_t K, int64_t mv, int64_t pb) {
  switch (K) {
    case 5: return LanesTables<5>::get(mv, pb);
    case 7: return LanesTables<7>::get(mv, pb);
    default: return LanesTables<0>::get(mv, pb);
  }
}

// so[i * P + o] = t[o * width + i] for i < mcount, o < P: the accumulators (one pixel per row of t) to
// [m][h][w]. With AVX-512, 16x16 blocks are transposed in registers (64 shuffles per 256 floats instead of
// 256 strided scalar loads); the pixels past the last whole 16 and other targets use the scalar loop.
void transpose_out(const float* __restrict t, int64_t width, int64_t P, int64_t mcount, float* __restrict so) {
  int64_t o0 = 0;
#if defined(__AVX512F__)
  for (; o0 + 16 <= P; o0 += 16)
    for (int64_t v = 0; v * 16 < mcount; ++v) {
      __m512 r[16], u[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(t + (o0 + i) * width + v * 16);
      for (int i = 0; i < 16; i += 2) {
        u[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        u[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
      }
      for (int i = 0; i < 16; i += 4) {
        const __m512d a = _mm512_castps_pd(u[i]), b = _mm512_castps_pd(u[i + 1]);
        const __m512d c = _mm512_castps_pd(u[i + 2]), d = _mm512_castps_pd(u[i + 3]);
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
      }
      for (int h = 0; h < 16; h += 8)
        for (int i = 0; i < 4; ++i) {
          u[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0x88);
          u[h + i + 4] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0xdd);
        }
      for (int i = 0; i < 8; ++i) {
        r[i] = _mm512_shuffle_f32x4(u[i], u[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(u[i], u[i + 8], 0xdd);
      }
      const int64_t lanes = std::min<int64_t>(16, mcount - v * 16);
      for (int64_t i = 0; i < lanes; ++i) _mm512_storeu_ps(so + (v * 16 + i) * P + o0, r[i]);
    }
#endif
  for (int64_t i = 0; i < mcount; ++i)
    for (int64_t o = o0; o < P; ++o) so[i * P + o] = t[o * width + i];
}

// Fraction of the computed lanes that are outputs, for each kernel: the higher one runs.
double wide_useful(const ConvShape& s) { return double(s.Ho() * s.Wo()) / double(wide_outputs(s)); }
double lanes_useful(const ConvShape& s) {
  const int64_t vectors = (s.M + VL - 1) / VL;
  return double(s.M) / double(vectors * VL);
}

// Runs body(thread buffers..., b) over the images on every OpenMP thread. No exception may leave an OpenMP region
// (the runtime would call std::terminate and end the process): a failed allocation of a thread's buffers is kept
// and rethrown after the region (pybind11: MemoryError). Every thread still reaches the worksharing loop
// (skipping a barrier would hang the others); one without buffers skips its images, whose outputs do not
// matter once the call fails.
template <class Alloc, class Body>
void over_images(int64_t B, Alloc alloc, Body body) {
  std::exception_ptr error;
#pragma omp parallel
  {
    decltype(alloc()) buffers;
    bool ready = true;
    try {
      buffers = alloc();
    } catch (...) {
      ready = false;
#pragma omp critical(pyconv_cpu_fast_error)
      if (!error) error = std::current_exception();
    }
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b)
      if (ready) body(buffers, b);
    stream_fence();
  }
  if (error) std::rethrow_exception(error);
}

void conv_wide_rows(const float* x, const float* k, float* y, const ConvShape& s) {
  const int64_t C = s.C, H = s.H, W = s.W, M = s.M, K = s.K, Ho = s.Ho(), Wo = s.Wo();
  const int64_t wide = wide_outputs(s);
  const int64_t plane = wide + (K - 1) * W + K + VL;  // padded input plane: covers every over-read
  const int64_t nmb = (M + MB_MAX - 1) / MB_MAX;
  const int64_t out = M * Ho * Wo;  // one image's output

  // Weights repacked to [mb][c][p][q][MB_MAX] (tail blocks zero-filled), once per call.
  std::vector<float> wpk(static_cast<size_t>(nmb * C * K * K * MB_MAX), 0.0f);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t t = 0; t < C * K * K; ++t)
      wpk[((m / MB_MAX) * C * K * K + t) * MB_MAX + m % MB_MAX] = k[m * C * K * K + t];

  struct Buffers {
    std::vector<float> xp, yw, stage;
  };
  over_images(
      s.B,
      [&] {
        Buffers bu;
        bu.xp.assign(static_cast<size_t>(C * plane), 0.0f);
        bu.yw.resize(static_cast<size_t>(MB_MAX * wide));
        bu.stage.resize(static_cast<size_t>(out));
        return bu;
      },
      [&](Buffers& bu, int64_t b) {
        for (int64_t c = 0; c < C; ++c)
          std::memcpy(&bu.xp[c * plane], x + (b * C + c) * H * W, sizeof(float) * H * W);
        for (int64_t mb = 0; mb < nmb; ++mb) {
          const int64_t m0 = mb * MB_MAX, mcount = std::min<int64_t>(MB_MAX, M - m0);
          const float* wb = &wpk[mb * C * K * K * MB_MAX];
          // The packed weights keep stride MB_MAX; a tail block instantiates only the channels it has.
          const WideBlockFn block = kWideBlocks[mcount - 1];
          for (int64_t o = 0; o < wide; o += VB) block(bu.xp.data(), plane, wb, C, K, W, o, bu.yw.data(), wide);
          for (int64_t i = 0; i < mcount; ++i) {
            float* yo = &bu.stage[(m0 + i) * Ho * Wo];
            const float* yi = &bu.yw[i * wide];
            for (int64_t h = 0; h < Ho; ++h) std::memcpy(yo + h * Wo, yi + h * W, sizeof(float) * Wo);
          }
        }
        stream_copy(y + b * out, bu.stage.data(), out);
      });
}

void conv_channel_lanes(const float* x, const float* k, float* y, const ConvShape& s) {
  const int64_t C = s.C, H = s.H, W = s.W, M = s.M, K = s.K, Ho = s.Ho(), Wo = s.Wo();
  const int64_t P = Ho * Wo, out = M * P;
  // Channel blocks of MV_MAX vectors, the last one of the vectors that remain.
  const int64_t vectors = (M + VL - 1) / VL;
  const int64_t nmb = (vectors + MV_MAX - 1) / MV_MAX;
  const int64_t taps = C * K * K;

  // Weights repacked per block to [c][p][q][MV*VL] (lanes past M zero), once per call.
  std::vector<int64_t> block_off(nmb + 1, 0);
  for (int64_t mb = 0; mb < nmb; ++mb) {
    const int64_t mv = std::min<int64_t>(MV_MAX, vectors - mb * MV_MAX);
    block_off[mb + 1] = block_off[mb] + taps * mv * VL;
  }
  std::vector<float> wpk(static_cast<size_t>(block_off[nmb]), 0.0f);
  for (int64_t m = 0; m < M; ++m) {
    const int64_t mb = m / (MV_MAX * VL), lane = m % (MV_MAX * VL);
    const int64_t width = (block_off[mb + 1] - block_off[mb]) / taps;
    for (int64_t t = 0; t < taps; ++t) wpk[block_off[mb] + t * width + lane] = k[m * taps + t];
  }

  struct Buffers {
    std::vector<float> t, stage;
  };
  over_images(
      s.B,
      [&] {
        Buffers bu;
        bu.t.resize(static_cast<size_t>(P * MV_MAX * VL));
        bu.stage.resize(static_cast<size_t>(out));
        return bu;
      },
      [&](Buffers& bu, int64_t b) {
        const float* xb = x + b * C * H * W;
        for (int64_t mb = 0; mb < nmb; ++mb) {
          const int64_t mv = (block_off[mb + 1] - block_off[mb]) / (taps * VL);
          const int64_t width = mv * VL;
          const int64_t pbmax = pb_max(static_cast<int>(mv));
          // Each row in equal chunks of at most pbmax pixels (18 -> 18; 44 -> 22 + 22).
          const int64_t chunks = (Wo + pbmax - 1) / pbmax, pb = (Wo + chunks - 1) / chunks;
          const float* wb = &wpk[block_off[mb]];
          for (int64_t h = 0; h < Ho; ++h)
            for (int64_t w0 = 0; w0 < Wo; w0 += pb) {
              const int64_t n = std::min(pb, Wo - w0);
              const LanesBlockFn block = lanes_block_for(K, mv, n);
              block(xb, wb, C, H, W, K, Wo, h, w0, bu.t.data());
            }
          const int64_t m0 = mb * MV_MAX * VL, mcount = std::min<int64_t>(width, M - m0);
          transpose_out(bu.t.data(), width, P, mcount, &bu.stage[m0 * P]);
        }
        stream_copy(y + b * out, bu.stage.data(), out);
      });
}

}  // namespace

void conv_fwd_cpu_fast(const float* x, const float* k, float* y, const ConvShape& s) {
  if (lanes_useful(s) > wide_useful(s))
    conv_channel_lanes(x, k, y, s);
  else
    conv_wide_rows(x, k, y, s);
}

// Float32 sums in a different order than the reference: held to 1e-5 relative, like cpu-naive.
PYCONV_REGISTER_CPU_CONV(CpuConvVariant{
    .name = "cpu-fast",
    .step = 1,
    .summary = "OpenMP over images, register-blocked SIMD: pixel lanes (few channels) or channel lanes",
    .rtol = 1e-5,
    .launch = conv_fwd_cpu_fast,
    .roles = {.m2 = default_role()},
});

}  // namespace pyconv
