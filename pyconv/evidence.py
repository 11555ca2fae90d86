"""What `final` chooses from: one file per GPU, results/evidence/<gpu-slug>.json, written by `invoke bench`
(pyconv.bench.evidence) from its own measurements.

- layers: per conv layer shape (C, H, W, M, K, whether tanh + max-pool 2/2 follow), the variants whose correctness
  check passed, fastest first, with the median time the choice compared (conv + tanh + pool where they follow:
  a fusing variant's one launch against any other variant followed by the shared max-pool + tanh kernel).
- precision: per model digest (the exact weights), whether the end-to-end bench found the reduced-precision
  configuration (conv variants rounding to TF32 or FP16, fully connected layers in cuBLAS TF32) leaving every label
  equal to PyTorch's float32 network, and the variant per conv layer that configuration ran (`impls`; null in files
  written before it was recorded): the verdict allows FP16 only where those ran an FP16 variant, and a build whose
  final runs other variants (a student handout's, which runs the student's) did not earn it (pyconv.plan).
- first use: a layer shape `final` met with no evidence on this GPU is measured then and there (pyconv.measure:
  the bench's check and timing on the candidates final may choose) and its ranking is added here, each timing's
  source FIRST_USE; `invoke bench` measuring the shape later replaces it, `invoke evidence` keeps it.
- fallback_order: every measured variant, the one closest to the fastest over all measured shapes first (the
  geometric mean of its time over the fastest time per shape): what a shape nobody measured falls back to.

A GPU without a file of its own uses the STANDIN_GPU's measurements for the variant per layer (the plan's why-line
says so) and none of its precision verdicts: reduced precision is allowed only by an end-to-end bench on the GPU
itself."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from .core import paths
from .core.errors import PyconvError
from .core.fileio import atomic_path, read_json

FORMAT = "pyconv-evidence"
VERSION = 1
# The GPU whose measurements stand in for a GPU never benchmarked: the one the project was measured on.
STANDIN_GPU = "NVIDIA H200"

# The source of a timing `final` measured itself, on first meeting the layer shape (pyconv.measure).
FIRST_USE = "measured by final on first use"

ShapeKey = tuple[int, int, int, int, int, bool]  # C, H, W, M, K, tanh_pool_follows


@dataclass(frozen=True)
class Timing:
    variant: str
    ms: float  # median; conv + tanh + pool where the layer has them
    date: str
    source: str  # the bench JSON it came from (a name in results/), or FIRST_USE

    @property
    def first_use(self) -> bool:
        return self.source == FIRST_USE


@dataclass(frozen=True)
class LayerEvidence:
    C: int
    H: int
    W: int
    M: int
    K: int
    tanh_pool_follows: bool
    B: int  # the batch it was measured at
    ranking: tuple[Timing, ...]  # passing variants, fastest first

    @property
    def key(self) -> ShapeKey:
        return self.C, self.H, self.W, self.M, self.K, self.tanh_pool_follows


@dataclass(frozen=True)
class Verdict:
    model: str
    model_digest: str
    reduced_precision_ok: bool
    date: str  # the end-to-end bench's date
    source: str
    differ_vs_pytorch: int | None = None
    # the conv variant per layer of the configuration checked (the reduced candidate); None: not recorded (files
    # written before it was), which no build's own variants can claim
    impls: tuple[str, ...] | None = None
    # how that configuration's fully connected layers multiplied (FC_MATHS); None: not recorded (TF32 then)
    fc_math: str | None = None
    # the pipeline taper final runs these weights with: the same run's sweep (pyconv.bench.evidence.pipeline_shape);
    # 1 (equal parts) where the file does not record it
    taper: float = 1.0
    # the pieces final copies its last part in: the same run's sweep (pyconv.bench.evidence.pipeline_shape; never
    # beside a taper other than 1); 1 where the file does not record it
    tail_pieces: int = 1


@dataclass
class Evidence:
    gpu: str
    layers: dict[ShapeKey, LayerEvidence] = field(default_factory=dict)
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    fallback_order: tuple[str, ...] = ()
    path: Path | None = None  # the file it was read from
    standin_for: str | None = None  # set when these are STANDIN_GPU's measurements used for another GPU
    measured_now: frozenset = frozenset()  # shape keys measured by this process (pyconv.measure); not in the file

    def ranking(self, key: ShapeKey) -> tuple[Timing, ...]:
        layer = self.layers.get(key)
        return layer.ranking if layer else ()

    def verdict(self, model_digest: str | None) -> Verdict | None:
        """The precision verdict for these weights on this GPU (never one measured on a stand-in GPU)."""
        if self.standin_for is not None or not model_digest:
            return None
        return self.verdicts.get(model_digest)

    def where(self) -> str:
        """The file, as the why-lines name it."""
        if self.path is None:
            return "evidence in memory"
        try:
            return str(self.path.resolve().relative_to(paths.ROOT))
        except ValueError:
            return str(self.path)

    # ------------------------------------------------------------------------------------------- the file
    def to_json(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "gpu": self.gpu,
                "layers": [{"C": e.C, "H": e.H, "W": e.W, "M": e.M, "K": e.K,
                            "tanh_pool_follows": e.tanh_pool_follows, "B": e.B,
                            "ranking": [{"variant": t.variant, "ms": t.ms, "date": t.date, "source": t.source}
                                        for t in e.ranking]}
                           for _, e in sorted(self.layers.items())],
                "precision": [{"model": v.model, "model_digest": v.model_digest,
                               "reduced_precision_ok": v.reduced_precision_ok, "date": v.date, "source": v.source,
                               "differ_vs_pytorch": v.differ_vs_pytorch,
                               "impls": None if v.impls is None else list(v.impls), "fc_math": v.fc_math,
                               "taper": v.taper, "tail_pieces": v.tail_pieces}
                              for _, v in sorted(self.verdicts.items(), key=lambda kv: (kv[1].model, kv[0]))],
                "fallback_order": list(self.fallback_order)}

    @classmethod
    def from_json(cls, doc: dict, path: Path | None = None) -> Evidence:
        where = path or "evidence"
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
            raise PyconvError(f"{where} is not a {FORMAT} v{VERSION} file")
        try:
            layers = {}
            for e in doc["layers"]:
                le = LayerEvidence(int(e["C"]), int(e["H"]), int(e["W"]), int(e["M"]), int(e["K"]),
                                   bool(e["tanh_pool_follows"]), _positive(e["B"], "B", int),
                                   tuple(Timing(str(t["variant"]), _positive(t["ms"], "ms"), str(t["date"]),
                                                str(t["source"])) for t in e["ranking"]))
                layers[le.key] = le
            verdicts = {}
            for v in doc["precision"]:
                d, impls, fc = v.get("differ_vs_pytorch"), v.get("impls"), v.get("fc_math")
                if fc is not None and not isinstance(fc, str):
                    raise TypeError(f"precision 'fc_math' must be a string, got {fc!r}")
                if impls is not None and not (isinstance(impls, list) and all(isinstance(n, str) for n in impls)):
                    raise TypeError(f"precision 'impls' must be a list of variant names, got {impls!r}")
                taper = float(v.get("taper", 1.0))
                if not 0 < taper <= 4:
                    raise ValueError(f"precision 'taper' must be in (0, 4], got {taper!r}")
                pieces = v.get("tail_pieces", 1)
                if not (isinstance(pieces, int) and not isinstance(pieces, bool) and 1 <= pieces <= 64):
                    raise ValueError(f"precision 'tail_pieces' must be an integer in 1..64, got {pieces!r}")
                verdicts[str(v["model_digest"])] = Verdict(str(v["model"]), str(v["model_digest"]),
                                                           bool(v["reduced_precision_ok"]), str(v["date"]),
                                                           str(v["source"]), None if d is None else int(d),
                                                           None if impls is None else tuple(impls), fc, taper,
                                                           pieces)
            return cls(gpu=str(doc["gpu"]), layers=layers, verdicts=verdicts,
                       fallback_order=tuple(str(n) for n in doc["fallback_order"]), path=path)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
            raise PyconvError(f"{where} is malformed: {type(e).__name__} {e}") from None


def _positive(v, name: str, kind=float):
    """A time or a batch from the file: a finite positive number (NaN, inf, 0 or less would reach final's choice
    and `invoke plan`'s reasons as if measured)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0 or \
            (kind is int and v != int(v)):
        raise ValueError(f"'{name}' must be a finite positive {'integer' if kind is int else 'number'}, got {v!r}")
    return kind(v)


def path_for(gpu_name: str, folder: str | os.PathLike | None = None) -> Path:
    """The GPU's evidence file in `folder`; by default the one `invoke bench` wrote, else the shipped one."""
    name = f"{paths.slug(gpu_name)}.json"
    if folder is not None:
        return Path(folder) / name
    own = paths.EVIDENCE / name
    return own if own.exists() or not (paths.SHIPPED_EVIDENCE / name).exists() else paths.SHIPPED_EVIDENCE / name


MAX_FILE_BYTES = 64 << 20  # an evidence file is kilobytes


def load(path: str | os.PathLike) -> Evidence:
    try:
        return Evidence.from_json(read_json(path, MAX_FILE_BYTES, "evidence file"), Path(path))
    except PyconvError as e:
        raise PyconvError(f"{e} (`invoke evidence` rebuilds it from the bench results; `final` measures again "
                          "the shapes it lacks)") from None


def for_gpu(gpu_name: str, folder: str | os.PathLike | None = None) -> Evidence | None:
    """This GPU's evidence; else STANDIN_GPU's, marked as standing in (standin_for = gpu_name); else None."""
    own = path_for(gpu_name, folder)
    if own.exists():
        return load(own)
    standin = path_for(STANDIN_GPU, folder)
    if gpu_name != STANDIN_GPU and standin.exists():
        return replace(load(standin), standin_for=gpu_name)
    return None


def save(ev: Evidence, path: str | os.PathLike) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(ev.to_json(), indent=1) + "\n")
    return path
