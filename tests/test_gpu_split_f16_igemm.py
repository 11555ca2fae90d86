"""Step 25 (gpu-split-f16-igemm) at the edges of its tiling: every filter tile it chooses (M from 1 to 130, so 8,
16, 24, 32, 48 and 64 filters, and M past one tile), pixel counts that are not a multiple of its 128-pixel tile,
Ho*Wo % 4 != 0 (scalar stores) and == 0 (float4 stores), depths C*K*K shorter than one 16-tap k-step, between one
k-step and a 32-tap chunk, and not a multiple of either, tiles that span many images, and the shapes the
split-FP16 steps 20 and 21 refuse (weights beyond shared memory). Inputs past 2^31 elements are left to
`invoke bench --sweep`, which checks every row at batch 10000 on the device. The FP16-range contract: an input
beyond 65504 reaches its outputs as inf or NaN, never as a wrong finite number."""

from __future__ import annotations

import pytest
from built_variants import needs
from gpu_helpers import check_beyond_fp16_range, check_shape, gpu, requires_gpu, requires_gpu_module

NAME = "gpu-split-f16-igemm"
SEED = 2525
pytestmark = needs(NAME)  # a student handout leaves the ladder out

# (B, C, H, W, M, K)
SHAPES = [
    (1, 1, 7, 7, 5, 7),        # one output pixel, C*K*K = 49: 4 k-steps, the last mostly padding
    (3, 1, 7, 7, 1, 7),        # M = 1
    (2, 1, 5, 5, 6, 3),        # C*K*K = 9: one k-step, part padding
    (5, 2, 4, 4, 3, 3),        # Ho*Wo = 4
    (7, 3, 9, 11, 7, 3),       # Ho*Wo = 63: scalar stores; rectangular image
    (1, 3, 3, 3, 9, 3),        # image = kernel, M = 9: a 16-filter tile
    (4, 5, 12, 12, 16, 5),     # 16 filters exactly
    (3, 6, 14, 13, 17, 5),     # M = 17: a 24-filter tile
    (2, 29, 29, 29, 19, 5),    # the sweep's s37 at batch 2
    (3, 11, 31, 31, 27, 5),    # a 32-filter tile
    (2, 15, 24, 24, 38, 7),    # the sweep's s02 (split weights beyond steps 20/21's shared memory): 48 filters
    (2, 32, 20, 20, 64, 3),    # 64 filters exactly, C*K*K = 288
    (2, 7, 15, 15, 65, 3),     # M = 65: a second 64-filter tile holding one filter
    (1, 4, 10, 10, 130, 3),    # three 64-filter tiles
    (9, 8, 15, 15, 25, 3),
    (2, 24, 46, 46, 64, 7),    # the sweep's s35 at batch 2: C*K*K = 1176
    (1, 1, 96, 96, 4, 3),      # 8836 pixels in one image
    (257, 2, 6, 6, 8, 5),      # 257 images of 4 pixels: tiles span many images
    (3, 33, 9, 9, 40, 1),      # K = 1, C*K*K = 33: one tap past a chunk
    (2, 28, 19, 19, 58, 5),    # the sweep's s21: 64 filters, 6 unused
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


@requires_gpu_module
@pytest.mark.parametrize("shape", [(10000, 15, 24, 24, 38, 7), (10000, 24, 46, 46, 64, 7), (10000, 32, 96, 96, 64, 7)])
def test_shapes_the_other_split_steps_refuse_are_supported(shape):
    """supports() is host code (no GPU needed): the weights stream through shared memory a chunk at a time, so the
    shapes steps 20 and 21 refuse at batch 10000 (the sweep's s02 and s35, and the largest the sweep can draw)
    run here."""
    g = gpu()
    assert g.why_unsupported("gpu-split-f16", *shape) != "" and g.why_unsupported("gpu-split-f16-lean", *shape) != ""
    assert g.why_unsupported(NAME, *shape) == ""


@requires_gpu_module
def test_a_depth_beyond_the_tap_table_is_refused_in_one_line():
    why = gpu().why_unsupported(NAME, 1, 2000, 24, 24, 38, 7)
    assert why == f"{NAME}: a depth of 98000 taps needs a tap table beyond 220 KB of shared memory"
