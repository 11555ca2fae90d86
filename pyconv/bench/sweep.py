"""`invoke bench --sweep`: our best correct variant against cuDNN on layer shapes nobody tuned for.

SHAPES shapes are drawn with a fixed seed (C in 1..32, M in 4..64, K in 3/5/7, H = W in 12..96; valid conv,
stride 1, H - K + 1 >= 2 so that max-pool 2/2 has a window). Each shape is measured once by the layer bench
(pyconv.bench.gpu_layers.bench_gpu_layer, as a layer followed by tanh + max-pool 2/2, one x and k shared by every
variant): every variant that takes it is checked against the reference, then timed; cuDNN is timed in float32
with TF32 off, with TF32 on, and in FP16 (half tensors) in the same run, and the kernels cuDNN FP32's conv launched
are recorded with the algorithm family they show (cudnn_algorithm: FFT, Winograd, implicit GEMM, ...). That gives
each shape two rows:
- conv alone: the plain variants' launches against conv2d;
- conv + tanh + max-pool 2/2: a fusing variant's launch, or a plain variant followed by the shared max-pool +
  tanh kernel, against conv2d + tanh + max_pool2d.
Precision is compared like for like: the best variant that computes in float32 against cuDNN FP32, and the best
of all (a reduced-precision variant of ours, TF32 or FP16, included) against the faster of cuDNN TF32 and cuDNN
FP16, whichever our best rounds to: a TF32 variant is never let off with cuDNN's slower reduced mode, and an FP16
one never compared with cuDNN TF32 only. The JSON keeps the reduced comparison's first names (cudnn_tf32_ms beside
cudnn_fp16_ms, x_cudnn_tf32 with the mode it was against in x_cudnn_reduced_mode; files from before cuDNN FP16 was
measured hold TF32 only). x cuDNN = cuDNN ms / our ms (> 1: we are faster);
the summary gives the worst row and the geometric mean per comparison, and pyconv.bench.goals holds them to the
goals."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from ..variants import Variant
from . import gpu_layers
from .schema import shape_label, worst_and_geomean

SHAPES = 40
SEED = 15  # fixed: every run measures the same shapes
RANGES = {"C": (1, 32), "M": (4, 64), "K": (3, 5, 7), "HW": (12, 96)}
# Fewer repetitions than the layer bench's (5 + 20): 40 shapes of up to 12 GB inputs times every variant must fit
# in minutes; the median of 5 after 2 warm-ups is what a ratio to cuDNN needs.
WARMUP = 2
REPS = 5
COMPARISONS = {"fp32": "best float32 variant x cuDNN FP32",
               "tf32": "best variant (reduced precision allowed) x cuDNN's faster of TF32 and FP16"}


def draw_shapes(n: int = SHAPES, seed: int = SEED) -> list[tuple[int, int, int, int, int]]:
    """n distinct (C, H, W, M, K), drawn with `seed` from RANGES (H = W, H - K + 1 >= 2)."""
    rng = np.random.default_rng(seed)
    shapes: list[tuple[int, int, int, int, int]] = []
    while len(shapes) < n:
        c = int(rng.integers(RANGES["C"][0], RANGES["C"][1] + 1))
        m = int(rng.integers(RANGES["M"][0], RANGES["M"][1] + 1))
        k = int(rng.choice(RANGES["K"]))
        h = int(rng.integers(RANGES["HW"][0], RANGES["HW"][1] + 1))
        if h - k + 1 >= 2 and (c, h, h, m, k) not in shapes:
            shapes.append((c, h, h, m, k))
    return shapes


def sites(shapes, batch: int) -> list[dict]:
    """The shapes as layer-bench sites (each followed by tanh + max-pool 2/2, so that both rows are measured)."""
    return [{"model": "sweep", "arch": "", "layer": f"s{i:02d}", "B": batch, "C": c, "H": h, "W": w, "M": m, "K": k,
             "tanh_pool_follows": True} for i, (c, h, w, m, k) in enumerate(shapes)]


# cuDNN's algorithm from the names of the kernels its conv launched (pyconv.bench.gpu_layers.cudnn_kernels), the
# first family that any name shows: an FFT or Winograd convolution does fewer multiplies than the direct one, so
# its time is not bounded by the FP32 FMA rate (results/bench-nvidia-h200-2026-11-25-sweep-step29-group-loop.json:
# cuDNN FP32 on s08 at 65.8 TFLOP/s counted as direct convolution, the FFMA probe's 65.0).
ALGORITHMS = (("FFT", ("fft",)), ("Winograd", ("winograd",)), ("direct", ("direct",)),
              ("implicit GEMM", ("implicit", "fprop")), ("GEMM", ("gemm",)))


def cudnn_algorithm(kernels: list[str] | None) -> str | None:
    """The algorithm family the kernel names show (ALGORITHMS), "other" for names none matches, None for none."""
    if not kernels:
        return None
    names = " ".join(kernels).lower()
    return next((family for family, marks in ALGORITHMS if any(m in names for m in marks)), "other")


def _median(stats: dict | None) -> float | None:
    return stats.get("median") if isinstance(stats, dict) else None


def _entry(row: dict, precision: str, pooled_row: bool) -> dict:
    """One variant's cell in a sweep row from its layer-bench row."""
    out = {"variant": row["variant"], "precision": precision}
    fuses = row["epilogue"] == "tanh-maxpool2"
    if fuses and not pooled_row:
        out["skipped"] = "fuses tanh + max-pool 2/2: in the row with them"
    elif "error" in row:
        out["error"] = row["error"]
    elif row.get("check") and not row["check"]["passed"]:
        out["failed"] = row["check"].get("why") or "failed the correctness check"
    elif "skipped" in row:
        out["skipped"] = row["skipped"]
    else:
        ms = _median(row.get("ms") if fuses or not pooled_row else row.get("tanh_pool_ms"))
        if ms is None:
            out["skipped"] = "not timed"
        else:
            out["ms"] = ms
    return out


def _best(entries: list[dict], fp32_only: bool) -> dict | None:
    timed = [e for e in entries if "ms" in e and (e["precision"] == "fp32" or not fp32_only)]
    if not timed:
        return None
    b = min(timed, key=lambda e: e["ms"])
    return {"variant": b["variant"], "ms": b["ms"], "precision": b["precision"]}


def rows_of(layer: dict, precisions: dict[str, str]) -> list[dict]:
    """A measured shape's two rows (conv alone; conv + tanh + pool). precisions: variant name -> its precision."""
    out = []
    for pooled in (False, True):
        key = "conv_tanh_pool_ms" if pooled else "conv_ms"
        entries = [_entry(r, precisions.get(r["variant"], "fp32"), pooled) for r in layer["variants"]]
        row = {"shape": layer["layer"], **{d: layer[d] for d in ("B", "C", "H", "W", "M", "K")}, "tanh_pool": pooled,
               "variants": entries, "best": _best(entries, False), "best_fp32": _best(entries, True),
               "cudnn_fp32_ms": _median(layer.get("cudnn", {}).get(key)),
               "cudnn_tf32_ms": _median(layer.get("cudnn_tf32", {}).get(key)),
               "cudnn_fp16_ms": _median(layer.get("cudnn_fp16", {}).get(key))}
        fp32 = layer.get("cudnn", {})
        if fp32.get("kernels") is not None:
            row["cudnn_fp32_kernels"] = fp32["kernels"]
            row["cudnn_fp32_algorithm"] = cudnn_algorithm(fp32["kernels"])
        if fp32.get("kernels_error"):
            row["cudnn_fp32_kernels_error"] = fp32["kernels_error"]
        errors = [layer[c]["error"] for c in gpu_layers.CUDNN_MODES if layer.get(c, {}).get("error")]
        if errors:
            row["cudnn_error"] = "; ".join(dict.fromkeys(errors))
        if row["best_fp32"] and row["cudnn_fp32_ms"]:
            row["x_cudnn_fp32"] = row["cudnn_fp32_ms"] / row["best_fp32"]["ms"]
        reduced = [(row[f"cudnn_{m}_ms"], m) for m in ("tf32", "fp16") if row[f"cudnn_{m}_ms"]]
        if row["best"] and reduced:
            ms, mode = min(reduced)
            row["x_cudnn_tf32"], row["x_cudnn_reduced_mode"] = ms / row["best"]["ms"], mode
        out.append(row)
    return out


def row_label(row: dict) -> str:
    return shape_label(row["shape"], row["C"], row["H"], row["W"], row["M"], row["K"], row["tanh_pool"])


def summarise(rows: list[dict]) -> list[dict]:
    """Per comparison: the worst ratio (and its row) and the geometric mean over the rows that have both times."""
    out = []
    for comp, title in COMPARISONS.items():
        have = [(r[f"x_cudnn_{comp}"], r) for r in rows if r.get(f"x_cudnn_{comp}")]
        s = {"comparison": comp, "title": title, "rows": len(have), "missing": len(rows) - len(have)}
        if have:
            worst, wrow, geomean = worst_and_geomean(have)
            s.update(worst=worst, worst_row=row_label(wrow), geomean=geomean)
        out.append(s)
    return out


def run_sweep(g, chosen: list[Variant], roof: dict | None, batch: int, warmup: int, reps: int, torch,
              echo: Callable[[str], None] = print, shapes=None, seed: int = SEED) -> dict:
    """Measure every drawn shape (progress to `echo`); returns the JSON's "sweep" section."""
    shapes = draw_shapes(seed=seed) if shapes is None else shapes
    precisions = {v.name: v.precision for v in chosen}
    rng = np.random.default_rng(seed)
    rows: list[dict] = []
    sources = ""
    start = time.monotonic()
    todo = sites(shapes, batch)
    for i, site in enumerate(todo):
        elapsed = time.monotonic() - start
        eta = f", about {elapsed / i * (len(todo) - i):.0f} s to go" if i else ""
        echo(f"sweep {i + 1}/{len(todo)}: C={site['C']} {site['H']}x{site['W']} M={site['M']} K={site['K']} "
             f"at batch {batch} ({elapsed:.0f} s{eta})")
        if torch is not None and hasattr(g, "launch_on_device"):  # inputs drawn and kept on the device
            layer = gpu_layers.bench_gpu_layer_resident(g, site, chosen, rng, warmup, reps, torch,
                                                        cudnn_reduced=True, cudnn_algorithm=True)
        else:
            layer = gpu_layers.bench_gpu_layer(g, site, chosen, roof, rng, warmup, reps, torch, shared_inputs=True,
                                               cudnn_reduced=True)
        sources = sources or "; ".join(layer[c]["source"] for c in gpu_layers.CUDNN_MODES
                                       if layer.get(c, {}).get("source"))
        rows += rows_of(layer, precisions)
    resident = torch is not None and hasattr(g, "launch_on_device")
    inputs = ("float32 drawn on the GPU (uniform in [0.05, 1], random sign), one x and k per shape shared by every "
              "variant and cuDNN; y poisoned with NaN before each check" if resident else
              "float32 (uniform in [0.05, 1], random sign), one x and k per shape shared by every variant and cuDNN")
    return {"seed": seed, "batch": batch, "warmup": warmup, "reps": reps, "inputs": inputs,
            "timing": "CUDA events around each launch, median",
            "ranges": {k: list(v) for k, v in RANGES.items()}, "cudnn_source": sources, "rows": rows,
            "summary": summarise(rows), "seconds": round(time.monotonic() - start, 1)}
