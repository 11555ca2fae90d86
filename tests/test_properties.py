"""Property-based tests (Hypothesis): every CPU and GPU convolution variant against the numpy reference on
random shapes (B, C, H, W, M, K) with K <= H, W, random non-zero inputs and poisoned outputs. A failure
shrinks to a minimal shape (integers shrink towards their lower bounds: K to 1, H and W to K, B, C, M to 1).

Examples per variant: $PYCONV_HYPOTHESIS_EXAMPLES for the CPU variants (default 60, what CI runs) and
$PYCONV_HYPOTHESIS_GPU_EXAMPLES for the GPU ones (default 500). Runs are derandomized (the same examples on
every run) so a CI failure reproduces. The session ends with one line per variant,
"hypothesis: <variant>: <N> examples (<U> distinct shapes)", and when $PYCONV_HYPOTHESIS_REPORT names a file
the counts are written there as JSON."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import numpy as np
import pytest
from built_variants import CPU, GPU
from conftest import assert_close, random_conv_inputs
from gpu_helpers import requires_gpu
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from student_variants import skip_if_unstarted

from pyconv import _cpu, verify
from pyconv.core import reference
from pyconv.core.fileio import write_text_atomic

CPU_EXAMPLES = int(os.environ.get("PYCONV_HYPOTHESIS_EXAMPLES", "60"))
GPU_EXAMPLES = int(os.environ.get("PYCONV_HYPOTHESIS_GPU_EXAMPLES", "500"))
_COMMON = dict(deadline=None, derandomize=True, database=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("pyconv-cpu", max_examples=CPU_EXAMPLES, **_COMMON)
settings.register_profile("pyconv-gpu", max_examples=GPU_EXAMPLES, **_COMMON)

CPU_NAMES = CPU


# ------------------------------------------------------------------------------------------ counting
COUNTS: dict[str, int] = defaultdict(int)
SHAPES: dict[str, set] = defaultdict(set)
REFUSED: dict[str, int] = defaultdict(int)


class _CountReport:
    """Prints the per-variant example counts at the end of the session (registered once, below)."""

    def pytest_terminal_summary(self, terminalreporter):
        if not COUNTS:
            return
        terminalreporter.section("hypothesis example counts")
        for name in sorted(COUNTS):
            refused = f", {REFUSED[name]} refused as unsupported" if REFUSED[name] else ""
            terminalreporter.write_line(f"hypothesis: {name}: {COUNTS[name]} examples "
                                        f"({len(SHAPES[name])} distinct shapes{refused})")
        dest = os.environ.get("PYCONV_HYPOTHESIS_REPORT")
        if dest:
            doc = {n: {"examples": COUNTS[n], "distinct_shapes": len(SHAPES[n]),
                       "refused_unsupported": REFUSED[n]} for n in sorted(COUNTS)}
            write_text_atomic(dest, json.dumps(doc, indent=1) + "\n")


@pytest.fixture(scope="session", autouse=True)
def _count_report(request):
    if not request.config.pluginmanager.has_plugin("pyconv-hypothesis-counts"):
        request.config.pluginmanager.register(_CountReport(), "pyconv-hypothesis-counts")


def record(name: str, shape) -> None:
    COUNTS[name] += 1
    SHAPES[name].add(tuple(shape))


# ------------------------------------------------------------------------------------------ strategies
@st.composite
def conv_cases(draw, max_b=4, max_c=8, max_hw=32, max_m=12, max_k=7, min_out=1):
    """((B, C, H, W, M, K), seed): K <= H, W, an output of at least min_out x min_out; seed for the inputs."""
    k = draw(st.integers(1, max_k))
    h = draw(st.integers(k + min_out - 1, max_hw))
    w = draw(st.integers(k + min_out - 1, max_hw))
    b = draw(st.integers(1, max_b))
    c = draw(st.integers(1, max_c))
    m = draw(st.integers(1, max_m))
    seed = draw(st.integers(0, 2**32 - 1))
    return (b, c, h, w, m, k), seed


def test_strategy_respects_its_bounds():
    """The strategy itself: K <= H, W and the output at least min_out wide, on every drawn case."""
    seen = []

    @settings(max_examples=200, derandomize=True, database=None, deadline=None)
    @given(conv_cases(min_out=2))
    def check(case):
        (b, c, h, w, m, k), seed = case
        assert 1 <= k <= 7 and h - k + 1 >= 2 and w - k + 1 >= 2 and h <= 32 and w <= 32
        assert min(b, c, m) >= 1 and 0 <= seed < 2**32
        seen.append((h, w, k))

    check()
    assert len(set(seen)) > 50  # it explores, rather than repeating one shape


# ------------------------------------------------------------------------------------------ CPU
@pytest.mark.parametrize("name", CPU_NAMES)
def test_cpu_variant_matches_reference(name):
    skip_if_unstarted(name, _cpu.conv)
    @settings(settings.get_profile("pyconv-cpu"))
    @given(conv_cases())
    @example(((1, 1, 1, 1, 1, 1), 0))  # the smallest convolution
    @example(((2, 3, 7, 9, 4, 7), 1))  # K = H
    def check(case):
        shape, seed = case
        b, c, h, w, m, k = shape
        x, wt = random_conv_inputs(np.random.default_rng(seed), shape)
        out = np.full((b, m, h - k + 1, w - k + 1), np.nan, dtype=np.float32)  # poisoned
        _cpu.conv(name, x, wt, out)
        record(name, shape)
        # ten times stricter than the variants' own rtol: the CPU sums in float32 in a fixed order
        assert_close(out, reference.conv2d(x, wt), *verify.tolerance(1e-5, c, k), what=f"{name} {shape}")

    check()
    assert COUNTS[name] >= min(CPU_EXAMPLES, 10)


# ------------------------------------------------------------------------------------------ GPU
def _variant(name: str) -> dict:
    from pyconv import _gpu

    return next(v for v in _gpu.variants() if v["name"] == name)


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("name", GPU)
def test_gpu_variant_matches_reference(name):
    from pyconv import _gpu

    skip_if_unstarted(name, _gpu.conv)
    v = _variant(name)
    fused = v["epilogue"] == "tanh-maxpool2"
    rtol = v["rtol"]  # the registry's (1e-4 unless the variant rounds on purpose and says why)

    # A first-layer variant (it takes C = 1 and refuses C = 2, e.g. step 19) is drawn over its domain: over any C it
    # would refuse most cases and test little (the refusal itself is tested once, by the second example below).
    first_layer_only = bool(_gpu.why_unsupported(name, 1, 2, 12, 12, 4, 3)) and not _gpu.why_unsupported(
        name, 1, 1, 12, 12, 4, 3)

    @settings(settings.get_profile("pyconv-gpu"))
    @given(conv_cases(max_b=8, max_c=1 if first_layer_only else 12, max_hw=40, max_m=40, min_out=2 if fused else 1))
    @example(((1, 1, 2, 2, 1, 1), 0) if fused else ((1, 1, 1, 1, 1, 1), 0))
    @example(((2, 3, 8, 9, 17, 7), 1))  # K = H - 1, M one past a 16-wide tile
    def check(case):
        shape, seed = case
        b, c, h, w, m, k = shape
        x, wt = random_conv_inputs(np.random.default_rng(seed), shape)
        why = _gpu.why_unsupported(name, *shape)
        if why:  # a documented refusal: a clear error, never a wrong answer
            with pytest.raises(ValueError, match="^" + name):
                _gpu.conv(name, x, wt)
            REFUSED[name] += 1
            record(name, shape)
            return
        y = _gpu.conv(name, x, wt)  # the binding fills the output with NaN before the launch
        record(name, shape)
        assert_close(y, verify.expected(x, wt, v["epilogue"]), *verify.tolerance(rtol, c, k), what=f"{name} {shape}")

    check()
    assert COUNTS[name] >= GPU_EXAMPLES
    assert REFUSED[name] < COUNTS[name] / 2, f"{name} refused most shapes: the property tested too little"
