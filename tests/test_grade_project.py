"""`invoke grade --m 2` through the project's own command line (`invoke build --student`, `invoke milestone
--student --impl cpu-student --record`) on three fixture teams: correct, wrong, does not compile. The engine's
other verdicts are tested with the stand-in project (test_grade.py): a real build per team is minutes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyconv.core import paths
from pyconv.grading import sandbox, schema

ROOT = Path(__file__).resolve().parent.parent
TEAMS = ROOT / "tests" / "fixtures" / "teams"
PICK = {"correct-seven-loops": "ok", "wrong-last-row": "wrong", "does-not-compile": "build-failed"}


def _cli_has(task: str, flag: str) -> bool:
    r = subprocess.run([sys.executable, "-m", "invoke", task, "--help"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    return flag in r.stdout


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not paths.DATA_FILE.exists(), reason="datasets/fashion-mnist.h5 missing (run `invoke data`)"),
]


def test_three_teams_through_the_project(tmp_path):
    if not (_cli_has("build", "--student") and _cli_has("milestone", "--record")):
        pytest.skip("this tree's `invoke build` has no --student or `invoke milestone` no --record")
    pytest.importorskip("ray")
    subs = tmp_path / "subs"
    for team in PICK:
        (subs / team).mkdir(parents=True)
        (subs / team / "new-forward.h").write_text((TEAMS / team / "new-forward.h").read_text())
    r = subprocess.run([sys.executable, "-m", "invoke", "grade", "--submissions", str(subs), "--m", "2",
                        "--batches", "100", "--runs", "1", "--grades", str(tmp_path / "grades"),
                        "--timeout-build", "1800", "--timeout-run", "600", "--cuda-arch", "90",
                        *([] if sandbox.bwrap_problem() is None else ["--no-sandbox"])],
                       cwd=ROOT, capture_output=True, text=True, timeout=5400,
                       env={**os.environ, "PYCONV_LOGS": str(tmp_path / "logs")})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    records = {rec["team"]: rec for rec in schema.load_records(tmp_path / "grades")}
    assert {t: rec["verdict"] for t, rec in records.items()} == PICK, {t: rec["evidence"] for t, rec in
                                                                       records.items()}
    ok = records["correct-seven-loops"]
    assert ok["variants"] and set(ok["variants"]) == {"cpu-student"} and len(ok["op_times"]) == 2
    assert ok["correctness"]["100"] == pytest.approx(0.84, abs=0.011)  # results/model-accuracy.json: ece408 at 100
    assert "W_out" in " ".join(records["does-not-compile"]["evidence"])
    assert records["wrong-last-row"]["stage"] == "check"
