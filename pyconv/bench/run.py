"""`invoke bench`: every convolution variant on every conv layer of a model, held to the roofline of the GPU it
runs on and to cuDNN (through PyTorch) measured in the same run; the CPU variants against PyTorch on the CPU; and
the whole network end to end against PyTorch + cuDNN. Results go to one JSON file (format "pyconv-bench",
tagged with GPU, driver, commit and date); the README's performance tables are generated from such files
(pyconv.report), never typed.

What is measured, and how:
- Layer shapes come from the model: conv_sites(model, batch) gives each conv the input shape the network feeds it.
  An architecture name (fa17, sp18, fa18, sp19) is accepted in place of a model: a layer benchmark needs shapes,
  not weights.
- Inputs (x and k) are float32, uniform in [0.05, 1] with a random sign (never zero: zeros hide unwritten
  outputs), drawn fresh for every variant. The first layer's real data is 0..255 pixels; the convolution's cost
  does not depend on the values.
- Before a variant is timed, its output over the whole batch is checked against pyconv.reference on the first and
  the last CHECK_IMAGES images (the last ones catch grid-indexing errors that only large batches reach), with the
  tolerance its tests use: |y - ref| <= atol + rtol*|ref|, rtol = the variant's tolerance, atol = rtol*sqrt(C*K*K).
  A variant that fails is recorded as failed and not timed; it never counts as the best.
- GPU op time: pyconv._gpu.time_conv, CUDA events around each launch, median (also min, p90) of `reps` runs after
  `warmup` untimed ones. Layers followed by tanh + max-pool 2/2 are also timed as conv + tanh + pool
  (time_conv_tanh_pool): the fused variant's one launch, or any other variant followed by the shared tanh and
  pooling kernels.
- Roofline floor of a layer = max(bytes / copy bandwidth, flops / FP32 rate), both measured at the start of the
  run on the same GPU: bytes = x read once + k read once + y written once (the pooled y for conv + tanh + pool),
  flops = 2*B*M*Ho*Wo*C*K*K (tanh and pooling flops are not counted). The FP32 rate is the higher of the FFMA
  probe and cuBLAS SGEMM (no TF32): whichever reaches more is the better evidence of what the chip can do.
  % of roofline = floor / time * 100.
- cuDNN: torch.nn.functional.conv2d on the same shapes and the same kind of inputs, cudnn.benchmark on, TF32 off
  (cuDNN and matmul), CUDA events, median of `reps` after `warmup`; for layers followed by tanh + pool also
  conv2d + tanh + max_pool2d. x cuDNN = cuDNN ms / our ms (> 1: we are faster).
- CPU: each pyconv._cpu variant with a preallocated output, time.perf_counter around the call, median of `reps`
  (default 5) after one warm-up; PyTorch CPU conv2d with torch.set_num_threads(the OpenMP thread count).
- End to end: the GPU engine with the variants the final milestone picks, on the first `batch` test images
  (uint8, as the milestones feed them): resident (images already on the device, Network.forward_resident,
  CUDA events), from pinned and from pageable host memory (Network.forward in one chunk: the copy in, the
  network, the labels back, host clock around the call, which returns after a device sync); the same three for
  the PyTorch network built from the same model (pyconv.framework.build_net). Peak device memory per model."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ..core import paths, reference
from ..core.checks import as_int
from ..core.errors import PyconvError
from ..core.fileio import atomic_path
from ..core.model import DEFAULT_MODEL, Model

FORMAT = "pyconv-bench"
VERSION = 1
GPU_REPS = 20
CPU_REPS = 5
WARMUP = 5
CHECK_IMAGES = 32  # images checked at each end of the batch (first and last)
NAIVE_BATCH = 1000  # cpu-naive's batch when --batch is not given (it is the slow seven-loop version)
COPY_BYTES = 1 << 30
INPUTS = "float32, uniform in [0.05, 1] with a random sign, fresh per variant"

# The course layers the goals are about (C, H, W, M, K), at batch GOAL_BATCH.
SP19_CONV1 = (1, 48, 48, 6, 5)
SP19_CONV2 = (6, 22, 22, 16, 5)
FA17_CONV = (1, 28, 28, 50, 5)
GOAL_BATCH = 10000


# ---------------------------------------------------------------------------------------------------------------
# Arithmetic: flops, bytes, roofline floor, statistics


def conv_flops(B: int, C: int, H: int, W: int, M: int, K: int) -> int:
    """2 flops (multiply + add) per tap: 2*B*M*Ho*Wo*C*K*K."""
    return 2 * B * M * (H - K + 1) * (W - K + 1) * C * K * K


def conv_bytes(B: int, C: int, H: int, W: int, M: int, K: int, pooled: bool = False) -> int:
    """The least traffic a convolution can make: x read once, k read once, y written once (float32). pooled: y is
    the max-pool 2/2 of the conv output (floor mode), as the fused conv + tanh + pool writes it."""
    ho, wo = H - K + 1, W - K + 1
    if pooled:
        ho, wo = ho // 2, wo // 2
    return 4 * (B * C * H * W + M * C * K * K + B * M * ho * wo)


def floor_ms(flops: int, nbytes: int, copy_GBps: float, fp32_GFLOPs: float) -> float:
    """The roofline floor in milliseconds: the slower of moving the bytes and doing the flops."""
    if copy_GBps <= 0 or fp32_GFLOPs <= 0:
        raise PyconvError("roofline: bandwidth and FP32 rate must be positive")
    return max(nbytes / (copy_GBps * 1e9), flops / (fp32_GFLOPs * 1e9)) * 1e3


def rates(flops: int, nbytes: int, ms: float, floor: float) -> dict:
    """GFLOP/s, GB/s and % of the roofline floor of one timed op."""
    return {"gflops": flops / (ms * 1e6), "gbps": nbytes / (ms * 1e6), "pct_roofline": floor / ms * 100.0}


def stats(ms: Sequence[float]) -> dict:
    a = np.asarray(ms, dtype=np.float64)
    if a.size == 0:
        raise PyconvError("no timings to summarise")
    return {"median": float(np.median(a)), "min": float(a.min()), "p90": float(np.percentile(a, 90)),
            "reps": int(a.size)}


def compare(y: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> dict:
    """Element-wise check |y - ref| <= atol + rtol*|ref| (a NaN or a wrong shape fails). max_rel_err is
    max |y - ref| / (|ref| + atol/rtol): the relative error, kept finite where ref is near zero."""
    if y.shape != ref.shape:
        return {"passed": False, "why": f"shape {y.shape} != reference {ref.shape}", "max_abs_err": None,
                "max_rel_err": None, "rtol": rtol, "atol": atol}
    y64, r64 = y.astype(np.float64), ref.astype(np.float64)
    err = np.abs(y64 - r64)
    nan = int(np.isnan(y64).sum())
    bad = ~(err <= atol + rtol * np.abs(r64))
    finite = np.where(np.isnan(err), 0.0, err)
    out = {"passed": not bool(bad.any()), "max_abs_err": float(finite.max()) if finite.size else 0.0,
           "max_rel_err": float((finite / (np.abs(r64) + atol / rtol)).max()) if finite.size else 0.0,
           "rtol": rtol, "atol": atol}
    if bad.any():
        out["why"] = f"{int(bad.sum())} of {bad.size} elements off" + (f" ({nan} NaN: never written)" if nan else "")
    return out


def random_nonzero(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    v = rng.uniform(0.05, 1.0, tuple(shape)) * rng.choice(np.array([-1.0, 1.0]), tuple(shape))
    return np.ascontiguousarray(v, dtype=np.float32)


def check_slices(batch: int) -> list[slice]:
    """The images a correctness check covers: the first CHECK_IMAGES and the last CHECK_IMAGES (once if they
    overlap)."""
    n = min(CHECK_IMAGES, batch)
    first = slice(0, n)
    if batch <= n:
        return [first]
    return [first, slice(max(n, batch - CHECK_IMAGES), batch)]


def check_output(y: np.ndarray, x: np.ndarray, k: np.ndarray, pooled: bool, rtol: float, atol: float) -> dict:
    """Compare the output y of the whole batch with the reference on check_slices: passed only if every checked
    element is within tolerance; the largest errors over all checked images."""
    results = []
    for s in check_slices(len(x)):
        ref = reference.conv2d(x[s], k)
        if pooled:
            ref = reference.tanh_maxpool2(ref)
        results.append(compare(y[s], ref, rtol, atol))
    errs = [r for r in results if r["max_abs_err"] is not None]
    out = {"passed": all(r["passed"] for r in results),
           "max_abs_err": max((r["max_abs_err"] for r in errs), default=None),
           "max_rel_err": max((r["max_rel_err"] for r in errs), default=None),
           "rtol": rtol, "atol": atol, "images_checked": sum(s.stop - s.start for s in check_slices(len(x)))}
    whys = [r["why"] for r in results if "why" in r]
    if whys:
        out["why"] = "; ".join(whys)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Tags: commit, date, host


def git_commit() -> str:
    """$PYCONV_COMMIT when set (a copy of the tree on another machine: whoever made the copy knows its commit
    better than a stale .git beside it), else HEAD's hash with '-dirty' when tracked files differ from it, else
    'unknown'."""
    if os.environ.get("PYCONV_COMMIT"):
        return os.environ["PYCONV_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=paths.ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=paths.ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def load_average() -> float | None:
    """The 1-minute load average: CPU timings taken while it exceeds the core count are shared with other work."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def host_cpu() -> dict:
    """The CPU's model name (from /proc/cpuinfo) and the cores this process may use."""
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return {"model": name, "cores": cores}


def nvidia_driver() -> str | None:
    """The kernel driver's version (e.g. '580.65.06'), or None where there is no NVIDIA driver."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        text = ""
    for word in text.split():
        parts = word.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts):
            return word
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, check=True, timeout=30).stdout.split()
        return out[0] if out else None
    except (OSError, subprocess.SubprocessError):
        return None


def cuda_version(v: int) -> str:
    """12080 -> '12.8'."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def slug(text: str) -> str:
    from ..tuning import gpu_slug

    return gpu_slug(text)


def default_out(result: dict) -> Path:
    """results/bench-<gpu-slug>-<date>.json, or results/bench-cpu-<cpu-slug>-<date>.json without a GPU."""
    day = result["date"][:10]
    if result.get("gpu"):
        return paths.RESULTS / f"bench-{slug(result['gpu']['name'])}-{day}.json"
    return paths.RESULTS / f"bench-cpu-{slug(result['host_cpu']['model'])}-{day}.json"


def write_json(result: dict, dest: str | os.PathLike) -> Path:
    """Atomically: the file appears whole or not at all."""
    dest = Path(dest)
    with atomic_path(dest) as tmp:
        tmp.write_text(json.dumps(result, indent=1) + "\n")
    return dest


# ---------------------------------------------------------------------------------------------------------------
# Models


def shapes_only_model(arch_name: str) -> Model:
    """An architecture's layers with zero weights of the right shapes: enough for conv_sites."""
    from ..core import archs

    m = archs.empty_model(arch_name, name=arch_name, description="shapes only")
    c, h, w = m.input_shape
    flat = 0
    for layer in m.layers:
        if layer.type == "conv":
            layer.weight = np.zeros((layer.out_channels, c, layer.kernel, layer.kernel), np.float32)
            c, h, w = layer.out_channels, h - layer.kernel + 1, w - layer.kernel + 1
        elif layer.type == "pool":
            h, w = (h - layer.kernel) // layer.stride + 1, (w - layer.kernel) // layer.stride + 1
        elif layer.type == "flatten":
            flat = c * h * w
        elif layer.type == "fc":
            layer.weight = np.zeros((layer.out_features, flat), np.float32)
            layer.bias = np.zeros(layer.out_features, np.float32)
            flat = layer.out_features
    return m


def layer_model(name: str) -> Model:
    """A model by name, or (when no model has that name) an architecture's shapes."""
    from ..core.archs import ARCHS
    from ..core.model import available_models, load_model

    if name in ARCHS and name not in available_models():
        return shapes_only_model(name)
    try:
        return load_model(name)
    except PyconvError as e:
        raise PyconvError(f"{e}; an architecture name ({', '.join(ARCHS)}) also works for the layer benchmark") \
            from None


def sites_of(model: Model, batch: int) -> list[dict]:
    from ..engines.gpu import conv_sites

    out = []
    convs = model.convs
    for i, (B, C, H, W, M, K, fused) in enumerate(conv_sites(model, batch)):
        out.append({"model": model.name, "arch": model.arch, "layer": convs[i].name or f"conv{i + 1}",
                    "B": B, "C": C, "H": H, "W": W, "M": M, "K": K, "tanh_pool_follows": bool(fused)})
    return out


def shape_key(site: dict) -> tuple[int, int, int, int, int]:
    return site["C"], site["H"], site["W"], site["M"], site["K"]


def _dims(site: dict) -> tuple[int, int, int, int, int, int]:
    return site["B"], site["C"], site["H"], site["W"], site["M"], site["K"]


# ---------------------------------------------------------------------------------------------------------------
# GPU: roofline, layers, cuDNN


def measure_roofline(g, reps: int = GPU_REPS) -> dict:
    copy = stats(g.measure_copy_bandwidth(COPY_BYTES, reps))["median"]
    fma = stats(g.measure_fma_rate(reps))["median"]
    sgemm = stats(g.measure_sgemm_rate(8192, max(3, reps // 2)))["median"]
    return {"copy_GBps": copy, "fma_GFLOPs": fma, "sgemm_GFLOPs": sgemm, "fp32_GFLOPs": max(fma, sgemm),
            "fp32_source": "sgemm" if sgemm > fma else "ffma-probe", "copy_bytes": COPY_BYTES}


def torch_gpu():
    """torch configured as milestone 1.2 runs it (cudnn.benchmark on, TF32 off), or None without CUDA PyTorch."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    from ..engines.framework import _configure_gpu

    _configure_gpu(torch)
    return torch


def time_cuda_events(torch, fn: Callable[[], object], warmup: int, reps: int) -> list[float]:
    """Milliseconds of each of `reps` calls of fn (after `warmup`), CUDA events on the current stream."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        out.append(float(start.elapsed_time(stop)))
    return out


def cudnn_layer(torch, site: dict, rng: np.random.Generator, warmup: int, reps: int) -> dict:
    B, C, H, W, M, K = _dims(site)
    F = torch.nn.functional
    x = torch.from_numpy(random_nonzero(rng, (B, C, H, W))).cuda()
    k = torch.from_numpy(random_nonzero(rng, (M, C, K, K))).cuda()
    out = {"source": f"torch {torch.__version__} conv2d, cuDNN {torch.backends.cudnn.version()}, "
                     "cudnn.benchmark on, TF32 off"}
    with torch.inference_mode():
        out["conv_ms"] = stats(time_cuda_events(torch, lambda: F.conv2d(x, k), warmup, reps))
        if site["tanh_pool_follows"]:
            out["conv_tanh_pool_ms"] = stats(time_cuda_events(
                torch, lambda: F.max_pool2d(torch.tanh(F.conv2d(x, k)), 2, 2), warmup, reps))
    return out


def bench_gpu_layer(g, site: dict, variants: list[dict], roof: dict, rng: np.random.Generator, warmup: int,
                    reps: int, torch=None) -> dict:
    """Every variant on one layer: check, then time; plus cuDNN. Returns the layer's JSON entry."""
    B, C, H, W, M, K = _dims(site)
    fused_site = site["tanh_pool_follows"]
    flops = conv_flops(B, C, H, W, M, K)
    bytes_conv = conv_bytes(B, C, H, W, M, K)
    bytes_fused = conv_bytes(B, C, H, W, M, K, pooled=True)
    layer = dict(site)
    layer.update({"flops": flops, "bytes": bytes_conv,
                  "floor_ms": floor_ms(flops, bytes_conv, roof["copy_GBps"], roof["fp32_GFLOPs"])})
    if fused_site:
        layer["bytes_pooled"] = bytes_fused
        layer["floor_tanh_pool_ms"] = floor_ms(flops, bytes_fused, roof["copy_GBps"], roof["fp32_GFLOPs"])
    rows = []
    for v in variants:
        name = v["name"]
        pooled = v["epilogue"] == "tanh-maxpool2"
        row = {"variant": name, "step": v["step"], "summary": v["summary"], "epilogue": v["epilogue"],
               "x_on_host": bool(v["x_on_host"])}
        rows.append(row)
        if pooled and not fused_site:
            row["skipped"] = "the layer is not followed by tanh + max-pool 2/2"
            continue
        why = g.why_unsupported(name, B, C, H, W, M, K)
        if why:
            row["skipped"] = f"unsupported: {why}"
            continue
        x = random_nonzero(rng, (B, C, H, W))
        k = random_nonzero(rng, (M, C, K, K))
        rtol = float(v["tolerance"])
        try:
            row["check"] = check_output(g.conv(name, x, k), x, k, pooled, rtol, rtol * float(np.sqrt(C * K * K)))
            if not row["check"]["passed"]:
                row["skipped"] = "FAILED the correctness check: not timed"
                continue
            row["ms"] = stats(g.time_conv(name, x, k, warmup, reps))
            if fused_site and not pooled:
                row["tanh_pool_ms"] = stats(g.time_conv_tanh_pool(name, x, k, warmup, reps))
        except (ValueError, RuntimeError) as e:  # pyconv._gpu.CudaError is a RuntimeError
            row["error"] = f"{type(e).__name__}: {e}"
            continue
        floor = layer["floor_tanh_pool_ms"] if pooled else layer["floor_ms"]
        row.update(rates(flops, bytes_fused if pooled else bytes_conv, row["ms"]["median"], floor))
        if "tanh_pool_ms" in row:
            row["tanh_pool_pct_roofline"] = layer["floor_tanh_pool_ms"] / row["tanh_pool_ms"]["median"] * 100.0
    layer["variants"] = rows
    if torch is not None:
        try:
            layer["cudnn"] = cudnn_layer(torch, site, rng, warmup, reps)
        except RuntimeError as e:
            layer["cudnn"] = {"error": f"{type(e).__name__}: {e}"}
        torch.cuda.empty_cache()  # give the next variant's buffers back the memory cuDNN's run cached
    else:
        layer["cudnn"] = {"error": "PyTorch with CUDA is not installed: no cuDNN column"}
    summarise_layer(layer)
    return layer


def summarise_layer(layer: dict) -> None:
    """Fill x_cudnn per variant and the layer's best: the fastest passing plain conv, the fastest passing conv +
    tanh + pool (a fused variant's launch or a plain variant followed by the shared kernels), and `best` (the
    smaller of the two: what the layer costs the network)."""
    cud = layer.get("cudnn", {})
    c_conv = cud.get("conv_ms", {}).get("median")
    c_fused = cud.get("conv_tanh_pool_ms", {}).get("median")
    best_conv = best_fused = None
    for row in layer["variants"]:
        if "ms" not in row:
            continue
        ms = row["ms"]["median"]
        if row["epilogue"] == "tanh-maxpool2":
            if c_fused:
                row["x_cudnn"] = c_fused / ms
            if best_fused is None or ms < best_fused["ms"]:
                best_fused = {"variant": row["variant"], "ms": ms, "tanh_pool": True}
        else:
            if c_conv:
                row["x_cudnn"] = c_conv / ms
            if best_conv is None or ms < best_conv["ms"]:
                best_conv = {"variant": row["variant"], "ms": ms, "tanh_pool": False}
            if "tanh_pool_ms" in row:
                tp = row["tanh_pool_ms"]["median"]
                if c_fused:
                    row["tanh_pool_x_cudnn"] = c_fused / tp
                if best_fused is None or tp < best_fused["ms"]:
                    best_fused = {"variant": row["variant"] + " + tanh + pool", "ms": tp, "tanh_pool": True}
    layer["best_conv"] = best_conv
    layer["best_conv_tanh_pool"] = best_fused
    if best_conv and c_conv:
        best_conv["x_cudnn"] = c_conv / best_conv["ms"]
    if best_fused and c_fused:
        best_fused["x_cudnn"] = c_fused / best_fused["ms"]
    cands = [b for b in (best_conv, best_fused) if b]
    layer["best"] = dict(min(cands, key=lambda b: b["ms"])) if cands else None


# ---------------------------------------------------------------------------------------------------------------
# CPU


def torch_cpu():
    try:
        import torch
    except ImportError:
        return None
    return torch


def bench_cpu_layer(site: dict, variants: list[str], batch_for: Callable[[str], int], rng: np.random.Generator,
                    reps: int, torch=None) -> list[dict]:
    """Each CPU variant on one layer (batch_for(name) images), then PyTorch CPU conv2d at the full batch."""
    from .. import _cpu

    _, C, H, W, M, K = _dims(site)
    threads = int(_cpu.max_threads())
    rows = []
    for name in variants:
        B = batch_for(name)
        x = random_nonzero(rng, (B, C, H, W))
        k = random_nonzero(rng, (M, C, K, K))
        out = np.full((B, M, H - K + 1, W - K + 1), np.nan, np.float32)  # poisoned: unwritten outputs fail the check
        row = {"layer": site["layer"], "model": site["model"], "C": C, "H": H, "W": W, "M": M, "K": K, "B": B,
               "variant": name, "threads": 1 if name == "cpu-naive" else threads,
               "flops": conv_flops(B, C, H, W, M, K)}
        rows.append(row)
        _cpu.conv(name, x, k, out)  # the checked run doubles as the warm-up
        rtol = 1e-5
        row["check"] = check_output(out, x, k, False, rtol, rtol * float(np.sqrt(C * K * K)))
        if not row["check"]["passed"]:
            row["skipped"] = "FAILED the correctness check: not timed"
            continue
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            _cpu.conv(name, x, k, out)
            times.append(time.perf_counter() - t0)
        row["s"] = stats(times)
        row["gflops"] = row["flops"] / row["s"]["median"] / 1e9
    if torch is not None:
        B = site["B"]
        x = torch.from_numpy(random_nonzero(rng, (B, C, H, W)))
        k = torch.from_numpy(random_nonzero(rng, (M, C, K, K)))
        old = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            with torch.inference_mode():
                torch.nn.functional.conv2d(x, k)  # warm-up: oneDNN picks and builds its kernel on the first call
                times = []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    torch.nn.functional.conv2d(x, k)
                    times.append(time.perf_counter() - t0)
        finally:
            torch.set_num_threads(old)
        s = stats(times)
        row = {"layer": site["layer"], "model": site["model"], "C": C, "H": H, "W": W, "M": M, "K": K, "B": B,
               "variant": f"pytorch {torch.__version__}", "threads": threads, "s": s,
               "flops": conv_flops(B, C, H, W, M, K)}
        row["gflops"] = row["flops"] / s["median"] / 1e9
        rows.append(row)
        for r in rows:
            if "s" in r and r is not row and r["B"] == B:
                r["x_torch"] = s["median"] / r["s"]["median"]
    return rows


# ---------------------------------------------------------------------------------------------------------------
# End to end


def _host_timed(fn: Callable[[], object], warmup: int, reps: int) -> tuple[list[float], object]:
    last = None
    for _ in range(warmup):
        last = fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        last = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times, last


def _timing(ms_list: Sequence[float], batch: int) -> dict:
    s = stats(ms_list)
    s["images_per_s"] = batch / (s["median"] / 1e3)
    return s


PIPELINE_CHUNKS = (1, 2, 4, 8, 16)
PIPELINE_STREAMS = (2, 4)


def _measure_ours(model: Model, impls: list[str], fc_math: str, x: np.ndarray, xp: np.ndarray | None,
                  labels: np.ndarray, warmup: int, reps: int, sweep: bool) -> tuple[dict, np.ndarray]:
    """One configuration of the GPU engine: resident, pageable and (xp: the batch in pinned memory) pinned times,
    Correctness, peak device memory, optionally the pipeline sweep; and its predicted labels."""
    from ..engines.gpu import FINAL_CHUNKS, FINAL_STREAMS, GpuEngine
    from ..tools.milestones import accuracy

    batch = len(x)
    engine = GpuEngine(model, fc_math=fc_math)
    net = engine.net
    ours: dict = {}
    try:
        ours["resident_ms"] = _timing(net.forward_resident(x, impls, warmup, reps), batch)
    except ValueError as e:
        ours["resident_ms"] = {"error": str(e)}
    # From host memory the batch streams through in chunks on several streams, as the final milestone runs it.
    chunks = FINAL_CHUNKS if batch >= 4 * FINAL_CHUNKS else 1
    times, r = _host_timed(lambda: net.forward(x, impls, chunks, FINAL_STREAMS), warmup, reps)
    ours["pageable_ms"] = _timing(times, batch)
    ours["correctness"] = accuracy(r["labels"], labels)
    ours["passes"] = int(r["passes"])
    predicted = np.asarray(r["labels"])
    if xp is not None:
        times, r = _host_timed(lambda: net.forward(xp, impls, chunks, FINAL_STREAMS), warmup, reps)
        ours["pinned_ms"] = _timing(times, batch)
        ours["pinned_correctness"] = accuracy(r["labels"], labels)
        ours["peak_device_bytes"] = int(net.peak_bytes)  # before the sweep's other pipeline shapes grow buffers
        if sweep:
            # How the pipeline's shape matters: the pinned time for other chunk and stream counts (the final
            # milestone's FINAL_CHUNKS and FINAL_STREAMS were chosen from this sweep).
            rows = []
            for n_streams in PIPELINE_STREAMS:
                for n_chunks in PIPELINE_CHUNKS:
                    if n_chunks <= batch:
                        times, _ = _host_timed(lambda c=n_chunks, st=n_streams: net.forward(xp, impls, c, st),
                                               warmup, reps)
                        rows.append({"chunks": n_chunks, "streams": n_streams, "pinned_ms": _timing(times, batch)})
            ours["pipeline"] = rows
    else:
        ours["pinned_ms"] = {"error": "needs PyTorch to allocate pinned host memory"}
    ours.setdefault("peak_device_bytes", int(net.peak_bytes))
    del engine
    return ours, predicted


def bench_end_to_end(model_name: str, batch: int, warmup: int, reps: int, torch=None, gpus: int = 1) -> dict:
    """The final milestone's configuration of the GPU engine and PyTorch + cuDNN on one model: resident, pinned,
    pageable; Correctness; peak device memory; the labels that differ from PyTorch's float32 network.

    The reduced-precision candidate (TF32 where it is fastest) is measured first; when a label differs from
    PyTorch's, the float32 configuration is measured too and is what final runs ("pyconv"; the rejected candidate
    stays in "pyconv_reduced"). The entry records the verdict for these weights (model_digest,
    reduced_precision_ok), which final reads (pyconv.tuning.precision_verdict). Without PyTorch nothing can be
    verified: the float32 configuration is measured and no verdict is recorded."""
    from ..core import data
    from ..engines.gpu import FINAL_CHUNKS, FINAL_STREAMS, MultiGpuEngine, final_config
    from ..tools.milestones import accuracy
    from ..core.model import load_model

    model = load_model(model_name)
    x, labels = data.load_test(model.input_size, batch)
    x = np.ascontiguousarray(x)
    batch = len(x)
    entry: dict = {"model": model.name, "arch": model.arch, "batch": batch, "model_digest": model.digest(),
                   "input": "uint8 test images (as the milestones feed them)",
                   "chunks": FINAL_CHUNKS if batch >= 4 * FINAL_CHUNKS else 1, "streams": FINAL_STREAMS}
    xp = torch.from_numpy(x).pin_memory().numpy() if torch is not None else None  # page-locked: a direct DMA
    cfg = final_config(model, batch, exact=torch is None)
    ours, predicted = _measure_ours(model, cfg.impls, cfg.fc_math, x, xp, labels, warmup, reps, sweep=True)
    if torch is not None:
        entry["pytorch"], torch_labels = _torch_end_to_end(torch, model, x, labels, warmup, reps)
        torch.cuda.empty_cache()
        ours["differ_vs_pytorch"] = int(np.count_nonzero(predicted != torch_labels))
        entry["reduced_precision_ok"] = ours["differ_vs_pytorch"] == 0
        if not entry["reduced_precision_ok"]:
            entry["pyconv_reduced"] = dict(ours, impls=cfg.impls, fc_math=cfg.fc_math)
            cfg = final_config(model, batch, exact=True)
            ours, predicted = _measure_ours(model, cfg.impls, cfg.fc_math, x, xp, labels, warmup, reps, sweep=False)
            ours["differ_vs_pytorch"] = int(np.count_nonzero(predicted != torch_labels))
    else:
        entry["pytorch"] = {"error": "PyTorch with CUDA is not installed: no baseline"}
    entry["impls"], entry["fc_math"] = cfg.impls, cfg.fc_math
    entry["pyconv"] = ours
    if "median" in entry["pytorch"].get("resident_ms", {}):
        for mode in ("resident_ms", "pinned_ms", "pageable_ms"):
            if "median" in entry["pytorch"].get(mode, {}) and "median" in ours.get(mode, {}):
                entry.setdefault("x_pytorch", {})[mode] = entry["pytorch"][mode]["median"] / ours[mode]["median"]
    if gpus > 1 and xp is not None:
        # Scaling: the same batch from pinned memory split over 1..gpus GPUs (one network and stream set each).
        scaling = []
        for n in range(1, gpus + 1):
            multi = MultiGpuEngine(model, n, cfg.fc_math)
            times, r = _host_timed(lambda m=multi: m.forward(xp, cfg.impls, entry["chunks"], FINAL_STREAMS),
                                   warmup, reps)
            scaling.append({"gpus": n, "pinned_ms": _timing(times, batch),
                            "correctness": accuracy(r.labels, labels)})
            del multi
        base = scaling[0]["pinned_ms"]["median"]
        for row in scaling:
            row["speedup"] = base / row["pinned_ms"]["median"]
        entry["multi_gpu"] = scaling
    return entry


def _torch_end_to_end(torch, model: Model, x: np.ndarray, labels: np.ndarray, warmup: int,
                      reps: int) -> tuple[dict, np.ndarray]:
    """PyTorch + cuDNN (float32, TF32 off) timings, and its predicted labels."""
    from ..engines.framework import build_net
    from ..tools.milestones import accuracy

    net = build_net(model).eval().cuda()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    out: dict = {"source": f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
                           "cudnn.benchmark on, TF32 off"}
    with torch.inference_mode():
        xd = torch.from_numpy(x).cuda()
        out["resident_ms"] = _timing(time_cuda_events(torch, lambda: net(xd.float()).argmax(dim=1), warmup, reps),
                                     len(x))
        pinned = torch.from_numpy(x).pin_memory()
        pageable = torch.from_numpy(x)

        def run(host):
            return net(host.to("cuda").float()).argmax(dim=1).cpu()  # .cpu() waits for the device

        times, pred = _host_timed(lambda: run(pinned), warmup, reps)
        out["pinned_ms"] = _timing(times, len(x))
        times, pred = _host_timed(lambda: run(pageable), warmup, reps)
        out["pageable_ms"] = _timing(times, len(x))
        out["correctness"] = accuracy(pred.numpy(), labels)
    out["peak_device_bytes"] = int(torch.cuda.max_memory_allocated())
    return out, pred.numpy()


# ---------------------------------------------------------------------------------------------------------------
# Goals


def _goal(name: str, target: str, measured, unit: str, met, note: str = "") -> dict:
    g = {"name": name, "target": target, "measured": measured, "unit": unit, "met": met}
    if note:
        g["note"] = note
    return g


def _find_layer(layers: list[dict], key: tuple, batch: int = GOAL_BATCH) -> dict | None:
    for layer in layers:
        if shape_key(layer) == key and layer["B"] == batch:
            return layer
    return None


def check_goals(result: dict) -> list[dict]:
    """The issues' goals, each with what this run measured (None: not measured in this run, with why)."""
    goals: list[dict] = []
    parts = result.get("parts", [])
    if "gpu" in parts:
        layers = result.get("layers", [])
        c1, c2, fa = (_find_layer(layers, k) for k in (SP19_CONV1, SP19_CONV2, FA17_CONV))
        missing = "sp19 layers at batch 10000 not in this run"
        if c1 and c2 and c1.get("best") and c2.get("best"):
            total = c1["best"]["ms"] + c2["best"]["ms"]
            goals.append(_goal("sp19 total conv op time (best per layer, batch 10000)", "<= 0.40", total, "ms",
                               total <= 0.40, f"conv1: {c1['best']['variant']}, conv2: {c2['best']['variant']}"))
        else:
            goals.append(_goal("sp19 total conv op time (best per layer, batch 10000)", "<= 0.40", None, "ms",
                               None, missing))
        for label, layer in (("sp19 conv1", c1), ("sp19 conv2", c2)):
            ratios = []
            if layer:
                ratios = [b["x_cudnn"] for b in (layer.get("best_conv"), layer.get("best_conv_tanh_pool"))
                          if b and "x_cudnn" in b]
            best = max(ratios) if ratios else None
            goals.append(_goal(f"{label} x cuDNN fp32 (like for like: conv vs conv2d, fused vs conv2d+tanh+pool)",
                               ">= 3", best, "x", None if best is None else best >= 3.0,
                               "" if best is not None else (missing if not layer else "no cuDNN timing")))
        fused = None
        if c1:
            pooled = [r["ms"]["median"] for r in c1["variants"] if r["epilogue"] == "tanh-maxpool2" and "ms" in r]
            fused = min(pooled) if pooled else None
        goals.append(_goal("sp19 fused conv1 + tanh + pool", "<= 0.10", fused, "ms",
                           None if fused is None else fused <= 0.10, "" if fused is not None else
                           (missing if not c1 else "no passing fused variant")))
        fa_ms = fa["best_conv"]["ms"] if fa and fa.get("best_conv") else None
        goals.append(_goal("fa17 conv", "<= 0.35", fa_ms, "ms", None if fa_ms is None else fa_ms <= 0.35,
                           "" if fa_ms is not None else "fa17 layer at batch 10000 not in this run "
                           "(add --model ece408-high or fa17)"))
    if "cpu" in parts:
        for label, key, target in (("cpu-fast sp19 conv1", SP19_CONV1, 0.10),
                                   ("cpu-fast sp19 conv2", SP19_CONV2, 0.12)):
            rows = [r for r in result.get("cpu", []) if r["variant"] == "cpu-fast" and "s" in r
                    and (r["C"], r["H"], r["W"], r["M"], r["K"]) == key and r["B"] == GOAL_BATCH]
            s = rows[0]["s"]["median"] if rows else None
            goals.append(_goal(label + " (batch 10000)", f"<= {target:.2f}", s, "s",
                               None if s is None else s <= target,
                               "" if rows else "sp19 layer at batch 10000 not in this run"))
    if "end_to_end" in parts:
        sp19 = [x for x in result.get("end_to_end", []) if x["arch"] == "sp19" and x["batch"] == GOAL_BATCH]
        sp19.sort(key=lambda x: x["model"] != DEFAULT_MODEL)  # the default model first, when it ran
        e = sp19[0] if sp19 else None
        note = "" if e else "no sp19 model at batch 10000 in this run"
        ours = e["pyconv"] if e else {}
        res = ours.get("resident_ms", {}).get("median")
        copies = [ours[m]["median"] for m in ("pinned_ms", "pageable_ms") if "median" in ours.get(m, {})]
        with_copy = min(copies) if copies else None
        goals.append(_goal("sp19 end to end, data resident", "<= 1.0", res, "ms",
                           None if res is None else res <= 1.0, note))
        goals.append(_goal("sp19 end to end, including the copy (best of pinned, pageable)", "<= 1.5", with_copy,
                           "ms", None if with_copy is None else with_copy <= 1.5, note))
        x_pt = None
        if e and e.get("x_pytorch"):
            pairs = [(e["pytorch"][m]["median"], ours[m]["median"]) for m in ("pinned_ms", "pageable_ms")
                     if m in e["x_pytorch"]]
            if pairs:
                x_pt = min(p for p, _ in pairs) / min(o for _, o in pairs)
        goals.append(_goal("sp19 end to end including the copy x PyTorch (best vs best)", ">= 4", x_pt, "x",
                           None if x_pt is None else x_pt >= 4.0, note or ("" if x_pt else "no PyTorch baseline")))
        same = None
        if e and "differ_vs_pytorch" in ours:
            same = ours["differ_vs_pytorch"]
        elif e and "correctness" in e.get("pytorch", {}):
            same = abs(ours["correctness"] - e["pytorch"]["correctness"]) * e["batch"]
        goals.append(_goal("sp19 labels equal PyTorch's float32 ones (images that differ)", "<= 1", same, "images",
                           None if same is None else same <= 1.0 + 1e-9,
                           note or ("" if same is not None else "no PyTorch baseline")))
    return goals


# ---------------------------------------------------------------------------------------------------------------
# The run


def parse_parts(cpu: bool, gpu: bool, end_to_end: bool, gpu_available: bool) -> tuple[list[str], str]:
    """Which parts run, and a line to print when the choice was made for the user. No flag: the GPU layers where
    a GPU is visible, else the CPU layers; otherwise exactly the parts asked for."""
    if not (cpu or gpu or end_to_end):
        if gpu_available:
            return ["gpu"], ""
        return ["cpu"], "no CUDA GPU visible: benchmarking the CPU variants only"
    if (gpu or end_to_end) and not gpu_available:
        raise PyconvError("--gpu/--end-to-end need a CUDA GPU and the built pyconv._gpu; none is visible")
    return [p for p, on in (("gpu", gpu), ("cpu", cpu), ("end_to_end", end_to_end)) if on], ""


def _check_count(value, what: str, low: int) -> int:
    try:
        n = as_int(value)
    except (TypeError, ValueError):
        raise PyconvError(f"{what} must be an integer >= {low}, got {value!r}") from None
    if n < low:
        raise PyconvError(f"{what} must be an integer >= {low}, got {n}")
    return n


def split_variants(wanted: str | None, gpu_names: list[str], cpu_names: list[str]) -> tuple[list[str], list[str]]:
    """--variants a,b: the GPU and the CPU names among them (each list in registry order); no flag: all of both.
    A part whose registry none of the names belongs to gets none."""
    if not wanted:
        return list(gpu_names), list(cpu_names)
    names = [w.strip() for w in str(wanted).split(",") if w.strip()]
    unknown = [n for n in names if n not in gpu_names and n not in cpu_names]
    if unknown or not names:
        raise PyconvError(f"unknown variant(s) {', '.join(unknown) or repr(wanted)} (known: "
                          f"{', '.join([*gpu_names, *cpu_names])})")
    return [n for n in gpu_names if n in names], [n for n in cpu_names if n in names]


def _registries() -> tuple[list[str], list[str]]:
    gpu_names: list[str] = []
    cpu_names: list[str] = []
    try:
        from .. import _gpu

        gpu_names = [v["name"] for v in _gpu.variants()]
    except ImportError:
        pass
    try:
        from .. import _cpu

        cpu_names = [v["name"] for v in _cpu.variants()]
    except ImportError:
        pass
    return gpu_names, cpu_names


def _gpu_available() -> bool:
    try:
        from .. import _gpu
    except ImportError:
        return False
    return bool(_gpu.available())


def run(model: str | None = None, batch=None, reps=None, warmup=None, cpu: bool = False, gpu: bool = False,
        end_to_end: bool = False, out: str | None = None, variants: str | None = None, seed: int = 0, gpus="1",
        echo: Callable[[str], None] = print) -> tuple[dict, Path]:
    """The whole benchmark; writes the JSON and returns (result, path). Progress and the table go to `echo`."""
    from ..tools.milestones import check_batch

    batch_given = batch is not None
    batch = check_batch(batch if batch_given else GOAL_BATCH)
    warmup = _check_count(WARMUP if warmup is None else warmup, "--warmup", 0)
    parts, note = parse_parts(cpu, gpu, end_to_end, _gpu_available())
    if note:
        echo(note)
    load_at_start = load_average()
    gpu_variants, cpu_variants = split_variants(variants, *_registries())
    rng = np.random.default_rng(seed)
    layer_models = [m.strip() for m in (model or DEFAULT_MODEL).split(",") if m.strip()]
    result: dict = {"format": FORMAT, "version": VERSION, "parts": parts, "date": utc_now(), "commit": git_commit(),
                    "host_cpu": host_cpu(), "gpu": None, "driver": None, "cuda_driver_api": None,
                    "cuda_runtime": None, "torch": None,
                    "settings": {"models": layer_models, "batch": batch, "warmup": warmup, "inputs": INPUTS,
                                 "check_images": CHECK_IMAGES, "seed": seed},
                    "roofline": None, "layers": [], "cpu": [], "end_to_end": [], "goals": []}
    torch = torch_cpu()
    if torch is not None:
        result["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda,
                           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}

    sites = []
    if "gpu" in parts or "cpu" in parts:
        for name in layer_models:
            sites += sites_of(layer_model(name), batch)

    if "gpu" in parts or "end_to_end" in parts:
        from ..engines.gpu import gpu_module

        g = gpu_module()
        info = dict(g.device_info())
        result.update({"gpu": info, "driver": nvidia_driver(),
                       "cuda_driver_api": cuda_version(int(info["cuda_driver_version"])),
                       "cuda_runtime": cuda_version(int(info["cuda_runtime_version"]))})
        tg = torch_gpu()
        if tg is None:
            echo("PyTorch with CUDA not available: no cuDNN / PyTorch columns")
        if "gpu" in parts:
            gpu_reps = _check_count(reps if reps is not None else GPU_REPS, "--reps", 1)
            result["settings"]["gpu_reps"] = gpu_reps
            echo(f"{info['name']}: measuring the roofline (copy bandwidth, FFMA rate, SGEMM rate)")
            roof = measure_roofline(g)
            result["roofline"] = roof
            from .. import tuning

            tuning.load_cache(info["name"])  # gpu-autotuned runs with this GPU's tuned configurations, if any
            chosen = [v for v in g.variants() if v["name"] in gpu_variants]
            if not chosen:
                echo("--variants names no GPU variant: no GPU layer benchmark")
            for site in sites if chosen else []:
                echo(f"{site['model']} {site['layer']}: {len(chosen)} variants")
                result["layers"].append(bench_gpu_layer(g, site, chosen, roof, rng, warmup, gpu_reps, tg))
        if "end_to_end" in parts:
            from ..core.model import shipped_models

            e2e_models = layer_models if model else shipped_models()
            if not e2e_models:
                raise PyconvError(f"no shipped models in {paths.MODELS} for --end-to-end")
            e2e_reps = _check_count(reps if reps is not None else GPU_REPS, "--reps", 1)
            from ..engines.gpu import parse_gpus

            n_gpus = parse_gpus(gpus)
            result["settings"]["gpus"] = n_gpus
            for name in e2e_models:
                echo(f"end to end: {name} at batch {batch}")
                result["end_to_end"].append(bench_end_to_end(name, batch, warmup, e2e_reps, tg, n_gpus))

    if "cpu" in parts:
        from ..engines.cpu import cpu_module

        c = cpu_module()
        cpu_reps = _check_count(reps if reps is not None else CPU_REPS, "--reps", 1)
        names = cpu_variants
        naive_batch = batch if batch_given else min(batch, NAIVE_BATCH)
        result["settings"].update({"cpu_reps": cpu_reps, "cpu_warmup": 1, "cpu_threads": int(c.max_threads()),
                                   "cpu_naive_batch": naive_batch})
        if torch is None:
            echo("PyTorch not installed: no PyTorch CPU column")
        for site in sites:
            echo(f"{site['model']} {site['layer']}: CPU variants")
            result["cpu"] += bench_cpu_layer(site, names, lambda n: naive_batch if n == "cpu-naive" else batch,
                                             rng, cpu_reps, torch)

    result["host_load"] = {"start": load_at_start, "end": load_average()}
    result["goals"] = check_goals(result)
    dest = Path(out) if out else default_out(result)
    write_json(result, dest)
    from ..report.tables import text_tables

    echo(f"wrote {dest}")
    echo(text_tables(result))
    return result, dest
