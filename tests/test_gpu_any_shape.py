"""GPU convolutions (no epilogue) at the edges of the shape space: one-pixel and tiny outputs (K = 7 on a 7x7
image), one input channel, batch 1, output counts that are not a multiple of any pixel tile or of 4 (the scalar
store path), tiles that straddle many images, M that pads a channel tile or needs several, depths that are not a
multiple of 8 or 32. Every registry variant is run on the shapes it supports; the variants that claim every valid
shape (step 18) must support them all. New steps are picked up as in test_gpu_engine.py."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import close, descriptor, gpu, requires_gpu
from student_variants import skip_if_unstarted

from pyconv import verify

SEED = 1818

try:
    from pyconv import _gpu
except ImportError:
    _gpu = None

# Variants whose descriptors promise every valid stride-1 shape.
ANY_SHAPE = {"gpu-tensor-core-igemm"}


def plain_variants() -> list[str]:
    if _gpu is None:
        return sorted(ANY_SHAPE)
    return [v["name"] for v in _gpu.variants() if v["epilogue"] == "none"]


# (B, C, H, W, M, K)
SHAPES = [
    (1, 1, 7, 7, 5, 7),      # one output pixel
    (3, 1, 7, 7, 5, 7),
    (1, 1, 3, 3, 1, 3),      # M = 1
    (129, 1, 5, 5, 3, 5),    # one-pixel images: a 128-pixel tile holds 128 of them, the last tile one
    (130, 1, 7, 9, 5, 7),    # 3 pixels per image, 390 in all: odd, not a multiple of the tile
    (1, 1, 12, 12, 5, 7),
    (4, 2, 9, 11, 8, 3),     # M = 8: the narrowest tile, full
    (7, 5, 10, 10, 9, 5),    # depth 125, M = 9 pads to 16
    (2, 6, 22, 22, 16, 5),   # sp19 conv2 at a small batch
    (3, 3, 12, 13, 33, 3),   # M = 33 pads to 64
    (3, 32, 20, 20, 70, 7),  # depth 1568 (49 chunks of 32), two channel blocks
    (2, 7, 96, 96, 4, 3),    # a 94x94 output image (beyond one block)
    (1, 4, 30, 31, 12, 1),   # K = 1: depth 4
]


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("name", plain_variants())
def test_edge_shapes_match_reference(name):
    g = gpu()
    skip_if_unstarted(name, g.conv)  # the student's slot: tested once it holds the student's code
    v = descriptor(name)
    rng = np.random.default_rng(SEED)
    tested = 0
    for B, C, H, W, M, K in SHAPES:
        why = g.why_unsupported(name, B, C, H, W, M, K)
        if name in ANY_SHAPE:
            assert why == "", f"{name} refuses B={B} C={C} {H}x{W} M={M} K={K}: {why}"
        if why:
            continue
        x = rng.uniform(-1, 1, (B, C, H, W)).astype(np.float32)
        k = rng.uniform(-1, 1, (M, C, K, K)).astype(np.float32)
        y = g.conv(name, x, k)  # poisoned with NaN before the launch: an unwritten output fails
        ok, msg = close(y, verify.expected(x, k), *verify.tolerance(v["rtol"], C, K))
        assert ok, f"{name} B={B} C={C} {H}x{W} M={M} K={K}: {msg}"
        tested += 1
    if name in ANY_SHAPE:
        assert tested == len(SHAPES)
