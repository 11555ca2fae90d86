"""Step 26 (gpu-split-f16-nhwc) at the edges of what it adds to step 25: channel counts that pad to the next 8
(C = 1, 3, 9, 29, 70) and several 8-channel groups per tap (C = 40), depths K*K*Cp that end inside a 32-deep
chunk, every filter tile (M from 1 to 130), pixel counts that are not a multiple of its 128-pixel tile, tiles that
span many images, and a batch cut into chunks of planes (images of 144 MB of planes: one per chunk). The
FP16-range contract: an input beyond 65504 reaches its outputs as inf or NaN, never as a wrong finite number.
Inputs past 2^31 elements are left to `invoke bench --sweep`, which checks every row at batch 10000 on the
device."""

from __future__ import annotations

import pytest
from built_variants import needs
from gpu_helpers import (
    check_beyond_fp16_range,
    check_layers_in_turn,
    check_shape,
    gpu,
    requires_gpu,
    requires_gpu_module,
)

NAME = "gpu-split-f16-nhwc"
SEED = 2626
pytestmark = needs(NAME)  # a student handout leaves the ladder out

# (B, C, H, W, M, K)
SHAPES = [
    (1, 1, 7, 7, 5, 7),        # one output pixel, C = 1 padded to 8: depth 392 in 13 chunks
    (3, 1, 7, 7, 1, 7),        # M = 1
    (2, 1, 5, 5, 6, 3),        # depth 72: the last chunk holds one group
    (5, 2, 4, 4, 3, 3),        # Ho*Wo = 4
    (7, 3, 9, 11, 7, 3),       # Ho*Wo = 63: scalar stores; rectangular image
    (1, 3, 3, 3, 9, 3),        # image = kernel, M = 9: a 16-filter tile
    (4, 5, 12, 12, 16, 5),     # 16 filters exactly
    (3, 6, 14, 13, 17, 5),     # M = 17: a 24-filter tile
    (2, 29, 29, 29, 19, 5),    # the sweep's s37 at batch 2
    (3, 9, 31, 31, 27, 5),     # C = 9 pads to 16; a 32-filter tile
    (2, 15, 24, 24, 38, 7),    # the sweep's s02: 48 filters
    (2, 32, 20, 20, 64, 3),    # 64 filters exactly, Cp = 32: one tap per chunk
    (2, 7, 15, 15, 65, 3),     # M = 65: a second 64-filter tile holding one filter
    (1, 4, 10, 10, 130, 3),    # three 64-filter tiles
    (2, 24, 46, 46, 64, 7),    # the sweep's s35 at batch 2
    (1, 40, 12, 12, 10, 3),    # C = 40: five groups per tap
    (2, 70, 9, 9, 12, 3),      # C = 70 pads to 72
    (1, 2, 150, 130, 6, 3),    # a rectangular image of 19.5K pixels
    (257, 2, 6, 6, 8, 5),      # 257 images of 4 pixels: tiles span many images
    (3, 33, 9, 9, 40, 1),      # K = 1: depth 40, one group past a chunk
    (45, 32, 96, 96, 5, 3),    # 1.2 MB of planes per image
    (3, 16, 1500, 1500, 3, 1),  # 144 MB of planes per image: three chunks of one image
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
    check_layers_in_turn(NAME, [(6, 30, 40, 40, 46, 7), (3, 5, 9, 9, 4, 3), (6, 30, 40, 40, 46, 7)], SEED)


@requires_gpu_module
@pytest.mark.parametrize("shape", [(10000, 15, 24, 24, 38, 7), (10000, 24, 46, 46, 64, 7), (10000, 32, 96, 96, 64, 7)])
def test_the_sweeps_shapes_are_supported(shape):
    """supports() is host code (no GPU needed): the largest shapes the sweep can draw run at batch 10000."""
    assert gpu().why_unsupported(NAME, *shape) == ""


@requires_gpu_module
def test_a_depth_beyond_the_tap_table_is_refused_in_one_line():
    why = gpu().why_unsupported(NAME, 1, 8000, 24, 24, 38, 7)
    assert why == f"{NAME}: a depth of 392000 padded taps needs a tap table beyond 220 KB of shared memory"
