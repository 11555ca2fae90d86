"""Step 22 (gpu-tensor-core-tf32-lean): one TF32 pass from the staged image, rounded in place, checked where its
index maths can go wrong: one n-tile group (bases computed once per block) and several, n-tiles per warp 1 to 6
and two m-tiles per pass, both slots of the staging ring (more images than persistent blocks), odd pixel counts
(scalar stores), K = 1 to 7, padded taps past the depth. Held to its declared TF32 tolerance; shapes whose two
staged images and weights do not fit are refused with one line."""

from __future__ import annotations

import pytest
from built_variants import needs
from gpu_helpers import check_refused_for_shared_memory, check_shape, descriptor, requires_gpu, requires_gpu_module

NAME = "gpu-tensor-core-tf32-lean"
SEED = 2022
pytestmark = needs(NAME)

# (B, C, H, W, M, K)
SHAPES = [
    (3, 6, 22, 22, 16, 5),      # sp19 conv2: 41 n-tiles, 3 per warp, one group
    (2, 6, 30, 30, 16, 5),      # sp18 conv2: 85 n-tiles, 6 per warp, groups loop
    (2, 12, 33, 33, 24, 5),     # fa19 conv2: M = 24, two m-tiles per pass
    (2, 12, 33, 33, 24, 7),     # fa18 conv2: K = 7
    (3, 1, 28, 28, 50, 5),      # fa17 conv1: C = 1, two passes of two m-tiles
    (1, 1, 7, 7, 5, 7),         # one output pixel
    (5, 5, 13, 11, 7, 3),       # 99 pixels: odd count, scalar stores
    (2, 3, 15, 16, 9, 7),
    (2, 4, 9, 7, 3, 1),         # K = 1: depth 4, half a k-step padded
    (3, 3, 8, 9, 17, 2),        # M = 17
    (3, 3, 12, 13, 33, 3),      # M = 33: three m-tiles padded to four
    (2, 2, 17, 19, 8, 3),
    (2, 8, 12, 12, 16, 5),      # 25 k-steps, one n-tile per warp
    (2, 29, 20, 20, 19, 5),     # C = 29: 91 k-steps, two m-tiles, 186 KB of shared memory
    (5000, 1, 6, 7, 2, 3),      # more images than persistent blocks: both slots of the ring
]


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}-C{}-{}x{}-M{}-K{}".format(*s))
def test_shapes_match_reference(shape):
    check_shape(NAME, shape, SEED)


@requires_gpu_module
def test_tf32_tolerance_is_declared():
    """One TF32 rounding per operand: held to step 13's 2e-3, and counted as TF32 wherever precision is decided."""
    v = descriptor(NAME)
    assert v["rtol"] == 2e-3 and v["precision"] == "tf32"


@requires_gpu_module
@pytest.mark.parametrize("shape", [(1, 64, 64, 64, 16, 3), (1, 32, 60, 60, 70, 7)])
def test_refuses_what_shared_memory_cannot_hold(shape):
    check_refused_for_shared_memory(NAME, shape)
