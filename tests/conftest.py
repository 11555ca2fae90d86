"""Shared fixtures. Tests that need the data, the course checkpoint, PyTorch or a GPU skip cleanly without them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pyconv.core import paths  # noqa: E402

COURSE_SP19 = paths.COURSE_MODELS / "sp19"
COURSE_SYMBOL = COURSE_SP19 / "ece408-symbol.json"
COURSE_PARAMS = COURSE_SP19 / "ece408-0002.params"


def have_data() -> bool:
    return paths.DATA_FILE.exists()


needs_data = pytest.mark.skipif(not have_data(), reason="datasets/fashion-mnist.h5 missing (run `invoke data`)")
needs_course = pytest.mark.skipif(not COURSE_PARAMS.exists(), reason="course checkpoint not present")
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch not installed")
needs_matplotlib = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                      reason="matplotlib not installed (the `bench` or `grade` extra)")


@pytest.fixture(scope="session")
def rng():
    return np.random.default_rng(408)


@pytest.fixture(scope="session")
def course_model(tmp_path_factory):
    """The course's sp19 checkpoint, imported into a temporary folder (never into the project)."""
    if not COURSE_PARAMS.exists():
        pytest.skip("course checkpoint not present")
    from pyconv.core import mxnet_import
    from pyconv.core.model import load_model

    dest = tmp_path_factory.mktemp("course")
    path = mxnet_import.import_checkpoint(COURSE_SYMBOL, COURSE_PARAMS, "course-sp19", dest_dir=dest)
    return load_model(path)


def random_conv_shapes(rng, n: int, max_b: int = 4, max_c: int = 8, max_hw: int = 40, max_m: int = 12,
                       max_k: int = 7) -> list[tuple[int, int, int, int, int, int]]:
    """(B, C, H, W, M, K) covering the edges: K=1, K=H and/or K=W, odd sizes, C>1, M=1, non-square inputs."""
    shapes = [(1, 1, 1, 1, 1, 1), (1, 1, 5, 5, 1, 5), (2, 3, 7, 9, 1, 7), (1, 6, 22, 22, 16, 5),
              (2, 1, 48, 48, 6, 5), (1, 1, 28, 28, 50, 5), (1, 12, 33, 33, 24, 7), (3, 2, 13, 6, 5, 6),
              (2, 5, 9, 17, 3, 1), (1, 1, 72, 72, 12, 7), (1, 1, 70, 70, 12, 5), (1, 12, 33, 33, 24, 5)]
    while len(shapes) < n:
        k = int(rng.integers(1, max_k + 1))
        h = int(rng.integers(k, max_hw + 1))
        w = int(rng.integers(k, max_hw + 1))
        if rng.random() < 0.15:
            h = k  # K == H
        shapes.append((int(rng.integers(1, max_b + 1)), int(rng.integers(1, max_c + 1)), h, w,
                       int(rng.integers(1, max_m + 1)), k))
    return shapes


def random_conv_inputs(rng, shape):
    """Random non-zero inputs in [-1, -0.05] U [0.05, 1] (never zero: zeros hide unwritten outputs)."""
    b, c, h, w, m, k = shape

    def nz(*s):
        v = rng.uniform(0.05, 1.0, s) * rng.choice([-1.0, 1.0], s)
        return v.astype(np.float32)

    return nz(b, c, h, w), nz(m, c, k, k)


def assert_close(got, ref, rtol, atol, what=""):
    """pyconv.verify's comparison: |got - ref| <= atol + rtol*|ref| everywhere, and no NaN (a NaN means an element
    was never written); the message names the worst element."""
    from pyconv import verify

    c = verify.compare(np.asarray(got), np.asarray(ref), rtol, atol)
    assert c.passed, f"{what}: {c.why}"


def _built_gpu_variants() -> set[str]:
    try:
        from pyconv import _gpu
    except ImportError:  # not built: every GPU test skips anyway (gpu_helpers)
        return set()
    return {v["name"] for v in _gpu.variants()}


def pytest_collection_modifyitems(config, items):
    """The ladder's history (native/cuda/ladder/): a test of one of its steps is marked `ladder` (by hand, or here
    where a parameter names one) and skips, saying so, unless the build has them (`invoke build --gpu --ladder`)."""
    from pyconv import ladder

    history = {s.name for s in ladder.registry() if not s.live}
    built = bool(history & _built_gpu_variants())
    skip = pytest.mark.skipif(True, reason="tests a step of the ladder's history, which this build leaves out "
                                           "(`invoke build --gpu --ladder` compiles it)")
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and any(isinstance(v, str) and v in history for v in callspec.params.values()):
            item.add_marker(pytest.mark.ladder)
        if not built and item.get_closest_marker("ladder") is not None:
            item.add_marker(skip, append=False)
