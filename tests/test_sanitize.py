"""`invoke sanitize`: the compute-sanitizer output parser and the summary table on captured-style text, the
argument and no-GPU refusals (one line, exit 1), and -- on a GPU -- a real memcheck run of the baseline."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from built_variants import needs
from conftest import ROOT
from gpu_helpers import HAVE_GPU, requires_gpu, requires_gpu_module

from pyconv.tools import sanitize
from pyconv.tools.sanitize import SANITIZER_EXIT, Result

CLEAN = """========= COMPUTE-SANITIZER
checked 9 convolutions, 0 wrong
========= ERROR SUMMARY: 0 errors
"""

# The shape of a memcheck report (two findings, one of them twice) as compute-sanitizer prints it.
DIRTY = """========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at conv_fwd_gpu_baseline_kernel(const float *, const float *, float *, int, int)+0x1d0
=========     by thread (3,0,0) in block (0,0,0)
=========     Address 0x7f0000000400 is out of bounds
=========
========= Invalid __global__ read of size 4 bytes
=========     at conv_fwd_gpu_baseline_kernel(const float *, const float *, float *, int, int)+0x1d0
=========     by thread (4,0,0) in block (0,0,0)
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API \
call to cudaDeviceSynchronize.
=========     Saved host backtrace up to driver entry point at error
=========
========= Target application returned an error
========= ERROR SUMMARY: 3 errors
"""

# racecheck ends with its own summary and no ERROR SUMMARY line (compute-sanitizer 2025.3).
RACE = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at conv_kernel+0x90
=========     and Read access at conv_kernel+0x120 [128 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 2 warnings)
"""
RACE_CLEAN = """========= COMPUTE-SANITIZER
checked 9 convolutions, 0 wrong
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""


def test_error_count_reads_the_summary_line():
    assert sanitize.error_count(CLEAN) == 0
    assert sanitize.error_count(DIRTY) == 3
    assert sanitize.error_count(RACE) == 1
    assert sanitize.error_count(RACE_CLEAN) == 0
    # One summary per watched process: they add up.
    assert sanitize.error_count(DIRTY + CLEAN + "========= ERROR SUMMARY: 2 errors\n") == 5


def test_no_summary_means_the_sanitizer_did_not_finish():
    assert sanitize.error_count("") is None
    assert sanitize.error_count("========= COMPUTE-SANITIZER\nSegmentation fault\n") is None
    # A program printing the words is not the sanitizer's summary (the ===== prefix is required).
    assert sanitize.error_count("ERROR SUMMARY: 0 errors\n") is None


def test_findings_are_the_distinct_headlines():
    assert sanitize.findings(CLEAN) == []
    assert sanitize.findings(DIRTY) == [
        "Invalid __global__ read of size 4 bytes",
        'Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API '
        "call to cudaDeviceSynchronize.",
        "Target application returned an error",
    ]
    assert sanitize.findings(DIRTY, limit=1) == ["Invalid __global__ read of size 4 bytes"]
    assert sanitize.findings(RACE)[0].startswith("Error: Race reported between Write access")
    assert sanitize.race_warnings(RACE) == 2 and sanitize.race_warnings(CLEAN) == 0


def test_result_ok_only_when_everything_is_clean():
    assert Result("memcheck", "v", errors=0, exit_code=0, seconds=1).ok
    assert not Result("memcheck", "v", errors=3, exit_code=SANITIZER_EXIT, seconds=1).ok
    assert not Result("memcheck", "v", errors=None, exit_code=-11, seconds=1).ok
    assert not Result("memcheck", "v", errors=0, exit_code=3, seconds=1, wrong_results=2).ok
    assert not Result("memcheck", "v", errors=0, exit_code=1, seconds=1, note="exit 1").ok
    assert not Result("memcheck", "v", errors=None, exit_code=-1, seconds=600, note="timed out after 600s").ok


def test_summary_table_rows_columns_and_verdict():
    results = [
        Result("memcheck", "gpu-baseline", 0, 0, 1.0, checked=9),
        Result("racecheck", "gpu-baseline", 0, 0, 5.0, checked=9),
        Result("memcheck", "gpu-tensor-core", 3, SANITIZER_EXIT, 1.0, checked=7),
        Result("racecheck", "gpu-tensor-core", None, -1, 600.0, note="timed out after 600s"),
        Result("memcheck", "m3 ece408 b64", 0, 0, 9.0),
    ]
    lines = sanitize.format_table(results, sanitize.TOOLS).splitlines()
    assert lines[0].split() == ["target", "memcheck", "racecheck"]  # tools that did not run get no column
    assert lines[1].split() == ["gpu-baseline", "0", "0"]
    assert lines[2].split()[:2] == ["gpu-tensor-core", "3"]
    assert "failed (timed out after 600s)" in lines[2]
    assert lines[3].split() == ["m3", "ece408", "b64", "0", "-"]
    assert lines[-1] == "5 runs, 3 sanitizer errors, 0 wrong results, 25 convolutions checked: FAILED"
    clean = sanitize.format_table(results[:2])
    assert clean.splitlines()[-1].endswith(": clean")
    wrong = Result("initcheck", "gpu-streams", 0, 3, 2.0, wrong_results=2, checked=9)
    assert wrong.cell() == "0 +2 wrong"


def test_edge_shapes_cover_the_edges():
    shapes = sanitize.EDGE_SHAPES
    assert any(b == 1 for b, *_ in shapes) and any(b > 1 for b, *_ in shapes)
    assert any(k == 1 for *_, k in shapes)
    assert any(k == h == w for _, _, h, w, _, k in shapes if k > 1)
    assert any(c > 1 for _, c, *_ in shapes)
    assert any(h % 2 and w % 2 and h != w for _, _, h, w, _, _ in shapes)
    # at least one shape where no dimension is a multiple of 4 (every tile in the ladder is)
    assert any(all(d % 4 for d in (h, w, m, h - k + 1, w - k + 1)) for _, _, h, w, m, k in shapes)
    assert all(k <= min(h, w) for _, _, h, w, _, k in shapes)


def test_parse_list():
    assert sanitize.parse_list(None, sanitize.TOOLS, "tool") == list(sanitize.TOOLS)
    assert sanitize.parse_list("racecheck, memcheck", sanitize.TOOLS, "tool") == ["racecheck", "memcheck"]
    with pytest.raises(sanitize.PyconvError, match="unknown tool 'leakcheck' \\(known: memcheck"):
        sanitize.parse_list("memcheck,leakcheck", sanitize.TOOLS, "tool")


def invoke(*args, env=None, timeout=1200):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.mark.skipif(HAVE_GPU, reason="checks the no-GPU behaviour")
def test_without_a_gpu_the_task_fails_in_one_line(tmp_path):
    r = invoke("sanitize", env={"PYCONV_LOGS": str(tmp_path)})
    assert r.returncode == 1, "a sanitizer run that checked nothing must fail"
    assert r.stderr.strip().splitlines() == [
        "error: no CUDA GPU is visible: compute-sanitizer needs one to run the kernels"] or (
        "pyconv._gpu is not built" in r.stderr and len(r.stderr.strip().splitlines()) == 1)
    assert "Traceback" not in r.stdout + r.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.gpu
@requires_gpu
@needs("gpu-baseline")
def test_memcheck_of_the_baseline_is_clean(tmp_path):
    try:
        sanitize.find_sanitizer()
    except sanitize.PyconvError as e:
        pytest.skip(str(e))
    r = invoke("sanitize", "--tools", "memcheck", "--variants", "gpu-baseline", "--milestone", "none",
               env={"PYCONV_LOGS": str(tmp_path)})
    assert r.returncode == 0, r.stdout + r.stderr
    (summary,) = tmp_path.glob("sanitize-*.json")
    doc = json.loads(summary.read_text())
    assert doc["ok"] and doc["errors_total"] == 0
    (res,) = doc["results"]
    assert (res["tool"], res["target"], res["errors"], res["exit_code"]) == ("memcheck", "gpu-baseline", 0, 0)
    assert res["checked"] == len(sanitize.EDGE_SHAPES)  # the baseline takes every edge shape
    assert "ERROR SUMMARY: 0 errors" in summary.with_suffix(".log").read_text()
    assert not list(tmp_path.glob(".*.tmp"))


@requires_gpu_module
def test_the_tunable_variant_is_the_one_whose_configurations_are_swept():
    """The sanitizer runs each tile configuration of a variant whose descriptor says `tunable` (each is a kernel of
    its own): the build's configurations must belong to exactly one such variant."""
    from pyconv import native, variants

    tunable = [v.name for v in variants.gpu_variants() if v.tunable]
    configs = list(native.gpu(device=False).autotune_configs())
    assert len(tunable) == (1 if configs else 0), (tunable, configs)
