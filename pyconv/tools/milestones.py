"""The course's milestones as standalone runs.

`run(...)` (the parent) validates the arguments, then runs the milestone in a child process under
timelog.run_timed, which prints and logs the /usr/bin/time block. The child (`python -m pyconv.milestones`)
prints what the course printed:
    Loading fashion-mnist data... done
    Loading model... done
    New Inference
    Op Time: <seconds>            (one per conv layer, that layer's convolution only)
    Correctness: <acc> Model: <name>
Milestone 1 runs the network in PyTorch (framework.py), 2 on the CPU (engine.py), 3/4/final on the GPU
(gpu_engine.py)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from ..core import data
from ..core.checks import as_int
from ..core.errors import PyconvError
from ..core.model import DEFAULT_MODEL, Model, load_model
from . import timelog

MILESTONES = ("1", "2", "3", "4", "final")
MAX_BATCH = 10000
CPU_IMPLS = ("cpu-naive", "cpu-fast", "numpy")


def check_batch(batch) -> int:
    """1..10000, an integer (a string like '100' is accepted; '1.5', '0', '-3', 'abc' are not)."""
    try:
        n = as_int(batch)
    except (TypeError, ValueError):
        raise PyconvError(f"batch must be an integer between 1 and {MAX_BATCH}, got {batch!r}") from None
    if not 1 <= n <= MAX_BATCH:
        raise PyconvError(f"batch must be an integer between 1 and {MAX_BATCH}, got {n}")
    return n


def check_milestone(m) -> str:
    m = str(m).strip().lower()
    if m not in MILESTONES:
        raise PyconvError(f"unknown milestone '{m}' (known: {', '.join(MILESTONES)})")
    return m


def print_result(op_times: list[float], accuracy: float, model_name: str) -> None:
    for t in op_times:
        print(f"Op Time: {t:.6f}")
    print(f"Correctness: {accuracy:.4g} Model: {model_name}")


def accuracy(pred: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(np.asarray(pred) == np.asarray(labels)))


def load_inputs(model: Model, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """The first `batch` test images at the model's input size, uint8 [N][1][S][S], and their labels."""
    return data.load_test(model.input_size, batch)


def _child(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m pyconv.milestones")
    p.add_argument("--m", required=True)
    p.add_argument("--batch", required=True)
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--impl", default=None)
    p.add_argument("--device", default="both")
    p.add_argument("--gpus", default="1")
    a = p.parse_args(argv)
    from . import profile

    trace = profile.child_start()  # only with PYCONV_PROFILE set (`invoke profile`): CUPTI-trace this process
    try:
        m, batch = check_milestone(a.m), check_batch(a.batch)
        print("Loading fashion-mnist data...", end=" ", flush=True)
        model = load_model(a.model)
        x, labels = load_inputs(model, batch)
        print("done", flush=True)
        print("Loading model...", end=" ", flush=True)
        print("done", flush=True)
        if m == "1":
            from ..engines.framework import run_m1

            run_m1(model, x, labels, device=a.device)
        elif m == "2":
            from ..engines.cpu import forward_cpu

            impl = a.impl or "cpu-fast"
            if impl not in CPU_IMPLS:
                raise PyconvError(f"milestone 2 runs on the CPU: --impl must be one of {', '.join(CPU_IMPLS)}")
            print("New Inference", flush=True)
            res = forward_cpu(model, x.astype(np.float32), impl)
            print_result(res.op_times, accuracy(res.labels, labels), model.name)
        else:
            from ..engines.gpu import run_gpu_milestone

            run_gpu_milestone(m, model, x, labels, impl=a.impl, gpus=a.gpus)
    except PyconvError as e:
        print(f"error: {e}", flush=True)
        return 2
    finally:
        # Flush the trace while the CUDA context and the modules are alive, not from an exit handler.
        profile.child_finish(trace)
    return 0


def run(m, batch=MAX_BATCH, model: str = DEFAULT_MODEL, impl: str | None = None, posix: bool = False,
        device: str = "both", gpus: str = "1", env: dict | None = None) -> int:
    """Validate, then run the milestone in a child under the /usr/bin/time-style logger. Returns the exit code."""
    m = check_milestone(m)
    batch = check_batch(batch)
    load_model(model)  # fail here, in one line, before starting a child
    if m == "2" and impl is not None and impl not in CPU_IMPLS:
        raise PyconvError(f"milestone 2 runs on the CPU: --impl must be one of {', '.join(CPU_IMPLS)}")
    if device not in ("cpu", "gpu", "both"):
        raise PyconvError(f"--device must be cpu, gpu or both, got '{device}'")
    data.require_data()
    if m in ("3", "4", "final"):
        from ..engines.gpu import gpu_module

        gpu_module()  # no GPU or no CUDA build: one line here rather than a failing child
        if impl is not None:
            from ..engines.gpu import check_impl

            check_impl(impl)
    if m == "1":
        return _run_m1(batch, model, device, posix, env)
    argv = [sys.executable, "-m", "pyconv.tools.milestones", "--m", m, "--batch", str(batch), "--model", model,
            "--device", device, "--gpus", str(gpus)]
    if impl:
        argv += ["--impl", impl]
    tag = f"m{m}-{Path(model).stem}-b{batch}" + (f"-{impl}" if impl else "")
    if m != "2":
        # CUDA loads kernels lazily by default: the first launch of each would load its module inside the
        # timed convolution. Load them when the context is created instead (the user's own choice wins).
        env = {**os.environ, "CUDA_MODULE_LOADING": os.environ.get("CUDA_MODULE_LOADING", "EAGER"), **(env or {})}
    code, log, _ = timelog.run_timed(argv, tag=tag, posix=posix, env=env)
    print(f"log: {log}")
    return code


def _run_m1(batch: int, model: str, device: str, posix: bool, env: dict | None) -> int:
    """Milestone 1: one timed child per device, so m1.1 (CPU) and m1.2 (GPU) each get their own time block
    and log. Without a visible CUDA GPU, m1.2 is skipped in one line (an error when only it was asked)."""
    from ..engines.framework import cuda_available, require_torch

    require_torch()  # fail here, naming the extra, before starting a child
    code = 0
    for sub, dev in (("m1.1", "cpu"), ("m1.2", "gpu")):
        if device not in (dev, "both"):
            continue
        if dev == "gpu" and not cuda_available():
            if device == "gpu":
                raise PyconvError("m1.2 needs a CUDA GPU: PyTorch sees none "
                                  "(torch.cuda.is_available() is False)")
            print(f"{sub}: no CUDA GPU visible; skipped", flush=True)
            continue
        argv = [sys.executable, "-m", "pyconv.tools.milestones", "--m", "1", "--batch", str(batch),
                "--model", model, "--device", dev]
        sub_code, log, _ = timelog.run_timed(argv, tag=f"{sub}-{Path(model).stem}-b{batch}", posix=posix,
                                             env=env)
        print(f"log: {log}")
        code = code or sub_code
    return code


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
