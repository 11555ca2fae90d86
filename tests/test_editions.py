"""The course's editions (pyconv/core/editions.py): one table read by every task; the default stays Spring 2019;
a Mini-DNN edition runs the 86x86 network and prints what the course's m1..m3 printed. Grading by edition is
tested in test_grade_editions.py (a teachers' test: the handout leaves it out with the grader)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from built_variants import M2_DEFAULT, needs
from conftest import ROOT, needs_data

from pyconv.core import archs, editions
from pyconv.core.errors import PyconvError
from pyconv.core.model import available_models, load_model
from pyconv.tools import milestones

PROJECT_MILESTONES = ("1", "2", "3", "4", "final")


def invoke(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("name", list(editions.EDITIONS))
def test_every_edition_resolves_to_its_network_and_milestones(name):
    ed = editions.get(name)
    assert ed.name == name and re.fullmatch(r"20(1[7-9]|2[0-5])(sp|fa)", name)
    arch = archs.get_arch(ed.arch)
    assert arch.input_size == ed.input_size
    assert ed.framework in ("mxnet", "minidnn") and ed.minidnn == (name >= "2020")
    assert ed.model in available_models(), f"{name}'s model {ed.model} is not in the zoo"
    model = load_model(ed.model)
    assert model.arch == ed.arch and model.input_size == ed.input_size
    assert ed.student_files and all(f.path and f.signature for f in ed.student_files)
    for ms in ed.milestones:
        run = editions.resolve(name, ms.label)
        assert run.milestone in PROJECT_MILESTONES and run.model == ed.model and run.batch == ed.batch
    assert (ed.baseline_ms is None) == (ed.target_ms is None)
    if ed.baseline_ms is not None:
        assert ed.target_ms < ed.baseline_ms


def test_the_mini_dnn_generations_are_the_courses():
    gens = {name: e.interface for name, e in editions.EDITIONS.items() if e.minidnn}
    assert set(gens.values()) == {"2020fa", "2021", "2022fa", "2023fa", "2024sp"}
    assert gens["2020fa"] == "2020fa" and gens["2021fa"] == "2021" and gens["2023fa"] == "2023fa"
    assert "host_y" in editions.get("2020fa").student_files[1].signature  # one host call in 2020fa
    assert "prolog" in editions.get("2021sp").student_files[1].signature
    assert "const int S" in editions.get("2023fa").student_files[0].signature
    assert editions.get("2023fa").batch == 5000
    assert editions.get("2024sp").student_files[0].path.startswith("Project/project/src/layer/custom/")
    fa21 = editions.get("2021fa")
    assert [m.label for m in fa21.milestones] == ["1", "2", "3"]
    assert [editions.resolve("2021fa", m).milestone for m in ("1", "2", "3")] == ["2", "3", "final"]
    assert [editions.resolve("2020fa", m).milestone for m in ("2", "3", "4", "final")] == ["2", "3", "4", "final"]
    m1 = editions.get("2024sp").milestone("1")  # a CPU and a GPU program: --device picks
    assert (m1.project_milestone("cpu"), m1.project_milestone("gpu"), m1.project_milestone(None)) == ("2", "3", "2")


def test_the_default_edition_is_spring_2019_with_the_projects_numbering():
    assert editions.DEFAULT_EDITION == "2019sp"
    for m in PROJECT_MILESTONES:
        run = editions.resolve(None, m)
        assert (run.edition.name, run.label, run.milestone, run.model, run.batch) == ("2019sp", m, m, "ece408", 10000)
    assert editions.resolve(None, "2", model="ece408-fa19", batch="100").model == "ece408-fa19"


@pytest.mark.parametrize("bad", ["2030fa", "fa21", "", "2021FA "])
def test_an_unknown_edition_is_one_line_naming_the_known(bad):
    if bad.strip().lower() in editions.EDITIONS:
        assert editions.get(bad).name == bad.strip().lower()  # case and spaces forgiven
        return
    with pytest.raises(PyconvError) as e:
        editions.get(bad)
    text = str(e.value)
    assert "\n" not in text and f"unknown edition '{bad}'" in text and "2017fa" in text and "2025sp" in text


def test_an_unknown_milestone_of_an_edition_names_its_milestones():
    with pytest.raises(PyconvError, match=r"^unknown milestone '4' of edition 2021fa \(known: 1, 2, 3\)$"):
        editions.resolve("2021fa", "4")
    with pytest.raises(PyconvError, match=r"^unknown milestone '7' \(known: 1, 2, 3, 4, final\)$"):
        editions.resolve(None, "7")  # the default edition says what the milestones always said


@pytest.mark.parametrize("args", [
    ["milestone", "--edition", "2030fa", "--m", "1"],
    ["profile", "--edition", "2030fa", "--m", "3"],
    ["bench", "--edition", "2030fa", "--cpu"],
])
def test_cli_unknown_edition_is_one_line(args, tmp_path):
    dest = tmp_path / "dest"
    r = invoke(*[str(dest) if a == "DEST" else a for a in args], env={"PYCONV_LOGS": str(tmp_path / "logs")})
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.strip() == f"error: unknown edition '2030fa' (known: {', '.join(editions.EDITIONS)})"
    assert not dest.exists() and not (tmp_path / "logs").exists()


def test_the_86x86_network_is_the_courses():
    model = archs.empty_model("fa20", "x")
    assert model.summary() == ("1x86x86: conv 4@7x7 -> relu -> maxpool 2/2 -> conv 16@7x7 -> relu -> maxpool 4/4 -> "
                               "flatten -> FC 32 -> relu -> FC 10 -> softmax")
    shipped = load_model("ece408-86")
    assert [la.spec() for la in shipped.layers] == [la.spec() for la in model.layers]


@needs_data
def test_the_86x86_test_set():
    from pyconv.core import data

    x, y = data.load_test(86, 10)
    assert x.shape == (10, 1, 86, 86) and x.dtype == np.uint8 and y.shape == (10,)
    x28, y28 = data.load_test(28, 10)
    assert np.array_equal(y, y28)
    want = data.course_resize(x28[:, 0], 86)  # the same generator as the course's other sizes
    assert np.array_equal(x[:, 0], want)


# --- what a Mini-DNN edition prints ---

def _course_lines(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if not re.match(r"[\d.]+user |\d+inputs\+|log: ", ln)]


@needs_data
@needs("cpu-naive")
def test_a_mini_dnn_milestone_prints_the_courses_lines(tmp_path):
    r = invoke("milestone", "--edition", "2021fa", "--m", "1", "--batch", "100", "--impl", "cpu-naive",
               env={"PYCONV_LOGS": str(tmp_path)})
    assert r.returncode == 0, r.stdout + r.stderr
    lines = _course_lines(r.stdout)
    assert lines[:3] == ["Test batch size: 100", "Loading fashion-mnist data...Done", "Loading model...Done"]
    assert lines[3] == "Conv-CPU==" and lines[5] == "Conv-CPU=="
    for line in (lines[4], lines[6]):
        assert re.fullmatch(r"Op Time: \d+(\.\d+)?(e[-+]\d+)? ms", line), line
    assert lines[7].startswith("Layer check: 2 conv layer(s) match the reference")
    assert lines[8] == "" and lines[9].startswith("Test Accuracy: ")
    table = json.loads((ROOT / "results" / "model-accuracy.json").read_text())
    want = next(m["accuracy"]["100"] for m in table["models"] if m["name"] == "ece408-86")
    assert float(lines[9].split()[-1]) == pytest.approx(want, abs=1e-9)
    assert [p.name.split("-2026")[0][:24] for p in tmp_path.iterdir()] == ["2021fa-m1-ece408-86-b100"]


@needs_data
@pytest.mark.skipif(M2_DEFAULT != "cpu-fast", reason="the project's milestone 2 runs cpu-fast; a handout has none")
def test_the_default_edition_prints_what_it_printed(tmp_path):
    plain = invoke("milestone", "--m", "2", "--batch", "100", env={"PYCONV_LOGS": str(tmp_path / "a")})
    named = invoke("milestone", "--m", "2", "--batch", "100", "--edition", "2019sp",
                   env={"PYCONV_LOGS": str(tmp_path / "b")})
    assert plain.returncode == named.returncode == 0, plain.stderr + named.stderr

    def shape(out):
        return [re.sub(r"Op Time: [\d.]+", "Op Time: T", ln) for ln in _course_lines(out)]

    assert shape(plain.stdout) == shape(named.stdout)
    assert shape(plain.stdout)[:3] == ["Loading fashion-mnist data... done", "Loading model... done", "New Inference"]
    assert shape(plain.stdout)[3:5] == ["Op Time: T conv1 cpu-fast", "Op Time: T conv2 cpu-fast"]
    assert shape(plain.stdout)[-1] == "Correctness: 0.84 Model: ece408"


@pytest.mark.parametrize("edition,want", [
    ("2021fa", ["Conv-GPU==", "Layer Time: 61.1231 ms", "Op Time: 4.82135 ms", "Conv-GPU==", "Layer Time: 55.4437 ms",
                "Op Time: 16.6154 ms", "Layer check: ok", "", "Test Accuracy: 0.886", ""]),
    ("2020fa", ["Conv-GPU==", "Conv-GPU==", "Layer check: ok", "", "Test Accuracy: 0.886",
                "--------------------------------", "-           TIMINGS", "--------------------------------",
                "Layer 1 OpTime: 4.82135 ms", "Layer 1 LayerTime: 61.1231 ms", "Layer 2 OpTime: 16.6154 ms",
                "Layer 2 LayerTime: 55.4437 ms", ""]),
])
def test_the_gpu_lines_of_each_generation(edition, want, capsys):
    milestones.print_minidnn(editions.get(edition), "gpu", [0.00482135, 0.0166154], [0.0611231, 0.0554437],
                             0.886, ["Layer check: ok"])
    assert capsys.readouterr().out.split("\n")[:-1] == want


def test_a_layer_time_the_engine_did_not_measure_says_so(capsys):
    milestones.print_minidnn(editions.get("2021fa"), "gpu", [0.001], None, 0.5, [])
    assert "Layer Time: n/a (this engine times the convolution alone)" in capsys.readouterr().out
