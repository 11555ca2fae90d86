"""`invoke check --student DIR`: a student's files compiled alone, as the build would (nvcc for new-forward.cuh, no
GPU needed); a file that does not compile ends in one line naming it, with exit status 1."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

SLOT = ROOT / "native" / "student"


def invoke(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "invoke", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def last_line(r) -> str:
    lines = r.stderr.strip().splitlines()
    return lines[-1] if lines else ""


def test_without_a_folder_or_its_files_one_line(tmp_path):
    r = invoke("check")
    assert r.returncode == 2 and last_line(r).startswith("error: --student DIR is required"), r.stderr  # usage
    r = invoke("check", "--student", tmp_path)
    assert r.returncode == 1 and "holds neither new-forward.h nor new-forward.cuh" in last_line(r), r.stderr
    shutil.copy(SLOT / "new-forward.cuh", tmp_path)
    r = invoke("check", "--student", tmp_path, "--cuda-arch", "9x")
    assert r.returncode == 1 and "--cuda-arch must be one architecture number" in last_line(r), r.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
def test_the_skeleton_compiles_and_a_broken_file_does_not(tmp_path):
    ok = invoke("check", "--student", SLOT)
    assert ok.returncode == 0 and "new-forward.cuh compiles (nvcc, sm_90)" in ok.stdout, ok.stdout + ok.stderr
    text = (SLOT / "new-forward.cuh").read_text()
    broken = text.replace("const int H_out = H - K + 1;", "const int H_out = H - K + 1")  # a semicolon missing
    (tmp_path / "new-forward.cuh").write_text(broken)
    bad = invoke("check", "--student", tmp_path)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert last_line(bad) == (f"error: {tmp_path / 'new-forward.cuh'} does not compile (nvcc exited with status 2; "
                              "its messages are above)")
    # nvcc's own message names the student's file and line
    assert re.search(rf"{re.escape(str(tmp_path / 'new-forward.cuh'))}\(\d+\): error", bad.stdout + bad.stderr)
