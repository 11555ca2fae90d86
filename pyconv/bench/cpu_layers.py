"""Every CPU variant on one conv layer against PyTorch's CPU conv2d (torch.set_num_threads = the OpenMP thread
count): checked (pyconv.verify), then time.perf_counter around the call, median of `reps` after one warm-up."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from .. import native, verify
from ..variants import Variant
from .roofline import conv_flops
from .sites import _dims
from .timing import stats

# A variant whose descriptor says single_thread (the course's seven loops) is hundreds of times slower than the
# others: the bench gives it a smaller batch when --batch is not given, and records its one thread.
SINGLE_THREAD_BATCH = 1000


def batch_rule(batch: int, single_thread_batch: int) -> Callable[[Variant], int]:
    return lambda v: single_thread_batch if v.single_thread else batch


def torch_cpu():
    try:
        import torch
    except ImportError:
        return None
    return torch


def bench_cpu_layer(site: dict, variants: list[Variant], batch_for: Callable[[Variant], int],
                    rng: np.random.Generator, reps: int, torch=None) -> list[dict]:
    """Each CPU variant on one layer (batch_for(variant) images), then PyTorch CPU conv2d at the full batch."""
    _cpu = native.cpu()
    _, C, H, W, M, K = _dims(site)
    threads = int(_cpu.max_threads())
    rows = []
    for v in variants:
        name = v.name
        B = batch_for(v)
        x = verify.random_nonzero(rng, (B, C, H, W))
        k = verify.random_nonzero(rng, (M, C, K, K))
        out = np.full((B, M, H - K + 1, W - K + 1), np.nan, np.float32)  # poisoned: unwritten outputs fail the check
        row = {"layer": site["layer"], "model": site["model"], "C": C, "H": H, "W": W, "M": M, "K": K, "B": B,
               "variant": name, "threads": 1 if v.single_thread else threads,
               "flops": conv_flops(B, C, H, W, M, K)}
        rows.append(row)
        try:
            _cpu.conv(name, x, k, out)  # the checked run doubles as the warm-up
        except (ValueError, RuntimeError, MemoryError) as e:
            # A variant that refuses or fails (a student's slot still holding the course's skeleton stops at its
            # CHECK) is recorded as such; it must not end the benchmark of the others.
            row["skipped"] = f"error: {type(e).__name__}: {e}"
            continue
        row["check"] = verify.check_output(out, x, k, v.epilogue, *verify.tolerance(v.rtol, C, K))
        if not row["check"]["passed"]:
            row["skipped"] = "FAILED the correctness check: not timed"
            continue
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            _cpu.conv(name, x, k, out)
            times.append(time.perf_counter() - t0)
        row["s"] = stats(times)
        row["gflops"] = row["flops"] / row["s"]["median"] / 1e9
    if torch is not None:
        B = site["B"]
        x = torch.from_numpy(verify.random_nonzero(rng, (B, C, H, W)))
        k = torch.from_numpy(verify.random_nonzero(rng, (M, C, K, K)))
        old = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            with torch.inference_mode():
                torch.nn.functional.conv2d(x, k)  # warm-up: oneDNN picks and builds its kernel on the first call
                times = []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    torch.nn.functional.conv2d(x, k)
                    times.append(time.perf_counter() - t0)
        finally:
            torch.set_num_threads(old)
        s = stats(times)
        row = {"layer": site["layer"], "model": site["model"], "C": C, "H": H, "W": W, "M": M, "K": K, "B": B,
               "variant": f"pytorch {torch.__version__}", "threads": threads, "s": s,
               "flops": conv_flops(B, C, H, W, M, K)}
        row["gflops"] = row["flops"] / s["median"] / 1e9
        rows.append(row)
        for r in rows:
            if "s" in r and r is not row and r["B"] == B:
                r["x_torch"] = s["median"] / r["s"]["median"]
    return rows
