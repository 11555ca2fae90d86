"""Step 21 (gpu-split-f16-lean): step 20's arithmetic with separate hi/lo planes at a fixed distance, byte
offsets, bases hoisted out of the image loop and a packed split, checked where that can go wrong: every lo
distance (16 to 128 KB of hi planes), n-tiles per warp 1 to 4 and two m-tiles per pass, one n-tile group (bases
computed once per block) and several (computed per group), odd and even W and K (the split's runs of four
columns and their zero tail), the weights and staging ring in the gap before the lo planes or after them, each
depth of the staging ring, and more images than persistent blocks. Held to the default float32 tolerance; shapes
that do not fit are refused with one line. The arithmetic contract it shares with step 20 (float32 tolerance
declared, inputs beyond FP16's range reaching non-finite outputs, the course's layers supported) is checked for
both in test_gpu_split_f16.py."""

from __future__ import annotations

import pytest
from built_variants import needs
from gpu_helpers import check_refused_for_shared_memory, check_shape, requires_gpu, requires_gpu_module

NAME = "gpu-split-f16-lean"
SEED = 2021
pytestmark = needs(NAME)

# (B, C, H, W, M, K)
SHAPES = [
    (3, 6, 22, 22, 16, 5),      # sp19 conv2: 41 n-tiles, 3 per warp, one group
    (2, 6, 30, 30, 16, 5),      # sp18 conv2: 85 n-tiles, 4 per warp, groups loop; lo planes at 32 KB
    (2, 12, 33, 33, 24, 5),     # fa19 conv2: M = 24, two m-tiles per pass; lo at 64 KB, one image staged
    (2, 12, 33, 33, 24, 7),     # fa18 conv2: K = 7; no room for staging (the split reads global memory)
    (3, 1, 28, 28, 50, 5),      # fa17 conv1: C = 1, two passes of two m-tiles
    (1, 1, 7, 7, 5, 7),         # one output pixel
    (5, 5, 13, 11, 7, 3),       # 99 pixels: odd count, scalar stores
    (2, 3, 15, 16, 9, 7),
    (2, 4, 9, 7, 3, 1),         # K = 1
    (3, 3, 8, 9, 17, 2),        # K = 2, M = 17
    (2, 2, 9, 10, 5, 4),        # K = 4
    (3, 3, 12, 13, 33, 3),      # M = 33: three m-tiles padded to four
    (2, 2, 17, 19, 8, 3),       # n-tiles 1 and 2 per warp boundaries
    (2, 1, 48, 48, 6, 5),       # sp19 conv1's shape: weights and staging in the gap, lo at 32 KB
    (1, 14, 36, 36, 8, 3),      # hi planes ~79 KB: lo at 128 KB, weights in the gap, no staging
    (2, 2, 100, 100, 5, 3),     # 9604 output pixels: n-tile groups loop over the image; lo at 128 KB
    (5000, 1, 6, 7, 2, 3),      # more images than persistent blocks
]


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}-C{}-{}x{}-M{}-K{}".format(*s))
def test_shapes_match_reference(shape):
    check_shape(NAME, shape, SEED)


@requires_gpu_module
@pytest.mark.parametrize("shape", [(1, 29, 29, 29, 19, 5), (1, 64, 64, 64, 16, 3), (1, 32, 20, 20, 70, 7)])
def test_refuses_what_shared_memory_cannot_hold(shape):
    check_refused_for_shared_memory(NAME, shape)
