"""The inference engine on the GPU: the whole network runs in pyconv._gpu (CUDA C++), a batch goes to the device
once (as uint8) and only the predicted labels come back.

Milestone 3 uses the course's baseline kernel (gpu-baseline); milestone 4 and final pick one registry variant per
conv layer through `choose_impls`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import PyconvError
from .model import Model

BASELINE = "gpu-baseline"


def gpu_module():
    """pyconv._gpu, or a PyconvError saying why it cannot be used (not built, or no GPU visible)."""
    try:
        from . import _gpu
    except ImportError as e:
        raise PyconvError(f"the CUDA module pyconv._gpu is not built ({e}); run `invoke build` on a machine "
                          "with nvcc") from None
    if not _gpu.available():
        raise PyconvError("no CUDA GPU is visible: milestone 3 needs one")
    return _gpu


def variant_names() -> list[str]:
    from . import _gpu

    return [v["name"] for v in _gpu.variants()]


def check_impl(impl: str) -> str:
    names = variant_names()
    if impl not in names:
        raise PyconvError(f"unknown GPU implementation '{impl}' (known: {', '.join(names)})")
    return impl


def choose_impls(model: Model, milestone: str, impl: str | None = None) -> list[str]:
    """One registry variant per conv layer for a milestone: the given one, else the baseline everywhere."""
    return [check_impl(impl or BASELINE)] * len(model.convs)


@dataclass
class GpuResult:
    labels: np.ndarray
    op_times: list[float] = field(default_factory=list)
    peak_bytes: int = 0
    passes: int = 1


class GpuEngine:
    """`model` on GPU `device`, weights uploaded once; `forward` may be called many times."""

    def __init__(self, model: Model, device: int = 0):
        g = gpu_module()
        self.model = model
        layers = [layer.spec() for layer in model.layers]
        weights = [(layer.weight, layer.bias) for layer in model.layers]
        try:
            self.net = g.Network(layers, weights, tuple(model.input_shape), device)
        except ValueError as e:
            raise PyconvError(f"model '{model.name}' cannot run on the GPU: {e}") from None

    def forward(self, x: np.ndarray, impls: list[str] | str | None = None, chunks: int = 1,
                streams: int = 2) -> GpuResult:
        """Labels for x[N][C][H][W] (uint8 or float32); impls: one variant per conv layer (or one for all)."""
        if impls is None or isinstance(impls, str):
            impls = choose_impls(self.model, "3", impls)
        if x.dtype not in (np.uint8, np.float32):
            raise PyconvError(f"images must be uint8 or float32, got {x.dtype}")
        if x.shape[1:] != tuple(self.model.input_shape):
            raise PyconvError(f"input images are {x.shape[1:]}, model '{self.model.name}' expects "
                              f"{tuple(self.model.input_shape)}")
        try:
            r = self.net.forward(np.ascontiguousarray(x), list(impls), chunks, streams)
        except ValueError as e:
            raise PyconvError(str(e)) from None
        return GpuResult(labels=r["labels"], op_times=list(r["op_times"]), peak_bytes=r["peak_bytes"],
                         passes=r["passes"])


def run_gpu_milestone(m: str, model: Model, x_uint8: np.ndarray, labels: np.ndarray, impl: str | None = None,
                      gpus: str = "1") -> None:
    """Milestone 3, 4 or final on the GPU: prints 'New Inference', one Op Time per conv layer, Correctness."""
    from .milestones import accuracy, print_result

    if str(gpus).strip() != "1":
        raise PyconvError(f"--gpus {gpus}: this engine runs on one GPU for now (use 1)")
    gpu_module()
    impls = choose_impls(model, m, impl)
    engine = GpuEngine(model)
    print("New Inference", flush=True)
    res = engine.forward(x_uint8, impls)
    print_result(res.op_times, accuracy(res.labels, labels), model.name)
