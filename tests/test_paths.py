"""Where things live (pyconv.core.paths): the checkout's own folders in a checkout; outside one (an installed
package, simulated by copying the package without the checkout around it), the shipped models and evidence as
package data and everything written in the per-user data folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

from pyconv.core import paths

PROBE = """
import json
from pyconv.core import model, paths
from pyconv import evidence
print(json.dumps({"in_checkout": paths.IN_CHECKOUT, "home": str(paths.HOME), "data": str(paths.DATA_FILE),
                  "logs": str(paths.LOGS), "results": str(paths.RESULTS), "models": str(paths.MODELS),
                  "user_models": str(paths.USER_MODELS), "available": model.available_models(),
                  "evidence": str(evidence.path_for("NVIDIA H200")), "about": paths.describe()}))
"""
ENV_VARS = ("PYCONV_HOME", "XDG_DATA_HOME", "PYCONV_DATASETS", "PYCONV_DATA_FILE", "PYCONV_LOGS")


@pytest.fixture
def installed(tmp_path):
    """A copy of the package as a wheel lays it out: Python files, the shipped models and evidence under data/."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "pyconv", site / "pyconv", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    (site / "pyconv" / "data" / "models").mkdir(parents=True)
    shutil.copy(ROOT / "datasets" / "models" / "ece408.h5", site / "pyconv" / "data" / "models")
    shutil.copytree(ROOT / "results" / "evidence", site / "pyconv" / "data" / "evidence")
    return site


def probe(site, tmp_path, **env):
    base = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    base.update(PYTHONPATH=str(site), HOME=str(tmp_path / "home"), **env)
    r = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=base, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_installed_package_writes_into_the_per_user_data_folder(installed, tmp_path):
    p = probe(installed, tmp_path)
    home = tmp_path / "home" / ".local" / "share" / "pyconv"
    assert not p["in_checkout"] and p["home"] == str(home)
    assert p["data"] == str(home / "datasets" / "fashion-mnist.h5")
    assert (p["logs"], p["results"]) == (str(home / "logs"), str(home / "results"))
    assert p["models"] == str(installed / "pyconv" / "data" / "models") and p["available"] == ["ece408"]
    assert p["user_models"] == str(home / "datasets" / "models")
    assert p["evidence"] == str(installed / "pyconv" / "data" / "evidence" / "nvidia-h200.json")
    assert str(home) in p["about"] and "PYCONV_HOME" in p["about"]


def test_xdg_data_home_and_pyconv_home_move_it(installed, tmp_path):
    assert probe(installed, tmp_path, XDG_DATA_HOME=str(tmp_path / "xdg"))["home"] == str(tmp_path / "xdg" / "pyconv")
    assert probe(installed, tmp_path, XDG_DATA_HOME="relative/xdg")["home"] == str(
        tmp_path / "home" / ".local" / "share" / "pyconv")  # a relative XDG_DATA_HOME is ignored, as the spec says
    p = probe(installed, tmp_path, XDG_DATA_HOME=str(tmp_path / "xdg"), PYCONV_HOME=str(tmp_path / "mine"))
    assert p["home"] == str(tmp_path / "mine") and p["data"] == str(tmp_path / "mine" / "datasets" / "fashion-mnist.h5")


def test_a_model_the_user_trained_or_imported_is_found_outside_a_checkout(installed, tmp_path):
    mine = tmp_path / "mine"
    (mine / "datasets" / "models" / "imported").mkdir(parents=True)
    shutil.copy(ROOT / "datasets" / "models" / "ece408.h5", mine / "datasets" / "models" / "trained.h5")
    shutil.copy(ROOT / "datasets" / "models" / "ece408.h5", mine / "datasets" / "models" / "imported" / "imp.h5")
    assert probe(installed, tmp_path, PYCONV_HOME=str(mine))["available"] == ["ece408", "trained", "imp"]


def test_a_checkout_keeps_its_own_folders():
    assert paths.IN_CHECKOUT and paths.HOME == ROOT and paths.RESULTS == ROOT / "results"
    assert paths.MODELS == (ROOT / "datasets" / "models" if "PYCONV_DATASETS" not in os.environ
                            else paths.DATASETS / "models")


def test_what_needs_a_checkout_says_so_in_one_line(installed, tmp_path):
    code = "from pyconv.core import paths; paths.require_checkout('building the native modules')"
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       env={**env, "PYTHONPATH": str(installed), "HOME": str(tmp_path / "home")})
    assert r.returncode == 1 and "building the native modules needs a checkout of the project" in r.stderr
