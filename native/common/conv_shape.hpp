// The one convolution the whole project computes, and its argument checks (shared by the CPU and CUDA modules).
// Semantics: valid (no padding), stride 1, no bias, cross-correlation (no kernel flip):
//   y[b][m][h][w] = sum_{c,p,q} x[b][c][h+p][w+q] * k[m][c][p][q]
//   x[B][C][H][W], k[M][C][K][K] -> y[B][M][H-K+1][W-K+1]
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace pyconv {

struct ConvShape {
  int64_t B = 0, C = 0, H = 0, W = 0, M = 0, K = 0;
  int64_t Ho() const { return H - K + 1; }
  int64_t Wo() const { return W - K + 1; }
  int64_t x_size() const { return B * C * H * W; }
  int64_t k_size() const { return M * C * K * K; }
  int64_t y_size() const { return B * M * Ho() * Wo(); }
  double flops() const { return 2.0 * double(B) * M * Ho() * Wo() * C * K * K; }
  std::string str() const {
    return "B=" + std::to_string(B) + " C=" + std::to_string(C) + " H=" + std::to_string(H) +
           " W=" + std::to_string(W) + " M=" + std::to_string(M) + " K=" + std::to_string(K);
  }
};

// Throws std::invalid_argument (pybind11: ValueError) naming what is wrong.
inline ConvShape make_conv_shape(int64_t B, int64_t C, int64_t H, int64_t W, int64_t M, int64_t Cw,
                                 int64_t Kh, int64_t Kw) {
  if (B < 1 || C < 1 || H < 1 || W < 1 || M < 1 || Kh < 1 || Kw < 1)
    throw std::invalid_argument("conv: every dimension must be >= 1");
  if (Cw != C)
    throw std::invalid_argument("conv: x has " + std::to_string(C) + " channels but k expects " +
                                std::to_string(Cw));
  if (Kh != Kw)
    throw std::invalid_argument("conv: kernel must be square, got " + std::to_string(Kh) + "x" +
                                std::to_string(Kw));
  if (Kh > H || Kw > W)
    throw std::invalid_argument("conv: kernel " + std::to_string(Kh) + "x" + std::to_string(Kw) +
                                " is larger than the input " + std::to_string(H) + "x" + std::to_string(W));
  ConvShape s;
  s.B = B; s.C = C; s.H = H; s.W = W; s.M = M; s.K = Kh;
  return s;
}

}  // namespace pyconv
