"""GPU op times measured by NVBench (the `cuda-bench` wheel's Python API), the way the field measures kernels:
cold samples (L2 flushed before each, a blocking kernel holding the launches back so that launch overhead is not
timed) beside batched warm ones, the noise (relative standard deviation) of every row, samples taken until the
noise settles (NVBench's "stdrel" stopping criterion), SM clocks recorded per sample and samples taken while the
GPU throttled dropped (NVBench discards the trial and waits for the clock to recover).

NVBench's Python API runs its registered benchmarks once per process, so the layer bench first collects every
measurement as a Job (a name and a setup function that stages the inputs and returns a launcher taking a raw
cudaStream_t), then `run_jobs` registers them all, runs them in one go and reads the results back from NVBench's
JSON and its per-sample binary files (--jsonbin): the median, min and p90 below are of the cold samples.

Where `cuda-bench` is not installed (or cannot load: no driver), `available()` says why and the bench falls back to
CUDA events (pyconv.bench.timing); each bench file records which method measured it."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core import optional
from ..core.errors import PyconvError

# NVBench's defaults (the "stdrel" criterion stops at 0.5 % noise, within 0.5 s of samples; a state gives up after
# 15 s) would take ~1 minute for the ~40 rows of a two-layer run; these keep it under that while still stopping
# on the noise. Settings recorded in the bench file (settings.timing).
MAX_NOISE_PCT = 0.5
MIN_TIME_S = 0.1
TIMEOUT_S = 3.0
THROTTLE_THRESHOLD = 0.75  # a sample whose SM clock falls below 75 % of the default clock counts as throttled


@dataclass
class Job:
    """One measurement: `setup(stream_address)` stages the inputs (NVBench's stream given, for work that must warm
    up on it) and returns launch(stream_address), or raises to record an error; `done(stats)` receives the summary
    (a dict as pyconv.bench.schema.Stats reads it)."""

    name: str
    setup: Callable[[int], Callable[[int], None]]
    done: Callable[[dict], None]
    # The launch waits for the device itself (a student's variant: the course's glue synchronises around the
    # student's forward()). Behind NVBench's blocking kernel that wait would never end: such a launch runs with
    # exec(sync=True), no blocking kernel and no batched warm samples (its warm_ms stays empty).
    sync: bool = False


def _module():
    import cuda.bench as bench

    bench.register  # noqa: B018 (touching it loads the CUDA extension: fails here without a driver)
    bench.Benchmark  # noqa: B018
    return bench


_ran = False  # NVBench's Python API runs its benchmarks once per process; a second run falls back to CUDA events


def available() -> tuple[bool, str]:
    """(True, version) when NVBench can run in this process, else (False, why not)."""
    if _ran:
        return False, "NVBench already ran in this process (its Python API runs once per process)"
    return loadable()


def loadable() -> tuple[bool, str]:
    """(True, version) when cuda-bench imports and starts here (a fresh process can run it), else (False, why)."""
    try:
        bench = _module()
    except ModuleNotFoundError as e:
        if e.name in ("cuda", "cuda.bench"):
            return False, f"cuda-bench is not installed ({optional.install_hint('cuda.bench')})"
        return False, f"cuda-bench not loadable ({e})"
    except ImportError as e:
        return False, f"cuda-bench not loadable ({e})"
    except Exception as e:  # the extension's cuInit fails without a driver: a RuntimeError of its own
        return False, f"cuda-bench cannot start ({type(e).__name__}: {e})"
    return True, str(getattr(bench, "__version__", "?"))


def settings() -> dict:
    return {"method": "nvbench", "stopping_criterion": "stdrel", "max_noise_pct": MAX_NOISE_PCT,
            "min_time_s": MIN_TIME_S, "timeout_s": TIMEOUT_S, "throttle_threshold": THROTTLE_THRESHOLD,
            "cold": "L2 flushed before each sample, launches held behind a blocking kernel",
            "warm": "NVBench batch: back-to-back launches, mean per launch"}


# The summaries that name --jsonbin's per-sample files (NVBench's JSON printer; its own scripts read these tags).
SAMPLE_TIMES = "nv/json/bin:nv/cold/sample_times"
SAMPLE_FREQS = "nv/json/freqs-bin:nv/cold/sample_freqs"


def _summaries(state: dict) -> dict[str, dict]:
    out = {}
    for s in state.get("summaries") or []:
        out[s["tag"]] = {d["name"]: d.get("value") for d in s.get("data", [])}
    return out


def _value(summ: dict, tag: str, cast=float):
    v = summ.get(tag, {}).get("value")
    return None if v is None else cast(v)


def _samples(summ: dict, tag: str, folder: Path) -> np.ndarray | None:
    """A --jsonbin sample file (float32 per sample) named by the summary `tag`; None when absent."""
    entry = summ.get(tag)
    if not entry or not entry.get("filename"):
        return None
    path = Path(entry["filename"])
    if not path.is_absolute() and not path.exists():
        path = folder / path
    try:
        return np.fromfile(path, dtype="<f4")
    except OSError:
        return None


def state_stats(state: dict, folder: Path) -> dict:
    """One NVBench state as a Stats dict (milliseconds): median, min, p90 of the cold GPU samples (their mean
    where the samples were not written), NVBench's mean and noise, the warm (batch) mean, the mean SM clock."""
    if state.get("is_skipped"):
        return {"error": "NVBench skipped it: " + str(state.get("skip_reason") or "")}
    summ = _summaries(state)
    mean_s = _value(summ, "nv/cold/time/gpu/mean")
    if mean_s is None:
        return {"error": "NVBench recorded no cold GPU time"}
    out: dict = {"mean": mean_s * 1e3, "method": "nvbench"}
    times = _samples(summ, SAMPLE_TIMES, folder)
    if times is not None and times.size:
        ms = times.astype(np.float64) * 1e3
        out.update({"median": float(np.median(ms)), "min": float(ms.min()), "p90": float(np.percentile(ms, 90))})
    else:  # no per-sample file: the median is NVBench's mean, and the record says so
        out.update({"median": mean_s * 1e3, "min": _scaled(summ, "nv/cold/time/gpu/min"),
                    "median_is_mean": True})
    out["reps"] = _value(summ, "nv/cold/sample_size", int)
    noise = _value(summ, "nv/cold/time/gpu/stdev/relative")
    out["noise_pct"] = None if noise is None else noise * 100.0
    out["warm_ms"] = _scaled(summ, "nv/batch/time/gpu/mean")
    out["warm_reps"] = _value(summ, "nv/batch/sample_size", int)
    clock = _value(summ, "nv/cold/sm_clock_rate/mean")
    out["sm_clock_mhz"] = None if clock is None else clock / 1e6
    freqs = _samples(summ, SAMPLE_FREQS, folder)
    if freqs is not None and freqs.size:
        out["sm_clock_mhz_min"] = float(freqs.min()) / 1e6
    return out


def _scaled(summ: dict, tag: str) -> float | None:
    v = _value(summ, tag)
    return None if v is None else v * 1e3


def parse_results(doc: dict, folder: Path) -> dict[str, dict]:
    """NVBench's JSON (--json) as {benchmark name: Stats dict} (the first state of each benchmark)."""
    out = {}
    for b in doc.get("benchmarks", []):
        states = b.get("states") or []
        out[b["name"]] = state_stats(states[0], folder) if states else {"error": "NVBench ran no state"}
    return out


def run_jobs(jobs: list[Job], echo: Callable[[str], None] = print) -> None:
    """Register every job with NVBench, run them all (one NVBench run per process), hand each its summary."""
    global _ran
    if not jobs:
        return
    bench = _module()
    _ran = True
    errors: dict[str, str] = {}

    def make(job: Job):
        def fn(state):
            try:
                launch = job.setup(state.get_stream().addressof())
            except (ValueError, RuntimeError, MemoryError) as e:
                errors[job.name] = f"{type(e).__name__}: {e}"
                state.skip(errors[job.name])
                return
            state.exec(lambda launch_: launch(launch_.get_stream().addressof()), sync=job.sync)

        fn.__name__ = job.name
        return fn

    for job in jobs:
        b = bench.register(make(job))
        b.set_stopping_criterion("stdrel")
        b.set_criterion_param_float64("max-noise", MAX_NOISE_PCT / 100.0)
        b.set_criterion_param_float64("min-time", MIN_TIME_S)
        b.set_timeout(TIMEOUT_S)
        b.set_throttle_threshold(THROTTLE_THRESHOLD)
    with tempfile.TemporaryDirectory(prefix="pyconv-nvbench-") as tmp:
        out = Path(tmp) / "nvbench.json"
        echo(f"NVBench: {len(jobs)} measurements")
        try:
            bench.run_all_benchmarks(["pyconv-bench", "--devices", "0", "--quiet", "--jsonbin", str(out)])
        except Exception as e:  # NVBenchRuntimeError, or a Python error raised in a launcher
            raise PyconvError(f"NVBench failed: {type(e).__name__}: {e}") from None
        try:
            results = parse_results(json.loads(out.read_text()), Path(tmp))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise PyconvError(f"cannot read NVBench's results: {e}") from None
    for job in jobs:
        if job.name in errors:
            job.done({"error": errors[job.name]})
        else:
            job.done(results.get(job.name, {"error": "NVBench did not run it"}))
