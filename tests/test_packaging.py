"""The distribution: its metadata, the `pyconv` program (python -m pyconv, the console script's target) run from
outside the checkout, and (slow) the wheel pip builds: the native module, the shipped models, py.typed."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tomllib
import zipfile

import pytest
from conftest import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def pyconv(*argv, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "pyconv", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def test_metadata_a_user_expects():
    project = PROJECT["project"]
    assert project["name"] == "pyconv-ece408" and project["license"] and project["classifiers"]
    assert project["urls"] and "Typing :: Typed" in project["classifiers"]
    assert project["scripts"] == {"pyconv": "pyconv.__main__:main"}
    assert (ROOT / "pyconv" / "py.typed").is_file()
    assert set(project["optional-dependencies"]) >= {"gpu", "bench", "grade", "torch", "test"}
    assert PROJECT["build-system"]["build-backend"] == "scikit_build_core.build"


def test_the_program_runs_the_tasks_from_any_folder(tmp_path):
    r = pyconv("--help", cwd=tmp_path)
    assert r.returncode == 0 and "Usage: pyconv" in r.stdout and str(ROOT) in r.stdout, r.stdout + r.stderr
    listed = pyconv("--list", cwd=tmp_path)
    assert listed.returncode == 0 and "milestone" in listed.stdout and "data" in listed.stdout
    r = pyconv("milestone", "--m", "2", "--batch", "0", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: --batch must be an integer between 1 and 10000, got 0"]
    missing = tmp_path / "none.h5"
    r = pyconv("milestone", "--m", "2", "--batch", "1", cwd=tmp_path, env={"PYCONV_DATA_FILE": str(missing),
                                                                          "PYCONV_LOGS": str(tmp_path / "logs")})
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        f"error: {missing} is missing: run `pyconv data` first"]  # the advice names this program


@pytest.mark.slow
@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("scikit_build_core", "pybind11")),
                    reason="building a wheel offline needs scikit-build-core and pybind11 installed")
def test_pip_wheel_builds_a_wheel_with_the_module_and_the_models(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
                        str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (wheel,) = tmp_path.glob("pyconv_ece408-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert any(n.startswith("pyconv/_cpu.") and n.endswith(".so") for n in names)
    assert {"pyconv/py.typed", "pyconv/data/models/ece408.h5", "pyconv/cli/tasks.py"} <= names
    assert not any(n.startswith(("tests/", "native/", "pyconv/data/models/imported/")) for n in names)
