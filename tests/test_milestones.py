"""Milestones through the command line a user types: the course's lines, the time block, the log, bad input."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from built_variants import M2_PICK
from conftest import ROOT, needs_data

from pyconv.core.errors import PyconvError
from pyconv.tools import milestones, timelog


@pytest.mark.parametrize("bad", [0, -1, 10001, "abc", "1.5", 2.5, None, True])
def test_batch_out_of_range_or_not_integer(bad):
    with pytest.raises(PyconvError, match="batch must be an integer between 1 and 10000"):
        milestones.check_batch(bad)


@pytest.mark.parametrize("good,value", [(1, 1), ("100", 100), (10000, 10000), (50.0, 50)])
def test_batch_accepted(good, value):
    assert milestones.check_batch(good) == value


def test_unknown_milestone():
    with pytest.raises(PyconvError, match="unknown milestone '5'"):
        milestones.check_milestone("5")


def invoke(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("args,msg,code", [
    (["milestone", "--m", "7"], "unknown milestone '7'", 1),
    (["milestone", "--m", "2", "--batch", "0"], "--batch must be an integer between 1 and 10000, got 0", 2),
    (["milestone", "--m", "2", "--batch", "abc"], "--batch must be an integer", 2),
    (["milestone", "--m", "2", "--batch", "10001"], "got 10001", 2),
    (["milestone", "--batch", "100"], "--m is required", 2),
    (["milestone", "--m", "2", "--model", "nope"], "unknown model 'nope'", 1),
    (["milestone", "--m", "2", "--impl", "gpu-student", "--model", "MODEL"], "--impl must be one of", 1),
])
def test_cli_bad_input_is_one_line(args, msg, code, tmp_path):
    from pyconv.core.model import available_models

    if "MODEL" in args:
        if not available_models():
            pytest.skip("no model available")
        args = [available_models()[0] if a == "MODEL" else a for a in args]
    r = invoke(*args, env={"PYCONV_LOGS": str(tmp_path)})
    assert r.returncode == code, r.stderr
    assert msg in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert len(r.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir()), "a bad invocation must not write a log"


def test_missing_data_is_one_line(tmp_path):
    from pyconv.core.model import available_models

    if not available_models():
        pytest.skip("no model available")
    r = invoke("milestone", "--m", "2", "--batch", "10", "--model", available_models()[0],
               env={"PYCONV_DATASETS": str(tmp_path), "PYCONV_LOGS": str(tmp_path)})
    # models live under datasets too: either message is the one clear line
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert re.search(r"fashion-mnist.h5 is missing: run `invoke data` first|unknown model", r.stderr)


@needs_data
def test_milestone2_end_to_end_on_a_model_file(course_model, tmp_path):
    r = invoke("milestone", "--m", "2", "--batch", "100", "--model", str(course_model.path), "--impl", M2_PICK,
               env={"PYCONV_LOGS": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    out = r.stdout
    lines = out.splitlines()
    assert lines[0] == "Loading fashion-mnist data... done"
    assert lines[1] == "Loading model... done"
    assert lines[2] == "New Inference"
    assert len(re.findall(rf"^Op Time: \d+\.\d+ \S+ {M2_PICK}$", out, re.M)) == 2  # the number is the third word
    assert "Correctness: 0.84 Model: course-sp19" in out
    logs = list(Path(tmp_path).glob("m2-*.log"))
    assert len(logs) == 1
    text = logs[0].read_text()
    assert "Correctness: 0.84 Model: course-sp19" in text
    rec = timelog.parse_gnu(text)
    assert rec["elapsed"] > 0 and rec["maxresident_kb"] > 10000 and rec["exit_status"] == 0


@needs_data
def test_milestone2_posix_time(course_model, tmp_path):
    r = invoke("milestone", "--m", "2", "--batch", "10", "--model", str(course_model.path), "--posix",
               "--impl", M2_PICK, env={"PYCONV_LOGS": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert timelog.parse_posix(r.stdout)["real"] > 0


def test_every_task_documents_its_flags():
    """`invoke --list` shows every task, and `invoke <task> --help` works for each (no flag swallows --help)."""
    r = invoke("--list")
    assert r.returncode == 0
    tasks = [line.split()[0] for line in r.stdout.splitlines()[2:] if line.startswith("  ") and line.split()
             and not line.startswith("    ")]
    assert {"build", "data", "milestone", "bench", "profile", "sanitize", "import-mxnet", "train"} <= set(tasks)
    for t in tasks:
        h = invoke(t, "--help")
        assert h.returncode == 0 and "Usage:" in h.stdout, (t, h.stderr)
