"""Milestone 1 (PyTorch): the network built from the model file computes what the numpy reference computes,
its accuracy equals the project's engine, the task's output and time blocks, one clear error sans PyTorch."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from built_variants import M2_PICK
from conftest import ROOT, assert_close, needs_course, needs_data, needs_torch

from pyconv.core import archs
from pyconv.core.errors import PyconvError
from pyconv.core.model import Layer, Model, load_model, shipped_models
from pyconv.engines import framework
from pyconv.engines.cpu import forward_cpu
from pyconv.tools import milestones, timelog


def random_weights(model: Model, rng) -> Model:
    """Weights scaled so every pre-activation is O(1) on raw 0..255 pixels (nothing saturates, argmax is not
    decided by one huge logit)."""
    channels, scale, features = model.input_shape[0], 1.0 / 128.0, None
    for layer in model.layers:
        if layer.type == "conv":
            shape = (layer.out_channels, channels, layer.kernel, layer.kernel)
            w = rng.standard_normal(shape) * scale / np.sqrt(np.prod(shape[1:]))
            layer.weight = w.astype(np.float32)
            channels, scale = layer.out_channels, 1.0
        elif layer.type == "fc":
            fan_in = features if features is not None else framework._flat_features(model, layer)
            w = rng.standard_normal((layer.out_features, fan_in)) / np.sqrt(fan_in)
            layer.weight = w.astype(np.float32)
            layer.bias = rng.uniform(-0.5, 0.5, layer.out_features).astype(np.float32)
            features = layer.out_features
    return model


def mixed_model() -> Model:
    """Every layer type build_net knows: relu, sigmoid, avg pool, a pool with stride != kernel."""
    return Model(name="mixed", arch="test", input_shape=(2, 21, 17), layers=[
        Layer(type="conv", name="c1", out_channels=5, kernel=4), Layer(type="relu"),
        Layer(type="pool", mode="avg", kernel=3, stride=2),
        Layer(type="conv", name="c2", out_channels=7, kernel=2), Layer(type="sigmoid"),
        Layer(type="pool", mode="max", kernel=2, stride=1), Layer(type="flatten"),
        Layer(type="fc", name="f1", out_features=13), Layer(type="tanh"),
        Layer(type="fc", name="f2", out_features=6), Layer(type="softmax")])


def nonzero_pixels(rng, n, shape):
    return rng.integers(1, 256, (n, *shape)).astype(np.uint8)


@needs_torch
@pytest.mark.parametrize("arch", [*archs.ARCHS, "mixed"])
def test_net_matches_numpy_reference(arch, rng):
    model = mixed_model() if arch == "mixed" else archs.empty_model(arch, f"random-{arch}")
    model = random_weights(model, rng)
    x = nonzero_pixels(rng, 7, model.input_shape)
    torch = framework.require_torch()
    net = framework.build_net(model).eval()
    with torch.inference_mode():
        got = net(torch.from_numpy(x).float()).numpy()
    ref = forward_cpu(model, x.astype(np.float32), "numpy").probabilities
    assert_close(got, ref, rtol=1e-4, atol=1e-6, what=f"{arch} probabilities")
    # logits too: softmax=False must drop exactly the last layer
    logits_net = framework.build_net(model, softmax=False).eval()
    with torch.inference_mode():
        logits = logits_net(torch.from_numpy(x).float()).numpy()
    assert_close(torch.softmax(torch.from_numpy(logits), dim=1).numpy(), ref, rtol=1e-4, atol=1e-6,
                 what=f"{arch} logits")


@needs_torch
def test_export_folds_input_scale(rng):
    """A net trained on x*s, exported with input_scale=s, gives the same outputs on raw x."""
    torch = framework.require_torch()
    torch.manual_seed(3)
    model = archs.empty_model("sp19", "scaled")
    net = framework.build_net(model, load_weights=False).eval()
    x = nonzero_pixels(rng, 5, model.input_shape)
    s = 1.0 / 255.0
    with torch.inference_mode():
        want = net(torch.from_numpy(x).float() * s).numpy()
    framework.export_weights(net, model, input_scale=s)
    assert all(layer.weight.dtype == np.float32 for layer in model.layers if layer.weight is not None)
    got = forward_cpu(model, x.astype(np.float32), "numpy").probabilities
    assert_close(got, want, rtol=1e-4, atol=1e-6, what="folded scale")


@needs_torch
@needs_data
@pytest.mark.parametrize("name", shipped_models())
def test_m1_cpu_accuracy_equals_engine(name, capsys):
    model = load_model(name)
    x, labels = milestones.load_inputs(model, 1000)
    acc = framework.run_m1(model, x, labels, "cpu")
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == ["New Inference", f"EvalMetric: {{'accuracy': {acc!r}}}"]
    assert out[0].startswith("m1.1: PyTorch ")
    engine = float(np.mean(forward_cpu(model, x.astype(np.float32), M2_PICK).labels == labels))
    assert acc == engine


@needs_torch
@needs_data
@needs_course
@pytest.mark.slow
def test_course_checkpoint_through_m1(course_model):
    """The course's sp19 checkpoint: 0.8397 at 10000 (0.8398 is the one near-tie image the other way)."""
    x, labels = milestones.load_inputs(course_model, 10000)
    acc = framework.run_m1(course_model, x, labels, "cpu")
    assert acc in (0.8397, 0.8398)
    ref = float(np.mean(forward_cpu(course_model, x.astype(np.float32), M2_PICK).labels == labels))
    assert abs(acc - ref) <= 1e-4


@needs_torch
@needs_data
@pytest.mark.gpu
def test_m1_gpu_agrees_with_cpu():
    torch = framework.require_torch()
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible")
    model = load_model("ece408")
    x, labels = milestones.load_inputs(model, 10000)
    gpu = framework.run_m1(model, x, labels, "gpu")
    assert torch.backends.cudnn.benchmark and not torch.backends.cudnn.allow_tf32
    cpu = framework.run_m1(model, x, labels, "cpu")
    # float32 on both, different summation orders: at most one near-tie image may flip
    assert abs(gpu - cpu) <= 1e-4


def run_task(*args, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=600)


@needs_torch
@needs_data
def test_milestone_1_task(tmp_path):
    """`invoke milestone --m 1 --device both`: m1.1 with its own time block and log; m1.2 the same on a GPU
    machine, one skip line without one; exit status 0 either way."""
    r = run_task("milestone", "--m", "1", "--batch", "100", "--device", "both",
                 env_extra={"PYCONV_LOGS": str(tmp_path)})
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    model = load_model("ece408")
    x, labels = milestones.load_inputs(model, 100)
    engine = float(np.mean(forward_cpu(model, x.astype(np.float32), M2_PICK).labels == labels))
    assert f"EvalMetric: {{'accuracy': {engine!r}}}" in out
    logs = sorted(tmp_path.glob("*.log"))
    gpu = framework.cuda_available()
    assert out.count("New Inference") == len(logs) == (2 if gpu else 1)
    assert [p.name.split("-")[0] for p in logs] == (["m1.1", "m1.2"] if gpu else ["m1.1"])
    if not gpu:
        assert out.count("m1.2: no CUDA GPU visible; skipped\n") == 1
    for log in logs:
        text = log.read_text()
        assert "New Inference" in text and "EvalMetric" in text
        assert timelog.parse_gnu(text)["exit_status"] == 0
    assert len(timelog._GNU_RE.findall(out)) == len(logs)  # one time block per device that ran
    assert len([line for line in out.splitlines() if line.startswith("log: ")]) == len(logs)


@needs_torch
@needs_data
def test_m1_gpu_only_without_gpu_is_one_error():
    if framework.cuda_available():
        pytest.skip("a CUDA GPU is visible")
    r = run_task("milestone", "--m", "1", "--batch", "10", "--device", "gpu")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == ["error: m1.2 needs a CUDA GPU: PyTorch sees none "
                                             "(torch.cuda.is_available() is False)"]


def test_torch_missing_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    with pytest.raises(PyconvError) as e:
        framework.require_torch()
    assert str(e.value) == framework.TORCH_MISSING
    assert "pip install 'pyconv-ece408[torch]'" in str(e.value)
    with pytest.raises(PyconvError, match=r"pip install 'pyconv-ece408\[torch\]'"):
        framework.build_net(archs.empty_model("fa17", "x"), load_weights=False)
    if (ROOT / "datasets" / "fashion-mnist.h5").exists():
        with pytest.raises(PyconvError, match=r"PyTorch is not installed"):
            milestones.run("1", batch=10, device="cpu")
