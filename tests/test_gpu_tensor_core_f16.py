"""Step 23 (gpu-tensor-core-f16): one FP16 pass from the image staged as channel-pair planes, checked where its
index maths can go wrong: even and odd C (a zero channel pads the last pair), one n-tile group and several,
n-tiles per warp 1 to 6 and two m-tiles per pass, both slots of the staging ring (more images than persistent
blocks), odd pixel counts (scalar stores), K = 1 to 7, padded pairs past the depth. Held to its declared reduced
tolerance; FP16's range (values beyond 65504 reach only non-finite outputs); shapes whose staging, pairs and
weights do not fit are refused with one line."""

from __future__ import annotations

import pytest
from built_variants import needs
from gpu_helpers import (
    check_beyond_fp16_range,
    check_refused_for_shared_memory,
    check_shape,
    descriptor,
    requires_gpu,
    requires_gpu_module,
)

NAME = "gpu-tensor-core-f16"
SEED = 2023
pytestmark = needs(NAME)

# (B, C, H, W, M, K)
SHAPES = [
    (3, 6, 22, 22, 16, 5),      # sp19 conv2: 75 pairs in 10 k-steps, 41 n-tiles, 6 per warp, one group
    (2, 6, 30, 30, 16, 5),      # sp18 conv2: 85 n-tiles, groups loop
    (2, 12, 33, 33, 24, 5),     # fa19 conv2: M = 24, two m-tiles per pass
    (2, 12, 33, 33, 24, 7),     # fa18 conv2: K = 7, 37 k-steps
    (3, 1, 28, 28, 50, 5),      # fa17 conv1: C = 1 (one pair, its second channel the zero pad), M = 50
    (1, 1, 7, 7, 5, 7),         # one output pixel
    (5, 5, 13, 11, 7, 3),       # C = 5 odd; 99 pixels: odd count, scalar stores
    (2, 3, 15, 16, 9, 7),       # C = 3
    (2, 4, 9, 7, 3, 1),         # K = 1: 2 pairs, most of a k-step padded
    (3, 3, 8, 9, 17, 2),        # M = 17
    (3, 3, 12, 13, 33, 3),      # M = 33: three m-tiles padded to four
    (2, 2, 17, 19, 8, 3),       # one pair
    (2, 8, 12, 12, 16, 5),      # 13 k-steps, one n-tile per warp
    (2, 29, 20, 20, 19, 5),     # C = 29: 375 pairs, 47 k-steps, two m-tiles
    (5000, 1, 6, 7, 2, 3),      # more images than persistent blocks: both slots of the ring
]


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}-C{}-{}x{}-M{}-K{}".format(*s))
def test_shapes_match_reference(shape):
    check_shape(NAME, shape, SEED)


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("channel", [2, 3], ids=["low-half", "high-half"])
def test_beyond_fp16_range_is_not_finite(channel):
    """One input beyond 65504, in the low or the high half of a channel pair: every output whose window holds it is
    inf or NaN (never a quietly wrong finite number); the other image is within tolerance."""
    check_beyond_fp16_range(NAME, SEED, channel)


@requires_gpu_module
def test_reduced_precision_is_declared():
    """One FP16 rounding per operand (TF32's 11-bit significand): held to 2e-3 and counted as reduced precision
    (fp16) wherever precision is decided."""
    v = descriptor(NAME)
    assert v["rtol"] == 2e-3 and v["precision"] == "fp16" and v["epilogue"] == "none"


@requires_gpu_module
@pytest.mark.parametrize("shape", [(1, 64, 64, 64, 16, 3), (1, 32, 60, 60, 70, 7)])
def test_refuses_what_shared_memory_cannot_hold(shape):
    check_refused_for_shared_memory(NAME, shape)
