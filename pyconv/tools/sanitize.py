"""`invoke sanitize`: every GPU kernel under compute-sanitizer, at shapes that exercise the edges.

For each tool (memcheck, racecheck, initcheck, synccheck) and each registry variant, a child process
    compute-sanitizer --tool <tool> --error-exitcode 86 ... python -m pyconv.tools.sanitize --child --variant <name>
runs the variant through pyconv._gpu.conv on EDGE_SHAPES (batch 1, odd and non-square sizes, K=1, K=H=W, C>1,
sizes that are a multiple of no tile) and checks every result against the numpy reference (pyconv.verify), so a
kernel that is clean but wrong fails too. A tunable variant runs every one of its tile configurations, each a
kernel of its own. Then one whole milestone run (python -m pyconv.tools.milestones --m 3 --batch 64) under
memcheck covers the layer kernels, cuBLAS and the network's buffers.

The parent reads each child's "ERROR SUMMARY: N errors", prints a table (target x tool: errors), writes
it as JSON (and every child's full output as a .log beside it) under logs/, atomically, and fails when any
cell is not a clean 0: sanitizer errors, a wrong result, a crash or a timeout. Without a GPU or without
compute-sanitizer it fails in one line: a sanitizer run that checked nothing must not look like a pass."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .. import native, verify
from .. import variants as variant_registry
from ..core import paths
from ..core.errors import PyconvError
from ..core.fileio import check_writable, write_text_atomic

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
# Exit status compute-sanitizer gives the child when it found errors: distinct from the child's own failures
# (1: Python error, 3: a result off the reference) so the table can say which happened.
SANITIZER_EXIT = 86
WRONG_RESULT_EXIT = 3
TOOL_OPTIONS = {
    "memcheck": [],
    # 'all' prints both the per-access hazards and racecheck's analysis of them: the analysis alone can fold
    # a hazard into a summary line that names no source location.
    "racecheck": ["--racecheck-report", "all"],
    # Unused-memory tracking stays off (its default; in 2025.3 the option is a bare flag): an allocation a
    # kernel never touches is not an error of ours, and every output is written by the poison memset anyway.
    "initcheck": [],
    "synccheck": [],
}
# (B, C, H, W, M, K). Small enough for racecheck (which serialises shared-memory accesses), chosen for the
# edges: tile sizes in the ladder are multiples of 4, 8 and 16, so 1, 5, 7, 9, 11, 13, 17, 19 and 33 are the
# ragged cases; K = H = W gives a single output pixel; K = 1 a pure channel mix.
EDGE_SHAPES = (
    (1, 1, 1, 1, 1, 1),  # the smallest convolution there is
    (1, 1, 5, 5, 1, 5),  # K = H = W: one output pixel
    (1, 1, 7, 9, 3, 1),  # K = 1, odd, non-square
    (2, 3, 13, 11, 5, 3),  # C > 1, odd sizes
    (3, 2, 17, 19, 7, 5),  # no dimension a multiple of any tile
    (1, 5, 9, 9, 17, 7),  # M one past a 16-wide tile, K = 7
    (2, 4, 8, 8, 33, 8),  # K = H = W with C > 1 and M two tiles plus one
    (1, 6, 22, 22, 16, 5),  # the course's second layer, batch 1
    (2, 1, 48, 48, 6, 5),  # the course's first layer
)
MILESTONE_TOOL = "memcheck"
DEFAULT_BATCH = 64
SEED = 408

_SUMMARY_RE = re.compile(r"^=+ ERROR SUMMARY: (\d+) errors?\b", re.M)
_RACE_RE = re.compile(r"^=+ RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?\)",
                      re.M)
# A report's headline is the prefix followed directly by text; its details are indented further.
_HEADLINE_RE = re.compile(r"^=+ (?! )(.+?)\s*$", re.M)
_NOT_A_FINDING = re.compile(r"^(COMPUTE-SANITIZER|ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY)")


# --------------------------------------------------------------------------------------------- parsing (pure)
def error_count(text: str) -> int | None:
    """Errors compute-sanitizer reported, summed over every "ERROR SUMMARY" line (one per process it watched);
    racecheck prints "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)" instead (seen with
    compute-sanitizer 2025.3), so its E count where no ERROR SUMMARY is printed. None when there is neither
    (the sanitizer itself did not finish)."""
    counts = [int(n) for n in _SUMMARY_RE.findall(text)]
    if counts:
        return sum(counts)
    races = [int(e) for e, _ in _RACE_RE.findall(text)]
    return sum(races) if races else None


def race_warnings(text: str) -> int:
    """Racecheck's warnings (possible hazards it does not count as errors), 0 when it printed no summary."""
    return sum(int(w) for _, w in _RACE_RE.findall(text))


def findings(text: str, limit: int = 5) -> list[str]:
    """The first distinct report headlines, e.g. 'Invalid __global__ read of size 4 bytes'."""
    out: list[str] = []
    for line in _HEADLINE_RE.findall(text):
        if _NOT_A_FINDING.match(line) or line in out:
            continue
        out.append(line)
        if len(out) == limit:
            break
    return out


@dataclass
class Result:
    tool: str
    target: str
    errors: int | None  # compute-sanitizer's ERROR SUMMARY (None: it printed none)
    exit_code: int
    seconds: float
    warnings: int = 0
    wrong_results: int = 0
    checked: int = 0  # convolutions compared with the reference
    findings: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.errors == 0 and self.exit_code == 0 and self.wrong_results == 0 and not self.note

    def cell(self) -> str:
        if self.errors is None:
            return f"failed ({self.note or f'exit {self.exit_code}'})"
        text = str(self.errors)
        if self.wrong_results:
            text += f" +{self.wrong_results} wrong"
        elif self.exit_code not in (0, SANITIZER_EXIT) or self.note:
            text += f" ({self.note or f'exit {self.exit_code}'})"
        return text


def format_table(results: list[Result], tools=TOOLS) -> str:
    """One row per target, one column per tool; '-' where that tool did not run on the target."""
    targets = list(dict.fromkeys(r.target for r in results))
    by = {(r.target, r.tool): r for r in results}
    cols = [t for t in tools if any(r.tool == t for r in results)]
    rows = [["target", *cols]]
    for target in targets:
        rows.append([target, *(by[(target, t)].cell() if (target, t) in by else "-" for t in cols)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths, strict=True))) for row in rows]
    bad = [r for r in results if not r.ok]
    total = sum(r.errors or 0 for r in results)
    lines.append(f"{len(results)} runs, {total} sanitizer errors, "
                 f"{sum(r.wrong_results for r in results)} wrong results, "
                 f"{sum(r.checked for r in results)} convolutions checked: " + ("FAILED" if bad else "clean"))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- the child
def _check_one(g, variant, shape, rng) -> str:
    """'' when the variant's result on `shape` matches the reference, else what is wrong."""
    return verify.check_variant(g.conv, variant, shape, rng).why  # the binding poisons the output (NaN)


def _child(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m pyconv.tools.sanitize --child")
    p.add_argument("--child", action="store_true")
    p.add_argument("--variant", required=True)
    a = p.parse_args(argv)
    _gpu = native.gpu(device=False)
    variant = next((v for v in variant_registry.gpu_variants() if v.name == a.variant), None)
    if variant is None:
        print(f"error: unknown GPU variant '{a.variant}'", flush=True)
        return 1
    rng = np.random.default_rng(SEED)
    configs: list[int | None] = [None]
    if variant.tunable:  # every tile configuration is a kernel of its own
        configs = list(range(len(_gpu.autotune_configs())))
    checked = wrong = 0
    for shape in EDGE_SHAPES:
        why = variant.why_unsupported(shape)
        if why:
            print(f"skip {shape}: {why}", flush=True)
            continue
        for cfg in configs:
            if cfg is not None:
                _gpu.autotune_set(*shape, cfg)
            what = _check_one(_gpu, variant, shape, rng)
            label = f"{a.variant}{'' if cfg is None else ' config ' + str(cfg)} B,C,H,W,M,K={shape}"
            checked += 1
            if what:
                wrong += 1
                print(f"WRONG {label}: {what}", flush=True)
            if cfg is not None:
                _gpu.autotune_set(*shape, -1)
    print(f"checked {checked} convolutions, {wrong} wrong", flush=True)
    if checked == 0:
        print(f"error: {a.variant} supports none of the edge shapes", flush=True)
        return 1
    return WRONG_RESULT_EXIT if wrong else 0


# ---------------------------------------------------------------------------------------------- the parent
def find_sanitizer() -> Path:
    """compute-sanitizer on PATH, in $CUDA_HOME/bin or $CUDA_PATH/bin, /usr/local/cuda/bin, or beside nvcc."""
    found = shutil.which("compute-sanitizer")
    if found:
        return Path(found)
    folders = [Path(os.environ[v]) / "bin" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    folders.append(Path("/usr/local/cuda/bin"))
    nvcc = shutil.which("nvcc")
    if nvcc:
        folders.append(Path(nvcc).resolve().parent)
    for folder in folders:
        candidate = folder / "compute-sanitizer"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise PyconvError("compute-sanitizer not found (looked on PATH, in $CUDA_HOME/bin, $CUDA_PATH/bin, "
                      "/usr/local/cuda/bin and beside nvcc): install the CUDA toolkit's sanitizer")


def parse_list(text: str | None, known: tuple[str, ...] | list[str], what: str) -> list[str]:
    """'a,b' -> ['a', 'b'], each checked against `known`; None or '' -> all of `known`."""
    if not text:
        return list(known)
    names = [n.strip() for n in str(text).split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise PyconvError(f"unknown {what} '{', '.join(unknown) or text}' (known: {', '.join(known)})")
    return names


def pick_model(model: str | None) -> str:
    """The model the milestone run uses: the one asked for, else the default, else the first available."""
    from ..core.model import DEFAULT_MODEL, available_models, load_model

    if model:
        load_model(model)  # a clear error now rather than in the child
        return model
    names = available_models()
    if DEFAULT_MODEL in names:
        return DEFAULT_MODEL
    if not names:
        raise PyconvError("no model available for the milestone run (`invoke models` lists none); "
                          "pass --m none to sanitize the kernels only")
    return names[0]


def _run(cmd: list[str], timeout: float) -> tuple[int, str, float, str]:
    start = time.monotonic()
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                           env=paths.python_env())
        return r.returncode, r.stdout, time.monotonic() - start, ""
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return -1, out, time.monotonic() - start, f"timed out after {timeout:g}s"


def sanitize_one(sanitizer: Path, tool: str, target: str, argv: list[str],
                 timeout: float) -> tuple[Result, str]:
    cmd = [str(sanitizer), "--tool", tool, "--error-exitcode", str(SANITIZER_EXIT), *TOOL_OPTIONS[tool],
           sys.executable, *argv]
    code, out, seconds, note = _run(cmd, timeout)
    checked = re.search(r"^checked (\d+) convolutions", out, re.M)
    res = Result(tool=tool, target=target, errors=error_count(out), exit_code=code, seconds=round(seconds, 2),
                 warnings=race_warnings(out), wrong_results=len(re.findall(r"^WRONG ", out, re.M)),
                 checked=int(checked.group(1)) if checked else 0, findings=findings(out), note=note)
    if not note and code not in (0, SANITIZER_EXIT) and not res.wrong_results:
        last = [ln for ln in out.splitlines() if ln.startswith("error:") or "Error" in ln]
        res.note = f"exit {code}" + (f": {last[-1].strip()}" if last else "")
    return res, " ".join(cmd) + "\n" + out


def run_sanitize(tools: str | None = None, variants: str | None = None, milestone: str | None = "3",
                 model: str | None = None, batch=DEFAULT_BATCH, timeout=600, echo=sys.stdout) -> int:
    """Run the sanitizer matrix; print the table, write logs/sanitize-<stamp>-<pid>.{json,log}. Returns 0 when
    every run is clean, 1 otherwise."""
    from . import milestones

    # Arguments first (they need no GPU), then the GPU, then the sanitizer: each failure is one line.
    tool_list = parse_list(tools, TOOLS, "sanitizer tool")
    try:
        timeout = float(timeout)
        if not timeout > 0:
            raise ValueError
    except (TypeError, ValueError):
        raise PyconvError(f"--timeout must be a positive number of seconds, got {timeout!r}") from None
    g = native.gpu(device=False)
    names = parse_list(variants, [v.name for v in variant_registry.gpu_variants()], "GPU variant")
    if not variants:  # the student's variant runs only when named (its slot may hold the skeleton)
        names = [n for n in names if not variant_registry.is_student(n)]
    run_milestone = milestone is not None and str(milestone).strip().lower() not in ("", "none", "no")
    if run_milestone:
        m = milestones.check_milestone(milestone)
        if m not in ("3", "4", "final"):
            raise PyconvError(f"--m {m}: the sanitizer runs a GPU milestone (3, 4 or final) or none")
        batch = milestones.check_batch(batch)
        model = pick_model(model)
        from ..core import data

        data.require_data()
    if not g.available():
        raise PyconvError("no CUDA GPU is visible: compute-sanitizer needs one to run the kernels")
    check_writable(paths.LOGS / f"sanitize-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.json", "log")
    sanitizer = find_sanitizer()
    version = subprocess.run([str(sanitizer), "--version"], capture_output=True, text=True).stdout.strip()
    version = version.splitlines()[-1] if version else "unknown version"
    device = g.device_info()["name"]
    echo.write(f"sanitize: {sanitizer} ({version}) on {device}\n")
    echo.flush()

    jobs = [(tool, name, ["-m", "pyconv.tools.sanitize", "--child", "--variant", name], False)
            for name in names for tool in tool_list]
    if run_milestone:
        jobs.append((MILESTONE_TOOL, f"m{m} {Path(model).stem} b{batch}",
                     ["-m", "pyconv.tools.milestones", "--m", m, "--batch", str(batch), "--model", model], True))
    results, logs = [], []
    for tool, target, argv, is_milestone in jobs:
        res, log = sanitize_one(sanitizer, tool, target, argv, timeout)
        if is_milestone and res.exit_code == 0 and not re.search(r"^Correctness: ", log, re.M):
            res.note = "the milestone printed no Correctness line"
        results.append(res)
        logs.append(f"===== {tool} / {target}: {res.cell()} in {res.seconds:.1f}s\n{log}")
        echo.write(f"  {tool:9s} {target:28s} {res.cell():>12s}  {res.seconds:6.1f}s"
                   + (f"  {res.findings[0]}" if res.findings and not res.ok else "") + "\n")
        echo.flush()

    table = format_table(results, tool_list)
    echo.write(table + "\n")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = paths.LOGS / f"sanitize-{stamp}-{os.getpid()}"
    doc = {"sanitizer": str(sanitizer), "version": version, "device": device, "tools": tool_list,
           "variants": names, "edge_shapes": [list(s) for s in EDGE_SHAPES],
           "ok": all(r.ok for r in results), "errors_total": sum(r.errors or 0 for r in results),
           "results": [dict(asdict(r), ok=r.ok) for r in results], "table": table}
    write_text_atomic(base.with_suffix(".log"), "\n".join(logs))
    write_text_atomic(base.with_suffix(".json"), json.dumps(doc, indent=1) + "\n")
    echo.write(f"sanitize: {base.with_suffix('.json')} (full output in {base.with_suffix('.log').name})\n")
    echo.flush()
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    if "--child" in sys.argv[1:]:
        sys.exit(_child(sys.argv[1:]))
    print("usage: invoke sanitize (this module runs as a child with --child)", file=sys.stderr)
    sys.exit(2)
