"""`invoke bench`: every convolution variant on every conv layer of a model, held to the roofline of the GPU it
runs on and to cuDNN (through PyTorch) measured in the same run; the CPU variants against PyTorch on the CPU; and
the whole network end to end against PyTorch + cuDNN. Results go to one JSON file (format "pyconv-bench",
tagged with GPU, driver, commit and date), by default in results/runs/ (git-ignored): `invoke promote` moves it
into results/, from whose files the evidence (what `final` chooses from), the report and the README's summary are
regenerated (pyconv.bench.promote). A run written straight into results/ with --out updates this GPU's evidence
file there (results/evidence/<gpu>.json, pyconv.evidence) at once.

What is measured, and how:
- Layer shapes come from the model: pyconv.plan.conv_sites(model, batch) gives each conv the input shape the
  network feeds it. An architecture name (fa17, sp18, fa18, sp19, fa19) is accepted in place of a model: a layer
  benchmark needs shapes, not weights.
- Inputs (x and k) are float32, uniform in [0.05, 1] with a random sign (never zero: zeros hide unwritten
  outputs), drawn fresh for every variant (pyconv.verify). The first layer's real data is 0..255 pixels; the
  convolution's cost does not depend on the values.
- Before a variant is timed, its output over the whole batch is checked against pyconv.core.reference on the first and
  the last CHECK_IMAGES images (the last ones catch grid-indexing errors that only large batches reach), with the
  tolerance its tests use (pyconv.verify): |y - ref| <= atol + rtol*|ref|, rtol = the variant's, atol =
  rtol*sqrt(C*K*K).
  A variant that fails is recorded as failed and not timed; it never counts as the best.
- GPU op time: pyconv._gpu.time_conv, CUDA events around each launch, median (also min, p90) of `reps` runs after
  `warmup` untimed ones. Layers followed by tanh + max-pool 2/2 are also timed as conv + tanh + pool
  (time_conv_tanh_pool): the fused variant's one launch, or any other variant followed by the shared max-pool +
  tanh kernel (layers.cuh's pool2d, tanh on each window's max).
- Roofline floor of a layer = max(bytes / copy bandwidth, flops / FP32 rate), both measured at the start of the
  run on the same GPU: bytes = x read once + k read once + y written once (the pooled y for conv + tanh + pool),
  flops = 2*B*M*Ho*Wo*C*K*K (tanh and pooling flops are not counted). The FP32 rate is the higher of the FFMA
  probe and cuBLAS SGEMM (no TF32): whichever reaches more is the better evidence of what the chip can do.
  % of roofline = floor / time * 100.
- cuDNN: torch.nn.functional.conv2d on the same shapes and the same kind of inputs, cudnn.benchmark on, TF32 off
  (cuDNN and matmul), CUDA events, median of `reps` after `warmup`; for layers followed by tanh + pool also
  conv2d + tanh + max_pool2d. x cuDNN = cuDNN ms / our ms (> 1: we are faster). Where a variant rounds (TF32 or
  FP16), cuDNN is also timed with TF32 on and on half tensors, and that variant's x cuDNN is against the faster of
  the two (pyconv.bench.gpu_layers.reduced_yardstick): a reduced variant is never held to cuDNN FP32 only.
- CPU: each pyconv._cpu variant with a preallocated output, time.perf_counter around the call, median of `reps`
  (default 5) after one warm-up; PyTorch CPU conv2d with torch.set_num_threads(the OpenMP thread count).
- End to end: the GPU engine with the final milestone's plan, on the first `batch` test images
  (uint8, as the milestones feed them): resident (images already on the device, in final's chunks on its
  streams without the copies, Network.forward_resident, CUDA events); from pinned host memory (Network.forward
  with final's chunks and streams: the copies in, the network, the labels back; without per-layer timing, and
  again with the op-time events the final milestone prints) and from pageable memory (with them, as final runs a
  numpy batch), host clock around the call, which returns after a device sync; the same three for the PyTorch
  network built from the same model (pyconv.engines.framework.build_net). Peak device memory per model.

- Sweep (--sweep): our best correct variant against cuDNN FP32, and against cuDNN's faster of TF32 and FP16 with
  reduced precision allowed, over drawn layer shapes, without and with tanh + max-pool 2/2 after
  (pyconv.bench.sweep), with its own warm-up and repetitions unless given.

Where each part lives: timing (how times are taken and summarised), roofline (flops, bytes, the floor),
sites (the layers), gpu_layers, cpu_layers, end_to_end, sweep, goals, tags (commit, date, host; where the JSON goes),
schema (the JSON's records), evidence (the per-GPU file final reads); this module runs them."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .. import autotune, native, verify
from .. import variants as registry
from ..core import paths
from ..core.checks import as_int, check_batch
from ..core.errors import PyconvError
from ..core.fileio import check_writable
from ..core.model import DEFAULT_MODEL, shipped_models
from ..engines import gpu as gpu_engine
from ..report.tables import text_tables
from ..variants import Variant
from . import cpu_layers, evidence, goals, gpu_layers, nvbench, roofline, sites, tags
from . import end_to_end as e2e
from . import sweep as sweep_mod
from .schema import FORMAT, VERSION, BenchResult
from .timing import CPU_REPS, GPU_REPS, WARMUP

INPUTS = "float32, uniform in [0.05, 1] with a random sign, fresh per variant"


def parse_parts(cpu: bool, gpu: bool, end_to_end: bool, gpu_available: bool, sweep: bool = False
                ) -> tuple[list[str], str]:
    """Which parts run, and a line to print when the choice was made for the user. No flag: the GPU layers where
    a GPU is visible, else the CPU layers; otherwise exactly the parts asked for."""
    if not (cpu or gpu or end_to_end or sweep):
        if gpu_available:
            return ["gpu"], ""
        return ["cpu"], "no CUDA GPU visible: benchmarking the CPU variants only"
    if (gpu or end_to_end or sweep) and not gpu_available:
        raise PyconvError("--gpu/--end-to-end/--sweep need a CUDA GPU and the built pyconv._gpu; none is visible")
    return [p for p, on in (("gpu", gpu), ("cpu", cpu), ("end_to_end", end_to_end), ("sweep", sweep)) if on], ""


def _check_count(value, what: str, low: int) -> int:
    try:
        n = as_int(value)
    except (TypeError, ValueError):
        raise PyconvError(f"{what} must be an integer >= {low}, got {value!r}") from None
    if n < low:
        raise PyconvError(f"{what} must be an integer >= {low}, got {n}")
    return n


def split_variants(wanted: str | None, gpu_names: list[str], cpu_names: list[str]) -> tuple[list[str], list[str]]:
    """--variants a,b: the GPU and the CPU names among them (each list in registry order); no flag: all of both
    but the student's (cpu-student, gpu-student: on request), or, in a part that has no variant but the
    student's (a student handout), the student's: as the milestones run them there. A part whose registry none
    of the names belongs to gets none."""
    if not wanted:
        def default(names: list[str]) -> list[str]:
            ours = [n for n in names if not registry.is_student(n)]
            return ours or list(names)

        return default(gpu_names), default(cpu_names)
    names = [w.strip() for w in str(wanted).split(",") if w.strip()]
    unknown = [n for n in names if n not in gpu_names and n not in cpu_names]
    if unknown or not names:
        raise PyconvError(f"unknown variant(s) {', '.join(unknown) or repr(wanted)} (known: "
                          f"{', '.join([*gpu_names, *cpu_names])})")
    return [n for n in gpu_names if n in names], [n for n in cpu_names if n in names]


def _registries() -> tuple[list[Variant], list[Variant]]:
    """The GPU and the native CPU variants this build has (none of a kind whose module is not built)."""
    g = registry.gpu_variants() if native.optional("_gpu") is not None else []
    c = registry.cpu_variants(with_reference=False) if native.optional("_cpu") is not None else []
    return g, c


def timing_method(echo: Callable[[str], None]) -> tuple[list | None, dict]:
    """How GPU op times are taken: NVBench where cuda-bench runs (a list to collect its jobs in), else CUDA events
    (None), with the settings recorded in the bench file."""
    if os.environ.get("PYCONV_TIMING") == "cuda-events":  # to compare the two methods, or where NVBench fails
        ok, why = False, "PYCONV_TIMING=cuda-events"
    else:
        ok, why = nvbench.available()
    if ok:
        return [], dict(nvbench.settings(), version=why)
    echo(f"NVBench unavailable ({why}): timing with CUDA events")
    return None, {"method": "cuda-events", "why": why}


def compiled_models(wanted: str | None, e2e_models: list[str]) -> list[str]:
    """--compiled: the end-to-end models that also get the torch.compile yardsticks (minutes of compilation
    each). Default: the course checkpoint model (DEFAULT_MODEL) when it runs; 'all', 'none', or names."""
    w = (wanted or DEFAULT_MODEL).strip()
    if w == "none":
        return []
    if w == "all":
        return list(e2e_models)
    names = [n.strip() for n in w.split(",") if n.strip()]
    if wanted and any(n not in e2e_models for n in names):
        raise PyconvError(f"--compiled names {', '.join(n for n in names if n not in e2e_models)}, not among the "
                          f"end-to-end models ({', '.join(e2e_models)}); or use all / none")
    return [n for n in e2e_models if n in names]


def _gpu_available() -> bool:
    g = native.optional("_gpu")
    return g is not None and bool(g.available())


def run(model: str | None = None, batch=None, reps=None, warmup=None, cpu: bool = False, gpu: bool = False,
        end_to_end: bool = False, out: str | None = None, variants: str | None = None, seed: int = 0, gpus="1",
        sweep: bool = False, echo: Callable[[str], None] = print, compiled: str | None = None) -> tuple[dict, Path]:
    """The whole benchmark; writes the JSON (and merges it into this GPU's evidence file when it is written to
    the results folder) and returns (result, path). Progress and the table go to `echo`."""
    batch_given = batch is not None
    batch = check_batch(batch if batch_given else goals.GOAL_BATCH)
    warmup_given = warmup is not None
    warmup = _check_count(WARMUP if warmup is None else warmup, "--warmup", 0)
    if reps is not None:
        _check_count(reps, "--reps", 1)
    # Where the JSON goes is checked now: a benchmark takes minutes, and an unwritable --out found at the end
    # would lose them (the default name, known only after the run, lies in results/).
    check_writable(Path(out) if out else paths.RESULTS / paths.RUNS_DIR / f"bench-{os.getpid()}.json", "--out")
    if out:
        tags.refuse_existing(out)
    parts, note = parse_parts(cpu, gpu, end_to_end, _gpu_available(), sweep)
    if note:
        echo(note)
    load_at_start = tags.load_average()
    gpu_all, cpu_all = _registries()
    gpu_names, cpu_names = split_variants(variants, [v.name for v in gpu_all], [v.name for v in cpu_all])
    rng = np.random.default_rng(seed)
    layer_models = [m.strip() for m in (model or DEFAULT_MODEL).split(",") if m.strip()]
    result: dict = {"format": FORMAT, "version": VERSION, "parts": parts, "date": tags.utc_now(),
                    "commit": tags.git_commit(), "host_cpu": tags.host_cpu(), "gpu": None, "driver": None,
                    "cuda_driver_api": None, "cuda_runtime": None, "torch": None,
                    "settings": {"models": layer_models, "batch": batch, "warmup": warmup, "inputs": INPUTS,
                                 "check_images": verify.CHECK_IMAGES, "seed": seed},
                    "roofline": None, "layers": [], "cpu": [], "end_to_end": [], "goals": []}
    if variants:  # a subset: the evidence file updates those variants only
        result["settings"]["variants"] = [*gpu_names, *cpu_names]
    torch = cpu_layers.torch_cpu()
    if torch is not None:
        result["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda,
                           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}

    layer_sites = []
    if "gpu" in parts or "cpu" in parts:
        for name in layer_models:
            layer_sites += sites.sites_of(sites.layer_model(name), batch)
    if "cpu" in parts:
        from ..engines.cpu import check_memory

        for site in layer_sites:  # its x and its output, at the full batch
            ho, wo = site["H"] - site["K"] + 1, site["W"] - site["K"] + 1
            check_memory(4 * batch * (site["C"] * site["H"] * site["W"] + site["M"] * ho * wo),
                         f"the CPU benchmark of {site['model']} {site['layer']} at batch {batch}")

    if "gpu" in parts or "end_to_end" in parts or "sweep" in parts:
        g = native.gpu()
        info = dict(g.device_info())
        result.update({"gpu": info, "driver": tags.nvidia_driver(),
                       "cuda_driver_api": tags.cuda_version(int(info["cuda_driver_version"])),
                       "cuda_runtime": tags.cuda_version(int(info["cuda_runtime_version"]))})
        tg = gpu_layers.torch_gpu()
        if tg is None:
            echo("PyTorch with CUDA not available: no cuDNN / PyTorch columns")
        chosen = [v for v in gpu_all if v.name in gpu_names]
        if "gpu" in parts or "sweep" in parts:
            echo(f"{info['name']}: measuring the roofline (copy bandwidth, FFMA rate, SGEMM rate)")
            roof = roofline.measure_roofline(g)
            result["roofline"] = roof
            autotune.load_cache(info["name"])  # the tunable kernel runs with this GPU's tuned configurations
        if "gpu" in parts:
            gpu_reps = _check_count(reps if reps is not None else GPU_REPS, "--reps", 1)
            result["settings"]["gpu_reps"] = gpu_reps
            if not chosen:
                echo("--variants names no GPU variant: no GPU layer benchmark")
            jobs, result["settings"]["timing"] = timing_method(echo)
            for site in layer_sites if chosen else []:
                echo(f"{site['model']} {site['layer']}: {len(chosen)} variants")
                result["layers"].append(gpu_layers.bench_gpu_layer(g, site, chosen, roof, rng, warmup, gpu_reps, tg,
                                                                   jobs))
            if jobs is not None:
                nvbench.run_jobs(jobs, echo)
                for layer in result["layers"]:
                    gpu_layers.finish_layer(layer)
        if "end_to_end" in parts:
            e2e_models = layer_models if model else shipped_models()
            if not e2e_models:
                raise PyconvError(f"no shipped models in {paths.MODELS} for --end-to-end")
            e2e_reps = _check_count(reps if reps is not None else GPU_REPS, "--reps", 1)
            n_gpus = gpu_engine.parse_gpus(gpus)
            result["settings"]["gpus"] = n_gpus
            with_compiled = compiled_models(compiled, e2e_models)
            result["settings"]["compiled"] = with_compiled
            for name in e2e_models:
                echo(f"end to end: {name} at batch {batch}"
                     + (" (with the torch.compile yardsticks: minutes)" if name in with_compiled and tg else ""))
                result["end_to_end"].append(e2e.bench_end_to_end(name, batch, warmup, e2e_reps, tg, n_gpus,
                                                                 compiled=name in with_compiled))

    if "sweep" in parts:
        if not chosen:
            raise PyconvError("--sweep: --variants names no GPU variant")
        sw_warmup = warmup if warmup_given else sweep_mod.WARMUP
        sw_reps = _check_count(reps if reps is not None else sweep_mod.REPS, "--reps", 1)
        echo(f"sweep: {sweep_mod.SHAPES} drawn layer shapes x {len(chosen)} variants at batch {batch}, warm-up "
             f"{sw_warmup}, median of {sw_reps}")
        result["sweep"] = sweep_mod.run_sweep(g, chosen, roof, batch, sw_warmup, sw_reps, tg, echo)

    if "cpu" in parts:
        c = native.cpu()
        cpu_reps = _check_count(reps if reps is not None else CPU_REPS, "--reps", 1)
        chosen_cpu = [v for v in cpu_all if v.name in cpu_names]
        naive_batch = batch if batch_given else min(batch, cpu_layers.SINGLE_THREAD_BATCH)
        result["settings"].update({"cpu_reps": cpu_reps, "cpu_warmup": 1, "cpu_threads": int(c.max_threads()),
                                   "cpu_naive_batch": naive_batch})
        if torch is None:
            echo("PyTorch not installed: no PyTorch CPU column")
        for site in layer_sites:
            echo(f"{site['model']} {site['layer']}: CPU variants")
            result["cpu"] += cpu_layers.bench_cpu_layer(site, chosen_cpu, cpu_layers.batch_rule(batch, naive_batch),
                                                        rng, cpu_reps, torch)

    result["host_load"] = {"start": load_at_start, "end": tags.load_average()}
    m2_default = next((v.name for v in cpu_all if v.role("2").role == "default"), None)
    result["goals"] = goals.check_goals(result, m2_default)
    dest = Path(out) if out else tags.default_out(result)
    tags.write_json(result, dest)
    echo(f"wrote {dest}")
    if dest.resolve().parent == paths.RESULTS.resolve():
        ev = evidence.update_beside(BenchResult.parse(result), dest)
        if ev is not None:
            echo(f"updated {ev}")
    echo(text_tables(result))
    return result, dest
