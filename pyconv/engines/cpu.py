"""The inference engine on the CPU: the network runs layer by layer on the host, each conv layer with the CPU
variant it is given (the numpy reference or one of pyconv._cpu's), the other layers in numpy. Which variant
runs is the plan's choice (pyconv.plan); the GPU engine is pyconv.engines.gpu."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .. import native
from ..core import reference
from ..core.errors import PyconvError
from ..core.model import ACTIVATIONS, Model
from ..plan import Plan
from ..variants import NUMPY

ConvFn = Callable[..., np.ndarray]


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
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    v1 = "/sys/fs/cgroup/memory/memory."
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         (v1 + "limit_in_bytes", v1 + "usage_in_bytes")):
        try:
            with open(limit) as f:
                text = f.read().strip()
            if text.isdigit():
                with open(usage) as f:
                    found.append(int(text) - int(f.read().strip()))
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
    """Every host convolution by name: the native CPU registry and the numpy reference."""
    impls: dict[str, ConvFn] = {}
    c = native.optional("_cpu")
    for v in c.variants() if c is not None else []:
        impls[v["name"]] = lambda x, k, out=None, _n=v["name"]: c.conv(_n, x, k, out)
    impls[NUMPY.name] = reference.conv2d
    return impls


@dataclass
class Result:
    """What one forward pass returns: predicted labels and the per-conv-layer op times in seconds."""

    labels: np.ndarray
    op_times: list[float] = field(default_factory=list)
    probabilities: np.ndarray | None = None
    # forward_cpu(capture=indices): per conv layer, (its input, its output) for those images, taken after timing
    captured: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)


def forward_cpu(model: Model, x: np.ndarray, impl: str | list[str], capture: np.ndarray | None = None) -> Result:
    """Run `model` on x[B][C][H][W] (float32) with host convolution `impl` (one name, or one per conv layer);
    each conv layer is timed alone. capture: image indices whose conv inputs and outputs are kept (outside the
    timed region) in Result.captured. A native convolution that fails (a student's CHECK) is a PyconvError naming
    the layer and the variant."""
    impls = cpu_conv_impls()
    names = [impl] * len(model.convs) if isinstance(impl, str) else list(impl)
    if len(names) != len(model.convs):
        raise PyconvError(f"model '{model.name}' has {len(model.convs)} conv layers but {len(names)} variants")
    for name in names:
        if name not in impls:
            raise PyconvError(f"unknown CPU implementation '{name}' (known: {', '.join(impls)})")
    if x.shape[1:] != tuple(model.input_shape):
        raise PyconvError(f"input images are {x.shape[1:]}, model '{model.name}' expects {model.input_shape}")
    a = np.ascontiguousarray(x, dtype=np.float32)
    op_times = []
    captured: list[tuple[np.ndarray, np.ndarray]] = []
    convs = iter(names)
    for layer in model.layers:
        if layer.type == "conv":
            name = next(convs)
            conv = impls[name]
            # As in the course's framework (its executor plans and allocates every output before forward runs),
            # the output exists before the op is timed: allocated and filled with NaN, which also makes an element
            # the kernel forgets visible. The first touch of a fresh 464 MB buffer cost ~0.4 s here, seven times
            # the convolution itself. (The numpy reference allocates its own result inside the timed call.)
            b, _, h, w = a.shape
            kk = layer.weight.shape[-1]
            out = None
            if name != NUMPY.name:
                out = np.empty((b, layer.out_channels, h - kk + 1, w - kk + 1), np.float32)
                out.fill(np.nan)
            a_in = a
            t0 = time.perf_counter()
            try:
                a = conv(a, layer.weight) if out is None else conv(a, layer.weight, out)
            except RuntimeError as e:
                raise PyconvError(f"{layer.name or f'conv{len(op_times) + 1}'} ({name}): {' '.join(str(e).split())}"
                                  ) from None
            op_times.append(time.perf_counter() - t0)
            if capture is not None:
                captured.append((a_in[capture].copy(), a[capture].copy()))
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
    return Result(labels=a.argmax(axis=1), op_times=op_times, probabilities=a, captured=captured)


def run_plan(plan: Plan, model: Model, x: np.ndarray, capture: np.ndarray | None = None) -> Result:
    """A CPU plan (milestone 2) on the batch x (converted to float32, as the course's CPU path reads it)."""
    if plan.device != "cpu":
        raise PyconvError(f"a {plan.device.upper()} plan cannot run on the CPU")
    return forward_cpu(model, x.astype(np.float32), plan.impls, capture)
