"""`invoke grade`: every team of a submissions folder at one milestone, a record each under results/grades/.

A submissions folder holds one folder per team, named for the team (letters, digits, '.', '_', '-'), with the
team's new-forward.h (milestone 2) and/or new-forward.cuh (3, 4, final), and optionally members.txt (one name a
line). The jobs run through pyconv.grading.dispatch (Ray when installed); each finished job's record is written at
once, atomically, so an interrupted grading keeps what it finished. Per job, a log of every step (commands,
limits, times, peak memory, captured output) and of where it ran goes under logs/grades/<date>/."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

from ..core import paths
from ..core.errors import PyconvError
from ..core.fileio import write_text_atomic
from ..grading import schema
from ..grading.dispatch import run_jobs
from ..grading.job import MEMBERS_FILE, TEAM_FILES, JobSpec, checkout_commit
from ..grading.sandbox import Limits

DEFAULT_GRADES = paths.RESULTS / "grades"
COURSE_BATCHES = (100, 1000, 10000)
MAX_FILE_BYTES = 1 << 20  # a new-forward.h of more than 1 MiB is not a student's file


def _positive(value, flag: str, kind=int):
    try:
        v = kind(value)
    except (TypeError, ValueError):
        raise PyconvError(f"{flag} must be a positive number, got {value!r}") from None
    if v <= 0:
        raise PyconvError(f"{flag} must be a positive number, got {value!r}")
    return v


def parse_batches(text: str) -> list[int]:
    try:
        out = [int(b) for b in str(text).split(",") if b.strip()]
    except ValueError:
        raise PyconvError(f"--batches must be comma-separated integers 1..10000, got {text!r}") from None
    if not out or any(not 1 <= b <= 10000 for b in out):
        raise PyconvError(f"--batches must be comma-separated integers 1..10000, got {text!r}")
    return out


def discover(submissions: Path) -> list[tuple[str, list[str], dict[str, str]]]:
    """(team, members, {file: text}) for every team folder, in name order."""
    if not submissions.is_dir():
        raise PyconvError(f"--submissions {submissions}: no such folder")
    teams = []
    for d in sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if not schema.TEAM_NAME.match(d.name):
            raise PyconvError(f"team folder {d.name!r} in {submissions}: a team's name is letters, digits, "
                              "'.', '_' and '-' (at most 64)")
        files = {}
        for name in TEAM_FILES:
            f = d / name
            if f.is_file():
                if f.stat().st_size > MAX_FILE_BYTES:
                    raise PyconvError(f"{f} is larger than {MAX_FILE_BYTES} bytes")
                files[name] = f.read_text(errors="replace")
        members = []
        if (d / MEMBERS_FILE).is_file():
            members = [ln.strip() for ln in (d / MEMBERS_FILE).read_text(errors="replace").splitlines()
                       if ln.strip() and not ln.lstrip().startswith("#")][:20]
        teams.append((d.name, members, files))
    if not teams:
        raise PyconvError(f"--submissions {submissions}: no team folders in it")
    return teams


def grade(submissions, m="2", runs="3", batches=None, model="ece408", sanitize=False, cluster=None, grades=None,
          timeout_build="900", timeout_run="900", memory_mb="8192", cuda_arch="", project=None, keep=False,
          jobs_cpus="1", say=print) -> int:
    """Grade every team; returns 0 when every job produced a record (whatever its verdict), 1 otherwise."""
    m = str(m).strip().lower()
    if m not in schema.MILESTONES:
        raise PyconvError(f"--m must be one of {', '.join(schema.MILESTONES)} (milestone 1 is PyTorch's), got {m!r}")
    if submissions is None:
        raise PyconvError("--submissions DIR is required (one folder per team)")
    if sanitize and m == "2":
        raise PyconvError("--sanitize runs compute-sanitizer on the GPU: milestones 3, 4 and final only")
    submissions = Path(submissions).resolve()
    teams = discover(submissions)
    runs = _positive(runs, "--runs")
    batch_list = parse_batches(batches) if batches else list(COURSE_BATCHES)
    grades = Path(grades).resolve() if grades else DEFAULT_GRADES
    mem = _positive(memory_mb, "--memory-mb")
    run_limits = Limits(wall_s=_positive(timeout_run, "--timeout-run", float), memory_mb=mem)
    # a build's memory is the compilers' (nvcc's cicc and ptxas want a few GiB), not the team's: never below 8 GiB
    build_limits = Limits(wall_s=_positive(timeout_build, "--timeout-build", float), memory_mb=max(mem, 8192))
    date = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()
    root = paths.ROOT if project else paths.require_checkout("grading (each team's code is built with the project)")
    commit = checkout_commit(root)
    project_argv = None
    if project:
        # a stand-in for the project's command line (the tests' fake project): a script run by this Python
        project_argv = [os.environ.get("PYCONV_GRADE_PYTHON", "python3"), str(Path(project).resolve())]
    specs = [JobSpec(team=t, members=mem_, files=files, milestone=m, model=model, batches=batch_list, runs=runs,
                     sanitize=bool(sanitize), build_limits=build_limits, run_limits=run_limits, commit=commit,
                     date=date, root=str(root), project=project_argv, cuda_arch=cuda_arch or "", keep_scratch=keep,
                     hide=[str(submissions), str(grades)])
             for t, mem_, files in teams]
    logdir = paths.LOGS / "grades" / date.replace(":", "")
    placements, written = [], {}
    failures = 0
    for spec, result, error, placement in run_jobs(specs, cluster, say, cpus_per_job=_positive(jobs_cpus,
                                                                                                 "--jobs-cpus", float)):
        if error:
            failures += 1
            say(f"  {spec.team:20s} m{m}: not graded: {error}")
            continue
        schema.write_record(grades, result.record)
        written[spec.team] = result.record
        rec = result.record
        score = f"sum {rec['sum']:.6f} s" if rec["sum"] is not None else (rec["evidence"] or [""])[0][:100]
        say(f"  {spec.team:20s} m{m}: {rec['verdict']:13s} {score}")
        placements.append({"team": spec.team, "milestone": m, "verdict": rec["verdict"], **placement})
        write_text_atomic(logdir / f"{spec.team}-m{m}.log",
                          f"# {spec.team} m{m}: {rec['verdict']} (node {placement.get('node', '?')}, host "
                          f"{placement.get('host', '?')})\n\n{result.log}\n")
    # Without a sandbox a later job could have rewritten an earlier team's record: write them all again, from what
    # the jobs returned, and say which had changed.
    for team, rec in written.items():
        path = schema.record_path(grades, team, m)
        try:
            same = json.loads(path.read_text()) == rec
        except (OSError, ValueError):
            same = False
        if not same:
            say(f"  {path} was changed while grading: written again from its job's result")
            schema.write_record(grades, rec)
    write_text_atomic(logdir / "placement.json", json.dumps(placements, indent=2) + "\n")
    say(f"records: {grades}   logs: {logdir}")
    return 1 if failures else 0
