"""`invoke report` (pyconv.report): the Markdown page and the PNG plots from a bench JSON, the plain-text tables,
and the README section between the bench markers (everything else byte-identical).

The JSON here is SYNTHETIC, built in this file to exercise the rendering: its numbers are made up and it is never
written under results/."""

from __future__ import annotations

import copy
import json
import os
import re

import pytest
from conftest import needs_matplotlib

from pyconv.bench import goals, gpu_layers, roofline, timing
from pyconv.bench import run as bench
from pyconv.bench.schema import FORMAT, VERSION
from pyconv.core.errors import PyconvError
from pyconv.report import tables as report


def synthetic_result() -> dict:
    """A made-up bench result with every kind of row: passed, failed, skipped, fused, cuDNN, CPU, end to end."""

    def variant(name, step, ms, epilogue="none", tanh_pool=None):
        r = {"variant": name, "step": step, "summary": "synthetic", "epilogue": epilogue, "x_on_host": False,
             "check": {"passed": True, "max_rel_err": 1e-6, "max_abs_err": 1e-5}, "ms": timing.stats([ms, ms * 1.1])}
        r.update(roofline.rates(10**9, 10**8, r["ms"]["median"], 0.1))
        if tanh_pool:
            r["tanh_pool_ms"] = timing.stats([tanh_pool])
        return r

    failed = {"variant": "gpu-broken", "step": 2, "summary": "synthetic", "epilogue": "none", "x_on_host": False,
              "check": {"passed": False, "why": "3 of 10 elements off", "max_rel_err": 0.5, "max_abs_err": 1.0},
              "skipped": "FAILED the correctness check: not timed"}
    skipped = {"variant": "gpu-tiny-only", "step": 3, "summary": "synthetic", "epilogue": "none",
               "x_on_host": True, "skipped": "unsupported: needs C >= 4"}
    layer1 = {"model": "synthetic", "arch": "sp19", "layer": "conv1", "B": 10000, "C": 1, "H": 48, "W": 48, "M": 6,
              "K": 5, "tanh_pool_follows": True, "flops": 10**9, "bytes": 10**8, "floor_ms": 0.1,
              "bytes_pooled": 5 * 10**7, "floor_tanh_pool_ms": 0.05,
              "variants": [variant("gpu-baseline", 0, 2.0, tanh_pool=2.3), failed, skipped,
                           dict(variant("gpu-fused-tanh-pool", 10, 0.09, "tanh-maxpool2"),
                                u8_ms=timing.stats([0.07, 0.072]), u8_check={"passed": True})],
              "cudnn": {"conv_ms": timing.stats([2.2]), "conv_tanh_pool_ms": timing.stats([2.5]), "source": "made up"}}
    layer2 = {"model": "synthetic", "arch": "sp19", "layer": "conv2", "B": 10000, "C": 6, "H": 22, "W": 22,
              "M": 16, "K": 5, "tanh_pool_follows": False, "flops": 10**9, "bytes": 10**8, "floor_ms": 0.2,
              "variants": [variant("gpu-baseline", 0, 1.5)], "cudnn": {"error": "PyTorch is not installed"}}
    for layer in (layer1, layer2):
        gpu_layers.summarise_layer(layer)
    cpu = [{"model": "synthetic", "layer": "conv1", "C": 1, "H": 48, "W": 48, "M": 6, "K": 5, "B": 10000,
            "variant": "cpu-fast", "threads": 2, "flops": 10**9, "s": timing.stats([0.2, 0.25]), "gflops": 5.0,
            "check": {"passed": True, "max_rel_err": 2e-7}, "x_torch": 1.5},
           {"model": "synthetic", "layer": "conv1", "C": 1, "H": 48, "W": 48, "M": 6, "K": 5, "B": 10000,
            "variant": "pytorch 9.9", "threads": 2, "flops": 10**9, "s": timing.stats([0.3]), "gflops": 3.3}]
    e2e = [{"model": "synthetic", "arch": "sp19", "batch": 10000, "impls": ["gpu-fused-tanh-pool", "gpu-baseline"],
            "fc_math": "tf32", "chunks": 4, "streams": 2,
            "pyconv": {"resident_ms": timing.batch_stats([0.8], 10000), "pinned_ms": timing.batch_stats([1.3], 10000),
                       "pageable_ms": timing.batch_stats([2.0], 10000), "correctness": 0.8397,
                       "differ_vs_pytorch": 0, "peak_device_bytes": 300 * 2**20,
                       "pinned_op_times_ms": timing.batch_stats([1.4], 10000),
                       "pinned_trace": {"first_copy_ms": 0.02, "copies_end_ms": 0.45, "gpu_end_ms": 0.55,
                                        "call_ms": 0.58, "copy_ms": 0.42, "activities": []},
                       "pinned_span": {"host_ms": timing.batch_stats([1.3], 10000),
                                       "gpu_ms": timing.batch_stats([1.2], 10000),
                                       "host_share_ms": timing.batch_stats([0.1], 10000)},
                       "pipeline": [{"chunks": c, "streams": s,
                                     "pinned_ms": timing.batch_stats([1.0 + c / 10 + s], 10000)}
                                    for s in (2, 4) for c in (1, 4)]},
            "pytorch": {"resident_ms": timing.batch_stats([4.0], 10000), "pinned_ms": timing.batch_stats([6.0], 10000),
                        "pageable_ms": timing.batch_stats([7.0], 10000), "correctness": 0.8397,
                        "peak_device_bytes": 900 * 2**20},
            "x_pytorch": {"resident_ms": 5.0, "pinned_ms": 6.0 / 1.3, "pageable_ms": 3.5},
            "copy_floor_ms": timing.batch_stats([0.4], 10000),
            "yardsticks": [{"name": "compiled-fp32", "mode": "max-autotune", "compile_s": 95.0,
                            "resident_ms": timing.batch_stats([1.0], 10000),
                            "pinned_ms": timing.batch_stats([1.6], 10000), "correctness": 0.8397,
                            "labels_moved": 0},
                           {"name": "compiled-fp16-channels-last", "mode": "max-autotune",
                            "error": "unavailable: RuntimeError: Cannot find a working triton installation"}]}]
    result = {"format": FORMAT, "version": VERSION, "parts": ["gpu", "cpu", "end_to_end"],
              "date": "2000-01-01T00:00:00+00:00", "commit": "0" * 40 + "-synthetic",
              "host_cpu": {"model": "Synthetic CPU", "cores": 2},
              "gpu": {"name": "Synthetic GPU", "compute_capability": "9.0", "multiprocessors": 132,
                      "cuda_driver_version": 13000, "cuda_runtime_version": 13000},
              "driver": "000.00", "cuda_driver_api": "13.0", "cuda_runtime": "13.0",
              "torch": {"version": "9.9", "cuda": "13.0", "cudnn": 91000},
              "settings": {"batch": 10000, "warmup": 5, "inputs": bench.INPUTS, "gpu_reps": 20, "cpu_reps": 5},
              "roofline": {"copy_GBps": 3000.0, "fma_GFLOPs": 50000.0, "sgemm_GFLOPs": 51000.0,
                           "fp32_GFLOPs": 51000.0, "fp32_source": "sgemm"},
              "layers": [layer1, layer2], "cpu": cpu, "end_to_end": e2e}
    result["goals"] = goals.check_goals(result)
    return result


@pytest.fixture
def bench_json(tmp_path):
    path = tmp_path / "bench-synthetic.json"
    path.write_text(json.dumps(synthetic_result()))
    return path


@needs_matplotlib
def test_report_page_and_plots(bench_json, tmp_path):
    out = tmp_path / "out" / "report.md"
    dest, pngs = report.write_report(bench_json, out)
    assert dest == out
    page = out.read_text()
    for text in ("Synthetic GPU", "driver 000.00", "0" * 40 + "-synthetic", "2000-01-01", "Synthetic CPU",
                 "| variant | step | ms |", "gpu-fused-tanh-pool (conv+tanh+pool)", "cuDNN conv2d", "FAIL (3 of 10",
                 "unsupported: needs C >= 4", "cpu-fast", "pytorch 9.9", "End to end", "Goals",
                 "sp19 total conv op time"):
        assert text in page, text
    assert [p.name for p in pngs] == ["report-ladder-synthetic-conv1-b10000.png",
                                      "report-ladder-synthetic-conv2-b10000.png", "report-gpu-roofline.png",
                                      "report-cpu-op-time.png"]
    import matplotlib.image

    for p in pngs:
        assert p.parent == out.parent and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        h, w = matplotlib.image.imread(p).shape[:2]
        assert h > 100 and w > 100
        assert f"]({p.name})" in page
    assert sorted(os.listdir(out.parent)) == sorted(["report.md", *(p.name for p in pngs)])  # no temporaries


def test_ladder_numbers_come_from_the_json():
    r = synthetic_result()
    md = report.markdown_tables(r)
    # gpu-baseline on conv1: median of [2.0, 2.2] = 2.1 ms; x cuDNN 2.2 / 2.1 = 1.05; + tanh + pool 2.3 ms,
    # x cuDNN (fused) 2.5 / 2.3 = 1.09
    row = next(line for line in md.splitlines() if line.startswith("| gpu-baseline | 0 | 2.10 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[10] == "1.0" and cells[11] == "2.30" and cells[12] == "1.1"
    # noise: the relative standard deviation of [2.0, 2.2] (ddof 1), 0.1414 / 2.1 = 6.7 %; no warm time (events)
    assert cells[5] == "6.7" and cells[6] == "-"
    # the fused variant: 0.09 ms median of [0.09, 0.099] = 0.0945; x cuDNN (conv+tanh+pool) 2.5 / 0.0945
    fused = next(line for line in md.splitlines() if line.startswith("| gpu-fused-tanh-pool (conv+tanh+pool)"))
    assert "| 0.0945 |" in fused and f"| {report.num(2.5 / 0.0945, 2)} |" in fused


def test_a_first_layers_uint8_path_is_noted_with_its_time():
    md = report.markdown_tables(synthetic_result())
    assert "gpu-fused-tanh-pool from uint8 images: 0.0710 ms" in md


def _fastest_row(result: dict) -> list[str]:
    t = report.summary_table([("bench-synthetic.json", result)])
    return next(r for r in t.rows if r[0].startswith("fastest variant per layer"))


def _median(*samples: float) -> float:
    return timing.stats(list(samples))["median"]


CONV2_MS = _median(1.5, 1.5 * 1.1)  # synthetic_result's conv2: gpu-baseline, its only variant


def test_the_summary_counts_a_first_layer_from_uint8_images_when_that_path_passed():
    """The network feeds its first layer uint8 images: the summary's fastest-per-layer total takes the checked
    uint8 path of a variant that has one (gpu-fused-tanh-pool: median of 0.07, 0.072 = 0.071 ms, against 0.0945 ms
    from float32), plus conv2 (gpu-baseline, median of 1.5, 1.65 = 1.575 ms), and says so; the per-layer table
    keeps the float32 best it sets beside cuDNN's."""
    r = synthetic_result()
    assert _fastest_row(r)[2:] == [report.num(_median(0.07, 0.072) + CONV2_MS)]
    t = report.summary_table([("bench-synthetic.json", r)])
    assert any("`synthetic` conv1: gpu-fused-tanh-pool from uint8 images, 0.0710 ms (from float32 images: "
               "gpu-fused-tanh-pool, 0.0945 ms)" in n for n in t.notes)
    md = report.markdown_tables(r)
    assert "| synthetic | conv1 | gpu-fused-tanh-pool (conv+tanh+pool) | 0.0945 |" in md
    assert "synthetic conv1 as the network runs it: gpu-fused-tanh-pool from uint8 images, 0.0710 ms" in md


def test_a_failed_or_unchecked_uint8_path_is_never_counted():
    r = synthetic_result()
    fused = r["layers"][0]["variants"][3]
    fused["u8_check"] = {"passed": False, "why": "made-up failure"}  # even with a time beside it
    # the network would run that failed path: the variant drops out of conv1, whose fastest is then gpu-baseline's
    # plain conv (median of 2.0, 2.2 = 2.1 ms)
    assert _fastest_row(r)[2:] == [report.num(_median(2.0, 2.2) + CONV2_MS)]
    t = report.summary_table([("bench-synthetic.json", r)])
    assert not any("uint8" in n for n in t.notes)
    del fused["u8_check"]  # a time without its check: the float32 figure counts
    assert _fastest_row(r)[2:] == [report.num(_median(0.09, 0.099) + CONV2_MS)]
    assert "as the network runs it" not in report.markdown_tables(r)


def test_end_to_end_tables_show_fc_math_and_the_pipeline_sweep():
    md = report.markdown_tables(synthetic_result())
    row = next(line for line in md.splitlines() if line.startswith("| synthetic | 10000 | pyconv"))
    assert "FC tf32" in row and "| 0 |" in row  # no label differs from PyTorch's
    assert "| model | streams | 1 chunk | 4 chunks |" in md
    assert "| synthetic | 2 | 3.10 | 3.40 |" in md and "| synthetic | 4 | 5.10 | 5.40 |" in md
    assert "final runs 4 chunks on 2 streams" in md
    # where a pinned call's time goes (its CUPTI trace), and its time with the op-time events
    assert ("first copy starts 0.0200, copies end 0.450 (their own time 0.420), the GPU's last work ends 0.550, "
            "the call returns 0.580") in md
    assert "the final milestone prints its Op Time lines from: 1.40 ms" in md
    # and without a trace: the host clock split into the GPU's span and the host's own share
    assert ("host clock 1.30 ms, of which the GPU's span from just before the first copy to the pass's end (CUDA "
            "events) 1.20 ms and the host's own share 0.100 ms") in md


def test_the_pipeline_table_shows_the_taper_where_the_file_swept_it():
    r = synthetic_result()
    e = r["end_to_end"][0]
    e["taper"] = 0.7
    e["pyconv"]["pipeline"] += [{"chunks": c, "streams": 4, "taper": 0.7,
                                 "pinned_ms": timing.batch_stats([0.5 + c / 10], 10000)} for c in (1, 4)]
    md = report.markdown_tables(r)
    assert "| model | streams | taper | 1 chunk | 4 chunks |" in md
    assert "| synthetic | 2 | 1 | 3.10 | 3.40 |" in md and "| synthetic | 4 | 1 | 5.10 | 5.40 |" in md
    assert "| synthetic | 4 | 0.7 | 0.600 | 0.900 |" in md
    assert "final runs 4 chunks on 2 streams, each 0.7 times the one before" in md


def test_the_pipeline_table_shows_the_tail_pieces_where_the_file_swept_them():
    r = synthetic_result()
    e = r["end_to_end"][0]
    e["tail_pieces"] = 2
    e["pyconv"]["pipeline"] += [{"chunks": c, "streams": 4, "taper": 1.0, "tail_pieces": 2,
                                 "pinned_ms": timing.batch_stats([0.4 + c / 10], 10000)} for c in (1, 4)]
    md = report.markdown_tables(r)
    assert "| model | streams | pieces | 1 chunk | 4 chunks |" in md
    assert "| synthetic | 4 | 1 | 5.10 | 5.40 |" in md and "| synthetic | 4 | 2 | 0.500 | 0.800 |" in md
    assert "final runs 4 chunks on 2 streams, the last copied in 2 pieces" in md


def test_a_whole_network_cell_is_the_model_its_column_names():
    """Two files, two models of one semester: the column keeps the model the older file showed, and the newer file
    updates the cell only with that model's time (not the other model's under the first one's name)."""
    old = synthetic_result()
    new = synthetic_result()
    new["date"] = "2000-01-02T00:00:00+00:00"
    other = copy.deepcopy(new["end_to_end"][0])
    other["model"] = "synthetic-other"
    other["pyconv"]["pinned_ms"] = timing.batch_stats([9.9], 10000)
    same = new["end_to_end"][0]
    same["pyconv"]["pinned_ms"] = timing.batch_stats([1.1], 10000)
    new["end_to_end"] = [other, same]
    t = report.summary_table([("bench-old.json", old), ("bench-new.json", new)])
    col = next(i for i, h in enumerate(t.header) if "Spring 2019" in h)
    assert "`synthetic`" in t.header[col]
    row = next(r for r in t.rows if r[0].startswith("whole network (`final`)"))
    assert row[col] == report.num(1.1)


def test_a_rejected_reduced_precision_configuration_is_shown_beside_what_final_runs():
    r = synthetic_result()
    e = r["end_to_end"][0]
    e["pyconv_reduced"] = dict(e["pyconv"], impls=["gpu-tensor-core-fused", "gpu-tensor-core-tf32"], fc_math="tf32",
                               differ_vs_pytorch=1)
    md = report.markdown_tables(r)
    row = next(line for line in md.splitlines() if "| rejected: pyconv gpu-tensor-core-fused" in line)
    assert "FC tf32" in row and "| 1 |" in row
    assert ("synthetic: against PyTorch's float32 network, the reduced-precision configuration "
            "gpu-tensor-core-fused,gpu-tensor-core-tf32 changed 1 label(s), so final runs in float32") in md
    # A later candidate kept (final runs it), or rejected too (final runs float32).
    e["reduced_precision_ok"] = True
    assert ("changed 1 label(s), so final runs gpu-fused-tanh-pool,gpu-baseline with FC tf32, which changed none"
            in report.markdown_tables(r))
    e["reduced_precision_ok"] = False
    e["pyconv_tf32"] = dict(e["pyconv"], impls=["gpu-tensor-core-tf32", "gpu-tensor-core-tf32"], fc_math="tf32",
                            differ_vs_pytorch=2)
    md = report.markdown_tables(r)
    assert "| rejected: pyconv gpu-tensor-core-tf32,gpu-tensor-core-tf32, FC tf32 |" in md
    assert ("configurations gpu-tensor-core-fused,gpu-tensor-core-tf32 changed 1 label(s) and "
            "gpu-tensor-core-tf32,gpu-tensor-core-tf32 changed 2 label(s), so final runs in float32") in md


def test_text_tables_are_aligned():
    text = report.text_tables(synthetic_result())
    block = text.split("\n\n")[1].splitlines()  # the first ladder table
    header, rule, rows = block[1], block[2], block[3:]
    starts = [i for i, ch in enumerate(rule) if ch == "-" and (i == 0 or rule[i - 1] == " ")]
    assert len(starts) == len(re.split(r"\s{2,}", header.strip())) == 14
    for line in [header, *rows[:4]]:
        for s in starts[1:]:
            assert line[s - 1] == " " and line[s] != " ", (line, s)


def test_num():
    assert report.num(None) == "-"
    assert report.num(1234.6) == "1,235"
    assert report.num(2.0) == "2.00" and report.num(0.0945) == "0.0945" and report.num(12.34) == "12.3"
    assert report.num(0) == "0"


def test_load_rejects_other_files(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(PyconvError, match="not a pyconv-bench"):
        report.load(p)
    with pytest.raises(PyconvError, match="does not exist"):
        report.load(tmp_path / "missing.json")


def test_newest_json(tmp_path):
    with pytest.raises(PyconvError, match="invoke bench"):
        report.newest_json(tmp_path)
    old, new = tmp_path / "bench-a.json", tmp_path / "bench-b.json"
    new.write_text("{}")
    old.write_text("{}")
    os.utime(new, (2_000_000_000, 2_000_000_000))
    os.utime(old, (1_000_000_000, 1_000_000_000))
    assert report.newest_json(tmp_path) == new


README_HEAD = "# Project\r\n\nSome text with ünïcode and trailing spaces   \n\n<!-- bench:begin -->"
README_TAIL = "<!-- bench:end -->\n\n## After\nno newline at the end"


def test_readme_markers_replace_only_between(tmp_path):
    text = README_HEAD + "\nold table\n" + README_TAIL
    new = report.replace_between_markers(text, "| new |\n")
    assert new == README_HEAD + "\n| new |\n" + README_TAIL
    assert report.replace_between_markers(new, "| new |\n") == new  # idempotent
    readme = tmp_path / "README.md"
    readme.write_bytes(text.encode())
    report.update_readme([("bench-synthetic.json", synthetic_result())], readme)
    got = readme.read_bytes().decode()
    assert got.startswith(README_HEAD + "\n") and got.endswith("\n" + README_TAIL)
    assert "Synthetic GPU" in got and "old table" not in got


@pytest.mark.parametrize("text", ["no markers", "<!-- bench:begin --> only begin",
                                  "<!-- bench:end --> x <!-- bench:begin -->",
                                  "<!-- bench:begin --><!-- bench:begin --><!-- bench:end -->"])
def test_readme_without_proper_markers_is_left_alone(tmp_path, text):
    readme = tmp_path / "README.md"
    readme.write_text(text)
    with pytest.raises(PyconvError, match="nothing was changed"):
        report.update_readme([("bench-synthetic.json", synthetic_result())], readme)
    assert readme.read_text() == text


@needs_matplotlib
def test_cpu_only_result_renders(tmp_path):
    r = synthetic_result()
    r.update({"parts": ["cpu"], "gpu": None, "roofline": None, "layers": [], "end_to_end": []})
    r["goals"] = goals.check_goals(r, "cpu-fast")  # the synthetic CPU rows are cpu-fast's
    path = tmp_path / "bench-cpu.json"
    path.write_text(json.dumps(r))
    dest, pngs = report.write_report(path, tmp_path / "r.md")
    assert [p.name for p in pngs] == ["r-cpu-op-time.png"]
    page = dest.read_text()
    assert "GPU:" not in page and "cpu-fast sp19 conv1" in page


def test_every_committed_result_loads_as_records_and_renders():
    """Files written before a field existed still load (the JSON schema only grew since version 1)."""
    from conftest import ROOT

    files = sorted((ROOT / "results").glob("bench-*.json"))
    assert files
    for path in files:
        r = report.load(path)
        text = report.text_tables(r)
        assert r.date in text and len(report.tables(r)) >= 1
        for layer in r.layers:
            assert f"{layer.model} {layer.layer}: B={layer.B}" in text
            assert all(row.variant in text for row in layer.variants)


def test_the_committed_readme_summary_regenerates_unchanged():
    """`invoke report --readme` with no --json regenerates the README's summary from every bench file in results/:
    on the committed results it changes nothing, and the README names no bench file (the report does)."""
    from conftest import ROOT

    text = (ROOT / "README.md").read_text()
    section = text.split(report.BEGIN, 1)[1].split(report.END, 1)[0]
    new = report.readme_text(text)
    assert new.split(report.BEGIN, 1)[1].split(report.END, 1)[0] == section
    assert new == text  # and nothing outside the markers moved
    assert "bench-" not in section and "(results/report.md#summary)" in section


def test_the_report_names_every_source_of_the_summary(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "bench-a.json").write_text(json.dumps(synthetic_result()))
    dest, _ = report.write_report(None, folder / "report.md", folder)
    page = dest.read_text()
    contents = page.split("## Contents", 1)[1].split("## Summary", 1)[0]
    assert "[Summary](#summary)" in contents and "[`bench-a.json`](#file-bench-a)" in contents
    summary = page.split("## Summary", 1)[1].split("\n## ", 1)[0]
    assert "medians at batch 10000; from [`bench-a.json`](#file-bench-a)" in summary
    assert '<a id="file-bench-a"></a>' in page


def test_summary_takes_every_file_and_the_newer_cell():
    old, new = synthetic_result(), synthetic_result()
    new["date"] = "2001-01-01T00:00:00+00:00"
    new["layers"][0]["variants"][0]["ms"] = timing.stats([7.0])  # gpu-baseline on conv1
    t = report.summary_table([("b-new.json", new), ("a-old.json", old)])
    base = next(r for r in t.rows if r[0].startswith("m3 `gpu-baseline`"))
    assert base[2:] == [report.num(7.0 + 1.575)]  # the newer file's conv1 + conv2 (median of 1.5, 1.65)
    sources = next(n for n in t.notes if n.startswith("medians at batch 10000; from "))
    assert "a-old.json" in sources and "b-new.json" in sources


@needs_matplotlib
def test_the_page_shows_every_bench_file_newest_first(tmp_path):
    a, b = synthetic_result(), synthetic_result()
    b["date"] = "2001-01-01T00:00:00+00:00"
    b["gpu"]["name"] = "Newer GPU"
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "bench-a.json").write_text(json.dumps(a))
    (folder / "bench-b.json").write_text(json.dumps(b))
    assert [p.name for p in report.all_sources(folder)] == ["bench-b.json", "bench-a.json"]
    dest, pngs = report.write_report(f"{folder / 'bench-b.json'},{folder / 'bench-a.json'}", tmp_path / "r.md")
    page = dest.read_text()
    assert page.index("(`results/bench-b.json`)") < page.index("(`results/bench-a.json`)")
    assert {p.name for p in pngs} >= {"r-bench-a-ladder-synthetic-conv1-b10000.png",
                                      "r-bench-b-ladder-synthetic-conv1-b10000.png"}
