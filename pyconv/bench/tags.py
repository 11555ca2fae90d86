"""What a bench JSON is tagged with (commit, date, host CPU, driver, CUDA versions) and where it is written."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from pathlib import Path

from ..core import paths
from ..core.errors import PyconvError
from ..core.fileio import atomic_path
from .schema import BenchResult


def git_commit() -> str:
    """$PYCONV_COMMIT when set (a copy of the tree on another machine: whoever made the copy knows its commit
    better than a stale .git beside it), else HEAD's hash with '-dirty' when tracked files differ from it, else
    'unknown'."""
    if os.environ.get("PYCONV_COMMIT"):
        return os.environ["PYCONV_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=paths.ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=paths.ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def load_average() -> float | None:
    """The 1-minute load average: CPU timings taken while it exceeds the core count are shared with other work."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def host_cpu() -> dict:
    """The CPU's model name (from /proc/cpuinfo) and the cores this process may use."""
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return {"model": name, "cores": cores}


def nvidia_driver() -> str | None:
    """The kernel driver's version (e.g. '580.65.06'), or None where there is no NVIDIA driver."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        text = ""
    for word in text.split():
        parts = word.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts):
            return word
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, check=True, timeout=30).stdout.split()
        return out[0] if out else None
    except (OSError, subprocess.SubprocessError):
        return None


def cuda_version(v: int) -> str:
    """12080 -> '12.8'."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def default_out(result: dict) -> Path:
    """results/runs/bench-<gpu-slug>-<date>.json (with -sweep after the date for a run with --sweep), or
    results/runs/bench-cpu-<cpu-slug>-<date>.json without a GPU: a new run stays out of results/ (and out of git)
    until `invoke promote` moves it there. When that name is taken in runs/ or in results/ (an earlier run the same
    day), the first name free in both with -2, -3, ... before .json."""
    day = result["date"][:10]
    if result.get("gpu"):
        sweep = "-sweep" if "sweep" in result.get("parts", []) else ""
        name = f"bench-{paths.slug(result['gpu']['name'])}-{day}{sweep}.json"
    else:
        name = f"bench-cpu-{paths.slug(result['host_cpu']['model'])}-{day}.json"
    return first_free(paths.RESULTS / paths.RUNS_DIR / name, also=paths.RESULTS)


def first_free(path: Path, also: Path | None = None) -> Path:
    """`path`, or the first of path-2, path-3 ... whose name exists neither beside it nor in `also`."""
    n = 2
    found = path
    while found.exists() or (also is not None and (also / found.name).exists()):
        found = path.with_name(f"{path.stem}-{n}{path.suffix}")
        n += 1
    return found


def refuse_existing(dest: str | os.PathLike, what: str = "--out") -> None:
    """A bench file is never overwritten: a run that was interrupted, or measured a subset (--variants, --model),
    must not replace a full one. One line naming the file."""
    if Path(dest).exists():
        raise PyconvError(f"{what} {dest} exists: a bench file is never overwritten (a partial run must not replace "
                          "a full one); name a new file")


def write_json(result: dict, dest: str | os.PathLike) -> Path:
    """Atomically: the file appears whole or not at all; only a result that reads back as the schema says; never
    over an existing file (refuse_existing)."""
    BenchResult.parse(result, "the result to write")
    dest = Path(dest)
    refuse_existing(dest, "bench file")
    text = json.dumps(result, indent=1) + "\n"
    with atomic_path(dest) as tmp:
        tmp.write_text(text)
    return dest
