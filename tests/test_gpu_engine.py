"""The CUDA engine: every registry variant against the numpy reference, the layer kernels, the whole network
against the CPU engine, bad input, out-of-memory batches. GPU tests skip where no GPU is visible; the tests at the
top run everywhere pyconv._gpu is built (CI included)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from built_variants import CPU, GPU, GPU_VARIANTS, M3_PICK, needs, needs_m3_pick
from gpu_helpers import (
    HAVE_GPU,
    clear_margin,
    close,
    descriptor,
    gpu,
    network_of,
    random_model,
    requires_gpu,
    requires_gpu_module,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from student_variants import skip_if_unstarted

from pyconv import verify
from pyconv.core import reference
from pyconv.core.errors import PyconvError
from pyconv.core.model import Layer, Model

# ------------------------------------------------------------------ everywhere (no GPU needed)


@requires_gpu_module
@pytest.mark.skipif(HAVE_GPU, reason="checks the no-GPU behaviour")
def test_without_gpu_import_works_and_use_raises_cuda_error():
    g = gpu()
    assert g.available() is False
    x = np.ones((1, 1, 4, 4), np.float32)
    k = np.ones((1, 1, 3, 3), np.float32)
    with pytest.raises(g.CudaError, match="no usable CUDA GPU"):
        g.conv(GPU[0], x, k)
    with pytest.raises(g.CudaError, match="no usable CUDA GPU"):
        g.device_info()
    with pytest.raises(g.CudaError, match="no usable CUDA GPU"):
        g.measure_fma_rate(1)
    m = random_model(np.random.default_rng(0))
    with pytest.raises(g.CudaError, match="no usable CUDA GPU"):
        network_of(m)
    from pyconv import native
    from pyconv.engines.gpu import GpuEngine

    with pytest.raises(PyconvError, match="no CUDA GPU is visible: milestones 3, 4 and final need one"):
        native.gpu()
    with pytest.raises(PyconvError, match="no CUDA GPU is visible"):
        GpuEngine(m)


@requires_gpu_module
def test_chunk_starts_split_the_batch_into_tapering_parts():
    starts = gpu().chunk_starts
    assert starts(10000, 4) == [0, 2500, 5000, 7500, 10000]
    assert starts(10000, 4, 1.0) == starts(10000, 4)
    assert starts(15, 4, 0.5) == [0, 8, 12, 14, 15]  # 8, 4, 2, 1 images
    assert starts(3, 8) == [0, 1, 2, 3]  # no more parts than images
    assert starts(5, 4, 0.01) == [0, 2, 3, 4, 5]  # a part never goes empty
    assert starts(1, 1, 0.3) == [0, 1]
    assert starts(15, 4, 2.0) == [0, 1, 3, 7, 15]  # 1, 2, 4, 8 images
    assert starts(10000, 4, 4.0)[1] == 118  # 10000 / 85
    for bad in (0.0, -0.5, 4.01, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"taper must be in \(0, 4\]"):
            starts(100, 4, bad)
    with pytest.raises(ValueError, match="rows and chunks must be >= 1"):
        starts(0, 4)
    with pytest.raises(ValueError, match="rows and chunks must be >= 1"):
        starts(10, 0)


@requires_gpu_module
@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 20000), chunks=st.integers(1, 40), taper=st.floats(0.05, 4.0))
def test_chunk_starts_properties(rows, chunks, taper):
    at = gpu().chunk_starts(rows, chunks, taper)
    sizes = np.diff(at)
    assert at[0] == 0 and at[-1] == rows and len(sizes) == min(chunks, rows) and sizes.min() >= 1
    if sizes.min() > 1:  # no part was held at its one image: each is `taper` times the one before, within rounding
        weights = taper ** np.arange(len(sizes))
        np.testing.assert_allclose(sizes, rows * weights / weights.sum(), atol=1.0)


@requires_gpu_module
@needs("gpu-baseline")
def test_registry_lists_baseline_first_with_its_limits():
    g = gpu()
    assert GPU[0] == "gpu-baseline"
    assert g.why_unsupported("gpu-baseline", 1, 1, 8, 8, 70000, 3).startswith("gpu-baseline: M = 70000")
    assert g.why_unsupported("gpu-baseline", 2, 3, 8, 8, 6, 5) == ""
    with pytest.raises(ValueError, match="grid's z limit"):
        g.conv("gpu-baseline", np.ones((1, 1, 4, 4), np.float32), np.ones((70000, 1, 3, 3), np.float32))


@requires_gpu_module
@pytest.mark.parametrize("name", GPU)
def test_the_registry_checks_arguments_before_the_gpu(name):
    # the runtime's checks, before any variant runs: the same for every variant, a skeleton's included
    g = gpu()
    assert len(set(GPU)) == len(GPU)
    for v in g.variants():
        assert v["epilogue"] in ("none", "tanh-maxpool2") and 0 < v["rtol"] < 0.1
    with pytest.raises(ValueError, match="unknown GPU convolution 'nope'"):
        g.conv("nope", np.ones((1, 1, 4, 4), np.float32), np.ones((1, 1, 3, 3), np.float32))
    with pytest.raises(ValueError, match="dtype"):
        g.conv(name, np.ones((1, 1, 4, 4), np.float64), np.ones((1, 1, 3, 3), np.float32))
    with pytest.raises(ValueError, match="4-D"):
        g.conv(name, np.ones((1, 4, 4), np.float32), np.ones((1, 1, 3, 3), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        g.conv(name, np.ones((1, 1, 4, 8), np.float32)[..., ::2], np.ones((1, 1, 3, 3), np.float32))
    with pytest.raises(ValueError, match="larger than the input"):
        g.conv(name, np.ones((1, 1, 2, 2), np.float32), np.ones((1, 1, 3, 3), np.float32))
    # A malformed network is refused before any GPU work.
    bad = [{"type": "conv", "name": "c", "out_channels": 2, "kernel": 3}]
    with pytest.raises(ValueError, match="flat class vector"):
        g.Network(bad, [(np.ones((2, 1, 3, 3), np.float32), None)], (1, 5, 5))
    with pytest.raises(ValueError, match=r"weight must be \[3\]\[1\]\[3\]\[3\]"):
        g.Network([{"type": "conv", "name": "c", "out_channels": 3, "kernel": 3}, {"type": "flatten"}],
                  [(np.ones((2, 1, 3, 3), np.float32), None), (None, None)], (1, 5, 5))


@requires_gpu_module
def test_the_plan_of_milestones_3_and_4_from_the_real_registry():
    from pyconv import variants
    from pyconv.plan import conv_sites, plan

    m = random_model(np.random.default_rng(1))
    sites, vs = conv_sites(m, 100), variants.gpu_variants()
    # milestone 3's default; a build without one (a student handout) runs the student's variant
    first = M3_PICK or "gpu-student"
    assert plan("3", sites, vs).impls == [first, first]
    assert plan("4", sites, vs, impl=GPU[0]).impls == [GPU[0], GPU[0]]
    with pytest.raises(PyconvError, match=f"unknown GPU implementation '{CPU[0]}' \\(known: {GPU[0]}"):
        plan("3", sites, vs, impl=CPU[0])


# ------------------------------------------------------------------ on a GPU

SEED = 408


def reference_for(variant: dict, x: np.ndarray, k: np.ndarray) -> np.ndarray:
    return verify.expected(x, k, variant["epilogue"])


def tolerances(variant: dict, C: int, K: int) -> tuple[float, float]:
    return verify.tolerance(variant["rtol"], C, K)


def random_shapes(n: int, rng: np.random.Generator) -> list[tuple[int, int, int, int, int, int]]:
    """(B, M, C, H, W, K): K=1, K=H (and K=W), M=1, C>1, odd and non-square sizes, plus random ones."""
    shapes = [(1, 1, 1, 1, 1, 1), (2, 1, 1, 7, 7, 7), (1, 3, 2, 5, 9, 5), (3, 1, 4, 9, 5, 5), (2, 6, 1, 48, 48, 5),
              (2, 16, 6, 22, 22, 5), (1, 4, 3, 17, 17, 1), (5, 2, 2, 3, 3, 3), (1, 7, 5, 33, 31, 7)]
    while len(shapes) < n:
        K = int(rng.integers(1, 8))
        H, W = int(rng.integers(K, K + 24)), int(rng.integers(K, K + 24))
        shapes.append((int(rng.integers(1, 5)), int(rng.integers(1, 13)), int(rng.integers(1, 7)), H, W, K))
    return shapes


def variant_ids():
    return GPU


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("name", variant_ids())
def test_variant_matches_reference_on_random_shapes(name):
    g, v = gpu(), descriptor(name)
    skip_if_unstarted(name, g.conv)
    rng = np.random.default_rng(SEED)
    tested = 0
    for B, M, C, H, W, K in random_shapes(220, rng):
        if g.why_unsupported(name, B, C, H, W, M, K):
            continue
        if v["epilogue"] == "tanh-maxpool2" and (H - K + 1 < 2 or W - K + 1 < 2):
            continue
        x = rng.uniform(-1, 1, (B, C, H, W)).astype(np.float32)
        k = rng.uniform(-1, 1, (M, C, K, K)).astype(np.float32)
        y = g.conv(name, x, k)  # the output is poisoned with NaN before the launch
        ok, msg = close(y, reference_for(v, x, k), *tolerances(v, C, K))
        assert ok, f"{name} B={B} M={M} C={C} H={H} W={W} K={K}: {msg}"
        tested += 1
    if name == M3_PICK:  # milestone 3's default takes every shape
        assert tested == 220
    assert tested > 0, f"{name} supports none of the random shapes"


@pytest.fixture(scope="module")
def batch_10000():
    rng = np.random.default_rng(SEED + 1)
    x = rng.uniform(-1, 1, (10000, 1, 28, 28)).astype(np.float32)
    k = rng.uniform(-1, 1, (6, 1, 5, 5)).astype(np.float32)
    return x, k, reference.conv2d(x, k)


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("name", variant_ids())
def test_variant_batch_1_and_10000(name, batch_10000):
    g, v = gpu(), descriptor(name)
    skip_if_unstarted(name, g.conv)
    x, k, ref = batch_10000
    if g.why_unsupported(name, 10000, 1, 28, 28, 6, 5):
        pytest.skip(f"{name}: {g.why_unsupported(name, 10000, 1, 28, 28, 6, 5)}")
    if v["epilogue"] == "tanh-maxpool2":
        ref = reference.tanh_maxpool2(ref)
    rtol, atol = tolerances(v, 1, 5)
    for n in (1, 10000):
        ok, msg = close(g.conv(name, x[:n], k), ref[:n], rtol, atol)
        assert ok, f"{name} batch {n}: {msg}"


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("name", variant_ids())
def test_timing_functions_return_one_positive_time_per_rep(name):
    g = gpu()
    skip_if_unstarted(name, g.conv)
    rng = np.random.default_rng(SEED + 2)
    x = rng.uniform(-1, 1, (8, 1, 48, 48)).astype(np.float32)
    k = rng.uniform(-1, 1, (6, 1, 5, 5)).astype(np.float32)
    if g.why_unsupported(name, 8, 1, 48, 48, 6, 5):
        pytest.skip("shape not supported by this variant")
    for fn in (g.time_conv, g.time_conv_tanh_pool):
        ms = fn(name, x, k, warmup=1, reps=3)
        assert len(ms) == 3 and all(t > 0 and np.isfinite(t) for t in ms)


@requires_gpu
@pytest.mark.gpu
def test_roofline_probes_measure_something():
    g = gpu()
    for rates in (g.measure_copy_bandwidth(1 << 26, 3), g.measure_fma_rate(3), g.measure_sgemm_rate(1024, 3)):
        assert len(rates) == 3 and all(r > 0 and np.isfinite(r) for r in rates)


def tiny_net(layers: list[Layer], input_shape) -> Model:
    return Model(name="layers", arch="test", input_shape=input_shape, layers=layers)


def cpu_logits(model: Model, x: np.ndarray) -> np.ndarray:
    """The CPU engine's last activations without softmax (the GPU's logits hook skips it too)."""
    a = x.astype(np.float32)
    for la in model.layers:
        if la.type == "conv":
            a = reference.conv2d(a, la.weight)
        elif la.type in ("tanh", "relu", "sigmoid"):
            a = reference.activation(a, la.type).astype(np.float32)
        elif la.type == "pool":
            a = reference.pool2d(a, la.kernel, la.stride, la.mode)
        elif la.type == "flatten":
            a = a.reshape(a.shape[0], -1)
        elif la.type == "fc":
            a = reference.fully_connected(a, la.weight, la.bias)
    return a


LAYER_CASES = {
    "tanh": [Layer("tanh")],
    "relu": [Layer("relu")],
    "sigmoid": [Layer("sigmoid")],
    "maxpool-2/2": [Layer("pool", mode="max", kernel=2, stride=2)],
    "maxpool-3/2-floor": [Layer("pool", mode="max", kernel=3, stride=2)],
    "avgpool-2/1": [Layer("pool", mode="avg", kernel=2, stride=1)],
    "avgpool-3/3-floor": [Layer("pool", mode="avg", kernel=3, stride=3)],
    # an activation before a max-pool runs in the pool, on each window's max (GpuNetwork's plan): 2/2 in its own
    # kernel, other windows in the generic one; before an average pool it stays a pass of its own
    "tanh-maxpool-2/2": [Layer("tanh"), Layer("pool", mode="max", kernel=2, stride=2)],
    "relu-maxpool-2/2": [Layer("relu"), Layer("pool", mode="max", kernel=2, stride=2)],
    "sigmoid-maxpool-3/2-floor": [Layer("sigmoid"), Layer("pool", mode="max", kernel=3, stride=2)],
    "tanh-avgpool-2/2": [Layer("tanh"), Layer("pool", mode="avg", kernel=2, stride=2)],
}


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("case", list(LAYER_CASES))
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("H, W", [(13, 11), (14, 12), (13, 12), (14, 13), (11, 69)],
                         ids=["odd", "even", "odd-h", "odd-w", "wide"])
@needs_m3_pick
def test_layers_match_reference(case, dtype, H, W):
    """Each layer kind after a conv against the CPU reference: odd conv outputs (11x9: the pools drop the last row
    and column), even ones (12x10: the 2/2 pool reads pairs of floats), each dimension odd alone (11x10, 12x11), and
    one whose pooled rows are wider than a warp's 32 outputs (9x67: 33 a row). The pooled rows narrower than a warp
    put outputs of several rows and planes in one warp."""
    rng = np.random.default_rng(SEED + 3)
    C, M = 2, 3
    # Conv outputs of order 1 so tanh and sigmoid are tested where they are not saturated; no activation after
    # the final FC, whose logits are compared directly.
    conv = Layer("conv", name="c", out_channels=M, kernel=3,
                 weight=rng.uniform(-0.003, 0.003, (M, C, 3, 3)).astype(np.float32))
    layers = [conv, *LAYER_CASES[case], Layer("flatten")]
    flat = int(np.prod(cpu_logits(tiny_net(layers, (C, H, W)), np.zeros((1, C, H, W), np.float32)).shape[1:]))
    layers.append(Layer("fc", name="f", out_features=7,
                        weight=(rng.uniform(-1, 1, (7, flat)) / np.sqrt(flat)).astype(np.float32),
                        bias=rng.uniform(-1, 1, 7).astype(np.float32)))
    model = tiny_net(layers, (C, H, W))
    x = (rng.integers(0, 256, (5, C, H, W)).astype(dtype) if dtype == np.uint8
         else rng.uniform(0, 255, (5, C, H, W)).astype(np.float32))
    got = network_of(model).logits(x, [M3_PICK])
    ref = cpu_logits(model, x)
    assert np.abs(ref).max() > 0.1  # a meaningful comparison, not of zeros
    ok, msg = close(got, ref, 1e-4, 1e-5 * np.sqrt(flat))
    assert ok, f"{case}: {msg}"


FUSED = "gpu-fused-tanh-pool"  # the conv + tanh + pool kernel the FC layers of this test follow


@requires_gpu
@pytest.mark.gpu
@needs(FUSED)
def test_fc_layers_in_tf32_stay_within_tf32_rounding():
    rng = np.random.default_rng(SEED + 9)
    C, H, W, hidden = 3, 20, 20, 96
    conv = Layer("conv", name="c", out_channels=8, kernel=5,
                 weight=rng.uniform(-0.002, 0.002, (8, C, 5, 5)).astype(np.float32))
    flat = 8 * 8 * 8
    layers = [conv, Layer("tanh"), Layer("pool", mode="max", kernel=2, stride=2), Layer("flatten"),
              Layer("fc", name="f1", out_features=hidden,
                    weight=(rng.uniform(-1, 1, (hidden, flat)) / np.sqrt(flat)).astype(np.float32),
                    bias=rng.uniform(-1, 1, hidden).astype(np.float32)),
              Layer("tanh"),
              Layer("fc", name="f2", out_features=10,
                    weight=(rng.uniform(-1, 1, (10, hidden)) / np.sqrt(hidden)).astype(np.float32),
                    bias=rng.uniform(-1, 1, 10).astype(np.float32))]
    model = tiny_net(layers, (C, H, W))
    x = rng.integers(1, 256, (300, C, H, W)).astype(np.uint8)
    net = network_of(model)
    assert net.fc_math == "fp32"
    exact = net.logits(x, [FUSED])
    net.fc_math = "tf32"
    assert net.fc_math == "tf32"
    got = net.logits(x, [FUSED])
    ref = cpu_logits(model, x)
    assert np.abs(ref).max() > 0.5
    ok, msg = close(exact, ref, 1e-4, 1e-5 * np.sqrt(flat))
    assert ok, f"fp32: {msg}"
    # TF32 keeps 10 mantissa bits of each operand (relative 2^-11); the products are summed in float32.
    ok, msg = close(got, ref, 4e-3, 4e-3)
    assert ok, f"tf32: {msg}"
    with pytest.raises(ValueError, match="unknown FC math 'int8'"):
        net.fc_math = "int8"
    assert net.fc_math == "tf32"


@requires_gpu
@pytest.mark.gpu
@needs_m3_pick
@pytest.mark.parametrize("hidden, classes", [(30, 10), (40, 10), (64, 10), (100, 7), (140, 10), (140, 13), (256, 16),
                                             (300, 7)])
def test_the_head_kernel_matches_the_reference_and_argmax(hidden, classes):
    """The head (FC bias + tanh + last FC + argmax in one kernel): hidden a multiple of 4 up to 256 takes four lanes
    per row (16 from hidden 64 on: one to four 16-byte pieces per lane), the others a warp per row; each against
    the CPU engine's logits, the labels their argmax."""
    rng = np.random.default_rng(SEED + 11)
    C, H, W = 2, 12, 12
    flat = 4 * 10 * 10
    layers = [Layer("conv", name="c", out_channels=4, kernel=3,
                    weight=rng.uniform(-0.01, 0.01, (4, C, 3, 3)).astype(np.float32)), Layer("flatten"),
              Layer("fc", name="f1", out_features=hidden,
                    weight=(rng.uniform(-1, 1, (hidden, flat)) / np.sqrt(flat / 3)).astype(np.float32),
                    bias=rng.uniform(-0.5, 0.5, hidden).astype(np.float32)), Layer("tanh"),
              Layer("fc", name="f2", out_features=classes,
                    weight=(rng.uniform(-1, 1, (classes, hidden)) / np.sqrt(hidden / 3)).astype(np.float32),
                    bias=rng.uniform(-0.5, 0.5, classes).astype(np.float32))]
    model = tiny_net(layers, (C, H, W))
    x = rng.integers(1, 256, (77, C, H, W)).astype(np.uint8)  # 77 rows: the last warp of 8 rows is part-empty
    net = network_of(model)
    got = net.logits(x, [M3_PICK])
    ref = cpu_logits(model, x)
    assert np.abs(ref).max() > 0.5
    ok, msg = close(got, ref, 1e-4, 1e-4)
    assert ok, msg
    np.testing.assert_array_equal(net.forward(x, [M3_PICK])["labels"], got.argmax(axis=1))
    # numpy's argmax: a NaN counts as largest, and the first NaN wins (classes 3 and 5 NaN on every row: 3)
    w2 = layers[-1].weight
    w2[3, 0] = w2[min(5, classes - 1), 1] = np.nan
    np.testing.assert_array_equal(network_of(model).forward(x, [M3_PICK])["labels"], np.full(len(x), 3))


HALF_OUT = "gpu-tensor-core-f16"  # a conv variant that writes its output in half (launch_f16_out)
HALF_OUT_FIRST = "gpu-split-f16-fused"  # the same from the uint8 images, with tanh + pool (launch_u8_f16_out)


@requires_gpu
@pytest.mark.gpu
@needs(HALF_OUT)
@needs(HALF_OUT_FIRST)
@needs_m3_pick
@pytest.mark.parametrize("conv", [HALF_OUT, HALF_OUT_FIRST, "m3-pick"])
def test_fc_layers_in_fp16_stay_within_fp16_rounding(conv):
    """FcMath FP16: conv -> flatten -> FC -> tanh -> FC -> tanh -> FC (HALF_OUT_FIRST: a one-channel first layer with
    tanh + pool, from uint8 images). With HALF_OUT or HALF_OUT_FIRST the conv writes the first FC's input in half
    itself; with a float32 conv one kernel rounds it. The first FC is a plain FP16 layer, the second the GEMM before
    the head (its width 40 padded to 64 in the weights and in the rows the head reads)."""
    impl = M3_PICK if conv == "m3-pick" else conv
    assert {v.name: v for v in GPU_VARIANTS}[impl].writes_f16 == (impl != M3_PICK)
    rng = np.random.default_rng(SEED + 10)
    C, H, W, M, K = (1, 20, 20, 8, 5) if impl == HALF_OUT_FIRST else (4, 16, 16, 8, 5)
    after = [Layer("tanh"), Layer("pool", mode="max", kernel=2, stride=2)] if impl == HALF_OUT_FIRST else []
    side = (H - K + 1) // 2 if after else H - K + 1
    flat = M * side * side

    def fc(name, out, inp, act=True):
        return [Layer("fc", name=name, out_features=out,
                      weight=(rng.uniform(-1, 1, (out, inp)) / np.sqrt(inp / 3)).astype(np.float32),
                      bias=rng.uniform(-0.5, 0.5, out).astype(np.float32)), *([Layer("tanh")] if act else [])]

    layers = [Layer("conv", name="c", out_channels=M, kernel=K,
                    weight=rng.uniform(-0.01, 0.01, (M, C, K, K)).astype(np.float32)), *after, Layer("flatten"),
              *fc("f1", 140, flat), *fc("f2", 40, 140), *fc("f3", 10, 40, act=False)]
    model = tiny_net(layers, (C, H, W))
    x = rng.integers(1, 256, (257, C, H, W)).astype(np.uint8)
    net = network_of(model)
    net.fc_math = "fp16"
    assert net.fc_math == "fp16"
    got = net.logits(x, [impl])
    ref = cpu_logits(model, x)
    assert np.abs(ref).max() > 0.5 and np.isfinite(got).all()
    # half keeps 10 mantissa bits of each operand (relative 2^-11), as TF32 does; the products are summed in
    # float32. HALF_OUT's conv rounds its own operands to half too (its rtol, 2e-3).
    ok, msg = close(got, ref, 1e-2, 1e-2)
    assert ok, f"fp16 FC after {impl}: {msg}"
    # whole and in parts on two streams, the labels are what the logits say (cuBLAS may pick another algorithm
    # for another number of rows)
    for chunks in (1, 3):
        labels = net.forward(x, [impl], chunks=chunks, streams=2)["labels"]
        assert np.mean(labels == got.argmax(axis=1)) > 0.98


@requires_gpu
@pytest.mark.gpu
@pytest.mark.torch
@needs_m3_pick
@pytest.mark.parametrize("conv_out, hidden, classes, rows", [
    ((8, 10), 140, 10, 257),  # sp19's widths
    ((8, 10), 10, 3, 64),
    ((8, 10), 64, 32, 77),    # the most classes the head takes
    ((8, 10), 100, 10, 130),
    ((8, 10), 160, 10, 300),  # fa18 / fa19's width
    ((8, 10), 256, 16, 65),
    ((3, 4), 140, 10, 200),   # K = 48
    ((8, 7), 90, 12, 1000),   # K = 392
])
def test_the_fp16_head_matches_the_reference_every_run(conv_out, hidden, classes, rows):
    """FcMath FP16 with FC -> tanh -> FC at the end (the FP16 GEMM, then the head kernel on its padded rows), at
    the widths of the course's networks and around them: against the CPU engine's logits at half's rounding, the
    labels the argmax of the logits, the same bits on every call, whole and in parts, plain and replayed from
    pinned memory."""
    rng = np.random.default_rng(SEED + 12)
    M, side = conv_out
    C, K = 2, 3
    H = side + K - 1
    flat = M * side * side
    layers = [Layer("conv", name="c", out_channels=M, kernel=K,
                    weight=rng.uniform(-0.05, 0.05, (M, C, K, K)).astype(np.float32)), Layer("flatten"),
              Layer("fc", name="f1", out_features=hidden,
                    weight=(rng.uniform(-1, 1, (hidden, flat)) / np.sqrt(flat / 3)).astype(np.float32),
                    bias=rng.uniform(-0.5, 0.5, hidden).astype(np.float32)), Layer("tanh"),
              Layer("fc", name="f2", out_features=classes,
                    weight=(rng.uniform(-1, 1, (classes, hidden)) / np.sqrt(hidden / 3)).astype(np.float32),
                    bias=rng.uniform(-0.5, 0.5, classes).astype(np.float32)), Layer("softmax")]
    model = tiny_net(layers, (C, H, H))
    x = rng.integers(1, 256, (rows, C, H, H)).astype(np.uint8)
    net = network_of(model)
    net.fc_math = "fp16"
    got = net.logits(x, [M3_PICK])
    ref = cpu_logits(model, x)
    assert np.abs(ref).max() > 0.5 and np.isfinite(got).all()
    ok, msg = close(got, ref, 1e-2, 1e-2)  # half's 10 mantissa bits on each operand, as in the test above
    assert ok, msg
    np.testing.assert_array_equal(net.logits(x, [M3_PICK]), got)
    labels = net.forward(x, [M3_PICK])["labels"]
    np.testing.assert_array_equal(labels, got.argmax(axis=1))
    np.testing.assert_array_equal(net.forward(x, [M3_PICK])["labels"], labels)
    # In 3 parts on 2 streams from pinned memory (plain, then replayed): other row counts, other slices, so only
    # the rows whose top logit leads clearly must agree with the whole batch; every call gives the same bits.
    xp = pinned_copy(x)
    runs = [net.forward(xp, [M3_PICK], chunks=3, streams=2, op_times=False) for _ in range(3)]
    assert [r["replayed"] for r in runs] == [False, True, True]
    for r in runs[1:]:
        np.testing.assert_array_equal(r["labels"], runs[0]["labels"])
    sure = clear_margin(ref, 0.05)
    assert sure.mean() > 0.5
    np.testing.assert_array_equal(runs[0]["labels"][sure], ref.argmax(axis=1)[sure])


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("name", variant_ids())
@needs_m3_pick
def test_network_predictions_equal_cpu_engine(name):
    from pyconv.engines.cpu import forward_cpu

    skip_if_unstarted(name, gpu().conv)
    rng = np.random.default_rng(SEED + 4)
    model = random_model(rng, (1, 24, 24))
    x = rng.integers(0, 256, (1000, 1, 24, 24), dtype=np.uint8)
    cpu = forward_cpu(model, x.astype(np.float32), "numpy")
    net = network_of(model)
    impls = [name, M3_PICK]
    try:
        res = net.forward(x, impls)
    except ValueError as e:  # a ladder variant that cannot take this layer (shape, epilogue) is refused cleanly
        if name == M3_PICK:
            raise
        pytest.skip(f"{name} does not fit this network: {e}")
    labels = res["labels"]
    assert labels.dtype == np.int32 and labels.shape == (1000,)
    # Labels can only differ where the CPU's top two classes are within rounding of each other.
    sure = clear_margin(cpu.probabilities, 1e-4)
    assert sure.mean() > 0.95
    np.testing.assert_array_equal(labels[sure], cpu.labels[sure])
    assert len(res["op_times"]) == 2 and all(t > 0 for t in res["op_times"])
    assert res["peak_bytes"] > 0 and res["passes"] == 1
    # The same from float32 input (same arithmetic: identical labels), chunked over streams, and batch 1.
    np.testing.assert_array_equal(net.forward(x.astype(np.float32), impls)["labels"], labels)
    chunked = net.forward(x, impls, chunks=7, streams=3)
    np.testing.assert_array_equal(chunked["labels"][sure], labels[sure])
    assert all(t > 0 for t in chunked["op_times"])
    one = net.forward(x[:1], impls)["labels"][0]
    assert one == labels[0] or not sure[0]
    if any(v["name"] == name and v["x_on_host"] for v in gpu().variants()):
        # A variant that streams its input from host memory cannot run with the images resident on the device.
        with pytest.raises(ValueError, match="reads them from host memory"):
            net.forward_resident(x, impls, warmup=1, reps=3)
    else:
        ms = net.forward_resident(x, impls, warmup=1, reps=3)
        assert len(ms) == 3 and all(t > 0 for t in ms)


def sp19_or_skip(impls: list[str]):
    """The shipped sp19 model and final's reduced choice of variants on it (impls), or a skip where either is
    missing."""
    from pyconv.core.model import load_model, shipped_models

    if "ece408" not in shipped_models():
        pytest.skip("no shipped sp19 model")
    if any(n not in GPU for n in impls):
        pytest.skip("this build lacks final's sp19 variants")
    return load_model("ece408"), impls


def pinned_copy(x: np.ndarray) -> np.ndarray:
    """x in page-locked host memory (PyTorch allocates it; the project's engine only reads it)."""
    torch = pytest.importorskip("torch")
    return torch.from_numpy(np.ascontiguousarray(x)).pin_memory().numpy()


@requires_gpu
@pytest.mark.gpu
@pytest.mark.torch
@pytest.mark.parametrize("sp19", [False, True], ids=["random-model", "sp19-final-variants"])
@needs_m3_pick
def test_chunked_pass_from_pinned_memory_replays_one_graph(sp19):
    """A chunked pass from pinned memory runs plain the first time, is captured the second time and replayed
    after, with the labels of the plain run; a replay reads the images in the buffer at that moment."""
    rng = np.random.default_rng(SEED + 8)
    if sp19:
        model, impls = sp19_or_skip(["gpu-split-f16-fused", "gpu-tensor-core-f16"])
    else:
        model = random_model(rng, (1, 24, 24))
        impls = [M3_PICK] * 2
    x = rng.integers(0, 256, (1000, *model.input_shape), dtype=np.uint8)
    xp = pinned_copy(x)
    net = network_of(model)
    if sp19:
        net.fc_math = "tf32"  # the head path with a TF32 GEMM, as final runs sp19
    whole = net.forward(x, impls)
    assert not whole["replayed"]
    runs = [net.forward(xp, impls, chunks=5, streams=3) for _ in range(3)]
    assert [r["replayed"] for r in runs] == [False, True, True]
    for r in runs:
        np.testing.assert_array_equal(r["labels"], runs[0]["labels"])
        assert len(r["op_times"]) == 2 and all(t > 0 for t in r["op_times"])
    # The same kernels on each image; only cuBLAS may pick another algorithm for another number of rows.
    assert np.mean(runs[0]["labels"] == whole["labels"]) > 0.99
    # New images in the same pinned buffer: the replay reads them.
    xp[:] = x[::-1]
    again = net.forward(xp, impls, chunks=5, streams=3)
    assert again["replayed"]
    np.testing.assert_array_equal(again["labels"], runs[0]["labels"][::-1])
    # The same parts from pageable memory (staged, then copied): the same kernels on the same rows, the same labels.
    np.testing.assert_array_equal(net.forward(np.array(xp), impls, chunks=5, streams=3)["labels"], again["labels"])
    # Without per-layer timing: no op times, the same labels.
    untimed = [net.forward(xp, impls, chunks=5, streams=3, op_times=False) for _ in range(3)]
    assert [r["replayed"] for r in untimed] == [False, True, True] and untimed[-1]["op_times"] == []
    np.testing.assert_array_equal(untimed[-1]["labels"], again["labels"])
    assert untimed[-1]["gpu_ms"] is None
    # The GPU's span of the same replayed pass: on the GPU's clock, within the host's clock of the call, and the
    # same labels (the span's events are outside the graph: it still replays).
    t0 = time.perf_counter()
    spanned = net.forward(xp, impls, chunks=5, streams=3, op_times=False, gpu_span=True)
    host_ms = (time.perf_counter() - t0) * 1e3
    assert spanned["replayed"] and 0 < spanned["gpu_ms"] < host_ms
    np.testing.assert_array_equal(spanned["labels"], again["labels"])
    # A pageable chunked pass and a one-part pass measure theirs too (the same parts give the same labels; in one
    # part only cuBLAS's algorithm for another number of rows may differ).
    for chunks, same in ((5, 1.0), (1, 0.99)):
        t0 = time.perf_counter()
        r = net.forward(np.array(xp), impls, chunks=chunks, streams=3, op_times=False, gpu_span=True)
        assert 0 < r["gpu_ms"] < (time.perf_counter() - t0) * 1e3, chunks
        assert np.mean(r["labels"] == again["labels"]) >= same, chunks
    # The resident pass in parts: a time per rep, plain or replayed.
    ms = net.forward_resident(x, impls, warmup=2, reps=3, chunks=5, streams=3)
    assert len(ms) == 3 and all(t > 0 for t in ms)
    with pytest.raises(ValueError, match="chunks and streams"):
        net.forward_resident(x, impls, chunks=0)
    # Another shape of pass runs plain first, and pageable images never replay.
    other = net.forward(xp, impls, chunks=4, streams=2)
    assert not other["replayed"]
    assert np.mean(other["labels"] == again["labels"]) > 0.99
    assert not any(net.forward(x, impls, chunks=5, streams=3)["replayed"] for _ in range(2))
    # Tapering parts (each 0.6 of the one before, or 1.6): pinned, replayed, and from pageable memory the same parts
    # give the same labels; against equal parts only cuBLAS's algorithm for another number of rows may differ.
    tapered = [net.forward(xp, impls, chunks=5, streams=3, op_times=False, taper=0.6) for _ in range(3)]
    assert [r["replayed"] for r in tapered] == [False, True, True]
    for r in tapered:
        np.testing.assert_array_equal(r["labels"], tapered[0]["labels"])
    np.testing.assert_array_equal(net.forward(np.array(xp), impls, chunks=5, streams=3, taper=0.6)["labels"],
                                  tapered[0]["labels"])
    assert np.mean(tapered[0]["labels"] == again["labels"]) > 0.99
    growing = net.forward(xp, impls, chunks=5, streams=3, taper=1.6)  # the first part the smallest
    assert np.mean(growing["labels"] == tapered[0]["labels"]) > 0.99
    ms = net.forward_resident(x, impls, warmup=1, reps=2, chunks=5, streams=3, taper=0.6)
    assert len(ms) == 2 and all(t > 0 for t in ms)
    for bad in (0.0, 4.5, float("nan")):
        with pytest.raises(ValueError, match=r"taper must be in \(0, 4\]"):
            net.forward(xp, impls, chunks=5, streams=3, taper=bad)
        with pytest.raises(ValueError, match=r"taper must be in \(0, 4\]"):
            net.forward_resident(x, impls, chunks=5, streams=3, taper=bad)


def pieces_model(rng: np.random.Generator) -> Model:
    """conv (+ tanh + pool) -> conv -> tanh -> pool -> flatten -> FC -> tanh -> FC: the second conv's tanh and pool
    run as steps of their own among the image steps."""
    def wt(*shape, scale):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    layers = [Layer("conv", name="conv1", out_channels=4, kernel=5, weight=wt(4, 1, 5, 5, scale=0.005)),
              Layer("tanh"), Layer("pool", mode="max", kernel=2, stride=2),
              Layer("conv", name="conv2", out_channels=8, kernel=3, weight=wt(8, 4, 3, 3, scale=0.3)),
              Layer("tanh"), Layer("pool", mode="max", kernel=2, stride=2), Layer("flatten"),
              Layer("fc", name="fc1", out_features=32, weight=wt(32, 200, scale=0.07), bias=wt(32, scale=0.1)),
              Layer("tanh"),
              Layer("fc", name="fc2", out_features=10, weight=wt(10, 32, scale=0.5), bias=wt(10, scale=0.1)),
              Layer("softmax")]
    return Model(name="pieces-test", arch="test", input_shape=(1, 28, 28), layers=layers)


@requires_gpu
@pytest.mark.gpu
@pytest.mark.torch
@pytest.mark.parametrize("sp19", [False, True], ids=["tanh-pool-steps", "sp19-final-variants"])
@needs("gpu-fused-tanh-pool")
@needs_m3_pick
def test_the_last_part_in_pieces_gives_the_labels_of_the_whole_part(sp19):
    """The last part's copy in pieces (tail_pieces), its conv layers (and the tanh and pool steps between them) run
    on each piece as it lands and its FC layers on the whole part: the labels of the part run whole, bit for bit
    (the same kernels on the same images, the same GEMM), from pinned memory plain and replayed, with new images
    in the same buffer, from pageable memory, with op times; float32 images, or a first conv that cannot read
    uint8, run the part whole; tail_pieces outside 1..64 is refused."""
    rng = np.random.default_rng(SEED + 10)
    if sp19:
        model, impls = sp19_or_skip(["gpu-split-f16-pool-window", "gpu-tensor-core-f16"])
    else:
        model = pieces_model(rng)
        impls = ["gpu-fused-tanh-pool", M3_PICK]
    # 3 parts: the last one 1000 images, 4 pieces of 250 (or, asked for 64, as many as hold 128 images: 7)
    x = rng.integers(0, 256, (3000, *model.input_shape), dtype=np.uint8)
    xp = pinned_copy(x)
    net = network_of(model)
    if sp19:
        net.fc_math = "fp16"  # conv2 writes half for the FC layer: each piece at its own offset of that buffer
    whole = net.forward(xp, impls, chunks=3, streams=2, op_times=False)["labels"]
    for pieces in (64, 4):
        # replayed many times: pieces run side by side, and a piece that overwrote another's rows (each layer's
        # rows lie elsewhere in the lane's buffers) showed only when one ran ahead of the piece before it
        runs = [net.forward(xp, impls, chunks=3, streams=2, op_times=False, tail_pieces=pieces) for _ in range(12)]
        assert [r["replayed"] for r in runs] == [False] + [True] * 11
        for r in runs:
            np.testing.assert_array_equal(r["labels"], whole)
    # New images in the same pinned buffer (the last shape's graph): each piece's layers wait for its copy.
    xp[:] = x[::-1]
    again = net.forward(xp, impls, chunks=3, streams=2, op_times=False, tail_pieces=4)
    assert again["replayed"]
    np.testing.assert_array_equal(again["labels"], whole[::-1])
    # Pageable (each piece staged, then copied), with the op-time events of every piece.
    timed = net.forward(x, impls, chunks=3, streams=2, tail_pieces=4)
    np.testing.assert_array_equal(timed["labels"], whole)
    assert len(timed["op_times"]) == 2 and all(t > 0 for t in timed["op_times"])
    # Nothing to split: float32 images, or a first conv that reads only float32 (widened first, whole).
    # (Were these split, the first conv would read the images as uint8 where none are.)
    xf = x.astype(np.float32)
    np.testing.assert_array_equal(
        net.forward(xf, impls, chunks=3, streams=2, op_times=False, tail_pieces=4)["labels"],
        net.forward(xf, impls, chunks=3, streams=2, op_times=False)["labels"])
    if not sp19:
        plain = [M3_PICK, M3_PICK]
        np.testing.assert_array_equal(
            net.forward(x, plain, chunks=3, streams=2, op_times=False, tail_pieces=4)["labels"],
            net.forward(x, plain, chunks=3, streams=2, op_times=False)["labels"])
    for bad in (0, 65):
        with pytest.raises(ValueError, match=r"tail_pieces must be in 1\.\.64"):
            net.forward(xp, impls, chunks=3, streams=2, tail_pieces=bad)


@requires_gpu
@pytest.mark.gpu
@pytest.mark.torch
@pytest.mark.ladder
@needs("gpu-unroll-gemm")
@needs_m3_pick
def test_a_variant_that_moves_its_buffers_is_never_replayed():
    rng = np.random.default_rng(SEED + 9)
    model = random_model(rng, (1, 24, 24))
    x = rng.integers(0, 256, (500, 1, 24, 24), dtype=np.uint8)
    xp = pinned_copy(x)
    net = network_of(model)
    impls = ["gpu-unroll-gemm", M3_PICK]
    runs = [net.forward(xp, impls, chunks=4, streams=2) for _ in range(3)]
    assert not any(r["replayed"] for r in runs)
    for r in runs[1:]:
        np.testing.assert_array_equal(r["labels"], runs[0]["labels"])


@requires_gpu
@pytest.mark.gpu
@needs_m3_pick
def test_gpu_engine_wrapper_and_bad_input():
    from pyconv.engines.gpu import GpuEngine

    rng = np.random.default_rng(SEED + 5)
    model = random_model(rng)
    eng = GpuEngine(model)
    x = rng.integers(0, 256, (10, 1, 20, 20), dtype=np.uint8)
    both = [M3_PICK] * 2
    assert eng.forward(x, both).labels.shape == (10,)
    with pytest.raises(PyconvError, match="expects"):
        eng.forward(x[:, :, :10], both)
    with pytest.raises(PyconvError, match="uint8 or float32"):
        eng.forward(x.astype(np.float64), both)
    with pytest.raises(PyconvError, match="one variant name per conv layer"):
        eng.forward(x, M3_PICK)  # the engine decides nothing: no default for a name
    with pytest.raises(PyconvError, match="unknown GPU convolution 'nope'"):
        eng.forward(x, ["nope", M3_PICK])
    with pytest.raises(PyconvError, match="2 conv layers but 1"):
        eng.forward(x, [M3_PICK])
    net = eng.net
    with pytest.raises(ValueError, match="C-contiguous"):
        net.forward(np.zeros((10, 1, 20, 40), np.uint8)[..., ::2], [M3_PICK] * 2)
    with pytest.raises(ValueError, match="4-D"):
        net.forward(np.zeros((10, 20, 20), np.uint8), [M3_PICK] * 2)
    with pytest.raises(ValueError, match="chunks and streams"):
        net.forward(x, [M3_PICK] * 2, chunks=0)
    for v in gpu().variants():
        if v["x_on_host"]:  # host-input variants are refused past the first layer
            with pytest.raises(ValueError, match="first layer"):
                net.forward(x, [M3_PICK, v["name"]])
    assert eng.forward(x, both).labels.shape == (10,)  # still usable after every refusal


@requires_gpu
@pytest.mark.gpu
@pytest.mark.slow
@needs_m3_pick
def test_batch_too_large_for_the_gpu_is_split_and_the_process_keeps_working():
    g = gpu()
    rng = np.random.default_rng(SEED + 6)
    S, M = 256, 256  # conv 256@1x1 on 256x256: 64 MiB of activations per image, twice (ping-pong buffers)
    free = g.device_info()["global_memory_bytes"]
    n = int(2.5 * free / (2 * 4 * M * S * S)) + 1  # far more than fits at once
    model = Model(name="huge", arch="test", input_shape=(1, S, S), layers=[
        Layer("conv", name="c", out_channels=M, kernel=1, weight=rng.uniform(-1, 1, (M, 1, 1, 1)).astype(np.float32)),
        Layer("pool", mode="max", kernel=64, stride=64), Layer("flatten"),
        Layer("fc", name="f", out_features=10, weight=rng.uniform(-1, 1, (10, M * 16)).astype(np.float32),
              bias=np.zeros(10, np.float32))])
    x = rng.integers(0, 256, (n, 1, S, S), dtype=np.uint8)
    net = network_of(model)
    res = net.forward(x, [M3_PICK])
    assert res["passes"] > 1 and res["rows_per_pass"] < n
    assert res["peak_bytes"] <= free
    small = net.forward(x[:16], [M3_PICK])
    np.testing.assert_array_equal(res["labels"][:16], small["labels"])
    # the process (and other networks) keep working afterwards
    m2 = random_model(rng)
    y = rng.integers(0, 256, (4, 1, 20, 20), dtype=np.uint8)
    assert network_of(m2).forward(y, [M3_PICK] * 2)["labels"].shape == (4,)


@requires_gpu
@pytest.mark.gpu
@needs_m3_pick
def test_shipped_models_predict_as_the_cpu_engine():
    from pyconv.core.model import load_model, shipped_models
    from pyconv.engines.cpu import forward_cpu

    names = shipped_models()
    if not names:
        pytest.skip("no shipped models in datasets/models")
    rng = np.random.default_rng(SEED + 7)
    for name in names:
        model = load_model(name)
        x = rng.integers(0, 256, (200, *model.input_shape), dtype=np.uint8)
        cpu = forward_cpu(model, x.astype(np.float32), "numpy")
        gpu_labels = network_of(model).forward(x, [M3_PICK] * len(model.convs))["labels"]
        sure = clear_margin(cpu.probabilities, 1e-4)
        np.testing.assert_array_equal(gpu_labels[sure], cpu.labels[sure], err_msg=name)


@requires_gpu
@pytest.mark.gpu
@needs_m3_pick
def test_milestone_3_correctness_equals_the_cpu_path(capsys):
    from pyconv.core import paths
    from pyconv.core.model import DEFAULT_MODEL, available_models, load_model
    from pyconv.engines.cpu import forward_cpu
    from pyconv.tools.milestones import accuracy, load_inputs

    if not paths.DATA_FILE.exists() or DEFAULT_MODEL not in available_models():
        pytest.skip("needs datasets/fashion-mnist.h5 (invoke data) and the default model")
    from pyconv.tools.milestones import run_planned

    model = load_model(DEFAULT_MODEL)
    x, labels = load_inputs(model, 1000)
    run_planned("3", model, x, labels)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "New Inference"
    assert sum(line.startswith("Op Time: ") for line in out) == len(model.convs)
    cpu = forward_cpu(model, x.astype(np.float32), "numpy")
    assert out[-1] == f"Correctness: {accuracy(cpu.labels, labels):.4g} Model: {model.name}"
    with pytest.raises(PyconvError, match=f"known: {M3_PICK}"):
        run_planned("3", model, x, labels, impl=CPU[0])


@requires_gpu
@pytest.mark.gpu
@needs_m3_pick
def test_several_gpus_give_the_one_gpu_labels_in_order():
    """MultiGpuEngine over every visible GPU (1 where only one is lent) equals one GpuEngine, chunked or not."""
    from pyconv.engines.gpu import GpuEngine, MultiGpuEngine, parse_gpus

    rng = np.random.default_rng(SEED + 9)
    model = random_model(rng, (1, 24, 24))
    x = rng.integers(0, 256, (1003, 1, 24, 24), dtype=np.uint8)  # not a multiple of any split
    impls = [M3_PICK, M3_PICK]
    one = GpuEngine(model).forward(x, impls)
    n = parse_gpus("all")
    assert n == gpu().device_count() >= 1
    multi = MultiGpuEngine(model, n).forward(x, impls, chunks=4, streams=2)
    np.testing.assert_array_equal(multi.labels, one.labels)
    assert len(multi.op_times) == 2 and all(t > 0 for t in multi.op_times)
    with pytest.raises(PyconvError, match="only .* GPU"):
        parse_gpus(n + 1)


@requires_gpu
@pytest.mark.gpu
@needs_m3_pick
def test_final_runs_float32_unless_a_bench_of_these_weights_allowed_reduced_precision(tmp_path, monkeypatch):
    from pyconv import evidence
    from pyconv.core import paths
    from pyconv.tools.milestones import make_plan

    model = random_model(np.random.default_rng(SEED + 11))
    monkeypatch.setattr(paths, "EVIDENCE", tmp_path)  # no evidence file for any GPU: final measures its layers
    p = make_plan("final", model, 100, echo=lambda _s: None)
    reduced = {v["name"] for v in gpu().variants() if v["precision"] in ("tf32", "fp16")}
    assert p.fc_math == "fp32" and not set(p.impls) & reduced and "float32" in p.precision
    assert all(c.why.startswith("measured now on this GPU in float32: ") for c in p.layers), p.lines()
    name = gpu().device_info()["name"]
    ev = evidence.Evidence(gpu=name, verdicts={model.digest(): evidence.Verdict(
        model.name, model.digest(), True, "2000-01-01", "bench-e2e-x.json")})
    evidence.save(ev, evidence.path_for(name))
    p = make_plan("final", model, 100, echo=lambda _s: None)
    # a verdict that does not record its variants allows TF32, not FP16 (it predates FP16 variants)
    assert p.fc_math == "tf32" and p.precision.startswith("reduced precision (TF32 conv layers, TF32 fully connected "
                                                          "layers) allowed")
    assert "2000-01-01" in p.precision
    fp16 = {v["name"] for v in gpu().variants() if v["precision"] == "fp16"}
    assert not set(p.impls) & fp16
    ev.verdicts[model.digest()] = evidence.Verdict(model.name, model.digest(), False, "2000-01-02", "x.json")
    evidence.save(ev, evidence.path_for(name))
    assert make_plan("final", model, 100, echo=lambda _s: None).fc_math == "fp32"
