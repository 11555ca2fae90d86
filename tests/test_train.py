"""The trainer: refusals, determinism, the progress bar, the saved model, no file from an interrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from built_variants import M2_PICK
from conftest import ROOT, needs_data, needs_torch

from pyconv.core import archs, paths
from pyconv.core.errors import PyconvError
from pyconv.core.model import load_model
from pyconv.engines.cpu import forward_cpu
from pyconv.tools import train


def weights(path):
    return [(layer.name, layer.weight, layer.bias) for layer in load_model(path).layers
            if layer.weight is not None]


def files_in(folder):
    return sorted(p.name for p in folder.iterdir())


def test_archs_table_matches_the_course():
    shapes = {name: archs.empty_model(name, name).summary() for name in archs.ARCHS}
    tail = "-> flatten -> FC {} -> tanh -> FC 10 -> softmax"
    assert shapes == {
        "fa17": "1x28x28: conv 50@5x5 -> tanh -> maxpool 2/2 " + tail.format(500),
        "sp18": "1x64x64: conv 6@5x5 -> tanh -> maxpool 2/2 -> conv 16@5x5 " + tail.format(140),
        "fa18": "1x72x72: conv 12@7x7 -> tanh -> maxpool 2/2 -> conv 24@7x7 " + tail.format(160),
        "sp19": "1x48x48: conv 6@5x5 -> tanh -> maxpool 2/2 -> conv 16@5x5 " + tail.format(140),
        "fa19": "1x70x70: conv 12@5x5 -> tanh -> maxpool 2/2 -> conv 24@5x5 " + tail.format(160),
        "fa20": "1x86x86: conv 4@7x7 -> relu -> maxpool 2/2 -> conv 16@7x7 -> relu -> maxpool 4/4 -> flatten -> "
                "FC 32 -> relu -> FC 10 -> softmax",
    }


@pytest.mark.parametrize("kwargs, message", [
    ({"arch": "sp20"}, "unknown architecture 'sp20' (known: fa17, sp18, fa18, sp19, fa19, fa20)"),
    ({"epochs": 0}, "epochs must be a positive integer, got 0"),
    ({"epochs": -2}, "epochs must be a positive integer, got -2"),
    ({"epochs": "two"}, "epochs must be a positive integer, got 'two'"),
    ({"epochs": 1.5}, "epochs must be a positive integer, got 1.5"),
    ({"name": "../escape"}, "model name must be 1 to 100 letters"),
    ({"name": ""}, "model name must be 1 to 100 letters"),
    ({"batch_size": 0}, "batch size must be a positive integer, got 0"),
    ({"max_batches": 0}, "max batches must be a positive integer, got 0"),
    ({"lr": -1}, "lr must be a positive number"),
])
def test_bad_arguments_are_refused(tmp_path, kwargs, message):
    args = {"arch": "sp19", "name": "m", "epochs": 1, "dest": tmp_path / "m.h5", "progress": False, **kwargs}
    with pytest.raises(PyconvError) as e:
        train.train(**args)
    assert str(e.value).startswith(message)
    assert files_in(tmp_path) == []


def test_existing_file_needs_force(tmp_path):
    dest = tmp_path / "m.h5"
    dest.write_bytes(b"keep")
    with pytest.raises(PyconvError, match="exists; pass --force"):
        train.train("sp19", "m", epochs=1, dest=dest, progress=False)
    assert dest.read_bytes() == b"keep"


def test_torch_missing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(PyconvError) as e:
        train.train("sp19", "m", epochs=1, dest=tmp_path / "m.h5", progress=False)
    assert str(e.value) == ("PyTorch is not installed: pip install 'pyconv-ece408[torch]' "
                            "(in a checkout: pip install -e '.[torch]')")


@needs_torch
@needs_data
def test_same_seed_same_weights(tmp_path):
    a = train.train("sp19", "a", epochs=1, seed=7, max_batches=4, dest=tmp_path / "a.h5", progress=False)
    b = train.train("sp19", "b", epochs=1, seed=7, max_batches=4, dest=tmp_path / "b.h5", progress=False)
    c = train.train("sp19", "c", epochs=1, seed=8, max_batches=4, dest=tmp_path / "c.h5", progress=False)
    wa, wb, wc = weights(a), weights(b), weights(c)
    for (name, w1, b1), (_, w2, b2) in zip(wa, wb, strict=True):
        assert np.array_equal(w1, w2), name
        assert (b1 is None and b2 is None) or np.array_equal(b1, b2), name
    assert not all(np.array_equal(w1, w3) for (_, w1, _), (_, w3, _) in zip(wa, wc, strict=True))


@needs_torch
@needs_data
def test_trained_model_takes_raw_pixels_and_learns(tmp_path, capfd):
    """200 steps of sp19: the saved model, run by the project's engine on raw 0..255 pixels, is far above
    chance (0.1), which it would not be if the 1/255 the net trained with were not folded into conv1."""
    path = train.train("sp19", "short", epochs=1, seed=0, max_batches=200, dest=tmp_path / "short.h5")
    err = capfd.readouterr().err
    assert "short epoch 1/1" in err and "loss=" in err and "200/200" in err  # the progress bar
    model = load_model(path)
    assert model.arch == "sp19" and model.input_shape == (1, 48, 48) and model.name == "short"
    assert "--max-batches 200" in model.description and "200 batches of 64" in model.description
    from pyconv.core import data

    x, labels = data.load_test(48, 1000)
    acc = float(np.mean(forward_cpu(model, x.astype(np.float32), M2_PICK).labels == labels))
    assert acc > 0.6
    assert files_in(tmp_path) == ["short.h5"]  # no temporary file left beside it


@needs_torch
@needs_data
@pytest.mark.parametrize("exc", [KeyboardInterrupt, RuntimeError])
def test_interrupted_training_leaves_no_file(tmp_path, exc):
    dest = tmp_path / "m.h5"

    def stop(epoch, batch, loss):
        if batch == 3:
            raise exc("stop")

    expected = PyconvError if exc is KeyboardInterrupt else RuntimeError
    with pytest.raises(expected) as e:
        train.train("fa17", "m", epochs=2, dest=dest, progress=False, on_batch=stop)
    if exc is KeyboardInterrupt:
        assert str(e.value) == "training of 'm' interrupted after 3 batches; no model file written"
    assert files_in(tmp_path) == []


@needs_torch
@needs_data
def test_interrupted_retrain_keeps_the_old_file(tmp_path):
    dest = tmp_path / "m.h5"
    train.train("sp19", "m", epochs=1, max_batches=2, dest=dest, progress=False)
    before = dest.read_bytes()

    def stop(epoch, batch, loss):
        raise KeyboardInterrupt

    with pytest.raises(PyconvError, match="interrupted"):
        train.train("sp19", "m", epochs=1, dest=dest, force=True, progress=False, on_batch=stop)
    assert dest.read_bytes() == before and files_in(tmp_path) == ["m.h5"]


@needs_torch
@needs_data
@pytest.mark.slow
def test_ctrl_c_on_the_task(tmp_path):
    """SIGINT to a running `invoke train`: one error line, exit status 1, no model file, no temporary file."""
    name = f"test-interrupt-{os.getpid()}"
    dest = paths.MODELS / f"{name}.h5"
    before = files_in(paths.MODELS)
    proc = subprocess.Popen([sys.executable, "-m", "invoke", "train", "--arch", "fa17", "--name", name],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # wait for the progress bar to show a finished batch, then interrupt mid-epoch
        seen = ""
        deadline = time.monotonic() + 120
        while "/938" not in seen and time.monotonic() < deadline:
            seen += os.read(proc.stderr.fileno(), 4096).decode(errors="replace")
        assert "/938" in seen, seen
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 1
        assert err.strip().splitlines()[-1].startswith(f"error: training of '{name}' interrupted after ")
        assert not dest.exists()
        assert files_in(paths.MODELS) == before
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        dest.unlink(missing_ok=True)


def test_task_refuses_unknown_arch_in_one_line():
    r = subprocess.run([sys.executable, "-m", "invoke", "train", "--arch", "nope", "--name", "x"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip() == "error: unknown architecture 'nope' (known: fa17, sp18, fa18, sp19, fa19, fa20)"

