"""The bench's yardsticks and method: NVBench's results read into the bench's records, the CUDA-events fallback
recorded as such, the torch.compile configurations (a failure is an "unavailable" row), the copy-floor and
best-PyTorch goals, bench files never overwritten, one ladder plot per layer. GPU parts are marked gpu; the rest
runs anywhere (NVBench's JSON here is SYNTHETIC, written by the test)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from built_variants import GPU
from gpu_helpers import HAVE_GPU, gpu, random_model
from student_variants import skip_if_unstarted

from pyconv import native, variants
from pyconv.bench import end_to_end as e2e
from pyconv.bench import goals, nvbench, tags, timing
from pyconv.bench import run as bench
from pyconv.bench.schema import FORMAT, VERSION, BenchResult
from pyconv.core import paths
from pyconv.core.errors import PyconvError

# ---------------------------------------------------------------------------------------------------------------
# NVBench's JSON and --jsonbin sample files into Stats


def _summary(tag, value, kind="float64", name="value"):
    return {"tag": tag, "data": [{"name": name, "type": kind, "value": str(value)}]}


def _nvbench_doc(tmp_path, samples_s, freqs_hz):
    times = tmp_path / "nvbench.json-bin" / "0.bin"
    times.parent.mkdir()
    np.asarray(samples_s, dtype="<f4").tofile(times)
    freqs = tmp_path / "nvbench.json-bin" / "1.bin"
    np.asarray(freqs_hz, dtype="<f4").tofile(freqs)
    state = {"name": "Device=0", "is_skipped": False, "summaries": [
        _summary("nv/cold/sample_size", len(samples_s), "int64"),
        _summary("nv/cold/time/gpu/mean", float(np.mean(samples_s))),
        _summary("nv/cold/time/gpu/stdev/relative", 0.012),
        _summary("nv/cold/sm_clock_rate/mean", 1.98e9),
        _summary("nv/batch/time/gpu/mean", 0.0009),
        _summary("nv/batch/sample_size", 600, "int64"),
        {"tag": nvbench.SAMPLE_TIMES, "data": [{"name": "filename", "type": "string", "value": str(times)},
                                                  {"name": "size", "type": "int64", "value": str(len(samples_s))}]},
        {"tag": nvbench.SAMPLE_FREQS, "data": [{"name": "filename", "type": "string", "value": str(freqs)},
                                                  {"name": "size", "type": "int64", "value": str(len(freqs_hz))}]},
    ]}
    skipped = {"name": "Device=0", "is_skipped": True, "skip_reason": "ValueError: unsupported"}
    return {"benchmarks": [{"name": "m/conv1/gpu-x/conv", "states": [state]},
                           {"name": "m/conv1/gpu-y/conv", "states": [skipped]}]}


def test_nvbench_results_become_stats_from_the_cold_samples(tmp_path):
    samples = [0.001, 0.0011, 0.0012, 0.0013, 0.002]  # seconds
    got = nvbench.parse_results(_nvbench_doc(tmp_path, samples, [1.98e9, 1.9e9, 1.98e9]), tmp_path)
    s = got["m/conv1/gpu-x/conv"]
    assert s["method"] == "nvbench" and s["reps"] == 5
    assert s["median"] == pytest.approx(1.2, rel=1e-6) and s["min"] == pytest.approx(1.0, rel=1e-6)
    assert s["p90"] == pytest.approx(float(np.percentile(np.float32(samples).astype(float) * 1e3, 90)), rel=1e-6)
    assert s["mean"] == pytest.approx(np.mean(samples) * 1e3) and s["noise_pct"] == pytest.approx(1.2)
    assert s["warm_ms"] == pytest.approx(0.9) and s["warm_reps"] == 600
    assert s["sm_clock_mhz"] == pytest.approx(1980.0) and s["sm_clock_mhz_min"] == pytest.approx(1900.0, rel=1e-6)
    assert got["m/conv1/gpu-y/conv"] == {"error": "NVBench skipped it: ValueError: unsupported"}


def test_without_nvbench_the_file_records_cuda_events_and_why(monkeypatch):
    monkeypatch.setattr(nvbench, "available", lambda: (False, "cuda-bench not installed"))
    lines = []
    jobs, timing_settings = bench.timing_method(lines.append)
    assert jobs is None and timing_settings == {"method": "cuda-events", "why": "cuda-bench not installed"}
    assert lines == ["NVBench unavailable (cuda-bench not installed): timing with CUDA events"]
    monkeypatch.setattr(nvbench, "available", lambda: (True, "0.3.0"))
    jobs, timing_settings = bench.timing_method(lines.append)
    assert jobs == [] and timing_settings["method"] == "nvbench" and timing_settings["version"] == "0.3.0"
    monkeypatch.setenv("PYCONV_TIMING", "cuda-events")
    jobs, timing_settings = bench.timing_method(lines.append)
    assert jobs is None and timing_settings == {"method": "cuda-events", "why": "PYCONV_TIMING=cuda-events"}


def test_events_rows_carry_their_noise():
    s = timing.stats([1.0, 1.0, 1.3])  # mean 1.1, sample std 0.1732
    assert s["noise_pct"] == pytest.approx(0.17320508 / 1.1 * 100) and s["mean"] == pytest.approx(1.1)
    assert timing.stats([2.0])["noise_pct"] is None  # one sample: no noise estimate


# ---------------------------------------------------------------------------------------------------------------
# A bench file is never overwritten


def test_write_json_refuses_an_existing_file(tmp_path):
    dest = tmp_path / "bench-x.json"
    full = {"format": FORMAT, "version": VERSION, "date": "2000-01-01T00:00:00+00:00", "parts": ["cpu"],
            "commit": "full"}
    tags.write_json(full, dest)
    with pytest.raises(PyconvError, match="exists: a bench file is never overwritten"):
        tags.write_json(dict(full, commit="partial"), dest)
    assert json.loads(dest.read_text())["commit"] == "full"


def test_default_names_skip_files_that_exist(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "RESULTS", tmp_path)
    r = {"date": "2026-01-02T03:04:05+00:00", "gpu": {"name": "NVIDIA H100"}, "host_cpu": {"model": "x"}}
    first = tags.default_out(r)
    assert first == tmp_path / "runs" / "bench-nvidia-h100-2026-01-02.json"  # new runs stay out of results/
    first.parent.mkdir()
    first.write_text("{}")
    assert tags.default_out(r).name == "bench-nvidia-h100-2026-01-02-2.json"
    (tmp_path / "bench-nvidia-h100-2026-01-02-2.json").write_text("{}")  # a promoted run's name is taken too
    assert tags.default_out(r).name == "bench-nvidia-h100-2026-01-02-3.json"


def test_a_partial_run_cannot_replace_a_full_one(tmp_path, rng):
    """--variants (a subset) aimed at an existing file: refused before anything is measured."""
    from pyconv.core.model import save_model

    model_path = tmp_path / "tiny.h5"
    save_model(random_model(rng, input_shape=(1, 14, 14), name="tiny"), model_path)
    out = tmp_path / "full.json"
    out.write_text('{"a full run": true}')
    lines = []
    with pytest.raises(PyconvError, match="never overwritten"):
        bench.run(model=str(model_path), batch=2, reps=1, cpu=True, out=str(out), variants="cpu-naive",
                  echo=lines.append)
    assert lines == [] and out.read_text() == '{"a full run": true}'


# ---------------------------------------------------------------------------------------------------------------
# torch.compile yardsticks


def test_compiled_models_default_to_the_course_model():
    assert bench.compiled_models(None, ["ece408", "ece408-high"]) == ["ece408"]
    assert bench.compiled_models(None, ["ece408-high"]) == []
    assert bench.compiled_models("all", ["a", "b"]) == ["a", "b"]
    assert bench.compiled_models("none", ["ece408"]) == []
    assert bench.compiled_models("b", ["a", "b"]) == ["b"]
    with pytest.raises(PyconvError, match="--compiled names zz, not among"):
        bench.compiled_models("zz", ["a"])


def test_a_failing_torch_compile_is_an_unavailable_row(monkeypatch, rng):
    torch = pytest.importorskip("torch")

    def no_triton(*_a, **_k):
        raise RuntimeError("Cannot find a working triton installation.\nMore details follow")

    monkeypatch.setattr(torch, "compile", no_triton)
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    model = random_model(rng, input_shape=(1, 14, 14), name="tiny")
    x = rng.integers(0, 256, size=(4, 1, 14, 14), dtype=np.uint8)
    row = e2e.torch_config(torch, "compiled-tf32", model, x, np.zeros(4, int), np.zeros(4, int), 0, 1, device="cpu")
    assert row == {"name": "compiled-tf32", "mode": "max-autotune",
                   "error": "unavailable: RuntimeError: Cannot find a working triton installation."}
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before  # restored


def _e2e_entry(pinned, resident, torch_pinned, compiled_pinned, floor):
    return {"model": "ece408", "arch": "sp19", "batch": goals.GOAL_BATCH,
            "pyconv": {"pinned_ms": {"median": pinned}, "resident_ms": {"median": resident},
                       "differ_vs_pytorch": 0, "correctness": 0.88},
            "pytorch": {"pinned_ms": {"median": torch_pinned}, "resident_ms": {"median": 4.0}, "correctness": 0.88},
            "yardsticks": [{"name": "compiled-fp32", "pinned_ms": {"median": compiled_pinned},
                            "resident_ms": {"median": 1.0}},
                           {"name": "compiled-fp16-channels-last", "error": "unavailable: no triton"}],
            "copy_floor_ms": {"median": floor}}


def test_goals_hold_pyconv_to_the_best_pytorch_configuration_and_the_copy_floor():
    e = _e2e_entry(pinned=0.45, resident=0.25, torch_pinned=4.7, compiled_pinned=2.0, floor=0.40)
    got = {g["name"]: g for g in goals.check_goals({"parts": ["end_to_end"], "end_to_end": [e]})}
    x_pinned = got["sp19 end to end pinned x the best PyTorch configuration"]
    assert x_pinned["measured"] == pytest.approx(2.0 / 0.45) and x_pinned["met"] is False  # compiled is the best
    assert "compiled-fp32" in x_pinned["note"]
    x_res = got["sp19 end to end resident x the best PyTorch configuration"]
    assert x_res["measured"] == pytest.approx(1.0 / 0.25) and x_res["met"] is False
    assert got["sp19 end to end pinned"]["met"] is True and got["sp19 end to end resident"]["met"] is True
    assert "note" not in got["sp19 end to end pinned"]  # no span measured in this entry
    e["pyconv"]["pinned_span"] = {"gpu_ms": {"median": 0.42}, "host_share_ms": {"median": 0.03}}
    got = {g["name"]: g for g in goals.check_goals({"parts": ["end_to_end"], "end_to_end": [e]})}
    assert got["sp19 end to end pinned"]["note"] == ("of which the GPU's span from the first copy 0.42 ms, the "
                                                     "host's own share 0.03 ms")
    floor = got["sp19 end to end pinned x the copy floor (uint8 batch, pinned host-to-device copy)"]
    assert floor["measured"] == pytest.approx(0.45 / 0.40) and floor["met"] is True
    e = _e2e_entry(pinned=0.6, resident=0.35, torch_pinned=4.7, compiled_pinned=3.5, floor=0.40)
    got = {g["name"]: g for g in goals.check_goals({"parts": ["end_to_end"], "end_to_end": [e]})}
    assert got["sp19 end to end pinned x the best PyTorch configuration"]["met"] is True  # 3.5 / 0.6 = 5.8
    assert got["sp19 end to end pinned x the copy floor (uint8 batch, pinned host-to-device copy)"]["met"] is False
    assert got["sp19 end to end pinned"]["met"] is False and got["sp19 end to end resident"]["met"] is False


def test_without_a_timed_compiled_configuration_the_best_pytorch_goal_is_not_measured():
    """Eager alone (a run with --compiled none, or every torch.compile failing) is not the best configuration."""
    e = _e2e_entry(pinned=0.45, resident=0.25, torch_pinned=4.7, compiled_pinned=2.0, floor=0.40)
    for drop in ("none", "all failed"):
        e["yardsticks"] = [] if drop == "none" else [{"name": "compiled-fp32", "error": "unavailable: no triton"}]
        got = {g["name"]: g for g in goals.check_goals({"parts": ["end_to_end"], "end_to_end": [e]})}
        for label in ("pinned", "resident"):
            g = got[f"sp19 end to end {label} x the best PyTorch configuration"]
            assert g["measured"] is None and g["met"] is None and "torch.compile" in g["note"], (drop, g)
        assert got["sp19 end to end pinned"]["met"] is True  # the other goals still judged


def test_yardsticks_read_back_through_the_schema():
    e = _e2e_entry(pinned=0.45, resident=0.25, torch_pinned=4.7, compiled_pinned=2.0, floor=0.40)
    e["pyconv"]["pinned_ms"]["reps"] = 3
    doc = {"format": FORMAT, "version": VERSION, "date": "2000-01-01T00:00:00+00:00", "parts": ["end_to_end"],
           "end_to_end": [e]}
    (r,) = BenchResult.parse(doc).end_to_end
    assert [name for name, _ in r.pytorch_configs()] == ["eager-fp32", "compiled-fp32", "compiled-fp16-channels-last"]
    assert r.copy_floor_ms.median == 0.40 and r.yardsticks[1].error == "unavailable: no triton"


# ---------------------------------------------------------------------------------------------------------------
# GPU: NVBench in a process of its own (its Python API runs once per process)


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU visible (or pyconv._gpu not built)")
def test_nvbench_times_every_variant_and_cudnn(tmp_path):
    ok, why = nvbench.loadable()  # the bench below runs in a process of its own
    if not ok:
        pytest.skip(why)
    for name in bench.split_variants(None, GPU, [])[0]:  # in a handout the student's, which must hold code
        skip_if_unstarted(name, gpu().conv)
    out = tmp_path / "nv.json"
    proc = subprocess.run([sys.executable, "-m", "invoke", "bench", "--gpu", "--model", "sp19", "--batch", "64",
                           "--out", str(out)], cwd=paths.ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    r = BenchResult.parse(json.loads(out.read_text()))
    assert r.settings.timing["method"] == "nvbench"
    for layer in r.layers:
        timed = [v for v in layer.variants if v.ms is not None]
        assert timed and all(v.ms.method == "nvbench" and v.ms.noise_pct is not None and v.ms.sm_clock_mhz > 0
                             for v in timed)
        # warm (batched) samples for every variant but a student's, whose launch waits for the device (sync)
        assert all((v.ms.warm_ms is None) == variants.is_student(v.variant) for v in timed)
        assert all(v.ms.warm_ms is None or v.ms.warm_ms > 0 for v in timed)
        # the median, min and p90 are of the cold samples NVBench wrote (not its mean standing in for them)
        assert all(v.ms.p90 is not None and not v.ms.median_is_mean for v in timed)
        if r.torch is not None:
            assert layer.cudnn.conv_ms is not None and layer.cudnn.conv_ms.method == "nvbench"
    # variants that read uint8 images had that path checked and timed on the first layer, and only there
    conv1, conv2 = r.layers
    readers = {v["name"] for v in native.gpu().variants() if v["reads_u8"]}
    u8_rows = [v for v in conv1.variants if v.variant in readers and v.ms is not None]
    assert bool(u8_rows) == bool(readers)  # a handout's student variant reads float32 only
    assert all(v.u8_check.passed and v.u8_ms.method == "nvbench" for v in u8_rows)
    assert not any(v.u8_ms or v.u8_check for v in conv2.variants)
    with pytest.raises(subprocess.CalledProcessError):  # the file exists: a second run to it is refused
        subprocess.run([sys.executable, "-m", "invoke", "bench", "--gpu", "--model", "sp19", "--batch", "64",
                        "--out", str(out)], cwd=paths.ROOT, capture_output=True, check=True, timeout=300)


# ---------------------------------------------------------------------------------------------------------------
# The NVBench path of the layer bench, with a stand-in GPU and a stand-in NVBench run


def test_a_launch_that_waits_for_the_device_runs_without_the_blocking_kernel(monkeypatch):
    """A student's launch synchronises the device (the course's glue): NVBench must exec it with sync=True, or
    it waits forever behind the blocking kernel that holds the stream. Every other launch stays asynchronous."""
    execs: dict[str, bool] = {}

    class State:
        def __init__(self, name):
            self.name = name

        def get_stream(self):
            return type("Stream", (), {"addressof": lambda _self: 0xABC})()

        def exec(self, fn, *, sync=False):
            execs[self.name] = sync

    class Registered:
        def __getattr__(self, _setter):
            return lambda *_args: None

    class Module:
        benchmarks: list = []

        def register(self, fn):
            self.benchmarks.append(fn)
            return Registered()

        def run_all_benchmarks(self, argv):
            for fn in self.benchmarks:
                fn(State(fn.__name__))
            (out,) = [argv[i + 1] for i, a in enumerate(argv) if a == "--jsonbin"]
            with open(out, "w") as f:
                json.dump({"benchmarks": []}, f)

    monkeypatch.setattr(nvbench, "_module", Module)
    monkeypatch.setattr(nvbench, "_ran", False)
    done: list[dict] = []
    jobs = [nvbench.Job(name, lambda _stream: (lambda _s: None), done.append, sync)
            for name, sync in (("ours", False), ("student", True))]
    nvbench.run_jobs(jobs, echo=lambda _s: None)
    assert execs == {"ours": False, "student": True}
    assert len(done) == 2


def test_the_layer_bench_hands_every_measurement_to_nvbench(tmp_path, rng, monkeypatch):
    from gpu_helpers import StandInGpu, use_stand_in_gpu

    from pyconv.core.model import save_model

    launched: list[tuple[str, bool, int]] = []

    class Staged:
        def __init__(self, name, x, k, tanh_pool=False):
            self.name, self.tanh_pool = name, tanh_pool

        def launch(self, stream):
            launched.append((self.name, self.tanh_pool, stream))

    g = StandInGpu()
    g.StagedConv = Staged
    ran: list[str] = []

    def fake_run(jobs, echo):
        for i, job in enumerate(jobs):
            job.setup(0xABC)(0xABC)
            ran.append(job.name)
            job.done({"median": 1.0 + i, "min": 1.0 + i, "mean": 1.0 + i, "noise_pct": 0.4, "warm_ms": 0.9 + i,
                      "reps": 100, "method": "nvbench"})

    monkeypatch.setattr(nvbench, "available", lambda: (True, "stand-in"))
    monkeypatch.setattr(nvbench, "run_jobs", fake_run)
    use_stand_in_gpu(monkeypatch, g)
    path = save_model(random_model(rng, input_shape=(1, 14, 14), name="tiny"), tmp_path / "tiny.h5")
    result, dest = bench.run(model=str(path), batch=40, reps=3, warmup=1, gpu=True, out=str(tmp_path / "g.json"),
                             echo=lambda _s: None)
    assert g.timed == []  # nothing timed by CUDA events
    # conv1 (tanh + pool follow): fake-plain alone and with tanh + pool, fake-fused; conv2: fake-plain, fake-picky.
    # The wrong variant fails its check and is never handed over.
    assert ran == ["tiny/conv1/fake-plain/conv", "tiny/conv1/fake-plain/conv_tanh_pool", "tiny/conv1/fake-fused/conv",
                   "tiny/conv2/fake-plain/conv", "tiny/conv2/fake-picky/conv"]
    assert launched == [("fake-plain", False, 0xABC), ("fake-plain", True, 0xABC), ("fake-fused", False, 0xABC),
                        ("fake-plain", False, 0xABC), ("fake-picky", False, 0xABC)]
    r = BenchResult.parse(json.loads(dest.read_text()))
    assert r.settings.timing["method"] == "nvbench"
    conv1 = {v.variant: v for v in r.layers[0].variants}
    assert conv1["fake-plain"].ms.median == 1.0 and conv1["fake-plain"].tanh_pool_ms.median == 2.0
    assert conv1["fake-fused"].ms.median == 3.0 and conv1["fake-fused"].pct_roofline is not None
    assert r.layers[0].best.variant == "fake-plain"  # 1.0 ms beats the fused 3.0
    assert conv1["fake-wrong"].ms is None and not conv1["fake-wrong"].check.passed
