"""The evidence file of a GPU (pyconv.evidence) from bench results: `invoke bench` merges each run it writes
into the evidence folder beside the JSON (results/evidence/ for the default destination), `final` adds the shapes
it measured on first use (pyconv.measure), and `invoke evidence` rebuilds the files from every bench JSON in a
folder (oldest first, so the newest measurement of a shape wins), keeping the first-use measurements of shapes no
newer bench run measured."""

from __future__ import annotations

import math
import os
import statistics
from pathlib import Path

from ..core import paths
from ..core.errors import PyconvError
from ..evidence import FIRST_USE, Evidence, LayerEvidence, Timing, Verdict, path_for, save
from ..evidence import load as load_evidence
from . import schema
from .schema import BenchResult, LayerResult


def ranking(layer: LayerResult, date: str, source: str) -> tuple[Timing, ...]:
    """The variants whose check passed on this layer, fastest first, each by what the network would pay: where
    tanh + max-pool 2/2 follow, a fusing variant's launch against any other's conv + the shared max-pool + tanh
    kernel. Variants that read x from host memory are left out: in the network, activations stay on the device."""
    out = []
    for v in layer.variants:
        if not v.passed or v.x_on_host or (v.pools and not layer.tanh_pool_follows):
            continue
        # a first layer: a variant that reads uint8 images ranks by that path, and not at all when it failed
        ms = v.as_run(v.ms if v.pools or not layer.tanh_pool_follows else v.tanh_pool_ms)
        if ms is None or ms.median is None:
            continue
        out.append(Timing(v.variant, float(ms.median), date, source))
    return tuple(sorted(out, key=lambda t: t.ms))  # stable: a tie keeps ladder order


def fallback_order(layers) -> tuple[str, ...]:
    """Every ranked variant by the geometric mean, over the shapes it was measured on, of its time over the
    fastest time of that shape."""
    logs: dict[str, list[float]] = {}
    for e in layers:
        if not e.ranking:
            continue
        best = e.ranking[0].ms
        for t in e.ranking:
            logs.setdefault(t.variant, []).append(math.log(t.ms / best))
    return tuple(sorted(logs, key=lambda n: sum(logs[n]) / len(logs[n])))


# A taper must beat equal parts by this much (median over the chunk counts swept at both) for final to take it: the
# sweep's rows are single medians with ~0.01-0.02 ms of run-to-run noise on sp19 (results/bench-e2e-nvidia-h200-
# 2026-11-24-sp19-taper-sweep.json, -sp19-taper.json and -sp19-fa17-fa19-sp18-labels.json, the same shapes three times).
TAPER_MARGIN = 0.03
# Tail pieces must beat one piece by this much, over final's chunk count and the counts beside it. Their gain is
# small: on sp19 (H200) 2-5% at 3-6 parts, the sweep timed in rounds (its rows then within 1% of final's own
# measurement of the same shape: results/bench-e2e-nvidia-h200-2026-11-25-sp19-rounds.json); on the networks that
# compute slower than they copy they cost 1-4% (fa19, sp18: -fa19-sp18-high-course-pieces.json).
PIECES_MARGIN = 0.01


def _fastest(rows: list, value, baseline, margin: float):
    """Of the values of `value(row)` among the pipeline rows, the one whose median pinned time over the chunk counts
    swept at every value is the lowest, where it beats `baseline`'s by `margin`; else `baseline`."""
    values = {value(r) for r in rows}
    if baseline not in values or len(values) < 2:
        return baseline
    chunks = set.intersection(*({r.chunks for r in rows if value(r) == v} for v in values))
    if not chunks:
        return baseline

    def median(v) -> float:
        return statistics.median(r.pinned_ms.median for r in rows if value(r) == v and r.chunks in chunks)

    best = min(sorted(values), key=median)
    return best if median(best) < (1 - margin) * median(baseline) else baseline


def pipeline_taper(e: schema.EndToEnd) -> float:
    """The taper final runs these weights with: of the tapers the end-to-end bench swept on final's streams (in one
    piece), the one whose median pinned time over the chunk counts swept at every taper is the lowest, where it beats
    equal parts (taper 1) by TAPER_MARGIN; else 1."""
    rows = [r for r in e.pyconv.pipeline
            if r.streams == e.streams and r.tail_pieces == 1 and r.pinned_ms and r.pinned_ms.median]
    return _fastest(rows, lambda r: r.taper, 1.0, TAPER_MARGIN)


def pipeline_tail_pieces(e: schema.EndToEnd) -> int:
    """The tail pieces final runs these weights with: of the piece counts the end-to-end bench swept on final's
    streams at equal parts, the one whose median pinned time over final's chunk count and the counts one below and
    above it is the lowest, where it beats one piece by PIECES_MARGIN; else 1."""
    near = {e.chunks - 1, e.chunks, e.chunks + 1} if e.chunks else set()
    rows = [r for r in e.pyconv.pipeline if r.streams == e.streams and r.taper == 1 and r.chunks in near
            and r.pinned_ms and r.pinned_ms.median]
    return _fastest(rows, lambda r: r.tail_pieces, 1, PIECES_MARGIN)


def pipeline_shape(e: schema.EndToEnd) -> tuple[float, int]:
    """(taper, tail_pieces) final runs these weights with, always a shape the sweep timed: pipeline_taper's choice
    in one piece or pipeline_tail_pieces's at equal parts, whichever has the lower median over the chunk counts both
    were swept at (never the two together untimed: on sp19 both beat their baselines in one run, taper 0.8 at a
    median 0.528 ms and 2 pieces at 0.530, results/bench-e2e-nvidia-h200-2026-11-29-sp19-span.json); or a timed
    combination of a taper and pieces (COMBINED_TAPERS x COMBINED_PIECES in the bench) where it beats that choice by
    PIECES_MARGIN over the chunk counts all were swept at."""
    taper, pieces = pipeline_taper(e), pipeline_tail_pieces(e)
    rows = [r for r in e.pyconv.pipeline if r.streams == e.streams and r.pinned_ms and r.pinned_ms.median]

    def times(shape: tuple[float, int]) -> dict[int, float]:
        return {r.chunks: r.pinned_ms.median for r in rows if (r.taper, r.tail_pieces) == shape}

    def median(shape: tuple[float, int], chunks: set[int]) -> float:
        return statistics.median(times(shape)[c] for c in chunks)

    single = (taper, 1) if pieces == 1 else (1.0, pieces)
    if taper != 1 and pieces != 1:
        both = times((taper, 1)).keys() & times((1.0, pieces)).keys()
        if both:  # else the pieces, chosen near final's own chunk count
            single = min([(taper, 1), (1.0, pieces)], key=lambda s: median(s, both))
    combined = sorted({(r.taper, r.tail_pieces) for r in rows if r.taper != 1 and r.tail_pieces > 1})
    chunks = set(times(single))
    for c in combined:
        chunks &= times(c).keys()
    if not combined or not chunks:
        return single
    best = min(combined, key=lambda s: median(s, chunks))
    return best if median(best, chunks) < (1 - PIECES_MARGIN) * median(single, chunks) else single


def merge(ev: Evidence | None, result: BenchResult, source: str) -> Evidence | None:
    """`ev` with this run's measurements: a shape's ranking replaced by a newer run that measured every variant,
    or updated variant by variant by a run limited with --variants; a model's precision verdict replaced by a newer
    one. None when the run has no GPU."""
    if result.gpu is None:
        return ev
    if ev is None:
        ev = Evidence(gpu=result.gpu.name)
    layers = dict(ev.layers)
    subset = result.settings.variants
    for layer in result.layers:
        new = ranking(layer, result.date, source)
        old = layers.get(layer.key)
        if old is not None and max((t.date for t in old.ranking), default="") > result.date:
            continue  # this shape was measured again since
        if old is not None and subset is not None:
            new = tuple(sorted([*(t for t in old.ranking if t.variant not in subset), *new], key=lambda t: t.ms))
        layers[layer.key] = LayerEvidence(layer.C, layer.H, layer.W, layer.M, layer.K, layer.tanh_pool_follows,
                                          layer.B, new)
    verdicts = dict(ev.verdicts)
    for e in result.end_to_end:
        if e.model_digest is None or e.reduced_precision_ok is None:
            continue
        old = verdicts.get(e.model_digest)
        if old is None or result.date >= old.date:
            # the count and variants of the configuration that decided: where reduced precision kept every label,
            # the one final runs ("pyconv", the entry's impls: a TF32-only candidate after a rejected one with FP16);
            # where it did not, the first rejected candidate ("pyconv" holds the float32 configuration run after it)
            if e.reduced_precision_ok or e.pyconv_reduced is None:
                candidate, impls, fc = e.pyconv, e.impls, e.fc_math
            else:
                candidate, impls, fc = e.pyconv_reduced, e.pyconv_reduced.impls, e.pyconv_reduced.fc_math
            verdicts[e.model_digest] = Verdict(e.model, e.model_digest, bool(e.reduced_precision_ok), result.date,
                                               source, candidate.differ_vs_pytorch,
                                               tuple(impls) if impls else None, fc, *pipeline_shape(e))
    return Evidence(gpu=ev.gpu, layers=layers, verdicts=verdicts, fallback_order=fallback_order(layers.values()),
                    path=ev.path)


def add_first_use(ev: Evidence | None, gpu: str, layers, date: str) -> Evidence:
    """`ev` (this GPU's evidence, None where it has none) with the rankings of layers `final` measured on first
    use (LayerResult records from the layer bench), each timing's source FIRST_USE."""
    ev = ev if ev is not None else Evidence(gpu=gpu)
    merged = dict(ev.layers)
    for layer in layers:
        merged[layer.key] = LayerEvidence(layer.C, layer.H, layer.W, layer.M, layer.K, layer.tanh_pool_follows,
                                          layer.B, ranking(layer, date, FIRST_USE))
    return Evidence(gpu=ev.gpu, layers=merged, verdicts=dict(ev.verdicts), fallback_order=fallback_order(
        merged.values()), path=ev.path)


def first_use_only(ev: Evidence) -> Evidence:
    """The layers of `ev` that `final` measured on first use (what a rebuild from bench files cannot restore)."""
    kept = {k: e for k, e in ev.layers.items() if e.ranking and all(t.first_use for t in e.ranking)}
    kept.update({k: e for k, e in ev.layers.items() if not e.ranking})  # measured, and nothing passed
    return Evidence(gpu=ev.gpu, layers=kept, fallback_order=fallback_order(kept.values()))


def update_beside(result: BenchResult, json_path: str | os.PathLike) -> Path | None:
    """Merge a run just written to json_path into <its folder>/evidence/<gpu-slug>.json; the file's path, or None
    when the run measured nothing final chooses from (no GPU, or neither layers nor end-to-end verdicts)."""
    if result.gpu is None or not (result.layers or any(e.reduced_precision_ok is not None
                                                        for e in result.end_to_end)):
        return None
    json_path = Path(json_path)
    dest = path_for(result.gpu.name, json_path.parent / "evidence")
    old = load_evidence(dest) if dest.exists() else None
    return save(merge(old, result, json_path.name), dest)


def rebuild(folder: str | os.PathLike | None = None, echo=None) -> list[Path]:
    """Every GPU's evidence file from the bench JSON files of `folder` (default results/), oldest run first, on
    top of the first-use measurements the files held (an unreadable file's are dropped, with a line to `echo`);
    returns the files written."""
    folder = Path(folder or paths.RESULTS)
    by_gpu: dict[str, Evidence | None] = {}
    for old in sorted((folder / "evidence").glob("*.json")):
        try:
            ev = load_evidence(old)
        except PyconvError as e:
            if echo is not None:
                echo(f"replacing {old}: {e}")
            continue
        kept = first_use_only(ev)
        if kept.layers:
            by_gpu[ev.gpu] = kept
    runs = []
    for p in sorted(folder.glob("bench-*.json")):
        r = schema.load(p)
        if r.gpu is not None:
            runs.append((r.date, p.name, r))
    for _, name, r in sorted(runs, key=lambda x: (x[0], x[1])):
        by_gpu[r.gpu.name] = merge(by_gpu.get(r.gpu.name), r, name)
    return [save(ev, path_for(gpu, folder / "evidence")) for gpu, ev in sorted(by_gpu.items()) if ev is not None]
