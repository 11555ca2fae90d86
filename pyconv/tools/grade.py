"""`invoke grade`: every team of a submissions folder at one milestone, a record each under results/grades/.

A submissions folder holds one folder per team, named for the team (letters, digits, '.', '_', '-'), with the
team's new-forward.h (milestone 2) and/or new-forward.cuh (3, 4, final), and optionally members.txt (one name a
line). The jobs run through pyconv.grading.dispatch (Ray when installed); each finished job's record is written at
once, atomically, so an interrupted grading keeps what it finished. Per job, a log of every step (commands,
limits, times, peak memory, captured output) and of where it ran goes under logs/grades/<date>/.

Only regular files inside a team's folder are read (never through a symbolic link); a team whose folder holds
anything else under a team file's name, or whose folder is itself a link, is `refused` without running anything.
Identical files across teams are named in each record's `same_as`. Without a working bubblewrap nothing runs
unless the teacher says --no-sandbox. Every record is signed with the grader's key (pyconv.grading.schema).
docs/grading-trust.md says all of this for the teacher."""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import hashlib
import json
import os
import secrets
import shutil
import socket
import stat
import tempfile
from pathlib import Path

from ..core import editions, paths
from ..core.errors import PyconvError, one_line
from ..core.fileio import write_text_atomic
from ..grading import sandbox, schema
from ..grading.dispatch import run_jobs
from ..grading.job import MEMBERS_FILE, TEAM_FILES, JobSpec, checkout_commit
from ..grading.sandbox import Limits

DEFAULT_GRADES = paths.RESULTS / "grades"
COURSE_BATCHES = (100, 1000, 10000)
MAX_FILE_BYTES = 1 << 20  # a new-forward.h of more than 1 MiB is not a student's file
MAX_MEMBER_CHARS = 100


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


class Team:
    """One folder of the submissions: its name, members and files, or why the grader refuses to read it."""

    def __init__(self, name: str, members=(), files=None, refused: str | None = None):
        self.name, self.members, self.files, self.refused = name, list(members), dict(files or {}), refused
        self.same_as: dict[str, list[str]] = {}


def _read_regular(dir_fd: int, name: str, what: str) -> str | None:
    """The text of `name` in the team's folder, None when absent. Only a regular file is read: a symbolic link
    is never followed (O_NOFOLLOW: a link to /etc/shadow or to another team's file is not the team's work) and a
    FIFO or device is never opened for a blocking read (O_NONBLOCK, then fstat)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _Refused(f"{name} is a symbolic link: the grader reads only regular files inside the team's "
                           "folder") from None
        raise _Refused(f"{name} cannot be read: {e.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _Refused(f"{name} is not a regular file ({_kind(mode)}): the grader reads only regular files inside "
                       "the team's folder")
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise _Refused(f"{what} {name} is larger than {MAX_FILE_BYTES} bytes: not a student's file")
    return data.decode(errors="replace")


class _Refused(Exception):
    pass


def _kind(mode: int) -> str:
    for test, word in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return word
    return "not a plain file"


def _read_team(submissions_fd: int, name: str) -> Team:
    try:
        dir_fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=submissions_fd)
    except OSError as e:
        return Team(name, refused=f"the team's folder cannot be read: {e.strerror}")
    try:
        files = {}
        for f in TEAM_FILES:
            text = _read_regular(dir_fd, f, "the team's")
            if text is not None:
                files[f] = text
        text = _read_regular(dir_fd, MEMBERS_FILE, "the team's")
    except _Refused as e:
        return Team(name, refused=str(e))
    finally:
        os.close(dir_fd)
    members = []
    if text is not None:
        members = [one_line(ln.strip())[:MAX_MEMBER_CHARS] for ln in text.splitlines()
                   if ln.strip() and not ln.lstrip().startswith("#")][:20]
    return Team(name, members, files)


def discover(submissions: Path) -> list[Team]:
    """Every team folder, in name order: read, or refused with the reason. A team folder that is a symbolic
    link (to another team, or anywhere else) is refused, never graded as a team of its own."""
    if not submissions.is_dir():
        raise PyconvError(f"--submissions {submissions}: no such folder")
    teams = []
    sub_fd = os.open(submissions, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for entry in sorted(os.scandir(sub_fd), key=lambda e: e.name):
            if entry.name.startswith("."):
                continue
            if entry.is_symlink():
                target = os.readlink(entry.name, dir_fd=sub_fd)
                if not os.path.isdir(submissions / entry.name):
                    continue  # a link to a file beside the teams is not a team
                refused = f"the team's folder is a symbolic link (to {target}): refused, not graded"
            elif entry.is_dir(follow_symlinks=False):
                refused = None
            else:
                continue
            if not schema.TEAM_NAME.match(entry.name):
                raise PyconvError(f"team folder {entry.name!r} in {submissions}: a team's name is letters, digits, "
                                  "'.', '_' and '-' (at most 64)")
            teams.append(Team(entry.name, refused=refused) if refused else _read_team(sub_fd, entry.name))
    finally:
        os.close(sub_fd)
    if not teams:
        raise PyconvError(f"--submissions {submissions}: no team folders in it")
    flag_identical(teams)
    return teams


def flag_identical(teams: list[Team]) -> None:
    """Fill each team's same_as: for each of its files, the other teams that handed in a byte-identical file
    (under any of the team file names)."""
    by_digest: dict[str, set[str]] = {}
    for t in teams:
        for text in t.files.values():
            by_digest.setdefault(hashlib.sha256(text.encode()).hexdigest(), set()).add(t.name)
    for t in teams:
        for name, text in t.files.items():
            others = sorted(by_digest[hashlib.sha256(text.encode()).hexdigest()] - {t.name})
            if others:
                t.same_as[name] = others


def refused_record(team: Team, m: str, model: str, batches: list[int], runs: int, date: str, commit: str) -> dict:
    rec = schema.new_record(team=team.name, members=[], milestone=m, model=model, files={}, batches=batches,
                            runs=runs, sanitize=False, device="not run", host=socket.gethostname(), date=date,
                            commit=commit)
    rec["sandbox"] = "not run"
    return schema.finish(rec, "refused", "files", [team.refused])


def sandbox_for(no_sandbox: bool) -> str:
    """The isolation this grading run requires of every job: 'bwrap', or 'none' where the teacher said
    --no-sandbox. Without a working bwrap and without --no-sandbox: a one-line refusal saying why and what to do."""
    if no_sandbox:
        return "none"
    why = sandbox.bwrap_problem()
    if why:
        raise PyconvError(f"grading runs each team's code, and {why}: install it (apt-get install bubblewrap, or "
                          "`invoke setup` as root), or pass --no-sandbox to run the teams' code with your own rights")
    return "bwrap"


def grade(submissions, m="2", runs="3", batches=None, model=None, sanitize=False, cluster=None, grades=None,
          timeout_build="900", timeout_run="900", memory_mb="8192", cuda_arch="", project=None, keep=False,
          jobs_cpus="1", no_sandbox=False, say=print, edition=None) -> int:
    """Grade every team; returns 0 when every job produced a record (whatever its verdict), 1 otherwise.
    edition: the class's semester (default 2019sp): m in its numbering, its network (unless `model`), its layer
    shapes only, its Correctness batches ending at its timed batch, its performance grade."""
    chosen = editions.resolve(edition, m, model=model)
    ed, label, m, model = chosen.edition, chosen.label, chosen.milestone, chosen.model
    if m not in schema.MILESTONES:
        raise PyconvError(f"--m must be one of {', '.join(schema.MILESTONES)} (milestone 1 is PyTorch's), got {m!r}")
    if submissions is None:
        raise PyconvError("--submissions DIR is required (one folder per team)")
    if sanitize and m == "2":
        raise PyconvError("--sanitize runs compute-sanitizer on the GPU: milestones 3, 4 and final only")
    submissions = Path(submissions).resolve()
    teams = discover(submissions)
    runs = _positive(runs, "--runs")
    batch_list = parse_batches(batches) if batches else sorted({*COURSE_BATCHES[:-1], ed.batch})
    grades = Path(grades).resolve() if grades else DEFAULT_GRADES
    mem = _positive(memory_mb, "--memory-mb")
    run_limits = Limits(wall_s=_positive(timeout_run, "--timeout-run", float), memory_mb=mem)
    # a build's memory is the compilers' (nvcc's cicc and ptxas want a few GiB), not the team's: never below 8 GiB
    build_limits = Limits(wall_s=_positive(timeout_build, "--timeout-build", float), memory_mb=max(mem, 8192))
    cpus_per_job = _positive(jobs_cpus, "--jobs-cpus", float)
    isolation = sandbox_for(no_sandbox)
    if no_sandbox:
        say("--no-sandbox: the teams' code runs with your rights (each record says so)")
    key = schema.grader_key(create=True)
    date = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()
    root = paths.ROOT if project else paths.require_checkout("grading (each team's code is built with the project)")
    commit = checkout_commit(root)
    project_argv = None
    if project:
        # a stand-in for the project's command line (the tests' fake project): a script run by this Python
        project_argv = [os.environ.get("PYCONV_GRADE_PYTHON", "python3"), str(Path(project).resolve())]
    logdir = paths.LOGS / "grades" / date.replace(":", "")
    placements, written = [], {}
    failures = 0
    by_name = {t.name: t for t in teams}
    for t in teams:
        for name, others in t.same_as.items():
            say(f"  {t.name:20s} m{m}: {name} is identical to {', '.join(others)}'s (noted in the record; "
                "the teacher decides)")
        if t.refused:
            rec = refused_record(t, m, model, batch_list, runs, date, commit)
            schema.write_record(grades, rec, key)
            written[t.name] = rec
            say(f"  {t.name:20s} m{m}: refused       {t.refused}")
    # Every job's scratch folder goes under one folder of this run, removed at the end however the run ends
    # (a signal included); its id marks every step's processes, so a stopped run finds what its jobs left running.
    run_id = secrets.token_hex(8)
    scratch_base = Path(tempfile.mkdtemp(prefix=f"pyconv-grade-{run_id}-"))
    specs = [JobSpec(team=t.name, members=t.members, files=t.files, milestone=m, model=model, batches=batch_list,
                     runs=runs, sanitize=bool(sanitize), build_limits=build_limits, run_limits=run_limits,
                     commit=commit, date=date, root=str(root), project=project_argv, cuda_arch=cuda_arch or "",
                     scratch_base=str(scratch_base), keep_scratch=keep, hide=[str(submissions), str(grades)],
                     sandbox=isolation, run_id=run_id, edition=ed.name)
             for t in teams if not t.refused]
    try:
        with contextlib.closing(run_jobs(specs, cluster, say, cpus_per_job=cpus_per_job)) as results:
            for spec, result, error, placement in results:
                if error:
                    failures += 1
                    say(f"  {spec.team:20s} m{m}: not graded: {error}")
                    continue
                rec = result.record
                rec["same_as"] = by_name[spec.team].same_as
                schema.write_record(grades, rec, key)
                written[spec.team] = rec
                score = f"sum {rec['sum']:.6f} s" if rec["sum"] is not None else (rec["evidence"] or [""])[0][:100]
                if rec["performance"] is not None:
                    score += (f", performance {rec['performance']:.0%} ({ed.target_ms:g} ms full, "
                              f"{ed.baseline_ms:g} none)")
                say(f"  {spec.team:20s} {ed.semester} m{label}: {rec['verdict']:13s} {score}")
                placements.append({"team": spec.team, "milestone": m, "verdict": rec["verdict"], **placement})
                write_text_atomic(logdir / f"{spec.team}-m{m}.log",
                                  f"# {spec.team} m{m}: {rec['verdict']} (node {placement.get('node', '?')}, host "
                                  f"{placement.get('host', '?')})\n\n{result.log}\n")
    finally:
        sandbox.sweep(sandbox.RUN_MARKER, run_id)
        if keep:
            say(f"scratch folders kept: {scratch_base}")
        else:
            shutil.rmtree(scratch_base, ignore_errors=True)
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
            schema.write_record(grades, rec, key)
    write_text_atomic(logdir / "placement.json", json.dumps(placements, indent=2) + "\n")
    say(f"records: {grades}   logs: {logdir}")
    return 1 if failures else 0
