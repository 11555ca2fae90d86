"""The native CPU convolutions against the numpy reference, and their argument checks."""

import numpy as np
import pytest
from built_variants import needs
from conftest import assert_close, random_conv_inputs, random_conv_shapes
from student_variants import skip_if_unstarted

from pyconv import (
    _cpu,  # always built by `invoke build`; a missing module is a failure, not a skip
    verify,
)
from pyconv.core import reference

NAMES = [v["name"] for v in _cpu.variants()]


def test_every_build_has_the_students_slot():
    assert "cpu-student" in NAMES


@needs("cpu-naive", "cpu-fast")
def test_registry_lists_both_variants():
    assert {"cpu-naive", "cpu-fast"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_matches_reference_on_random_shapes(name, rng):
    skip_if_unstarted(name, _cpu.conv)
    shapes = random_conv_shapes(rng, 220)
    for shape in shapes:
        x, k = random_conv_inputs(rng, shape)
        b, c, h, w, m, kk = shape
        out = np.full((b, m, h - kk + 1, w - kk + 1), np.nan, dtype=np.float32)  # poisoned
        y = _cpu.conv(name, x, k, out)
        assert y is out or np.shares_memory(y, out)
        # ten times stricter than the variants' own rtol: the CPU sums in float32 in a fixed order
        assert_close(out, reference.conv2d(x, k), *verify.tolerance(1e-5, c, kk), what=f"{name} {shape}")


# The random shapes above keep M <= 12; these reach cpu-fast's channel-lane kernel (M >= 16 and few useful wide
# outputs) at its edges: two channel vectors per block, a partly empty last vector, rows split into chunks.
@pytest.mark.parametrize("shape", [(2, 3, 10, 10, 32, 3), (1, 2, 9, 30, 40, 3), (1, 1, 9, 40, 16, 9),
                                   (3, 4, 12, 40, 48, 7), (2, 3, 8, 8, 20, 5), (2, 12, 33, 33, 24, 7)])
@pytest.mark.parametrize("name", NAMES)
def test_many_output_channels(name, shape, rng):
    skip_if_unstarted(name, _cpu.conv)
    x, k = random_conv_inputs(rng, shape)
    b, c, h, w, m, kk = shape
    out = np.full((b, m, h - kk + 1, w - kk + 1), np.nan, dtype=np.float32)  # poisoned
    _cpu.conv(name, x, k, out)
    assert_close(out, reference.conv2d(x, k), *verify.tolerance(1e-5, c, kk), what=f"{name} {shape}")


@pytest.mark.parametrize("name", NAMES)
def test_batch_of_course_size(name, rng):
    skip_if_unstarted(name, _cpu.conv)
    x, k = random_conv_inputs(rng, (64, 6, 22, 22, 16, 5))
    assert_close(_cpu.conv(name, x, k), reference.conv2d(x, k), rtol=1e-5, atol=1e-5, what=name)


@pytest.mark.parametrize("name", NAMES)
def test_argument_errors(name):
    # checked by the runtime before any variant runs: the same for every variant, a skeleton's included
    x = np.ones((2, 3, 8, 8), np.float32)
    k = np.ones((4, 3, 3, 3), np.float32)
    cases = [
        ((x.astype(np.float64), k), "dtype"),
        ((x, k.astype(np.int32)), "dtype"),
        ((x[0], k), "4-D"),
        ((x[:, :, :, ::2], k), "C-contiguous"),
        ((x, np.ones((4, 2, 3, 3), np.float32)), "channels"),
        ((x, np.ones((4, 3, 9, 9), np.float32)), "larger than the input"),
        ((x, np.ones((4, 3, 3, 2), np.float32)), "square"),
    ]
    for args, msg in cases:
        with pytest.raises(ValueError, match=msg):
            _cpu.conv(name, *args)
    with pytest.raises(ValueError, match="unknown CPU convolution 'nope'"):
        _cpu.conv("nope", x, k)
    with pytest.raises(ValueError, match="out: shape"):
        _cpu.conv(name, x, k, np.zeros((2, 4, 5, 5), np.float32))
