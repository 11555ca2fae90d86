"""Shared GPU test helpers: skip cleanly where pyconv._gpu is not built or no GPU is visible (CI)."""

from __future__ import annotations

import numpy as np
import pytest

from pyconv import verify
from pyconv.core import reference
from pyconv.core.model import Layer, Model, validate

try:
    from pyconv import _gpu
except ImportError:  # not built (no nvcc or no cuBLAS at build time)
    _gpu = None

HAVE_GPU = _gpu is not None and _gpu.available()
requires_gpu = pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU visible (or pyconv._gpu not built)")
requires_gpu_module = pytest.mark.skipif(_gpu is None, reason="pyconv._gpu not built")


def gpu():
    """The module, for tests already marked requires_gpu."""
    assert _gpu is not None
    return _gpu


def descriptor(name: str) -> dict:
    """The registry's descriptor of GPU variant `name` (pyconv._gpu.variants())."""
    return next(v for v in gpu().variants() if v["name"] == name)


def close(y: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> tuple[bool, str]:
    """pyconv.verify's comparison (atol + rtol*|ref|, NaN anywhere fails): (ok, a message naming the worst
    element)."""
    c = verify.compare(np.asarray(y), np.asarray(ref), rtol, atol)
    return c.passed, c.why


def check_shape(name: str, shape, seed: int) -> None:
    """The variant on one (B, C, H, W, M, K) shape against the reference, held to its registry tolerance: it must
    support the shape, and every output (poisoned with NaN by the binding before the launch) must be close."""
    B, C, H, W, M, K = shape
    g = gpu()
    assert g.why_unsupported(name, B, C, H, W, M, K) == ""
    rng = np.random.default_rng([seed, *shape])
    x = verify.random_nonzero(rng, (B, C, H, W))
    k = verify.random_nonzero(rng, (M, C, K, K))
    v = descriptor(name)
    ok, msg = close(g.conv(name, x, k), verify.expected(x, k, v["epilogue"]), *verify.tolerance(v["rtol"], C, K))
    assert ok, f"{name} {shape}: {msg}"


def check_beyond_fp16_range(name: str, seed: int, channel: int = 2) -> None:
    """A variant that rounds its inputs to FP16 (split or not), on sp19 conv2's shape: one input of image 0 beyond
    FP16's 65504 (in `channel`) makes every output whose window holds it inf or NaN, never a quietly wrong finite
    number; image 1 stays within the variant's tolerance."""
    B, C, H, W, M, K = 2, 6, 22, 22, 16, 5
    rng = np.random.default_rng(seed)
    x = verify.random_nonzero(rng, (B, C, H, W))
    k = verify.random_nonzero(rng, (M, C, K, K))
    x[0, channel, 10, 11] = 1.0e5
    y = gpu().conv(name, x, k)
    reached = y[0, :, 10 - K + 1:11, 11 - K + 1:12]
    assert not np.isfinite(reached).any(), f"{name}: an output whose window holds 1e5 came out finite"
    v = descriptor(name)
    ok, msg = close(y[1:], verify.expected(x[1:], k), *verify.tolerance(v["rtol"], C, K))
    assert ok, f"{name}: {msg}"


def check_layers_in_turn(name: str, shapes, seed: int) -> None:
    """The variant on several (B, C, H, W, M, K) layers one after another, each against the reference: for variants
    that keep a workspace between calls and grow it only (a small layer after a large one finds larger buffers
    left behind)."""
    rng = np.random.default_rng(seed)
    v = descriptor(name)
    for B, C, H, W, M, K in shapes:
        x = verify.random_nonzero(rng, (B, C, H, W))
        k = verify.random_nonzero(rng, (M, C, K, K))
        ok, msg = close(gpu().conv(name, x, k), verify.expected(x, k), *verify.tolerance(v["rtol"], C, K))
        assert ok, f"{name} {(B, C, H, W, M, K)}: {msg}"


def check_refused_for_shared_memory(name: str, shape) -> str:
    """The variant refuses (B, C, H, W, M, K) for shared memory: why_unsupported gives one line that starts with the
    variant's name and names the KB it needs, and conv raises before any GPU work. Returns the line."""
    why = gpu().why_unsupported(name, *shape)
    assert why.startswith(f"{name}: ") and "KB of shared memory" in why and "\n" not in why
    B, C, H, W, M, K = shape
    with pytest.raises(ValueError, match="KB of shared memory"):  # refused before any GPU work
        gpu().conv(name, np.ones((B, C, H, W), np.float32), np.ones((M, C, K, K), np.float32))
    return why


def random_model(rng: np.random.Generator, input_shape=(1, 20, 20), name="random-test") -> Model:
    """A small LeNet-style network with random float32 weights (conv, tanh, pool, conv, flatten, FC, tanh, FC)."""
    c, h, w = input_shape

    def wt(*shape, scale):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    layers = [
        Layer("conv", name="conv1", out_channels=4, kernel=5, weight=wt(4, c, 5, 5, scale=0.005)),
        Layer("tanh"),
        Layer("pool", mode="max", kernel=2, stride=2),
        Layer("conv", name="conv2", out_channels=8, kernel=3, weight=wt(8, 4, 3, 3, scale=0.3)),
        Layer("flatten"),
    ]
    h1 = (h - 4) // 2 - 2
    w1 = (w - 4) // 2 - 2
    flat = 8 * h1 * w1
    layers += [
        Layer("fc", name="fc1", out_features=32, weight=wt(32, flat, scale=1 / np.sqrt(flat)), bias=wt(32, scale=0.1)),
        Layer("tanh"),
        Layer("fc", name="fc2", out_features=10, weight=wt(10, 32, scale=0.5), bias=wt(10, scale=0.1)),
        Layer("softmax"),
    ]
    m = Model(name=name, arch="test", input_shape=tuple(input_shape), layers=layers)
    validate(m)
    return m


def network_of(model: Model, device: int = 0):
    return gpu().Network([la.spec() for la in model.layers], [(la.weight, la.bias) for la in model.layers],
                         tuple(model.input_shape), device)


def clear_margin(scores: np.ndarray, margin: float) -> np.ndarray:
    """Rows whose top score beats the runner-up by more than `margin` (labels there cannot flip on rounding)."""
    top2 = np.sort(scores, axis=1)[:, -2:]
    return (top2[:, 1] - top2[:, 0]) > margin


class StandInGpu:
    """pyconv._gpu's benchmark API with the reference as the kernel: fake-plain (conv), fake-fused (conv + tanh +
    pool), fake-wrong (off by one in the last image: the check must catch it), fake-picky (refuses C < 4)."""

    def __init__(self):
        self.timed: list[str] = []

    @staticmethod
    def available():
        return True

    @staticmethod
    def device_info():
        return {"name": "Stand-in GPU", "compute_capability": "9.0", "multiprocessors": 1,
                "cuda_driver_version": 13000, "cuda_runtime_version": 12080}

    @staticmethod
    def variants():
        def v(name, step, epilogue="none"):
            return {"name": name, "step": step, "summary": "stand-in", "epilogue": epilogue, "x_on_host": False,
                    "precision": "fp32", "rtol": 1e-4, "device": "gpu", "reads_u8": False,
                    "roles": {"m3": {"role": "on-request", "reason": "a stand-in"}}}

        return [v("fake-plain", 0), v("fake-wrong", 1), v("fake-picky", 2), v("fake-fused", 3, "tanh-maxpool2")]

    @staticmethod
    def why_unsupported(name, B, C, H, W, M, K):
        return "needs C >= 4" if name == "fake-picky" and C < 4 else ""

    @staticmethod
    def conv(name, x, k):
        y = reference.conv2d(x, k)
        if name == "fake-wrong":
            y[-1] += 1.0
        return reference.tanh_maxpool2(y) if name == "fake-fused" else y

    def time_conv(self, name, x, k, warmup, reps):
        self.timed.append(name)
        base = 0.5 if name == "fake-fused" else 2.0
        return [base * (1 + 0.1 * i) for i in range(reps)]

    def time_conv_tanh_pool(self, name, x, k, warmup, reps):
        self.timed.append(name + "+tp")
        return [3.0] * reps

    @staticmethod
    def measure_copy_bandwidth(nbytes, reps):
        return [1000.0] * reps

    @staticmethod
    def measure_fma_rate(reps):
        return [20000.0] * reps

    @staticmethod
    def measure_sgemm_rate(n, reps):
        return [30000.0] * reps


def use_stand_in_gpu(monkeypatch, g, torch=None) -> None:
    """Make `invoke bench` run on the stand-in g: a GPU is visible, pyconv._gpu is g and its registry is the
    stand-in's variants (no CPU ones), no tuning cache, and gpu_layers.torch_gpu gives `torch`."""
    from pyconv import autotune, native, variants
    from pyconv.bench import gpu_layers
    from pyconv.bench import run as bench

    monkeypatch.setattr(bench, "_gpu_available", lambda: True)
    monkeypatch.setattr(native, "gpu", lambda *_a, **_k: g)
    monkeypatch.setattr(autotune, "load_cache", lambda _name: 0)
    monkeypatch.setattr(gpu_layers, "torch_gpu", lambda: torch)
    stand_ins = [variants.from_dict(d, lambda s, n=d["name"]: g.why_unsupported(n, *s)) for d in g.variants()]
    monkeypatch.setattr(bench, "_registries", lambda: (stand_ins, []))
