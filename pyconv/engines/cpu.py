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


def peak_bytes(model: Model, batch: int) -> int:
    """About what forward_cpu holds at once for `batch` images: the float32 input, and the input and output of
    its largest layer (a conv's output is allocated while its input is alive)."""
    from ..core.model import shape_trace

    sizes = [int(np.prod(model.input_shape))] + [int(np.prod(s)) for s in shape_trace(model)]
    return 4 * batch * (sizes[0] + max(a + b for a, b in zip(sizes, sizes[1:], strict=False)))


def available_memory() -> int | None:
    """Bytes this process may still allocate: the kernel's MemAvailable, lowered by a cgroup's limit (v2, else
    v1) where one is set; None where neither can be read."""
    found = []
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    v1 = "/sys/fs/cgroup/memory/memory."
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         (v1 + "limit_in_bytes", v1 + "usage_in_bytes")):
        try:
            text = open(limit).read().strip()
            if text.isdigit():
                found.append(int(text) - int(open(usage).read().strip()))
                break
        except (OSError, ValueError):
            continue
    return min(found) if found else None


def check_memory(need: int, what: str) -> None:
    """Refuse, in one line and before the work, what cannot fit in memory (a model within the file bounds may still
    ask for hundreds of GB at batch 10000)."""
    available = available_memory()
    if available is not None and need > available:
        raise PyconvError(f"{what} needs about {need / 2**30:.1f} GB of memory and {available / 2**30:.1f} GB are "
                          "available; a smaller --batch needs less")


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
