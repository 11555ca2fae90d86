"""pyconv.measure: the first time final meets a layer shape with no evidence on this GPU it checks and times the
candidates, writes the ranking to the GPU's evidence file and the plan says so; the next run measures nothing.
Driven by a stand-in for pyconv._gpu (reference inside, fixed timings) where no GPU is visible; the real module
under the gpu marker."""

from __future__ import annotations

import json

import numpy as np
import pytest
from built_variants import needs_final_choice
from gpu_helpers import StandInGpu, random_model, requires_gpu

from pyconv import evidence, measure, plan, variants
from pyconv.bench import evidence as build
from pyconv.core.errors import PyconvError
from pyconv.plan import ConvSite

GPU = "Stand-in GPU"
CONV1 = ConvSite(0, "conv1", 40, 1, 14, 14, 4, 5, True)
CONV2 = ConvSite(1, "conv2", 40, 4, 5, 5, 8, 3, False)


class FinalGpu(StandInGpu):
    """The stand-in's variants with final roles; fake-wrong (off in the last image) is the one that would be
    fastest, fake-fast (TF32) the fastest correct plain one, fake-plain the float32 one."""

    @staticmethod
    def variants():
        out = []
        for d in StandInGpu.variants():
            role = "default" if d["name"] == "fake-fused" else "candidate"
            out.append(dict(d, roles={"final": {"role": role, "reason": ""}}))
        out.append(dict(out[0], name="fake-fast", step=5, precision="tf32"))
        return out

    @staticmethod
    def conv(name, x, k):
        return StandInGpu.conv("fake-plain" if name == "fake-fast" else name, x, k)

    def time_conv(self, name, x, k, warmup, reps):
        self.timed.append(name)
        return [{"fake-wrong": 0.01, "fake-fast": 0.5, "fake-fused": 0.4}.get(name, 2.0)] * reps

    def time_conv_tanh_pool(self, name, x, k, warmup, reps):
        self.timed.append(name + "+tp")
        return [{"fake-fast": 0.8}.get(name, 3.0)] * reps


def registry(g):
    return [variants.from_dict(d, lambda s, n=d["name"]: g.why_unsupported(n, *s)) for d in g.variants()]


def measured(tmp_path, g, sites=(CONV1, CONV2), lines=None):
    return measure.evidence_for(list(sites), GPU, variants=registry(g), g=g, folder=tmp_path, reps=3,
                                echo=(lines.append if lines is not None else lambda _s: None))


def test_an_unseen_shape_is_measured_once_written_and_reused(tmp_path):
    g, lines = FinalGpu(), []
    ev = measured(tmp_path, g, lines=lines)
    path = evidence.path_for(GPU, tmp_path)
    assert ev.path == path and ev.measured_now == {CONV1.key, CONV2.key}
    assert "fake-wrong" not in g.timed and "fake-wrong+tp" not in g.timed  # failed its check: never timed
    assert any("failed: fake-wrong" in line for line in lines) and lines[-1] == f"final: wrote {path}"
    doc = json.loads(path.read_text())
    assert {(e["C"], e["tanh_pool_follows"]) for e in doc["layers"]} == {(1, True), (4, False)}
    assert all(t["source"] == evidence.FIRST_USE for e in doc["layers"] for t in e["ranking"])
    # conv1 (tanh + pool follow): fake-fused's launch 0.4 < fake-fast + tanh + pool 0.8 < fake-plain's 3.0
    assert [t.variant for t in ev.ranking(CONV1.key)] == ["fake-fused", "fake-fast", "fake-plain"]
    # conv2: fake-picky takes C >= 4 here; fake-wrong is in no ranking
    assert [t.variant for t in ev.ranking(CONV2.key)] == ["fake-fast", "fake-plain", "fake-picky"]

    p = plan.plan("final", [CONV1, CONV2], registry(g), ev)  # no precision verdict: float32 only
    assert p.impls == ["fake-fused", "fake-plain"]
    assert p.layers[0].why == ("measured now on this GPU in float32: fake-fused 0.4 ms at batch 40, 7.5x the next "
                               "(fake-plain)")
    assert p.layers[1].why.startswith("measured now on this GPU in float32: fake-plain 2 ms at batch 40, 1x the "
                                      "next (fake-picky); faster: fake-fast rounds to TF32")

    again = FinalGpu()
    ev2 = measured(tmp_path, again)
    assert again.timed == [] and ev2.measured_now == frozenset()  # the cache answers: nothing measured
    p2 = plan.plan("final", [CONV1, CONV2], registry(again), ev2)
    assert p2.impls == p.impls
    when = f"measured on this GPU when final first met this shape ({ev.ranking(CONV1.key)[0].date[:10]}, {path})"
    assert p2.layers[0].why.startswith(when)

    # a new shape in a later run: only it is measured, the file keeps the others
    conv3 = ConvSite(1, "conv2", 40, 4, 6, 6, 8, 3, False)
    third = FinalGpu()
    ev3 = measured(tmp_path, third, sites=(CONV1, conv3))
    assert ev3.measured_now == {conv3.key} and set(ev3.layers) == {CONV1.key, CONV2.key, conv3.key}
    assert third.timed and all(len(ev3.ranking(k)) for k in ev3.layers)


def test_tf32_is_chosen_only_where_the_labels_were_proven_unchanged(tmp_path):
    g = FinalGpu()
    ev = measured(tmp_path, g)
    ev.verdicts["d"] = evidence.Verdict("m", "d", True, "2000-01-01", "bench-e2e.json")
    p = plan.plan("final", [CONV1, CONV2], registry(g), ev, model_digest="d")
    assert p.impls == ["fake-fused", "fake-fast"] and p.fc_math == "tf32"
    assert p.layers[1].why == "measured now on this GPU: fake-fast 0.5 ms at batch 40, 4x the next (fake-plain)"


def test_a_shape_where_every_candidate_fails_is_one_line_and_nothing_is_written(tmp_path):
    class AllWrong(FinalGpu):
        @staticmethod
        def conv(name, x, k):
            return StandInGpu.conv("fake-wrong", x, k)

    g = AllWrong()
    with pytest.raises(PyconvError, match=r"conv layer 2 .*no candidate passed its check; failed: fake-plain") as e:
        measured(tmp_path, g, sites=(CONV2,))
    assert "\n" not in str(e.value) and g.timed == [] and not evidence.path_for(GPU, tmp_path).exists()


class HandoutGpu(StandInGpu):
    """A student handout's module: one variant, the student's, on request in final (native/student/student_gpu.cu);
    running or timing it here would be a measurement final has no use for."""

    @staticmethod
    def variants():
        (d,) = [d for d in StandInGpu.variants() if d["name"] == "fake-plain"]
        return [dict(d, name="gpu-student", step=100, roles={m: {"role": "on-request", "reason": "the student's"}
                                                             for m in ("m3", "m4", "final")})]

    @staticmethod
    def conv(name, *_inputs):
        pytest.fail(f"final measured {name}: there is nothing to choose between")

    time_conv = time_conv_tanh_pool = conv


def test_a_build_with_nothing_for_final_to_choose_measures_nothing(tmp_path):
    g = HandoutGpu()
    assert measured(tmp_path, g) is None  # no evidence file, none written
    assert not evidence.path_for(GPU, tmp_path).exists()
    p = plan.plan("final", [CONV1, CONV2], registry(g), None)
    assert p.impls == ["gpu-student", "gpu-student"]


def test_a_damaged_evidence_file_is_one_line_and_left_alone(tmp_path):
    path = evidence.path_for(GPU, tmp_path)
    for text in ("{not json", json.dumps({"format": "pyconv-evidence", "version": 1, "gpu": GPU, "layers": [{}]})):
        path.write_text(text)
        g = FinalGpu()
        with pytest.raises(PyconvError) as e:
            measured(tmp_path, g)
        msg = str(e.value)
        assert "\n" not in msg and str(path) in msg and "invoke evidence" in msg, msg
        assert g.timed == [] and path.read_text() == text  # nothing measured, nothing overwritten


def test_rebuild_keeps_first_use_measurements_that_no_bench_replaced(tmp_path):
    g = FinalGpu()
    measured(tmp_path / "evidence", g)
    src = evidence.path_for(GPU, tmp_path / "evidence")
    before = evidence.load(src)
    written = build.rebuild(tmp_path)  # no bench files in the folder: only the first-use measurements
    assert written == [src]
    after = evidence.load(src)
    assert after.layers == before.layers
    (tmp_path / "evidence" / "other.json").write_text("{broken")
    lines: list[str] = []
    build.rebuild(tmp_path, echo=lines.append)
    assert len(lines) == 1 and lines[0].startswith(f"replacing {tmp_path / 'evidence' / 'other.json'}")


@pytest.mark.gpu
@requires_gpu
@needs_final_choice
def test_final_measures_an_unseen_shape_on_the_gpu(tmp_path):
    """The real module: a random model's layers, at a batch the bench never ran, measured once and then reused."""
    from gpu_helpers import gpu

    from pyconv.plan import conv_sites

    name = gpu().device_info()["name"]
    model = random_model(np.random.default_rng(5), (1, 30, 30))
    sites = conv_sites(model, 64)
    ev = measure.evidence_for(sites, name, folder=tmp_path, echo=lambda _s: None)
    assert ev.measured_now == {s.key for s in sites}
    for s in sites:
        assert ev.ranking(s.key), s.label
        assert all(t.first_use and t.ms > 0 for t in ev.ranking(s.key))
    p = plan.plan("final", sites, variants.gpu_variants(), ev, model_digest=model.digest())
    assert all(c.why.startswith("measured now on this GPU in float32: ") for c in p.layers), p.lines()
    again = measure.evidence_for(sites, name, folder=tmp_path, echo=lambda _s: pytest.fail("measured again"))
    assert again.measured_now == frozenset()
