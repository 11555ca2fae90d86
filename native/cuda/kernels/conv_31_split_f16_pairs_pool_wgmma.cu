// Step 31 -- gpu-split-f16-pairs-pool-wgmma: step 30 with tanh + max-pool 2/2 fused: the un-pooled output never
// reaches DRAM.
//
// Why: on the sweep's rows with tanh + max-pool after the layer, step 30 ran as two passes, the convolution's full
// output written to DRAM and read back by the shared pool kernel: 6.2 ms of s30's 32.3 (C=24 96x96 M=53 K=3), 4.1
// of s05's 14.8 (results/bench-nvidia-h200-2026-11-29-sweep-c8-stacked.json, ms at batch 10000), the pass moving
// 1.25x the conv output's bytes at the copy rate.
//
// How (step 30's kernel, pairs_wgmma.cuh; what differs is in the producers, wgmma_producers.cuh):
// - A 2x2 window's four outputs are two image rows apart, and step 30's tiles run 128 positions along the flat grid
//   of rows, so a window is seldom in one tile. A block therefore takes units: runs of consecutive tiles that cover
//   whole pooled rows of one image (2 x pool_rows image rows, the unit's tiles 128 - (K - 1) outputs apart from its
//   first pixel), units blockIdx.x, + gridDim.x, ...
// - The producers store each output into the block's ring (global memory that stays in L2: 132 blocks x M x the
//   ring's 128 - (K - 1) + 2 W floats, at most a few MB), and once a tile completes pooled rows they wait for each
//   other (a named barrier of the producers alone) and pool them from the ring: tanh of each window's maximum
//   (tanh is increasing, so one tanh a pooled value), stored to y[B][M][Ho / 2][Wo / 2]. The consumers meanwhile
//   multiply the next tile; the producers' next store waits for every producer, so no ring slot is reused early.
// - The rows a unit takes: an image's pooled rows cut into equal parts, the cut whose blocks run the fewest tiles in
//   a chunk of images (plan_units): whole images leave blocks idle in a chunk's last round, small units add the
//   tiles their row pairs overlap.
// - Exact as step 30 (its tolerance): the same sums, the maximum exact, tanhf.
#include "cuda/kernels/pairs_wgmma.cuh"
#include "cuda/runtime/registry.cuh"

namespace pyconv {

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-split-f16-pairs-pool-wgmma",
    .step = 31,
    .summary = "conv + tanh + 2x2 max pool on step 30's kernel: blocks take runs of tiles covering whole pooled "
               "rows, the producers keep the un-pooled outputs in an L2-resident ring and pool each row pair as it "
               "completes",
    .epilogue = Epilogue::TanhMaxPool2,
    .launch = launch<true>,
    .supports = supports<true>,
    .graph_capturable = false,  // the planes' workspace and the rings grow (move) when a larger layer comes
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
