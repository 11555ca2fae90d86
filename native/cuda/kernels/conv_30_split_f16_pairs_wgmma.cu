// Step 30 -- gpu-split-f16-pairs-wgmma: step 29 with the wgmma's operands swapped: 64 positions of the slab in its
// M, the (filter, tap column) pairs in its N, so that a layer's pairs are padded to a multiple of 8, not of 64.
//
// Why: on the sweep's worst row, s08 (C=11 31x31 M=27 K=5: 135 pairs), step 29 multiplies 3 groups of 9 filters x 5
// taps in 64-row warpgroups, 192 rows for 135 pairs, and its tensor pipe is 53% active (Nsight Compute in step 29's
// header): cuDNN FP32's FFT was faster there (results/bench-nvidia-h200-2026-11-29-sweep-pool-flat.json, 0.87x).
//
// How (step 29's slab, producers, staging and epilogue; what differs):
// - A tile's 128 positions are two warpgroups' 64 (the wgmma's M, read from the slab as its A operand), and every
//   consumer warpgroup multiplies them by all N pairs of a group (its B operand, the weights): N = R rounded up to 8,
//   at most N_MAX. hi and lo accumulators of N / 2 floats a thread, three wgmmas per kh, band and k16 step as in
//   step 29. The groups: the count whose wgmmas cost the fewest cycles by the model in plan() (pairs padded to 8, a
//   narrow wgmma charged for reading its 64-row A from shared memory), among those that fit shared memory.
// - The staging area keeps step 29's layout (a row of positions per pair), so the producers' epilogue is unchanged;
//   a thread's accumulators are a pair column each, stored one float at a time, with rows TILE + 4 floats apart so
//   that a warp's 32 stores (8 positions x 4 pairs) fall in distinct banks.
// - Few channels: where C <= 8 the planes and slab hold bands of 8 channels, a slab row [x hi | x lo] of 32 bytes,
//   one k16 step deep: two wgmmas a tap row, against weight rows [w hi | 0] (the hi product) and [w lo | w hi] (both
//   corrections), where a band of 16 took three half-empty ones. Where C <= 4, rows = min(K, 8 / C) image rows are
//   stacked in a pixel's 8 channels (split_planes.cuh's split_images_stacked) and a step of two wgmmas covers that
//   many tap rows, the slab row `rows` image rows on per step: K taps in ceil(K / rows) steps.
// - Refused: K other than 1, 3, 5, 7, shared memory beyond 227 KB, and any GPU or build without sm_90a code
//   (wgmma_probe.cuh).
// - Range: as steps 19-29, a value beyond the FP16 range (|v| > 65504) becomes inf, and the outputs it reaches inf
//   or NaN, never a quietly wrong number.
// Measured (results/bench-nvidia-h200-2026-11-29-sweep-step30.json, `invoke bench --sweep`, H200, batch 10000; ms,
// step 29 -> this step; cuDNN FP32): the best float32 variant on 62 of the 80 rows; against step 29 faster on 72 of
// the 78 rows both run (geometric mean of the times 0.91x): s08 1.94 -> 1.53 (1.66: 1.09x, was the sweep's worst row
// at 0.87x), s37 2.03 -> 1.79 (2.19), s16 1.45 -> 1.19, s38 3.37 -> 2.41, s07 20.9 -> 14.2 (two slab buffers fit
// beside 40 pairs' weights); s00 (C=30 81x81 M=46 K=7, refused by step 29) 68.9 (step 26 88.8 in the last sweep;
// 459). Slower on 6, by at most 8% (s13, C=26 61x61 M=26 K=7, 18.9 -> 20.4; s17 1.67 -> 1.69), where the padding
// step 29 multiplies is small (s17: 125 pairs in 128 rows); `final` times both per shape. The sweep's geometric mean
// over the 80 rows 2.75x -> 2.99x cuDNN FP32, its worst row s20 (C=3 47x47 M=32 K=3, step 21) at 1.03x.
// Bands of 8 channels (results/bench-nvidia-h200-2026-11-29-sweep-c8-bands.json, ms, against the sweep above):
// s05 12.4 -> 10.6, s06 18.5 -> 15.4, s09 18.6 -> 15.5, s34 2.87 -> 2.24, s18 0.865 -> 0.731, s20 (C=3 47x47 M=32
// K=3) 2.66 -> 2.33, there now the best variant (1.15x cuDNN FP32; the sweep's worst row now s08, 1.12x). Image rows
// stacked where C <= 4 (-sweep-c8-stacked.json, against -c8-bands): s11 (C=4 94x94 M=32 K=5) 14.1 -> 13.0, s36
// (C=2, K=5) 1.93 -> 1.72, s20 2.33 -> 2.30, s15 (C=3 69x69 K=3) 3.82 -> 3.82; step 20 stays faster on s11 (9.19),
// s15 (3.52), s36 and s39 (C=6). The sweep's geometric mean 2.99x -> 3.00x (2.998), its worst row s08 at 1.08x: in
// the same runs cuDNN FP32's FFT got faster on s07 (140 -> 81 ms) and s23 (93 -> 82).
// Nsight Compute on those rows (batch 2000, locked clocks): s11, this kernel 1.45 ms for each 904-image chunk of
// planes (2 groups of 16 filters, N = 80, 3 steps) beside 156 us of split, step 20 2.42 ms for all 2000 images;
// s06, 1.89 ms a chunk; warps stalled at the named barriers 3.5x (s06) to 9x (s20) as long as on memory, issue
// slots 42-48% busy, the shared-memory pipe (L1/TEX) 54-66%: the tensor work is not what limits these rows.
// Nsight Compute (batch 2000, the profiler's locked clocks): s08, this kernel 332 us (step 29 431) beside the planes'
// split 55 (cuDNN FP32's FFT 429 in all), issue slots 38% busy, one block of 12 warps per SM; s13, two launches of
// 637 us (one slab buffer) against step 29's three of 383, issue slots 25% against 27% busy.
// Tried and dropped (each a full `invoke bench --sweep` or a probe on the H200, batch 10000):
// - ping-pong consumers: the warpgroups issuing their wgmmas in turn (named barriers), each staging while the other's
//   run, the producers in halves that wait only for the warpgroups whose positions they read: s08 1.53 -> 1.50 ms
//   (Nsight Compute 332 -> 326 us), s21 -6%, but s07 14.2 -> 17.3, s18 +10%, s16 +7%, s04 +5% (a probe, median of
//   5, 16 rows): staging is not what the tensor cores wait for.
// - one slab buffer charged a quarter more in the grouping's model, so that s13 took 3 groups of N = 64 with two
//   buffers: 21.0 ms against 20.4-20.6 (a probe, median of 5).
// - hi and lo from one wgmma of 2N columns (the weights' hi and lo tiles are consecutive rows) where N <= 128, the
//   slab's 64 rows read twice per kh, band and k16 step instead of three times: over the sweep's 80 rows the times
//   0.5% slower in geometric mean (0.97x to 1.05x a row), the sweep's geometric mean 2.98x: reading A is not what
//   limits it.
#include "cuda/kernels/pairs_wgmma.cuh"
#include "cuda/runtime/registry.cuh"

namespace pyconv {

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-split-f16-pairs-wgmma",
    .step = 30,
    .summary = "step 29 with the wgmma's operands swapped: 64 positions in its M, the (filter, tap column) pairs in "
               "its N (padded to 8, not 64); warp-specialised, the filters in groups over the same slab; C <= 8 in "
               "bands of 8 channels, image rows stacked in them where C <= 4",
    .launch = launch<false>,
    .supports = supports<false>,
    .graph_capturable = false,  // the planes' workspace grows (moves) when a larger layer comes
    .roles = {.m3 = on_request(kNotM3), .m4 = on_request(kNotM4), .final = candidate()},
});

}  // namespace pyconv
