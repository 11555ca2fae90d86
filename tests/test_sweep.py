"""`invoke bench --sweep` (pyconv.bench.sweep): the drawn shapes, the rows and ratios, the summary and goals, driven
by a stand-in for pyconv._gpu and for cuDNN where no GPU is visible; the real module on a GPU (marker gpu)."""

from __future__ import annotations

import json
import math

import pytest
from built_variants import GPU
from gpu_helpers import StandInGpu, gpu, requires_gpu, use_stand_in_gpu
from student_variants import skip_if_unstarted

from pyconv.bench import gpu_layers, schema, sweep
from pyconv.bench import run as bench
from pyconv.report import tables


def test_the_shapes_are_fixed_distinct_and_in_range():
    shapes = sweep.draw_shapes()
    assert shapes == sweep.draw_shapes() and len(shapes) == sweep.SHAPES >= 40 and len(set(shapes)) == len(shapes)
    for c, h, w, m, k in shapes:
        assert 1 <= c <= 32 and 4 <= m <= 64 and k in (3, 5, 7) and 12 <= h <= 96 and h == w and h - k + 1 >= 2
    # the draw covers the ranges, not a corner of them
    assert {k for *_, k in shapes} == {3, 5, 7} and max(h for _, h, *_ in shapes) > 80 > 20 > min(
        h for _, h, *_ in shapes)
    assert sweep.draw_shapes(seed=sweep.SEED + 1) != shapes


class SweepGpu(StandInGpu):
    """The stand-in with a TF32 variant that is faster than every float32 one (2.2 ms median of 3 reps), and an FP16
    one between them (1.65 ms)."""

    @staticmethod
    def variants():
        out = StandInGpu.variants()
        tf32 = dict(out[0], name="fake-tf32", step=4, precision="tf32")
        fp16 = dict(out[0], name="fake-fp16", step=5, precision="fp16")
        return [*out, tf32, fp16]

    @staticmethod
    def conv(name, x, k):
        return StandInGpu.conv("fake-plain" if name in ("fake-tf32", "fake-fp16") else name, x, k)

    def time_conv(self, name, x, k, warmup, reps):
        times = super().time_conv(name, x, k, warmup, reps)
        return [t * {"fake-tf32": 0.5, "fake-fp16": 0.75}.get(name, 1.0) for t in times]


class FakeTorch:
    class cuda:  # noqa: N801 (the attribute torch has)
        @staticmethod
        def empty_cache():
            pass


def fake_cudnn(torch, site, rng, warmup, reps, *, mode="fp32", inputs=None):
    """cuDNN FP32: conv 4.4 ms, conv + tanh + pool 5.5; TF32: 2.2 and 1.1; FP16: 1.1 and 2.0 (faster than TF32 on
    the conv alone only)."""
    conv, pooled = {"fp32": (4.4, 5.5), "tf32": (2.2, 1.1), "fp16": (1.1, 2.0)}[mode]
    assert inputs is not None and inputs[0].shape == (site["B"], site["C"], site["H"], site["W"])  # shared x, k
    return {"source": f"stand-in cuDNN {mode}", "conv_ms": {"median": conv}, "conv_tanh_pool_ms": {"median": pooled}}


SHAPES = [(1, 12, 12, 4, 3), (3, 13, 13, 5, 5)]


def test_sweep_rows_ratios_summary_and_goals(tmp_path, monkeypatch):
    g = SweepGpu()
    use_stand_in_gpu(monkeypatch, g, torch=FakeTorch)
    monkeypatch.setattr(gpu_layers, "cudnn_layer", fake_cudnn)
    monkeypatch.setattr(sweep, "draw_shapes", lambda seed=sweep.SEED: SHAPES)
    lines: list[str] = []
    result, dest = bench.run(batch=40, reps=3, sweep=True, out=str(tmp_path / "s.json"), echo=lines.append)
    assert result["parts"] == ["sweep"] and not result["layers"]
    doc = schema.load(dest)  # through the schema: typed records
    sw = doc.sweep
    assert (sw.batch, sw.warmup, sw.reps, sw.seed) == (40, sweep.WARMUP, 3, sweep.SEED)
    assert [(r.shape, r.tanh_pool) for r in sw.rows] == [("s00", False), ("s00", True), ("s01", False), ("s01", True)]
    plain, pooled = sw.rows[0], sw.rows[1]
    cells = {v.variant: v for v in plain.variants}
    assert cells["fake-plain"].ms == pytest.approx(2.2) and cells["fake-tf32"].ms == pytest.approx(1.1)
    assert cells["fake-tf32"].precision == "tf32" and "elements off" in cells["fake-wrong"].failed
    assert cells["fake-fp16"].precision == "fp16" and cells["fake-fp16"].ms == pytest.approx(1.65)
    assert cells["fake-wrong"].ms is None and "fake-wrong" not in g.timed  # a failed variant is never timed
    assert "in the row with them" in cells["fake-fused"].skipped
    assert cells["fake-picky"].skipped == "unsupported: needs C >= 4"
    # like for like: the best float32 variant against cuDNN FP32 (the FP16 variant is not float32), the best of all
    # against cuDNN's faster reduced mode: FP16 for the conv alone, TF32 with tanh + pool
    assert plain.best_fp32.variant == "fake-plain" and plain.best.variant == "fake-tf32"
    assert (plain.cudnn_tf32_ms, plain.cudnn_fp16_ms) == (2.2, 1.1)
    assert plain.x_cudnn_fp32 == pytest.approx(4.4 / 2.2) and plain.x_cudnn_tf32 == pytest.approx(1.1 / 1.1)
    assert plain.x_cudnn_reduced_mode == "fp16"
    pcells = {v.variant: v for v in pooled.variants}
    assert pcells["fake-plain"].ms == 3.0 and pcells["fake-fused"].ms == pytest.approx(0.55)  # conv + tanh + pool
    assert pooled.best.variant == pooled.best_fp32.variant == "fake-fused"
    assert pooled.x_cudnn_fp32 == pytest.approx(5.5 / 0.55) and pooled.x_cudnn_tf32 == pytest.approx(1.1 / 0.55)
    assert pooled.x_cudnn_reduced_mode == "tf32" and pooled.cudnn_fp16_ms == 2.0
    fp32, tf32 = sw.summary
    assert (fp32.comparison, fp32.rows, fp32.missing) == ("fp32", 4, 0)
    assert fp32.worst == pytest.approx(2.0) and fp32.worst_row.startswith("s00 C=1 12x12 M=4 K=3")
    assert fp32.geomean == pytest.approx(math.sqrt(2.0 * 10.0)) and tf32.worst == pytest.approx(1.0)
    assert tf32.title == "best variant (reduced precision allowed) x cuDNN's faster of TF32 and FP16"
    goals = {x.name.split(" over")[0]: x for x in doc.goals}
    worst = goals["sweep: worst best-float32 variant x cuDNN FP32"]
    geo = goals["sweep: geometric mean of best-float32 variant x cuDNN FP32"]
    assert worst.met is True and worst.measured == pytest.approx(2.0) and "s00" in worst.note
    assert geo.met is True and geo.target == ">= 3"
    assert any(line.startswith("sweep 2/2: C=3 13x13 M=5 K=5 at batch 40") for line in lines)
    table = lines[-1]
    assert "Sweep summary" in table and "best float32 variant x cuDNN FP32" in table and "fake-wrong" in table
    rows = tables.sweep_table(doc)
    assert rows.header[6:11] == ["best (reduced precision allowed)", "ms", "cuDNN TF32 ms", "cuDNN FP16 ms",
                                 "x cuDNN reduced"]
    assert rows.rows[0][6:11] == ["fake-tf32", "1.10", "2.20", "1.10", "1.0 (vs FP16)"], rows.rows[0]
    assert json.loads(dest.read_text())["sweep"]["rows"][0]["variants"][0]["variant"] == "fake-plain"


def test_cudnn_algorithm_from_its_kernel_names():
    """Names as cuDNN 9 launches them on an H200 (the FFT three from Nsight Compute on the sweep's s08)."""
    fft = ["void flip_filter<float, float>(T2 *, const T1 *, int, int, int, int)",
           "void fft2d_r2c_32x32<float, 0, 5, 0>(float2 *, const T1 *, int, int, int, int, int, int, int, int)",
           "sm80_xmma_gemm_cf32cf32_f32f32_cf32_tn_n_tilesize64x32x8_stage3_warpsize1x2x1_ffma_aligna8_alignc8",
           "void fft2d_c2r_32x32<float, 0, 0, 0, 0, 0>(T1 *, const float2 *, int, int, int, int, int, int)"]
    assert sweep.cudnn_algorithm(fft) == "FFT"  # its complex GEMM does not make it a GEMM
    assert sweep.cudnn_algorithm(["void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(...)",
                                  "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n"]) == "Winograd"
    assert sweep.cudnn_algorithm(["sm90_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw"]) == "implicit GEMM"
    assert sweep.cudnn_algorithm(["void implicit_convolve_sgemm<float, float, 128, 5, 5>(...)"]) == "implicit GEMM"
    assert sweep.cudnn_algorithm(["void im2col4d_kernel<float, int>(...)", "void explicit_convolve_sgemm<float>(...)"
                                  ]) == "GEMM"
    assert sweep.cudnn_algorithm(["void conv2d_grouped_direct_kernel<float>(...)"]) == "direct"
    assert sweep.cudnn_algorithm(["void something_new(float *)"]) == "other"
    assert sweep.cudnn_algorithm([]) is None and sweep.cudnn_algorithm(None) is None


def test_cudnn_kernels_reach_the_row_the_json_and_the_table():
    """A layer whose cuDNN FP32 entry holds the kernels (the resident bench's) gives rows with them and their family;
    through the schema the table has the algorithm column; a file without them has none."""
    layer = {"layer": "s00", "B": 8, "C": 11, "H": 31, "W": 31, "M": 27, "K": 5, "variants": [],
             "cudnn": {"conv_ms": {"median": 1.6}, "conv_tanh_pool_ms": {"median": 2.5},
                       "kernels": ["void fft2d_r2c_32x32<float, 0, 0, 0>(...)", "void fft2d_c2r_32x32<float>(...)"]}}
    rows = sweep.rows_of(layer, {})
    assert [r["cudnn_fp32_algorithm"] for r in rows] == ["FFT", "FFT"]
    assert rows[0]["cudnn_fp32_kernels"] == layer["cudnn"]["kernels"] and "cudnn_fp32_kernels_error" not in rows[0]

    class Result:
        sweep = schema.Sweep.from_dict({"seed": 1, "batch": 8, "warmup": 1, "reps": 1, "rows": rows})

    t = tables.sweep_table(Result)
    summary = tables.sweep_summary_table(Result)  # no float32 times here: no per-algorithm line
    assert not [r for r in summary.rows if "where cuDNN ran" in r[0]]
    col = t.header.index("cuDNN FP32 algorithm")
    assert t.header[col - 1] == "cuDNN FP32 ms" and [r[col] for r in t.rows] == ["FFT", "FFT"]
    assert any("fewer multiplies" in n for n in t.notes)
    failed = dict(layer, cudnn={"conv_ms": {"median": 1.6}, "kernels_error": "RuntimeError: CUPTI busy"})
    rows = sweep.rows_of(failed, {})
    assert rows[0]["cudnn_fp32_kernels_error"] == "RuntimeError: CUPTI busy" and "cudnn_fp32_algorithm" not in rows[0]

    class Failed:
        sweep = schema.Sweep.from_dict({"seed": 1, "batch": 8, "warmup": 1, "reps": 1, "rows": rows})

    t = tables.sweep_table(Failed)
    assert t.rows[0][t.header.index("cuDNN FP32 algorithm")] == "-"
    assert "cuDNN FP32 kernels not recorded: RuntimeError: CUPTI busy" in t.notes

    class Old:
        sweep = schema.Sweep.from_dict({"seed": 1, "batch": 8, "warmup": 1, "reps": 1,
                                        "rows": sweep.rows_of(dict(layer, cudnn={"conv_ms": {"median": 1.6}}), {})})

    assert "cuDNN FP32 algorithm" not in tables.sweep_table(Old).header


def test_the_summary_splits_the_float32_comparison_by_cudnns_algorithm():
    def row(shape, pooled, x, algorithm):
        return {"shape": shape, "B": 8, "C": 3, "H": 20, "W": 20, "M": 4, "K": 5, "tanh_pool": pooled,
                "x_cudnn_fp32": x, "cudnn_fp32_algorithm": algorithm}

    rows = [row("s00", False, 0.5, "FFT"), row("s00", True, 2.0, "FFT"), row("s01", False, 3.0, "implicit GEMM"),
            row("s01", True, 1.2, "implicit GEMM"), row("s02", False, 4.0, None)]

    class Result:
        sweep = schema.Sweep.from_dict({"seed": 1, "batch": 8, "warmup": 1, "reps": 1, "rows": rows,
                                        "summary": sweep.summarise(rows)})

    lines = {r[0]: r[1:] for r in tables.sweep_summary_table(Result).rows}
    assert lines["best float32 variant x cuDNN FP32"][:2] == ["5", "0.50"]  # every row, as before
    assert lines["best float32 variant x cuDNN FP32 where cuDNN ran FFT"] == [
        "2", "0.50", "s00 C=3 20x20 M=4 K=5", "1.0"]
    assert lines["best float32 variant x cuDNN FP32 where cuDNN ran implicit GEMM"] == [
        "2", "1.2", "s01 C=3 20x20 M=4 K=5 + tanh + pool", "1.9"]  # sqrt(1.2 x 3)
    assert len(lines) == 4  # the row without an algorithm is in no family


def test_goals_missed_and_unmeasured():
    rows = [{"shape": "s00", "C": 1, "H": 12, "W": 12, "M": 4, "K": 3, "tanh_pool": False, "x_cudnn_fp32": 0.5},
            {"shape": "s00", "C": 1, "H": 12, "W": 12, "M": 4, "K": 3, "tanh_pool": True, "x_cudnn_fp32": 8.0},
            {"shape": "s01", "C": 2, "H": 12, "W": 12, "M": 4, "K": 3, "tanh_pool": True}]
    from pyconv.bench import goals

    worst, geo = goals.sweep_goals({"batch": 10, "summary": sweep.summarise(rows)})
    assert worst["met"] is False and worst["measured"] == 0.5 and "1 row(s) without both times" in worst["note"]
    assert geo["met"] is False and geo["measured"] == pytest.approx(2.0)
    none = goals.sweep_goals({"batch": 10, "summary": sweep.summarise(rows[2:])})
    assert all(x["met"] is None and x["measured"] is None for x in none)


@pytest.mark.gpu
@requires_gpu
def test_sweep_on_the_gpu_small(tmp_path, monkeypatch):
    """The real module and cuDNN (where PyTorch has CUDA) on two drawn shapes at batch 8: every variant the bench
    takes by default (in a student handout the student's, which must hold code)."""
    for name in bench.split_variants(None, GPU, [])[0]:
        skip_if_unstarted(name, gpu().conv)
    first = sweep.draw_shapes()[:2]
    monkeypatch.setattr(sweep, "draw_shapes", lambda seed=sweep.SEED: first)
    result, dest = bench.run(batch=8, reps=2, warmup=1, sweep=True, out=str(tmp_path / "s.json"),
                             echo=lambda _s: None)
    sw = schema.load(dest).sweep
    assert len(sw.rows) == 4
    for row in sw.rows:
        assert row.best_fp32 is not None and row.best_fp32.ms > 0
        assert not [v for v in row.variants if v.failed or v.error], row.variants
        if gpu_layers.torch_gpu() is not None:
            assert row.cudnn_fp32_ms > 0 and row.cudnn_tf32_ms > 0 and row.cudnn_fp16_ms > 0 and row.x_cudnn_fp32 > 0
            assert row.x_cudnn_reduced_mode in ("tf32", "fp16")
            assert row.x_cudnn_tf32 == pytest.approx(min(row.cudnn_tf32_ms, row.cudnn_fp16_ms) / row.best.ms)
            # the kernels cuDNN FP32's conv launched, recorded by the profiler, and their family
            assert row.cudnn_fp32_kernels_error is None and row.cudnn_fp32_kernels, row
            assert row.cudnn_fp32_algorithm == sweep.cudnn_algorithm(row.cudnn_fp32_kernels)
            assert row.cudnn_fp32_algorithm in [family for family, _ in sweep.ALGORITHMS] + ["other"]
