"""Per-shape tuning of the tunable tensor-core kernel (the variant whose descriptor says `tunable`).

Like cuDNN's benchmark mode: `tune` times every configuration of the tensor-core kernel family on each layer
shape, keeps the fastest, and writes the winners to results/tuning/<gpu-slug>.json; `load_cache` applies such a
file to pyconv._gpu before a run (shapes it does not name use the kernel's default configuration)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from . import native
from .core import paths
from .core.errors import PyconvError
from .core.fileio import atomic_path, read_json

FORMAT = "pyconv-tuning"
VERSION = 1

Shape = tuple[int, int, int, int, int, int]  # B, C, H, W, M, K


def _gpu():
    return native.gpu(device=False)


def cache_path(gpu_name: str) -> Path:
    return paths.TUNING / f"{paths.slug(gpu_name)}.json"


def _check_shape(shape: Sequence[int]) -> Shape:
    if len(shape) != 6 or any(int(v) != v or v < 1 for v in shape):
        raise PyconvError(f"a layer shape is six positive integers (B, C, H, W, M, K), got {tuple(shape)}")
    B, C, H, W, M, K = (int(v) for v in shape)
    if K > H or K > W:
        raise PyconvError(f"kernel {K} is larger than the {H}x{W} input in shape {tuple(shape)}")
    return B, C, H, W, M, K


MAX_FILE_BYTES = 64 << 20  # a tuning cache is kilobytes


def _read(path: Path) -> dict:
    data = read_json(path, MAX_FILE_BYTES, "tuning cache")
    if (not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION
            or not isinstance(data.get("entries"), list) or not all(isinstance(e, dict) for e in data["entries"])):
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
        if not isinstance(name, str) or name not in configs:
            continue
        shape = e.get("shape", ())
        if not isinstance(shape, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in shape):
            raise PyconvError(f"tuning cache {path}: entry shape {str(shape)[:60]} is not six integers")
        B, C, H, W, M, K = _check_shape(shape)
        g.autotune_set(B, C, H, W, M, K, configs.index(name))
        applied += 1
    return applied
