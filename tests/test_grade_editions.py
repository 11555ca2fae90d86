"""The teachers' tools by edition (left out of a handout with the grader): grading's shapes step tests the edition's
own layers and names the semester, the records keep the edition and its performance grade; `grade` and `handout`
take --edition."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, needs_data

from pyconv.core import archs, editions
from pyconv.core.errors import PyconvError
from pyconv.grading import job, schema, shapes


def invoke(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("args", [["handout", "--edition", "2030fa", "--dest", "DEST"],
                                  ["grade", "--edition", "2030fa", "--submissions", "DEST"]])
def test_cli_unknown_edition_is_one_line(args, tmp_path):
    dest = tmp_path / "dest"
    r = invoke(*[str(dest) if a == "DEST" else a for a in args], env={"PYCONV_LOGS": str(tmp_path / "logs")})
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.strip() == f"error: unknown edition '2030fa' (known: {', '.join(editions.EDITIONS)})"
    assert not dest.exists() and not (tmp_path / "logs").exists()


def test_a_handout_of_an_edition_makes_it_the_default():
    from pyconv.tools.handout import EDITIONS_FILE, set_default_edition

    text = (ROOT / EDITIONS_FILE).read_text()
    changed = set_default_edition(text, "2021fa")
    assert changed.count('DEFAULT_EDITION = "2021fa"') == 1 and 'DEFAULT_EDITION = "2019sp"' not in changed
    assert len(changed.splitlines()) == len(text.splitlines())
    import types

    module = types.ModuleType("pyconv.core.handout_editions")  # the handout's table still imports and resolves
    module.__package__ = "pyconv.core"
    sys.modules[module.__name__] = module
    try:
        exec(compile(changed, EDITIONS_FILE, "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    assert module.get(None).name == "2021fa" and module.resolve(None, "1").milestone == "2"
    with pytest.raises(PyconvError, match="expected one line 'DEFAULT_EDITION = ...', found 0"):
        set_default_edition("x = 1\n", "2021fa")


def test_the_86x86_layers_are_the_courses():
    assert shapes.course_layers("2021fa") == [("Fall 2021 conv1", (shapes.COURSE_BATCH, 1, 86, 86, 4, 7)),
                                              ("Fall 2021 conv2", (shapes.COURSE_BATCH, 4, 40, 40, 16, 7))]


@pytest.mark.parametrize("edition,sum_ms,want", [
    ("2021fa", 170.0, 0.0), ("2021fa", 70.0, 1.0), ("2021fa", 120.0, 0.5), ("2021fa", 45.0, 1.0),
    ("2021fa", 400.0, 0.0), ("2021fa", 150.0, 0.2), ("2024fa", 140.0, 0.5), ("2019sp", 1.0, None),
    ("2021sp", 1.0, None),
])
def test_the_performance_grade_is_linear_between_baseline_and_target(edition, sum_ms, want):
    got = editions.performance_grade(editions.get(edition), sum_ms)
    assert got == (None if want is None else pytest.approx(want))


@pytest.mark.parametrize("edition", list(editions.EDITIONS))
def test_grading_tests_only_the_editions_own_layers(edition):
    ed = editions.get(edition)
    layers = shapes.course_layers(edition)
    assert len(layers) == len(archs.get_arch(ed.arch).convs)
    assert all(label.startswith(ed.semester) for label, _ in layers)
    assert all(shape[2] == ed.input_size for _, shape in layers[:1])
    others = {s for e in editions.EDITIONS.values() if e.arch != ed.arch for s in shapes.course_shapes(e.name)}
    assert not others & set(shapes.course_shapes(edition))


def test_a_wrong_shape_names_the_semester():
    r = job.StepResult(name="shapes", returncode=1, elapsed_s=0.1, peak_rss_mb=1, output="", killed=None, detail="")
    mrec = {"variant": "cpu-student", "edition": "2019fa", "semester": "Fall 2019", "shapes": [
        {"shape": [4, 1, 70, 70, 12, 5], "layer": "Fall 2019 conv1", "ok": False, "why": "worst |error| 3 at [0]",
         "max_abs_err": 3.0}]}
    verdict, stage, evidence = job.classify(r, "check", mrec)
    assert (verdict, stage) == ("wrong", "check")
    assert evidence[0] == "1 test shape(s) differ from the reference (Fall 2019's network and the edge cases):"
    assert evidence[1].startswith("Fall 2019 conv1 B=4 C=1 H=70 W=70 M=12 K=5")


def test_grade_records_carry_the_edition_and_older_records_are_refused(tmp_path):
    """A record keeps its edition and performance grade under the grader's signature; a record of an older version
    (no edition, no signature) is refused by name, and the signed one still loads beside it."""
    key = b"k" * 32
    rec = schema.new_record(team="t", members=[], milestone="final", model="ece408-86", files={}, batches=[10000],
                            runs=1, sanitize=False, device="d", host="h", date="2026-01-01", commit="c",
                            edition="2021fa")
    rec.update(op_times=[0.05, 0.07], variants=["a", "b"], sum=0.12, run_sums=[0.12], correctness={"10000": 0.87},
               performance=editions.performance_grade(editions.get("2021fa"), 120.0))
    schema.finish(rec, "ok", None, [])
    assert rec["edition"] == "2021fa" and rec["performance"] == pytest.approx(0.5)
    old = {k: v for k, v in rec.items() if k not in ("edition", "performance", "signature")}
    old.update(version=1, team="old")
    (tmp_path / "old-mfinal.json").write_text(json.dumps(old))
    schema.write_record(tmp_path, rec, key)
    records, refused = schema.read_records(tmp_path, key)
    assert [r["team"] for r in records] == ["t"] and records[0]["performance"] == pytest.approx(0.5)
    assert records[0]["edition"] == "2021fa"
    assert [p.name for p, _ in refused] == ["old-mfinal.json"]


def test_the_fixture_teams_graded_by_edition(tmp_path, monkeypatch):
    """Two fixture teams through the grader (the stand-in project; the jobs run here, without Ray) as a Fall 2019
    class: the jobs carry that edition and its network, the records keep it, the grader's lines name the semester."""
    from pyconv.tools import grade as g

    teams = ROOT / "tests" / "fixtures" / "teams"
    subs = tmp_path / "subs"
    for team in ("correct-seven-loops", "wrong-last-row"):
        (subs / team).mkdir(parents=True)
        (subs / team / "new-forward.h").write_text((teams / team / "new-forward.h").read_text())
    seen = []

    def run_here(specs, cluster, say, cpus_per_job=1):
        for spec in specs:
            seen.append(spec)
            yield spec, job.run_job(spec), None, {"node": "here", "host": "here"}

    monkeypatch.setattr(g, "run_jobs", run_here)
    monkeypatch.setattr(g.paths, "LOGS", tmp_path / "logs")
    said: list[str] = []
    fake = ROOT / "tests" / "fixtures" / "fake_project" / "fake_project.py"
    assert g.grade(subs, m="2", batches="10,50", runs="1", grades=tmp_path / "grades", project=str(fake),
                   edition="2019fa", say=said.append) == 0
    assert {s.edition for s in seen} == {"2019fa"} and {s.model for s in seen} == {"ece408-fa19"}
    recs = {r["team"]: r for r in schema.load_records(tmp_path / "grades")}
    assert recs["correct-seven-loops"]["verdict"] == "ok" and recs["wrong-last-row"]["verdict"] == "wrong"
    assert all(r["edition"] == "2019fa" and r["performance"] is None for r in recs.values())
    assert any("correct-seven-loops" in ln and "Fall 2019 m2: ok" in ln for ln in said), said


@pytest.mark.slow
@needs_data
def test_a_file_written_for_its_semester_is_graded_on_its_semester(tmp_path):
    """A Fall 2019 team whose file takes Fall 2019's two layers only (tests/fixtures/edition-teams), through the
    project's own command line: ok as a Fall 2019 class; as a Spring 2019 class it fails on Spring 2019's first
    layer, and the evidence names the semester."""
    pytest.importorskip("ray")
    subs = tmp_path / "subs"
    team = ROOT / "tests" / "fixtures" / "edition-teams" / "fall-2019-fixed-sizes"
    (subs / team.name).mkdir(parents=True)
    (subs / team.name / "new-forward.h").write_text((team / "new-forward.h").read_text())
    verdicts = {}
    for edition in ("2019fa", "2019sp"):
        r = invoke("grade", "--edition", edition, "--submissions", str(subs), "--m", "2", "--batches", "100",
                   "--runs", "1", "--grades", str(tmp_path / edition), "--timeout-build", "1800",
                   env={"PYCONV_LOGS": str(tmp_path / "logs")}, timeout=3600)
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
        (rec,) = schema.load_records(tmp_path / edition)
        verdicts[edition] = rec
    fa19, sp19 = verdicts["2019fa"], verdicts["2019sp"]
    assert fa19["verdict"] == "ok" and fa19["edition"] == "2019fa" and fa19["model"] == "ece408-fa19"
    table = json.loads((ROOT / "results" / "model-accuracy.json").read_text())
    want = next(m["accuracy"]["100"] for m in table["models"] if m["name"] == "ece408-fa19")
    assert fa19["correctness"]["100"] == pytest.approx(want, abs=0.011)
    assert (sp19["verdict"], sp19["stage"], sp19["edition"]) == ("crashed", "check", "2019sp")
    assert "Spring 2019 conv1" in sp19["evidence"][0] and "Fall 2019's layers" in sp19["evidence"][0]


def test_a_shape_where_the_code_raised_is_a_crash_and_an_edge_case_is_not_graded():
    r = job.StepResult(name="shapes", returncode=1, elapsed_s=0.1, peak_rss_mb=1, killed=None, detail="",
                       output="error: cpu-student at Spring 2019 conv1 B=4 C=1 H=48 W=48 M=6 K=5 (Spring 2019's "
                              "network): RuntimeError: Check failed: M == 24")
    raised = {"edition": "2019sp", "semester": "Spring 2019", "edges": "not run", "shapes": [
        {"shape": [4, 1, 48, 48, 6, 5], "layer": "Spring 2019 conv1", "edge": False, "ok": False, "raised": True,
         "why": "RuntimeError: Check failed: M == 24", "max_abs_err": None}]}
    verdict, stage, evidence = job.classify(r, "check", raised)
    assert (verdict, stage) == ("crashed", "check") and "Spring 2019 conv1" in evidence[0]
    edge = {"edition": "2019fa", "semester": "Fall 2019", "edges": "running", "shapes": [
        {"shape": [4, 1, 70, 70, 12, 5], "layer": "Fall 2019 conv1", "edge": False, "ok": True, "why": ""},
        {"shape": [1, 1, 1, 1, 1, 1], "layer": "edge case", "edge": True, "ok": False, "raised": True, "why": "x"}]}
    assert job.edges_only(edge) and not job.edges_only(raised) and not job.edges_only(None)
