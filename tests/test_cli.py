"""The command line parses like one (pyconv.cli.parsing): integer options typed INT and range-checked, `--m` spelled
as the course spells it and listed once, one milestone flag in every task, usage errors one line with status 2."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from invoke import Collection, Context
from invoke.parser import Parser

from pyconv.cli import parsing


def invoke(*args):
    return subprocess.run([sys.executable, "-m", "invoke", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYCONV_LOGS": os.devnull})


@pytest.fixture(scope="module")
def namespace() -> Collection:
    spec = importlib.util.spec_from_file_location("pyconv_tasks_under_test", ROOT / "tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, "ns", None) or Collection.from_module(module)


def parse(namespace, *argv):
    """The parsed task context of `<task> ARGV` (nothing runs)."""
    return Parser(contexts=namespace.to_contexts()).parse_argv(list(argv))[0]


def test_help_spells_the_milestone_flag_once_and_integers_as_int():
    r = invoke("milestone", "--help")
    assert r.returncode == 0, r.stderr
    options = r.stdout.split("Options:")[1]
    m_lines = [ln for ln in options.splitlines() if "-m STRING" in ln]
    assert len(m_lines) == 1 and "--m STRING" in m_lines[0], options
    assert "--batch=INT" in options and "--batch=STRING" not in options


@pytest.mark.parametrize("task", ["milestone", "plan", "profile", "sanitize", "grade"])
def test_every_task_takes_the_milestone_as_dash_dash_m(namespace, task):
    if task not in namespace.task_names:
        pytest.skip(f"no {task} task here (a student handout leaves the teachers' tasks out)")
    assert parse(namespace, task, "--m", "3").args["m"].value == "3"
    assert parse(namespace, task, "-m", "3").args["m"].value == "3"  # Invoke's own spelling still works


def test_sanitize_keeps_its_older_milestone_spelling(namespace):
    assert parse(namespace, "sanitize", "--milestone", "final").args["m"].value == "final"


@pytest.mark.parametrize("argv,value", [(["--batch", "100"], 100), (["--batch=7"], 7), (["-b", "10000"], 10000)])
def test_integer_options_arrive_as_integers(namespace, argv, value):
    assert parse(namespace, "milestone", "--m", "2", *argv).args["batch"].value == value


@pytest.mark.parametrize("argv,said", [
    (["milestone", "--m", "2", "--batch", "abc"], "error: --batch must be an integer between 1 and 10000, got 'abc'"),
    (["milestone", "--m", "2", "--batch", "1_0"], "error: --batch must be an integer between 1 and 10000, got '1_0'"),
    (["milestone", "--m", "2", "--batch", "0"], "error: --batch must be an integer between 1 and 10000, got 0"),
    (["milestone", "--m", "2", "--batch", "10001"], "error: --batch must be an integer between 1 and 10000, got 10001"),
    (["milestone", "--batch", "10"], "error: --m is required (1, 2, 3, 4 or final)"),
    (["milestone", "--m", "2", "--bacth", "10"], "error: No idea what '--bacth' is!"),
    (["milestone", "--m"], "error: --m needs a value"),
    (["bench", "--cpu", "--warmup", "-1"], "error: --warmup must be an integer >= 0, got -1"),
    (["train", "--arch", "fa17", "--name", "x", "--epochs", "0"], "error: --epochs must be an integer >= 1, got 0"),
    (["grade", "--memory-mb", "lots"], "error: --memory-mb must be an integer >= 1, got 'lots'"),
    (["build", "--jobs", "-2"], "error: --jobs must be an integer >= 0, got -2"),
    (["handout"], "error: --dest DIR is required (a new folder for the student edition)"),
    (["no-such-task"], "error: No idea what 'no-such-task' is!"),
])
def test_usage_errors_are_one_line_with_status_2(namespace, argv, said):
    if argv[0] in ("grade", "handout") and argv[0] not in namespace.task_names:
        pytest.skip(f"no {argv[0]} task here (a student handout leaves the teachers' tasks out)")
    r = invoke(*argv)
    assert r.returncode == parsing.USAGE, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.strip().splitlines() == [said]
    assert "Traceback" not in r.stdout + r.stderr


def test_other_errors_keep_status_1():
    r = invoke("milestone", "--m", "7", "--batch", "10")
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "error: unknown milestone '7' (known: 1, 2, 3, 4, final)"]


def test_a_task_called_from_python_checks_its_ranges_too(namespace):
    with pytest.raises(parsing.UsageError) as e:
        namespace["milestone"](Context(), m="2", batch="0")
    assert e.value.code == parsing.USAGE and e.value.message == (
        "error: --batch must be an integer between 1 and 10000, got 0")


@pytest.mark.parametrize("value,lo,hi,said", [
    ("12", 1, None, 12), (" 12", 1, None, "--x must be an integer >= 1, got ' 12'"),
    ("\u0661\u0662", 1, None, "--x must be an integer >= 1, got '\u0661\u0662'"), (True, 0, 1, None),
    (5, None, 4, "--x must be an integer, got 5"), ("-3", -3, 3, -3),
])
def test_check_int(value, lo, hi, said):
    if isinstance(said, int):
        assert parsing.check_int("--x", value, lo, hi) == said
        return
    with pytest.raises(parsing.UsageError) as e:
        parsing.check_int("--x", value, lo, hi)
    if said is not None:
        assert e.value.message == f"error: {said}"
