"""The profiler's hook in the milestone child (see pyconv.tools.profile for the whole): when PYCONV_PROFILE names
a file, `child_start` starts the CUPTI trace (pyconv._cupti) before inference and `child_finish` stops it, groups
the records by (block, name) and writes the groups there. It imports nothing of the milestones: they import it."""

from __future__ import annotations

import atexit
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import native
from ..core.errors import PyconvError
from ..core.fileio import atomic_path

ENV_VAR = "PYCONV_PROFILE"
FORMAT_VERSION = 1
GPU_BLOCK = "GPU activities"
API_BLOCK = "API calls"
BLOCKS = (GPU_BLOCK, API_BLOCK)
GPU_KINDS = ("kernel", "memcpy", "memset")
API_KINDS = ("runtime", "driver")



# ---------------------------------------------------------------------------------------------- records
@dataclass
class Row:
    block: str
    name: str
    calls: int
    total_ns: int
    min_ns: int
    max_ns: int
    percent: float = 0.0  # of the block's total
    over90: bool = False  # one of the top rows that together first exceed the marked share of the block (profile)

    @property
    def avg_ns(self) -> float:
        return self.total_ns / self.calls


def block_of(kind: str) -> str:
    if kind in GPU_KINDS:
        return GPU_BLOCK
    if kind in API_KINDS:
        return API_BLOCK
    raise ValueError(f"unknown activity kind {kind!r}")


def group(records) -> list[Row]:
    """Group trace records by (block, name): calls, total, min, max. Unordered, percentages not yet set."""
    rows: dict[tuple[str, str], Row] = {}
    for r in records:
        d = int(r["end_ns"]) - int(r["start_ns"])
        if d < 0:
            raise ValueError(f"record ends before it starts: {r!r}")
        key = (block_of(r["kind"]), r["name"])
        row = rows.get(key)
        if row is None:
            rows[key] = Row(key[0], key[1], 1, d, d, d)
        else:
            row.calls += 1
            row.total_ns += d
            row.min_ns = min(row.min_ns, d)
            row.max_ns = max(row.max_ns, d)
    return list(rows.values())


# ---------------------------------------------------------------------------------------------- child side
class _ChildTrace:
    def __init__(self, module, dest: Path):
        self.module, self.dest = module, dest
        self.finished = False


def _unavailable(reason: str) -> None:
    print(f"profile: CUPTI unavailable ({' '.join(str(reason).split())}); running unprofiled", flush=True)


def child_start(env=os.environ):
    """In the milestone child: when PYCONV_PROFILE names a file, start the CUPTI trace and arrange for the
    grouped records to be written there at exit. Returns the trace, or None when not asked or unavailable
    (then one line says why and the milestone runs unprofiled)."""
    dest = env.get(ENV_VAR)
    if not dest:
        return None
    try:
        _cupti = native.cupti()
    except PyconvError as e:
        _unavailable(str(e))
        return None
    try:
        _cupti.start()
    except _cupti.CuptiError as e:
        _unavailable(e)
        return None
    trace = _ChildTrace(_cupti, Path(dest))
    atexit.register(child_finish, trace)
    return trace


def child_finish(trace) -> None:
    """Stop the trace, group the records and write them (atomically) where PYCONV_PROFILE said. Idempotent."""
    if trace is None or trace.finished:
        return
    trace.finished = True
    m = trace.module
    try:
        m.stop()
    except m.CuptiError as e:
        print(f"profile: CUPTI trace failed ({e}); no profile written", flush=True)
        return
    records = m.records()
    doc = {"format": FORMAT_VERSION, "pid": os.getpid(), "command": " ".join(sys.argv),
           "cupti": dict(m.versions()), "records": len(records), "dropped_records": int(m.dropped_records()),
           "rows": [asdict(r) for r in group(records)]}
    with atomic_path(trace.dest) as tmp:
        tmp.write_text(json.dumps(doc))
