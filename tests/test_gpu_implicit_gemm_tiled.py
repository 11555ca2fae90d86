"""Step 17 (gpu-implicit-gemm-tiled) at the edges of its tiling: every channel tile it chooses (M from 1 to 130,
so 8, 16, 32 and 64 channels, and M past one tile), pixel counts that are not a multiple of any pixel tile,
Ho*Wo % 4 != 0 (the scalar store path) and == 0 (float4 stores), reductions C*K*K shorter than one slice of 8
rows and not a multiple of it, C = 1, K = 7 on a 7x7 image (one output pixel per image), and images smaller
than a tile. Inputs past 2^31 elements (64-bit indexing) are left to `invoke bench --sweep`, which checks
images of every row at batch 10000 (e.g. C=24 96x96: 2.2e9 elements) on the device; here they would take
minutes of host reference time."""

from __future__ import annotations

import pytest
from built_variants import needs
from gpu_helpers import check_shape, requires_gpu

NAME = "gpu-implicit-gemm-tiled"
SEED = 1717
pytestmark = needs(NAME)  # a student handout leaves the ladder out

# (B, C, H, W, M, K)
SHAPES = [
    (1, 1, 7, 7, 5, 7),        # one output pixel, C*K*K = 49
    (3, 1, 7, 7, 1, 7),        # M = 1
    (2, 1, 5, 5, 6, 3),        # C*K*K = 9: one full slice and one row
    (5, 2, 4, 4, 3, 3),        # Ho*Wo = 4
    (7, 3, 9, 11, 7, 3),       # Ho*Wo = 63: scalar stores; rectangular image
    (1, 3, 3, 3, 9, 3),        # image = kernel, M = 9 (16-channel tile, 7 padded)
    (4, 5, 12, 12, 16, 5),     # 16 channels exactly
    (3, 6, 14, 13, 17, 5),     # M = 17: a 32-channel tile
    (2, 29, 29, 29, 19, 5),    # the sweep's worst row (s37), small batch
    (3, 11, 31, 31, 27, 5),
    (2, 32, 20, 20, 64, 3),    # 64 channels exactly, C*K*K = 288
    (2, 7, 15, 15, 65, 3),     # M = 65: a second 64-channel tile holding one channel
    (1, 4, 10, 10, 130, 3),    # three 64-channel tiles
    (9, 8, 15, 15, 25, 3),
    (2, 24, 46, 46, 64, 7),    # s35 at batch 2: C*K*K = 1176
    (1, 1, 96, 96, 4, 3),      # 8836 pixels in one image
    (257, 2, 6, 6, 8, 5),      # 257 images of 4 pixels: tiles span many images
    (3, 33, 9, 9, 40, 1),      # K = 1, C past 32
]


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}-C{}-{}x{}-M{}-K{}".format(*s))
def test_edge_shapes_match_reference(shape):
    check_shape(NAME, shape, SEED)
