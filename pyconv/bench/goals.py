"""The issues' goals, each with what a bench run measured (None: not measured in this run, with why)."""

from __future__ import annotations

from ..core.model import DEFAULT_MODEL
from .sites import shape_key

# The course layers the goals are about (C, H, W, M, K), at batch GOAL_BATCH.
SP19_CONV1 = (1, 48, 48, 6, 5)
SP19_CONV2 = (6, 22, 22, 16, 5)
FA17_CONV = (1, 28, 28, 50, 5)
GOAL_BATCH = 10000


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


def check_goals(result: dict, cpu_default: str | None = None) -> list[dict]:
    """The issues' goals, each with what this run measured (None: not measured in this run, with why).
    cpu_default: milestone 2's default variant in the build that ran (the registry's; cpu-fast in this project),
    which the CPU goals are about; None (a build without one: a student handout) sets no CPU goal."""
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
    if "cpu" in parts and cpu_default:
        for label, key, target in ((f"{cpu_default} sp19 conv1", SP19_CONV1, 0.10),
                                   (f"{cpu_default} sp19 conv2", SP19_CONV2, 0.12)):
            rows = [r for r in result.get("cpu", []) if r["variant"] == cpu_default and "s" in r
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
