"""The grader: the record format, the limits of one step, the verdicts, and `invoke grade` + `invoke leaderboard`
over the fixture teams (tests/fixtures/teams: nine milestone-2 submissions written as the course's students
wrote them: two correct, one wrong, one that does not compile, one that hangs, two that crash, one that
allocates without bound, and the untouched skeleton)."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyconv.core.errors import PyconvError
from pyconv.grading import dispatch, sandbox, schema
from pyconv.grading.job import classify, correctness_matches
from pyconv.grading.sandbox import Limits, StepResult, run_step
from pyconv.tools import leaderboard as lb

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
TEAMS = FIXTURES / "teams"
FAKE_PROJECT = FIXTURES / "fake_project" / "fake_project.py"
EXPECTED = {"correct-seven-loops": "ok", "correct-reordered": "ok", "wrong-last-row": "wrong",
            "does-not-compile": "build-failed", "hangs": "timeout", "crashes-segfault": "crashed",
            "crashes-abort": "crashed", "allocates-without-bound": "out-of-memory", "skeleton": "crashed"}


KEY = bytes(range(32))
# Grading refuses to run without a working bubblewrap: where it does not work, the tests say --no-sandbox
NO_SANDBOX = [] if sandbox.bwrap_problem() is None else ["--no-sandbox"]


@pytest.fixture(autouse=True)
def grader_key_file(tmp_path_factory, monkeypatch):
    """Each test signs with a key of its own (never the user's): the grader and every child read this path."""
    path = tmp_path_factory.mktemp("key") / "grade-key"
    path.write_text(KEY.hex() + "\n")
    path.chmod(0o600)
    monkeypatch.setenv("PYCONV_GRADE_KEY_FILE", str(path))
    return path


def ok_record(team="t1", s=(0.5, 0.25), **kw) -> dict:
    rec = schema.new_record(team=team, members=["A B"], milestone="2", model="ece408", files={"new-forward.h": "0"},
                            batches=[100, 1000], runs=2, sanitize=False, device="cpu", host="h",
                            date="2026-01-01T00:00:00+00:00", commit="abc")
    rec.update(op_times=list(s), variants=["cpu-student"] * len(s), sum=sum(s), run_sums=[sum(s) + 1, sum(s)],
               correctness={"100": 0.84, "1000": 0.882}, **kw)
    return schema.finish(rec, "ok", None, [])


# --- the record


def test_a_complete_record_is_valid_and_written_atomically(tmp_path):
    rec = ok_record()
    assert schema.validate(rec) == []
    grades = tmp_path / "grades"
    path = schema.write_record(grades, rec, KEY)
    assert path.name == "t1-m2.json"
    assert json.loads(path.read_text()) == rec and len(rec["signature"]) == 64
    assert [p.name for p in grades.iterdir()] == ["t1-m2.json"]  # no temporary file left beside it
    assert schema.load_records(grades) == [rec]


@pytest.mark.parametrize("change, problem", [
    (lambda r: r.pop("commit"), "missing commit"),
    (lambda r: r.update(extra=1), "unknown extra"),
    (lambda r: r.update(verdict="great"), "verdict 'great'"),
    (lambda r: r.update(sum=99.0), "sum is not the sum"),
    (lambda r: r.update(op_times=[]), "op_times"),
    (lambda r: r.update(run_sums=[1.0]), "run_sums"),
    (lambda r: r.update(correctness={"100": 1.5, "1000": 0.8}), "not a fraction"),
    (lambda r: r.update(team="../x"), "team"),
    (lambda r: r.update(verdict="crashed", evidence=[]), "without evidence"),
])
def test_a_record_that_breaks_the_schema_is_named(change, problem):
    rec = ok_record()
    change(rec)
    assert any(problem in p for p in schema.validate(rec)), schema.validate(rec)


def test_loading_a_broken_record_is_one_line_naming_the_file(tmp_path):
    (tmp_path / "x-m2.json").write_text('{"schema": "pyconv-grade"}')
    with pytest.raises(PyconvError, match=r"x-m2.json: not a grade record: missing"):
        schema.load_records(tmp_path)


def test_a_failed_verdict_has_no_score_and_keeps_its_evidence_short():
    rec = ok_record()
    rec = schema.finish(rec, "wrong", "run", ["x" * 1000] + [f"line {i}" for i in range(30)])
    assert rec["sum"] is None and rec["op_times"] is None
    assert len(rec["evidence"]) == schema.MAX_EVIDENCE
    assert len(rec["evidence"][0]) < 420


# --- one step under limits


def _step(tmp_path, argv, **limits):
    return run_step("t", argv, scratch=tmp_path, env=dict(os.environ), limits=Limits(**limits))


def test_the_wall_clock_limit_kills_the_whole_session(tmp_path):
    # a grandchild in its own process group must die too (it stays in the session)
    script = "import os, time\nif os.fork() == 0:\n    os.setpgid(0, 0)\n    time.sleep(60)\ntime.sleep(60)\n"
    start = time.monotonic()
    r = _step(tmp_path, [sys.executable, "-c", script, "grandchild-marker-408"], wall_s=1.5)
    assert r.killed == "timeout" and time.monotonic() - start < 10
    deadline = time.monotonic() + 10  # a SIGKILLed process may take a moment to go under load
    while (survivors := subprocess.run(["pgrep", "-f", "grandchild-marker-408"], capture_output=True,
                                       text=True).stdout) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert survivors == ""


def test_memory_over_the_limit_is_stopped(tmp_path):
    r = _step(tmp_path, [sys.executable, "-c", "a = []\nwhile True: a.append(bytearray(16 << 20))"],
              wall_s=60, memory_mb=400)
    verdict = classify(r, "run")
    assert verdict[0] == "out-of-memory", (r, verdict)


def test_a_file_larger_than_the_limit_ends_the_step(tmp_path):
    r = _step(tmp_path, ["dd", "if=/dev/zero", f"of={tmp_path / 'big'}", "bs=1M", "count=64"], file_mb=8)
    assert r.returncode != 0
    assert (tmp_path / "big").stat().st_size <= 8 << 20
    assert classify(r, "run")[0] == "crashed"


def test_captured_output_is_capped_head_and_tail(tmp_path):
    r = _step(tmp_path, [sys.executable, "-c", "print('FIRST'); print('x' * 10_000_000); print('LAST')"],
              output_kb=64)
    assert r.returncode == 0
    assert r.output.startswith("FIRST") and r.output.rstrip().endswith("LAST")
    assert len(r.output) < 70_000 and "bytes of output left out" in r.output


def _result(code=0, output="", killed=None):
    return StepResult(name="s", returncode=code, elapsed_s=0.1, peak_rss_mb=1, output=output, killed=killed,
                      detail="why")


@pytest.mark.parametrize("result, stage, verdict", [
    (_result(0), "run", None),
    (_result(-9, killed="timeout"), "run", "timeout"),
    (_result(-9, killed="memory"), "build", "out-of-memory"),
    (_result(-11), "run", "crashed"),
    (_result(139, "Command exited with non-zero status 139"), "run", "crashed"),
    (_result(134, "terminate called after throwing an instance of 'std::bad_alloc'"), "run", "out-of-memory"),
    (_result(1, "MemoryError"), "run", "out-of-memory"),
    (_result(2, "x.cu(3): error: identifier \"W_out\" is undefined"), "build", "build-failed"),
    (_result(1, "error: new-forward.h:27: Check failed: Remove this line"), "run", "crashed"),
])
def test_classify(result, stage, verdict):
    got = classify(result, stage)
    assert (got[0] if got else None) == verdict
    if got:
        assert got[2], "every verdict but ok carries evidence"


def test_a_failed_layer_check_is_wrong_with_the_layer_named():
    mrec = {"layers": [{"index": 1, "variant": "cpu-student", "op_seconds": 0.1, "check": {"ok": True}},
                       {"index": 2, "variant": "cpu-student", "op_seconds": 0.1,
                        "check": {"ok": False, "worst_abs": 2.0, "worst_rel": 1.0, "where": "[0,1,2,3]"}}]}
    verdict, stage, evidence = classify(_result(1, "error: layer 2 differs"), "run", mrec)
    assert verdict == "wrong" and evidence[0].startswith("layer 2 (cpu-student)") and "[0,1,2,3]" in evidence[0]


def test_correctness_tolerance_is_a_few_images_not_a_missed_row():
    assert correctness_matches(0.8857, 0.8857, 10000)
    assert correctness_matches(0.8850, 0.8857, 10000)  # 7 images: a near tie summed in another order
    assert not correctness_matches(0.8763, 0.8857, 10000)  # issue's missed last row: 94 images
    assert correctness_matches(0.83, 0.84, 100) and not correctness_matches(0.82, 0.84, 100)


# --- the leaderboard


def test_standings_rank_by_sum_and_measure_from_the_median():
    recs = [ok_record("a", (0.3, 0.1)), ok_record("b", (0.1, 0.1)), ok_record("c", (0.3, 0.3))]
    bad = schema.finish(ok_record("d"), "timeout", "run", ["run: ran past its limit"])
    rows, median, sd = lb.standings(recs + [bad])
    assert [r["team"] for r in rows] == ["b", "a", "c", "d"]
    assert [r["rank"] for r in rows] == [1, 2, 3, None]
    assert median == pytest.approx(0.4) and sd == pytest.approx(0.2)  # sums 0.2, 0.4, 0.6 (sample deviation)
    assert [r["z"] for r in rows[:3]] == pytest.approx([-1.0, 0.0, 1.0])
    head, cells = lb.table(rows)
    assert cells[3][head.index("verdict")] == "timeout" and cells[3][0] == "-"


def test_leaderboard_of_nothing_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "invoke", "leaderboard", "--grades", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0 and "no grade records" in r.stderr


@pytest.mark.skipif(dispatch.visible_gpus() > 0, reason="this machine has a GPU")
def test_a_gpu_milestone_without_a_gpu_is_one_line(tmp_path):
    pytest.importorskip("ray")
    r = subprocess.run([sys.executable, "-m", "invoke", "grade", "--submissions", str(FIXTURES / "gpu-teams"), "--m",
                        "3", "--grades", str(tmp_path), *NO_SANDBOX], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1 and "need a GPU" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_grade_rejects_bad_input_in_one_line(tmp_path):
    for args, msg, code in ((["--submissions", str(tmp_path / "none")], "no such folder", 1),
                            (["--submissions", str(TEAMS), "--m", "1"], "--m must be one of", 1),
                            (["--submissions", str(TEAMS), "--runs", "0"], "--runs must be an integer >= 1", 2),
                            (["--submissions", str(TEAMS), "--batches", "10,x"], "--batches", 1),
                            (["--submissions", str(TEAMS), "--sanitize"], "milestones 3, 4 and final only", 1)):
        r = subprocess.run([sys.executable, "-m", "invoke", "grade", *args], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == code and msg in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


# --- the whole thing over the fixture teams


def grade_fixture(grades: Path, extra=(), env=None):
    """`invoke grade --m 2` over the fixture teams with the stand-in project (small batches, short limits)."""
    argv = [sys.executable, "-m", "invoke", "grade", "--submissions", str(TEAMS), "--m", "2", "--batches", "10,50",
            "--runs", "2", "--timeout-run", "8", "--timeout-build", "120", "--memory-mb", "1024", "--project",
            str(FAKE_PROJECT), "--grades", str(grades), *NO_SANDBOX, *extra]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_grade_the_fixture_teams_on_embedded_ray_then_the_leaderboard(tmp_path):
    pytest.importorskip("ray")
    r = grade_fixture(tmp_path / "grades", env={"PYCONV_LOGS": str(tmp_path / "logs")})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "embedded local Ray" in r.stdout
    records = {rec["team"]: rec for rec in schema.load_records(tmp_path / "grades")}
    assert {t: rec["verdict"] for t, rec in records.items()} == EXPECTED
    assert "W_out" in records["does-not-compile"]["evidence"][0]
    assert "SIGSEGV" in records["crashes-segfault"]["evidence"][0]
    assert "SIGABRT" in records["crashes-abort"]["evidence"][0]
    assert "Remove this line" in records["skeleton"]["evidence"][0]
    wrong = records["wrong-last-row"]
    assert wrong["stage"] == "check" and "2 test shape(s) differ from the reference" in wrong["evidence"][0]
    assert wrong["evidence"][1].startswith("B=3 C=1 H=20 W=20 M=4 K=5: worst |error|")
    assert records["correct-seven-loops"]["members"] == ["Ada Lovelace", "Alan Turing"]
    for team in ("correct-seven-loops", "correct-reordered"):
        rec = records[team]
        assert rec["correctness"] == {"10": 1.0, "50": 1.0} and len(rec["run_sums"]) == 2
        assert rec["sum"] == min(rec["run_sums"])
    placement = json.loads(next((tmp_path / "logs" / "grades").glob("*/placement.json")).read_text())
    assert {p["team"] for p in placement} == set(EXPECTED)

    lb_run = subprocess.run([sys.executable, "-m", "invoke", "leaderboard", "--grades", str(tmp_path / "grades")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    if importlib.util.find_spec("matplotlib") is None:  # the leaderboard's plot needs the `grade` extra
        assert lb_run.returncode == 1 and "pip install 'pyconv-ece408[bench]' or [grade]" in lb_run.stderr
        return
    assert lb_run.returncode == 0, lb_run.stderr
    with (tmp_path / "grades" / "leaderboard-m2.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [row["rank"] for row in rows[:2]] == ["1", "2"]
    assert {row["team"] for row in rows[:2]} == {"correct-seven-loops", "correct-reordered"}
    assert all(row["rank"] == "-" for row in rows[2:])
    assert {row["team"]: row["verdict"] for row in rows} == EXPECTED
    assert (tmp_path / "grades" / "leaderboard-m2.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| 1 |" in (tmp_path / "grades" / "leaderboard-m2.md").read_text()


def test_a_record_changed_while_grading_is_written_again(tmp_path, monkeypatch):
    """Without a sandbox a team's code can write into the grades folder: the grader rewrites every record from
    its job's result at the end and says which had changed."""
    from pyconv.grading.job import JobResult
    from pyconv.tools import grade as g

    grades = tmp_path / "grades"

    def fake_run_jobs(specs, cluster, say, cpus_per_job):
        for i, spec in enumerate(specs[:2]):
            if i == 1:  # the second team's code overwrites the first team's record
                schema.record_path(grades, specs[0].team, "2").write_text('{"verdict": "ok", "sum": 0}')
            rec = ok_record(spec.team)
            yield spec, JobResult(record=rec, log="", node={}), None, {"node": "n"}

    monkeypatch.setattr(g, "run_jobs", fake_run_jobs)
    monkeypatch.setattr(g.paths, "LOGS", tmp_path / "logs")
    said = []
    assert g.grade(TEAMS, grades=grades, say=said.append, no_sandbox=bool(NO_SANDBOX)) == 0
    first = sorted(p.name for p in TEAMS.iterdir() if p.is_dir())[0]
    assert any("was changed while grading" in line and first in line for line in said), said
    assert schema.load_records(grades)[0]["team"] == first and schema.validate(schema.load_records(grades)[0]) == []


def test_the_test_shapes_are_the_editions_layers_and_the_edges():
    from pyconv.core.archs import ARCHS
    from pyconv.grading import shapes

    course = shapes.course_shapes()  # the default edition, Spring 2019: its two layers only
    assert course == [(4, 1, 48, 48, 6, 5), (4, 6, 22, 22, 16, 5)]
    assert shapes.course_shapes("2018fa") == [(4, 1, 72, 72, 12, 7), (4, 12, 33, 33, 24, 7)]
    every = {s for e in ("2017fa", "2018sp", "2018fa", "2019sp", "2019fa", "2021fa") for s in shapes.course_shapes(e)}
    assert len(every) == sum(len(a.convs) for a in ARCHS.values())
    edges = shapes.EDGE_SHAPES
    assert any(k == 1 for *_, k in edges) and any(h == w == k for _, _, h, w, _, k in edges)
    assert any(h != w for _, _, h, w, _, _ in edges) and any(m == 1 for *_, m, _ in edges)
