"""The milestones' layer check and their JSON record (`invoke milestone --record FILE`).

Every milestone run (2, 3, 4, final) checks each conv layer's output on a sample of the batch (the first and the
last SAMPLE images), outside the timed region, against the numpy reference with pyconv.verify's tolerance and
comparison (the variant's own rtol; atol = rtol*sqrt(C*K*K)):
- CPU engine (milestone 2): the sampled images' input and output of each conv layer are captured during the real
  run (after the layer's timing) and the output compared with the reference convolution of that same input, so a
  wrong layer is named by itself (the next layer is judged on what it was given);
- GPU engine (3, 4, final: the whole network runs natively): after the timed run each conv layer is run again
  alone through pyconv._gpu.conv (which applies a fusing variant's tanh + max-pool 2/2 too) on the FULL batch size
  (a student's kernel may hard-code B=10000), the sampled images' reference activations at their own positions and
  zeros elsewhere, and those positions are compared.

The record (format "pyconv-milestone", version 1): milestone, model, model_digest, batch, device, commit, date,
layers [{index, layer, variant, op_seconds, check: {ok, worst_abs, worst_rel, where, bad, checked}}],
correctness, exit_reason ("ok", "layer check failed", or the error's line)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from .. import verify
from ..core import reference
from ..core.fileio import write_text_atomic
from ..core.model import Model

SAMPLE = 8  # images checked at each end of the batch
FORMAT = "pyconv-milestone"
VERSION = 1


def sample_indices(batch: int) -> np.ndarray:
    """The first and the last SAMPLE images of a batch (each once)."""
    return np.unique(np.r_[np.arange(min(SAMPLE, batch)), np.arange(max(0, batch - SAMPLE), batch)])


@dataclass(frozen=True)
class Check:
    ok: bool
    worst_abs: float | None
    worst_rel: float | None
    where: list[int] | None = None  # [image, channel, row, column] of the worst element, image in the batch
    got: float | None = None
    want: float | None = None
    bad: int = 0
    checked: int = 0
    why: str = ""


@dataclass(frozen=True)
class LayerRecord:
    index: int
    layer: str
    variant: str
    op_seconds: float | None = None
    check: Check | None = None


@dataclass
class MilestoneRecord:
    milestone: str
    model: str
    model_digest: str
    batch: int
    device: str
    commit: str = ""
    date: str = ""
    layers: list[LayerRecord] = field(default_factory=list)
    correctness: float | None = None
    exit_reason: str = "ok"
    format: str = FORMAT
    version: int = VERSION

    def write(self, path: str) -> None:
        write_text_atomic(path, json.dumps(asdict(self), indent=1) + "\n")


def compare(y: np.ndarray, x: np.ndarray, k: np.ndarray, indices: np.ndarray, rtol: float,
            epilogue: str = "none") -> Check:
    """y[i] (the layer's output for the sampled images, in order) against the reference of x[i] (their input)."""
    rtol, atol = verify.tolerance(rtol, x.shape[1], k.shape[-1])
    c = verify.compare(y, verify.expected(x, k, epilogue), rtol, atol)
    if c.shape_error:
        return Check(False, None, None, why=c.shape_error, checked=int(y.size))
    where = None
    if c.where is not None:
        where = [int(indices[c.where[0]]), *c.where[1:]]
    return Check(c.passed, c.max_abs_err, c.max_rel_err, where, c.got, c.want, c.bad, c.size,
                 "" if c.passed else f"{c.bad} of {c.size} checked elements off")


def failure_line(rec: LayerRecord) -> str:
    c = rec.check
    if c.where is None:
        return f"layer check: {rec.layer} ({rec.variant}) does not match the reference: {c.why}"
    return (f"layer check: {rec.layer} ({rec.variant}) does not match the reference: {c.why}; worst at "
            f"[{', '.join(map(str, c.where))}] (image, channel, row, column): got {c.got:.6g}, want {c.want:.6g} "
            f"(error {abs(c.got - c.want) if np.isfinite(c.got) else float('nan'):.3g})")


def reference_conv_inputs(model: Model, x: np.ndarray) -> list[np.ndarray]:
    """The input of each conv layer for the images x (float32), computed with the numpy reference."""
    a = np.ascontiguousarray(x, dtype=np.float32)
    out = []
    for layer in model.layers:
        if layer.type == "conv":
            out.append(a)
            a = reference.conv2d(a, layer.weight)
        elif layer.type in ("relu", "tanh", "sigmoid"):
            a = reference.activation(a, layer.type).astype(np.float32)
        elif layer.type == "pool":
            a = np.ascontiguousarray(reference.pool2d(a, layer.kernel, layer.stride, layer.mode))
        else:  # everything after the last conv layer is not needed
            if len(out) == len(model.convs):
                break
            if layer.type == "flatten":
                a = a.reshape(a.shape[0], -1)
            elif layer.type == "fc":
                a = reference.fully_connected(a, layer.weight, layer.bias)
    return out


def check_gpu_layers(model: Model, x: np.ndarray, choices: Sequence, rtols: dict[str, float],
                     epilogues: dict[str, str]) -> list[Check]:
    """Each conv layer's variant re-run alone on the full batch size with the sampled images' reference
    activations at their positions (zeros elsewhere); those positions compared with the reference."""
    from .. import native

    g = native.gpu()
    idx = sample_indices(len(x))
    inputs = reference_conv_inputs(model, x[idx].astype(np.float32))
    checks = []
    for choice, xs, layer in zip(choices, inputs, model.convs):
        full = np.zeros((len(x), *xs.shape[1:]), np.float32)
        full[idx] = xs
        try:
            y = g.conv(choice.variant, full, layer.weight)
        except (RuntimeError, ValueError) as e:
            checks.append(Check(False, None, None, why=" ".join(str(e).split())))
            continue
        del full
        checks.append(compare(np.ascontiguousarray(y[idx]), xs, layer.weight, idx, rtols.get(choice.variant, 1e-4),
                              epilogues.get(choice.variant, "none")))
    return checks
