"""Bad input at the command line, for every task that takes it: one clear line on stderr, exit status 1, no
traceback, no file left behind. (The unit-level refusals live beside each module's tests: test_data.py,
test_model.py, test_mxnet_import.py, test_cpu_conv.py, test_milestones.py, test_gpu_engine.py; this file
drives the same inputs through `python -m invoke <task>` as a user would.) Also: GPU variants asked for a
shape they do not support, a GPU allocation that cannot fit, and two milestone runs at once."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from built_variants import CPU, GPU, M3_PICK, needs_m3_pick
from conftest import ROOT, needs_data
from gpu_helpers import HAVE_GPU, gpu, random_model, requires_gpu, requires_gpu_module
from test_mxnet_import import lenet, node, write_params, write_symbol

from pyconv import verify
from pyconv.core import data, reference
from pyconv.core.model import save_model
from pyconv.tools import timelog


def invoke(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "invoke", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def assert_one_line(r, msg: str, code: int = 1):
    """One line on stderr naming msg, exit status `code` (2: a usage error, pyconv.cli.parsing)."""
    out = r.stdout + r.stderr
    assert r.returncode == code, f"exit {r.returncode}\n{out}"
    assert "Traceback" not in out, out
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{r.stderr}"
    assert lines[0].startswith("error: ") and msg in lines[0], lines[0]


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


# ---------------------------------------------------------------------------------------------- invoke data
def fake_source(folder: Path, damage: str) -> Path:
    """The four Fashion-MNIST file names with content that is not Fashion-MNIST, damaged as asked. The first
    file `invoke data` reads is the test images (the training images only with --train), so that is the damaged
    one."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(7)
    for name, (_, magic, count) in data.FILES.items():
        content = np.array([magic, count], ">u4").tobytes() + rng.integers(0, 256, 4096, np.uint8).tobytes()
        blob = gzip.compress(content)
        if name == "t10k-images-idx3-ubyte":
            if damage == "corrupt":
                blob = b"\x1f\x8b" + b"this is not gzip data" * 20
            elif damage == "truncated":
                blob = blob[: len(blob) // 2]
            elif damage == "missing":
                continue
        (folder / f"{name}.gz").write_bytes(blob)  # "checksum": valid gzip, wrong content
    return folder


@pytest.mark.parametrize("damage,msg", [
    ("missing", "missing t10k-images-idx3-ubyte"),
    ("corrupt", "corrupt or truncated gzip file"),
    ("truncated", "corrupt or truncated gzip file"),
    ("checksum", "checksum mismatch (SHA-256 of the decompressed content is"),
])
def test_data_source_damaged(tmp_path, damage, msg):
    src = fake_source(tmp_path / "src", damage)
    dest = tmp_path / "datasets"
    r = invoke("data", "--source", src, "--force",
               env={"PYCONV_DATASETS": str(dest), "PYCONV_DATA_FILE": str(dest / "fashion-mnist.h5")})
    assert_one_line(r, msg)
    assert files_under(dest) == [], "a failed `invoke data` must leave nothing in the destination"


# ------------------------------------------------------------------------------------- invoke import-mxnet
def checkpoint(folder: Path, damage: str) -> tuple[Path, Path]:
    rng = np.random.default_rng(3)
    arrays, nodes = lenet(rng)
    folder.mkdir(parents=True)
    sym, params = folder / "net-symbol.json", folder / "net-0001.params"
    if damage == "unsupported-op":
        nodes[3] = node("LeakyReLU", "leaky0", [2])
    write_params(params, arrays, magic=0x113 if damage == "bad-magic" else 0x112)
    write_symbol(sym, nodes)
    if damage == "truncated":
        params.write_bytes(params.read_bytes()[:200])
    elif damage == "symbol-not-json":
        sym.write_text("{not json")
    elif damage == "params-missing":
        params.unlink()
    return sym, params


@pytest.mark.parametrize("damage,msg", [
    ("bad-magic", "bad magic 0x113"),
    ("truncated", "truncated .params file"),
    ("unsupported-op", "unsupported MXNet op 'LeakyReLU'"),
    ("symbol-not-json", "not an MXNet symbol file"),
    ("params-missing", "net-0001.params does not exist"),
    ("none", None),  # the control: the same checkpoint undamaged is imported, so the checks above can fail
])
def test_import_mxnet_damaged(tmp_path, damage, msg):
    sym, params = checkpoint(tmp_path / "ckpt", damage)
    dest = tmp_path / "datasets"
    r = invoke("import-mxnet", "--symbol", sym, "--params", params, "--name", "imported-net",
               "--input-size", 14, env={"PYCONV_DATASETS": str(dest)})
    if msg is None:
        assert r.returncode == 0, r.stderr
        assert files_under(dest) == [dest / "models" / "imported" / "imported-net.h5"]
        return
    assert_one_line(r, msg)
    assert files_under(dest) == [], "a refused import must leave no model file"


# ---------------------------------------------------------------------------------------------- model files
def model_file(tmp_path: Path, damage: str) -> Path:
    """A valid 1x28x28 model file, then damaged in one way."""
    path = tmp_path / "models" / "damaged.h5"
    save_model(random_model(np.random.default_rng(11), (1, 28, 28), name="damaged"), path)
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "not-hdf5":
        path.write_text("a text file named .h5\n")
    else:
        with h5py.File(path, "r+") as f:
            if damage == "missing-dataset":
                del f["weights/fc1/bias"]
            elif damage == "wrong-dtype":
                w = f["weights/conv1/weight"][()]
                del f["weights/conv1/weight"]
                f["weights/conv1/weight"] = w.astype(np.float64)
            elif damage == "shapes-do-not-chain":
                del f["weights/conv2/weight"]
                f["weights/conv2/weight"] = np.ones((8, 3, 3, 3), np.float32)  # conv1 gives 4 channels
            elif damage == "nan":
                f["weights/conv1/weight"][0, 0, 0, 0] = np.nan
            elif damage == "inf":
                f["weights/fc2/bias"][3] = np.inf
            else:
                raise AssertionError(damage)
    return path


MODEL_DAMAGE = {
    "truncated": "is not a readable HDF5 file",
    "not-hdf5": "is not a readable HDF5 file",
    "missing-dataset": "dataset weights/fc1/bias is missing",
    "wrong-dtype": "conv1/weight has dtype float64, must be float32",
    "shapes-do-not-chain": "weight expects 3 input channels but the input has 4",
    "nan": "conv1/weight contains NaN or Inf",
    "inf": "fc2/bias contains NaN or Inf",
}
MODEL_TASKS = {"milestone-2": ("milestone", "--m", "2"), "milestone-3": ("milestone", "--m", "3"),
               "profile-3": ("profile", "--m", "3"), "bench-cpu": ("bench", "--cpu")}


@pytest.mark.parametrize("damage", list(MODEL_DAMAGE))
@pytest.mark.parametrize("task", list(MODEL_TASKS))
def test_damaged_model_file(tmp_path, task, damage):
    path = model_file(tmp_path, damage)
    logs = tmp_path / "logs"
    r = invoke(*MODEL_TASKS[task], "--batch", 10, "--model", path, env={"PYCONV_LOGS": str(logs)})
    assert_one_line(r, MODEL_DAMAGE[damage])
    assert files_under(logs) == [], "a refused run must write no log"


def test_sanitize_refuses_a_damaged_model_before_the_gpu(tmp_path):
    pytest.importorskip("pyconv._gpu")
    path = model_file(tmp_path, "nan")
    r = invoke("sanitize", "--model", path, env={"PYCONV_LOGS": str(tmp_path / "logs")})
    assert_one_line(r, "contains NaN or Inf")


# --------------------------------------------------------------------------------------- names and numbers
@pytest.mark.parametrize("args,msg,code", [
    (["profile", "--m", "3", "--batch", "0"], "batch must be an integer between 1 and 10000, got 0", 2),
    (["profile", "--m", "3", "--batch", "abc"], "batch must be an integer between 1 and 10000, got 'abc'", 2),
    (["profile", "--m", "3", "--batch", "1.5"], "got '1.5'", 2),
    (["profile", "--m", "3", "--batch", "10001"], "got 10001", 2),
    (["profile", "--m", "7"], "unknown milestone '7'", 1),
    (["profile", "--m", "2"], "milestone 2 runs on the CPU: there is nothing for CUPTI to trace", 1),
    (["profile", "--m", "3", "--model", "no-such-model"], "unknown model 'no-such-model'", 1),
    (["milestone", "--m", "4", "--model", "no-such-model"], "unknown model 'no-such-model'", 1),
    (["milestone", "--m", "final", "--batch", "-3"], "got -3", 2),
    (["milestone", "--m", "2", "--impl", "cpu-fastest"], f"--impl must be one of {', '.join([*CPU, 'numpy'])}", 1),
    (["bench", "--cpu", "--batch", "0"], "batch must be an integer between 1 and 10000, got 0", 2),
    (["bench", "--cpu", "--batch", "abc"], "batch must be an integer between 1 and 10000, got 'abc'", 2),
    (["bench", "--cpu", "--reps", "x"], "--reps must be an integer >= 1, got 'x'", 2),
    (["bench", "--cpu", "--model", "no-such-model"], "unknown model 'no-such-model'", 1),
    (["bench", "--cpu", "--variants", "gpu-imaginary"], "unknown variant(s) gpu-imaginary (known: ", 1),
    (["sanitize", "--tools", "memcheck,leakcheck"], "unknown sanitizer tool 'leakcheck'", 1),
    (["sanitize", "--batch", "0"], "batch must be an integer between 1 and 10000, got 0", 2),
    (["sanitize", "--batch", "abc"], "batch must be an integer between 1 and 10000, got 'abc'", 2),
    (["sanitize", "--timeout", "soon"], "--timeout must be a positive number of seconds, got 'soon'", 1),
    (["sanitize", "--milestone", "2"], "--m 2: the sanitizer runs a GPU milestone", 1),  # the older spelling
    (["sanitize", "--m", "2"], "--m 2: the sanitizer runs a GPU milestone", 1),
    (["sanitize", "--model", "no-such-model"], "unknown model 'no-such-model'", 1),
])
def test_bad_names_and_numbers(tmp_path, args, msg, code):
    if args[0] == "sanitize":
        pytest.importorskip("pyconv._gpu")  # without the module the task says that first, in one line too
    results_before = files_under(ROOT / "results")
    r = invoke(*args, env={"PYCONV_LOGS": str(tmp_path)})
    assert_one_line(r, msg, code)
    assert files_under(tmp_path) == []
    assert files_under(ROOT / "results") == results_before, "a refused run must write no result file"


def test_sanitize_unknown_variant(tmp_path):
    pytest.importorskip("pyconv._gpu")
    r = invoke("sanitize", "--variants", f"{GPU[0]},gpu-imaginary", env={"PYCONV_LOGS": str(tmp_path)})
    assert_one_line(r, f"unknown GPU variant 'gpu-imaginary' (known: {GPU[0]}")


# --------------------------------------------------------------------------------- missing or damaged data
@pytest.mark.parametrize("task", [("milestone", "--m", "3"), ("profile", "--m", "3"), ("sanitize",)])
def test_missing_data_file(tmp_path, task):
    if task[0] == "sanitize":
        pytest.importorskip("pyconv._gpu")
    model = tmp_path / "m.h5"
    save_model(random_model(np.random.default_rng(1), (1, 28, 28), name="m"), model)
    missing = tmp_path / "nowhere" / "fashion-mnist.h5"
    r = invoke(*task, "--batch", 10, "--model", model,
               env={"PYCONV_DATA_FILE": str(missing), "PYCONV_LOGS": str(tmp_path / "logs")})
    assert_one_line(r, f"{missing} is missing: run `invoke data` first")
    assert not (tmp_path / "logs").exists()


def test_damaged_data_file_is_named(tmp_path):
    """The data file exists but is not HDF5: the run says so in one line before any child starts (no log) and
    points at `invoke data --force`."""
    model = tmp_path / "m.h5"
    save_model(random_model(np.random.default_rng(1), (1, 28, 28), name="m"), model)
    bad = tmp_path / "fashion-mnist.h5"
    bad.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    r = invoke("milestone", "--m", "2", "--batch", 10, "--model", model,
               env={"PYCONV_DATA_FILE": str(bad), "PYCONV_LOGS": str(tmp_path / "logs")})
    assert_one_line(r, f"error: {bad} is damaged")
    assert "run `invoke data --force`" in r.stderr
    assert files_under(tmp_path / "logs") == []


# ---------------------------------------------------------------------------------------------- no GPU
@pytest.mark.skipif(HAVE_GPU, reason="checks the no-GPU behaviour")
@pytest.mark.parametrize("args", [("bench", "--gpu"), ("bench", "--end-to-end")])
def test_gpu_bench_without_a_gpu(tmp_path, args):
    r = invoke(*args, env={"PYCONV_LOGS": str(tmp_path)})
    assert_one_line(r, "need a CUDA GPU and the built pyconv._gpu; none is visible")


GPU_TASKS = [("milestone", "--m", "3"), ("milestone", "--m", "3", "--impl", "gpu-imaginary"),
             ("milestone", "--m", "4"), ("profile", "--m", "3")]


@needs_data
@pytest.mark.skipif(HAVE_GPU, reason="checks the no-GPU behaviour")
@pytest.mark.parametrize("task", GPU_TASKS, ids=lambda t: "-".join(t).replace("--", ""))
def test_gpu_milestone_without_a_gpu_fails_before_starting(tmp_path, task):
    model = tmp_path / "m.h5"
    save_model(random_model(np.random.default_rng(1), (1, 28, 28), name="m"), model)
    r = invoke(*task, "--batch", 10, "--model", model, env={"PYCONV_LOGS": str(tmp_path / "logs")})
    try:
        from pyconv import _gpu  # noqa: F401
    except ImportError:
        assert_one_line(r, "the CUDA module pyconv._gpu is not built")
    else:
        assert_one_line(r, "no CUDA GPU is visible: milestones 3, 4 and final need one")
    assert files_under(tmp_path / "logs") == [], "no child was started, so there is no log"


@needs_data
@pytest.mark.gpu
@requires_gpu
def test_unknown_gpu_impl_is_named(tmp_path):
    model = tmp_path / "m.h5"
    save_model(random_model(np.random.default_rng(1), (1, 28, 28), name="m"), model)
    r = invoke("milestone", "--m", "3", "--batch", 10, "--model", model, "--impl", "gpu-imaginary",
               env={"PYCONV_LOGS": str(tmp_path / "logs")})
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "Traceback" not in out
    said = [ln for ln in out.splitlines() if "unknown GPU implementation 'gpu-imaginary'" in ln]
    assert len(said) == 1, out


# ----------------------------------------------------------------------------------- GPU shapes and memory
# Shapes (B, C, H, W, M, K) past one limit or another of the ladder: a 1x1 output (no 2x2 pool to fuse),
# M past the grid's z limit, a row past 10^6 pixels, 2^32 pixels in one image, a 2^31-pixel row.
REFUSAL_CANDIDATES = [(1, 1, 3, 3, 1, 3), (1, 1, 4, 4, 70000, 3), (1, 1, 1, 1_000_001, 1, 1),
                      (1, 1, 65536, 65536, 1, 1), (1, 1, 1, 2**31, 1, 1)]
CHEAP_BYTES = 64 << 20


@requires_gpu_module
@pytest.mark.parametrize("name", GPU)
def test_unsupported_shape_is_refused_before_any_gpu_work(name):
    """Every variant names the shapes it cannot run (why_unsupported) and conv refuses them with that reason
    as a ValueError -- checked before the GPU is touched, so this runs on machines without one too."""
    g = gpu()
    refusals = [(s, g.why_unsupported(name, *s)) for s in REFUSAL_CANDIDATES]
    refusals = [(s, why) for s, why in refusals if why]
    assert refusals, f"{name} claims to support every candidate shape, 2^32-pixel images included"
    tried = 0
    for (b, c, h, w, m, k), why in refusals:
        # The reason names a variant (gpu-autotuned's names gpu-tensor-core, whose limits it shares).
        assert why.startswith("gpu-") and ": " in why or why.startswith(name + " "), why
        if 4 * (b * c * h * w + m * c * k * k) > CHEAP_BYTES:
            continue
        x, wt = np.ones((b, c, h, w), np.float32), np.ones((m, c, k, k), np.float32)
        with pytest.raises(ValueError) as e:
            g.conv(name, x, wt)
        assert str(e.value) == why
        tried += 1
    assert tried or all(4 * (s[0] * s[1] * s[2] * s[3]) > CHEAP_BYTES for s, _ in refusals)


@pytest.mark.gpu
@requires_gpu
@needs_m3_pick
def test_gpu_out_of_memory_raises_and_the_process_keeps_working():
    g = gpu()
    free = g.device_info()["global_memory_bytes"]
    # A 1x1 convolution of one 1024x1024 image into M channels: the output alone is M * 4 MiB on the device.
    m = min(65535, int(1.5 * free // (4 << 20)) + 1)
    assert 4 * m * (1 << 20) > free, "the card is too large for this test's shape"
    x = np.ones((1, 1, 1024, 1024), np.float32)
    k = np.ones((m, 1, 1, 1), np.float32)
    with pytest.raises(g.CudaError, match="cudaErrorMemoryAllocation"):
        g.time_conv(M3_PICK, x, k, warmup=0, reps=1)
    # The failed allocation left nothing behind: the same process computes correctly afterwards.
    rng = np.random.default_rng(5)
    xs = rng.uniform(-1, 1, (2, 3, 13, 11)).astype(np.float32)
    ks = rng.uniform(-1, 1, (5, 3, 3, 3)).astype(np.float32)
    y = g.conv(M3_PICK, xs, ks)
    assert verify.compare(y, reference.conv2d(xs, ks), *verify.tolerance(1e-4, 3, 3)).passed
    assert len(g.time_conv(M3_PICK, xs, ks, warmup=0, reps=2)) == 2


# ----------------------------------------------------------------------------------------- concurrent runs
@needs_data
def test_two_milestone_runs_at_once_write_two_complete_logs(tmp_path):
    model = tmp_path / "m.h5"
    save_model(random_model(np.random.default_rng(2), (1, 28, 28), name="m"), model)
    logs = tmp_path / "logs"
    env = {**os.environ, "PYCONV_LOGS": str(logs)}
    cmd = [sys.executable, "-m", "invoke", "milestone", "--m", "2", "--batch", "200", "--model", str(model),
           "--impl", "numpy"]  # the reference: every build has it
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    files = files_under(logs)
    assert len(files) == 2, files
    assert all(f.suffix == ".log" and f.name.startswith("m2-m-b200-") for f in files), files
    for f in files:
        text = f.read_text()
        assert text.count("Correctness: ") == 1 and text.count("New Inference") == 1, text
        assert timelog.parse_gnu(text)["exit_status"] == 0
    for out, _ in outs:  # each run names its own log
        (named,) = [ln.removeprefix("log: ") for ln in out.splitlines() if ln.startswith("log: ")]
        assert Path(named) in files
    assert len({out.splitlines()[-1] for out, _ in outs}) == 2
