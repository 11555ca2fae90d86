"""How the bench times things, and how a list of times is summarised (median, min, p90)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from ..core.errors import PyconvError

GPU_REPS = 20


CPU_REPS = 5


WARMUP = 5


def stats(ms: Sequence[float]) -> dict:
    a = np.asarray(ms, dtype=np.float64)
    if a.size == 0:
        raise PyconvError("no timings to summarise")
    mean = float(a.mean())
    return {"median": float(np.median(a)), "min": float(a.min()), "p90": float(np.percentile(a, 90)),
            "reps": int(a.size), "mean": mean,
            "noise_pct": float(a.std(ddof=1) / mean * 100.0) if a.size > 1 and mean > 0 else None}


def batch_stats(ms_list: Sequence[float], batch: int) -> dict:
    s = stats(ms_list)
    s["images_per_s"] = batch / (s["median"] / 1e3)
    return s


def host_timed(fn: Callable[[], object], warmup: int, reps: int) -> tuple[list[float], object]:
    last = None
    for _ in range(warmup):
        last = fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        last = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times, last


def time_cuda_events(torch, fn: Callable[[], object], warmup: int, reps: int) -> list[float]:
    """Milliseconds of each of `reps` calls of fn (after `warmup`), CUDA events on the current stream."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        out.append(float(start.elapsed_time(stop)))
    return out
