"""One grading job: one team, one milestone, from the team's files to a verdict and a record.

The job talks to the project only through its command line, as the course's rai ran a team's build file:
    <project> build --student TEAM --build-dir SCRATCH/build
    <project> milestone --m M --impl cpu-student|gpu-student --model MODEL --batch N --record SCRATCH/runs/...
              (PYCONV_NATIVE_DIR=SCRATCH/build: the modules of that build)
where <project> is `python3 -m invoke -r ROOT` (ROOT: the checkout on the node that runs the job). Tests replace
<project> with a small stand-in script that answers the same two commands.

Steps, stopping at the first that fails: build; the team's variant against the reference at the test shapes
(pyconv.grading.shapes: the layers of the team's edition's network; the edge cases are reported, not graded); one
milestone run at each correctness batch but the last (the course's 100 and 1000); `runs` milestone runs at the last
batch (10000), the fastest by the sum of its Op Times kept (and, where the edition set targets, its performance
grade); with `sanitize`, one run of the first batch under compute-sanitizer's memcheck. Every step runs
in the team's own scratch folder under sandbox.run_step's limits. The verdict comes from what the step did:
    timeout        the step ran past its wall-clock limit (the whole session killed)
    out-of-memory  over the memory limit (killed), or the program said so (bad_alloc, MemoryError, CUDA OOM)
    crashed        ended by a signal (segfault, abort, ...), killed for too many processes or too much disk,
                   or an error exit that is not a failed check (a CHECK of the skeleton, a CUDA error)
    build-failed   the build exited non-zero (the compiler's first error lines are the evidence)
    wrong          a test shape or a layer check failed (the shape or layer, worst position and error), a
                   Correctness away from the reference's for that model and batch, or a memcheck error
    ok             everything ran and matched
(`refused`, for a folder holding what the grader does not read, is decided before any job: pyconv.tools.grade.)
The job runs under bwrap unless the teacher said --no-sandbox; a node where bwrap does not work refuses it
(sandbox.SandboxUnavailable: the grader's problem, never the team's verdict)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..core import editions
from . import schema
from .sandbox import RUN_MARKER, Limits, SandboxUnavailable, StepResult, bwrap_problem, job_environment, run_step

TEAM_FILES = ("new-forward.h", "new-forward.cuh")
MEMBERS_FILE = "members.txt"
EVIDENCE_LINES = 12
# Signals an exit status 128+N stands for (a shell or a parent that reports its child's signal that way).
_CRASH_SIGNALS = {int(s): s.name for s in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE,
                                           signal.SIGILL, signal.SIGKILL, signal.SIGXCPU, signal.SIGXFSZ,
                                           signal.SIGTRAP, signal.SIGSYS)}
_OOM = re.compile(r"std::bad_alloc|MemoryError|out of memory|Cannot allocate memory|cudaErrorMemoryAllocation"
                  r"|CUDA_ERROR_OUT_OF_MEMORY", re.IGNORECASE)
_SIGNAL_WORDS = re.compile(r"Segmentation fault|Aborted|Bus error|Floating point exception|Illegal instruction"
                           r"|killed by signal (SIG[A-Z]+)|terminated by signal", re.IGNORECASE)


def needs_gpu(milestone: str) -> bool:
    return milestone != "2"


def student_variant(milestone: str) -> str:
    return "cpu-student" if milestone == "2" else "gpu-student"


def slot_for(milestone: str) -> str:
    """The file a team must hand in for a milestone: the CPU one for 2, the CUDA one after."""
    return "new-forward.h" if milestone == "2" else "new-forward.cuh"


@dataclass
class JobSpec:
    """Everything a node needs to grade one team at one milestone; plain data, sent to a Ray worker as is."""

    team: str
    members: list[str]
    files: dict[str, str]  # file name -> its text (the team's folder travels inside the job)
    milestone: str
    model: str
    batches: list[int]
    runs: int
    sanitize: bool
    build_limits: Limits
    run_limits: Limits
    commit: str
    date: str
    root: str  # the project's checkout on the submitting machine; PYCONV_GRADE_ROOT on a node overrides it
    project: list[str] | None = None  # argv of a stand-in for `python3 -m invoke -r ROOT` ("{root}" replaced)
    cuda_arch: str = ""
    scratch_base: str = ""  # where job folders go ("" = the system's temporary folder)
    keep_scratch: bool = False
    hide: list[str] = field(default_factory=list)  # folders covered inside the sandbox (submissions, grades)
    sandbox: str = "bwrap"  # "bwrap": required (a node without a working one refuses the job); "none": --no-sandbox
    run_id: str = ""  # in every step's environment (sandbox.RUN_MARKER): a stopped run finds what its jobs left
    edition: str = editions.DEFAULT_EDITION  # the class's semester: its layer shapes, its performance grade


@dataclass
class JobResult:
    record: dict
    log: str  # every step's command, limits, time, peak memory and captured output
    node: dict  # where it ran (host, Ray node id): for the log, never the record


def files_digest(files: dict[str, str]) -> dict[str, str]:
    return {name: hashlib.sha256(text.encode()).hexdigest() for name, text in sorted(files.items())}


def node_root(spec: JobSpec) -> Path:
    return Path(os.environ.get("PYCONV_GRADE_ROOT") or spec.root)


def checkout_commit(root: Path) -> str:
    """HEAD of the checkout, with '-dirty' when tracked files differ from it; 'unknown' outside git."""
    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        if head.returncode:
            return "unknown"
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
        return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def device_name(gpu: bool) -> str:
    """The GPU this job may use (Ray sets CUDA_VISIBLE_DEVICES), else the CPU's model name."""
    if gpu:
        try:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
            argv = ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"] + (["-i", visible] if visible else [])
            out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip().splitlines()[0]
        except (OSError, subprocess.TimeoutExpired):
            pass
        return "unknown GPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def expected_correctness(root: Path, model: str) -> dict[str, float]:
    """The reference's Correctness of `model` per batch, from the project's measured table (empty if none)."""
    try:
        table = json.loads((root / "results" / "model-accuracy.json").read_text())
    except (OSError, ValueError):
        return {}
    for m in table.get("models", []):
        if m.get("name") == model:
            return {str(k): float(v) for k, v in m.get("accuracy", {}).items()}
    return {}


def correctness_matches(got: float, want: float, batch: int) -> bool:
    """Within max(1, batch/1000) images of the reference: a correct kernel that sums in another order may move a
    label whose two scores nearly tie; a missed row or channel moves hundreds."""
    return abs(got - want) * batch <= max(1, batch // 1000) + 1e-6


class _Job:
    def __init__(self, spec: JobSpec):
        self.spec = spec
        self.root = node_root(spec).resolve()
        self.gpu = needs_gpu(spec.milestone)
        self.log: list[str] = []
        # Checked for every job, where it runs: a node whose bwrap broke since the last job refuses this one
        if spec.sandbox == "bwrap":
            why = bwrap_problem()
            if why:
                raise SandboxUnavailable(f"{socket.gethostname()}: {why}; the job was not run")
            self.isolation = "bwrap"
            self.sandbox_note = "bwrap"
        else:
            self.isolation = "none"
            self.sandbox_note = "none: --no-sandbox (the team's code ran with the grader's rights)"
        # Its own folder under /tmp, not /tmp itself: the sandbox covers the base (hiding other teams' jobs)
        base = Path(spec.scratch_base) if spec.scratch_base else Path(tempfile.gettempdir()) / "pyconv-grade"
        base.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(tempfile.mkdtemp(prefix=f"{spec.team}-m{spec.milestone}-", dir=base)).resolve()
        self.team_dir = self.scratch / "team"
        self.build_dir = self.scratch / "build"
        self.hide = [Path(h) for h in spec.hide] + [base.resolve()]
        project = spec.project or [sys.executable, "-m", "invoke", "-r", "{root}"]
        self.project = [a.replace("{root}", str(self.root)) for a in project]
        self.env = {**job_environment(dict(os.environ)), "PYCONV_NATIVE_DIR": str(self.build_dir),
                    "PYCONV_LOGS": str(self.scratch / "logs"),
                    "TMPDIR": str(self.scratch / "tmp"), "HOME": str(self.scratch / "home"),
                    "PYTHONDONTWRITEBYTECODE": "1", "PYCONV_COMMIT": spec.commit,
                    # the node's checkout, never the copy of the job's code that Ray put on PYTHONPATH
                    "PYTHONPATH": str(self.root)}
        if spec.run_id:
            self.env[RUN_MARKER] = spec.run_id
        for d in ("team", "logs", "tmp", "home", "runs"):
            (self.scratch / d).mkdir()
        for name, text in spec.files.items():
            (self.team_dir / name).write_text(text)

    def step(self, name: str, argv: list[str], limits: Limits, gpu: bool = False) -> StepResult:
        r = run_step(name, argv, scratch=self.scratch, env=self.env, limits=limits, gpu=gpu, hide=self.hide,
                     isolation=self.isolation)
        # Paths that differ from one job or node to the next never reach the evidence: the team's own files
        # are named as the team named them, the scratch and the checkout by placeholders.
        r.output = (r.output.replace(str(self.team_dir) + "/", "").replace(str(self.scratch), "<scratch>")
                    .replace(str(self.root) + "/", "<root>/"))
        how = f"killed ({r.killed}: {r.detail}; {r.measured})" if r.killed else (
            f"signal {r.signal_name}" if r.signal_name else f"exit {r.returncode}")
        self.log.append(f"$ {' '.join(argv)}\n[{name}: {how}, {r.elapsed_s:.1f} s, peak {r.peak_rss_mb:.0f} MiB, "
                        f"isolation {r.isolation}]\n{r.output.rstrip()}\n")
        return r

    def _build_takes(self, flag: str) -> bool:
        try:
            r = subprocess.run([*self.project, "build", "--help"], capture_output=True, text=True, timeout=120,
                               env=self.env, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return flag in r.stdout

    def milestone_argv(self, batch: int, record: Path) -> list[str]:
        s = self.spec
        # The modules come from the job's own build folder through PYCONV_NATIVE_DIR (set in self.env), not from
        # --student, which looks in the checkout's build/ (read-only in the sandbox); --impl names the student's
        # variant outright, so a build's defaults never decide what is graded.
        return [*self.project, "milestone", "--m", s.milestone, "--impl", student_variant(s.milestone),
                "--model", s.model, "--batch", str(batch), "--record", str(record)]

    def run(self) -> dict:
        s = self.spec
        rec = schema.new_record(team=s.team, members=s.members, milestone=s.milestone, model=s.model,
                                files=files_digest(s.files), batches=s.batches, runs=s.runs, sanitize=s.sanitize,
                                device=device_name(self.gpu), host=socket.gethostname(), date=s.date,
                                commit=s.commit, edition=s.edition)
        rec["sandbox"] = self.sandbox_note
        slot = slot_for(s.milestone)
        if slot not in s.files:
            return schema.finish(rec, "build-failed", "build",
                                 [f"no {slot} in the team's folder (milestone {s.milestone} needs it)"])
        build = [*self.project, "build", "--student", str(self.team_dir), "--build-dir", str(self.build_dir)]
        if s.cuda_arch:
            build += ["--cuda-arch", s.cuda_arch]
        if self._build_takes("--target"):  # only the modules this milestone runs: minutes of nvcc saved at m2
            build += ["--target", "_cpu" if s.milestone == "2" else "_cpu,_gpu"]
        # A CUDA build runs under the watchdog's resident-memory limit only: nvcc's tools reserve far more address
        # space than they touch, and RLIMIT_AS made cicc abort (every GPU team's build "crashed" on an H200 host).
        r = self.step("build", build, s.build_limits, gpu=self.gpu)
        verdict = classify(r, "build")
        if verdict:
            return schema.finish(rec, *verdict)
        out = self.scratch / "runs" / "shapes.json"
        argv = ([*self.project, "shapes"] if s.project else [sys.executable, "-m", "pyconv.grading.shapes"])
        r = self.step("shapes", [*argv, "--m", s.milestone, "--record", str(out), "--edition", s.edition],
                      s.run_limits, gpu=self.gpu)
        shapes_rec = _read_json(out)
        verdict = classify(r, "check", shapes_rec)
        if verdict and not edges_only(shapes_rec):
            return schema.finish(rec, *verdict)
        expected = expected_correctness(self.root, s.model)
        fastest = None
        plan = [(b, 1) for b in s.batches[:-1]] + [(s.batches[-1], s.runs)]
        for batch, repeats in plan:
            for i in range(repeats):
                out = self.scratch / "runs" / f"b{batch}-r{i + 1}.json"
                r = self.step(f"milestone b{batch} run {i + 1}", self.milestone_argv(batch, out), s.run_limits,
                              gpu=self.gpu)
                mrec = _read_json(out)
                verdict = classify(r, "run", mrec)
                if verdict:
                    return schema.finish(rec, *verdict)
                if mrec is None:
                    return schema.finish(rec, "crashed", "run",
                                         ["the milestone exited 0 but wrote no record", *_tail(r.output)])
                got = mrec.get("correctness")
                rec["correctness"][str(batch)] = got
                if rec["device"].startswith("unknown") and mrec.get("device"):
                    rec["device"] = mrec["device"]
                want = expected.get(str(batch))
                if got is not None and want is not None and not correctness_matches(got, want, batch):
                    return schema.finish(rec, "wrong", "run", [
                        f"Correctness {got:.4f} at batch {batch}; the reference gives {want:.4f} for model "
                        f"{s.model} (more than max(1, batch/1000) images apart)"])
                if batch == s.batches[-1]:
                    layers = mrec.get("layers", [])
                    times = [float(layer["op_seconds"]) for layer in layers]
                    rec["run_sums"].append(sum(times))
                    if fastest is None or sum(times) < sum(fastest[0]):
                        fastest = (times, [layer.get("variant", "") for layer in layers])
        rec["op_times"], rec["variants"] = fastest
        rec["sum"] = sum(fastest[0])
        ed = editions.get(s.edition)
        if s.batches[-1] == ed.batch:  # the course's targets hold at its own batch only
            rec["performance"] = editions.performance_grade(ed, rec["sum"] * 1e3)
        if s.sanitize and self.gpu:
            out = self.scratch / "runs" / "memcheck.json"
            argv = ["compute-sanitizer", "--tool", "memcheck", "--error-exitcode", "86",
                    "--target-processes", "all", *self.milestone_argv(s.batches[0], out)]
            r = self.step("memcheck", argv, s.run_limits, gpu=True)
            if r.returncode == 86 and not r.killed:
                lines = [ln for ln in r.output.splitlines() if ln.startswith("=========") and ln.strip("= ")]
                return schema.finish(rec, "wrong", "sanitize", ["compute-sanitizer memcheck found errors:",
                                                                  *lines[:EVIDENCE_LINES]])
            verdict = classify(r, "sanitize", _read_json(out))
            if verdict:
                return schema.finish(rec, *verdict)
            rec["sanitizer"] = "memcheck: no errors"
        return schema.finish(rec, "ok", None, [])

    def close(self):
        if not self.spec.keep_scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)


def edges_only(shapes_rec: dict | None) -> bool:
    """Whether the shapes step got past the edition's own layers, all correct, and what went wrong (if anything)
    was an edge case: reported in the step's log, not graded (pyconv.grading.shapes)."""
    if not shapes_rec or shapes_rec.get("edges") not in ("running", "done"):
        return False
    return all(sh.get("ok") for sh in shapes_rec.get("shapes", []) if not sh.get("edge"))


def classify(r: StepResult, stage: str, mrec: dict | None = None) -> tuple[str, str, list[str]] | None:
    """(verdict, stage, evidence) for a step that went wrong, None for one that went right."""
    if r.killed == "timeout":
        return "timeout", stage, [f"{stage}: {r.detail}; {r.cleanup or 'killed'}", *_tail(r.output)]
    if r.killed == "memory":
        return "out-of-memory", stage, [f"{stage}: {r.detail}; killed", *_tail(r.output)]
    if r.killed in ("processes", "disk"):
        return "crashed", stage, [f"{stage}: killed by the grader: {r.detail}", *_tail(r.output)]
    if r.returncode == 0:
        return None
    oom = [ln for ln in r.output.splitlines() if _OOM.search(ln)]
    if oom:
        return "out-of-memory", stage, [f"{stage}: the program ran out of memory", *oom[:EVIDENCE_LINES - 1]]
    sig = r.signal_name or _signal_from(r, mrec)
    if sig:
        return "crashed", stage, [f"{stage}: ended by {sig}", *_tail(r.output)]
    if stage == "build":
        errors = [ln for ln in r.output.splitlines() if re.search(r"\berror\b", ln, re.IGNORECASE)]
        return "build-failed", stage, (errors or _tail(r.output))[:EVIDENCE_LINES]
    failed = [layer for layer in (mrec or {}).get("layers", []) if not layer.get("check", {}).get("ok", True)]
    if failed:
        return "wrong", stage, [_layer_line(layer) for layer in failed][:EVIDENCE_LINES]
    shapes = [sh for sh in (mrec or {}).get("shapes", [])  # a shape where the code raised is a crash, below
              if not sh.get("ok", True) and not sh.get("edge") and not sh.get("raised")]
    if shapes:
        semester = (mrec or {}).get("semester")
        return "wrong", stage, [f"{len(shapes)} test shape(s) differ from the reference" +
                                (f" ({semester}'s network and the edge cases):" if semester else ":"),
                                *[_shape_line(sh) for sh in shapes]][:EVIDENCE_LINES]
    errors = [ln for ln in r.output.splitlines() if ln.lower().startswith("error")]
    if errors:  # the program's own error line says more than its exit status
        return "crashed", stage, [*errors[:EVIDENCE_LINES - 1], f"({stage}: exited with status {r.returncode})"]
    return "crashed", stage, [f"{stage}: exited with status {r.returncode}", *_tail(r.output)]


def _signal_from(r: StepResult, mrec: dict | None) -> str | None:
    reason = str((mrec or {}).get("exit_reason") or (mrec or {}).get("exit reason") or "")
    m = re.search(r"SIG[A-Z]+", reason)
    if m:
        return m.group(0)
    if r.returncode - 128 in _CRASH_SIGNALS:
        return _CRASH_SIGNALS[r.returncode - 128]
    m = _SIGNAL_WORDS.search(r.output)
    if m:
        return m.group(1) or m.group(0)
    return None


def _layer_line(layer: dict) -> str:
    c = layer.get("check", {})
    return (f"layer {layer.get('index')} ({layer.get('variant', '?')}): check failed, worst |error| "
            f"{c.get('worst_abs', float('nan')):.4g} (relative {c.get('worst_rel', float('nan')):.4g}) "
            f"at {c.get('where', '?')}")


_TELLING = re.compile(r"error|fault|abort|terminate|exception|signal|killed|fatal|what\(\)", re.IGNORECASE)


def _shape_line(entry: dict) -> str:
    b, c, h, w, m, k = entry.get("shape", [None] * 6)
    label = f"{entry['layer']} " if entry.get("layer") else ""
    return f"{label}B={b} C={c} H={h} W={w} M={m} K={k}: {entry.get('why', '?')}"


def _tail(text: str, n: int = EVIDENCE_LINES - 1) -> list[str]:
    """The lines that say what went wrong (errors, signals) if there are any, else the last lines."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    telling = [ln for ln in lines if _TELLING.search(ln)]
    return telling[:n] if telling else lines[-n:]


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def run_job(spec: JobSpec) -> JobResult:
    """Grade one team at one milestone. Never raises for anything the team's code does."""
    job = _Job(spec)
    try:
        record = job.run()
    finally:
        job.close()
    node = {"host": socket.gethostname(), "scratch": str(job.scratch)}
    return JobResult(record=record, log="\n".join(job.log), node=node)


def spec_as_dict(spec: JobSpec) -> dict:
    return asdict(spec)
