"""Per-shape tuning of the tensor-core kernel (ladder step 11, gpu-autotuned) and the final variant table.

Like cuDNN's benchmark mode: `tune` times every configuration of the tensor-core kernel family on each layer
shape, keeps the fastest, and writes the winners to results/tuning/<gpu-slug>.json; `load_cache` applies such a
file to pyconv._gpu before a run (shapes it does not name use the kernel's default configuration).

`choose_impls_final` picks the GPU variant per conv layer for the final milestone: the fastest correct variant
measured for that layer shape on this GPU by `invoke bench` (the newest results/bench-*.json of this GPU), else
the fixed FINAL_TABLE, else the first fallback that supports the shape."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .core.errors import PyconvError
from .core.fileio import atomic_path
from .core.paths import RESULTS

TUNING_DIR = RESULTS / "tuning"
FORMAT = "pyconv-tuning"
VERSION = 1

Shape = tuple[int, int, int, int, int, int]  # B, C, H, W, M, K


def _gpu():
    try:
        from . import _gpu
    except ImportError as e:
        raise PyconvError(f"the CUDA module is not built ({e}); run `invoke build` on a machine with nvcc") from None
    return _gpu


def gpu_slug(gpu_name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3' (the cache file's name)."""
    slug = re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")
    if not slug:
        raise PyconvError(f"cannot make a file name from GPU name {gpu_name!r}")
    return slug


def cache_path(gpu_name: str) -> Path:
    return TUNING_DIR / f"{gpu_slug(gpu_name)}.json"


def _check_shape(shape: Sequence[int]) -> Shape:
    if len(shape) != 6 or any(int(v) != v or v < 1 for v in shape):
        raise PyconvError(f"a layer shape is six positive integers (B, C, H, W, M, K), got {tuple(shape)}")
    B, C, H, W, M, K = (int(v) for v in shape)
    if K > H or K > W:
        raise PyconvError(f"kernel {K} is larger than the {H}x{W} input in shape {tuple(shape)}")
    return B, C, H, W, M, K


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise PyconvError(f"tuning cache {path} is unreadable: {e}") from None
    if data.get("format") != FORMAT or data.get("version") != VERSION or not isinstance(data.get("entries"), list):
        raise PyconvError(f"tuning cache {path} is not a {FORMAT} v{VERSION} file")
    return data


def tune(shapes: Iterable[Sequence[int]], gpu_name: str, reps: int = 20, seed: int = 0) -> dict:
    """Time every configuration on each shape (random inputs in [-1, 1]), apply the winners to pyconv._gpu and
    merge them into the cache file of `gpu_name`. Returns the cache as written."""
    g = _gpu()
    configs = list(g.autotune_configs())
    path = cache_path(gpu_name)
    old = {tuple(e["shape"]): e for e in _read(path)["entries"]} if path.exists() else {}
    rng = np.random.default_rng(seed)
    for shape in shapes:
        B, C, H, W, M, K = _check_shape(shape)
        x = rng.uniform(-1, 1, (B, C, H, W)).astype(np.float32)
        k = rng.uniform(-1, 1, (M, C, K, K)).astype(np.float32)
        timings: dict[str, float] = {}
        for i, name in enumerate(configs):
            try:
                timings[name] = float(g.autotune_time_config(i, x, k, reps))
            except ValueError:  # this configuration cannot run the shape (e.g. shared memory): not a candidate
                continue
        if not timings:
            raise PyconvError(f"no tensor-core configuration supports shape {(B, C, H, W, M, K)}")
        best = min(timings, key=timings.__getitem__)
        g.autotune_set(B, C, H, W, M, K, configs.index(best))
        old[(B, C, H, W, M, K)] = {"shape": [B, C, H, W, M, K], "config": best, "ms": timings[best],
                                   "timings_ms": timings}
    data = {"format": FORMAT, "version": VERSION, "gpu": gpu_name, "reps": reps,
            "entries": [old[s] for s in sorted(old)]}
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=1) + "\n")
    return data


def load_cache(gpu_name: str) -> int:
    """Apply the cache of `gpu_name` (if any) to pyconv._gpu; returns how many shapes it set. Entries naming a
    configuration this build does not have are skipped (the kernel family changed since they were measured)."""
    path = cache_path(gpu_name)
    if not path.exists():
        return 0
    data = _read(path)
    g = _gpu()
    configs = list(g.autotune_configs())
    applied = 0
    for e in data["entries"]:
        name = e.get("config")
        if name not in configs:
            continue
        B, C, H, W, M, K = _check_shape(e.get("shape", ()))
        g.autotune_set(B, C, H, W, M, K, configs.index(name))
        applied += 1
    return applied


@dataclass(frozen=True)
class ConvSite:
    """One conv layer as the final milestone runs it: its shape and whether tanh + maxpool 2/2 follow it."""

    B: int
    C: int
    H: int
    W: int
    M: int
    K: int
    tanh_pool_follows: bool = False


# Used where no bench result for this GPU covers a layer: the fastest variant per course layer measured on an
# NVIDIA H200 at batch 10000 (results/bench-nvidia-h200-2026-11-2[23].json). Key: (C, H, W, M, K, fused).
FINAL_TABLE: dict[tuple[int, int, int, int, int, bool], str] = {
    (1, 48, 48, 6, 5, True): "gpu-fused-tanh-pool",  # sp19 conv1: 0.242 ms with tanh+pool; cuDNN+tanh+pool 2.72
    (1, 64, 64, 6, 5, True): "gpu-fused-tanh-pool",  # sp18 conv1
    (1, 72, 72, 12, 7, True): "gpu-fused-tanh-pool",  # fa18 conv1
    (1, 28, 28, 50, 5, True): "gpu-fused-tanh-pool",  # fa17: 0.601 ms with tanh+pool (step 6 + tanh+pool 1.84)
    (6, 22, 22, 16, 5, False): "gpu-tensor-core-tf32",  # sp19 conv2: 0.294 ms (step 6 0.593, cuDNN 1.03)
    (6, 30, 30, 16, 5, False): "gpu-tensor-core-tf32",  # sp18 conv2
    (12, 33, 33, 24, 7, False): "gpu-specialised",  # fa18 conv2: 6.41 ms (step 13 8.41: one block per SM)
}
# Variants the final milestone never picks, with the measurement that excluded them. Reduced precision is used
# only where the end-to-end Correctness stays the same, and `invoke bench --end-to-end` counts the labels that
# differ from PyTorch's float32 network for every model it runs.
FINAL_EXCLUDED: dict[str, str] = {
    "gpu-tensor-core-fused": "TF32 conv1 changed one fa17 label (ece408-high: 1 of 10000 images differs from PyTorch's "
                             "float32 prediction, Correctness 0.8973 -> 0.8974; H200, 2026-11-23)",
}
# Tried in order when the table's choice (or the rule for other layers) does not support a shape.
FALLBACKS = ("gpu-specialised", "gpu-register-tiled", "gpu-autotuned", "gpu-channel-parallel", "gpu-baseline")


def reduced_precision() -> set[str]:
    """The registry variants that round on purpose (a tolerance above the default 1e-4: TF32 tensor cores)."""
    return {v["name"] for v in _gpu().variants() if v["tolerance"] > 1e-4}


def precision_verdict(model_digest: str, gpu_name: str, results: Path | None = None) -> dict | None:
    """The newest end-to-end bench entry (results/bench-e2e-*.json) for these exact weights on this GPU: it says
    whether the reduced-precision configuration left every label equal to PyTorch's float32 network
    ("reduced_precision_ok"), with the bench's date added ("bench_date"). None when no run on this GPU covered
    the model."""
    best = None
    for p in (results or RESULTS).glob("bench-e2e-*.json"):
        try:
            doc = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if (doc.get("gpu") or {}).get("name") != gpu_name:
            continue
        for e in doc.get("end_to_end", []):
            if e.get("model_digest") == model_digest and "reduced_precision_ok" in e:
                if best is None or doc.get("date", "") > best[0]:
                    best = (doc.get("date", ""), e)
    return dict(best[1], bench_date=best[0]) if best else None


def bench_winners(gpu_name: str, results: Path = RESULTS, exclude: Iterable[str] = ()) -> dict[
        tuple[int, int, int, int, int, bool], str]:
    """From the newest `invoke bench` JSON measured on this GPU: per layer shape, the fastest variant whose
    correctness check passed. A layer that tanh + maxpool 2/2 follow is compared as conv+tanh+pool (the fused
    variant alone against each other variant plus the separate tanh and pool kernels); variants that read their
    input from host memory are left out (the network keeps activations on the device), and so are the
    FINAL_EXCLUDED ones."""
    files = []
    for p in results.glob("bench-*.json"):
        try:
            doc = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if (doc.get("gpu") or {}).get("name") == gpu_name and doc.get("layers"):
            files.append((doc.get("date", ""), doc))
    if not files:
        return {}
    doc = max(files, key=lambda f: f[0])[1]
    winners = {}
    for layer in doc["layers"]:
        fused = bool(layer.get("tanh_pool_follows"))
        best, best_ms = None, float("inf")
        for v in layer.get("variants", []):
            if (not v.get("check", {}).get("passed") or v.get("x_on_host") or v["variant"] in FINAL_EXCLUDED
                    or v["variant"] in exclude):
                continue
            pools = v.get("epilogue") == "tanh-maxpool2"
            if pools and not fused:
                continue
            ms = (v.get("ms") if pools or not fused else v.get("tanh_pool_ms")) or {}
            if ms.get("median", float("inf")) < best_ms:
                best, best_ms = v["variant"], ms["median"]
        if best:
            winners[(layer["C"], layer["H"], layer["W"], layer["M"], layer["K"], fused)] = best
    return winners


def choose_impls_final(model_conv_shapes: Iterable[ConvSite | Sequence], exact: bool = False) -> list[str]:
    """The GPU variant for each conv layer: `model_conv_shapes` holds ConvSite or (B, C, H, W, M, K,
    tanh_pool_follows) per layer. A layer followed by tanh + maxpool 2/2 gets the fused variant; the others the
    autotuned tensor-core kernel; a variant that refuses the shape is replaced by the first FALLBACKS entry that
    accepts it (asked through pyconv._gpu.why_unsupported), e.g. a fused layer whose output is under 2x2.
    exact: only variants that compute in float32 (no TF32 rounding)."""
    g = _gpu()
    rounding = reduced_precision() if exact else set()
    winners = bench_winners(g.device_info()["name"], exclude=rounding) if g.available() else {}
    out = []
    for site in model_conv_shapes:
        s = site if isinstance(site, ConvSite) else ConvSite(*site)
        B, C, H, W, M, K = _check_shape((s.B, s.C, s.H, s.W, s.M, s.K))
        fused = bool(s.tanh_pool_follows)
        key = (C, H, W, M, K, fused)
        first = winners.get(key) or FINAL_TABLE.get(key, "gpu-fused-tanh-pool" if fused else "gpu-specialised")
        if first in rounding:
            first = "gpu-fused-tanh-pool" if fused else "gpu-specialised"
        # A fallback for a fused layer does not pool: the engine reads each variant's epilogue
        # (pyconv._gpu.variants()) and applies tanh + pooling itself when the variant does not.
        candidates = [first, *FALLBACKS]
        reasons = []
        for name in candidates:
            why = g.why_unsupported(name, B, C, H, W, M, K)
            if not why:
                out.append(name)
                break
            reasons.append(why)
        else:
            raise PyconvError(f"no GPU variant supports conv layer {s}: " + "; ".join(reasons))
    return out
