// How steps 22 and 23 spread an image's 8-pixel n-tiles over a block's warps: MT m-tiles per pass (2 when M > 16,
// each B load feeding both) and NT n-tiles per warp, from a fixed set of instantiated (MT, NT) kernels.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

namespace pyconv {

// Warps per block at most, per accumulator tiles per warp (MT x NT): two blocks per SM fit in the register file
// (-Xptxas -v, CUDA 13, sm_90: these counts do not spill).
__host__ __device__ constexpr int lean_max_warps(int acc_tiles) { return acc_tiles <= 3 ? 16 : 8; }

// The configuration (a Config with fields mt and nt, among `configs`) for M filters and `tiles` n-tiles, and the
// block's warps. MT = 2 when M > 16, else 1. One m-tile and more than 32 n-tiles: 6 per warp in blocks of up to 8
// warps, which halves the A fragment loads of 3 per warp in 16 (measured on step 22 while developing, not kept in
// results/: H200, NVBench, batch 10000, sp19 conv2 0.196 ms against 0.207, sp18 conv2 0.423 against 0.483; 2 per
// warp: 0.288). Else the fewest n-tiles per warp that let lean_max_warps cover an image in one group; the largest
// beyond that (the groups then loop). `configs` must hold (1, 6) and, for each MT, its NT in increasing order.
template <typename Config, size_t N>
const Config& pick_lean_tiles(const Config (&configs)[N], int M, int tiles, int& warps) {
  const int mt = M > 16 ? 2 : 1;
  const Config* c = nullptr;
  if (mt == 1 && tiles > 32) {
    c = std::find_if(configs, configs + N, [](const Config& cc) { return cc.mt == 1 && cc.nt == 6; });
    warps = std::min(lean_max_warps(6), (tiles + 5) / 6);
    return *c;
  }
  for (const Config& cc : configs) {
    if (cc.mt != mt) continue;
    c = &cc;  // the last of this MT when none covers the image
    if (tiles <= cc.nt * lean_max_warps(cc.mt * cc.nt)) break;
  }
  warps = std::min(lean_max_warps(c->mt * c->nt), (tiles + c->nt - 1) / c->nt);
  return *c;
}

}  // namespace pyconv
