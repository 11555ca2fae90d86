"""Step 20 (gpu-split-f16): float32 accuracy from the FP16 tensor cores, where its index maths can go wrong: the
course's layers (sp19, sp18, fa19 conv2 with M = 24, fa18 conv2 with K = 7, fa17 conv1 with C = 1 and four
m-tiles), odd and even K (the last tap pair half empty or full), odd pixel columns (copy O of the planes), output
counts that are odd (scalar stores) or beyond one group of n-tiles, more images than persistent blocks, and each
depth of the staging ring (2, 1, and 0: the split reads global memory), even and odd W (the split's float2 or
float loads). Images too large for shared memory run in bands of output rows: one band or several, the last one
overlapping the one before, bands of a single row, W a multiple of 4 or not (16- or 4-byte staging copies), more
units (image, band) than persistent blocks. Held to the default float32 tolerance. An input beyond the FP16 range
must make the outputs it reaches non-finite (cuda/runtime/mma_f16.cuh), never quietly wrong; shapes whose weights
and a band of one output row do not fit in shared memory are refused with one line."""

from __future__ import annotations

import pytest
from built_variants import needs
from gpu_helpers import (
    check_beyond_fp16_range,
    check_refused_for_shared_memory,
    check_shape,
    descriptor,
    gpu,
    requires_gpu,
    requires_gpu_module,
)

from pyconv import variants

NAME = "gpu-split-f16"
SEED = 2020
pytestmark = needs(NAME)
# The split-FP16 plain convolutions: step 20 and step 21 (gpu-split-f16-lean, its own shapes in
# test_gpu_split_f16_lean.py) share the arithmetic contract checked at the end of this file.
SPLIT = [NAME, pytest.param("gpu-split-f16-lean", marks=needs("gpu-split-f16-lean"))]

# (B, C, H, W, M, K)
SHAPES = [
    (3, 6, 22, 22, 16, 5),      # sp19 conv2 (two images in flight per block)
    (2, 6, 30, 30, 16, 5),      # sp18 conv2
    (2, 12, 33, 33, 24, 5),     # fa19 conv2: M = 24 (two m-tiles per pass), n-tile groups loop, one image in flight
    (2, 12, 33, 33, 24, 7),     # fa18 conv2: K = 7, no room for staging (split from global memory)
    (3, 1, 28, 28, 50, 5),      # fa17 conv1: C = 1, two passes of two m-tiles
    (2, 2, 100, 100, 5, 3),     # 9604 output pixels: n-tile groups loop over the image
    (1, 1, 7, 7, 5, 7),         # one output pixel
    (5, 5, 13, 11, 7, 3),       # 99 pixels: odd count, scalar stores
    (2, 3, 15, 16, 9, 7),
    (2, 4, 9, 7, 3, 1),         # K = 1: one tap, half of every pair empty
    (3, 3, 8, 9, 17, 2),        # K = 2: full pairs; M = 17
    (2, 2, 9, 10, 5, 4),        # K = 4
    (3, 3, 12, 13, 33, 3),      # M = 33: three m-tiles padded to four (two passes)
    (5000, 1, 6, 7, 2, 3),      # more images than persistent blocks: each block walks several
    (2, 11, 38, 38, 19, 7),     # no room for staging, W even: the split's float2 loads from global memory
]

# Images whose split planes do not fit: bands of output rows (the band heights in the comments are what the plan
# picks today; the tests hold the outputs to the reference whatever it picks).
BANDED = [
    (2, 29, 29, 29, 19, 5),     # the sweep's worst row (once refused): 5 bands of 5 rows
    (2, 8, 92, 92, 36, 5),      # 7 bands of 13 rows, the last overlapping 3 rows; M = 36: four m-tiles
    (2, 30, 89, 89, 24, 3),     # odd W: 4-byte staging copies, float split loads; odd Wo: scalar stores
    (2, 19, 77, 77, 5, 7),      # K = 7, M = 5: bands of 2 rows, the last overlapping
    (3, 64, 64, 64, 16, 3),     # bands of 1 row; W a multiple of 4: 16-byte staging copies
    (2, 15, 70, 70, 8, 3),      # W even, not a multiple of 4; the last band overlapping 2 rows
    (2, 22, 41, 41, 6, 5),      # M < 16, K = 5, odd W
    (300, 26, 32, 32, 8, 3),    # 600 units (2 bands per image): each block walks several through the ring
]


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}-C{}-{}x{}-M{}-K{}".format(*s))
def test_shapes_match_reference(shape):
    check_shape(NAME, shape, SEED)


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("shape", BANDED, ids=lambda s: "B{}-C{}-{}x{}-M{}-K{}".format(*s))
def test_banded_shapes_match_reference(shape):
    check_shape(NAME, shape, SEED)


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("name", SPLIT)
def test_beyond_fp16_range_is_not_finite(name):
    """One input of image 0 beyond 65504: every output whose window holds it is inf or NaN; image 1 is exact."""
    check_beyond_fp16_range(name, SEED)


@requires_gpu_module
@pytest.mark.parametrize("name", SPLIT)
def test_float32_accuracy_is_declared(name):
    """Split operands count as float32: the default tolerance, not TF32's."""
    v = descriptor(name)
    assert v["rtol"] == variants.DEFAULT_RTOL
    assert v["epilogue"] == "none"


@requires_gpu_module
@pytest.mark.parametrize("name", SPLIT)
@pytest.mark.parametrize("shape", [(10000, 6, 22, 22, 16, 5), (10000, 12, 33, 33, 24, 5), (10000, 12, 33, 33, 24, 7)])
def test_course_layers_supported(name, shape):
    assert gpu().why_unsupported(name, *shape) == ""


@requires_gpu_module
@pytest.mark.parametrize("shape", [(10000, *s) for s in [(29, 29, 29, 19, 5), (64, 64, 64, 16, 3), (8, 92, 92, 36, 5),
                                                         (30, 94, 94, 29, 3), (16, 89, 89, 57, 5)]])
def test_images_beyond_shared_memory_are_supported(shape):
    """supports() is host code (no GPU needed): shapes once refused because the split image did not fit (four of
    them from the bench sweep) now run in bands."""
    assert gpu().why_unsupported(NAME, *shape) == ""


@requires_gpu_module
@pytest.mark.parametrize("shape", [(1, 32, 20, 20, 70, 7), (1, 32, 96, 96, 64, 7)])
def test_refuses_what_shared_memory_cannot_hold(shape):
    """Weights too large for a block even beside a band of one output row: refused before any GPU work, with one
    line that names the weights' and the band's sizes."""
    why = check_refused_for_shared_memory(NAME, shape)
    assert "split filters" in why and "band of one output row" in why
