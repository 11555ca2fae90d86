"""The inference engine on the GPU: the whole network runs in pyconv._gpu (CUDA C++), a batch goes to the device
once (as uint8) and only the predicted labels come back.

It runs a Plan (pyconv.plan: the variant per conv layer, the FC arithmetic, the pipeline shape) and decides
nothing itself."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import native
from ..core.checks import as_int
from ..core.errors import PyconvError
from ..core.model import Model
from ..plan import FC_MATHS, Plan


@dataclass
class GpuResult:
    labels: np.ndarray
    op_times: list[float] = field(default_factory=list)
    peak_bytes: int = 0
    passes: int = 1


class GpuEngine:
    """`model` on GPU `device`, weights uploaded once; `forward` may be called many times. fc_math: how the fully
    connected layers multiply ('fp32', 'tf32' or 'fp16': the plan's fc_math)."""

    def __init__(self, model: Model, device: int = 0, fc_math: str = "fp32"):
        g = native.gpu()
        self.model = model
        layers = [layer.spec() for layer in model.layers]
        weights = [(layer.weight, layer.bias) for layer in model.layers]
        try:
            self.net = g.Network(layers, weights, tuple(model.input_shape), device)
        except ValueError as e:
            raise PyconvError(f"model '{model.name}' cannot run on the GPU: {e}") from None
        if fc_math not in FC_MATHS:
            raise PyconvError(f"unknown FC math '{fc_math}' (known: {', '.join(FC_MATHS)})")
        self.net.fc_math = fc_math

    def forward(self, x: np.ndarray, impls: list[str], chunks: int = 1, streams: int = 2,
                taper: float = 1.0, tail_pieces: int = 1) -> GpuResult:
        """Labels for x[N][C][H][W] (uint8 or float32); impls: one variant per conv layer; chunks, streams, taper,
        tail_pieces: the pipeline's shape (GpuNetwork.forward)."""
        if isinstance(impls, str):
            raise PyconvError("impls: one variant name per conv layer (a list), got a string")
        if x.dtype not in (np.uint8, np.float32):
            raise PyconvError(f"images must be uint8 or float32, got {x.dtype}")
        if x.shape[1:] != tuple(self.model.input_shape):
            raise PyconvError(f"input images are {x.shape[1:]}, model '{self.model.name}' expects "
                              f"{tuple(self.model.input_shape)}")
        try:
            r = self.net.forward(np.ascontiguousarray(x), list(impls), chunks, streams, taper=taper,
                                 tail_pieces=tail_pieces)
        except (ValueError, RuntimeError) as e:  # RuntimeError: a student's CHECK, or CUDA after their kernel
            raise PyconvError(" ".join(str(e).split())) from None
        return GpuResult(labels=r["labels"], op_times=list(r["op_times"]), peak_bytes=r["peak_bytes"],
                         passes=r["passes"])


def parse_gpus(gpus) -> int:
    """--gpus N|all -> how many GPUs to use (1 <= N <= the GPUs visible)."""
    g = native.gpu()
    visible = g.device_count()
    text = str(gpus).strip().lower()
    if text == "all":
        return visible
    try:
        n = as_int(text)
    except ValueError:
        raise PyconvError(f"--gpus must be a positive integer or 'all', got '{gpus}'") from None
    if n < 1:
        raise PyconvError(f"--gpus must be a positive integer or 'all', got '{gpus}'")
    if n > visible:
        raise PyconvError(f"--gpus {n}: only {visible} GPU(s) visible")
    return n


class MultiGpuEngine:
    """The batch split into contiguous parts across GPUs 0..n-1, one GpuEngine (network, buffers, streams) per
    GPU, run concurrently from host threads (the bindings release the GIL); labels gathered in batch order."""

    def __init__(self, model: Model, gpus: int, fc_math: str = "fp32"):
        from concurrent.futures import ThreadPoolExecutor

        self.model = model
        self.engines = [GpuEngine(model, device=d, fc_math=fc_math) for d in range(gpus)]
        # One host thread per GPU, started once: a sp19 batch takes under a millisecond per GPU, about what
        # starting and joining fresh threads costs.
        self._pool = ThreadPoolExecutor(gpus) if gpus > 1 else None

    def __del__(self):
        if getattr(self, "_pool", None) is not None:
            self._pool.shutdown(wait=True)

    def forward(self, x: np.ndarray, impls: list[str], chunks: int = 1, streams: int = 2,
                taper: float = 1.0, tail_pieces: int = 1) -> GpuResult:
        parts = [p for p in np.array_split(x, len(self.engines)) if len(p)]
        if len(parts) == 1:
            return self.engines[0].forward(parts[0], impls, chunks, streams, taper, tail_pieces)
        results = list(self._pool.map(lambda ep: ep[0].forward(ep[1], impls, chunks, streams, taper, tail_pieces),
                                      zip(self.engines, parts)))
        # The GPUs run each layer at the same time: a layer's op time is the slowest GPU's.
        op_times = [max(ts) for ts in zip(*(r.op_times for r in results))]
        return GpuResult(labels=np.concatenate([r.labels for r in results]), op_times=op_times,
                         peak_bytes=max(r.peak_bytes for r in results), passes=max(r.passes for r in results))


def engine_for(plan: Plan, model: Model, gpus: int = 1) -> GpuEngine | MultiGpuEngine:
    """The engine a GPU plan runs on: its FC arithmetic, on `gpus` GPUs; the plan's tuned tile configurations
    applied first (results/tuning/, where this GPU has them)."""
    if plan.device != "gpu":
        raise PyconvError(f"a {plan.device.upper()} plan cannot run on the GPU")
    if plan.tuned:
        from .. import autotune

        autotune.load_cache(native.gpu().device_info()["name"])
    return MultiGpuEngine(model, gpus, plan.fc_math) if gpus > 1 else GpuEngine(model, fc_math=plan.fc_math)


def run_plan(plan: Plan, engine: GpuEngine | MultiGpuEngine, x: np.ndarray) -> GpuResult:
    """The batch x through `engine` with the plan's variants and pipeline (chunks, streams, taper, tail pieces)."""
    return engine.forward(x, plan.impls, plan.chunks, plan.streams, plan.taper, plan.tail_pieces)
