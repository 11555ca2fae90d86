"""The one place that decides what a milestone runs: `plan(milestone, sites, variants, evidence, impl)` is a pure
function to a Plan (the variant per conv layer with one line of why, the fully connected layers' arithmetic, the
precision decision, the pipeline shape). The engines run a Plan and decide nothing.

The rules, from the variants' roles (pyconv.variants; each variant's own file in native/ sets them):
- --impl X: X on every conv layer. X must have a role other than `never` in the milestone; a layer X cannot take
  (it fuses tanh + max-pool 2/2 and they do not follow, or X's why_unsupported refuses the shape) is an error
  naming the layer, unless fallback=True (`--fallback`): that layer then runs the first of milestone 4's and
  milestone 3's defaults that can take it.
- otherwise milestone 2 and 3: the first `default` variant (ladder order) on every layer; where the build has no
  default (a student handout) the first on-request variant of the ladder (the student's).
- milestone 4: its default, else the first candidate in ladder order that takes the layer.
- final: per layer, the fastest variant measured on this GPU for the layer's shape (pyconv.evidence: by `invoke
  bench`, or by final itself on first meeting the shape, pyconv.measure, which fills the evidence before plan()
  is called), among those whose final role is default or candidate; a shape never measured runs the final
  default (the fusing one where
  tanh + max-pool follow), then the evidence's fallback order, then the candidates in ladder order. A build with
  no default or candidate for final (a student handout) runs the first on-request variant (the student's), as
  milestones 2 to 4 do, measuring nothing: there is nothing to choose between.
  Precision: reduced precision (conv variants that round to TF32 or to FP16, and the fully connected layers on
  cuBLAS's tensor cores in TF32 or FP16) only for weights whose end-to-end bench on this GPU changed no label
  against PyTorch's float32 network; otherwise float32. That bench runs final's reduced plan (whatever rounds
  fastest per layer; the fully connected layers in FP16 where the last conv's variant writes its output in half,
  else TF32); where it moves a label, the same with the fully connected layers in TF32, then TF32 alone, then
  float32 conv layers with the fully connected layers in TF32. It records the variants and FC math of the
  configuration that kept every label, and its verdict allows exactly what that configuration ran: its FC math
  (TF32 for a file that does not record it), and the conv layers' reduced precisions among its variants (TF32 for
  a file that does not record them: it predates FP16 variants). FP16's range ends at 65504: whether a model's
  values stay inside it is for the bench on its weights to show.
  In a build with nothing for final to choose (a student handout) that verdict counts only when the bench ran this
  build's own variant on every conv layer (the student's `invoke bench --end-to-end`): the evidence shipped with
  the project was earned with the project's convolutions, so it leaves the student's network in float32.
  Milestones 2, 3 and 4 always compute in float32, the course's arithmetic."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .core.errors import PyconvError
from .core.model import Model, shape_trace
from .evidence import Evidence
from .variants import PRECISION_NAMES, REDUCED_PRECISIONS, Variant, milestone_key

FC_MATHS = ("fp32", "tf32", "fp16")  # how cuBLAS multiplies the fully connected layers (layers.cuh: FcMath)
# forced: "reduced" allows every reduced precision (FC layers in FP16 where the last conv writes half, else TF32),
# "reduced-fc-tf32" the same with TF32 fully connected layers, "tf32" TF32 only, "fc-tf32" float32 conv layers and
# TF32 fully connected layers
PRECISIONS = ("auto", "fp32", "reduced", "reduced-fc-tf32", "tf32", "fc-tf32")

# `final` streams the batch through the network in chunks on several CUDA streams (the copy of chunk i+1 overlaps
# the compute of chunk i). Chosen from the pipeline sweep of `invoke bench --end-to-end` on an H200 (sp19, batch
# 10000, pinned: the "pipeline" rows). In results/bench-e2e-nvidia-h200-2026-11-22.json, 4 chunks on 4 streams was
# the fastest shape and more chunks cost more host-side launches than they hid. With the chunked pass replayed as
# one CUDA graph (results/bench-e2e-nvidia-h200-2026-11-24-sp19-graph.json), 4 to 8 chunks on 4 streams and 4-5 on
# 2 were within 0.01 ms of each other. With the fully connected layers in FP16: 0.558 ms at 4 chunks on 4 streams,
# 0.537 at 6 and 8 (results/bench-e2e-nvidia-h200-2026-11-24-sp19-fc16.json); with final at 6, the next run gave
# 0.566 at 4 and 0.563 at 6 (-sp19-fc16-head.json): within its noise. But the resident time, measured in final's
# parts, was 0.366 ms in 6 parts against 0.332 in 4 (more parts, more fixed costs per part): 4 on 4 stays.
FINAL_CHUNKS = 4
STREAMS = 4
# Each of final's parts holds `taper` times the images of the part before (GpuNetwork::forward): 1 unless the
# precision verdict for these weights (the end-to-end bench, pyconv.bench.evidence.pipeline_shape) found another
# taper faster in its pipeline sweep. Below 1 the last part, the only compute after the last copy, is the smallest,
# which helps where each part computes well under its copy's time; on sp19 a 2500-image part computes in ~100 us
# against its copy's 107 (the FC layers cost twice their share at that size), and the sweeps put taper 0.7-0.9 within
# the noise of 1 until one put 0.8 4% ahead (median over 3-8 parts 0.528 ms against 0.550), level with 2 tail
# pieces at equal parts (0.530: results/bench-e2e-nvidia-h200-2026-11-29-sp19-span.json); in the next run 2 pieces
# led 0.8 by 0.4% (0.518 against 0.520, and 0.8 in 2 pieces 0.520: -sp19-combined.json). Above 1 the
# first copy, which nothing computes beside, is the smallest: fa19, which computes five times slower than it copies,
# ran 2.49-2.52 ms at taper 2 against 2.63-2.67 at 1 (4-8 chunks on 4 streams,
# results/bench-e2e-nvidia-h200-2026-11-24-sp19-fa17-fa19-sp18-labels.json).
FINAL_TAPER = 1.0
# final's last part is copied in pieces, its conv layers running on each piece as it lands and its FC layers on the
# whole part after the last (GpuNetwork::forward's tail_pieces), where the precision verdict for these weights
# found that faster in its pipeline sweep (pyconv.bench.evidence.pipeline_shape); else in one piece
# (FINAL_TAIL_PIECES). What computes after the last copy is then the last piece's conv layers and the part's FC
# layers. sp19 pinned on an H200, 4 parts on 4 streams, the sweep's shapes timed in rounds: 0.537 ms in 1 piece,
# 0.519 in 2, 0.537 in 3, 0.545 in 4 (at 3-6 parts 2 pieces gained 2-5%, at 8 nothing; final's own measurement
# 0.515; results/bench-e2e-nvidia-h200-2026-11-25-sp19-rounds.json). From 3 pieces on, the pieces' conv layers and
# the part before them fall behind the copies they overlap, and each piece costs a copy's gap. A network that
# computes slower than it copies gains nothing after its last copy and pays for the pieces (fa19 at 4 parts:
# 2.74 ms in 1 piece, 2.84 in 2; -fa19-sp18-high-course-pieces.json).
FINAL_TAIL_PIECES = 1


def pipeline(milestone: str, batch: int) -> tuple[int, int, float, int]:
    """(chunks, streams, taper, tail_pieces) of a GPU run: final chunks a batch of at least 4 images per chunk; the
    others run it whole."""
    if milestone_key(milestone) == "final" and batch >= 4 * FINAL_CHUNKS:
        return FINAL_CHUNKS, STREAMS, FINAL_TAPER, FINAL_TAIL_PIECES
    return 1, STREAMS, 1.0, 1


@dataclass(frozen=True)
class ConvSite:
    """One conv layer as a network runs it: its input shape at this batch and whether tanh + max-pool 2/2 follow."""

    index: int  # among the conv layers, from 0
    layer: str  # the layer's name in the model (conv<i+1> when it has none)
    B: int
    C: int
    H: int
    W: int
    M: int
    K: int
    tanh_pool_follows: bool = False

    @property
    def shape(self) -> tuple[int, int, int, int, int, int]:
        return self.B, self.C, self.H, self.W, self.M, self.K

    @property
    def key(self) -> tuple[int, int, int, int, int, bool]:
        """What the evidence is keyed by (the batch is not part of it)."""
        return self.C, self.H, self.W, self.M, self.K, self.tanh_pool_follows

    @property
    def label(self) -> str:
        return (f"conv layer {self.index + 1} ({self.layer}: C={self.C} {self.H}x{self.W} M={self.M} K={self.K}"
                + (", tanh + max-pool 2/2 follow" if self.tanh_pool_follows else "") + ")")


def conv_sites(model: Model, batch: int) -> list[ConvSite]:
    """Every conv layer of `model` at this batch size."""
    shapes = [tuple(model.input_shape), *shape_trace(model)]
    sites = []
    for i, layer in enumerate(model.layers):
        if layer.type != "conv":
            continue
        c, h, w = shapes[i]
        nxt = model.layers[i + 1:i + 3]
        fused = (len(nxt) == 2 and nxt[0].type == "tanh" and nxt[1].type == "pool" and nxt[1].mode == "max"
                 and nxt[1].kernel == 2 and nxt[1].stride == 2)
        n = len(sites)
        sites.append(ConvSite(n, layer.name or f"conv{n + 1}", batch, c, h, w, layer.out_channels, layer.kernel,
                              fused))
    return sites


@dataclass(frozen=True)
class Choice:
    site: ConvSite
    variant: str
    why: str


@dataclass(frozen=True)
class Plan:
    milestone: str  # "m2", "m3", "m4" or "final"
    device: str  # "cpu" or "gpu"
    layers: tuple[Choice, ...]
    fc_math: str = "fp32"  # how the fully connected layers multiply on the GPU
    precision: str = "float32"  # one line: which precision and on what evidence
    chunks: int = 1
    streams: int = STREAMS
    taper: float = 1.0  # each part of a chunked pass holds `taper` times the images of the part before
    tail_pieces: int = 1  # the last part's copy in pieces, its conv layers on each as it lands
    tuned: bool = False  # apply this GPU's tile configurations of the tunable kernel (results/tuning/) first

    @property
    def impls(self) -> list[str]:
        return [c.variant for c in self.layers]

    def lines(self) -> list[str]:
        """The plan in words, one line per choice."""
        out = [f"{self.milestone} on the {self.device.upper()}: {self.precision}"]
        if self.device == "gpu":
            parts = f"{self.chunks} chunk(s) on {self.streams} streams"
            if self.chunks > 1 and self.taper != 1:
                parts += f", each {self.taper:g} times the one before (the end-to-end bench's pipeline sweep)"
            if self.chunks > 1 and self.tail_pieces > 1:
                parts += f", the last copied in {self.tail_pieces} pieces (its conv layers on each as it lands)"
            out.append(f"fully connected layers: {self.fc_math}; {parts}")
        out += [f"{c.site.label}: {c.variant} -- {c.why}" for c in self.layers]
        return out


# ---------------------------------------------------------------------------------------------------------------


def cannot_take(v: Variant, site: ConvSite) -> str:
    """'' when `v` can run this layer, else why not."""
    if v.pools and not site.tanh_pool_follows:
        return f"{v.name} fuses tanh + max-pool 2/2 and they do not follow this layer"
    return v.why_unsupported(site.shape)


def _defaults(variants: Sequence[Variant], m: str) -> list[Variant]:
    return [v for v in variants if v.role(m).role == "default"]


def _for_site(vs: Sequence[Variant], site: ConvSite) -> list[Variant]:
    """Where tanh + max-pool follow, the variants that fuse them first (ladder order otherwise kept)."""
    if not site.tanh_pool_follows:
        return [v for v in vs if not v.pools]
    return [v for v in vs if v.pools] + [v for v in vs if not v.pools]


def _first(order: Sequence[Variant], site: ConvSite) -> tuple[Variant | None, list[str]]:
    """The first variant of `order` that takes the layer, and why each one before it could not."""
    refused = []
    for v in order:
        why = cannot_take(v, site)
        if not why:
            return v, refused
        refused.append(why)
    return None, refused


def _unique(vs) -> list[Variant]:
    seen, out = set(), []
    for v in vs:
        if v.name not in seen:
            seen.add(v.name)
            out.append(v)
    return out


def _default_choice(variants: Sequence[Variant], m: str, site: ConvSite, what: str) -> Choice:
    defaults = _defaults(variants, m)
    if not defaults:
        # A build without the milestone's default (a student handout): the first candidate of the ladder, else
        # the first variant that runs on request (the student's). Only ladder variants: the numpy reference is
        # never the student's code.
        own = [v for v in variants if v.step is not None and v.role(m).role == "candidate"]
        own += [v for v in variants if v.step is not None and v.role(m).role == "on-request"]
        v, refused = _first(own, site)
        if v is None:
            raise PyconvError(f"{what}: no variant of this build can run {site.label}"
                              + (": " + "; ".join(refused) if refused else ""))
        how = "candidate" if v.role(m).role == "candidate" else "variant that runs on request"
        return Choice(site, v.name, f"no {what} default in this build: the first {how} of the ladder")
    v, refused = _first(_for_site(defaults, site), site)
    if v is None:
        raise PyconvError(f"{what}'s default cannot run {site.label}: " + "; ".join(refused))
    return Choice(site, v.name, f"{what}'s default")


def _impl_choices(variants: Sequence[Variant], m: str, sites: Sequence[ConvSite], impl: str, device: str,
                  fallback: bool) -> list[Choice]:
    mine = [v for v in variants if v.device == device]
    if device == "cpu":
        allowed = [v for v in mine if v.role(m).role != "never"]
        v = next((v for v in allowed if v.name == impl), None)
        if v is None:
            raise PyconvError(f"milestone 2 runs on the CPU: --impl must be one of "
                              f"{', '.join(x.name for x in allowed)}")
    else:
        v = next((v for v in mine if v.name == impl), None)
        if v is None:
            raise PyconvError(f"unknown GPU implementation '{impl}' (known: {', '.join(x.name for x in mine)})")
    role = v.role(m)
    if role.role == "never":
        raise PyconvError(f"--impl {impl} is not allowed in {_name(m)}: {role.reason or 'its role is never'}")
    out = []
    for site in sites:
        why = cannot_take(v, site)
        if not why:
            out.append(Choice(site, v.name, f"--impl {impl}"))
            continue
        if not fallback:
            raise PyconvError(f"--impl {impl} cannot run {site.label}: {why}"
                              + ("" if device == "cpu" else " (--fallback runs milestone 4's or 3's default there)"))
        order = _unique([*_for_site(_defaults(mine, "m4"), site), *_for_site(_defaults(mine, "m3"), site)])
        alt, refused = _first(order, site)
        if alt is None:
            raise PyconvError(f"--impl {impl} cannot run {site.label} ({why}), nor can milestone 4's or 3's "
                              "default: " + "; ".join(refused))
        out.append(Choice(site, alt.name, f"--impl {impl} cannot take it ({why}); --fallback: {alt.name}"))
    return out


def _name(m: str) -> str:
    return "the final milestone" if m == "final" else f"milestone {m[1:]}"


def _m4_choice(variants: Sequence[Variant], site: ConvSite) -> Choice:
    defaults = _defaults(variants, "m4")
    if not defaults:
        return _default_choice(variants, "m4", site, "milestone 4")
    v, refused = _first(_for_site(defaults, site), site)
    if v is not None:
        return Choice(site, v.name, "milestone 4's default")
    cands = [x for x in variants if x.role("m4").role == "candidate"]
    alt, more = _first(cands, site)
    if alt is None:
        raise PyconvError(f"no milestone-4 variant can run {site.label}: " + "; ".join(refused + more))
    return Choice(site, alt.name, f"the default cannot take it ({'; '.join(refused)}): the first candidate in "
                                  "ladder order that can")


def _in_precision(precisions: frozenset[str], variants: Sequence[Variant]) -> str:
    """' in float32' / ' in float32 or TF32' where final leaves out a reduced precision one of its variants computes
    in, '' where it leaves out none."""
    could = {v.precision for v in variants if v.reduced_precision and v.role("final").choosable}
    if could <= precisions:
        return ""
    return " in " + " or ".join(PRECISION_NAMES[p] for p in ("fp32", *REDUCED_PRECISIONS)
                                if p == "fp32" or p in precisions)


def _final_choice(variants: Sequence[Variant], site: ConvSite, ev: Evidence | None,
                  precisions: frozenset[str]) -> Choice:
    """precisions: the reduced precisions (REDUCED_PRECISIONS) final may run; empty: float32 only."""
    pool = [v for v in variants if v.role("final").choosable and (not v.reduced_precision or v.precision in precisions)]
    by = {v.name: v for v in pool}
    everyone = {v.name: v for v in variants}
    refused: list[str] = []
    passed_over: list[str] = []  # faster on this shape, but not for final
    # 1. measured on this shape (on this GPU, or on the stand-in GPU; by a bench run, or by final on first use)
    allowed = []  # the ranking's timings final may take here, fastest first
    for t in ev.ranking(site.key) if ev else ():
        v = by.get(t.variant)
        if v is None:
            other = everyone.get(t.variant)
            if other is not None and not passed_over and not allowed:
                role = other.role("final")
                passed_over.append(f"{other.name} rounds to {PRECISION_NAMES[other.precision]}" if role.choosable else
                                   f"{other.name} is {role.role} in final: {role.reason}")
            continue
        why = cannot_take(v, site)
        if why:
            if not allowed:
                refused.append(why)
            continue
        allowed.append(t)
    if allowed:
        t, v = allowed[0], by[allowed[0].variant]
        B = ev.layers[site.key].B
        if t.first_use:
            if site.key in ev.measured_now:
                when = "measured now on this GPU"
            else:
                when = f"measured on this GPU when final first met this shape ({t.date[:10]}, {ev.where()})"
            if ev.standin_for is not None:
                when = (f"measured on {ev.gpu} when final first met this shape ({t.date[:10]}, {ev.where()}): "
                        f"no evidence for {ev.standin_for}")
            line = (f"{when}{_in_precision(precisions, variants)}: {v.name} {t.ms:.3g} ms at batch {B}, "
                    + (f"{allowed[1].ms / t.ms:.2g}x the next ({allowed[1].variant})" if len(allowed) > 1 else
                       "the only one of final's variants that passed its check"))
        else:
            where = f"{t.source}" if ev.standin_for is None else \
                f"{t.source}, measured on {ev.gpu}: no evidence for {ev.standin_for}"
            what = "conv + tanh + pool" if site.tanh_pool_follows else "conv"
            line = (f"fastest {what} measured on this shape{_in_precision(precisions, variants)} among final's "
                    f"variants ({t.ms:.3g} ms at batch {B}; {where})")
        if passed_over:
            line += f"; faster: {passed_over[0]}"
        if refused:
            line += f"; not taken: {'; '.join(refused)}"
        return Choice(site, v.name, line)
    # 2. never measured here: the default, the evidence's fallback order, the candidates in ladder order
    order = _unique([*_for_site([v for v in pool if v.role("final").role == "default"], site),
                     *(by[n] for n in (ev.fallback_order if ev else ()) if n in by),
                     *(v for v in pool if v.role("final").role == "candidate")])
    v, more = _first(order, site)
    if v is None:
        raise PyconvError(f"no variant allowed in the final milestone can run {site.label}: "
                          + "; ".join(refused + more))
    src = "no evidence file for this GPU" if ev is None else f"this shape is not in {ev.where()}"
    if ev is not None and site.key in ev.layers and not ev.ranking(site.key):
        src = f"no variant passed its check when this shape was measured ({ev.where()})"
    if ev is not None and ev.standin_for is not None:
        src = f"no evidence for {ev.standin_for}, and this shape is not in {ev.where()} ({ev.gpu})"
    role = v.role("final").role
    how = "the final default" if role == "default" and not more else "the first allowed variant that takes it"
    return Choice(site, v.name, f"{how} ({src})")


def verdict_precisions(impls: Sequence[str] | None, variants: Sequence[Variant]) -> frozenset[str]:
    """The reduced precisions a verdict that kept every label allows in the conv layers: those its bench's
    configuration ran (impls); TF32 for a file that does not record its variants (it predates FP16 variants, and its
    reduced configuration was then whatever rounded to TF32 fastest)."""
    if impls is None:
        return frozenset({"tf32"})
    precision = {v.name: v.precision for v in variants}
    ran = {precision.get(n) for n in impls}
    return frozenset(p for p in REDUCED_PRECISIONS if p in ran)


def _names(precisions, joiner: str = " and ") -> str:
    return joiner.join(PRECISION_NAMES[p] for p in REDUCED_PRECISIONS if p in precisions)


@dataclass(frozen=True)
class PrecisionDecision:
    convs: frozenset[str]  # the reduced precisions final's conv layers may run (empty: float32 only)
    # the fully connected layers: one of FC_MATHS, or FC_WHERE_WRITTEN (FP16 where the last conv writes half)
    fc_math: str
    why: str  # one line on what decided it


FC_WHERE_WRITTEN = "fp16-where-written"
_FORCED = {"reduced": (REDUCED_PRECISIONS, FC_WHERE_WRITTEN), "reduced-fc-tf32": (REDUCED_PRECISIONS, "tf32"),
           "tf32": (("tf32",), "tf32"), "fc-tf32": ((), "tf32"), "fp32": ((), "fp32")}
_FC_NAMES = {"tf32": "TF32", "fp16": "FP16"}


def fc_math_for(fc: str, choices: Sequence[Choice], variants: Sequence[Variant]) -> str:
    """The FC math a decision's `fc` means for these conv choices: FC_WHERE_WRITTEN is FP16 where the last conv
    layer's variant writes its output in half (a conv before a fully connected layer in the course's networks:
    the GEMM then reads half the bytes, and cuBLAS's FP16 GEMM is the faster at these widths, layers.cuh), else
    TF32, whose cuBLAS kernel is as fast as FP16's on a float32 input and needs no rounding pass first."""
    if fc != FC_WHERE_WRITTEN:
        return fc
    by = {v.name: v for v in variants}
    last = by.get(choices[-1].variant) if choices else None
    return "fp16" if last is not None and last.writes_f16 else "tf32"


def precision_decision(ev: Evidence | None, model_digest: str | None, precision: str = "auto",
                       runs: Sequence[str] | None = None,
                       variants: Sequence[Variant] = ()) -> PrecisionDecision:
    """What final may run in reduced precision, and one line on what decided it.
    variants: the build's, to tell which reduced precisions the verdict's bench ran and which the build could pick.
    runs: the variant per conv layer where final has nothing to choose (a student handout: the student's); the
    verdict then counts only if its bench ran exactly those, as the student's own `invoke bench --end-to-end`
    does."""
    if precision not in PRECISIONS:
        raise PyconvError(f"unknown precision '{precision}' (known: {', '.join(PRECISIONS)})")
    if precision != "auto":
        convs, fc = _FORCED[precision]
        return PrecisionDecision(frozenset(convs), fc, "forced")
    verdict = ev.verdict(model_digest) if ev is not None else None
    if verdict is None:
        return PrecisionDecision(frozenset(), "fp32", "float32: no end-to-end bench of these weights on this GPU has "
                                                      "checked reduced precision")
    if runs is not None:
        mine = ", ".join(dict.fromkeys(runs))
        if verdict.impls is None or tuple(verdict.impls) != tuple(runs):
            ran = (f"ran {', '.join(dict.fromkeys(verdict.impls))}" if verdict.impls is not None
                   else "does not record which variants it ran")
            return PrecisionDecision(frozenset(), "fp32", (
                f"float32, fully connected layers included: the end-to-end bench behind the reduced-precision verdict "
                f"for these weights ({verdict.source}, {verdict.date}) {ran}, not this build's {mine}; `invoke bench "
                "--end-to-end` checks reduced precision with it"))
    if not verdict.reduced_precision_ok:
        return PrecisionDecision(frozenset(), "fp32",
                                 "float32: reduced precision changed labels in the end-to-end bench")
    convs = verdict_precisions(verdict.impls, variants)
    fc = verdict.fc_math if verdict.fc_math in _FC_NAMES else "tf32"  # a file before FC math was recorded: TF32
    with_what = f" with this build's {', '.join(dict.fromkeys(runs))}" if runs is not None else ""
    what = (f"{_names(convs)} conv layers, {_FC_NAMES[fc]} fully connected layers" if convs else
            f"{_FC_NAMES[fc]} fully connected layers, float32 conv layers")
    why = f"reduced precision ({what}) allowed: no label differs from PyTorch's{with_what} (bench of {verdict.date})"
    # a reduced precision this build could pick that the bench never ran: say why final leaves it out
    could = {v.precision for v in variants if v.reduced_precision and v.role("final").choosable}
    if missing := [p for p in REDUCED_PRECISIONS if p in could and p not in convs]:
        names = _names(missing, " or ")
        why += (f"; not {names} conv layers: that bench ran no {names} variant in a configuration that kept every "
                "label (`invoke bench --end-to-end` checks final's fastest reduced plan, then its fully connected "
                "layers in TF32, then TF32 alone, then float32 conv layers)")
    return PrecisionDecision(convs, fc, why)


def plan(milestone: str, sites: Sequence[ConvSite], variants: Sequence[Variant], evidence: Evidence | None = None,
         impl: str | None = None, *, model_digest: str | None = None, precision: str = "auto",
         fallback: bool = False) -> Plan:
    """What `milestone` runs on these conv layers (see the module's docstring for the rules).

    variants: every variant of the build (CPU and GPU); evidence: this GPU's (pyconv.evidence.for_gpu), used by
    final only; model_digest: the weights' digest, for final's precision verdict; precision: 'auto' (decide from
    the evidence), or one of the others in PRECISIONS to force it (the end-to-end bench measures them)."""
    m = milestone_key(milestone)
    device = "cpu" if m == "m2" else "gpu"
    mine = [v for v in variants if v.device == device]
    batch = sites[0].B if sites else 0
    chunks, streams, taper, pieces = pipeline(m, batch) if device == "gpu" else (1, 1, 1.0, 1)
    if impl is not None:
        choices = _impl_choices(variants, m, sites, impl, device, fallback)
        return Plan(m, device, tuple(choices), "fp32", f"float32 (--impl {impl})", chunks, streams, taper,
                    tail_pieces=pieces)
    if m in ("m2", "m3"):
        choices = [_default_choice(mine, m, s, _name(m)) for s in sites]
        return Plan(m, device, tuple(choices), "fp32", "float32, the course's arithmetic", chunks, streams,
                    taper)
    if m == "m4":
        return Plan(m, device, tuple(_m4_choice(mine, s) for s in sites), "fp32", "float32, the course's arithmetic",
                    chunks, streams, taper)
    verdict = evidence.verdict(model_digest) if evidence is not None else None
    if chunks > 1 and verdict is not None:
        # what the end-to-end bench's pipeline sweep measured fastest for these weights
        taper, pieces = verdict.taper, verdict.tail_pieces
    if any(v.role("final").choosable for v in mine):
        d = precision_decision(evidence, model_digest, precision, variants=mine)
        choices = [_final_choice(mine, s, evidence, d.convs) for s in sites]
    else:  # nothing to choose between (a student handout): the student's variant, as milestones 2 to 4 run it
        choices = [_default_choice(mine, "final", s, "final") for s in sites]
        d = precision_decision(evidence, model_digest, precision, runs=[c.variant for c in choices], variants=mine)
    return Plan(m, device, tuple(choices), fc_math_for(d.fc_math, choices, mine), d.why, chunks, streams, taper,
                tail_pieces=pieces, tuned=True)
