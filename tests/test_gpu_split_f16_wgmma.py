"""Step 28 (gpu-split-f16-wgmma) at the edges of what it adds to step 27: channel counts that pad to 16 or to a
multiple of 32 (C = 1, 3, 9, 29) and several bands of 32 channels (C = 33, 40, 50, 70), K = 1 (no halo) to 7, tiles
of 128 flat positions that start at each image's first row or run on across images (images of 4 pixels: 32 to a
tile), rows of one output pixel (Wo = 1), every filter tile (M from 1 to 32; the last warp's rows partly or wholly
unused), persistent blocks whose two warpgroups loop over many tiles, and a batch cut into chunks of planes. The
FP16-range contract: an input beyond 65504 reaches its outputs as inf or NaN, never as a wrong finite number. Inputs
past 2^31 elements are left to `invoke bench --sweep`, which checks every row at batch 10000 on the device."""

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

NAME = "gpu-split-f16-wgmma"
SEED = 2828
pytestmark = needs(NAME)  # a student handout leaves the ladder out

# (B, C, H, W, M, K)
SHAPES = [
    (1, 1, 7, 7, 5, 7),        # one output pixel, C = 1 padded to 16
    (3, 1, 7, 7, 1, 7),        # M = 1: an 8-filter tile
    (2, 1, 5, 5, 6, 3),        # 3 x 3 outputs in a 5-wide flat grid
    (5, 2, 4, 4, 3, 3),        # Ho*Wo = 4
    (7, 3, 9, 11, 7, 3),       # rectangular image
    (1, 3, 3, 3, 9, 3),        # image = kernel, M = 9: a 16-filter tile
    (4, 5, 12, 12, 16, 5),     # 16 filters exactly
    (3, 6, 14, 13, 17, 5),     # M = 17: a 24-filter tile
    (2, 29, 29, 29, 19, 5),    # the sweep's s37 at batch 2
    (3, 9, 31, 31, 27, 5),     # C = 9 pads to 16; a 32-filter tile
    (2, 15, 24, 24, 30, 7),    # K = 7, C = 15 pads to 16
    (2, 32, 20, 20, 32, 3),    # 32 filters exactly, two k16 steps per tap
    (2, 7, 15, 15, 25, 3),     # M = 25: a 32-filter tile holding one filter of its last warp
    (3, 11, 31, 31, 27, 5),    # the sweep's s08 at batch 3
    (300, 26, 26, 26, 25, 5),  # the sweep's s17 at batch 300: 1800 tiles over the persistent blocks
    (1, 40, 12, 12, 10, 3),    # C = 40 pads to 64: two bands
    (2, 50, 9, 9, 12, 3),      # C = 50 pads to 64: two bands
    (2, 70, 9, 9, 12, 1),      # C = 70 pads to 96: three bands
    (1, 2, 150, 130, 6, 3),    # a rectangular image of 19.5K pixels: 150 tiles
    (257, 2, 6, 6, 8, 5),      # 257 images of 4 pixels: one tile each, mostly never stored
    (3, 33, 9, 9, 20, 1),      # K = 1: no halo; C = 33 pads to 64: two bands of 32 channels
    (45, 32, 96, 96, 5, 3),    # 1.2 MB of planes per image
    (3, 16, 1500, 150, 3, 1),  # 14 MB of planes per image, K = 1
    (25, 96, 200, 200, 4, 1),  # 15 MB per image, K = 1: the batch in two chunks
    (2, 2, 40, 3, 5, 3),       # Wo = 1: a third of the flat grid is stored
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
def test_more_than_32_filters_are_refused_in_one_line():
    assert gpu().why_unsupported(NAME, 2, 15, 24, 24, 38, 7) == (
        f"{NAME}: M = 38 filters; at most 32 (8 per warp, hi and lo in its 16 accumulator rows)")


@requires_gpu_module
def test_weights_and_slabs_beyond_shared_memory_are_refused_in_one_line():
    """32 channels of 96-pixel rows with K = 7: 128 positions reach 710 slab rows of 128 bytes."""
    why = check_refused_for_shared_memory(NAME, (2, 32, 96, 96, 32, 7))
    assert why == (f"{NAME}: 32 filters' weights (196 KB) and four slabs of 710 rows (89 KB each) exceed 227 KB "
                   "of shared memory")


@requires_gpu_module
def test_a_kernel_size_it_is_not_built_for_is_refused_in_one_line():
    assert gpu().why_unsupported(NAME, 2, 3, 12, 12, 8, 4) == (
        f"{NAME}: K = 4; its kernels are built for K = 1, 3, 5 and 7")
