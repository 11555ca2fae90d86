"""What a team's code can and cannot do while it is graded, measured with a probe team
(tests/fixtures/safety/probe) under bubblewrap and with no sandbox program: writing outside its folder, reading
and writing another team's folder, a network connection to the grader's loopback, a fork bomb, filling its
folder, filling /tmp. The Safety section of docs/teachers.md is this test's table."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from pyconv.grading import sandbox
from pyconv.grading.job import JobSpec, run_job
from pyconv.grading.sandbox import Limits

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "tests" / "fixtures" / "safety" / "probe"
FAKE_PROJECT = ROOT / "tests" / "fixtures" / "fake_project" / "fake_project.py"
ISOLATIONS = ["none"] + (["bwrap"] if sandbox.detect_isolation() == "bwrap" else [])

pytestmark = pytest.mark.slow


def probe(tmp_path, monkeypatch, isolation, what, env=(), hide=(), **limits):
    monkeypatch.setenv("PYCONV_GRADE_ISOLATION", isolation)
    monkeypatch.setenv("PYCONV_SAFETY_PROBE", what)
    for k, v in dict(env).items():
        monkeypatch.setenv(k, v)
    spec = JobSpec(team="probe", members=[], files={"new-forward.h": (PROBE / "new-forward.h").read_text()},
                   milestone="2", model="ece408", batches=[4], runs=1, sanitize=False,
                   build_limits=Limits(wall_s=120), run_limits=Limits(wall_s=60, **limits), commit="test",
                   date="2026-01-01T00:00:00+00:00", root=str(ROOT),
                   project=["python3", str(FAKE_PROJECT)], scratch_base=str(tmp_path / "jobs"),
                   hide=[str(h) for h in hide], sandbox="bwrap" if isolation == "bwrap" else "none")
    result = run_job(spec)
    found = dict(re.findall(r"^PROBE (\S+) (.*)$", result.log, re.MULTILINE))
    return result.record, found


@pytest.fixture
def in_tree():
    """A folder inside the project's tree (not under /tmp, which bwrap replaces anyway), removed afterwards."""
    d = Path(tempfile.mkdtemp(prefix="safety-probe-", dir=ROOT / "build" if (ROOT / "build").is_dir() else ROOT))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_files_outside_the_team_folder(tmp_path, monkeypatch, isolation, in_tree):
    outside = in_tree / "outside.txt"
    other = in_tree / "submissions" / "other-team" / "new-forward.h"
    other.parent.mkdir(parents=True)
    other.write_text("// another team's work\n")
    rec, found = probe(tmp_path, monkeypatch, isolation, "files",
                       env={"PYCONV_SAFETY_OUTSIDE": str(outside), "PYCONV_SAFETY_OTHER_TEAM": str(other)},
                       hide=[in_tree / "submissions"])
    assert rec["verdict"] == "ok", rec
    assert found["write-cwd"] == "written"  # its own scratch folder is writable either way
    if isolation == "bwrap":
        assert found["write-outside"] == "Read-only file system" and not outside.exists()
        assert found["read-other-team"] == "No such file or directory"  # covered by an empty tmpfs
        assert other.read_text() == "// another team's work\n"
    else:
        assert found["write-outside"] == "written" and outside.exists()
        assert found["read-other-team"].startswith("read") and found["write-other-team"] == "written"


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_remounting_and_the_ray_token(tmp_path, monkeypatch, isolation, in_tree):
    outside = in_tree / "after-remount.txt"
    token = in_tree / "ray-token"
    token.write_text("secret")
    rec, found = probe(tmp_path, monkeypatch, isolation, "escape",
                       env={"PYCONV_SAFETY_OUTSIDE": str(outside), "RAY_AUTH_TOKEN_PATH": str(token),
                            "PYCONV_SAFETY_TOKEN": str(token),
                            "RAY_AUTH_TOKEN": "secret"})
    assert rec["verdict"] == "ok", rec
    assert found["ray-token-in-environment"] == "no"  # the job's environment has no RAY_* variable
    if isolation == "bwrap":
        assert found["remount"] == "refused" and not outside.exists()  # no capabilities left to remount with
        assert found["read-ray-token"] == "Permission denied" and token.read_text() == "secret"  # /dev/null over it
    else:
        assert found["write-after-remount"] == "written"  # nothing was read-only in the first place
        assert found["read-ray-token"] == "read 6 bytes"


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_network_to_the_graders_loopback(tmp_path, monkeypatch, isolation):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(90)
    accepted = []

    def accept():
        try:
            conn, _ = server.accept()
            accepted.append(True)
            conn.close()
        except OSError:
            pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        rec, found = probe(tmp_path, monkeypatch, isolation, "network",
                           env={"PYCONV_SAFETY_PORT": str(server.getsockname()[1])})
    finally:
        server.close()
        t.join(timeout=5)
    if isolation == "bwrap":
        assert found["connect"] == "Connection refused" and not accepted  # its own loopback, nobody listening
    else:
        assert found["connect"] == "connected" and accepted


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_fork_bomb_is_killed_whole(tmp_path, monkeypatch, isolation):
    rec, _ = probe(tmp_path, monkeypatch, isolation, "fork", processes=64)
    assert rec["verdict"] == "crashed" and "more than 64 processes" in rec["evidence"][0], rec
    # SIGKILLed processes take a moment to go under load: none may be left after a few seconds
    deadline = time.monotonic() + 10
    while True:
        left = subprocess.run(["pgrep", "-f", str(tmp_path / "jobs")], capture_output=True, text=True).stdout
        if left == "" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert left == ""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_filling_the_team_folder_is_stopped(tmp_path, monkeypatch, isolation):
    rec, _ = probe(tmp_path, monkeypatch, isolation, "disk", disk_mb=256)
    assert rec["verdict"] == "crashed" and "wrote more than 256 MiB" in rec["evidence"][0], rec


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_filling_tmp(tmp_path, monkeypatch, isolation):
    try:
        rec, found = probe(tmp_path, monkeypatch, isolation, "tmp")
    finally:
        for f in Path("/tmp").glob("pyconv-probe-fill-*"):
            f.unlink()
    filled = int(found["fill-tmp"].split()[0])
    if isolation == "bwrap":
        assert filled == 0  # /tmp is read-only like the rest (TMPDIR is the job's own folder)
    else:
        assert filled == 512  # the machine's own /tmp: only RLIMIT_FSIZE bounds each file
    assert rec["verdict"] == "ok"
