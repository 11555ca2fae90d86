"""`invoke profile`: nvprof's summary for a milestone, on GPUs nvprof no longer runs on (compute capability 8.0+).

The trace is CUPTI's activity API, collected by pyconv._cupti inside the milestone's own child process (CUPTI
traces the process it is loaded in):
    parent  run_profile()  -> milestones.run(..., env={PYCONV_PROFILE: <tmp json>})
    child   child_start()  starts the trace before inference; at exit it stops, flushes, groups the records
                           and writes the groups to <tmp json>
    parent  reads the groups, prints the summary, writes logs/profile-m<m>-<model>-b<batch>-<stamp>.log and
            the .json beside it.
The summary is nvprof's layout:
    ==1234== Profiling result:
                Type  Time(%)      Time     Calls       Avg       Min       Max  Name
     GPU activities:   60.99%  1.6306ms         2  815.32us  792.64us  837.96us  [CUDA memcpy HtoD]
                       33.22%  888.27us         1  888.27us  888.27us  888.27us  [CUDA memcpy DtoH]
          API calls:   97.85%  210.18ms         3  70.061ms  4.7620us  210.17ms  cudaMalloc
with one addition: a marker column in front (each line minus its first character is nvprof's), `*` on the rows
of each block that together first make up more than 90% of that block's time -- the course's M1/M3 question.

Where CUPTI cannot trace (no GPU, module not built, another profiler attached) the child prints one line,
`profile: CUPTI unavailable (<reason>); running unprofiled`, and the milestone runs as usual."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from ..core import paths
from ..core.errors import PyconvError
from ..core.fileio import write_text_atomic
from .profile_hook import (  # noqa: F401 (the child's side, re-exported: profile.child_start etc.)
    API_BLOCK,
    API_KINDS,
    BLOCKS,
    ENV_VAR,
    FORMAT_VERSION,
    GPU_BLOCK,
    GPU_KINDS,
    Row,
    _ChildTrace,
    block_of,
    child_finish,
    child_start,
    group,
)

MARK_SHARE = 90.0  # percent
LEGEND = f"* rows that together make up more than {MARK_SHARE:g}% of their block's time"


# ---------------------------------------------------------------------------------------------- summary (pure)
def rank(rows: list[Row]) -> list[Row]:
    """Order as nvprof does (GPU activities, then API calls; each by total time, largest first), set Time(%)
    within the block and mark the top rows whose cumulative share first exceeds MARK_SHARE."""
    out: list[Row] = []
    for block in BLOCKS:
        rs = sorted((r for r in rows if r.block == block), key=lambda r: (-r.total_ns, r.name))
        total = sum(r.total_ns for r in rs)
        cumulative = 0
        for r in rs:
            r.percent = 100.0 * r.total_ns / total if total else 0.0
            # Marked while the rows above it have not yet passed the line: the row that crosses it is marked.
            r.over90 = total > 0 and 100.0 * cumulative <= MARK_SHARE * total
            cumulative += r.total_ns
        out += rs
    return out


def summarize(records) -> list[Row]:
    return rank(group(records))


def _significant(x: float, digits: int) -> str:
    r = float(f"{x:.{digits}g}")
    whole = len(str(int(r))) if r >= 1 else 1
    return f"{r:.{max(digits - whole, 0)}f}"


def format_time(ns: float) -> str:
    """nvprof's time: 5 significant digits in the unit that keeps the value in [1, 1000) -- seconds with 6, whole
    nanoseconds with none -- e.g. 4.67456s, 97.765ms, 815.32us, 4.7620us, 992ns, 123.45ns (what nvprof prints)."""
    if ns < 0:
        raise ValueError(f"negative time {ns}")
    v = float(f"{ns:.5g}")  # the unit is chosen after rounding: 999.996us is 1.0000ms, not 1000.0us
    if v >= 1e9:
        return _significant(ns / 1e9, 6) + "s"
    if v >= 1e6:
        return _significant(ns / 1e6, 5) + "ms"
    if v >= 1e3:
        return _significant(ns / 1e3, 5) + "us"
    if ns == int(ns):
        return f"{int(ns)}ns"
    return _significant(ns, 5) + "ns"


def format_summary(rows: list[Row], pid: int | None = None, command: str | None = None) -> str:
    """The nvprof summary of ranked rows (rank() order) behind a one-character marker column (`*`: the rows
    over 90%), and a legend line at the end."""
    prefix = f"=={pid}== " if pid is not None else ""
    lines = []
    if command:
        lines.append(f"{prefix}Profiling application: {command}")
    lines.append(f"{prefix}Profiling result:")
    lines.append(f" {'Type':>16s}  Time(%){'Time':>10s}{'Calls':>10s}{'Avg':>10s}{'Min':>10s}{'Max':>10s}  Name")
    previous = None
    for r in rows:
        label = f"{r.block}:" if r.block != previous else ""
        previous = r.block
        mark = "*" if r.over90 else " "
        lines.append(f"{mark}{label:>16s}{r.percent:8.2f}%{format_time(r.total_ns):>10s}{r.calls:>10d}"
                     f"{format_time(r.avg_ns):>10s}{format_time(r.min_ns):>10s}{format_time(r.max_ns):>10s}"
                     f"  {r.name}")
    if not rows:
        lines.append("No kernels, memory operations or CUDA API calls were profiled.")
    lines.append(LEGEND)
    return "\n".join(lines) + "\n"


def over90(rows: list[Row], block: str) -> list[str]:
    """The names of the marked rows of one block (the course's "more than 90% of the time" list)."""
    return [r.name for r in rows if r.block == block and r.over90]


# ---------------------------------------------------------------------------------------------- parent side
def profile_log_path(m: str, model: str, batch: int) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return paths.LOGS / f"profile-m{m}-{model}-b{batch}-{stamp}-{os.getpid()}.log"


def read_child_profile(path: Path) -> dict:
    doc = json.loads(Path(path).read_text())
    if doc.get("format") != FORMAT_VERSION:
        raise ValueError(f"{path}: profile format {doc.get('format')!r}, expected {FORMAT_VERSION}")
    doc["rows"] = rank([Row(**r) for r in doc["rows"]])
    return doc


def run_profile(m, batch=None, model: str | None = None, impl: str | None = None, echo=sys.stdout,
                edition: str | None = None, **milestone_kwargs) -> int:
    """Run a milestone under the CUPTI trace, print the nvprof summary, write the log and its JSON.
    edition: m in that edition's numbering, its network and batch by default (pyconv.core.editions).
    Returns the milestone's exit code."""
    from ..core import editions
    from . import milestones

    chosen = editions.resolve(edition, m, milestone_kwargs.get("device"), model, batch)
    m, model, batch = chosen.milestone, chosen.model, chosen.batch
    m = milestones.check_milestone(m)
    if m == "2":
        raise PyconvError("milestone 2 runs on the CPU: there is nothing for CUPTI to trace "
                          "(profile 1, 3, 4 or final)")
    batch = milestones.check_batch(batch)
    with tempfile.TemporaryDirectory(prefix="pyconv-profile-") as tmp:
        dest = Path(tmp) / "trace.json"
        env = dict(os.environ, **{ENV_VAR: str(dest)})
        if m == "1":
            milestone_kwargs.setdefault("device", "gpu")  # m1.2 is the part on the GPU: the one to trace
        if edition:  # the child reads the label in the edition's numbering and prints as that edition did
            milestone_kwargs = {**milestone_kwargs, "edition": edition}
        code = milestones.run(chosen.label if edition else m, batch=batch, model=model, impl=impl, env=env,
                              **milestone_kwargs)
        if not dest.exists():
            return code  # the child said why (CUPTI unavailable, or the run failed before its end)
        doc = read_child_profile(dest)
    rows = doc["rows"]
    text = format_summary(rows, pid=doc["pid"], command=doc["command"])
    if doc["dropped_records"]:
        text += f"warning: CUPTI dropped {doc['dropped_records']} records; the figures above undercount\n"
    echo.write(text)
    log = profile_log_path(m, model, batch)
    write_text_atomic(log, text)
    summary = {"milestone": m, "model": model, "batch": batch, "impl": impl, "exit_code": code,
               "pid": doc["pid"], "command": doc["command"], "cupti": doc["cupti"], "records": doc["records"],
               "dropped_records": doc["dropped_records"], "mark_share_percent": MARK_SHARE,
               "over90": {b: over90(rows, b) for b in BLOCKS},
               "rows": [dict(asdict(r), avg_ns=r.avg_ns) for r in rows]}
    write_text_atomic(log.with_suffix(".json"), json.dumps(summary, indent=1) + "\n")
    echo.write(f"profile: {log}\n")
    echo.flush()
    return code
