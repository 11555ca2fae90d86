"""What `final` does the first time it meets a conv layer shape this GPU has no evidence for: measure it, as
cuDNN's benchmark mode does, before pyconv.plan (a pure function) chooses.

Every variant final may choose (role default or candidate, not reading x from host memory) that takes the layer
is checked against the reference on random non-zero inputs at the run's batch, then timed; one that fails its
check is never timed and never ranked. It is the layer bench's own code (pyconv.bench.gpu_layers.bench_gpu_layer:
the same check, the same timing of conv + tanh + pool where they follow) and the evidence's own ranking
(pyconv.bench.evidence). The ranking goes into this GPU's evidence file (results/evidence/<gpu-slug>.json, written
atomically), each timing's source pyconv.evidence.FIRST_USE: the next run finds the shape and measures nothing,
and the plan's why-line says which variant won, by how much, and that final measured it. The precision rule stays
the plan's: reduced-precision variants (TF32 or FP16) are measured like the others and chosen only where the
model's labels are proven unchanged.

Where the evidence comes from another GPU (the stand-in) or no GPU is visible (`invoke plan --gpu NAME`), nothing
is measured; nor where the build has no variant final may choose (a student handout: final runs the student's)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from . import evidence, native
from .bench.evidence import add_first_use
from .bench.schema import LayerResult
from .core.errors import PyconvError
from .evidence import Evidence
from .plan import ConvSite, cannot_take
from .variants import Variant

# Fewer repetitions than the bench's (5 + 20): measuring is part of the first run, and the median of 10 separates
# variants that differ by the margins a choice is about.
WARMUP = 2
REPS = 10


def unmeasured(sites: Sequence[ConvSite], own: Evidence | None) -> list[ConvSite]:
    """The sites (one per shape key) whose shape this GPU's own evidence has never measured."""
    seen = set(own.layers) if own is not None else set()
    out = []
    for s in sites:
        if s.key not in seen:
            seen.add(s.key)
            out.append(s)
    return out


def candidates(variants: Sequence[Variant], site: ConvSite) -> list[Variant]:
    """What final may choose on this layer: GPU variants whose final role is default or candidate, that take it
    and keep x on the device (as the network does)."""
    return [v for v in variants if v.device == "gpu" and v.role("final").choosable and not v.x_on_host
            and not cannot_take(v, site)]


def _site_dict(site: ConvSite) -> dict:
    return {"model": "final", "arch": "", "layer": site.layer, "B": site.B, "C": site.C, "H": site.H, "W": site.W,
            "M": site.M, "K": site.K, "tanh_pool_follows": site.tanh_pool_follows}


def _outcome(layer: LayerResult, ranked) -> str:
    """One line: the winner and its margin, and every candidate that failed."""
    failed = [f"{v.variant} ({v.check.why or 'check failed'})" for v in layer.variants
              if v.check is not None and not v.check.passed]
    failed += [f"{v.variant} ({v.error})" for v in layer.variants if v.error]
    if not ranked:
        head = "no candidate passed its check"
    else:
        head = f"fastest {ranked[0].variant} {ranked[0].ms:.3g} ms"
        if len(ranked) > 1:
            head += f", {ranked[1].ms / ranked[0].ms:.2g}x the next ({ranked[1].variant})"
    return head + (f"; failed: {'; '.join(failed)}" if failed else "")


def evidence_for(sites: Sequence[ConvSite], gpu_name: str, *, variants: Sequence[Variant] | None = None, g=None,
                 folder: str | os.PathLike | None = None, warmup: int = WARMUP, reps: int = REPS, seed: int = 0,
                 echo: Callable[[str], None] = print) -> Evidence | None:
    """This GPU's evidence for planning `sites`, after measuring the shapes it lacks (on the visible GPU, which must
    be `gpu_name`); pyconv.evidence.for_gpu's answer when nothing is missing. g: the pyconv._gpu module (a
    stand-in in tests); variants: the registry (default pyconv._gpu's)."""
    from .bench import evidence as build
    from .bench import gpu_layers, tags

    path = evidence.path_for(gpu_name, folder)
    own = evidence.load(path) if path.exists() else None  # a damaged file: one line, and nothing overwritten
    todo = unmeasured(sites, own)
    if not todo:
        return evidence.for_gpu(gpu_name, folder)
    if variants is None:
        from .variants import gpu_variants

        variants = gpu_variants()
    if not any(v.device == "gpu" and v.role("final").choosable for v in variants):
        # nothing final may choose between (a student handout): the plan runs the student's variant unmeasured
        return evidence.for_gpu(gpu_name, folder)
    if g is None:
        from . import autotune

        g = native.gpu()
        autotune.load_cache(gpu_name)  # the tunable kernel as the run will use it
    rng = np.random.default_rng(seed)
    date = tags.utc_now()
    measured = []
    for site in todo:
        cands = candidates(variants, site)
        if not cands:
            raise PyconvError(f"no variant final may choose can run {site.label}")
        echo(f"final: {site.label} has no evidence on {gpu_name}: checking and timing {len(cands)} candidate(s) "
             f"at batch {site.B}")
        layer = LayerResult.from_dict(gpu_layers.bench_gpu_layer(g, _site_dict(site), cands, None, rng, warmup,
                                                                 reps, None, shared_inputs=True))
        ranked = build.ranking(layer, date, evidence.FIRST_USE)
        if not ranked:  # nothing to choose from that is known correct here: run nothing rather than a wrong one
            raise PyconvError(f"final: {site.label}: {_outcome(layer, ranked)} (--impl runs a variant of your "
                              "choice)")
        echo(f"final: {site.layer}: {_outcome(layer, ranked)}")
        measured.append(layer)
    if path.exists():  # re-read: another run may have added shapes meanwhile
        own = evidence.load(path)
    evidence.save(add_first_use(own, gpu_name, measured, date), path)
    echo(f"final: wrote {path}")
    return replace(evidence.load(path), measured_now=frozenset(s.key for s in todo))
