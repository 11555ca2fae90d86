"""`invoke test` (pyconv.tools.testsuite): two pytest runs, fast then slow, both run, and the task fails where either
fails; "no tests collected" passes for one run but not for both."""

from __future__ import annotations

import subprocess

import pytest

from pyconv.core.errors import PyconvError
from pyconv.tools import testsuite


@pytest.mark.parametrize("fast, slow, expected", [(0, 0, 0), (0, 5, 0), (5, 0, 0), (1, 0, 1), (0, 1, 1), (5, 5, 1),
                                                  (2, 0, 1)])
def test_both_runs_happen_and_either_failing_fails(monkeypatch, fast, slow, expected):
    ran = []

    def fake_run(argv, cwd):
        ran.append(argv)
        return subprocess.CompletedProcess(argv, fast if len(ran) == 1 else slow)

    monkeypatch.setattr(testsuite.subprocess, "run", fake_run)
    lines = []
    assert testsuite.run(pytest_args="-x -k 'a b'", echo=lambda *a, **k: lines.append(a[0])) == expected
    assert [a[a.index("-m", 2) + 1] for a in ran] == ["not slow", "slow"]
    assert all(a[-3:] == ["-x", "-k", "a b"] and "--durations=20" in a for a in ran)


def test_only_one_run_and_a_wrong_name_is_one_line(monkeypatch):
    ran = []
    monkeypatch.setattr(testsuite.subprocess, "run",
                        lambda argv, cwd: ran.append(argv) or subprocess.CompletedProcess(argv, 0))
    assert testsuite.run(only="slow", echo=lambda *a, **k: None) == 0
    assert len(ran) == 1 and ran[0][ran[0].index("-m", 2) + 1] == "slow"
    with pytest.raises(PyconvError, match="--only must be one of fast, slow"):
        testsuite.run(only="medium")
