"""The evidence file per GPU (pyconv.evidence, written by pyconv.bench.evidence): which variant was fastest per
layer shape and whether reduced precision (TF32, FP16) kept every label of a model, merged run by run; the
committed H200 file is exactly what the committed bench results give."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import ROOT

from pyconv import evidence
from pyconv.bench import evidence as build
from pyconv.bench.schema import FORMAT, VERSION, BenchResult
from pyconv.core.errors import PyconvError


def row(name, ms, passed=True, tanh_pool_ms=None, epilogue="none", x_on_host=False):
    r = {"variant": name, "epilogue": epilogue, "x_on_host": x_on_host, "check": {"passed": passed},
         "ms": {"median": ms}}
    if tanh_pool_ms is not None:
        r["tanh_pool_ms"] = {"median": tanh_pool_ms}
    return r


CONV1 = {"model": "m", "layer": "conv1", "B": 10000, "C": 1, "H": 48, "W": 48, "M": 6, "K": 5,
         "tanh_pool_follows": True}
CONV2 = {"model": "m", "layer": "conv2", "B": 10000, "C": 6, "H": 22, "W": 22, "M": 16, "K": 5,
         "tanh_pool_follows": False}


def run(date, gpu="G", layers=(), e2e=(), variants=None):
    doc = {"format": FORMAT, "version": VERSION, "date": date, "parts": ["gpu"], "gpu": {"name": gpu},
           "layers": list(layers), "end_to_end": list(e2e), "settings": {"variants": variants}}
    return BenchResult.parse(doc)


def verdict(digest, ok, differ=0, rejected=None, impls=None, candidate_impls=None):
    e = {"model": "m", "batch": 100, "model_digest": digest, "reduced_precision_ok": ok,
         "pyconv": {"differ_vs_pytorch": differ}}
    if impls is not None:
        e["impls"] = impls  # what final runs after the verdict
    if rejected is not None:
        e["pyconv_reduced"] = {"differ_vs_pytorch": rejected}
        if candidate_impls is not None:
            e["pyconv_reduced"]["impls"] = candidate_impls
    return e


def test_ranking_compares_what_the_network_pays():
    layer = dict(CONV1, variants=[row("plain", 0.3, tanh_pool_ms=0.8), row("fused", 0.25, epilogue="tanh-maxpool2"),
                                  row("wrong", 0.01, passed=False), row("host", 0.01, tanh_pool_ms=0.02,
                                                                          x_on_host=True)])
    r = build.ranking(run("2000-01-01", layers=[layer]).layers[0], "2000-01-01", "b.json")
    assert [(t.variant, t.ms) for t in r] == [("fused", 0.25), ("plain", 0.8)]  # plain + tanh + pool: 0.8
    layer = dict(CONV2, variants=[row("fused", 0.1, epilogue="tanh-maxpool2"), row("a", 0.6), row("b", 0.3)])
    assert [t.variant for t in build.ranking(run("d", layers=[layer]).layers[0], "d", "b")] == ["b", "a"]


def test_a_first_layer_ranks_a_uint8_reader_by_its_uint8_time():
    reader = dict(row("reader", 0.30, epilogue="tanh-maxpool2"), u8_ms={"median": 0.12}, u8_check={"passed": True})
    failed = dict(row("bad-u8", 0.20, epilogue="tanh-maxpool2"), u8_ms={"median": 0.01},
                  u8_check={"passed": False})
    layer = dict(CONV1, variants=[reader, failed, row("fused", 0.25, epilogue="tanh-maxpool2")])
    r = build.ranking(run("d", layers=[layer]).layers[0], "d", "b")
    # the uint8 path is what the network runs: one that failed its check leaves the variant out
    assert [(t.variant, t.ms) for t in r] == [("reader", 0.12), ("fused", 0.25)]


def test_the_newest_run_of_a_shape_wins_and_a_subset_run_updates_its_variants_only():
    old = run("2000-01-01", layers=[dict(CONV2, variants=[row("a", 0.6), row("b", 0.5)])])
    new = run("2000-01-02", layers=[dict(CONV2, variants=[row("a", 0.4)])], variants=["a"])
    other_gpu = run("2000-01-03", gpu="H", layers=[dict(CONV2, variants=[row("x", 0.1)])])
    ev = build.merge(build.merge(None, old, "old.json"), new, "new.json")
    key = (6, 22, 22, 16, 5, False)
    assert [(t.variant, t.ms, t.source) for t in ev.ranking(key)] == [("a", 0.4, "new.json"), ("b", 0.5, "old.json")]
    full = run("2000-01-04", layers=[dict(CONV2, variants=[row("c", 0.9)])])
    assert [t.variant for t in build.merge(ev, full, "full.json").ranking(key)] == ["c"]
    assert [t.variant for t in build.merge(ev, old, "old.json").ranking(key)] == ["a", "b"]  # older: ignored
    assert build.merge(None, other_gpu, "h.json").gpu == "H"


def test_precision_verdicts_newest_per_model():
    ev = build.merge(None, run("2000-01-01", e2e=[verdict("d1", True), verdict("d2", True)]), "a.json")
    ev = build.merge(ev, run("2000-01-03", e2e=[verdict("d1", False, differ=0, rejected=2)]), "b.json")
    ev = build.merge(ev, run("2000-01-02", e2e=[verdict("d1", True)]), "c.json")  # older than b: ignored
    assert ev.verdict("d1").reduced_precision_ok is False and ev.verdict("d1").date == "2000-01-03"
    assert ev.verdict("d1").differ_vs_pytorch == 2  # the rejected candidate's count, not the float32 rerun's
    assert ev.verdict("d2").reduced_precision_ok is True and ev.verdict("d3") is None
    no_torch = {"model": "m", "batch": 1, "model_digest": "d4", "pyconv": {}}  # no PyTorch: no verdict
    assert build.merge(ev, run("2000-01-05", e2e=[no_torch]), "x").verdict("d4") is None


def test_a_verdict_records_the_variants_its_candidate_ran(tmp_path):
    """What the TF32 candidate ran, per conv layer: the entry's impls where it kept every label, the rejected
    candidate's where the float32 configuration was measured after it; nothing where the file does not say."""
    ev = build.merge(None, run("2000-01-01", e2e=[
        verdict("ok", True, impls=["gpu-student", "gpu-student"]),
        verdict("moved", False, differ=0, rejected=2, impls=["fp32-a", "fp32-b"], candidate_impls=["fused", "tf32"]),
        verdict("old", True)]), "a.json")
    assert ev.verdict("ok").impls == ("gpu-student", "gpu-student")
    assert ev.verdict("moved").impls == ("fused", "tf32")
    assert ev.verdict("old").impls is None
    back = evidence.load(evidence.save(ev, tmp_path / "g.json"))
    assert {d: v.impls for d, v in back.verdicts.items()} == {d: v.impls for d, v in ev.verdicts.items()}
    # an evidence file written before the field: its verdicts load, recording no variants
    doc = json.loads((tmp_path / "g.json").read_text())
    for v in doc["precision"]:
        del v["impls"]
    (tmp_path / "g.json").write_text(json.dumps(doc))
    assert all(v.impls is None for v in evidence.load(tmp_path / "g.json").verdicts.values())
    doc["precision"][0]["impls"] = "gpu-student"  # a name, not a list of them
    (tmp_path / "g.json").write_text(json.dumps(doc))
    with pytest.raises(PyconvError, match="malformed.*list of variant names"):
        evidence.load(tmp_path / "g.json")


def test_an_fp16_verdict_comes_from_the_bench_that_ran_an_fp16_variant(tmp_path):
    """The end-to-end bench's reduced candidate ran an FP16 variant and kept every label: the verdict it leaves in the
    evidence file lets final pick FP16; the same bench with TF32 variants only leaves FP16 out."""
    from pyconv import plan
    from pyconv.variants import Role, Variant

    def v(name, step, precision):
        return Variant(name, step, "s", "gpu", precision=precision, roles={"final": Role("candidate")})

    vs = [v("exact", 0, "fp32"), v("tf", 1, "tf32"), v("half", 2, "fp16")]
    site = plan.ConvSite(0, "conv2", 100, 6, 22, 22, 16, 5, False)
    layer = dict(CONV2, variants=[row("half", 0.1), row("tf", 0.2), row("exact", 0.4)])
    for ran, want, why in ((["half"], "half", "reduced precision (FP16 conv layers, TF32 fully connected layers) "
                                              "allowed"),
                           (["tf"], "tf", "reduced precision (TF32 conv layers, TF32 fully connected layers) allowed: "
                                          "no label differs from PyTorch's (bench of 2000-01-01); not FP16 conv "
                                          "layers: that bench ran no FP16 variant")):
        ev = build.merge(None, run("2000-01-01", layers=[layer], e2e=[verdict("d", True, impls=ran)]), "a.json")
        ev = evidence.load(evidence.save(ev, tmp_path / "g.json"))  # through the file
        p = plan.plan("final", [site], vs, ev, model_digest="d")
        assert p.impls == [want] and p.fc_math == "tf32" and p.precision.startswith(why), p.precision
    # The FP16 candidate moved a label and TF32 alone kept them all: the verdict is TF32's, FP16 stays out.
    e2e = verdict("d", True, impls=["tf"], rejected=1, candidate_impls=["half"])
    ev = evidence.load(evidence.save(build.merge(None, run("2000-01-02", layers=[layer], e2e=[e2e]), "b.json"),
                                     tmp_path / "g.json"))
    assert ev.verdict("d").reduced_precision_ok and ev.verdict("d").impls == ("tf",)
    p = plan.plan("final", [site], vs, ev, model_digest="d")
    assert p.impls == ["tf"] and p.fc_math == "tf32" and "not FP16" in p.precision, p.precision
    # Both moved labels: float32, and the verdict names the first candidate's count and variants.
    e2e = verdict("d", False, impls=["exact"], rejected=1, candidate_impls=["half"])
    ev = build.merge(None, run("2000-01-03", layers=[layer], e2e=[e2e]), "c.json")
    assert not ev.verdict("d").reduced_precision_ok and ev.verdict("d").impls == ("half",)
    assert plan.plan("final", [site], vs, ev, model_digest="d").impls == ["exact"]


def test_file_round_trip_and_lookup_per_gpu(tmp_path):
    ev = build.merge(None, run("2000-01-01", layers=[dict(CONV2, variants=[row("a", 0.6), row("b", 0.5)])],
                               e2e=[verdict("d", True)]), "a.json")
    path = evidence.save(ev, evidence.path_for("G", tmp_path))
    assert path.name == "g.json"
    back = evidence.load(path)
    assert back.to_json() == ev.to_json() and back.path == path
    assert evidence.for_gpu("G", tmp_path).verdict("d").reduced_precision_ok
    assert evidence.for_gpu("Unknown GPU", tmp_path) is None  # no file of its own and no stand-in's
    evidence.save(ev, evidence.path_for(evidence.STANDIN_GPU, tmp_path))
    standin = evidence.for_gpu("Unknown GPU", tmp_path)
    assert standin.standin_for == "Unknown GPU" and standin.verdict("d") is None  # layers yes, precision no
    assert standin.ranking((6, 22, 22, 16, 5, False))[0].variant == "b"
    path.write_text(json.dumps({"format": "other"}))
    with pytest.raises(PyconvError, match="not a pyconv-evidence v1 file"):
        evidence.load(path)
    path.write_text(json.dumps(dict(ev.to_json(), layers=[{"C": 1}])))
    with pytest.raises(PyconvError, match="malformed"):
        evidence.load(path)


def test_the_committed_h200_evidence_is_what_the_committed_results_give(tmp_path):
    for p in (ROOT / "results").glob("bench-*.json"):
        shutil.copy(p, tmp_path / p.name)
    written = build.rebuild(tmp_path)
    assert [p.name for p in written] == ["nvidia-h200.json"]
    committed = json.loads((ROOT / "results" / "evidence" / "nvidia-h200.json").read_text())
    assert json.loads(written[0].read_text()) == committed, "run `invoke evidence` and commit the file"


def sweep(rows):
    """An end-to-end entry's pipeline sweep on final's 4 streams: rows {taper: [pinned ms at 3, 4, 5 chunks]}."""
    return [{"chunks": c, "streams": 4, "taper": t, "pinned_ms": {"median": ms}}
            for t, times in rows.items() for c, ms in zip((3, 4, 5), times, strict=True)]


def test_a_verdict_records_the_tail_pieces_its_pipeline_sweep_found_fastest(tmp_path):
    """The piece count whose median over final's chunk count and the counts beside it (equal parts, final's
    streams) is lowest, where it beats one piece by PIECES_MARGIN; one piece otherwise, and where the sweep had no
    pieces or the file no sweep; the file keeps it, refuses a count outside 1..64."""
    def entry(digest, rows, chunks=4):
        pipeline = [{"chunks": c, "streams": 4, "taper": 1.0, "tail_pieces": q, "pinned_ms": {"median": ms}}
                    for q, times in rows.items() for c, ms in zip((3, 4, 5), times, strict=True)]
        # a far chunk count where pieces win by much: not final's neighbourhood, not counted
        pipeline += [{"chunks": 16, "streams": 4, "taper": 1.0, "tail_pieces": q, "pinned_ms": {"median": 1.0 / q}}
                     for q in rows]
        return dict(verdict(digest, True), streams=4, chunks=chunks,
                    pyconv={"differ_vs_pytorch": 0, "pipeline": pipeline})

    faster = entry("sp19", {1: [0.574, 0.553, 0.541], 2: [0.553, 0.542, 0.540], 3: [0.556, 0.552, 0.548]})
    within_noise = entry("high", {1: [0.456, 0.489, 0.502], 2: [0.461, 0.486, 0.505]})
    slower = entry("fa19", {1: [2.88, 2.74, 2.76], 2: [2.97, 2.84, 2.83]})
    one_piece = entry("eq", {1: [0.6, 0.5, 0.55]})
    ev = build.merge(None, run("2000-01-01", e2e=[faster, within_noise, slower, one_piece, verdict("old", True)]),
                     "a.json")
    assert {d: v.tail_pieces for d, v in ev.verdicts.items()} == {"sp19": 2, "high": 1, "fa19": 1, "eq": 1,
                                                                  "old": 1}
    check_saved_field(ev, tmp_path / "g.json", "tail_pieces", "sp19", 2, 1, (0, 65, 2.5, True),
                      r"malformed.*tail_pieces' must be an integer in 1\.\.64")


def test_a_verdict_never_pairs_a_taper_with_tail_pieces_the_sweep_never_timed_together():
    """Tapers are timed in one piece and pieces at equal parts: where both beat their baselines, the verdict keeps
    the one whose rows are faster over the chunk counts both were swept at, never the two together untimed; a timed
    combination is taken where it beats that one by PIECES_MARGIN."""
    def entry(digest, tapered, pieced, chunks=(3, 4, 5)):
        pipeline = [{"chunks": c, "streams": 4, "taper": t, "tail_pieces": 1, "pinned_ms": {"median": ms}}
                    for t, times in tapered.items() for c, ms in zip(chunks, times, strict=True)]
        pipeline += [{"chunks": c, "streams": 4, "taper": 1.0, "tail_pieces": 2, "pinned_ms": {"median": ms}}
                     for c, ms in zip((3, 4, 5), pieced, strict=True)]
        return dict(verdict(digest, True), streams=4, chunks=4, pyconv={"differ_vs_pytorch": 0, "pipeline": pipeline})

    equal = [0.560, 0.550, 0.555]
    taper_faster = entry("t", {1.0: equal, 0.8: [0.520, 0.515, 0.518]}, [0.535, 0.530, 0.532])
    pieces_faster = entry("p", {1.0: equal, 0.8: [0.530, 0.528, 0.531]}, [0.520, 0.515, 0.518])
    # tapers swept at other chunk counts than the pieces: nothing to compare them at, the pieces (final's count)
    apart = entry("a", {1.0: equal, 0.8: [0.50, 0.50, 0.50]}, [0.520, 0.515, 0.518], chunks=(6, 8, 10))
    apart["pyconv"]["pipeline"] += [{"chunks": c, "streams": 4, "taper": 1.0, "tail_pieces": 1,
                                     "pinned_ms": {"median": ms}} for c, ms in zip((3, 4, 5), equal, strict=True)]
    ev = build.merge(None, run("2000-01-01", e2e=[taper_faster, pieces_faster, apart]), "a.json")
    got = {d: (v.taper, v.tail_pieces) for d, v in ev.verdicts.items()}
    assert got == {"t": (0.8, 1), "p": (1.0, 2), "a": (1.0, 2)}
    # a timed combination of the two (a shrinking last part in pieces) is taken where it beats the better of them
    # by PIECES_MARGIN over the chunk counts all were swept at, and not within it
    def combined(digest, times):
        e = entry(digest, {1.0: equal, 0.8: [0.520, 0.515, 0.518]}, [0.535, 0.530, 0.532])
        e["pyconv"]["pipeline"] += [{"chunks": c, "streams": 4, "taper": 0.8, "tail_pieces": 2,
                                     "pinned_ms": {"median": ms}} for c, ms in zip((3, 4, 5), times, strict=True)]
        return e

    ev = build.merge(None, run("2000-01-01", e2e=[combined("c", [0.505, 0.500, 0.510]),
                                                  combined("n", [0.515, 0.512, 0.516])]), "a.json")
    assert {d: (v.taper, v.tail_pieces) for d, v in ev.verdicts.items()} == {"c": (0.8, 2), "n": (0.8, 1)}
    # each alone beat its baseline, so each would have been taken on its own
    for digest in ("t", "p"):
        e = run("2000-01-01", e2e=[taper_faster if digest == "t" else pieces_faster]).end_to_end[0]
        assert (build.pipeline_taper(e), build.pipeline_tail_pieces(e)) == (0.8, 2)


def check_saved_field(ev, path, field: str, digest: str, value, default, bad, match: str) -> None:
    """A verdict field through the evidence file: saved and loaded back (digest's verdict holds value), a file
    written before the field gives every verdict the default, and each of `bad` is refused with `match`."""
    path = evidence.save(ev, path)
    assert getattr(evidence.load(path).verdict(digest), field) == value
    doc = json.loads(path.read_text())
    for v in doc["precision"]:
        del v[field]
    path.write_text(json.dumps(doc))
    assert all(getattr(v, field) == default for v in evidence.load(path).verdicts.values())
    for b in bad:
        doc["precision"][0][field] = b
        path.write_text(json.dumps(doc))
        with pytest.raises(PyconvError, match=match):
            evidence.load(path)


def test_a_verdict_records_the_taper_its_pipeline_sweep_found_fastest(tmp_path):
    """The taper whose median over the chunk counts swept at every taper is lowest, where it beats equal parts by
    TAPER_MARGIN; equal parts otherwise, and where the sweep had no tapers or the file no sweep."""
    def entry(digest, rows, streams=4):
        return dict(verdict(digest, True), streams=streams, pyconv={"differ_vs_pytorch": 0, "pipeline": sweep(rows)})

    slow_compute = entry("fa19", {1.0: [2.76, 2.63, 2.64], 2.0: [2.57, 2.50, 2.49], 0.8: [2.75, 2.72, 2.75]})
    within_noise = entry("sp19", {1.0: [0.572, 0.556, 0.545], 0.9: [0.583, 0.555, 0.568], 0.7: [0.550, 0.549, 0.560]})
    only_equal = entry("eq", {1.0: [0.6, 0.5, 0.55]})
    other_streams = entry("st", {1.0: [2.7, 2.6, 2.6], 2.0: [2.0, 2.0, 2.0]}, streams=2)  # final's streams: 2
    no_sweep = verdict("old", True)
    ev = build.merge(None, run("2000-01-01", e2e=[slow_compute, within_noise, only_equal, other_streams, no_sweep]),
                     "a.json")
    assert {d: v.taper for d, v in ev.verdicts.items()} == {"fa19": 2.0, "sp19": 1.0, "eq": 1.0, "st": 1.0,
                                                            "old": 1.0}
    # 0.7's median (0.550) is 1.1% under 1's (0.556): inside the margin. Past it, it is taken.
    faster = entry("sp19", {1.0: [0.572, 0.556, 0.545], 0.7: [0.530, 0.520, 0.540]})
    assert build.merge(None, run("2000-01-01", e2e=[faster]), "a.json").verdict("sp19").taper == 0.7
    # rows with the last part in pieces are another shape: equal parts in pieces, however fast, are not taper 1
    pieced = entry("sp19", {1.0: [0.572, 0.556, 0.545], 0.7: [0.530, 0.520, 0.540]})
    pieced["pyconv"]["pipeline"] += [dict(r, tail_pieces=2, pinned_ms={"median": 0.4})
                                     for r in sweep({1.0: [0, 0, 0]})]
    assert build.merge(None, run("2000-01-01", e2e=[pieced]), "a.json").verdict("sp19").taper == 0.7
    # the file keeps it; a file written before the field gives 1; a taper out of range is refused
    check_saved_field(ev, tmp_path / "g.json", "taper", "fa19", 2.0, 1.0, (0,),
                      r"malformed.*taper' must be in \(0, 4\]")
