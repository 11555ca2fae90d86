"""`invoke bench` (pyconv.bench): the arithmetic (flops, bytes, roofline floor), the correctness gate (pyconv.verify),
the goals, the JSON tags and its atomic write, and the CPU benchmark end to end on a tiny model. GPU parts are
marked gpu."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from built_variants import CPU, CPU_VARIANTS, GPU, GPU_VARIANTS, M2_DEFAULT, needs
from gpu_helpers import HAVE_GPU, StandInGpu, gpu, random_model, requires_gpu, use_stand_in_gpu
from student_variants import SKELETON, skip_if_unstarted

from pyconv import variants, verify
from pyconv.bench import cpu_layers, goals, gpu_layers, roofline, schema, sites, tags, timing
from pyconv.bench import run as bench
from pyconv.bench.schema import FORMAT, VERSION
from pyconv.core import reference
from pyconv.core.errors import PyconvError
from pyconv.core.model import save_model

# ---------------------------------------------------------------------------------------------------------------
# Arithmetic on known shapes (the expected numbers are worked out by hand in the comments)


def test_flops_and_bytes_of_sp19_conv1():
    # Ho = Wo = 44; 2 * 10000 * 6 * 44 * 44 * 1 * 25 = 5,808,000,000
    assert roofline.conv_flops(10000, 1, 48, 48, 6, 5) == 5_808_000_000
    # x 10000*2304 = 23,040,000; k 150; y 10000*6*1936 = 116,160,000 floats; * 4 bytes
    assert roofline.conv_bytes(10000, 1, 48, 48, 6, 5) == 4 * (23_040_000 + 150 + 116_160_000)
    # pooled y: 22x22 -> 10000*6*484 = 29,040,000 floats
    assert roofline.conv_bytes(10000, 1, 48, 48, 6, 5, pooled=True) == 4 * (23_040_000 + 150 + 29_040_000)


def test_flops_and_bytes_of_sp19_conv2_and_odd_pooling():
    # Ho = Wo = 18; 2 * 10000 * 16 * 324 * 6 * 25 = 15,552,000,000
    assert roofline.conv_flops(10000, 6, 22, 22, 16, 5) == 15_552_000_000
    assert roofline.conv_bytes(10000, 6, 22, 22, 16, 5) == 4 * (10000 * 6 * 484 + 16 * 6 * 25 + 10000 * 16 * 324)
    # 7x9 input, K=2: 6x8 output, pooled floor 3x4
    assert roofline.conv_bytes(1, 1, 7, 9, 1, 2, pooled=True) == 4 * (63 + 4 + 12)


def test_floor_takes_the_slower_of_bytes_and_flops():
    # 3 GB at 3000 GB/s = 1 ms; 1e12 flops at 50,000 GFLOP/s = 20 ms -> compute bound
    assert roofline.floor_ms(10**12, 3 * 10**9, 3000.0, 50000.0) == pytest.approx(20.0)
    # the same bytes, 1e9 flops (0.02 ms) -> memory bound, 1 ms
    assert roofline.floor_ms(10**9, 3 * 10**9, 3000.0, 50000.0) == pytest.approx(1.0)
    with pytest.raises(PyconvError):
        roofline.floor_ms(1, 1, 0.0, 1.0)


def test_rates_and_percent_of_roofline():
    r = roofline.rates(flops=2 * 10**9, nbytes=4 * 10**8, ms=2.0, floor=0.5)
    assert r["gflops"] == pytest.approx(1000.0)  # 2e9 flops in 2 ms
    assert r["gbps"] == pytest.approx(200.0)  # 0.4 GB in 2 ms
    assert r["pct_roofline"] == pytest.approx(25.0)


def test_stats():
    s = timing.stats([5.0, 1.0, 3.0, 2.0, 4.0])
    # mean 3.0; sample standard deviation sqrt(2.5) = 1.581: noise 52.7 %
    assert s == {"median": 3.0, "min": 1.0, "p90": pytest.approx(4.6), "reps": 5, "mean": 3.0,
                 "noise_pct": pytest.approx(2.5**0.5 / 3.0 * 100)}
    with pytest.raises(PyconvError):
        timing.stats([])


def test_random_inputs_are_nonzero_float32_of_both_signs(rng):
    x = verify.random_nonzero(rng, (3, 4, 5, 6))
    assert x.dtype == np.float32 and x.flags.c_contiguous and x.shape == (3, 4, 5, 6)
    assert np.all(np.abs(x) >= 0.05) and np.all(np.abs(x) <= 1.0)
    assert (x > 0).any() and (x < 0).any()


# ---------------------------------------------------------------------------------------------------------------
# The correctness gate


def test_check_slices_cover_both_ends():
    n = verify.CHECK_IMAGES
    assert verify.check_slices(5) == [slice(0, 5)]
    assert verify.check_slices(n + 8) == [slice(0, n), slice(n, n + 8)]
    assert verify.check_slices(10000) == [slice(0, n), slice(10000 - n, 10000)]


def test_compare_passes_within_tolerance_and_fails_beyond():
    ref = np.array([1.0, -2.0, 1e-8], np.float32)
    ok = verify.compare(ref * (1 + 1e-6), ref, rtol=1e-5, atol=1e-6)
    assert ok.passed and ok.max_abs_err < 1e-5 and ok.why == ""
    bad = verify.compare(ref + np.float32(1e-3), ref, rtol=1e-5, atol=1e-6)
    assert not bad.passed and "3 of 3" in bad.why and bad.as_dict()["why"] == "3 of 3 elements off"
    nan = ref.copy()
    nan[1] = np.nan
    r = verify.compare(nan, ref, rtol=1e-5, atol=1e-6)
    assert not r.passed and "NaN" in r.why and r.where == (1,)  # a NaN is the worst element
    off = ref.copy()
    off[2] += np.float32(0.5)
    r = verify.compare(off, ref, rtol=1e-5, atol=1e-6)
    assert r.where == (2,) and r.got == pytest.approx(0.5) and "worst at (2,)" in r.why
    assert not verify.compare(ref[:2], ref, 1e-5, 1e-6).passed


def test_the_tolerance_grows_with_the_square_root_of_the_sum():
    assert verify.tolerance(1e-4, 6, 5) == (1e-4, pytest.approx(1e-4 * np.sqrt(150)))
    assert verify.tolerance(2e-3, 1, 1) == (2e-3, pytest.approx(2e-3))


def test_check_output_catches_an_error_in_the_last_images_only(rng):
    x = verify.random_nonzero(rng, (80, 2, 9, 9))
    k = verify.random_nonzero(rng, (3, 2, 3, 3))
    y = reference.conv2d(x, k)
    assert verify.check_output(y, x, k, "none", 1e-5, 1e-5)["passed"]
    y[-1, 2, 6, 6] += 1.0  # an image the first-images check would never see
    r = verify.check_output(y, x, k, "none", 1e-5, 1e-5)
    assert not r["passed"] and r["images_checked"] == 2 * verify.CHECK_IMAGES
    assert r["where"] == [79, 2, 6, 6]  # the position in the whole batch
    pooled = reference.tanh_maxpool2(reference.conv2d(x, k))
    assert verify.check_output(pooled, x, k, "tanh-maxpool2", 1e-5, 1e-5)["passed"]


def test_a_cpu_variant_that_skips_an_output_is_marked_and_not_timed(rng, monkeypatch):
    from pyconv import _cpu

    def forgets_one(name, x, k, out=None):
        y = reference.conv2d(x, k).astype(np.float32)  # right everywhere else, whatever the variant
        y[0, 0, 0, 0] = np.nan  # as if the kernel never wrote it (the bench poisons `out` with NaN)
        out[...] = y
        return out

    monkeypatch.setattr(_cpu, "conv", forgets_one)
    site = {"model": "t", "layer": "conv1", "B": 4, "C": 1, "H": 8, "W": 8, "M": 2, "K": 3,
            "tanh_pool_follows": False}
    rows = cpu_layers.bench_cpu_layer(site, CPU_VARIANTS[:1], lambda _n: 4, rng, reps=2, torch=None)
    assert len(rows) == 1
    assert not rows[0]["check"]["passed"] and "s" not in rows[0] and "FAILED" in rows[0]["skipped"]


# ---------------------------------------------------------------------------------------------------------------
# Layer summary and goals


def _row(name, ms, epilogue="none", tanh_pool=None):
    r = {"variant": name, "step": 0, "summary": "", "epilogue": epilogue, "x_on_host": False,
         "check": {"passed": True}, "ms": {"median": ms}}
    if tanh_pool is not None:
        r["tanh_pool_ms"] = {"median": tanh_pool}
    return r


def _layer(key, rows, cudnn_conv, cudnn_fused=None, batch=10000, fused=False):
    C, H, W, M, K = key
    layer = {"model": "m", "layer": "conv", "B": batch, "C": C, "H": H, "W": W, "M": M, "K": K,
             "tanh_pool_follows": fused, "variants": rows, "cudnn": {"conv_ms": {"median": cudnn_conv}}}
    if cudnn_fused is not None:
        layer["cudnn"]["conv_tanh_pool_ms"] = {"median": cudnn_fused}
    gpu_layers.summarise_layer(layer)
    return layer


def test_summarise_layer_picks_the_best_passing_variant_and_the_fused_path():
    failed = {"variant": "wrong", "step": 1, "summary": "", "epilogue": "none", "x_on_host": False,
              "check": {"passed": False}, "skipped": "FAILED"}
    layer = _layer(goals.SP19_CONV1, [failed, _row("a", 0.30, tanh_pool=0.40), _row("b", 0.20, tanh_pool=0.35),
                                      _row("fused", 0.08, "tanh-maxpool2")], 2.0, 2.4, fused=True)
    assert layer["best_conv"]["variant"] == "b" and layer["best_conv"]["x_cudnn"] == pytest.approx(10.0)
    assert layer["best_conv_tanh_pool"]["variant"] == "fused"
    assert layer["best_conv_tanh_pool"]["x_cudnn"] == pytest.approx(30.0)
    assert layer["best"] == {"variant": "fused", "ms": 0.08, "tanh_pool": True, "x_cudnn": pytest.approx(30.0)}
    assert layer["variants"][1]["x_cudnn"] == pytest.approx(2.0 / 0.30)
    assert layer["variants"][1]["tanh_pool_x_cudnn"] == pytest.approx(2.4 / 0.40)
    assert "x_cudnn" not in layer["variants"][0]


def _by_name(goals):
    return {g["name"]: g for g in goals}


def test_goals_met_and_missed():
    c1 = _layer(goals.SP19_CONV1, [_row("p", 0.5), _row("fused", 0.09, "tanh-maxpool2")], 2.2, 2.5, fused=True)
    c2 = _layer(goals.SP19_CONV2, [_row("q", 0.40)], 1.0)  # 2.5x cuDNN: misses >= 3
    result = {"parts": ["gpu"], "layers": [c1, c2]}
    g = _by_name(goals.check_goals(result))
    total = g["sp19 total conv op time (best per layer, batch 10000)"]
    assert total["measured"] == pytest.approx(0.49) and total["met"] is False
    conv1 = next(v for k, v in g.items() if k.startswith("sp19 conv1 x cuDNN"))
    conv2 = next(v for k, v in g.items() if k.startswith("sp19 conv2 x cuDNN"))
    assert conv1["met"] is True and conv1["measured"] == pytest.approx(2.5 / 0.09)
    assert conv2["met"] is False and conv2["measured"] == pytest.approx(2.5)
    assert g["sp19 fused conv1 + tanh + pool, float32"]["met"] is True
    u8 = g["sp19 fused conv1 + tanh + pool, float32, from uint8 images"]
    assert u8["measured"] is None and u8["met"] is None  # no variant here timed its uint8 path
    fa17 = g["fa17 conv + tanh + pool"]
    assert fa17["measured"] is None and fa17["met"] is None and "not in this run" in fa17["note"]
    reduced = g["sp19 conv2 (reduced precision allowed)"]
    assert reduced["measured"] == pytest.approx(0.40)
    assert reduced["met"] is False and g["sp19 conv2, exact float32"]["met"] is False
    assert not any(x["name"].startswith("cpu-fast") for x in goals.check_goals(result, "cpu-fast"))  # no CPU part


def test_the_first_layer_goal_is_float32_and_counts_the_uint8_path_apart():
    tf32 = dict(_row("gpu-fast-tf32", 0.05, "tanh-maxpool2"), precision="tf32")  # below 0.10 but not float32
    split = dict(_row("gpu-split", 0.12, "tanh-maxpool2"), precision="fp32", u8_ms={"median": 0.08})
    c1 = _layer(goals.SP19_CONV1, [tf32, split], 2.2, 2.5, fused=True)
    g = _by_name(goals.check_goals({"parts": ["gpu"], "layers": [c1]}))
    f32 = g["sp19 fused conv1 + tanh + pool, float32"]
    assert f32["measured"] == pytest.approx(0.12) and f32["met"] is False and f32["note"] == "gpu-split"
    u8 = g["sp19 fused conv1 + tanh + pool, float32, from uint8 images"]
    assert u8["measured"] == pytest.approx(0.08) and u8["met"] is True


def test_conv2_goals_tell_reduced_precision_from_float32():
    rows = [_row("gpu-x-tf32", 0.14), _row("gpu-y", 0.29), _row("gpu-z-half", 0.12)]
    rows[0]["precision"], rows[2]["precision"] = "tf32", "fp16"
    c2 = _layer(goals.SP19_CONV2, rows, 1.0)
    g = _by_name(goals.check_goals({"parts": ["gpu"], "layers": [c2]}))
    reduced = g["sp19 conv2 (reduced precision allowed)"]
    assert reduced["measured"] == pytest.approx(0.12) and reduced["met"]  # the FP16 variant counts as reduced
    assert g["sp19 conv2, exact float32"]["measured"] == pytest.approx(0.29) and g["sp19 conv2, exact float32"]["met"]


def test_a_reduced_variant_is_held_to_cudnns_faster_reduced_mode():
    """x cuDNN: float32 rows against cuDNN FP32; TF32 and FP16 rows against the faster of cuDNN TF32 and cuDNN FP16
    where they were measured (never an FP16 variant against cuDNN TF32 or FP32 alone), the mode named."""
    rows = [_row("f32", 0.40, tanh_pool=0.50), dict(_row("t", 0.20, tanh_pool=0.30), precision="tf32"),
            dict(_row("h", 0.10), precision="fp16"), dict(_row("hf", 0.08, "tanh-maxpool2"), precision="fp16")]
    rows[0]["precision"] = "fp32"
    layer = {"model": "m", "layer": "conv", "B": 10000, "C": 6, "H": 22, "W": 22, "M": 16, "K": 5,
             "tanh_pool_follows": True, "variants": rows,
             "cudnn": {"conv_ms": {"median": 2.0}, "conv_tanh_pool_ms": {"median": 2.4}},
             "cudnn_tf32": {"conv_ms": {"median": 1.0}, "conv_tanh_pool_ms": {"median": 0.8}},
             "cudnn_fp16": {"conv_ms": {"median": 0.5}, "conv_tanh_pool_ms": {"median": 1.2}}}
    gpu_layers.summarise_layer(layer)
    f32, t, h, hf = layer["variants"]
    assert f32["x_cudnn"] == pytest.approx(2.0 / 0.40) and "cudnn_mode" not in f32
    assert f32["tanh_pool_x_cudnn"] == pytest.approx(2.4 / 0.50)
    assert t["x_cudnn"] == pytest.approx(0.5 / 0.20) and t["cudnn_mode"] == "fp16"  # FP16 is cuDNN's faster conv
    assert t["tanh_pool_x_cudnn"] == pytest.approx(0.8 / 0.30)  # TF32 is its faster conv + tanh + pool
    assert h["x_cudnn"] == pytest.approx(0.5 / 0.10) and h["cudnn_mode"] == "fp16"
    assert hf["x_cudnn"] == pytest.approx(0.8 / 0.08) and hf["cudnn_mode"] == "tf32"
    assert layer["best_conv"] == {"variant": "h", "ms": 0.10, "tanh_pool": False, "x_cudnn": pytest.approx(5.0),
                                  "cudnn_mode": "fp16"}
    assert layer["best_conv_tanh_pool"]["cudnn_mode"] == "tf32"
    assert gpu_layers.reduced_yardstick(layer, "conv_ms") == (0.5, "fp16")
    typed = schema.LayerResult.from_dict(layer)  # the new keys load (and files without them, below)
    assert typed.variants[2].cudnn_mode == "fp16" and typed.cudnn_fp16.conv_ms.median == 0.5
    assert typed.best_conv.cudnn_mode == "fp16"
    # a file from before cuDNN's reduced modes were measured: every row against cuDNN FP32, as it was
    del layer["cudnn_tf32"], layer["cudnn_fp16"]
    for r in rows:
        r.pop("cudnn_mode", None)
    gpu_layers.summarise_layer(layer)
    assert h["x_cudnn"] == pytest.approx(2.0 / 0.10) and "cudnn_mode" not in h and "cudnn_mode" not in layer["best"]
    typed = schema.LayerResult.from_dict(layer)
    assert typed.cudnn_fp16 is None and typed.variants[2].cudnn_mode is None


def test_goals_need_batch_10000():
    c1 = _layer(goals.SP19_CONV1, [_row("p", 0.01)], 2.2, batch=100)
    c2 = _layer(goals.SP19_CONV2, [_row("q", 0.01)], 1.0, batch=100)
    g = _by_name(goals.check_goals({"parts": ["gpu"], "layers": [c1, c2]}))
    assert g["sp19 total conv op time (best per layer, batch 10000)"]["met"] is None


def test_cpu_and_end_to_end_goals():
    def cpu_row(key, s):
        C, H, W, M, K = key
        return {"variant": "cpu-fast", "C": C, "H": H, "W": W, "M": M, "K": K, "B": 10000, "s": {"median": s}}

    e2e = {"model": "ece408", "arch": "sp19", "batch": 10000,
           "pyconv": {"resident_ms": {"median": 0.9}, "pinned_ms": {"median": 1.4}, "pageable_ms": {"median": 2.0},
                      "correctness": 0.8397},
           "pytorch": {"pinned_ms": {"median": 7.0}, "pageable_ms": {"median": 8.0}, "correctness": 0.8398},
           "x_pytorch": {"pinned_ms": 5.0, "pageable_ms": 4.0}}
    result = {"parts": ["cpu", "end_to_end"],
              "cpu": [cpu_row(goals.SP19_CONV1, 0.035), cpu_row(goals.SP19_CONV2, 0.09)], "end_to_end": [e2e]}
    g = _by_name(goals.check_goals(result, "cpu-fast"))
    assert g["cpu-fast sp19 conv1 (batch 10000)"]["met"] is True
    assert g["cpu-fast sp19 conv2 (batch 10000)"]["met"] is False
    assert g["sp19 end to end, data resident"]["met"] is True
    assert g["sp19 end to end, including the copy (best of pinned, pageable)"]["measured"] == 1.4
    assert g["sp19 end to end including the copy x PyTorch (best vs best)"]["measured"] == pytest.approx(5.0)
    same = g["sp19 labels equal PyTorch's float32 ones (images that differ)"]
    assert same["measured"] == pytest.approx(1.0) and same["met"] is True  # from the accuracies: 1 image apart
    e2e["pyconv"]["differ_vs_pytorch"] = 3  # the label-by-label count, when the run has it, is what counts
    assert not any(x["name"].startswith("cpu-") for x in goals.check_goals(result))  # no milestone-2 default
    same = _by_name(goals.check_goals(result, "cpu-fast"))[
        "sp19 labels equal PyTorch's float32 ones (images that differ)"]
    assert same["measured"] == 3 and same["met"] is False


# ---------------------------------------------------------------------------------------------------------------
# Choices, tags, the file


def test_parts():
    assert bench.parse_parts(False, False, False, gpu_available=True) == (["gpu"], "")
    parts, note = bench.parse_parts(False, False, False, gpu_available=False)
    assert parts == ["cpu"] and "no CUDA GPU" in note
    assert bench.parse_parts(True, True, True, gpu_available=True)[0] == ["gpu", "cpu", "end_to_end"]
    with pytest.raises(PyconvError, match="need a CUDA GPU"):
        bench.parse_parts(False, True, False, gpu_available=False)


def test_variant_selection():
    gpu, cpu = ["gpu-a", "gpu-b"], ["cpu-naive", "cpu-fast"]
    assert bench.split_variants(None, gpu, cpu) == (gpu, cpu)
    assert bench.split_variants("cpu-fast, gpu-b", gpu, cpu) == (["gpu-b"], ["cpu-fast"])
    # the student's variants run when named, or where a part has no other (a student handout)
    assert bench.split_variants(None, [*gpu, "gpu-student"], [*cpu, "cpu-student"]) == (gpu, cpu)
    assert bench.split_variants(None, ["gpu-student"], ["cpu-student"]) == (["gpu-student"], ["cpu-student"])
    assert bench.split_variants(None, [], ["cpu-student"]) == ([], ["cpu-student"])
    assert bench.split_variants("gpu-student", [*gpu, "gpu-student"], cpu) == (["gpu-student"], [])
    with pytest.raises(PyconvError, match="unknown variant.*nope"):
        bench.split_variants("gpu-a,nope", gpu, cpu)


def test_tags():
    assert re.fullmatch(r"([0-9a-f]{40}(-dirty)?|unknown)", tags.git_commit())
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", tags.utc_now())
    cpu = tags.host_cpu()
    assert cpu["model"] and cpu["cores"] >= 1
    assert tags.cuda_version(12080) == "12.8" and tags.cuda_version(13000) == "13.0"


def test_default_out_names_the_gpu_or_the_cpu():
    r = {"date": "2026-01-02T03:04:05+00:00", "gpu": {"name": "NVIDIA H100 80GB HBM3"}, "host_cpu": {"model": "x"}}
    assert tags.default_out(r).name == "bench-nvidia-h100-80gb-hbm3-2026-01-02.json"
    r["gpu"] = None
    r["host_cpu"] = {"model": "Intel(R) Xeon(R) Processor"}
    assert tags.default_out(r).name == "bench-cpu-intel-r-xeon-r-processor-2026-01-02.json"


def test_json_is_written_atomically_and_only_as_the_schema_says(tmp_path, monkeypatch):
    dest = tmp_path / "results" / "bench-x.json"
    doc = {"format": FORMAT, "version": VERSION, "date": "2000-01-01T00:00:00+00:00", "parts": ["cpu"]}
    tags.write_json(doc, dest)
    assert json.loads(dest.read_text()) == doc
    with pytest.raises(PyconvError, match="malformed: LayerResult: no 'model'"):
        tags.write_json(dict(doc, layers=[{"layer": "conv1"}]), dest)

    def boom(*_a, **_k):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(tags.json, "dumps", boom)
    with pytest.raises(RuntimeError):
        tags.write_json(dict(doc, commit="x"), dest.with_name("bench-y.json"))
    assert json.loads(dest.read_text()) == doc
    assert [p.name for p in dest.parent.iterdir()] == ["bench-x.json"]  # no temporary, no half bench-y.json


def test_architecture_names_give_the_course_shapes():
    found = sites.sites_of(sites.layer_model("sp19"), 10000)
    assert [(sites.shape_key(s), s["tanh_pool_follows"]) for s in found] == [
        (goals.SP19_CONV1, True), (goals.SP19_CONV2, False)]
    assert [sites.shape_key(s) for s in sites.sites_of(sites.layer_model("fa17"), 1)] == [goals.FA17_CONV]
    assert [(sites.shape_key(s), s["tanh_pool_follows"]) for s in sites.sites_of(sites.layer_model("fa19"), 1)] == [
        ((1, 70, 70, 12, 5), True), ((12, 33, 33, 24, 5), False)]
    with pytest.raises(PyconvError, match="architecture name"):
        sites.layer_model("no-such-model")


# ---------------------------------------------------------------------------------------------------------------
# The CPU benchmark end to end on a tiny model


def test_cpu_bench_on_a_tiny_model(tmp_path, rng):
    model = random_model(rng, input_shape=(1, 14, 14), name="tiny")
    path = save_model(model, tmp_path / "tiny.h5")
    out = tmp_path / "tags.json"
    lines: list[str] = []
    # every native CPU variant of this build, the student's included (it runs only when named)
    result, dest = bench.run(model=str(path), batch=6, reps=2, cpu=True, out=str(out), variants=",".join(CPU),
                             echo=lines.append)
    assert dest == out
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(result))
    assert data["format"] == "pyconv-bench" and data["version"] == 1 and data["parts"] == ["cpu"]
    assert data["commit"] == tags.git_commit() and data["date"].endswith("+00:00")
    assert data["host_cpu"]["cores"] >= 1 and data["settings"]["batch"] == 6
    assert data["settings"]["cpu_naive_batch"] == 6  # --batch given: cpu-naive runs it too
    rtol = {v.name: v.rtol for v in variants.cpu_variants()}
    assert data["cpu"] and all(r["check"]["rtol"] == rtol[r["variant"]] for r in data["cpu"] if "check" in r)
    ours = [r for r in data["cpu"] if r["variant"] in CPU]
    assert sorted({(r["layer"], r["variant"]) for r in ours}) == sorted(
        (layer, n) for layer in ("conv1", "conv2") for n in CPU)
    for r in ours:
        if variants.is_student(r["variant"]) and "check" not in r:
            # The slot still holds the course's skeleton: its CHECK is recorded, the other variants still run.
            assert SKELETON.search(r["skipped"]), r["skipped"]
            continue
        assert r["check"]["passed"] and r["B"] == 6 and r["s"]["reps"] == 2 and r["s"]["median"] > 0
    assert {(r["C"], r["H"], r["M"], r["K"]) for r in ours} == {(1, 14, 4, 5), (4, 5, 8, 3)}
    torch_rows = [r for r in data["cpu"] if r["variant"].startswith("pytorch")]
    if data["torch"] is None:
        assert not torch_rows
    else:
        assert len(torch_rows) == 2 and all("x_torch" in r for r in ours if "s" in r)
    # the CPU goals are about milestone 2's default; a build without one (a student handout) has none
    assert [g["name"] for g in data["goals"]] == ([f"{M2_DEFAULT} sp19 conv1 (batch 10000)",
                                                   f"{M2_DEFAULT} sp19 conv2 (batch 10000)"] if M2_DEFAULT else [])
    assert all(g["met"] is None for g in data["goals"])  # the tiny model has no sp19 layer
    assert lines[-2] == f"wrote {out}"  # the table comes last
    assert lines[-1].startswith("Host CPU")
    if M2_DEFAULT:
        assert "Goals" in lines[-1] and M2_DEFAULT in lines[-1]


@needs("cpu-naive")
def test_naive_batch_is_reduced_only_without_batch(tmp_path, rng):
    model = random_model(rng, input_shape=(1, 12, 12), name="tiny")
    path = save_model(model, tmp_path / "tiny.h5")
    result, _ = bench.run(model=str(path), reps=1, cpu=True, out=str(tmp_path / "b.json"), variants="cpu-naive",
                          echo=lambda _s: None)
    small = cpu_layers.SINGLE_THREAD_BATCH
    assert result["settings"]["batch"] == 10000 and result["settings"]["cpu_naive_batch"] == small
    assert {r["B"] for r in result["cpu"] if r["variant"] == "cpu-naive"} == {small}
    assert {r["threads"] for r in result["cpu"] if r["variant"] == "cpu-naive"} == {1}


def test_the_single_thread_batch_follows_the_descriptor_not_the_name():
    naive = variants.from_dict({"name": "cpu-anything", "step": 5, "summary": "", "epilogue": "none",
                                "precision": "fp32", "rtol": 0.0, "device": "cpu", "single_thread": True,
                                "roles": {"m2": {"role": "on-request", "reason": "test"}}})
    fast = variants.from_dict({"name": "cpu-naive", "step": 6, "summary": "", "epilogue": "none",
                               "precision": "fp32", "rtol": 0.0, "device": "cpu",
                               "roles": {"m2": {"role": "on-request", "reason": "test"}}})
    rule = cpu_layers.batch_rule(10000, 1000)
    assert rule(naive) == 1000 and rule(fast) == 10000


def test_bad_arguments():
    with pytest.raises(PyconvError, match="batch"):
        bench.run(batch=0, cpu=True, echo=lambda _s: None)
    with pytest.raises(PyconvError, match="--reps"):
        bench.run(model="sp19", batch=2, reps=0, cpu=True, variants=CPU[0], echo=lambda _s: None)
    with pytest.raises(PyconvError, match="--warmup"):
        bench.run(batch=2, warmup=-1, cpu=True, echo=lambda _s: None)


# ---------------------------------------------------------------------------------------------------------------
# GPU (skipped where none is visible)


@pytest.mark.gpu
@requires_gpu
def test_gpu_layers_small_batch(tmp_path):
    benched = bench.split_variants(None, GPU, [])[0]  # in a handout: the student's, which must hold code
    for name in benched:
        skip_if_unstarted(name, gpu().conv)
    result, dest = bench.run(model="sp19", batch=64, reps=3, warmup=1, gpu=True, out=str(tmp_path / "g.json"),
                             echo=lambda _s: None)
    assert result["gpu"]["name"] and result["roofline"]["copy_GBps"] > 0 and result["roofline"]["fp32_GFLOPs"] > 0
    assert len(result["layers"]) == 2
    for layer in result["layers"]:
        timed = [r for r in layer["variants"] if "ms" in r]
        assert timed, "no variant was timed"
        for r in layer["variants"]:
            assert "error" not in r, r
            if "check" in r:
                assert r["check"]["passed"], r
            if "ms" in r:
                assert r["ms"]["median"] > 0 and 0 < r["pct_roofline"]
        assert layer["best"] is not None
    assert {r["variant"] for r in result["layers"][0]["variants"]} == set(benched)
    if gpu_layers.torch_gpu() is not None and any(v.reduced_precision for v in GPU_VARIANTS if v.name in benched):
        # a variant that rounds: cuDNN timed in TF32 and FP16 too, and that variant held to the faster of them
        for layer in result["layers"]:
            for mode in gpu_layers.REDUCED_CUDNN:
                assert layer[mode]["conv_ms"]["median"] > 0 and "FP16" in layer["cudnn_fp16"]["source"], layer[mode]
            for r in layer["variants"]:
                if "x_cudnn" in r and r["precision"] in variants.REDUCED_PRECISIONS:
                    assert r["cudnn_mode"] in ("tf32", "fp16"), r
    fused = [r for r in result["layers"][0]["variants"] if r["epilogue"] == "tanh-maxpool2"]
    assert all("ms" in r for r in fused)
    assert fused or not any(v.pools for v in GPU_VARIANTS if v.name in benched)


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU visible (or pyconv._gpu not built)")
def test_gpu_end_to_end_on_shipped_models(tmp_path):
    from pyconv.core import paths
    from pyconv.core.model import shipped_models

    if not shipped_models() or not paths.DATA_FILE.exists():
        pytest.skip("no shipped models or no data")
    name = shipped_models()[0]
    from pyconv.bench import end_to_end
    from pyconv.core.model import load_model

    final = end_to_end.final_plan(load_model(name), 100, "fp32")  # in a handout: the student's, on every layer
    for impl in dict.fromkeys(final.impls):
        skip_if_unstarted(impl, gpu().conv)
    result, _ = bench.run(model=name, batch=100, reps=2, warmup=1, end_to_end=True, out=str(tmp_path / "e.json"),
                          echo=lambda _s: None)
    (e,) = result["end_to_end"]
    assert e["model"] == name and e["batch"] == 100 and e["pyconv"]["peak_device_bytes"] > 0
    assert e["pyconv"]["pageable_ms"]["median"] > 0 and 0 <= e["pyconv"]["correctness"] <= 1


# ---------------------------------------------------------------------------------------------------------------
# The GPU layer path's logic, driven by a stand-in for pyconv._gpu (numpy reference inside, fixed timings), so the
# bookkeeping runs where no GPU is visible. The real module is exercised by the gpu-marked tests above.


def test_gpu_layer_bookkeeping_with_a_stand_in(tmp_path, rng, monkeypatch):
    g = StandInGpu()
    use_stand_in_gpu(monkeypatch, g)
    model = random_model(rng, input_shape=(1, 14, 14), name="tiny")
    path = save_model(model, tmp_path / "tiny.h5")
    lines: list[str] = []
    result, dest = bench.run(model=str(path), batch=40, reps=3, warmup=1, gpu=True, out=str(tmp_path / "g.json"),
                             echo=lines.append)
    assert json.loads(dest.read_text())["gpu"]["name"] == "Stand-in GPU"
    assert result["cuda_runtime"] == "12.8" and result["roofline"]["fp32_GFLOPs"] == 30000.0
    assert result["roofline"]["fp32_source"] == "sgemm"
    conv1, conv2 = result["layers"]
    rows1 = {r["variant"]: r for r in conv1["variants"]}
    rows2 = {r["variant"]: r for r in conv2["variants"]}
    # the wrong variant is caught (its error is in the last image) and never timed
    assert not rows1["fake-wrong"]["check"]["passed"] and "ms" not in rows1["fake-wrong"]
    assert "fake-wrong" not in g.timed
    assert rows1["fake-picky"]["skipped"] == "unsupported: needs C >= 4" and "ms" in rows2["fake-picky"]
    assert "not followed" in rows2["fake-fused"]["skipped"] and rows1["fake-fused"]["check"]["passed"]
    # conv1: B=40, 1x14x14 -> 4x10x10, K=5: flops 2*40*4*100*25 = 800,000; bytes 4*(40*196 + 100 + 40*400)
    flops, nbytes = 800_000, 4 * (40 * 196 + 100 + 40 * 400)
    assert conv1["flops"] == flops and conv1["bytes"] == nbytes
    floor = max(nbytes / 1000e9, flops / 30000e9) * 1e3
    plain = rows1["fake-plain"]
    assert plain["ms"]["median"] == pytest.approx(2.2) and plain["pct_roofline"] == pytest.approx(floor / 2.2 * 100)
    assert plain["gbps"] == pytest.approx(nbytes / 2.2e6) and plain["tanh_pool_ms"]["median"] == 3.0
    pooled_bytes = 4 * (40 * 196 + 100 + 40 * 4 * 25)
    assert rows1["fake-fused"]["gbps"] == pytest.approx(pooled_bytes / 0.55e6)
    assert conv1["best"]["variant"] == "fake-fused" and conv1["best_conv"]["variant"] == "fake-plain"
    assert "tanh_pool_ms" not in rows2["fake-plain"]  # conv2 has no tanh + pool after it
    assert conv1["cudnn"] == {"error": "PyTorch with CUDA is not installed: no cuDNN column"}
    assert "Stand-in GPU" in lines[-1] and "fake-fused (conv+tanh+pool)" in lines[-1]
    assert all(g["met"] is None for g in result["goals"])  # no course layer at batch 10000 here
    assert not any(line.startswith("updated ") for line in lines)  # --out outside results/: no evidence file

    # Written to the results folder (the default destination): this GPU's evidence file follows the run.
    from pyconv import evidence
    from pyconv.core import paths

    monkeypatch.setattr(paths, "RESULTS", tmp_path / "results")
    lines.clear()
    _, dest = bench.run(model=str(path), batch=40, reps=3, warmup=1, gpu=True, echo=lines.append)
    assert dest.parent == tmp_path / "results" / "runs"  # a new run stays out of results/ until promoted
    assert not (tmp_path / "results" / "evidence").exists() and not any(s.startswith("updated ") for s in lines)
    readme = tmp_path / "README.md"
    readme.write_text("<!-- bench:begin -->\n<!-- bench:end -->\n")
    from pyconv.bench import promote

    dest = promote.promote(dest, tmp_path / "results", readme, echo=lines.append)
    ev = evidence.load(tmp_path / "results" / "evidence" / "stand-in-gpu.json")
    assert f"wrote {ev.path}" in lines
    assert lines[-1] == f"promoted {tmp_path / 'results' / 'runs' / dest.name} to {dest}"
    assert [t.variant for t in ev.ranking((1, 14, 14, 4, 5, True))] == ["fake-fused", "fake-plain"]
    assert [t.variant for t in ev.ranking((4, 5, 5, 8, 3, False))] == ["fake-plain", "fake-picky"]
    assert all(t.source == dest.name for t in ev.ranking((4, 5, 5, 8, 3, False)))


def test_model_digest_names_the_exact_weights():
    rng = np.random.default_rng(0)
    a = random_model(rng)
    b = random_model(np.random.default_rng(0))
    assert a.digest() == b.digest() and len(a.digest()) == 64
    b.layers[0].weight = b.layers[0].weight.copy()
    b.layers[0].weight.flat[0] += 1e-6
    assert a.digest() != b.digest()


def test_trace_pass_says_where_a_calls_time_goes(monkeypatch):
    from pyconv.bench import end_to_end as e2e

    class FakeCupti:
        CuptiError = RuntimeError

        def __init__(self):
            self.clock = iter([1_000_000, 9_000_000])  # the second call's start and return on CUPTI's clock (ns)

        def start(self):
            pass

        def stop(self):
            pass

        def timestamp(self):
            return next(self.clock)

        def records(self):
            return [
                {"kind": "kernel", "name": "the first call's", "start_ns": 200_000, "end_ns": 900_000, "stream": 8},
                {"kind": "runtime", "name": "cudaGraphLaunch", "start_ns": 1_100_000, "end_ns": 1_200_000},
                {"kind": "kernel", "name": "conv", "start_ns": 4_000_000, "end_ns": 7_000_000, "stream": 8},
                {"kind": "memcpy", "name": "[CUDA memcpy HtoD]", "start_ns": 1_500_000, "end_ns": 3_500_000,
                 "stream": 7},
                {"kind": "memcpy", "name": "[CUDA memcpy HtoD]", "start_ns": 3_600_000, "end_ns": 5_600_000,
                 "stream": 7},
                {"kind": "memcpy", "name": "[CUDA memcpy DtoH]", "start_ns": 7_100_000, "end_ns": 7_200_000,
                 "stream": 8},
            ]

    monkeypatch.setattr(e2e.native, "cupti", FakeCupti)
    calls = []
    tr = e2e.trace_pass(lambda: calls.append(1))
    assert calls == [1, 1]  # a first call pays CUPTI's set-up; the second is the one measured
    assert tr["first_copy_ms"] == pytest.approx(0.5) and tr["copies_end_ms"] == pytest.approx(4.6)
    assert tr["gpu_end_ms"] == pytest.approx(6.2) and tr["call_ms"] == pytest.approx(8.0)
    assert tr["copy_ms"] == pytest.approx(4.0)
    assert [(a["name"], a["start_us"]) for a in tr["activities"]] == [
        ("[CUDA memcpy HtoD]", 500.0), ("[CUDA memcpy HtoD]", 2600.0), ("conv", 3000.0), ("[CUDA memcpy DtoH]", 6100.0)]

    def not_built():
        raise e2e.native.NotBuilt("the CUPTI trace module pyconv._cupti is not built")

    monkeypatch.setattr(e2e.native, "cupti", not_built)
    assert e2e.trace_pass(lambda: calls.append(2))["error"].startswith("unavailable: the CUPTI trace module")
    assert calls == [1, 1]  # nothing is run untraced


@pytest.mark.parametrize("fc16, fp16, moves, tries", [
    (True, True, {"reduced-fc-tf32": 0}, ["reduced", "reduced-fc-tf32"]),
    (True, True, {"reduced-fc-tf32": 1, "tf32": 0}, ["reduced", "reduced-fc-tf32", "tf32"]),
    (True, False, {"reduced-fc-tf32": 1, "fc-tf32": 0}, ["reduced", "reduced-fc-tf32", "fc-tf32"]),
    (False, True, {"tf32": 0}, ["reduced", "tf32"]),
    (False, True, {"tf32": 2, "fc-tf32": 0}, ["reduced", "tf32", "fc-tf32"]),
    (False, True, {"tf32": 2, "fc-tf32": 1}, ["reduced", "tf32", "fc-tf32", "fp32"]),
    (False, False, {"fc-tf32": 0}, ["reduced", "fc-tf32"]),
    (False, False, {"fc-tf32": 3}, ["reduced", "fc-tf32", "fp32"]),
])
def test_end_to_end_tries_less_rounding_after_a_candidate_moved_a_label(monkeypatch, fc16, fp16, moves, tries):
    """The reduced candidate moved a label: the same with TF32 fully connected layers, final's plan with TF32 alone,
    then with float32 conv layers and TF32 fully connected layers, each where it differs from one measured already
    and kept when it moves no label; failing all, final runs float32.
    fc16: the reduced candidate's FC layers ran in FP16; fp16: it had an FP16 conv variant."""
    from types import SimpleNamespace

    from pyconv.bench import end_to_end as e2e

    labels = np.arange(6) % 3
    torch_labels = labels.copy()
    conv2 = "half" if fp16 else "tf"
    plans = {"reduced": (["fused", conv2], "fp16" if fc16 else "tf32"), "reduced-fc-tf32": (["fused", conv2], "tf32"),
             "tf32": (["fused", "tf"], "tf32"), "fc-tf32": (["fused", "exact"], "tf32"),
             "fp32": (["fused", "exact"], "fp32")}
    moved = {"reduced": 1, "fp32": 0, **moves}
    measured, swept = [], []

    def final_plan(model, batch, precision):
        impls, fc = plans[precision]
        return SimpleNamespace(impls=impls, fc_math=fc, chunks=1, streams=1, taper=1.0, tail_pieces=1,
                               precision=precision)

    def measure_ours(model, cfg, x, xp, labels_, warmup, reps, sweep):
        measured.append(cfg.precision)
        swept.append(sweep)
        predicted = torch_labels.copy()
        predicted[:moved[cfg.precision]] += 1
        return {"pinned_ms": {"median": 1.0}}, predicted

    class FakeTorch:
        cuda = SimpleNamespace(empty_cache=lambda: None)

        @staticmethod
        def from_numpy(a):
            return SimpleNamespace(pin_memory=lambda: SimpleNamespace(numpy=lambda: a))

    model = SimpleNamespace(name="m", arch="sp19", input_size=48, digest=lambda: "d")
    monkeypatch.setattr(e2e, "load_model", lambda name: model)
    monkeypatch.setattr(e2e.data, "load_test", lambda size, batch: (np.zeros((6, 1, 4, 4), np.uint8), labels))
    monkeypatch.setattr(e2e, "final_plan", final_plan)
    monkeypatch.setattr(e2e, "_measure_ours", measure_ours)
    monkeypatch.setattr(e2e, "copy_floor", lambda *a: {"median": 0.5})
    monkeypatch.setattr(e2e, "_torch_end_to_end", lambda *a: ({"name": "eager-fp32"}, torch_labels))
    entry = e2e.bench_end_to_end("m", 6, 1, 1, torch=FakeTorch)
    assert entry["pyconv_reduced"]["impls"] == plans["reduced"][0] and entry["pyconv_reduced"]["differ_vs_pytorch"] == 1
    assert entry["pyconv_reduced"]["fc_math"] == plans["reduced"][1]
    assert measured == tries
    assert swept[-1]  # the configuration kept carries the pipeline sweep its taper comes from
    kept = tries[-1]
    assert entry["reduced_precision_ok"] is (kept != "fp32")
    assert (entry["impls"], entry["fc_math"]) == plans[kept]
    for rejected in tries[1:-1]:  # every candidate between the first and the one kept moved a label
        assert entry["pyconv_" + rejected.replace("-", "_")]["differ_vs_pytorch"] > 0
    assert not any(("pyconv_" + p.replace("-", "_")) in entry for p in plans if p not in tries[:-1])
    assert entry["pyconv"]["differ_vs_pytorch"] == 0
