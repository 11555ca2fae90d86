"""Every GPU variant on one conv layer: checked against the reference (pyconv.verify), then timed; conv + tanh +
pool where they follow; cuDNN (through PyTorch) on the same shape in the same run, timed the same way.

cuDNN is the yardstick in the precision the variant computes in: float32 (TF32 off) for every float32 variant;
where a variant of ours rounds (TF32 or FP16: pyconv.variants.REDUCED_PRECISIONS), cuDNN is also timed in its two
reduced modes, TF32 on (float32 tensors, tensor cores) and FP16 (half tensors, float32 accumulation), and a reduced
variant is held to the faster of the two (CUDNN_MODES, reduced_yardstick): the strictest like-for-like comparison,
whichever of TF32 and FP16 our variant rounds to.

Timing: with `jobs` (a list), every measurement becomes a pyconv.bench.nvbench.Job that NVBench runs later
(variants through pyconv._gpu.StagedConv, cuDNN through torch on NVBench's stream), and `finish_layer` fills the
rates and the best once they have run. Without it (cuda-bench not installed), CUDA events time each launch at
once (median of `reps` after `warmup`)."""

from __future__ import annotations

import contextlib
import warnings

import numpy as np

from .. import verify
from ..variants import REDUCED_PRECISIONS, Variant
from .nvbench import Job
from .roofline import conv_bytes, conv_flops, floor_ms, rates
from .sites import _dims
from .timing import stats, time_cuda_events


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


# cuDNN's arithmetic per layer key: "cudnn" float32 with TF32 off (the course's yardstick, always measured);
# "cudnn_tf32" float32 tensors with TF32 on (cuDNN's tensor-core float32 mode); "cudnn_fp16" half tensors (inputs
# rounded to FP16 once, before timing; cuDNN accumulates in float32), the arithmetic of an FP16 variant of ours.
CUDNN_MODES = {"cudnn": "fp32", "cudnn_tf32": "tf32", "cudnn_fp16": "fp16"}
REDUCED_CUDNN = ("cudnn_tf32", "cudnn_fp16")


def _cudnn_inputs(torch, site: dict, rng: np.random.Generator, inputs=None, mode: str = "fp32"):
    B, C, H, W, M, K = _dims(site)
    x, k = inputs if inputs is not None else (verify.random_nonzero(rng, (B, C, H, W)),
                                               verify.random_nonzero(rng, (M, C, K, K)))
    if not isinstance(x, torch.Tensor):  # else already on the device (bench_gpu_layer_resident)
        x, k = torch.from_numpy(x).cuda(), torch.from_numpy(k).cuda()
    if mode == "fp16":
        x, k = x.half(), k.half()
    return x, k


def _cudnn_ops(torch, x, k):
    F = torch.nn.functional
    return {"conv_ms": lambda: F.conv2d(x, k),
            "conv_tanh_pool_ms": lambda: F.max_pool2d(torch.tanh(F.conv2d(x, k)), 2, 2)}


@contextlib.contextmanager
def _cudnn_tf32(torch, on: bool):
    """cuDNN's TF32 switch set for the block, the caller's setting restored after."""
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = on
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = saved


def _cudnn_source(torch, mode: str = "fp32") -> str:
    how = {"fp32": "TF32 off", "tf32": "TF32 on", "fp16": "FP16 tensors (half x and k)"}[mode]
    return f"torch {torch.__version__} conv2d, cuDNN {torch.backends.cudnn.version()}, cudnn.benchmark on, {how}"


def cudnn_layer(torch, site: dict, rng: np.random.Generator, warmup: int, reps: int, *, mode: str = "fp32",
                inputs: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """cuDNN on the layer's shape, CUDA events: conv2d (and conv2d + tanh + max_pool2d where they follow),
    cudnn.benchmark on, in `mode` (CUDNN_MODES' values): "fp32" (TF32 off, true float32), "tf32" (TF32 on,
    cuDNN's tensor-core float32 mode) or "fp16" (half tensors). inputs: the (x, k) to use, else fresh ones."""
    x, k = _cudnn_inputs(torch, site, rng, inputs, mode)
    ops = _cudnn_ops(torch, x, k)
    out = {"source": _cudnn_source(torch, mode) + "; CUDA events"}
    with _cudnn_tf32(torch, mode == "tf32"), torch.inference_mode():
        out["conv_ms"] = stats(time_cuda_events(torch, ops["conv_ms"], warmup, reps))
        if site["tanh_pool_follows"]:
            out["conv_tanh_pool_ms"] = stats(time_cuda_events(torch, ops["conv_tanh_pool_ms"], warmup, reps))
    return out


def cudnn_kernels(torch, op) -> list[str]:
    """The CUDA kernels one call of `op` launches, in order, each name once (cuDNN's algorithm shows in them:
    fft2d_*, winograd, implicit-GEMM fprop, ...): the profiler's CUDA activity (Kineto, over CUPTI) around that one
    call; copies and memsets left out."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with warnings.catch_warnings():
        # newer torch warns that a profiling cycle keeps only its own events: this one cycle is all it needs
        warnings.filterwarnings("ignore", message=".*Profiler clears events", category=UserWarning)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            op()
            torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == DeviceType.CUDA
             and not e.name.startswith(("Memcpy", "Memset"))]
    return list(dict.fromkeys(names))


def cudnn_jobs(torch, site: dict, rng: np.random.Generator, out: dict, prefix: str, mode: str = "fp32") -> list[Job]:
    """cuDNN's rows as NVBench jobs: torch launches its ops on NVBench's stream (torch.cuda.ExternalStream), so
    that cuDNN is measured exactly as the variants are. cudnn.benchmark's algorithm search runs (and is waited
    for) before NVBench times anything. mode: as cudnn_layer's (TF32 is switched on around each launch only)."""
    out["source"] = _cudnn_source(torch, mode) + "; NVBench"
    seed = int(rng.integers(2**31))
    tf32 = mode == "tf32"

    def job(key: str) -> Job:
        def setup(nvbench_stream: int):
            x, k = _cudnn_inputs(torch, site, np.random.default_rng(seed), mode=mode)
            op = _cudnn_ops(torch, x, k)[key]
            streams: dict[int, object] = {}

            def launch(stream: int) -> None:
                s = streams.get(stream)
                if s is None:
                    s = streams[stream] = torch.cuda.ExternalStream(stream)
                with _cudnn_tf32(torch, tf32), torch.inference_mode(), torch.cuda.stream(s):
                    op()

            # cudnn.benchmark's search (it synchronises) and the allocator's first cudaMalloc for this stream
            # happen here, waited for, never inside a launch NVBench holds behind its blocking kernel.
            launch(nvbench_stream)
            torch.cuda.synchronize()
            return launch

        def done(s: dict) -> None:
            out[key] = s

        return Job(f"{prefix}/cudnn{'' if mode == 'fp32' else '-' + mode}/{key[:-3]}", setup, done)

    keys = ["conv_ms", *(["conv_tanh_pool_ms"] if site["tanh_pool_follows"] else [])]
    return [job(key) for key in keys]


def _row(v: Variant, fused_site: bool, shape) -> dict:
    """A variant's row of a layer, with why it is `skipped` where it cannot run the layer."""
    row = {"variant": v.name, "step": v.step, "summary": v.summary, "epilogue": v.epilogue,
           "precision": v.precision, "x_on_host": v.x_on_host}
    if v.pools and not fused_site:
        row["skipped"] = "the layer is not followed by tanh + max-pool 2/2"
    elif why := v.why_unsupported(tuple(shape)):
        row["skipped"] = f"unsupported: {why}"
    return row


def bench_gpu_layer(g, site: dict, variants: list[Variant], roof: dict | None, rng: np.random.Generator,
                    warmup: int, reps: int, torch=None, jobs: list[Job] | None = None, *, shared_inputs: bool = False,
                    cudnn_reduced: bool | None = None) -> dict:
    """Every variant on one layer: check, then time; plus cuDNN. Returns the layer's JSON entry (with `jobs`:
    complete once NVBench has run them and `finish_layer` has been called).

    roof: the roofline (None: no floor and no % of it). shared_inputs: one x and k for every variant and cuDNN,
    the reference computed once (a layer of gigabytes, where drawing inputs and the reference per variant would
    take longer than timing them); otherwise fresh inputs per variant. cudnn_reduced: also cuDNN in its reduced
    modes ("cudnn_tf32", "cudnn_fp16"; CUDNN_MODES); None: where one of `variants` rounds (reduced precision)."""
    if cudnn_reduced is None:
        cudnn_reduced = any(v.reduced_precision for v in variants)
    modes = [k for k in CUDNN_MODES if k == "cudnn" or cudnn_reduced]
    B, C, H, W, M, K = _dims(site)
    fused_site = site["tanh_pool_follows"]
    flops = conv_flops(B, C, H, W, M, K)
    bytes_conv = conv_bytes(B, C, H, W, M, K)
    bytes_fused = conv_bytes(B, C, H, W, M, K, pooled=True)
    layer = dict(site)
    layer.update({"flops": flops, "bytes": bytes_conv})
    if roof is not None:
        layer["floor_ms"] = floor_ms(flops, bytes_conv, roof["copy_GBps"], roof["fp32_GFLOPs"])
    if fused_site:
        layer["bytes_pooled"] = bytes_fused
        if roof is not None:
            layer["floor_tanh_pool_ms"] = floor_ms(flops, bytes_fused, roof["copy_GBps"], roof["fp32_GFLOPs"])
    prefix = f"{site['model']}/{site['layer']}"
    shared = None
    if shared_inputs:
        shared = (verify.random_nonzero_batch(rng, (B, C, H, W)), verify.random_nonzero(rng, (M, C, K, K)))
    references: dict = {}  # the reference per epilogue, for shared inputs
    rows = []
    for v in variants:
        name = v.name
        pooled = v.pools
        row = _row(v, fused_site, (B, C, H, W, M, K))
        rows.append(row)
        if "skipped" in row:
            continue
        if shared is not None:
            x, k = shared
        else:
            x = verify.random_nonzero(rng, (B, C, H, W))
            k = verify.random_nonzero(rng, (M, C, K, K))
        try:
            row["check"] = verify.check_output(g.conv(name, x, k), x, k, v.epilogue, *verify.tolerance(v.rtol, C, K),
                                               cache=references if shared is not None else None)
            if not row["check"]["passed"]:
                row["skipped"] = "FAILED the correctness check: not timed"
                continue
            timed = [("ms", False)] + ([("tanh_pool_ms", True)] if fused_site and not pooled else [])
            if jobs is None:
                for key, tp in timed:
                    row[key] = stats((g.time_conv_tanh_pool if tp else g.time_conv)(name, x, k, warmup, reps))
            else:
                for key, tp in timed:
                    what = "conv_tanh_pool" if tp else "conv"
                    jobs.append(_variant_job(g, f"{prefix}/{name}/{what}", name, x, k, tp, row, key, v.student))
            if v.reads_u8 and C == 1 and jobs is not None:
                _u8_row(g, v, site, rng, row, jobs, prefix)
        except (ValueError, RuntimeError) as e:  # pyconv._gpu.CudaError is a RuntimeError
            row["error"] = f"{type(e).__name__}: {e}"
            continue
    layer["variants"] = rows
    references.clear()
    if torch is not None:
        for key in modes:
            try:
                if jobs is None:
                    layer[key] = cudnn_layer(torch, site, rng, warmup, reps, mode=CUDNN_MODES[key], inputs=shared)
                else:
                    layer[key] = {}
                    jobs += cudnn_jobs(torch, site, rng, layer[key], prefix, CUDNN_MODES[key])
            except RuntimeError as e:
                layer[key] = {"error": f"{type(e).__name__}: {e}"}
            torch.cuda.empty_cache()  # give the next variant's buffers back the memory cuDNN's run cached
    else:
        for key in modes:
            layer[key] = {"error": "PyTorch with CUDA is not installed: no cuDNN column"}
    if jobs is None:
        finish_layer(layer)
    return layer


def _u8_row(g, v: Variant, site: dict, rng: np.random.Generator, row: dict, jobs: list[Job], prefix: str) -> None:
    """The variant's uint8 path on a first layer (what a network runs: its raw 0..255 images, never widened to
    float32 in memory): checked on random non-zero images against the reference, then timed by NVBench into
    row["u8_ms"]. The weights are scaled by 1/255 so that tanh does not saturate and hide an error."""
    B, C, H, W, M, K = _dims(site)
    x8 = rng.integers(1, 256, (B, C, H, W), dtype=np.uint8)
    k = (verify.random_nonzero(rng, (M, C, K, K)) / 255.0).astype(np.float32)
    check = verify.check_output(g.conv_u8(v.name, x8, k), x8.astype(np.float32), k, v.epilogue,
                                *verify.tolerance(v.rtol, C, K))
    row["u8_check"] = check
    if not check["passed"]:
        row["u8_skipped"] = "FAILED the correctness check on uint8 images: not timed"
        return
    fused_site = site["tanh_pool_follows"]
    tp = fused_site and not v.pools  # a plain conv on a fused layer: timed with the shared pool + tanh kernel
    jobs.append(_variant_job(g, f"{prefix}/{v.name}/u8", v.name, x8, k, tp, row, "u8_ms", v.student))


def _variant_job(g, job_name: str, name: str, x: np.ndarray, k: np.ndarray, tanh_pool: bool, row: dict,
                 key: str, sync: bool = False) -> Job:
    def setup(_stream: int):
        return g.StagedConv(name, x, k, tanh_pool).launch  # runs once and waits (StagedConv)

    def done(s: dict) -> None:
        if "error" in s:
            row.setdefault("error", s["error"])
        else:
            row[key] = s

    return Job(job_name, setup, done, sync)


def finish_layer(layer: dict) -> None:
    """Rates and % of roofline per timed row, then the layer's best (summarise_layer)."""
    for mode in CUDNN_MODES:
        cud = layer.get(mode, {})
        for key in ("conv_ms", "conv_tanh_pool_ms"):
            if "error" in cud.get(key, {}):
                cud.setdefault("error", cud.pop(key)["error"])
    for row in layer["variants"]:
        if "ms" not in row or "floor_ms" not in layer:  # no roofline (the sweep): no rates
            continue
        pooled = row["epilogue"] == "tanh-maxpool2"
        floor = layer["floor_tanh_pool_ms"] if pooled else layer["floor_ms"]
        row.update(rates(layer["flops"], layer["bytes_pooled"] if pooled else layer["bytes"], row["ms"]["median"],
                         floor))
        if "tanh_pool_ms" in row:
            row["tanh_pool_pct_roofline"] = layer["floor_tanh_pool_ms"] / row["tanh_pool_ms"]["median"] * 100.0
    summarise_layer(layer)


def reduced_yardstick(layer: dict, key: str) -> tuple[float | None, str]:
    """(ms, mode): cuDNN's faster reduced-precision time for `key` ("conv_ms" / "conv_tanh_pool_ms") among the
    modes measured ("tf32", "fp16"), else its float32 time and "fp32" (files from before the reduced modes were
    measured beside every rounding variant, or a run that measured none)."""
    have = [(layer[m][key]["median"], CUDNN_MODES[m]) for m in REDUCED_CUDNN
            if (layer.get(m) or {}).get(key, {}).get("median")]
    if have:
        return min(have)
    return (layer.get("cudnn") or {}).get(key, {}).get("median"), "fp32"


def summarise_layer(layer: dict) -> None:
    """Fill x_cudnn per variant and the layer's best: the fastest passing plain conv, the fastest passing conv +
    tanh + pool (a fused variant's launch or a plain variant followed by the shared kernels), and `best` (the
    smaller of the two: what the layer costs the network). A float32 variant's x_cudnn is against cuDNN FP32; a
    reduced-precision one's against reduced_yardstick, and its row says which (`cudnn_mode`)."""

    def yardstick(row: dict, key: str) -> tuple[float | None, str]:
        if row.get("precision") in REDUCED_PRECISIONS:
            return reduced_yardstick(layer, key)
        return (layer.get("cudnn") or {}).get(key, {}).get("median"), "fp32"

    best_conv = best_fused = None
    for row in layer["variants"]:
        if "ms" not in row:
            continue
        ms = row["ms"]["median"]
        c_conv, mode = yardstick(row, "conv_ms")
        c_fused, fused_mode = yardstick(row, "conv_tanh_pool_ms")
        if row["epilogue"] == "tanh-maxpool2":
            c_conv, mode = c_fused, fused_mode
        if c_conv and mode != "fp32":
            row["cudnn_mode"] = mode
        if row["epilogue"] == "tanh-maxpool2":
            if c_fused:
                row["x_cudnn"] = c_fused / ms
            if best_fused is None or ms < best_fused["ms"]:
                best_fused = {"variant": row["variant"], "ms": ms, "tanh_pool": True, "_vs": (c_fused, fused_mode)}
        else:
            if c_conv:
                row["x_cudnn"] = c_conv / ms
            if best_conv is None or ms < best_conv["ms"]:
                best_conv = {"variant": row["variant"], "ms": ms, "tanh_pool": False, "_vs": (c_conv, mode)}
            if "tanh_pool_ms" in row:
                tp = row["tanh_pool_ms"]["median"]
                if c_fused:
                    row["tanh_pool_x_cudnn"] = c_fused / tp
                if best_fused is None or tp < best_fused["ms"]:
                    best_fused = {"variant": row["variant"] + " + tanh + pool", "ms": tp, "tanh_pool": True,
                                  "_vs": (c_fused, fused_mode)}
    for best in (best_conv, best_fused):
        if best is None:
            continue
        vs, vs_mode = best.pop("_vs")
        if vs:
            best["x_cudnn"] = vs / best["ms"]
            if vs_mode != "fp32":
                best["cudnn_mode"] = vs_mode
    layer["best_conv"] = best_conv
    layer["best_conv_tanh_pool"] = best_fused
    cands = [b for b in (best_conv, best_fused) if b]
    layer["best"] = dict(min(cands, key=lambda b: b["ms"])) if cands else None


def random_nonzero_device(torch, shape, seed: int, chunk_images: int = 512):
    """random_nonzero's distribution (uniform in [0.05, 1] with a random sign), drawn on the GPU: a layer of
    gigabytes is ready in milliseconds instead of the seconds the host takes to draw and upload it."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    x = torch.empty(tuple(shape), dtype=torch.float32, device="cuda")
    for i in range(0, x.shape[0], chunk_images):
        part = x[i:i + chunk_images]
        part.uniform_(0.05, 1.0, generator=gen)
        part[torch.rand(part.shape, generator=gen, device="cuda") < 0.5] *= -1.0
    return x


def bench_gpu_layer_resident(g, site: dict, variants: list[Variant], rng: np.random.Generator, warmup: int,
                             reps: int, torch, *, cudnn_reduced: bool | None = None,
                             cudnn_algorithm: bool = False) -> dict:
    """bench_gpu_layer for layers of gigabytes (the sweep): one x and k drawn on the device and shared by every
    variant and cuDNN, each variant launched on them in place (pyconv._gpu.launch_on_device), so nothing crosses
    the PCIe bus but the checked images. The check is the layer bench's: y poisoned with NaN, then the first and
    last verify.CHECK_IMAGES images against the reference (only those images are copied back). Timing: CUDA
    events, median of `reps` after `warmup`. Variants that read x from host memory are not run here. Returns the
    same JSON entry as bench_gpu_layer (without the roofline). cudnn_reduced: as bench_gpu_layer's (cuDNN FP16 runs
    on a half copy of the same x and k). cudnn_algorithm: also the kernels cuDNN FP32's conv launches, after it is
    timed (layer["cudnn"]["kernels"]; cudnn_kernels), or why none were recorded (["kernels_error"])."""
    if cudnn_reduced is None:
        cudnn_reduced = any(v.reduced_precision for v in variants)
    B, C, H, W, M, K = _dims(site)
    fused_site = site["tanh_pool_follows"]
    Ho, Wo = H - K + 1, W - K + 1
    layer = dict(site)
    layer.update({"flops": conv_flops(B, C, H, W, M, K), "bytes": conv_bytes(B, C, H, W, M, K)})
    if fused_site:
        layer["bytes_pooled"] = conv_bytes(B, C, H, W, M, K, pooled=True)
    x = random_nonzero_device(torch, (B, C, H, W), int(rng.integers(2**31)))
    k_host = verify.random_nonzero(rng, (M, C, K, K))
    k = torch.from_numpy(k_host).cuda()
    idx = np.concatenate([np.arange(s.start, s.stop) for s in verify.check_slices(B)])
    idx_device = torch.from_numpy(idx).cuda()  # the checked images, gathered on the device
    x_checked = x[idx_device].cpu().numpy()
    y = torch.empty(B * M * Ho * Wo, dtype=torch.float32, device="cuda")
    pooled_shape = (B, M, Ho // 2, Wo // 2)
    tmp = torch.empty(pooled_shape, dtype=torch.float32, device="cuda") if fused_site else None
    references: dict = {}
    shape = [B, C, H, W, M, K]

    def launcher(name: str, tanh_pool: bool):
        args = (name, x.data_ptr(), k.data_ptr(), y.data_ptr(), tmp.data_ptr() if tmp is not None else 0, shape,
                tanh_pool)
        return lambda: g.launch_on_device(*args, stream=torch.cuda.current_stream().cuda_stream)

    rows = []
    for v in variants:
        row = _row(v, fused_site, (B, C, H, W, M, K))
        rows.append(row)
        if "skipped" not in row and v.x_on_host:
            row["skipped"] = "reads x from host memory: not run on device-resident inputs"
        if "skipped" in row:
            continue
        try:
            out_shape = pooled_shape if v.pools else (B, M, Ho, Wo)
            y.fill_(float("nan"))  # poisoned: an element the kernel forgets fails the check
            launcher(v.name, False)()
            torch.cuda.synchronize()
            y_checked = y[: int(np.prod(out_shape))].view(out_shape)[idx_device].cpu().numpy()
            check = verify.check_output(y_checked, x_checked, k_host, v.epilogue, *verify.tolerance(v.rtol, C, K),
                                        cache=references)
            if "where" in check:
                check["where"] = [int(idx[check["where"][0]]), *check["where"][1:]]
            check["images_checked"] = int(len(idx))
            row["check"] = check
            if not check["passed"]:
                row["skipped"] = "FAILED the correctness check: not timed"
                continue
            row["ms"] = stats(time_cuda_events(torch, launcher(v.name, False), warmup, reps))
            if fused_site and not v.pools:
                row["tanh_pool_ms"] = stats(time_cuda_events(torch, launcher(v.name, True), warmup, reps))
        except (ValueError, RuntimeError) as e:  # pyconv._gpu.CudaError is a RuntimeError
            row["error"] = f"{type(e).__name__}: {e}"
    layer["variants"] = rows
    y = tmp = None  # the outputs' memory goes back before cuDNN runs (the launchers are not called again)
    torch.cuda.empty_cache()
    for key in (m for m in CUDNN_MODES if m == "cudnn" or cudnn_reduced):
        try:
            layer[key] = cudnn_layer(torch, site, rng, warmup, reps, mode=CUDNN_MODES[key], inputs=(x, k))
        except RuntimeError as e:
            layer[key] = {"error": f"{type(e).__name__}: {e}"}
        if key == "cudnn" and cudnn_algorithm and "error" not in layer[key]:
            try:  # the algorithm cudnn.benchmark chose while it was timed (TF32 off, as timed)
                with _cudnn_tf32(torch, False), torch.inference_mode():
                    layer[key]["kernels"] = cudnn_kernels(torch, _cudnn_ops(torch, x, k)["conv_ms"])
            except (RuntimeError, ImportError, AttributeError) as e:
                layer[key]["kernels_error"] = f"{type(e).__name__}: {e}"
        torch.cuda.empty_cache()
    x = k = None
    torch.cuda.empty_cache()
    finish_layer(layer)
    return layer
