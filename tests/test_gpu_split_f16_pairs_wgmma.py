"""Step 30 (gpu-split-f16-pairs-wgmma) at the edges of what it changes in step 29: 64 positions as the wgmma's M,
two warpgroups a tile, and the (filter, tap column) pairs as its N, padded to a multiple of 8 from 16 to 136
(every N built: R = 7 to 136 and the sweep's rows), more than 136 pairs in filter groups over the same slab (the
group count chosen by its cost among those that fit shared memory: the sweep's s00, refused by step 29, runs in 4
groups), K = 1 to 7, tiles that start at each image's first row or run on across images, channel counts that pad
to 8 (two wgmmas a tap row: the slab's [x hi | x lo] rows against [w hi | 0] and [w lo | w hi]; where C <= 4,
8 / C image rows stacked in a pixel's 8 channels, so K taps take ceil(K / rows) steps), to 16 or to several bands
of 32, one or two slab buffers, persistent blocks over many tiles, and a batch cut into
chunks of planes. The FP16-range contract: an input beyond 65504 reaches its outputs as inf or NaN, never as a wrong finite
number."""

from __future__ import annotations

import pytest
from built_variants import needs
from gpu_helpers import (
    check_beyond_fp16_range,
    check_layers_in_turn,
    check_refused_for_shared_memory,
    check_shape,
    gpu,
    requires_gpu,
    requires_gpu_module,
)

NAME = "gpu-split-f16-pairs-wgmma"
SEED = 3030
pytestmark = needs(NAME)  # a student handout leaves the ladder out

# (B, C, H, W, M, K); R = M x K pairs, N = R rounded up to 8 (at least 16)
SHAPES = [
    (3, 1, 7, 7, 1, 7),        # R = 7: N = 16, C = 1 padded to 16, one output pixel
    (5, 2, 4, 4, 3, 3),        # R = 9: N = 16, Ho*Wo = 4
    (2, 1, 5, 5, 6, 3),        # R = 18: N = 24, 3 x 3 outputs in a 5-wide flat grid
    (7, 3, 9, 11, 7, 3),       # R = 21: N = 24, a rectangular image
    (1, 3, 3, 3, 9, 3),        # R = 27: N = 32, image = kernel
    (1, 1, 7, 7, 5, 7),        # R = 35: N = 40
    (2, 3, 9, 9, 15, 3),       # R = 45: N = 48
    (2, 4, 10, 10, 52, 1),     # R = 52: N = 56, K = 1
    (4, 11, 31, 31, 12, 5),    # R = 60: N = 64
    (2, 4, 10, 10, 64, 1),     # R = 64: N = 64
    (3, 6, 14, 13, 13, 5),     # R = 65: N = 72
    (2, 5, 11, 11, 27, 3),     # R = 81: N = 88
    (2, 32, 20, 20, 32, 3),    # R = 96: N = 96, two k16 steps per kh
    (2, 29, 29, 29, 19, 5),    # the sweep's s37 at batch 2: R = 95, N = 96
    (2, 3, 47, 47, 32, 3),     # the sweep's s20 at batch 2: R = 96, C = 3 in a band of 8
    (2, 7, 29, 29, 19, 3),     # the sweep's s18 at batch 2: R = 57, N = 64, C = 7
    (2, 8, 20, 20, 17, 7),     # R = 119: N = 120, C = 8 fills a band of 8, K = 7
    (2, 4, 94, 94, 32, 5),     # the sweep's s11 at batch 2: 160 pairs, 2 groups of 16 filters, C = 4: 3 steps
    # image rows stacked where C <= 4: K taps in ceil(K / rows) steps of rows = min(K, 8 / C)
    (2, 3, 69, 69, 19, 3),     # the sweep's s15 at batch 2: C = 3, 2 rows a step: 2 steps
    (2, 4, 20, 20, 9, 7),      # C = 4, K = 7: 4 steps, the last half past the taps
    (3, 2, 15, 17, 11, 7),     # C = 2, K = 7: 4 rows a step, 2 steps
    (2, 2, 46, 46, 16, 5),     # the sweep's s36 at batch 2: C = 2, K = 5: 2 steps
    (2, 1, 12, 12, 8, 5),      # C = 1, K = 5: one step of 5 rows
    (4, 3, 5, 6, 4, 5),        # C = 3, K = 5 = H: 3 steps, the stacked rows past the image's last zero
    (2, 6, 13, 13, 34, 3),     # R = 102: N = 104
    (2, 6, 13, 13, 35, 3),     # R = 105: N = 112
    (2, 6, 13, 13, 39, 3),     # R = 117: N = 120
    (3, 9, 31, 31, 25, 5),     # R = 125: N = 128, C = 9 pads to 16 (the fewest channels a band of 16 takes)
    (2, 15, 24, 24, 18, 7),    # R = 126: N = 128, K = 7
    (2, 5, 12, 12, 128, 1),    # R = 128: N = 128
    (2, 11, 31, 31, 27, 5),    # the sweep's s08 at batch 2: R = 135, N = 136, one group
    (2, 5, 12, 12, 136, 1),    # R = 136: N = 136, the most a group holds
    (2, 4, 12, 12, 137, 1),    # 137 pairs: 2 groups of 69 filters, the last of 68
    (2, 15, 24, 24, 38, 7),    # 266 pairs: 2 groups of 19 filters
    (2, 8, 16, 16, 50, 3),     # 150 pairs: 2 groups of 25 filters
    (3, 6, 10, 10, 64, 7),     # 448 pairs (the sweep's largest M x K): 4 groups of 16 filters
    (3, 32, 12, 12, 40, 7),    # 280 pairs in 4 groups of 10 filters, 63 KB of weights each: launches of 2 groups
    (300, 26, 26, 26, 25, 5),  # the sweep's s17 at batch 300: 1800 tiles over the persistent blocks
    (1, 40, 12, 12, 10, 3),    # C = 40 pads to 64: two bands
    (2, 50, 9, 9, 12, 3),      # C = 50 pads to 64: two bands
    (2, 70, 9, 9, 12, 1),      # C = 70 pads to 96: three bands
    (1, 2, 150, 130, 6, 3),    # a rectangular image of 19.5K pixels
    (257, 2, 6, 6, 8, 5),      # 257 images of 4 pixels: tiles run on across images
    (45, 32, 96, 96, 5, 3),    # 1.2 MB of planes per image
    (3, 16, 1500, 150, 3, 1),  # 14 MB of planes per image, K = 1
    (25, 96, 200, 200, 4, 1),  # 15 MB per image, K = 1: the batch in two chunks
    (2, 2, 40, 3, 5, 3),       # Wo = 1: a third of the flat grid is stored
    (60, 11, 31, 31, 27, 5),   # s08 at batch 60: persistent blocks over many tiles
    # wide slabs: one buffer where two do not fit; groups chosen by what fits
    (2, 29, 87, 87, 5, 7),     # s07: 650 slab rows of 128 bytes, two buffers beside 35 pairs' weights
    (3, 24, 46, 46, 64, 7),    # s35: 448 pairs, 4 groups of 16 filters, one buffer, a launch each
    (2, 30, 81, 81, 46, 7),    # s00: 322 pairs, 3 groups would not fit beside its 614-row slab: 4 groups
    (2, 26, 61, 61, 26, 7),    # s13: 2 groups of 13 filters (N = 96) with one slab buffer
    (40, 26, 70, 70, 9, 7),    # one buffer, 1440 tiles over the blocks
    # each slab buffer's mbarrier through many phases (a block's tiles over two buffers), groups between its uses
    (300, 26, 32, 32, 8, 3),   # the sweep's s16 at batch 300: 2100 tiles
    (37, 8, 16, 16, 50, 3),    # 2 groups over many tiles
    (40, 26, 40, 40, 9, 7),    # 368 slab rows of 128 bytes: 480 tiles
]


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}-C{}-{}x{}-M{}-K{}".format(*s))
def test_edge_shapes_match_reference(shape):
    check_shape(NAME, shape, SEED)


@requires_gpu
@pytest.mark.gpu
def test_beyond_fp16_range_is_never_a_wrong_number():
    check_beyond_fp16_range(NAME, SEED)


@requires_gpu
@pytest.mark.gpu
def test_a_smaller_layer_after_a_larger_one_reuses_the_workspace_correctly():
    """The planes live in a workspace kept between calls and grown only: a small layer after a large one, then the
    large one again."""
    check_layers_in_turn(NAME, [(6, 30, 40, 40, 26, 3), (3, 5, 9, 9, 4, 3), (6, 30, 40, 40, 26, 3)], SEED)


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(10000, 11, 31, 31, 27, 5), (10000, 29, 29, 29, 19, 5), (10000, 30, 81, 81, 46, 7)])
def test_the_sweeps_small_image_rows_are_supported(shape):
    """The rows the step is for (its file's header; s00 refused by step 29) run at batch 10000 on a Hopper GPU."""
    assert gpu().why_unsupported(NAME, *shape) == ""


@requires_gpu_module
def test_weights_slabs_and_staging_beyond_shared_memory_are_refused_in_one_line():
    """7 x 7 taps over 1500-pixel rows: a tile's slab alone is 9128 rows of 128 bytes, beyond shared memory in any
    grouping; the message names the grouping that needs the least (one filter a group)."""
    why = check_refused_for_shared_memory(NAME, (2, 32, 1500, 1500, 4, 7))
    assert why == (f"{NAME}: weights (14 KB), a slab of 9128 rows (1141 KB) and 7 staged rows (3 KB) "
                   "exceed 227 KB of shared memory (4 groups of 1 filters)")


@requires_gpu_module
def test_a_kernel_size_it_is_not_built_for_is_refused_in_one_line():
    assert gpu().why_unsupported(NAME, 2, 3, 12, 12, 8, 4) == (
        f"{NAME}: K = 4; its kernels are built for K = 1, 3, 5 and 7")
