"""pyconv.plan: the one selection function, on synthetic variant lists (every rule, no native module needed) and on
the real registry with the committed H200 evidence (results/evidence/nvidia-h200.json), where the plan must equal
what the milestones chose before the plan existed."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
from built_variants import needs
from conftest import COURSE_PARAMS, COURSE_SYMBOL, needs_course
from gpu_helpers import random_model, requires_gpu_module

from pyconv import evidence, plan
from pyconv.core import paths
from pyconv.core.errors import PyconvError
from pyconv.evidence import Evidence, LayerEvidence, Timing, Verdict
from pyconv.plan import ConvSite, conv_sites
from pyconv.variants import NUMPY, Role, Variant

# ------------------------------------------------------------------------------------------ synthetic registry


def V(name, step, m3="on-request", m4="on-request", final="candidate", epilogue="none", precision="fp32",
      refuses=None, device="gpu"):
    """A GPU variant; refuses(shape) -> why not ('' or None: takes it)."""
    roles = {"m3": Role(m3, "" if m3 in ("default", "candidate") else "r3"),
             "m4": Role(m4, "" if m4 in ("default", "candidate") else "r4"),
             "final": Role(final, "" if final in ("default", "candidate") else f"{name} is not for final")}
    return Variant(name=name, step=step, summary="synthetic", device=device, epilogue=epilogue, precision=precision,
                   roles=roles, unsupported=(lambda s: refuses(s) or "") if refuses else None)


def ladder():
    return [
        V("base", 0, m3="default", m4="candidate"),
        V("tiled", 1, m4="candidate"),
        V("direct", 2, m4="default", final="default", refuses=lambda s: "direct: C > 8" if s[1] > 8 else ""),
        V("fused", 3, m4="candidate", final="default", epilogue="tanh-maxpool2"),
        V("tf32", 4, precision="tf32"),
        V("tf32-fused", 5, final="on-request", epilogue="tanh-maxpool2", precision="tf32"),
        V("retired", 6, m3="never", m4="never", final="never"),
        Variant("cpu-a", 0, "s", "cpu", roles={"m2": Role("default")}),
        Variant("cpu-b", 1, "s", "cpu", roles={"m2": Role("on-request", "slow")}),
        NUMPY,
    ]


SITES = [ConvSite(0, "conv1", 100, 1, 48, 48, 6, 5, True), ConvSite(1, "conv2", 100, 6, 22, 22, 16, 5, False)]
WIDE = ConvSite(1, "conv2", 100, 12, 33, 33, 24, 7, False)  # C > 8: "direct" refuses it


def ev(gpu="G", **rankings):
    """Evidence with a ranking per site index: ev(conv1=[("fused", 0.2), ...])."""
    layers = {}
    for site in (*SITES, WIDE):
        r = rankings.get(site.layer if site is not WIDE else "wide")
        if r:
            layers[site.key] = LayerEvidence(site.C, site.H, site.W, site.M, site.K, site.tanh_pool_follows, 10000,
                                             tuple(Timing(n, ms, "2000-01-01", "bench-x.json") for n, ms in r))
    return Evidence(gpu=gpu, layers=layers, fallback_order=("tiled", "base"))


def test_conv_sites_of_a_model():
    m = random_model(np.random.default_rng(0), (1, 20, 20))
    s = conv_sites(m, 7)
    assert [(x.index, x.B, x.C, x.H, x.K, x.tanh_pool_follows) for x in s] == [(0, 7, 1, 20, 5, True),
                                                                              (1, 7, 4, 8, 3, False)]
    assert s[1].key == (4, 8, 8, 8, 3, False) and "conv layer 2" in s[1].label


def test_milestone_2_and_3_run_their_default_everywhere():
    p = plan.plan("2", SITES, ladder())
    assert p.device == "cpu" and p.impls == ["cpu-a", "cpu-a"] and "default" in p.layers[0].why
    p = plan.plan("3", SITES, ladder())
    assert p.device == "gpu" and p.impls == ["base", "base"] and p.fc_math == "fp32" and p.chunks == 1


def test_milestone_4_default_then_the_first_candidate_that_takes_the_layer():
    assert plan.plan("4", SITES, ladder()).impls == ["direct", "direct"]
    p = plan.plan("4", [SITES[0], WIDE], ladder())
    assert p.impls == ["direct", "base"]  # base is the first m4 candidate in ladder order
    assert "direct: C > 8" in p.layers[1].why


def test_a_build_without_a_default_runs_its_first_on_request_variant():
    """A student handout: only the student's variant, on request everywhere (final included, as
    native/student/student_gpu.cu registers it)."""
    student = [V("gpu-student", 100, final="on-request"),
               Variant("cpu-student", 100, "s", "cpu", roles={"m2": Role("on-request", "x")}), NUMPY]
    assert plan.plan("3", SITES, student).impls == ["gpu-student"] * 2
    assert plan.plan("4", SITES, student).impls == ["gpu-student"] * 2
    assert plan.plan("2", SITES, student).impls == ["cpu-student"] * 2  # never the numpy reference
    # final has nothing to choose between: the student's, with or without evidence (a handout carries the
    # project's evidence file, which ranks the ladder's variants it left out)
    for evid in (None, ev(conv1=[("fused", 0.2), ("base", 0.5)], conv2=[("direct", 0.3)])):
        p = plan.plan("final", SITES, student, evid)
        assert p.impls == ["gpu-student"] * 2, p.lines()
        assert all(c.why == "no final default in this build: the first variant that runs on request of the ladder"
                   for c in p.layers), p.lines()
    # a variant that cannot take a layer is named, as in milestones 3 and 4
    picky = [V("gpu-student", 100, final="on-request", refuses=lambda s: "a student's file: too big")]
    with pytest.raises(PyconvError, match=r"final: no variant of this build can run conv layer 1 .*too big"):
        plan.plan("final", SITES, picky)


def student_build():
    return [V("gpu-student", 100, final="on-request"),
            Variant("cpu-student", 100, "s", "cpu", roles={"m2": Role("on-request", "x")}), NUMPY]


def test_a_student_builds_final_uses_only_a_tf32_verdict_earned_with_its_own_variant():
    """A handout carries the project's evidence, whose TF32 verdicts were earned end to end with the project's
    convolutions: final runs the student's, so its fully connected layers stay float32 until the student's own
    `invoke bench --end-to-end` checks TF32 with gpu-student on every conv layer."""
    e = ev(conv1=[("fused", 0.2)], conv2=[("direct", 0.3)])
    e.verdicts["d"] = Verdict("m", "d", True, "2000-01-02", "bench-e2e-x.json", 0, ("fused", "tf32"))
    p = plan.plan("final", SITES, student_build(), e, model_digest="d")
    assert p.impls == ["gpu-student"] * 2 and p.fc_math == "fp32"
    assert p.precision == ("float32, fully connected layers included: the end-to-end bench behind the "
                           "reduced-precision verdict for these weights (bench-e2e-x.json, 2000-01-02) ran fused, "
                           "tf32, not this build's gpu-student; `invoke bench --end-to-end` checks reduced precision "
                           "with it")
    assert p.lines()[0] == "final on the GPU: " + p.precision
    assert p.lines()[1].startswith("fully connected layers: fp32; 4 chunk(s) on 4 streams")
    # an evidence file written before the variants were recorded: not the student's either
    e.verdicts["d"] = Verdict("m", "d", True, "2000-01-02", "bench-e2e-x.json", 0)
    p = plan.plan("final", SITES, student_build(), e, model_digest="d")
    assert p.fc_math == "fp32" and "does not record which variants it ran, not this build's gpu-student" in p.precision
    # the same bench with the student's variant on one layer only: still not this build's network
    e.verdicts["d"] = Verdict("m", "d", True, "2000-01-02", "bench-e2e-x.json", 0, ("gpu-student", "tf32"))
    assert plan.plan("final", SITES, student_build(), e, model_digest="d").fc_math == "fp32"
    # the student's own end-to-end bench: its verdict is the build's, either way
    e.verdicts["d"] = Verdict("m", "d", True, "2000-01-03", "bench-e2e-mine.json", 0, ("gpu-student", "gpu-student"))
    p = plan.plan("final", SITES, student_build(), e, model_digest="d")
    assert p.fc_math == "tf32" and p.impls == ["gpu-student"] * 2
    assert p.precision == ("reduced precision (TF32 fully connected layers, float32 conv layers) allowed: no label "
                           "differs from PyTorch's with this build's gpu-student (bench of 2000-01-03)")
    e.verdicts["d"] = Verdict("m", "d", False, "2000-01-03", "bench-e2e-mine.json", 3, ("gpu-student",) * 2)
    p = plan.plan("final", SITES, student_build(), e, model_digest="d")
    assert p.fc_math == "fp32" and p.precision == "float32: reduced precision changed labels in the end-to-end bench"
    # the end-to-end bench forces each precision to measure it; the project's build reads the verdict as before
    assert plan.plan("final", SITES, student_build(), e, model_digest="d", precision="reduced").fc_math == "tf32"
    e.verdicts["d"] = Verdict("m", "d", True, "2000-01-02", "bench-e2e-x.json", 0)
    assert plan.plan("final", SITES, ladder(), e, model_digest="d").fc_math == "tf32"


def test_a_handouts_final_keeps_the_course_models_fully_connected_layers_in_float32():
    """The committed H200 evidence (which a handout ships) allows TF32 for the shipped `ece408` weights; with the
    student's variant only, final reads that verdict as the project's, not the student's."""
    from pyconv.core.model import load_model

    model = load_model("ece408")
    e = evidence.for_gpu("NVIDIA H200", paths.EVIDENCE)
    verdict = e.verdict(model.digest())
    assert verdict.reduced_precision_ok and verdict.impls and "gpu-student" not in verdict.impls
    sites = conv_sites(model, 10000)
    p = plan.plan("final", sites, student_build(), e, model_digest=model.digest())
    assert p.impls == ["gpu-student"] * len(sites) and p.fc_math == "fp32"
    assert f"({verdict.source}, {verdict.date}) ran {', '.join(verdict.impls)}, not this build's gpu-student" \
        in p.precision


def test_impl_runs_on_every_layer_or_names_the_layer_it_cannot_take():
    assert plan.plan("4", SITES, ladder(), impl="tiled").impls == ["tiled", "tiled"]
    with pytest.raises(PyconvError, match=r"--impl fused cannot run conv layer 2 \(conv2.*do not follow"):
        plan.plan("4", SITES, ladder(), impl="fused")
    with pytest.raises(PyconvError, match=r"--impl direct cannot run conv layer 2 \(conv2: C=12.*direct: C > 8"):
        plan.plan("final", [SITES[0], WIDE], ladder(), impl="direct")
    with pytest.raises(PyconvError, match="not allowed in milestone 4: r4"):
        plan.plan("4", SITES, ladder(), impl="retired")
    with pytest.raises(PyconvError, match=r"unknown GPU implementation 'nope' \(known: base, tiled"):
        plan.plan("3", SITES, ladder(), impl="nope")
    with pytest.raises(PyconvError, match="milestone 2 runs on the CPU: --impl must be one of cpu-a, cpu-b, numpy"):
        plan.plan("2", SITES, ladder(), impl="base")
    assert plan.plan("2", SITES, ladder(), impl="numpy").impls == ["numpy", "numpy"]


def test_impl_with_fallback_takes_milestone_4s_then_3s_default_where_it_cannot():
    p = plan.plan("4", SITES, ladder(), impl="fused", fallback=True)
    assert p.impls == ["fused", "direct"] and "--fallback" in p.layers[1].why
    p = plan.plan("4", [SITES[0], WIDE], ladder(), impl="fused", fallback=True)
    assert p.impls == ["fused", "base"]  # direct refuses C > 8: milestone 3's default


def test_an_impl_plan_is_float32_and_untuned_even_for_final():
    p = plan.plan("final", SITES, ladder(), ev(conv2=[("tf32", 0.1)]), impl="base", model_digest="d")
    assert p.fc_math == "fp32" and not p.tuned and p.impls == ["base", "base"] and p.chunks == 4


def test_final_takes_the_fastest_measured_variant_it_may_choose():
    e = ev(conv1=[("tf32-fused", 0.1), ("fused", 0.2), ("base", 0.9)], conv2=[("tf32", 0.3), ("direct", 0.6)])
    e.verdicts["d"] = Verdict("m", "d", True, "2000-01-02", "bench-e2e.json")
    p = plan.plan("final", SITES, ladder(), e, model_digest="d")
    assert p.impls == ["fused", "tf32"] and p.fc_math == "tf32" and p.tuned
    assert p.precision == ("reduced precision (TF32 conv layers, TF32 fully connected layers) allowed: no label "
                           "differs from PyTorch's (bench of 2000-01-02)")  # a file without its variants: TF32
    assert "tf32-fused is on-request in final: tf32-fused is not for final" in p.layers[0].why
    assert "0.3 ms" in p.layers[1].why and "bench-x.json" in p.layers[1].why
    # float32: no verdict for these weights, or a verdict against TF32, or forced
    for digest in ("other", None):
        q = plan.plan("final", SITES, ladder(), e, model_digest=digest)
        assert q.impls == ["fused", "direct"] and q.fc_math == "fp32" and q.precision.startswith("float32: no end")
    e.verdicts["d"] = Verdict("m", "d", False, "2000-01-03", "bench-e2e.json")
    q = plan.plan("final", SITES, ladder(), e, model_digest="d")
    assert q.fc_math == "fp32" and q.precision == "float32: reduced precision changed labels in the end-to-end bench"
    assert plan.plan("final", SITES, ladder(), e, model_digest="d", precision="reduced").impls == ["fused", "tf32"]


def test_an_fp16_variant_is_reduced_precision_allowed_only_by_a_verdict_that_ran_fp16():
    """One FP16 pass rounds like TF32 (and overflows beyond 65504): never in a float32 plan; a verdict that kept
    every label allows it only where its bench ran an FP16 variant (files that do not record their variants predate
    FP16 variants: TF32 only); the end-to-end bench's forced reduced plan takes it, so that its verdict checks it."""
    half = V("half", 7, precision="fp16")
    vs = [*ladder(), half]
    assert half.reduced_precision and not V("x", 9).reduced_precision
    e = ev(conv2=[("half", 0.05), ("tf32", 0.1), ("direct", 0.6)])
    # no verdict: float32 only
    p = plan.plan("final", SITES, vs, e, model_digest="d")
    assert p.impls == ["fused", "direct"] and p.fc_math == "fp32"
    assert p.precision == "float32: no end-to-end bench of these weights on this GPU has checked reduced precision"
    assert "measured on this shape in float32 among" in p.layers[1].why
    assert p.layers[1].why.endswith("faster: half rounds to FP16")
    # a verdict whose bench ran TF32 only: TF32 allowed, FP16 left out and the line says why
    e.verdicts["d"] = Verdict("m", "d", True, "2000-01-02", "bench-e2e.json", 0, ("fused", "tf32"))
    p = plan.plan("final", SITES, vs, e, model_digest="d")
    assert p.impls == ["fused", "tf32"] and p.fc_math == "tf32"
    assert p.precision == ("reduced precision (TF32 conv layers, TF32 fully connected layers) allowed: no label "
                           "differs from PyTorch's (bench of 2000-01-02); not FP16 conv layers: that bench ran no FP16 "
                           "variant in a configuration that kept every label (`invoke bench --end-to-end` checks "
                           "final's fastest reduced plan, then its fully connected layers in TF32, then TF32 alone, "
                           "then float32 conv layers)")
    assert "measured on this shape in float32 or TF32 among" in p.layers[1].why
    assert p.layers[1].why.endswith("faster: half rounds to FP16")
    e.verdicts["d"] = Verdict("m", "d", True, "2000-01-02", "bench-e2e.json")  # variants not recorded: the same
    assert plan.plan("final", SITES, vs, e, model_digest="d").impls == ["fused", "tf32"]
    # the end-to-end bench measures final's reduced plan: FP16 where it is fastest
    assert plan.plan("final", SITES, vs, e, model_digest="d", precision="reduced").impls == ["fused", "half"]
    assert plan.plan("final", SITES, vs, e, model_digest="d", precision="fp32").impls == ["fused", "direct"]
    # and, where that moved a label, its plan with TF32 alone
    p = plan.plan("final", SITES, vs, e, model_digest="d", precision="tf32")
    assert p.impls == ["fused", "tf32"] and p.fc_math == "tf32"
    with pytest.raises(PyconvError, match="unknown precision 'fp16'"):
        plan.plan("final", SITES, vs, e, model_digest="d", precision="fp16")
    # its verdict, having run half, allows FP16 in the conv layers (and TF32 in the fully connected layers, with
    # which it ran them; not TF32 in the conv layers, which it did not run)
    e.verdicts["d"] = Verdict("m", "d", True, "2000-01-03", "bench-e2e.json", 0, ("fused", "half"))
    p = plan.plan("final", SITES, vs, e, model_digest="d")
    assert p.impls == ["fused", "half"] and p.fc_math == "tf32"
    assert p.precision.startswith("reduced precision (FP16 conv layers, TF32 fully connected layers) allowed: no "
                                  "label differs from PyTorch's (bench of 2000-01-03); not TF32 conv layers")
    assert "measured on this shape in float32 or FP16 among" in p.layers[1].why and "faster" not in p.layers[1].why
    # ... and a verdict against it leaves every reduced variant out
    e.verdicts["d"] = Verdict("m", "d", False, "2000-01-03", "bench-e2e.json", 2, ("fused", "half"))
    p = plan.plan("final", SITES, vs, e, model_digest="d")
    assert p.impls == ["fused", "direct"] and p.fc_math == "fp32"
    assert p.precision == "float32: reduced precision changed labels in the end-to-end bench"
    assert plan.verdict_precisions(("fused", "half"), vs) == {"fp16"}
    assert plan.verdict_precisions(("fused", "tf32", "half"), vs) == {"tf32", "fp16"}
    assert plan.verdict_precisions(("fused", "direct"), vs) == set()  # float32 convs: the FC layers' TF32 only
    assert plan.verdict_precisions(None, vs) == {"tf32"}
    # such a verdict (the bench's float32-conv candidate kept every label): FC in TF32, every conv in float32
    e.verdicts["d"] = Verdict("m", "d", True, "2000-01-04", "bench-e2e.json", 0, ("fused", "direct"))
    p = plan.plan("final", SITES, vs, e, model_digest="d")
    assert p.impls == ["fused", "direct"] and p.fc_math == "tf32"
    assert p.precision.startswith("reduced precision (TF32 fully connected layers, float32 conv layers) allowed")
    assert plan.plan("final", SITES, vs, e, model_digest="d", precision="fc-tf32").impls == ["fused", "direct"]
    assert plan.plan("final", SITES, vs, e, model_digest="d", precision="fc-tf32").fc_math == "tf32"


def test_fp16_fully_connected_layers_where_the_last_conv_writes_half_and_only_as_a_verdict_ran_them():
    """The reduced plan runs the FC layers in FP16 where the last conv's variant writes its output in half (the GEMM
    then reads half the bytes), else TF32; reduced-fc-tf32 keeps TF32; a verdict allows the FC math it ran (TF32
    where the file does not record it)."""
    import dataclasses

    half_out = dataclasses.replace(V("half", 7, precision="fp16"), writes_f16=True)
    vs = [*ladder(), half_out]
    e = ev(conv2=[("half", 0.05), ("tf32", 0.1), ("direct", 0.6)])
    p = plan.plan("final", SITES, vs, e, model_digest="d", precision="reduced")
    assert p.impls == ["fused", "half"] and p.fc_math == "fp16"
    p = plan.plan("final", SITES, vs, e, model_digest="d", precision="reduced-fc-tf32")
    assert p.impls == ["fused", "half"] and p.fc_math == "tf32"
    # the last conv's variant cannot write half: TF32, whose GEMM needs no rounding pass first
    e2 = ev(conv2=[("tf32", 0.1), ("direct", 0.6)])
    assert plan.plan("final", SITES, vs, e2, model_digest="d", precision="reduced").fc_math == "tf32"
    # verdicts: FP16 FC only where the bench ran it
    e.verdicts["d"] = Verdict("m", "d", True, "2000-01-03", "bench-e2e.json", 0, ("fused", "half"), "fp16")
    p = plan.plan("final", SITES, vs, e, model_digest="d")
    assert p.impls == ["fused", "half"] and p.fc_math == "fp16"
    assert p.precision.startswith("reduced precision (FP16 conv layers, FP16 fully connected layers) allowed")
    assert "fully connected layers: fp16;" in "\n".join(p.lines())
    e.verdicts["d"] = Verdict("m", "d", True, "2000-01-03", "bench-e2e.json", 0, ("fused", "half"))
    assert plan.plan("final", SITES, vs, e, model_digest="d").fc_math == "tf32"  # not recorded: TF32
    e.verdicts["d"] = Verdict("m", "d", True, "2000-01-03", "bench-e2e.json", 0, ("fused", "half"), "tf32")
    assert plan.plan("final", SITES, vs, e, model_digest="d").fc_math == "tf32"
    e.verdicts["d"] = Verdict("m", "d", False, "2000-01-03", "bench-e2e.json", 1, ("fused", "half"), "fp16")
    assert plan.plan("final", SITES, vs, e, model_digest="d").fc_math == "fp32"


def test_final_skips_a_measured_winner_that_cannot_take_the_layer():
    e = ev(wide=[("direct", 1.0), ("tiled", 2.0)])
    p = plan.plan("final", [SITES[0], WIDE], ladder(), e)
    assert p.impls[1] == "tiled" and "not taken: direct: C > 8" in p.layers[1].why


def test_final_without_a_measurement_runs_the_default_then_the_fallback_order():
    p = plan.plan("final", [SITES[0], SITES[1], WIDE], ladder(), ev())
    assert p.impls == ["fused", "direct", "tiled"]  # the fusing default where tanh + pool follow
    assert all("this shape is not in" in c.why for c in p.layers)
    p = plan.plan("final", [SITES[0], WIDE], ladder(), None)
    assert p.impls == ["fused", "base"] and "no evidence file for this GPU" in p.layers[1].why


def test_final_on_a_gpu_with_only_the_stand_ins_evidence_says_so_and_stays_float32():
    e = ev(gpu="NVIDIA H200", conv2=[("tf32", 0.3), ("direct", 0.6)])
    e.verdicts["d"] = Verdict("m", "d", True, "2000-01-02", "bench-e2e.json")
    e.standin_for = "Some GPU"
    p = plan.plan("final", SITES, ladder(), e, model_digest="d")
    assert p.fc_math == "fp32" and p.impls == ["fused", "direct"]  # the stand-in's verdict is not this GPU's
    assert "measured on NVIDIA H200: no evidence for Some GPU" in p.layers[1].why


def test_the_pipeline_shape():
    final = (plan.FINAL_CHUNKS, plan.STREAMS, plan.FINAL_TAPER, plan.FINAL_TAIL_PIECES)
    assert plan.pipeline("final", 10000) == final and plan.pipeline("final", 15) == (1, 4, 1.0, 1)
    assert plan.pipeline("final", 16) == final
    assert plan.pipeline("3", 10000) == (1, 4, 1.0, 1)
    assert 0 < plan.FINAL_TAPER <= 1 and 1 <= plan.FINAL_TAIL_PIECES <= 64


def test_final_takes_the_taper_of_the_verdict_for_its_weights():
    e = ev(conv1=[("fused", 0.2)], conv2=[("direct", 0.3)])
    e.verdicts["d"] = Verdict("m", "d", False, "2000-01-02", "bench-e2e-x.json", 2, taper=2.0)
    p = plan.plan("final", SITES, ladder(), e, model_digest="d")
    assert p.taper == 2.0 and p.chunks == 4
    assert ("4 chunk(s) on 4 streams, each 2 times the one before (the end-to-end bench's pipeline sweep)"
            in p.lines()[1])
    assert plan.plan("final", SITES, ladder(), e, model_digest="other").taper == plan.FINAL_TAPER  # no verdict
    assert plan.plan("4", SITES, ladder(), e, model_digest="d").taper == 1.0  # final only
    few = [dataclasses.replace(s, B=8) for s in SITES]  # a batch run whole: no parts to taper
    assert plan.plan("final", few, ladder(), e, model_digest="d").taper == 1.0


def test_final_takes_the_tail_pieces_of_the_verdict_for_its_weights():
    e = ev(conv1=[("fused", 0.2)], conv2=[("direct", 0.3)])
    e.verdicts["d"] = Verdict("m", "d", True, "2000-01-02", "bench-e2e-x.json", 0, tail_pieces=2)
    p = plan.plan("final", SITES, ladder(), e, model_digest="d")
    assert p.tail_pieces == 2 and p.taper == 1.0
    assert "4 chunk(s) on 4 streams, the last copied in 2 pieces (its conv layers on each as it lands)" in p.lines()[1]
    assert plan.plan("final", SITES, ladder(), e, model_digest="other").tail_pieces == plan.FINAL_TAIL_PIECES == 1
    assert plan.plan("4", SITES, ladder(), e, model_digest="d").tail_pieces == 1  # final only
    few = [dataclasses.replace(s, B=8) for s in SITES]  # a batch run whole: no parts
    assert plan.plan("final", few, ladder(), e, model_digest="d").tail_pieces == 1


def test_the_plan_line_names_a_taper(monkeypatch):
    monkeypatch.setattr(plan, "FINAL_TAPER", 0.7)
    p = plan.plan("final", SITES, ladder())
    assert p.taper == 0.7 and "4 chunk(s) on 4 streams, each 0.7 times the one before" in p.lines()[1]
    assert plan.plan("4", SITES, ladder()).taper == 1.0


def test_lines_name_every_layer_and_why():
    lines = plan.plan("4", SITES, ladder()).lines()
    assert lines[0].startswith("m4 on the GPU") and len(lines) == 4
    assert lines[2].startswith("conv layer 1 (conv1: C=1 48x48 M=6 K=5, tanh + max-pool 2/2 follow): direct -- ")


def test_unknown_milestone_and_precision():
    with pytest.raises(PyconvError, match="unknown milestone '5'"):
        plan.plan("5", SITES, ladder())
    with pytest.raises(PyconvError, match="unknown precision 'fp16'"):
        plan.plan("final", SITES, ladder(), precision="fp16")


# ------------------------------------------------------------------------------------------ the real registry

# What the milestones chose on an NVIDIA H200 before pyconv.plan existed: computed from the code of that commit
# (pyconv/engines/gpu.py choose_impls / final_config, pyconv/tuning.py) with the committed results/*.json, for
# each shipped model and the course checkpoint, at batches 10000, 100 and 1 (the same at each). final: the
# variants and FC math with no --impl; exact / reduced: final forced to float32 / to the TF32 candidate (what the
# end-to-end bench measures); impl: --impl X where it differs from X on every layer (the old silent substitution,
# now `--fallback`; without it those are errors).
FIXED, SPEC, TC, CONST = "gpu-fused-tanh-pool", "gpu-specialised", "gpu-tensor-core-tf32", "gpu-constant-operand"
SUBSTITUTED = {FIXED: [FIXED, SPEC], TC: [SPEC, TC], "gpu-tensor-core-fused": ["gpu-tensor-core-fused", SPEC]}
# The precision line's wording since verdicts allow the conv layers' and the fully connected layers' precisions
# separately (what the verdict's configuration ran: the choices are the same).
ALLOWED = "reduced precision ({}) allowed: no label differs from PyTorch's (bench of {})"
TF32_BOTH, FC_ONLY = "TF32 conv layers, TF32 fully connected layers", "TF32 fully connected layers, float32 conv layers"
BEFORE = {
    "ece408": dict(final=[FIXED, TC], fc="tf32", why=ALLOWED.format(TF32_BOTH, "2026-11-23T04:15:51+00:00"),
                   exact=[FIXED, SPEC], reduced=[FIXED, TC], impl=SUBSTITUTED),
    "ece408-fa18": dict(final=[FIXED, CONST], fc="tf32", why=ALLOWED.format(FC_ONLY, "2026-11-23T04:16:24+00:00"),
                        exact=[FIXED, CONST], reduced=[FIXED, CONST], impl=SUBSTITUTED),
    "ece408-high": dict(final=[FIXED], fc="tf32", why=ALLOWED.format(FC_ONLY, "2026-11-23T04:15:51+00:00"),
                        exact=[FIXED], reduced=[FIXED], impl={}),
    "ece408-low": dict(final=[FIXED], fc="tf32", why=ALLOWED.format(FC_ONLY, "2026-11-23T04:15:51+00:00"),
                       exact=[FIXED], reduced=[FIXED], impl={}),
    "ece408-sp18": dict(final=[FIXED, SPEC], fc="fp32",
                        why="float32: reduced precision changed labels in the end-to-end bench",
                        exact=[FIXED, SPEC], reduced=[FIXED, TC], impl=SUBSTITUTED),
    "course-sp19": dict(final=[FIXED, TC], fc="tf32", why=ALLOWED.format(TF32_BOTH, "2026-11-23T04:15:51+00:00"),
                        exact=[FIXED, SPEC], reduced=[FIXED, TC], impl=SUBSTITUTED),
}
# On a GPU with no evidence of its own (e.g. an H100) the old code used the hand-kept FINAL_TABLE (H200
# measurements) in float32; the plan uses the H200's evidence file in float32. Same choices, except fa18's conv2:
# the table said gpu-specialised, the H200 bench it cited measured gpu-constant-operand fastest
# (results/bench-nvidia-h200-2026-11-23.json), and the evidence follows the measurement.
BEFORE_ELSEWHERE = {"ece408": [FIXED, SPEC], "ece408-fa18": [FIXED, SPEC], "ece408-high": [FIXED],
                    "ece408-low": [FIXED], "ece408-sp18": [FIXED, SPEC], "course-sp19": [FIXED, SPEC]}
CHANGED_ELSEWHERE = {"ece408-fa18": [FIXED, CONST]}


# The bench files the redesign's equivalence was checked against (BEFORE was recorded from the code of that time on
# the evidence they hold), frozen in tests/fixtures/results-before/ (most have left results/: results/ARCHIVE.md).
# Later measurements change what `final` picks on purpose; these tests keep proving that the selection rule itself
# did not change.
RESULTS_BEFORE_DIR = Path(__file__).parent / "fixtures" / "results-before"
RESULTS_BEFORE = ("bench-cpu-intel-r-xeon-r-processor-2026-11-22.json", "bench-e2e-2x-nvidia-h200-2026-11-22.json",
                  "bench-e2e-2x-nvidia-h200-2026-11-23-sp18-fa18.json", "bench-e2e-2x-nvidia-h200-2026-11-23.json",
                  "bench-e2e-nvidia-h200-2026-11-22.json", "bench-e2e-nvidia-h200-2026-11-23-sp18-fa18.json",
                  "bench-e2e-nvidia-h200-2026-11-23.json", "bench-e2e-sp19-nvidia-h200-2026-11-22.json",
                  "bench-nvidia-h200-2026-11-22-specialised-occupancy.json", "bench-nvidia-h200-2026-11-22.json",
                  "bench-nvidia-h200-2026-11-23.json")


@pytest.fixture(scope="module")
def evidence_before(tmp_path_factory):
    import shutil

    from pyconv.bench import evidence as bench_evidence

    folder = tmp_path_factory.mktemp("results-before")
    for name in RESULTS_BEFORE:
        shutil.copy(RESULTS_BEFORE_DIR / name, folder / name)
    bench_evidence.rebuild(folder)
    return folder / "evidence"


def _model(name, tmp_path_factory=None):
    from pyconv.core import mxnet_import
    from pyconv.core.model import load_model

    if name != "course-sp19":
        return load_model(name)
    dest = tmp_path_factory.mktemp("course")
    return load_model(mxnet_import.import_checkpoint(COURSE_SYMBOL, COURSE_PARAMS, "course-sp19", dest_dir=dest))


MODELS = [pytest.param(n, marks=needs_course) if n == "course-sp19" else n for n in BEFORE]


# The GPU registry when BEFORE was recorded (steps 0-14).
LADDER_BEFORE = ("gpu-baseline", "gpu-shared-tiled", "gpu-const-weights", "gpu-unroll-gemm", "gpu-implicit-gemm",
                 "gpu-register-tiled", "gpu-specialised", "gpu-channel-parallel", "gpu-tensor-core", "gpu-streams",
                 "gpu-fused-tanh-pool", "gpu-autotuned", "gpu-constant-operand", "gpu-tensor-core-tf32",
                 "gpu-tensor-core-fused")


def needs_the_ladder(test):
    """The plans below are choices among the whole ladder's variants, history included (`invoke build --ladder`)."""
    return pytest.mark.ladder(needs(*LADDER_BEFORE)(test))


@requires_gpu_module
@needs_the_ladder
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("batch", [10000, 1])
def test_the_plan_on_an_h200_equals_what_the_milestones_chose_before(name, batch, tmp_path_factory,
                                                                     evidence_before):
    from pyconv import variants

    model = _model(name, tmp_path_factory)
    sites, vs = conv_sites(model, batch), variants.gpu_variants()
    ev = evidence.for_gpu("NVIDIA H200", evidence_before)
    assert ev is not None and ev.standin_for is None and ev.path.name == "nvidia-h200.json"
    want = BEFORE[name]
    p = plan.plan("final", sites, vs, ev, model_digest=model.digest())
    why = p.precision
    if want["why"].startswith("reduced precision") and any(
            v.precision == "fp16" and v.device == "gpu" and v.role("final").choosable for v in vs):
        # FP16 variants joined the ladder after BEFORE was recorded: the verdict's bench ran none, so the line says
        # final leaves FP16 out, and the rest of it is unchanged
        why, _, note = why.partition("; ")
        assert re.match(r"not (TF32 or )?FP16 conv layers: that bench ran no (TF32 or )?FP16 variant in a "
                        r"configuration that kept every label", note), p.precision
    assert (p.impls, p.fc_math, why) == (want["final"], want["fc"], want["why"])
    assert p.chunks == (4 if batch >= 16 else 1) and p.streams == 4 and p.tuned
    assert plan.plan("final", sites, vs, ev, model_digest=model.digest(), precision="fp32").impls == want["exact"]
    assert plan.plan("final", sites, vs, ev, model_digest=model.digest(), precision="reduced").impls == \
        want["reduced"]
    n = len(sites)
    assert plan.plan("3", sites, vs).impls == ["gpu-baseline"] * n
    assert plan.plan("4", sites, vs).impls == [SPEC] * n
    for v in (v for v in vs if v.name in LADDER_BEFORE):  # variants added since have no recorded choice
        expected = want["impl"].get(v.name, [v.name] * n)
        assert plan.plan("4", sites, vs, impl=v.name, fallback=True).impls == expected, v.name
        if expected != [v.name] * n:  # issue 13: no silent substitution without --fallback
            with pytest.raises(PyconvError, match=f"--impl {v.name} cannot run conv layer"):
                plan.plan("4", sites, vs, impl=v.name)


@requires_gpu_module
@needs_the_ladder
@pytest.mark.parametrize("name", MODELS)
def test_the_plan_on_a_gpu_without_evidence_uses_the_h200s_in_float32(name, tmp_path_factory, evidence_before):
    from pyconv import variants

    model = _model(name, tmp_path_factory)
    sites, vs = conv_sites(model, 10000), variants.gpu_variants()
    ev = evidence.for_gpu("NVIDIA H100 80GB HBM3", evidence_before)
    assert ev.standin_for == "NVIDIA H100 80GB HBM3" and ev.gpu == "NVIDIA H200"
    p = plan.plan("final", sites, vs, ev, model_digest=model.digest())
    assert p.impls == CHANGED_ELSEWHERE.get(name, BEFORE_ELSEWHERE[name]) and p.fc_math == "fp32"
    assert p.precision == "float32: no end-to-end bench of these weights on this GPU has checked reduced precision"
    assert all("no evidence for NVIDIA H100 80GB HBM3" in c.why for c in p.layers)


@requires_gpu_module
@needs_the_ladder
def test_invoke_plan_explains_a_milestone_for_a_gpu_by_name():
    from pyconv.tools import milestones

    lines = milestones.explain("final", batch=100, model="ece408", gpu_name="NVIDIA H200")
    assert lines[0] == "for NVIDIA H200"
    # the committed H200 evidence's verdict for these weights (its bench ran an FP16 variant or not)
    assert re.match(r"final on the GPU: reduced precision \(((TF32|FP16|TF32 and FP16) conv layers, (TF32|FP16) "
                    r"fully connected layers|TF32 fully connected layers, float32 conv layers)\) allowed: no label "
                    r"differs", lines[1]), lines[1]
    assert lines[3].startswith("conv layer 1 (conv1: C=1 48x48")
    assert " -- fastest conv + tanh + pool measured on this shape" in lines[3]  # which one: results/evidence/
    with pytest.raises(PyconvError, match="--impl gpu-fused-tanh-pool cannot run conv layer 2"):
        milestones.explain("4", batch=100, model="ece408", impl="gpu-fused-tanh-pool", gpu_name="NVIDIA H200")
    with pytest.raises(PyconvError, match="milestone 1 runs PyTorch's own convolutions"):
        milestones.explain("1")
