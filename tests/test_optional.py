"""A missing optional package is one line naming the extra that installs it (pyconv.core.optional), checked by
making each one unimportable: in this process through sys.modules, and in a child command line the same way."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

from pyconv.bench import nvbench
from pyconv.core import optional
from pyconv.core.errors import PyconvError

HINT = {"matplotlib": "pip install 'pyconv-ece408[bench]' or [grade] (in a checkout: pip install -e '.[bench]')",
        "ray": "pip install 'pyconv-ece408[grade]' (in a checkout: pip install -e '.[grade]')",
        "cuda.bench": "pip install 'pyconv-ece408[bench]' (in a checkout: pip install -e '.[bench]')",
        "torch": "pip install 'pyconv-ece408[torch]' (in a checkout: pip install -e '.[torch]')"}


def block(monkeypatch, module: str):
    """`import module` raises ModuleNotFoundError from now on in this test (a None entry in sys.modules)."""
    for name in list(sys.modules):
        if name == module or name.startswith(module + "."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)


@pytest.mark.parametrize("module", sorted(optional.EXTRA))
def test_a_missing_package_names_its_extra(monkeypatch, module):
    block(monkeypatch, module)
    with pytest.raises(optional.MissingExtra) as e:
        optional.require(module, "this test")
    assert str(e.value) == f"{optional.PACKAGE[module]} is not installed (this test needs it): {HINT[module]}"
    assert not optional.available(module)


def test_the_extras_named_are_the_distributions_own():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert project["name"] == optional.DISTRIBUTION
    wheels = {"matplotlib": "matplotlib", "ray": "ray", "cuda.bench": "cuda-bench", "torch": "torch"}
    for module, extra in optional.EXTRA.items():
        assert any(req.startswith(wheels[module]) for req in extras[extra]), (module, extra)


def test_a_package_that_fails_inside_its_own_import_is_not_called_missing(monkeypatch):
    error = ModuleNotFoundError("No module named 'kiwisolver'", name="kiwisolver")
    monkeypatch.setattr(optional.importlib, "import_module", lambda name: (_ for _ in ()).throw(error))
    with pytest.raises(PyconvError) as e:
        optional.require("matplotlib", "plots")
    assert not isinstance(e.value, optional.MissingExtra)
    assert str(e.value) == "matplotlib is installed but does not import: No module named 'kiwisolver'"


def test_grading_on_a_cluster_without_ray(monkeypatch):
    dispatch = pytest.importorskip("pyconv.grading.dispatch", reason="a student handout has no grader")
    block(monkeypatch, "ray")
    with pytest.raises(optional.MissingExtra, match=r"^Ray is not installed \(--cluster auto needs it\): pip insta"):
        list(dispatch.run_jobs([], "auto", print))


def test_nvbench_without_cuda_bench_says_which_extra(monkeypatch):
    block(monkeypatch, "cuda.bench")
    ok, why = nvbench.loadable()
    assert not ok and why == f"cuda-bench is not installed ({HINT['cuda.bench']})"


def run_without(module: str, *argv: str, cwd=ROOT):
    """`invoke ARGV` in a child where `module` cannot be imported."""
    code = ("import sys; sys.modules[sys.argv[1]] = None; from invoke.main import program; "
            "program.run(['invoke', *sys.argv[2:]])")
    return subprocess.run([sys.executable, "-c", code, module, *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYCONV_LOGS": os.devnull})


def test_the_report_without_matplotlib_is_one_line_and_writes_nothing(tmp_path):
    bench = ROOT / "results" / "bench-cpu-amd-epyc-2026-11-23.json"
    r = run_without("matplotlib", "report", "--json", str(bench), "--out", str(tmp_path / "r.md"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: matplotlib is not installed (the report's plots needs it): {HINT['matplotlib']}"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not (ROOT / "pyconv" / "tools" / "leaderboard.py").exists(), reason="a student handout has none")
def test_the_leaderboard_without_matplotlib_is_one_line_and_writes_nothing(tmp_path):
    grades = tmp_path / "grades"
    grades.mkdir()
    for record in (ROOT / "results" / "grades").glob("*-m3.json"):
        shutil.copy(record, grades)
    r = run_without("matplotlib", "leaderboard", "--grades", str(grades), "--out", str(tmp_path / "out"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: matplotlib is not installed (the leaderboard's plot needs it): {HINT['matplotlib']}"]
    assert not (tmp_path / "out").exists()
