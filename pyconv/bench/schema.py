"""The bench's JSON (format "pyconv-bench", version 1) as typed records: what `invoke bench` writes and what the
report and the evidence file read. `BenchResult.from_dict` reads a file's dict (files written before a field
existed load with that field None or empty); the bench checks every result it writes against it.

The layout (every time in milliseconds unless the key says seconds):
  BenchResult: format, version, parts, date, commit, host_cpu, gpu, driver, cuda_driver_api, cuda_runtime, torch,
               settings, roofline, layers [LayerResult], cpu [CpuRow], end_to_end [EndToEnd], sweep [Sweep],
               goals [Goal], host_load
  LayerResult: the conv layer (model, arch, layer, B C H W M K, tanh_pool_follows), its flops, bytes and roofline
               floor, one VariantRow per variant, cuDNN's times, the best variants
  EndToEnd:    one model through the whole network: pyconv's final configuration (Measured), PyTorch's, the
               precision verdict (model_digest, reduced_precision_ok) and the multi-GPU scaling
  Sweep:       `invoke bench --sweep`: drawn layer shapes, one SweepRow per shape without and with tanh +
               max-pool 2/2 (every variant's time or why none, the best, cuDNN FP32, TF32 and FP16, the ratios, cuDNN
               FP32's kernels and algorithm), and
               one SweepSummary per comparison (worst and geometric mean of cuDNN ms / our ms)"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..core.errors import PyconvError
from ..core.fileio import read_json

FORMAT = "pyconv-bench"
VERSION = 1


def _conv(fn: Callable[[Any], Any]):
    return {"conv": fn}


def _list_of(cls):
    return lambda items: [cls.from_dict(x) for x in items]


# Fields that hold a time or a count of images: a measurement is never negative or zero, and one that is would be
# published as if real (a speed-up from a negative time, a log of it). Any other number must at least be finite.
_POSITIVE = {"median", "min", "p90", "mean", "warm_ms", "ms", "B", "batch", "cudnn_fp32_ms", "cudnn_tf32_ms",
             "cudnn_fp16_ms", "images_per_s"}
_SCALARS = {"str": str, "int": int, "float": (int, float), "bool": bool}


def _check_value(cls_name: str, name: str, annotation: str, v) -> None:
    """A JSON value against the field's declared scalar type (`float | None`, `int`, `str`, ...): one line naming
    the record and the field where it is of another type, not finite, or (a time, a batch) not positive.
    Containers and nested records are left to their own checks."""
    kinds = [k.strip() for k in str(annotation).split("|")]
    if v is None and "None" in kinds:
        return
    scalars = [k for k in kinds if k in _SCALARS]
    if not scalars or len(scalars) != len([k for k in kinds if k != "None"]):
        return  # a list, a dict, a nested record
    ok = any(isinstance(v, _SCALARS[k]) and (k == "bool" or not isinstance(v, bool)) for k in scalars)
    if not ok:
        raise PyconvError(f"{cls_name}: '{name}' must be {' or '.join(scalars)}, got {type(v).__name__} {v!r:.40}")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if not math.isfinite(v):
            raise PyconvError(f"{cls_name}: '{name}' must be a finite number, got {v}")
        if name in _POSITIVE and v <= 0:
            raise PyconvError(f"{cls_name}: '{name}' must be positive, got {v}")


class Record:
    """from_dict for a dataclass: each field from the key of its name, checked against its declared type
    (_check_value); a field whose metadata has `conv` is built by it (a nested record); keys the record does not
    name are ignored."""

    @classmethod
    def from_dict(cls, d: dict):
        if not isinstance(d, dict):
            raise PyconvError(f"{cls.__name__}: expected an object, got {type(d).__name__}")
        kw = {}
        for f in fields(cls):
            if f.name not in d:
                if f.default is MISSING and f.default_factory is MISSING:
                    raise PyconvError(f"{cls.__name__}: no '{f.name}'")
                continue
            v = d[f.name]
            conv = f.metadata.get("conv")
            if conv is None:
                _check_value(cls.__name__, f.name, f.type, v)
            kw[f.name] = conv(v) if conv is not None and v is not None else v
        return cls(**kw)


@dataclass(frozen=True)
class Stats(Record):
    """A timing summary, or the error that prevented it."""

    median: float | None = None
    min: float | None = None
    p90: float | None = None
    reps: int | None = None
    images_per_s: float | None = None
    error: str | None = None
    # Measured by NVBench (pyconv.bench.nvbench; files before it, or the CUDA-events fallback: None): median, min and
    # p90 are of the cold samples (L2 flushed before each); mean and noise (relative standard deviation, %) as
    # NVBench reports them; warm_ms the mean of its batched back-to-back launches; the mean and lowest SM clock.
    method: str | None = None
    mean: float | None = None
    noise_pct: float | None = None
    warm_ms: float | None = None
    warm_reps: int | None = None
    sm_clock_mhz: float | None = None
    sm_clock_mhz_min: float | None = None
    # True where NVBench's per-sample file was not read and `median` holds its mean (the files of 2026-11-23,
    # written before the sample files' summary tags were read right, are such: their rows have no p90)
    median_is_mean: bool = False


@dataclass(frozen=True)
class Check(Record):
    passed: bool
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    rtol: float | None = None
    atol: float | None = None
    why: str | None = None
    images_checked: int | None = None
    where: list | None = None  # the index of the worst element (files before it was recorded: None)


@dataclass(frozen=True)
class VariantRow(Record):
    variant: str
    step: int | None = None
    summary: str = ""
    epilogue: str = "none"
    precision: str | None = None  # fp32, tf32 or fp16 (files before it was recorded: None)
    x_on_host: bool = False
    check: Check | None = field(default=None, metadata=_conv(Check.from_dict))
    ms: Stats | None = field(default=None, metadata=_conv(Stats.from_dict))
    tanh_pool_ms: Stats | None = field(default=None, metadata=_conv(Stats.from_dict))
    # A variant that reads uint8 images (a first layer): that path checked and timed as well (the network's way)
    u8_check: Check | None = field(default=None, metadata=_conv(Check.from_dict))
    u8_ms: Stats | None = field(default=None, metadata=_conv(Stats.from_dict))
    u8_skipped: str | None = None
    gflops: float | None = None
    gbps: float | None = None
    pct_roofline: float | None = None
    tanh_pool_pct_roofline: float | None = None
    x_cudnn: float | None = None
    tanh_pool_x_cudnn: float | None = None
    # the cuDNN mode x_cudnn is against where it is not float32: "tf32" or "fp16", the faster of cuDNN's reduced
    # modes, for a variant that rounds (pyconv.bench.gpu_layers.reduced_yardstick); None: cuDNN FP32
    cudnn_mode: str | None = None
    skipped: str | None = None
    error: str | None = None

    @property
    def pools(self) -> bool:
        return self.epilogue == "tanh-maxpool2"

    @property
    def passed(self) -> bool:
        return bool(self.check and self.check.passed)

    def as_run(self, float_ms: Stats | None) -> Stats | None:
        """What the network pays for this variant where the bench's float32 timing is `float_ms`: on a first layer
        whose uint8 path the bench checked, the network feeds the variant its raw uint8 images, so that path's time
        counts (None when its check failed: a failed uint8 path is never counted, nor its float32 time); every
        other variant is fed float32 images (widened in a pass of their own) and pays `float_ms`."""
        if self.u8_check is None:
            return float_ms
        return self.u8_ms if self.u8_check.passed else None


@dataclass(frozen=True)
class Best(Record):
    variant: str
    ms: float
    tanh_pool: bool = False
    x_cudnn: float | None = None
    cudnn_mode: str | None = None  # x_cudnn against cuDNN "tf32" or "fp16" (a variant that rounds); None: FP32
    u8: bool = False  # the time is of the uint8 path (LayerResult.best_as_run; the bench's `best` never is)


@dataclass(frozen=True)
class Cudnn(Record):
    source: str = ""
    conv_ms: Stats | None = field(default=None, metadata=_conv(Stats.from_dict))
    conv_tanh_pool_ms: Stats | None = field(default=None, metadata=_conv(Stats.from_dict))
    error: str | None = None


@dataclass(frozen=True)
class LayerResult(Record):
    model: str
    layer: str
    B: int
    C: int
    H: int
    W: int
    M: int
    K: int
    arch: str = ""
    tanh_pool_follows: bool = False
    flops: int = 0
    bytes: int = 0
    floor_ms: float = 0.0
    bytes_pooled: int | None = None
    floor_tanh_pool_ms: float | None = None
    variants: list[VariantRow] = field(default_factory=list, metadata=_conv(_list_of(VariantRow)))
    cudnn: Cudnn = field(default_factory=Cudnn, metadata=_conv(Cudnn.from_dict))
    cudnn_tf32: Cudnn | None = field(default=None, metadata=_conv(Cudnn.from_dict))  # where measured
    cudnn_fp16: Cudnn | None = field(default=None, metadata=_conv(Cudnn.from_dict))  # where measured (newer files)
    best_conv: Best | None = field(default=None, metadata=_conv(Best.from_dict))
    best_conv_tanh_pool: Best | None = field(default=None, metadata=_conv(Best.from_dict))
    best: Best | None = field(default=None, metadata=_conv(Best.from_dict))

    @property
    def best_as_run(self) -> Best | None:
        """`best` as the network runs the layer: the same choice (the fastest passing plain conv or conv + tanh +
        pool), except that on a first layer a variant whose uint8 path the bench checked counts by that path alone
        (VariantRow.as_run; conv + tanh + pool where they follow). `best` stays the float32 figure, the one to set
        beside cuDNN's on the same float32 input."""
        if not any(v.u8_check is not None for v in self.variants):
            return self.best
        cands = []
        for v in self.variants:
            if v.u8_check is not None:
                s = v.as_run(v.ms)
                if s is not None and s.median is not None:
                    cands.append(Best(v.variant, s.median, v.pools or self.tanh_pool_follows, u8=True))
                continue
            if v.ms is not None and v.ms.median is not None:
                cands.append(Best(v.variant, v.ms.median, v.pools))
            if v.tanh_pool_ms is not None and v.tanh_pool_ms.median is not None:
                cands.append(Best(v.variant + " + tanh + pool", v.tanh_pool_ms.median, True))
        return min(cands, key=lambda b: b.ms) if cands else None  # min keeps the first of a tie: ladder order

    @property
    def key(self) -> tuple[int, int, int, int, int, bool]:
        return self.C, self.H, self.W, self.M, self.K, self.tanh_pool_follows

    @property
    def shape_key(self) -> tuple[int, int, int, int, int]:
        return self.C, self.H, self.W, self.M, self.K


@dataclass(frozen=True)
class CpuRow(Record):
    model: str
    layer: str
    C: int
    H: int
    W: int
    M: int
    K: int
    B: int
    variant: str
    threads: int = 1
    flops: int = 0
    check: Check | None = field(default=None, metadata=_conv(Check.from_dict))
    skipped: str | None = None
    s: Stats | None = field(default=None, metadata=_conv(Stats.from_dict))
    gflops: float | None = None
    x_torch: float | None = None


@dataclass(frozen=True)
class PipelineRow(Record):
    chunks: int
    streams: int
    pinned_ms: Stats = field(metadata=_conv(Stats.from_dict))
    taper: float = 1.0  # each part `taper` times the one before (files before it had equal parts only)
    tail_pieces: int = 1  # the last part's copy in pieces (files before it: one)


@dataclass(frozen=True)
class Measured(Record):
    """One configuration of the project's GPU engine on a whole network."""

    resident_ms: Stats | None = field(default=None, metadata=_conv(Stats.from_dict))
    pinned_ms: Stats | None = field(default=None, metadata=_conv(Stats.from_dict))
    pageable_ms: Stats | None = field(default=None, metadata=_conv(Stats.from_dict))
    # pinned_ms without per-layer timing (files before it have none: their pinned_ms had the op-time events)
    pinned_op_times_ms: Stats | None = field(default=None, metadata=_conv(Stats.from_dict))
    pinned_trace: dict | None = None  # one pinned call under a CUPTI trace (pyconv.bench.end_to_end.trace_pass)
    # pinned calls' host clock beside their GPU span, no trace (pyconv.bench.end_to_end.span_pass; files before it
    # have none)
    pinned_span: dict | None = None
    correctness: float | None = None
    pinned_correctness: float | None = None
    passes: int | None = None
    peak_device_bytes: int | None = None
    pipeline: list[PipelineRow] = field(default_factory=list, metadata=_conv(_list_of(PipelineRow)))
    differ_vs_pytorch: int | None = None
    impls: list[str] | None = None  # in the rejected candidates ("pyconv_reduced", "pyconv_tf32", ...) only
    fc_math: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class TorchEndToEnd(Record):
    source: str = ""
    name: str = "eager-fp32"
    resident_ms: Stats | None = field(default=None, metadata=_conv(Stats.from_dict))
    pinned_ms: Stats | None = field(default=None, metadata=_conv(Stats.from_dict))
    pageable_ms: Stats | None = field(default=None, metadata=_conv(Stats.from_dict))
    correctness: float | None = None
    peak_device_bytes: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class Yardstick(Record):
    """One torch.compile configuration of the PyTorch network (pyconv.bench.end_to_end.torch_config); `error`
    ("unavailable: <why>") when it could not compile or run."""

    name: str
    mode: str = ""
    source: str = ""
    compile_s: float | None = None
    resident_ms: Stats | None = field(default=None, metadata=_conv(Stats.from_dict))
    pinned_ms: Stats | None = field(default=None, metadata=_conv(Stats.from_dict))
    pageable_ms: Stats | None = field(default=None, metadata=_conv(Stats.from_dict))
    correctness: float | None = None
    labels_moved: int | None = None  # against eager float32 PyTorch
    peak_device_bytes: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class ScalingRow(Record):
    gpus: int
    pinned_ms: Stats = field(metadata=_conv(Stats.from_dict))
    correctness: float | None = None
    speedup: float | None = None


# The end-to-end bench's reduced-precision candidates (pyconv.plan precisions), in the order it measures them
# (pyconv.bench.end_to_end), and the key of an entry that keeps a rejected one.
REDUCED_CANDIDATES = ("reduced", "reduced-fc-tf32", "tf32", "fc-tf32")


def candidate_key(precision: str) -> str:
    return "pyconv_" + precision.replace("-", "_")


@dataclass(frozen=True)
class EndToEnd(Record):
    model: str
    batch: int
    pyconv: Measured = field(metadata=_conv(Measured.from_dict))
    arch: str = ""
    model_digest: str | None = None
    input: str = ""
    chunks: int | None = None
    streams: int | None = None
    taper: float = 1.0  # final's parts, each `taper` times the one before (files before it: equal parts)
    tail_pieces: int = 1  # final's last part copied in pieces (files before it: one)
    impls: list[str] = field(default_factory=list)
    fc_math: str | None = None
    pytorch: TorchEndToEnd = field(default_factory=TorchEndToEnd, metadata=_conv(TorchEndToEnd.from_dict))
    reduced_precision_ok: bool | None = None  # None: no verdict (no PyTorch to compare with)
    pyconv_reduced: Measured | None = field(default=None, metadata=_conv(Measured.from_dict))
    # the later candidates (REDUCED_CANDIDATES), where they too moved a label (the one that kept them all is
    # "pyconv"): the reduced plan with TF32 fully connected layers; TF32 alone; float32 conv layers with TF32 fully
    # connected layers
    pyconv_reduced_fc_tf32: Measured | None = field(default=None, metadata=_conv(Measured.from_dict))
    pyconv_tf32: Measured | None = field(default=None, metadata=_conv(Measured.from_dict))
    pyconv_fc_tf32: Measured | None = field(default=None, metadata=_conv(Measured.from_dict))
    x_pytorch: dict[str, float] = field(default_factory=dict)
    multi_gpu: list[ScalingRow] = field(default_factory=list, metadata=_conv(_list_of(ScalingRow)))
    copy_floor_ms: Stats | None = field(default=None, metadata=_conv(Stats.from_dict))  # the uint8 batch, pinned H2D
    yardsticks: list[Yardstick] = field(default_factory=list, metadata=_conv(_list_of(Yardstick)))

    @property
    def rejected(self) -> list[Measured]:
        """The reduced candidates that moved a label, in the order they were measured."""
        return [r for r in (getattr(self, candidate_key(p)) for p in REDUCED_CANDIDATES) if r is not None]

    def pytorch_configs(self) -> list[tuple[str, TorchEndToEnd | Yardstick]]:
        """Every PyTorch configuration measured (eager float32 first, then the torch.compile ones)."""
        return [("eager-fp32", self.pytorch), *((y.name, y) for y in self.yardsticks)]


@dataclass(frozen=True)
class SweepVariant(Record):
    """One variant on one sweep row: its median time (conv + tanh + pool in a row with them: a fusing variant's
    launch, any other's conv followed by the shared max-pool + tanh kernel), or why it has none."""

    variant: str
    precision: str = "fp32"
    ms: float | None = None
    skipped: str | None = None  # does not take the shape
    failed: str | None = None  # failed the correctness check: not timed
    error: str | None = None  # raised while checked or timed


@dataclass(frozen=True)
class SweepBest(Record):
    variant: str
    ms: float
    precision: str = "fp32"


@dataclass(frozen=True)
class SweepRow(Record):
    shape: str  # "s07": the drawn shape's name, the same in its two rows
    B: int
    C: int
    H: int
    W: int
    M: int
    K: int
    tanh_pool: bool
    variants: list[SweepVariant] = field(default_factory=list, metadata=_conv(_list_of(SweepVariant)))
    best: SweepBest | None = field(default=None, metadata=_conv(SweepBest.from_dict))  # of all, reduced included
    best_fp32: SweepBest | None = field(default=None, metadata=_conv(SweepBest.from_dict))
    cudnn_fp32_ms: float | None = None
    cudnn_tf32_ms: float | None = None
    cudnn_fp16_ms: float | None = None  # files before cuDNN FP16 was measured: None
    x_cudnn_fp32: float | None = None  # cuDNN FP32 ms / best_fp32 ms
    # the reduced comparison (the key keeps its first name): cuDNN's faster reduced mode / best ms, that mode in
    # x_cudnn_reduced_mode ("tf32" or "fp16"; None in files before cuDNN FP16 was measured: TF32)
    x_cudnn_tf32: float | None = None
    x_cudnn_reduced_mode: str | None = None
    cudnn_error: str | None = None
    # the kernels cuDNN FP32's conv launched and the algorithm family they show (pyconv.bench.sweep.cudnn_algorithm:
    # "FFT", "Winograd", "direct", "implicit GEMM", "GEMM", "other"); files before they were recorded: None
    cudnn_fp32_kernels: list[str] | None = None
    cudnn_fp32_algorithm: str | None = None
    cudnn_fp32_kernels_error: str | None = None  # why the profiler recorded none


@dataclass(frozen=True)
class SweepSummary(Record):
    comparison: str  # "fp32", or "tf32": the reduced comparison (against cuDNN's faster of TF32 and FP16)
    title: str
    rows: int  # rows with both times
    missing: int  # rows without one of them
    worst: float | None = None
    worst_row: str = ""
    geomean: float | None = None


def shape_label(shape: str, C: int, H: int, W: int, M: int, K: int, tanh_pool: bool = False) -> str:
    """How a sweep row is named in a SweepSummary and in the report: "s08 C=11 31x31 M=27 K=5 [+ tanh + pool]"."""
    return f"{shape} C={C} {H}x{W} M={M} K={K}" + (" + tanh + pool" if tanh_pool else "")


def worst_and_geomean(pairs: list[tuple[float, Any]]) -> tuple[float, Any, float]:
    """A SweepSummary's figures from (ratio, row) pairs (at least one): the worst ratio, its row, and the geometric
    mean of the ratios (the sweep's summary, and the report's per-algorithm rows)."""
    worst, wrow = min(pairs, key=lambda p: p[0])
    return worst, wrow, math.exp(sum(math.log(x) for x, _ in pairs) / len(pairs))


@dataclass(frozen=True)
class Sweep(Record):
    seed: int
    batch: int
    warmup: int
    reps: int
    ranges: dict = field(default_factory=dict)
    inputs: str = ""  # files before it was recorded: ""
    timing: str = ""
    cudnn_source: str = ""
    rows: list[SweepRow] = field(default_factory=list, metadata=_conv(_list_of(SweepRow)))
    summary: list[SweepSummary] = field(default_factory=list, metadata=_conv(_list_of(SweepSummary)))
    seconds: float | None = None


@dataclass(frozen=True)
class Goal(Record):
    name: str
    target: str
    measured: float | None
    unit: str
    met: bool | None
    note: str = ""


@dataclass(frozen=True)
class GpuInfo(Record):
    name: str
    compute_capability: str = "?"
    multiprocessors: int | None = None


@dataclass(frozen=True)
class HostCpu(Record):
    model: str = "unknown"
    cores: int | None = None


@dataclass(frozen=True)
class HostLoad(Record):
    start: float | None = None
    end: float | None = None


@dataclass(frozen=True)
class TorchInfo(Record):
    version: str
    cuda: str | None = None
    cudnn: int | None = None


@dataclass(frozen=True)
class Roofline(Record):
    copy_GBps: float
    fma_GFLOPs: float
    sgemm_GFLOPs: float
    fp32_GFLOPs: float
    fp32_source: str = ""
    copy_bytes: int | None = None


@dataclass(frozen=True)
class Settings(Record):
    models: list[str] = field(default_factory=list)
    batch: int | None = None
    warmup: int | None = None
    inputs: str = "?"
    check_images: int | None = None
    seed: int | None = None
    gpu_reps: int | None = None
    cpu_reps: int | None = None
    cpu_warmup: int | None = None
    cpu_threads: int | None = None
    cpu_naive_batch: int | None = None  # the batch of single-thread CPU variants (the key predates the field)
    gpus: int | None = None
    variants: list[str] | None = None  # the --variants subset (None: every variant of the build)
    timing: dict | None = None  # how GPU op times were taken: {"method": "nvbench" | "cuda-events", ...}
    compiled: list[str] | None = None  # the models given the torch.compile yardsticks


@dataclass(frozen=True)
class BenchResult(Record):
    date: str
    parts: list[str] = field(default_factory=list)
    format: str = FORMAT
    version: int = VERSION
    commit: str | None = None
    host_cpu: HostCpu = field(default_factory=HostCpu, metadata=_conv(HostCpu.from_dict))
    gpu: GpuInfo | None = field(default=None, metadata=_conv(GpuInfo.from_dict))
    driver: str | None = None
    cuda_driver_api: str | None = None
    cuda_runtime: str | None = None
    torch: TorchInfo | None = field(default=None, metadata=_conv(TorchInfo.from_dict))
    settings: Settings = field(default_factory=Settings, metadata=_conv(Settings.from_dict))
    roofline: Roofline | None = field(default=None, metadata=_conv(Roofline.from_dict))
    layers: list[LayerResult] = field(default_factory=list, metadata=_conv(_list_of(LayerResult)))
    cpu: list[CpuRow] = field(default_factory=list, metadata=_conv(_list_of(CpuRow)))
    end_to_end: list[EndToEnd] = field(default_factory=list, metadata=_conv(_list_of(EndToEnd)))
    sweep: Sweep | None = field(default=None, metadata=_conv(Sweep.from_dict))
    goals: list[Goal] = field(default_factory=list, metadata=_conv(_list_of(Goal)))
    host_load: HostLoad | None = field(default=None, metadata=_conv(HostLoad.from_dict))

    @classmethod
    def parse(cls, doc, where: str = "benchmark result") -> BenchResult:
        """A checked record from a JSON document; PyconvError (one line) when it is not a pyconv-bench v1 one."""
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
            raise PyconvError(f"{where} is not a {FORMAT} v{VERSION} file")
        try:
            return cls.from_dict(doc)
        except PyconvError as e:
            raise PyconvError(f"{where} is malformed: {e}") from None
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise PyconvError(f"{where} is malformed: {type(e).__name__} {e}") from None


MAX_FILE_BYTES = 64 << 20  # the largest bench file in results/ is under 100 KB


def load(path: str | os.PathLike) -> BenchResult:
    """A bench JSON file as a record; one-line errors for a missing, unreadable or foreign file. It is read up to
    MAX_FILE_BYTES (a device or a FIFO not at all)."""
    path = Path(path)
    if not path.exists():
        raise PyconvError(f"benchmark file {path} does not exist (run `invoke bench`)")
    doc = read_json(path, MAX_FILE_BYTES, "benchmark file")
    return BenchResult.parse(doc, str(path))
