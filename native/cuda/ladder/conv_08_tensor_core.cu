// Step 8 -- gpu-tensor-core: implicit GEMM on the tensor cores (mma.sync m16n8k8 TF32) with 3xTF32 split precision.
// Measurements and what was tried: docs/ladder-findings/08.md (docs/ladder.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/ladder/conv_08_tensor_core.cuh"
#include "cuda/runtime/registry.cuh"
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/mma_tf32.cuh"

namespace pyconv {
namespace {

constexpr size_t SMEM_TARGET = 48 * 1024;   // chunk channels so that a block fits this (occupancy)
constexpr size_t SMEM_LIMIT = 160 * 1024;   // one channel above the target may use up to this (A100 allows 163 KB)

struct TcParams {
  int B, C, H, W, M, K, Ho, Wo;
  int TH, TW, THin, TWin, tiles_w, tiles_per_img;
  long long tiles;
  int Cc, nchunks;     // channels per chunk, number of chunks
  int union_floats;    // input tile / output staging (aliased), multiple of 4
  int w_floats;        // weight fragments of one chunk
};

__device__ __forceinline__ void split_tf32(float v, uint32_t& big, uint32_t& small) {
  big = to_tf32(v);
  small = to_tf32(v - __uint_as_float(big));
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  pyconv::mma_tf32(d, a[0], a[1], a[2], a[3], b0, b1);
}

// __maxnreg__: left to itself ptxas caps the small configurations at 64 registers and spills a few bytes.
template <int MT, int NT, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) __maxnreg__(NT <= 5 ? 80 : 128)
    conv_fwd_gpu_tensor_core_kernel(const float* __restrict__ x, const float* __restrict__ k,
                                    float* __restrict__ y, const TcParams p) {
  static_assert(WARPS % MT == 0, "the warps of a block are split evenly across its m-tiles");
  constexpr int NG = WARPS / MT;  // warps sharing one m-tile (each takes every NG-th n-tile)
  constexpr int THREADS = WARPS * 32;
  extern __shared__ float4 smem4[];
  float* s_in = reinterpret_cast<float*>(smem4);  // input tile; after the MMAs, the output staging
  float* s_w = s_in + p.union_floats;            // weights of a chunk in fragment order (float4 per lane)
  int* s_kofs = reinterpret_cast<int*>(s_w + p.w_floats);  // tap -> offset in the input tile

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int mt = warp % MT, ng = warp / MT;
  const int m_block = blockIdx.y * MT * 16;
  const int KK = p.K * p.K, P = p.TH * p.TW;
  const int in_ch = p.THin * p.TWin;

  // Column g of each of this warp's n-tiles: the pixel's top-left offset inside the input tile (0 past the tile,
  // whose results are never stored).
  int pix_off[NT];
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    const int n = (ng + i * NG) * 8 + g;
    pix_off[i] = n < P ? (n / p.TW) * p.TWin + n % p.TW : 0;
  }

  for (long long tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
    const long long b = tile / p.tiles_per_img;
    const int r = int(tile % p.tiles_per_img);
    const int h0 = (r / p.tiles_w) * p.TH, w0 = (r % p.tiles_w) * p.TW;

    float acc[NT][4];
#pragma unroll
    for (int i = 0; i < NT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

    for (int chunk = 0; chunk < p.nchunks; ++chunk) {
      const int c0 = chunk * p.Cc, cc = min(p.Cc, p.C - c0);
      const int kc = cc * KK, ksteps = (kc + 7) / 8;
      __syncthreads();  // every warp is done with the previous tile / chunk (s_in, s_w, s_kofs)
      if (p.nchunks > 1 || tile == blockIdx.x) {
        // Weights in fragment order: s_w[((ks * MT + mt) * 32 + lane) * 4 + reg], zero past M and past kc.
        const int nw = ksteps * MT * 128;
        for (int i = tid; i < nw; i += THREADS) {
          const int reg = i & 3, l = (i >> 2) & 31, tm = (i >> 7) % MT, ks = (i >> 7) / MT;
          const int row = (l >> 2) + 8 * (reg & 1), col = (l & 3) + 4 * (reg >> 1);
          const int m = m_block + tm * 16 + row, kl = ks * 8 + col;
          float v = 0.0f;
          if (m < p.M && kl < kc) v = __ldg(&k[(size_t(m) * p.C + c0) * KK + kl]);  // taps of c0.. are contiguous
          s_w[i] = v;
        }
        // Padded taps point at offset 0: the pixel's own x[c0][h][w], finite whenever the true output is, and
        // multiplied by a zero weight.
        for (int i = tid; i < ksteps * 8; i += THREADS) {
          int off = 0;
          if (i < kc) {
            const int ci = i / KK, pq = i % KK;
            off = ci * in_ch + (pq / p.K) * p.TWin + pq % p.K;
          }
          s_kofs[i] = off;
        }
      }
      // Input tile with halo; rows/columns past the image are zero (they feed only outputs that are not stored).
      const int n_in = cc * in_ch;
      for (int i = tid; i < n_in; i += THREADS) {
        const int ci = i / in_ch, rr = (i % in_ch) / p.TWin, col = i % p.TWin;
        const int gh = h0 + rr, gw = w0 + col;
        float v = 0.0f;
        if (gh < p.H && gw < p.W) v = __ldg(&x[((size_t(b) * p.C + c0 + ci) * p.H + gh) * p.W + gw]);
        s_in[i] = v;
      }
      __syncthreads();

      const float4* s_w4 = reinterpret_cast<const float4*>(s_w);
      for (int ks = 0; ks < ksteps; ++ks) {
        const float4 wa = s_w4[(ks * MT + mt) * 32 + lane];
        uint32_t a_big[4], a_small[4];
        split_tf32(wa.x, a_big[0], a_small[0]);
        split_tf32(wa.y, a_big[1], a_small[1]);
        split_tf32(wa.z, a_big[2], a_small[2]);
        split_tf32(wa.w, a_big[3], a_small[3]);
        const int ko0 = s_kofs[ks * 8 + t], ko1 = s_kofs[ks * 8 + t + 4];
#pragma unroll
        for (int i = 0; i < NT; ++i) {
          if ((ng + i * NG) * 8 < P) {  // warp-uniform: the n-tile holds at least one real pixel
            uint32_t b0_big, b0_small, b1_big, b1_small;
            split_tf32(s_in[ko0 + pix_off[i]], b0_big, b0_small);
            split_tf32(s_in[ko1 + pix_off[i]], b1_big, b1_small);
            mma_tf32(acc[i], a_big, b0_small, b1_small);
            mma_tf32(acc[i], a_small, b0_big, b1_big);
            mma_tf32(acc[i], a_big, b0_big, b1_big);
          }
        }
      }
    }

    // Stage [MT*16][P] in shared memory (aliasing the input tile), then store rows of pixels coalesced.
    __syncthreads();
    float* s_out = s_in;
#pragma unroll
    for (int i = 0; i < NT; ++i) {
      const int n = (ng + i * NG) * 8 + 2 * t;
      const int row = mt * 16 + g;
      if (n < P) {
        s_out[row * P + n] = acc[i][0];
        s_out[(row + 8) * P + n] = acc[i][2];
      }
      if (n + 1 < P) {
        s_out[row * P + n + 1] = acc[i][1];
        s_out[(row + 8) * P + n + 1] = acc[i][3];
      }
    }
    __syncthreads();
    const int rows = min(MT * 16, p.M - m_block);
    for (int i = tid; i < rows * P; i += THREADS) {
      const int ml = i / P, n = i % P;
      const int h = h0 + n / p.TW, w = w0 + n % p.TW;
      if (h < p.Ho && w < p.Wo) y[((size_t(b) * p.M + m_block + ml) * p.Ho + h) * p.Wo + w] = s_out[i];
    }
  }
}

using TcKernel = void (*)(const float*, const float*, float*, const TcParams);

struct TcEntry {
  TensorCoreConfig cfg;
  TcKernel kernel;
};

#define PYCONV_TC(MT, NT, WARPS) \
  TcEntry { {"tc-m" #MT "-n" #NT "-w" #WARPS, MT, NT, WARPS}, conv_fwd_gpu_tensor_core_kernel<MT, NT, WARPS> }

const std::vector<TcEntry>& tc_entries() {
  static const std::vector<TcEntry> v = {
      PYCONV_TC(1, 6, 8), PYCONV_TC(1, 5, 8), PYCONV_TC(1, 6, 4), PYCONV_TC(1, 12, 4), PYCONV_TC(1, 3, 8),
      PYCONV_TC(2, 6, 8), PYCONV_TC(2, 4, 8), PYCONV_TC(2, 8, 4),
      PYCONV_TC(4, 6, 8), PYCONV_TC(4, 4, 8), PYCONV_TC(4, 3, 8),
  };
  return v;
}
#undef PYCONV_TC

size_t round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

// Tile sizes and chunking for one configuration; returns "" or why the shape cannot run.
std::string plan(const TensorCoreConfig& c, const ConvShape& s, TcParams& p) {
  const int64_t Ho = s.Ho(), Wo = s.Wo();
  if (s.H > 1000000 || s.W > 1000000 || s.C > 1000000 || s.M > 1000000)
    return "gpu-tensor-core: dimensions above 10^6 are not supported (32-bit tile offsets)";
  const int64_t m_blocks = (s.M + 16 * c.m_tiles - 1) / (16 * c.m_tiles);
  if (m_blocks > 65535) return "gpu-tensor-core: too many output channels for the grid (M/16 > 65535)";
  const int64_t pcap = int64_t(c.warps / c.m_tiles) * c.n_tiles * 8;
  int64_t TW = std::min<int64_t>(Wo, pcap);
  const int64_t tiles_w = (Wo + TW - 1) / TW;
  TW = (Wo + tiles_w - 1) / tiles_w;
  int64_t TH = std::min<int64_t>(Ho, pcap / TW);
  const int64_t tiles_h = (Ho + TH - 1) / TH;
  TH = (Ho + tiles_h - 1) / tiles_h;
  const int64_t THin = TH + s.K - 1, TWin = TW + s.K - 1, P = TH * TW;
  auto bytes = [&](int64_t cc, int64_t& uf, int64_t& wf) {
    const int64_t kp = int64_t(round_up(size_t(cc * s.K * s.K), 8));
    uf = int64_t(round_up(size_t(std::max(cc * THin * TWin, int64_t(c.m_tiles) * 16 * P)), 4));
    wf = kp / 8 * c.m_tiles * 128;
    return size_t(uf + wf + kp) * 4;
  };
  int64_t uf = 0, wf = 0;
  const size_t one = bytes(1, uf, wf);
  if (one > SMEM_LIMIT)
    return "gpu-tensor-core: one input channel of a " + std::to_string(TH) + "x" + std::to_string(TW) +
           " tile with its " + std::to_string(s.K) + "x" + std::to_string(s.K) + " weights needs " +
           std::to_string(one / 1024) + " KB of shared memory (limit " + std::to_string(SMEM_LIMIT / 1024) +
           " KB): K is too large for this kernel";
  const size_t budget = std::max(one, SMEM_TARGET);
  int64_t cc = 1;
  while (cc < s.C && bytes(cc + 1, uf, wf) <= budget) ++cc;
  bytes(cc, uf, wf);
  p.B = int(s.B); p.C = int(s.C); p.H = int(s.H); p.W = int(s.W); p.M = int(s.M); p.K = int(s.K);
  p.Ho = int(Ho); p.Wo = int(Wo);
  p.TH = int(TH); p.TW = int(TW); p.THin = int(THin); p.TWin = int(TWin);
  p.tiles_w = int(tiles_w);
  p.tiles_per_img = int(tiles_w * tiles_h);
  p.tiles = s.B * tiles_w * tiles_h;
  p.Cc = int(cc);
  p.nchunks = int((s.C + cc - 1) / cc);
  p.union_floats = int(uf);
  p.w_floats = int(wf);
  return "";
}

size_t smem_bytes(const TcParams& p, const TensorCoreConfig& c) {
  const size_t kp = round_up(size_t(p.Cc) * p.K * p.K, 8);
  return (size_t(p.union_floats) + size_t(p.w_floats) + kp) * 4;
}

std::string tensor_core_supports(const ConvShape& s) {
  return tensor_core_config_supports(tensor_core_default_config(s), s);
}

}  // namespace

const std::vector<TensorCoreConfig>& tensor_core_configs() {
  static const std::vector<TensorCoreConfig> v = [] {
    std::vector<TensorCoreConfig> out;
    for (const auto& e : tc_entries()) out.push_back(e.cfg);
    return out;
  }();
  return v;
}

int tensor_core_default_config(const ConvShape& s) {
  // M <= 16: one m-tile, 384 pixels per block; M <= 32: two m-tiles; more: four (each warp keeps 24 accumulators).
  if (s.M <= 16) return 0;
  if (s.M <= 32) return 5;
  return 8;
}

std::string tensor_core_config_supports(int config, const ConvShape& s) {
  if (config < 0 || config >= int(tc_entries().size()))
    return "gpu-tensor-core: no configuration " + std::to_string(config);
  TcParams p{};
  return plan(tc_entries()[size_t(config)].cfg, s, p);
}

void conv_fwd_gpu_tensor_core_config(int config, const float* x, const float* k, float* y, const ConvShape& s,
                                     cudaStream_t st) {
  const std::string why = tensor_core_config_supports(config, s);
  if (!why.empty()) throw std::invalid_argument(why);
  const TcEntry& e = tc_entries()[size_t(config)];
  TcParams p{};
  plan(e.cfg, s, p);
  const size_t smem = smem_bytes(p, e.cfg);
  const int threads = e.cfg.warps * 32;
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(e.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int dev = 0, sms = 0, per_sm = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, e.kernel, threads, smem));
  if (per_sm < 1) throw std::invalid_argument("gpu-tensor-core: " + std::string(e.cfg.name) + " cannot fit on an SM");
  // Blocks loop over tiles: enough of them for a few waves, few enough that each loads its weights once.
  const long long blocks = std::min<long long>(p.tiles, (long long)(sms) * per_sm * 4);
  const int m_blocks = int((s.M + 16 * e.cfg.m_tiles - 1) / (16 * e.cfg.m_tiles));
  const dim3 grid{unsigned(blocks), unsigned(m_blocks), 1u};
  e.kernel<<<grid, threads, smem, st>>>(x, k, y, p);
  CUDA_CHECK_LAUNCH();
}

void conv_fwd_gpu_tensor_core(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  conv_fwd_gpu_tensor_core_config(tensor_core_default_config(s), x, k, y, s, st);
}

std::string conv_supports_gpu_tensor_core(const ConvShape& s) { return tensor_core_supports(s); }

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-tensor-core",
    .step = 8,
    .summary = "implicit GEMM on tensor cores (mma.sync TF32), 3xTF32 split for ~fp32 accuracy",
    .precision = Precision::Tf32x3,
    .launch = conv_fwd_gpu_tensor_core,
    .supports = conv_supports_gpu_tensor_core,
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
