"""`invoke test`: the project's tests as CI and the README run them, in two pytest runs: the fast tests (not marked
`slow`), then the slow ones, each printing its 20 slowest tests (--durations=20) and its wall time, so that a
suite growing slower shows where. Both run even when the first fails; the task fails when either does.

pytest's exit status 5 ("no tests collected") passes for one run (a selection with no slow test in it), but not for
both: a suite that ran nothing did not pass."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time

from ..core import paths
from ..core.errors import PyconvError

RUNS = (("fast", "not slow"), ("slow", "slow"))
NO_TESTS = 5  # pytest.ExitCode.NO_TESTS_COLLECTED


def argv_of(marker: str, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-m", marker, "--durations=20", *extra]


def run(only: str | None = None, pytest_args: str = "", echo=print) -> int:
    """Exit status: 0 when every run passed (or collected nothing, where another run ran tests), else 1."""
    runs = [r for r in RUNS if only in (None, r[0])]
    if not runs:
        raise PyconvError(f"--only must be one of {', '.join(name for name, _ in RUNS)}, got {only!r}")
    extra = shlex.split(pytest_args)
    codes = {}
    for name, marker in runs:
        echo(f"== {name} tests (pytest -m '{marker}')", flush=True)
        start = time.monotonic()
        codes[name] = subprocess.run(argv_of(marker, extra), cwd=paths.ROOT).returncode
        echo(f"== {name} tests: exit status {codes[name]} in {(time.monotonic() - start) / 60:.1f} min", flush=True)
    ran = [n for n, c in codes.items() if c != NO_TESTS]
    failed = [n for n, c in codes.items() if c not in (0, NO_TESTS)]
    if not ran:
        echo("error: no test was collected", file=sys.stderr)
        return 1
    if failed:
        echo(f"error: the {' and the '.join(failed)} tests failed (their summaries above)", file=sys.stderr)
        return 1
    return 0
