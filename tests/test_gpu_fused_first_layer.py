"""The fused first-layer steps (conv + tanh + 2x2 max pool, one input channel) on the shapes they specialise and
at their edges: the course's first layers, odd conv outputs whose last row the pool drops, batch 1 and batches
that do not divide evenly over blocks or image groups, tiny images (which fall back to the previous step), and
the uint8 path the network takes for its first layer. Every registry variant with this epilogue is tested, so a
new step is picked up here as in test_gpu_engine.py; the shapes below are the ones the specialised kernels take
(C = 1, K = 5, M a multiple of 5 or 6, any W) and the ones they hand on."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import close, descriptor, gpu, network_of, requires_gpu, requires_gpu_module
from student_variants import skip_if_unstarted

from pyconv import verify
from pyconv.core import reference
from pyconv.core.model import Layer, Model

SEED = 1616

try:
    from pyconv import _gpu
except ImportError:
    _gpu = None


def fused_variants(precision: str | None = None) -> list[str]:
    if _gpu is None:
        return ["gpu-fused-tanh-pool"]
    return [v["name"] for v in _gpu.variants()
            if v["epilogue"] == "tanh-maxpool2" and (precision is None or v["precision"] == precision)]


# (B, H, W, M): the course's first layers (sp19, sp18, fa17, fa19 at K=5; fa18 is K=7), odd and even pooled
# heights (H - 4 odd: the pool drops the last conv row; Hp odd: the last item row has one pooled row), batch 1,
# batches not a multiple of the SM count or of any image group, M of 2, 5 and 10 channel groups, tiny images.
SHAPES = [
    (3, 48, 48, 6), (1, 48, 48, 6), (133, 48, 48, 6), (1001, 48, 48, 6),  # sp19 conv1
    (5, 64, 64, 6),                                                           # sp18 conv1
    (37, 28, 28, 50), (1, 28, 28, 50),                                        # fa17 conv1
    (3, 70, 70, 12),                                                          # fa19 conv1 (W % 4 != 0)
    (3, 30, 30, 6), (2, 21, 23, 12), (4, 17, 25, 5),                        # W % 4 != 0: padded slot rows
    (4, 13, 16, 6), (4, 14, 16, 6), (4, 15, 12, 12), (6, 16, 20, 10), (2, 21, 24, 30),
    (3, 8, 8, 6), (5, 9, 12, 5), (2, 12, 12, 60), (3, 6, 8, 6),              # tiny: 1-4 work items per image
    (2, 48, 48, 4), (2, 30, 31, 7),                                           # M not a multiple of 5 or 6, odd W
]


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("name", fused_variants())
def test_first_layer_shapes_match_reference(name):
    g, v = gpu(), descriptor(name)
    skip_if_unstarted(name, g.conv)
    rng = np.random.default_rng(SEED)
    tested = 0
    for B, H, W, M in SHAPES:
        if g.why_unsupported(name, B, 1, H, W, M, 5):
            continue
        x = rng.uniform(-1, 1, (B, 1, H, W)).astype(np.float32)
        k = rng.uniform(-1, 1, (M, 1, 5, 5)).astype(np.float32)
        y = g.conv(name, x, k)  # poisoned with NaN before the launch: an unwritten output fails
        ok, msg = close(y, verify.expected(x, k, "tanh-maxpool2"), *verify.tolerance(v["rtol"], 1, 5))
        assert ok, f"{name} B={B} H={H} W={W} M={M}: {msg}"
        tested += 1
    assert tested >= len(SHAPES) // 2, f"{name} supports too few of the first-layer shapes"


@requires_gpu
@pytest.mark.gpu
# Float32 variants only: with inputs of +-255 a TF32 product keeps 10 bits, so a conv value near zero (a sum of
# terms of thousands) is off by units before tanh, beyond any tolerance relative to the output; the TF32 variants'
# own tolerance is held on the bench's inputs in the other tests.
@pytest.mark.parametrize("name", fused_variants("fp32"))
def test_saturated_and_zero_inputs(name):
    """Conv values far beyond tanh's saturation (both signs) and exactly zero images: tanh must give exactly
    +-1 and 0 there, whatever formula a step uses."""
    g, v = gpu(), descriptor(name)
    skip_if_unstarted(name, g.conv)
    rng = np.random.default_rng(SEED + 1)
    x = rng.uniform(-255, 255, (9, 1, 48, 48)).astype(np.float32)
    x[3] = 0.0
    k = rng.uniform(-1, 1, (6, 1, 5, 5)).astype(np.float32)
    y = g.conv(name, x, k)
    ok, msg = close(y, verify.expected(x, k, "tanh-maxpool2"), *verify.tolerance(v["rtol"], 1, 5))
    assert ok, f"{name}: {msg}"
    assert np.all(y[3] == 0.0)
    pooled = reference.pool2d(reference.conv2d(x, k), 2, 2, "max")
    far = np.abs(pooled) > 20.0  # tanh is +-1 in float32 beyond ~9
    assert far.mean() > 0.5
    assert np.array_equal(y[far], np.sign(pooled[far]))


def first_layer_net(H: int, W: int, M: int, rng: np.random.Generator, K: int = 5) -> Model:
    # Weights scaled for raw 0..255 pixels so the tanh is not saturated everywhere.
    conv = Layer("conv", name="conv1", out_channels=M, kernel=K,
                 weight=(rng.uniform(-0.05, 0.05, (M, 1, K, K)) / K**2).astype(np.float32))
    flat = M * ((H - K + 1) // 2) * ((W - K + 1) // 2)
    fc = Layer("fc", name="fc", out_features=10, weight=(rng.uniform(-1, 1, (10, flat)) / np.sqrt(flat)).astype(
        np.float32), bias=rng.uniform(-1, 1, 10).astype(np.float32))
    layers = [conv, Layer("tanh"), Layer("pool", mode="max", kernel=2, stride=2), Layer("flatten"), fc]
    return Model(name="first-layer", arch="test", input_shape=(1, H, W), layers=layers)


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("name", fused_variants())
@pytest.mark.parametrize("shape", [(48, 48, 6), (28, 28, 50), (64, 64, 6), (14, 16, 12), (70, 70, 12), (30, 30, 6)])
def test_uint8_first_layer_in_the_network(name, shape):
    """The network runs its first layer from the uint8 images (launch_u8) when the variant has that path; its
    logits must match the float reference, and the float32 images must give the same logits within rounding."""
    H, W, M = shape
    rng = np.random.default_rng(SEED + 2)
    model = first_layer_net(H, W, M, rng)
    net = network_of(model)
    x = rng.integers(0, 256, (301, 1, H, W), dtype=np.uint8)
    try:
        got = net.logits(x, [name])
    except ValueError as e:  # a variant that refuses this layer says so cleanly
        pytest.skip(f"{name}: {e}")
    a = reference.conv2d(x.astype(np.float32), model.layers[0].weight)
    a = reference.tanh_maxpool2(a).reshape(len(x), -1)
    ref = reference.fully_connected(a, model.layers[-1].weight, model.layers[-1].bias)
    flat = a.shape[1]
    assert np.abs(ref).max() > 0.1
    ok, msg = close(got, ref, 1e-4, 1e-5 * np.sqrt(flat))
    assert ok, f"{name} {shape} uint8: {msg}"
    ok, msg = close(net.logits(x.astype(np.float32), [name]), got, 1e-4, 1e-5 * np.sqrt(flat))
    assert ok, f"{name} {shape} float32 vs uint8: {msg}"


@requires_gpu_module
def test_step_16_supports_what_step_15_supports():
    """Step 16 hands every shape it has no kernel for to step 15, so the two refuse the same shapes (checked
    without a GPU: supports() is host code)."""
    g = gpu()
    names = {v["name"] for v in g.variants()}
    if "gpu-fused-warp-specialised" not in names:
        pytest.skip("step 16 not built")
    for B, C, H, W, M, K in [(2, 1, 48, 48, 6, 5), (2, 1, 28, 28, 50, 5), (1, 1, 70, 70, 12, 5),
                             (1, 6, 22, 22, 16, 5), (1, 1, 72, 72, 12, 7), (1, 1, 5, 5, 6, 5), (3, 2, 9, 9, 4, 3)]:
        a = g.why_unsupported("gpu-fused-warp-specialised", B, C, H, W, M, K)
        b = g.why_unsupported("gpu-fused-pipelined", B, C, H, W, M, K)
        assert (a == "") == (b == ""), (B, C, H, W, M, K, a, b)
        assert a.replace("gpu-fused-warp-specialised", "gpu-fused-pipelined").endswith(b[b.find(" "):] if b else "")


# --- Steps 19 and 24 (gpu-split-f16-fused, gpu-split-f16-pool-window): the split-FP16 tensor-core first layers ----
SPLIT = "gpu-split-f16-fused"
POOL_WINDOW = "gpu-split-f16-pool-window"
SPLIT_FIRST = [name for name in (SPLIT, POOL_WINDOW) if name in fused_variants()] or [SPLIT]
requires_split = pytest.mark.skipif(_gpu is None or SPLIT not in fused_variants(), reason=f"{SPLIT} not built")

# (B, H, W, M, K): every K it takes (its pair layout differs per K), odd conv outputs in both directions (the pool
# drops the last row / column), widths that leave most of the last 8-pixel m-tile empty, one to eight n-tiles of
# filters (M = 64: the largest it takes), the course's first layers, and batches beyond one image per block.
SPLIT_SHAPES = [
    (3, 48, 48, 6, 5), (2, 28, 28, 50, 5), (2, 70, 70, 12, 5), (2, 64, 64, 6, 5),
    (5, 21, 23, 12, 5), (3, 17, 25, 5, 5), (4, 13, 16, 6, 5), (3, 9, 12, 5, 5), (2, 6, 6, 64, 5),
    (3, 12, 13, 4, 3), (3, 11, 10, 9, 7), (2, 20, 19, 16, 6), (2, 9, 9, 3, 4), (2, 7, 8, 2, 2), (2, 5, 6, 7, 1),
    (2, 33, 35, 13, 7), (2, 30, 31, 7, 5), (133, 24, 40, 17, 3),
    (3001, 12, 13, 9, 3), (2500, 48, 48, 6, 5),  # several images per persistent block (at most ~1,100 blocks)
]


@requires_gpu
@requires_split
@pytest.mark.gpu
@pytest.mark.parametrize("name", SPLIT_FIRST)
def test_split_f16_every_kernel_size_and_odd_shape(name):
    """float32 input (three MMAs per k-step) against the reference at every K <= 7 and odd pooled edges; the
    tolerance is float32's: the split operands are FP32-accurate."""
    g, v = gpu(), descriptor(name)
    rng = np.random.default_rng(SEED + 19)
    for B, H, W, M, K in SPLIT_SHAPES:
        assert g.why_unsupported(name, B, 1, H, W, M, K) == "", (B, H, W, M, K)
        x = verify.random_nonzero(rng, (B, 1, H, W))
        k = verify.random_nonzero(rng, (M, 1, K, K))
        y = g.conv(name, x, k)
        ok, msg = close(y, verify.expected(x, k, "tanh-maxpool2"), *verify.tolerance(v["rtol"], 1, K))
        assert ok, f"B={B} H={H} W={W} M={M} K={K}: {msg}"


@requires_gpu
@requires_split
@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(48, 48, 6, 5), (28, 28, 50, 5), (70, 70, 12, 5), (21, 23, 12, 5),
                                   (17, 25, 5, 5), (12, 13, 4, 3), (11, 10, 9, 7), (20, 19, 16, 6)])
@pytest.mark.parametrize("name", SPLIT_FIRST)
def test_split_f16_uint8_path(name, shape):
    """The network's uint8 path (launch_u8: pixels exact in one half, two MMAs per k-step) at several sizes, K and
    M, odd ones included, against the float reference, and equal within rounding to the float32 path."""
    H, W, M, K = shape
    rng = np.random.default_rng(SEED + 20)
    model = first_layer_net(H, W, M, rng, K)
    net = network_of(model)
    x = rng.integers(0, 256, (1500, 1, H, W), dtype=np.uint8)  # several images per persistent block
    got = net.logits(x, [name])
    a = reference.tanh_maxpool2(reference.conv2d(x.astype(np.float32), model.layers[0].weight)).reshape(len(x), -1)
    assert 0.02 < np.abs(a).mean() < 0.98  # the tanh neither flat nor saturated: the logits see the conv
    ref = reference.fully_connected(a, model.layers[-1].weight, model.layers[-1].bias)
    flat = a.shape[1]
    ok, msg = close(got, ref, 1e-4, 1e-5 * np.sqrt(flat))
    assert ok, f"{shape} uint8: {msg}"
    ok, msg = close(net.logits(x.astype(np.float32), [name]), got, 1e-4, 1e-5 * np.sqrt(flat))
    assert ok, f"{shape} float32 vs uint8: {msg}"


@requires_gpu
@requires_split
@pytest.mark.gpu
@pytest.mark.parametrize("name", SPLIT_FIRST)
def test_split_f16_beyond_fp16_range_gives_nan(name):
    """The documented contract: a value past fp16's range (|v| >= 65520) makes every pooled output it reaches NaN,
    never a finite wrong number; every other output is still right. A pixel reaches the pooled outputs whose 2x2
    window of conv outputs overlaps its K x K neighbourhood; a weight reaches its whole filter (step 24 scales the
    layer's weights into range, so there a large weight gives the right outputs)."""
    g, v = gpu(), descriptor(name)
    rng = np.random.default_rng(SEED + 21)
    B, H, W, M, K = 3, 20, 22, 6, 5
    x = verify.random_nonzero(rng, (B, 1, H, W))
    k = verify.random_nonzero(rng, (M, 1, K, K))
    x[1, 0, 7, 9] = 1e5
    x[2, 0, 12, 3] = -7e4
    big_k = k.copy()
    big_k[4, 0, 2, 1] = 1e5
    ref = verify.expected(x, k, "tanh-maxpool2")
    Hp, Wp = (H - K + 1) // 2, (W - K + 1) // 2
    reach = np.zeros((B, M, Hp, Wp), bool)
    for b, r, c in [(1, 7, 9), (2, 12, 3)]:
        for pr in range(Hp):
            for pc in range(Wp):
                reach[b, :, pr, pc] = 2 * pr <= r <= 2 * pr + K and 2 * pc <= c <= 2 * pc + K
    y = g.conv(name, x, k)
    assert np.isnan(y[reach]).all()
    ok, msg = close(np.where(reach, 0.0, y), np.where(reach, 0.0, ref), *verify.tolerance(v["rtol"], 1, K))
    assert ok, msg
    y = g.conv(name, x[:1], big_k)
    if name == POOL_WINDOW:  # the layer's weights are scaled by a power of two into fp16's range: still exact
        ok, msg = close(y, verify.expected(x[:1], big_k, "tanh-maxpool2"), *verify.tolerance(v["rtol"], 1, K))
        assert ok, msg
        return
    assert np.isnan(y[0, 4]).all()
    keep = [m for m in range(M) if m != 4]
    ok, msg = close(y[0, keep], verify.expected(x[:1], k, "tanh-maxpool2")[0, keep],
                    *verify.tolerance(v["rtol"], 1, K))
    assert ok, msg


@requires_gpu_module
@requires_split
@pytest.mark.parametrize("name", SPLIT_FIRST)
def test_split_f16_refusals_say_why(name):
    """supports() is host code (no GPU needed): what the kernel takes, and one line naming the variant and the
    reason for each shape it does not."""
    g = gpu()
    for B, C, H, W, M, K in [(2, 1, 48, 48, 6, 5), (2, 1, 28, 28, 50, 5), (1, 1, 70, 70, 12, 5),
                             (1, 1, 72, 72, 12, 7), (1, 1, 6, 6, 64, 5), (1, 1, 2, 2, 1, 1)]:
        assert g.why_unsupported(name, B, C, H, W, M, K) == "", (H, W, M, K)
    for (B, C, H, W, M, K), why in [((1, 6, 22, 22, 16, 5), "C must be 1"), ((1, 1, 20, 20, 6, 9), "K up to 7"),
                                    ((1, 1, 28, 28, 65, 5), "M up to 64"), ((1, 1, 5, 9, 6, 5), "2x2"),
                                    ((1, 1, 200, 200, 6, 5), "shared memory")]:
        msg = g.why_unsupported(name, B, C, H, W, M, K)
        assert msg.startswith(name) and why in msg and "\n" not in msg, msg
