"""The inference engine: the network runs layer by layer with a convolution implementation chosen by name.

CPU implementations ("numpy", and the native "cpu-naive", "cpu-fast") run the whole network on the host, the
other layers in numpy. GPU implementations run the whole network on the device (see gpu_engine.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..core import reference
from ..core.errors import PyconvError
from ..core.model import ACTIVATIONS, Model

ConvFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


def cpu_module():
    try:
        from .. import _cpu
    except ImportError as e:
        raise PyconvError(f"the native CPU module is not built ({e}); run `invoke build`") from None
    return _cpu


def cpu_conv_impls() -> dict[str, ConvFn]:
    """Every host convolution by name: the numpy reference and the native CPU registry."""
    impls: dict[str, ConvFn] = {"numpy": reference.conv2d}
    try:
        from .. import _cpu
    except ImportError:
        return impls
    for v in _cpu.variants():
        impls[v["name"]] = lambda x, k, out=None, _n=v["name"]: _cpu.conv(_n, x, k, out)
    return impls


@dataclass
class Result:
    """What one forward pass returns: predicted labels and the per-conv-layer op times in seconds."""

    labels: np.ndarray
    op_times: list[float] = field(default_factory=list)
    probabilities: np.ndarray | None = None


def forward_cpu(model: Model, x: np.ndarray, impl: str = "cpu-fast") -> Result:
    """Run `model` on x[B][C][H][W] (float32) with host convolution `impl`; each conv layer is timed alone."""
    impls = cpu_conv_impls()
    if impl not in impls:
        raise PyconvError(f"unknown CPU implementation '{impl}' (known: {', '.join(impls)})")
    conv = impls[impl]
    if x.shape[1:] != tuple(model.input_shape):
        raise PyconvError(f"input images are {x.shape[1:]}, model '{model.name}' expects {model.input_shape}")
    a = np.ascontiguousarray(x, dtype=np.float32)
    op_times = []
    for layer in model.layers:
        if layer.type == "conv":
            # As in the course's framework (its executor plans and allocates every output before forward runs),
            # the output exists before the op is timed: allocated and filled with NaN, which also makes an element
            # the kernel forgets visible. The first touch of a fresh 464 MB buffer cost ~0.4 s here, seven times
            # the convolution itself. (The numpy reference allocates its own result inside the timed call.)
            b, _, h, w = a.shape
            kk = layer.weight.shape[-1]
            out = None
            if impl != "numpy":
                out = np.empty((b, layer.out_channels, h - kk + 1, w - kk + 1), np.float32)
                out.fill(np.nan)
            t0 = time.perf_counter()
            a = conv(a, layer.weight) if out is None else conv(a, layer.weight, out)
            op_times.append(time.perf_counter() - t0)
        elif layer.type in ACTIVATIONS:
            a = reference.activation(a, layer.type).astype(np.float32)
        elif layer.type == "pool":
            a = np.ascontiguousarray(reference.pool2d(a, layer.kernel, layer.stride, layer.mode))
        elif layer.type == "flatten":
            a = a.reshape(a.shape[0], -1)
        elif layer.type == "fc":
            a = reference.fully_connected(a, layer.weight, layer.bias)
        elif layer.type == "softmax":
            a = reference.softmax(a)
        else:  # validate() already refuses this; kept so a new layer type cannot be skipped silently
            raise PyconvError(f"engine: unsupported layer type '{layer.type}'")
    return Result(labels=a.argmax(axis=1), op_times=op_times, probabilities=a)
