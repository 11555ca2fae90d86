"""Step 29 (gpu-split-f16-taps-wgmma) at the edges of what it adds to step 28: (filter, tap column) pairs as the
wgmma's rows, R = M x K of them over one or two warpgroups (R = 7, 64, 65, 126, 128 and the sweep's rows), more
than 128 in filter groups over the same slab (the last group with fewer filters, K = 1 to 7), in launches of as
many groups as shared memory holds the weights of,
K = 1 (nothing to add up) to 7, tiles of 128 - (K - 1) stored positions that start at each image's first row or
run on across images, the epilogue adding K staged columns, rows of one output pixel (Wo = 1), channel counts that
pad to 16 or to several bands of 32, persistent blocks over many tiles (each slab buffer's mbarrier through many
phases), and a batch cut into chunks of planes. The
FP16-range contract: an input beyond 65504 reaches its outputs as inf or NaN, never as a wrong finite number."""

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

NAME = "gpu-split-f16-taps-wgmma"
SEED = 2929
pytestmark = needs(NAME)  # a student handout leaves the ladder out

# (B, C, H, W, M, K); R = M x K pairs, 64 per warpgroup
SHAPES = [
    (1, 1, 7, 7, 5, 7),        # one output pixel, C = 1 padded to 16
    (3, 1, 7, 7, 1, 7),        # M = 1: R = 7
    (2, 1, 5, 5, 6, 3),        # 3 x 3 outputs in a 5-wide flat grid
    (5, 2, 4, 4, 3, 3),        # Ho*Wo = 4
    (7, 3, 9, 11, 7, 3),       # rectangular image
    (1, 3, 3, 3, 9, 3),        # image = kernel
    (2, 4, 10, 10, 64, 1),     # R = 64 exactly: one warpgroup, K = 1
    (3, 6, 14, 13, 13, 5),     # R = 65: a second warpgroup for one pair
    (2, 5, 12, 12, 128, 1),    # R = 128 exactly: two warpgroups
    (2, 6, 14, 14, 42, 3),     # R = 126
    (2, 29, 29, 29, 19, 5),    # the sweep's s37 at batch 2: R = 95
    (3, 9, 31, 31, 25, 5),     # C = 9 pads to 16; R = 125
    (2, 15, 24, 24, 18, 7),    # K = 7, C = 15 pads to 16; R = 126
    (2, 32, 20, 20, 32, 3),    # two k16 steps per kh
    (4, 11, 31, 31, 12, 5),    # R = 60: one warpgroup
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
    (2, 11, 31, 31, 27, 5),    # the sweep's s08 at batch 2: 135 pairs, 3 groups of 9 filters
    (2, 15, 24, 24, 38, 7),    # 266 pairs: 5 groups of 8 filters, the last of 6
    (2, 8, 16, 16, 50, 3),     # 150 pairs: 3 groups, the last of 16 filters
    (2, 4, 12, 12, 129, 1),    # K = 1, 129 pairs: 3 groups of 43
    (3, 6, 10, 10, 64, 7),     # 448 pairs (the sweep's largest M x K): 4 groups of 16 filters, two warpgroups each
    (60, 11, 31, 31, 27, 5),   # s08 at batch 60: every group over many tiles
    (3, 32, 12, 12, 40, 7),    # 5 groups of 8 filters, 56 KB of weights each: launches of 2, 2 and 1 groups
    # one slab buffer where two do not fit (the sweep's s07 and s35 shapes; persistent blocks over many tiles)
    (2, 29, 87, 87, 5, 7),     # s07: 650 slab rows of 128 bytes
    (3, 24, 46, 46, 64, 7),    # s35: 4 groups of 16 filters, one launch each
    (40, 26, 70, 70, 9, 7),    # 1 slab, 2 warpgroups, 1440 tiles over the blocks
    # each slab buffer's mbarrier through many phases (a block's tiles over two buffers), groups between its uses
    (300, 26, 32, 32, 8, 3),   # the sweep's s16 at batch 300: 2100 tiles
    (37, 11, 31, 31, 27, 5),   # s08 at batch 37: 3 groups of 9 filters over 259 tiles
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
@pytest.mark.parametrize("shape", [(10000, 29, 29, 29, 19, 5), (10000, 26, 26, 26, 25, 5), (10000, 11, 31, 31, 27, 5)])
def test_the_sweeps_small_image_rows_are_supported(shape):
    """The rows the step is for (its file's header) run at batch 10000 on a Hopper GPU."""
    assert gpu().why_unsupported(NAME, *shape) == ""


@requires_gpu_module
def test_weights_slabs_and_staging_beyond_shared_memory_are_refused_in_one_line():
    """32 channels of 96-pixel rows with K = 7 and 18 filters: 128 positions reach 704 slab rows of 128 bytes, and
    even one slab buffer does not fit beside the weights and the staging area."""
    why = check_refused_for_shared_memory(NAME, (2, 32, 96, 96, 18, 7))
    assert why == (f"{NAME}: weights (112 KB), a slab of 704 rows (88 KB) and 126 staged rows (66 KB) "
                   "exceed 227 KB of shared memory")


@requires_gpu_module
def test_a_kernel_size_it_is_not_built_for_is_refused_in_one_line():
    assert gpu().why_unsupported(NAME, 2, 3, 12, 12, 8, 4) == (
        f"{NAME}: K = 4; its kernels are built for K = 1, 3, 5 and 7")
