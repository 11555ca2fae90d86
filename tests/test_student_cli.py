"""`invoke build --student DIR` and `invoke milestone --student DIR` on the CPU: a team's folder compiled into a
build folder of its own and run by milestone 2, with every conv layer named beside its Op Time and checked against
the reference outside the timed region (a wrong file is caught with its layer named); the skeleton in the slot is
one error line; `--record` writes the run's JSON record."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from built_variants import needs
from conftest import ROOT, needs_data

from pyconv.tools.build import student_build_dir

FIXTURES = ROOT / "tests" / "fixtures" / "student"
needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason="the finished student files (tests/fixtures/"
                                                                  "student/) are not in this tree: a student "
                                                                  "handout leaves them out (they are solutions)")
OP_TIME = re.compile(r"^Op Time: (\d+\.\d+) (\S+) (\S+)$", re.M)


def invoke(*args, env=None, timeout=900):
    return subprocess.run([sys.executable, "-m", "invoke", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def build_student(folder):
    r = invoke("build", "--student", folder, "--target", "_cpu")  # the CPU module only: the test needs no more
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    built = student_build_dir(str(folder))
    assert f"built and imported {built}" in r.stdout
    assert not list(built.glob("*.so")) == []  # the module lies in the build folder, never in pyconv/
    return built


def correctness(out: str) -> str:
    return re.search(r"^Correctness: (\S+)", out, re.M).group(1)


def test_milestone_without_a_student_build_says_what_to_run(tmp_path):
    (tmp_path / "new-forward.h").write_text("// nothing yet\n")
    r = invoke("milestone", "--m", "2", "--impl", "cpu-student", "--student", tmp_path, "--batch", 10)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"run `invoke build --student {tmp_path}` first" in r.stderr


def test_student_folder_without_the_files_is_one_line(tmp_path):
    r = invoke("build", "--student", tmp_path)
    assert r.returncode == 1 and "holds neither new-forward.h nor new-forward.cuh" in r.stderr


@needs_data
def test_skeleton_in_the_slot_is_one_error_line(tmp_path):
    from pyconv import _cpu

    if "cpu-student" not in {v["name"] for v in _cpu.variants()}:
        pytest.skip("pyconv._cpu built without the student glue")
    r = invoke("milestone", "--m", "2", "--impl", "cpu-student", "--batch", 10, env={"PYCONV_LOGS": str(tmp_path)})
    if "Op Time" in r.stdout:
        pytest.skip("the slot holds a finished file, not the skeleton")
    assert r.returncode != 0 and "Traceback" not in r.stdout + r.stderr
    errors = [line for line in r.stdout.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, r.stdout
    assert "conv1 (cpu-student)" in errors[0]
    assert "Remove this line and replace it with your implementation." in errors[0]


@pytest.mark.slow
@needs_data
@needs_fixtures
@needs("cpu-naive")
def test_good_student_folder_gives_cpu_naive_correctness_and_a_record(tmp_path):
    build_student(FIXTURES / "good")
    env = {"PYCONV_LOGS": str(tmp_path)}
    rec = tmp_path / "run.json"
    r = invoke("milestone", "--m", "2", "--impl", "cpu-student", "--student", FIXTURES / "good", "--batch", 100,
               "--record", rec, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    ops = OP_TIME.findall(r.stdout)
    assert [(layer, v) for _, layer, v in ops] == [("conv1", "cpu-student"), ("conv2", "cpu-student")]
    assert all(float(r.stdout.split("Op Time: ")[1].split()[0]) > 0 for _ in ops)  # the number: third word
    assert "Layer check: 2 conv layer(s) match the reference" in r.stdout
    naive = invoke("milestone", "--m", "2", "--impl", "cpu-naive", "--batch", 100, env=env)
    assert naive.returncode == 0, naive.stdout + naive.stderr
    assert correctness(r.stdout) == correctness(naive.stdout)
    data = json.loads(rec.read_text())
    assert data["milestone"] == "2" and data["batch"] == 100 and data["exit_reason"] == "ok"
    assert [(x["layer"], x["variant"], x["check"]["ok"]) for x in data["layers"]] == [
        ("conv1", "cpu-student", True), ("conv2", "cpu-student", True)]
    assert all(x["op_seconds"] > 0 for x in data["layers"])
    assert f"{data['correctness']:.4g}" == correctness(r.stdout)
    log = next(tmp_path.glob("m2-*cpu-student*.log")).read_text()
    head = log.splitlines()[:8]
    for word in ("# command:", "# commit:", "# date:", "# host CPU:", "# model:", "# native modules:", "# plan:"):
        assert any(line.startswith(word) for line in head + log.splitlines()[8:12]), (word, head)


@pytest.mark.slow
@needs_data
@needs_fixtures
def test_wrong_last_row_is_caught_by_the_layer_check(tmp_path):
    build_student(FIXTURES / "wrong_last_row")
    rec = tmp_path / "run.json"
    r = invoke("milestone", "--m", "2", "--impl", "cpu-student", "--student", FIXTURES / "wrong_last_row",
               "--batch", 100, "--record", rec, env={"PYCONV_LOGS": str(tmp_path)})
    assert r.returncode != 0
    assert re.search(r"^error: layer check: conv1 \(cpu-student\) does not match the reference: .* worst at "
                     r"\[\d+, \d+, 43, \d+\]", r.stdout, re.M), r.stdout  # conv1's last output row is 43
    assert "Correctness: " in r.stdout
    data = json.loads(rec.read_text())
    assert data["exit_reason"] == "layer check failed" and data["layers"][0]["check"]["ok"] is False


class _FakeGpu:
    """A stand-in pyconv._gpu: conv is the numpy reference (with a fusing variant's epilogue), or misses the last
    output row of the last image for the variant named `wrong`."""

    def __init__(self, wrong=None):
        self.wrong, self.batches = wrong, []

    def available(self):
        return True

    def conv(self, name, x, k):
        from pyconv import verify

        self.batches.append(len(x))
        y = verify.expected(x, k, "tanh-maxpool2" if name == "fused" else "none").copy()
        if name == self.wrong:
            y[-1, :, -1] = 0
        return y


@pytest.mark.parametrize("wrong", [None, "bad"])
def test_gpu_layer_check_reruns_each_layer_at_the_full_batch(monkeypatch, rng, wrong):
    from gpu_helpers import random_model

    from pyconv.plan import Choice, conv_sites
    from pyconv.tools import layercheck

    fake = _FakeGpu(wrong)
    monkeypatch.setitem(sys.modules, "pyconv._gpu", fake)
    model = random_model(rng, (1, 24, 24))
    x = rng.integers(0, 256, (40, 1, 24, 24), dtype="uint8")
    sites = conv_sites(model, len(x))
    names = ["fused" if s.tanh_pool_follows else "plain" for s in sites]
    names[-1] = "bad"
    choices = [Choice(s, n, "") for s, n in zip(sites, names)]
    checks = layercheck.check_gpu_layers(model, x, choices, {}, {"fused": "tanh-maxpool2"})
    assert fake.batches == [40] * len(sites)  # each layer alone, at the run's batch size
    assert [c.ok for c in checks[:-1]] == [True] * (len(sites) - 1)
    assert checks[-1].ok == (wrong is None)
    if wrong:
        assert checks[-1].where[0] == 39  # the image's position in the batch, not in the sample
