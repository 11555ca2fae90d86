"""Every GPU variant on one conv layer: checked against the reference (pyconv.verify), then timed (CUDA events,
median of `reps` after `warmup`); conv + tanh + pool where they follow; cuDNN (through PyTorch) on the same
shape in the same run."""

from __future__ import annotations

import numpy as np

from .. import verify
from ..variants import Variant
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


def cudnn_layer(torch, site: dict, rng: np.random.Generator, warmup: int, reps: int, *, tf32: bool = False,
                inputs: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """cuDNN on the layer's shape: conv2d (and conv2d + tanh + max_pool2d where they follow), cudnn.benchmark on;
    TF32 off (true float32), or on with tf32=True (cuDNN's tensor-core float32 mode: what a TF32 variant of ours
    compares with). inputs: the (x, k) to use, else fresh ones."""
    B, C, H, W, M, K = _dims(site)
    F = torch.nn.functional
    x, k = inputs if inputs is not None else (verify.random_nonzero(rng, (B, C, H, W)),
                                               verify.random_nonzero(rng, (M, C, K, K)))
    x, k = torch.from_numpy(x).cuda(), torch.from_numpy(k).cuda()
    out = {"source": f"torch {torch.__version__} conv2d, cuDNN {torch.backends.cudnn.version()}, "
                     f"cudnn.benchmark on, TF32 {'on' if tf32 else 'off'}"}
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = tf32
    try:
        with torch.inference_mode():
            out["conv_ms"] = stats(time_cuda_events(torch, lambda: F.conv2d(x, k), warmup, reps))
            if site["tanh_pool_follows"]:
                out["conv_tanh_pool_ms"] = stats(time_cuda_events(
                    torch, lambda: F.max_pool2d(torch.tanh(F.conv2d(x, k)), 2, 2), warmup, reps))
    finally:
        torch.backends.cudnn.allow_tf32 = saved
    return out


def bench_gpu_layer(g, site: dict, variants: list[Variant], roof: dict | None, rng: np.random.Generator,
                    warmup: int, reps: int, torch=None, *, shared_inputs: bool = False,
                    cudnn_tf32: bool = False) -> dict:
    """Every variant on one layer: check, then time; plus cuDNN. Returns the layer's JSON entry.

    roof: the roofline (None: no floor and no % of it). shared_inputs: one x and k for every variant and cuDNN,
    the reference computed once (a layer of gigabytes, where drawing inputs and the reference per variant would
    take longer than timing them); otherwise fresh inputs per variant. cudnn_tf32: also cuDNN with TF32 on
    ("cudnn_tf32")."""
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
    shared = None
    if shared_inputs:
        shared = (verify.random_nonzero_batch(rng, (B, C, H, W)), verify.random_nonzero(rng, (M, C, K, K)))
    references: dict = {}  # the reference per epilogue, for shared inputs
    rows = []
    for v in variants:
        name = v.name
        pooled = v.pools
        row = {"variant": name, "step": v.step, "summary": v.summary, "epilogue": v.epilogue,
               "x_on_host": v.x_on_host}
        rows.append(row)
        if pooled and not fused_site:
            row["skipped"] = "the layer is not followed by tanh + max-pool 2/2"
            continue
        why = v.why_unsupported((B, C, H, W, M, K))
        if why:
            row["skipped"] = f"unsupported: {why}"
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
            row["ms"] = stats(g.time_conv(name, x, k, warmup, reps))
            if fused_site and not pooled:
                row["tanh_pool_ms"] = stats(g.time_conv_tanh_pool(name, x, k, warmup, reps))
        except (ValueError, RuntimeError) as e:  # pyconv._gpu.CudaError is a RuntimeError
            row["error"] = f"{type(e).__name__}: {e}"
            continue
        if roof is None:
            continue
        floor = layer["floor_tanh_pool_ms"] if pooled else layer["floor_ms"]
        row.update(rates(flops, bytes_fused if pooled else bytes_conv, row["ms"]["median"], floor))
        if "tanh_pool_ms" in row:
            row["tanh_pool_pct_roofline"] = layer["floor_tanh_pool_ms"] / row["tanh_pool_ms"]["median"] * 100.0
    layer["variants"] = rows
    references.clear()
    if torch is not None:
        for key, tf32 in (("cudnn", False), *((("cudnn_tf32", True),) if cudnn_tf32 else ())):
            try:
                layer[key] = cudnn_layer(torch, site, rng, warmup, reps, tf32=tf32, inputs=shared)
            except RuntimeError as e:
                layer[key] = {"error": f"{type(e).__name__}: {e}"}
            torch.cuda.empty_cache()  # give the next variant's buffers back the memory cuDNN's run cached
    else:
        layer["cudnn"] = {"error": "PyTorch with CUDA is not installed: no cuDNN column"}
        if cudnn_tf32:
            layer["cudnn_tf32"] = dict(layer["cudnn"])
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
