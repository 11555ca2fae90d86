"""`invoke profile`: the nvprof summary (pure Python, synthetic records), the child/parent hand-over, the
unavailable path, and -- on a GPU -- the CUPTI trace itself against a kernel launched a known number of times."""

from __future__ import annotations

import importlib.util
import io
import json
import re
import sys
import time
import types
from pathlib import Path

import pytest
from built_variants import M2_PICK

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pyconv.core import paths  # noqa: E402
from pyconv.tools import profile  # noqa: E402
from pyconv.tools.profile import API_BLOCK, GPU_BLOCK  # noqa: E402

TEST_KERNEL = "pyconv_profiler_test_kernel(unsigned long long*)"
UNAVAILABLE = re.compile(r"^profile: CUPTI unavailable \(.+\); running unprofiled$")


def rec(kind, name, start, end):
    return {"kind": kind, "name": name, "start_ns": start, "end_ns": end}


def synthetic_records():
    """A hand-made trace whose summary is worked out below by hand."""
    return [
        rec("kernel", "conv(float*)", 1000, 11000),  # 10000
        rec("kernel", "conv(float*)", 20000, 26000),  # 6000
        rec("memcpy", "[CUDA memcpy HtoD]", 0, 3000),  # 3000
        rec("memcpy", "[CUDA memcpy DtoH]", 30000, 30800),  # 800
        rec("memset", "[CUDA memset]", 500, 700),  # 200
        rec("runtime", "cudaMalloc", 0, 90_000_000),  # 90 ms
        rec("runtime", "cudaLaunchKernel", 100, 5100),  # 5000
        rec("runtime", "cudaLaunchKernel", 200, 3200),  # 3000
        rec("runtime", "cudaMemcpy", 0, 9_992_000),  # 9.992 ms
    ]


# ------------------------------------------------------------------------------------------------ units
@pytest.mark.parametrize(("ns", "text"), [
    (0, "0ns"), (992, "992ns"), (992.0, "992ns"), (123.45, "123.45ns"), (999.5, "999.50ns"),
    (999.996, "1.0000us"), (1000, "1.0000us"), (4762, "4.7620us"), (12_345, "12.345us"), (815_320, "815.32us"),
    (999_996, "1.0000ms"), (1_630_600, "1.6306ms"), (12_345_678, "12.346ms"), (97_765_000, "97.765ms"),
    (210_180_000, "210.18ms"), (999_999_999, "1.00000s"), (1_234_567_891, "1.23457s"),
    (4_674_560_000, "4.67456s"), (12_345_678_901, "12.3457s"),
])
def test_format_time_matches_nvprof_units(ns, text):
    assert profile.format_time(ns) == text


def test_format_time_rejects_negative():
    with pytest.raises(ValueError):
        profile.format_time(-1)


# ------------------------------------------------------------------------------------------------ grouping
def test_group_counts_totals_min_max_avg():
    rows = {(r.block, r.name): r for r in profile.group(synthetic_records())}
    conv = rows[(GPU_BLOCK, "conv(float*)")]
    assert (conv.calls, conv.total_ns, conv.min_ns, conv.max_ns, conv.avg_ns) == (2, 16000, 6000, 10000, 8000)
    launch = rows[(API_BLOCK, "cudaLaunchKernel")]
    assert (launch.calls, launch.total_ns, launch.min_ns, launch.max_ns) == (2, 8000, 3000, 5000)
    assert rows[(GPU_BLOCK, "[CUDA memset]")].calls == 1
    assert len(rows) == 7


def test_group_rejects_bad_records():
    with pytest.raises(ValueError, match="ends before it starts"):
        profile.group([rec("kernel", "k", 10, 5)])
    with pytest.raises(ValueError, match="unknown activity kind"):
        profile.group([rec("nvtx", "k", 0, 5)])


def test_rank_orders_blocks_and_rows_and_sets_percent():
    rows = profile.summarize(synthetic_records())
    assert [r.block for r in rows] == [GPU_BLOCK] * 4 + [API_BLOCK] * 3
    assert [r.name for r in rows[:4]] == ["conv(float*)", "[CUDA memcpy HtoD]", "[CUDA memcpy DtoH]",
                                         "[CUDA memset]"]
    assert [r.name for r in rows[4:]] == ["cudaMalloc", "cudaMemcpy", "cudaLaunchKernel"]
    gpu_total = 16000 + 3000 + 800 + 200
    assert rows[0].percent == pytest.approx(100 * 16000 / gpu_total)
    for block in (GPU_BLOCK, API_BLOCK):
        assert sum(r.percent for r in rows if r.block == block) == pytest.approx(100.0)


def test_90_percent_marks_the_rows_that_first_exceed_it():
    rows = profile.summarize(synthetic_records())
    # GPU: conv 80%, HtoD 15% (cumulative 95% > 90%) -> both; API: cudaMalloc 90/(90+9.992+0.008) = exactly
    # 90% (not more than 90%) -> cudaMemcpy too.
    assert profile.over90(rows, GPU_BLOCK) == ["conv(float*)", "[CUDA memcpy HtoD]"]
    assert profile.over90(rows, API_BLOCK) == ["cudaMalloc", "cudaMemcpy"]


@pytest.mark.parametrize(("totals", "marked"), [
    ([95, 5], 1),  # one row is already over 90%
    ([60, 30, 10], 3),  # exactly 90% after two rows is not *more* than 90%
    ([50, 30, 15, 5], 3),
    ([10] * 10, 10),  # ten equal rows: 90% after nine, the tenth crosses the line
    ([1], 1),
])
def test_90_percent_boundaries(totals, marked):
    records = [rec("kernel", f"k{i}", 0, t) for i, t in enumerate(totals)]
    rows = profile.summarize(records)
    assert [r.over90 for r in rows] == [True] * marked + [False] * (len(totals) - marked)


def test_zero_time_block_marks_nothing():
    rows = profile.summarize([rec("runtime", "cudaGetDevice", 5, 5)])
    assert rows[0].percent == 0.0 and not rows[0].over90


# ------------------------------------------------------------------------------------------------ layout
def test_summary_layout_is_nvprofs():
    text = profile.format_summary(profile.summarize(synthetic_records()), pid=1234, command="python -m x")
    lines = text.splitlines()
    assert lines[0] == "==1234== Profiling application: python -m x"
    assert lines[1] == "==1234== Profiling result:"
    header = lines[2]
    assert header == (" " + "            Type  Time(%)      Time     Calls       Avg       Min       Max  Name")
    name_col = header.index("Name")
    body = lines[3:10]
    # Each line is the marker column + nvprof's line; nvprof's own, for reference:
    # ` GPU activities:   60.99%  1.6306ms         2  815.32us  792.64us  837.96us  [CUDA memcpy HtoD]`
    assert body[0] == "* GPU activities:   80.00%  16.000us         2  8.0000us  6.0000us  10.000us  conv(float*)"
    assert body[1] == "*" + " " * 16 + "   15.00%  3.0000us         1  3.0000us  3.0000us  3.0000us  [CUDA memcpy HtoD]"
    assert body[2] == " " + " " * 16 + "    4.00%     800ns         1     800ns     800ns     800ns  [CUDA memcpy DtoH]"
    assert body[4].startswith("*      API calls:   90.00%  90.000ms         1  90.000ms")
    assert body[6].endswith("  cudaLaunchKernel")
    for line in body:
        assert line[name_col - 2:name_col] == "  " and line[name_col] != " "
        # the Time(%) column ends under the header's, as in nvprof
        assert line[header.index("Time(%)") + len("Time(%)") - 1] == "%"
    assert lines[-1] == profile.LEGEND


def test_empty_summary_says_so():
    text = profile.format_summary([])
    assert "No kernels, memory operations or CUDA API calls were profiled." in text


# ------------------------------------------------------------------------------------------------ child side
class FakeCupti(types.ModuleType):
    """Stands in for pyconv._cupti where no GPU is visible: records are given, not traced."""

    class CuptiError(RuntimeError):
        pass

    def __init__(self, records=(), start_error=None):
        super().__init__("pyconv._cupti")
        self._records, self._start_error, self.started, self.stopped = list(records), start_error, 0, 0

    def start(self, driver_api=False):
        if self._start_error:
            raise self.CuptiError(self._start_error)
        self.started += 1

    def stop(self):
        self.stopped += 1

    def records(self):
        return list(self._records)

    def dropped_records(self):
        return 0

    def versions(self):
        return {"cupti_header": 130001, "cupti_library": 130001}


def test_child_does_nothing_without_the_variable(capsys):
    assert profile.child_start(env={}) is None
    assert capsys.readouterr().out == ""


def test_child_unavailable_module_prints_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "pyconv._cupti", None)  # makes `from . import _cupti` raise ImportError
    assert profile.child_start(env={profile.ENV_VAR: str(tmp_path / "t.json")}) is None
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and UNAVAILABLE.match(out[0]), out
    assert "pyconv._cupti is not built" in out[0]
    assert not (tmp_path / "t.json").exists()


def test_child_cupti_error_prints_one_line(monkeypatch, capsys, tmp_path):
    fake = FakeCupti(start_error="CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: another profiler\nis attached")
    monkeypatch.setitem(sys.modules, "pyconv._cupti", fake)
    monkeypatch.setattr("pyconv._cupti", fake, raising=False)
    assert profile.child_start(env={profile.ENV_VAR: str(tmp_path / "t.json")}) is None
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and UNAVAILABLE.match(out[0]), out
    assert "MULTIPLE_SUBSCRIBERS" in out[0]


def test_child_writes_groups_the_parent_reads(monkeypatch, tmp_path, capsys):
    fake = FakeCupti(records=synthetic_records())
    monkeypatch.setitem(sys.modules, "pyconv._cupti", fake)
    monkeypatch.setattr("pyconv._cupti", fake, raising=False)
    dest = tmp_path / "t.json"
    trace = profile.child_start(env={profile.ENV_VAR: str(dest)})
    assert trace is not None and fake.started == 1
    profile.child_finish(trace)
    profile.child_finish(trace)  # the atexit call after an explicit one changes nothing
    assert fake.stopped == 1
    doc = profile.read_child_profile(dest)
    assert doc["records"] == 9
    assert [(r.name, r.calls, r.total_ns) for r in doc["rows"]] == \
           [(r.name, r.calls, r.total_ns) for r in profile.summarize(synthetic_records())]
    assert capsys.readouterr().out == ""


def test_run_profile_prints_and_logs(monkeypatch, tmp_path):
    """The parent: milestones.run is replaced by a child that hands over a synthetic trace."""
    monkeypatch.setattr(paths, "LOGS", tmp_path / "logs")
    seen = {}

    def fake_run(m, batch, model, impl, env):
        seen.update(m=m, batch=batch, model=model, impl=impl)
        fake = FakeCupti(records=synthetic_records())
        profile.child_finish(profile._ChildTrace(fake, Path(env[profile.ENV_VAR])))
        return 0

    milestones = types.ModuleType("pyconv.tools.milestones")  # the real one needs the data module and the dataset
    milestones.check_milestone = lambda m: str(m)
    milestones.check_batch = lambda b: int(b)
    milestones.run = fake_run
    monkeypatch.setitem(sys.modules, "pyconv.tools.milestones", milestones)
    monkeypatch.setattr("pyconv.tools.milestones", milestones, raising=False)
    out = io.StringIO()
    assert profile.run_profile("3", batch=100, model="ece408", echo=out) == 0
    assert seen == {"m": "3", "batch": 100, "model": "ece408", "impl": None}
    text = out.getvalue()
    assert "Profiling result:" in text and "* GPU activities:   80.00%" in text
    logs = sorted((tmp_path / "logs").iterdir())
    assert [p.suffix for p in logs] == [".json", ".log"]
    assert logs[1].name.startswith("profile-m3-ece408-b100-")
    assert logs[1].read_text() in text
    summary = json.loads(logs[0].read_text())
    assert summary["over90"] == {GPU_BLOCK: ["conv(float*)", "[CUDA memcpy HtoD]"],
                                 API_BLOCK: ["cudaMalloc", "cudaMemcpy"]}
    assert summary["rows"][0]["avg_ns"] == 8000 and summary["rows"][0]["calls"] == 2


def test_run_profile_refuses_milestone_2():
    pytest.importorskip("pyconv.core.data", reason="pyconv.tools.milestones needs pyconv.data")
    from pyconv.core.errors import PyconvError

    with pytest.raises(PyconvError, match="milestone 2 runs on the CPU"):
        profile.run_profile("2", batch=10)


@pytest.mark.skipif(importlib.util.find_spec("pyconv.core.data") is None or not paths.DATA_FILE.exists(),
                    reason="needs pyconv.data and datasets/fashion-mnist.h5 (run `invoke data`)")
def test_unavailable_milestone_still_runs(monkeypatch, capsys, tmp_path):
    from pyconv.core.model import DEFAULT_MODEL, available_models
    from pyconv.tools import milestones

    names = available_models()
    if not names:
        pytest.skip("no model available")
    model = DEFAULT_MODEL if DEFAULT_MODEL in names else names[0]
    monkeypatch.setitem(sys.modules, "pyconv._cupti", None)
    monkeypatch.setenv(profile.ENV_VAR, str(tmp_path / "t.json"))
    assert milestones._child(["--m", "2", "--batch", "20", "--impl", M2_PICK, "--model", model]) == 0
    out = capsys.readouterr().out.splitlines()
    assert sum(bool(UNAVAILABLE.match(line)) for line in out) == 1
    assert sum(line.startswith("profile:") for line in out) == 1
    assert any(line.startswith("Correctness:") for line in out)
    assert not (tmp_path / "t.json").exists()


def test_child_hook_in_a_real_process(tmp_path):
    """The real module in a fresh process: without a usable GPU one line and the program goes on; with one, the
    groups are written at exit (the atexit path the milestone child relies on)."""
    import os
    import subprocess

    pytest.importorskip("pyconv._cupti", reason="pyconv._cupti not built")
    dest = tmp_path / "trace.json"
    code = "from pyconv.tools import profile; t = profile.child_start(); print('ran', t is not None)"
    env = dict(os.environ, **{profile.ENV_VAR: str(dest)}, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    if lines[-1] == "ran False":
        assert len(lines) == 2 and UNAVAILABLE.match(lines[0]), lines
        assert not dest.exists()
    else:
        assert lines == ["ran True"]
        doc = profile.read_child_profile(dest)
        assert doc["dropped_records"] == 0 and doc["cupti"]["cupti_library"] > 0


# ------------------------------------------------------------------------------------------------ GPU
@pytest.fixture
def cupti():
    c = pytest.importorskip("pyconv._cupti", reason="pyconv._cupti not built (needs the CUDA toolkit's CUPTI)")
    try:
        c.start()
    except c.CuptiError as e:
        if str(e).startswith("no usable CUDA GPU"):
            pytest.skip(str(e))
        raise
    yield c
    if c.running():
        c.stop()


def test_cupti_stop_without_start_raises():
    c = pytest.importorskip("pyconv._cupti", reason="pyconv._cupti not built")
    if c.running():
        pytest.skip("a trace is running")
    with pytest.raises(c.CuptiError, match="not running"):
        c.stop()


@pytest.mark.gpu
def test_cupti_counts_a_known_kernel_exactly(cupti):
    with pytest.raises(cupti.CuptiError, match="already running"):
        cupti.start()
    t0 = cupti.timestamp()
    w0 = time.perf_counter_ns()
    ran = cupti.launch_test_kernel(37)
    w1 = time.perf_counter_ns()
    t1 = cupti.timestamp()
    cupti.stop()
    assert ran == 37
    records = cupti.records()
    kernels = [r for r in records if r["kind"] == "kernel"]
    assert len(kernels) == 37
    assert {r["name"] for r in kernels} == {TEST_KERNEL}
    assert all(t0 <= r["start_ns"] < r["end_ns"] <= t1 for r in kernels)
    assert all(r["grid"] == (1, 1, 1) and r["block"] == (32, 1, 1) for r in kernels)
    assert sum(r["end_ns"] - r["start_ns"] for r in kernels) <= w1 - w0
    # Each kernel carries the correlation id of the runtime call that launched it (CUDA 13's <<<>>> goes through
    # __cudaLaunchKernel, older toolkits' through cudaLaunchKernel: the test accepts either name).
    runtime = [r for r in records if r["kind"] == "runtime"]
    launched_by = {r["correlation_id"]: r["name"] for r in runtime}
    launchers = [launched_by.get(k["correlation_id"]) for k in kernels]
    assert len(set(launchers)) == 1 and "LaunchKernel" in str(launchers[0]), set(launchers)
    api = [r["name"] for r in runtime]
    assert api.count(launchers[0]) == 37
    assert api.count("cudaMalloc") == 1 and api.count("cudaFree") == 1 and api.count("cudaMemset") == 1
    assert not [n for n in api if re.search(r"_v\d+$", n)]
    gpu_other = [r["name"] for r in records if r["kind"] in ("memcpy", "memset")]
    assert gpu_other.count("[CUDA memcpy DtoH]") == 1 and gpu_other.count("[CUDA memset]") == 1
    assert cupti.dropped_records() == 0
    rows = {(r.block, r.name): r for r in profile.summarize(records)}
    assert rows[(GPU_BLOCK, TEST_KERNEL)].calls == 37
    assert rows[(API_BLOCK, launchers[0])].calls == 37


@pytest.mark.gpu
def test_cupti_restarts_with_a_fresh_trace(cupti):
    cupti.launch_test_kernel(3)
    cupti.stop()
    assert sum(r["kind"] == "kernel" for r in cupti.records()) == 3
    cupti.start()
    cupti.launch_test_kernel(5)
    cupti.stop()
    assert sum(r["kind"] == "kernel" for r in cupti.records()) == 5


@pytest.mark.gpu
@pytest.mark.torch
def test_cupti_names_cudnn_kernels(cupti):
    """Milestone 1's question: PyTorch's cuDNN convolution kernels appear by name in the trace."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA")
    torch.backends.cudnn.enabled = True
    x = torch.randn(64, 1, 48, 48, device="cuda")
    w = torch.randn(12, 1, 7, 7, device="cuda")
    for _ in range(3):
        y = torch.nn.functional.conv2d(x, w)
    y.cpu()
    cupti.stop()
    records = cupti.records()
    kernels = {r["name"] for r in records if r["kind"] == "kernel"}
    assert kernels, "no kernel was traced"
    assert not [k for k in kernels if k.startswith("_Z")], "a kernel name was left mangled"
    assert any("[CUDA memcpy" in r["name"] for r in records)
    print("\n" + profile.format_summary(profile.summarize(records)))
