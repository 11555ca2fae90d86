"""Step 31 (gpu-split-f16-pairs-pool-wgmma): step 30's kernel with tanh + max-pool 2/2 fused, at the edges of what it
adds. A block takes units of consecutive tiles that cover whole pooled rows of one image, and its producers keep the
un-pooled outputs in a ring per block and pool each row pair once its tiles are stored: so the shapes cover rows
that end inside a tile and rows that take several (W from 4 to 200), several pooled rows a tile (small images),
odd Ho and Wo (the last row and column left out), one pooled output (Ho = Wo = 2), many units per block (batches
beyond the persistent blocks) and few (batch 2: an image's rows cut into many units), filter groups and launches of
fewer groups than the layer has (each pools its own filters), bands of 8 channels with image rows stacked, and a
batch cut into chunks of planes. Every output is poisoned with NaN by the binding first and compared with the
numpy reference of conv + tanh + max-pool 2/2. The FP16-range contract: an input beyond 65504 reaches the pooled
outputs whose windows hold it as NaN (the pool's max propagates NaN), never as a wrong finite number."""

from __future__ import annotations

import numpy as np
import pytest
from built_variants import needs
from gpu_helpers import check_shape, close, descriptor, gpu, requires_gpu, requires_gpu_module

from pyconv import verify

NAME = "gpu-split-f16-pairs-pool-wgmma"
SEED = 3131
pytestmark = needs(NAME)  # a student handout leaves the ladder out

# (B, C, H, W, M, K)
SHAPES = [
    (3, 1, 6, 6, 4, 5),          # Ho = Wo = 2: one pooled output an image
    (2, 3, 9, 11, 7, 3),         # Ho = 7, Wo = 9: the last conv row and column are no window's
    (2, 2, 40, 4, 5, 3),         # Wo = 2: one pooled column, 19 pooled rows of a tall image
    (300, 1, 7, 9, 5, 3),        # 300 images of 2 x 3 pooled outputs: units of whole images, many a block
    (2, 6, 22, 22, 16, 5),       # sp19's conv2 at batch 2
    (2, 1, 48, 48, 6, 5),        # a first layer of 1 channel (stacked rows: one step of 5)
    (2, 7, 29, 29, 19, 3),       # the sweep's s18: C = 7 in a band of 8, several pooled rows a tile
    (2, 3, 47, 47, 32, 3),       # s20: C = 3, 2 image rows stacked a step
    (2, 2, 46, 46, 16, 5),       # s36: C = 2, K = 5: 2 steps
    (2, 4, 94, 94, 32, 5),       # s11: 2 groups of 16 filters, 3 steps
    (2, 11, 31, 31, 27, 5),      # s08: N = 136, one group
    (60, 11, 31, 31, 27, 5),     # s08 at batch 60
    (2, 7, 83, 83, 51, 3),       # s05: rows longer than a tile (W = 83 > 126 - 2 W), 2 groups
    (2, 24, 96, 96, 53, 3),      # s30: 2 groups, W = 96
    (2, 30, 81, 81, 46, 7),      # s00: 4 groups beside a 614-row slab
    (2, 26, 61, 61, 26, 7),      # s13: 2 groups, one slab buffer: a launch each (g0 > 0 pools its own filters)
    (3, 32, 12, 12, 40, 7),      # 4 groups, launches of 2
    (3, 24, 46, 46, 64, 7),      # s35: 4 groups of 16 filters, one buffer, a launch each
    (300, 26, 26, 26, 25, 5),    # s17 at batch 300
    (300, 26, 32, 32, 8, 3),     # s16 at batch 300: each slab buffer's mbarrier through many phases
    (45, 32, 96, 96, 5, 3),      # 1.2 MB of planes per image
    (1, 2, 150, 130, 6, 3),      # a rectangular image: 74 pooled rows of 64
    (2, 4, 10, 10, 64, 1),       # K = 1
    (20, 96, 200, 200, 4, 1),    # 15 MB of planes per image: the batch in two chunks (16 + 4 images), W = 200
]


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}-C{}-{}x{}-M{}-K{}".format(*s))
def test_edge_shapes_match_reference(shape):
    check_shape(NAME, shape, SEED)


@requires_gpu
@pytest.mark.gpu
def test_a_smaller_layer_after_a_larger_one_reuses_the_rings_correctly():
    """The planes and the rings live in a workspace kept between calls and grown only: a small layer after a large
    one, then the large one again."""
    for shape in [(6, 30, 40, 40, 26, 3), (3, 5, 9, 9, 4, 3), (6, 30, 40, 40, 26, 3)]:
        check_shape(NAME, shape, SEED)


@requires_gpu
@pytest.mark.gpu
def test_beyond_fp16_range_reaches_the_pooled_outputs_as_nan():
    """sp19 conv2's shape: one input of image 0 beyond FP16's 65504 makes every pooled output whose window's conv
    outputs hold it NaN, never a finite number; every other output within the tolerance."""
    B, C, H, W, M, K = 2, 6, 22, 22, 16, 5
    rng = np.random.default_rng(SEED)
    x = verify.random_nonzero(rng, (B, C, H, W))
    k = verify.random_nonzero(rng, (M, C, K, K))
    r, c = 10, 11
    x[0, 2, r, c] = 1.0e5
    Hp, Wp = (H - K + 1) // 2, (W - K + 1) // 2
    reach = np.zeros((B, M, Hp, Wp), bool)
    for pr in range(Hp):
        for pc in range(Wp):
            reach[0, :, pr, pc] = 2 * pr <= r <= 2 * pr + K and 2 * pc <= c <= 2 * pc + K
    y = gpu().conv(NAME, x, k)
    assert np.isnan(y[reach]).all(), f"{NAME}: a pooled output whose window holds 1e5 came out a number"
    x[0, 2, r, c] = 1.0  # the reference for the outputs it does not reach
    ref = verify.expected(x, k, "tanh-maxpool2")
    ok, msg = close(np.where(reach, 0.0, y), np.where(reach, 0.0, ref), *verify.tolerance(descriptor(NAME)["rtol"], C, K))
    assert ok, f"{NAME}: {msg}"


@requires_gpu_module
def test_refusals_are_step_30s_in_its_own_name():
    """The kernel is step 30's, so are its limits; the message names this step."""
    assert gpu().why_unsupported(NAME, 2, 3, 12, 12, 8, 4) == (
        f"{NAME}: K = 4; its kernels are built for K = 1, 3, 5 and 7")
    why = gpu().why_unsupported(NAME, 2, 32, 1500, 1500, 4, 7)
    assert why.startswith(f"{NAME}: weights (14 KB), a slab of 9128 rows") and "\n" not in why
