"""The numpy reference: the oracle every native and GPU implementation is tested against.

Plain, readable numpy; float64 accumulation in the convolution so the reference itself adds no float32 error."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .errors import PyconvError


def conv2d(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Valid, stride-1, no-bias cross-correlation: x[B][C][H][W], k[M][C][K][K] -> y[B][M][H-K+1][W-K+1]."""
    if x.ndim != 4 or k.ndim != 4:
        raise PyconvError(f"conv2d: x and k must be 4-D, got {x.ndim}-D and {k.ndim}-D")
    if x.shape[1] != k.shape[1]:
        raise PyconvError(f"conv2d: x has {x.shape[1]} channels, k expects {k.shape[1]}")
    kh, kw = k.shape[2:]
    if kh > x.shape[2] or kw > x.shape[3]:
        raise PyconvError(f"conv2d: kernel {kh}x{kw} is larger than the input {x.shape[2]}x{x.shape[3]}")
    ho, wo = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    k64 = k.astype(np.float64)
    y = np.zeros((k.shape[0], x.shape[0], ho, wo), dtype=np.float64)  # M, B, Ho, Wo
    for p in range(kh):  # one tap at a time: a [M][C] x [C][B*Ho*Wo] product each, in float64
        for q in range(kw):
            y += np.tensordot(k64[:, :, p, q], x[:, :, p:p + ho, q:q + wo], axes=([1], [1]))
    return np.ascontiguousarray(y.transpose(1, 0, 2, 3), dtype=np.float32)


def pool2d(x: np.ndarray, kernel: int, stride: int, mode: str = "max") -> np.ndarray:
    """Pooling over the last two axes, floor mode (windows that run past the edge are dropped)."""
    win = sliding_window_view(x, (kernel, kernel), axis=(2, 3))[:, :, ::stride, ::stride]
    return (win.max(axis=(4, 5)) if mode == "max" else win.mean(axis=(4, 5))).astype(np.float32)


def tanh_maxpool2(y: np.ndarray) -> np.ndarray:
    """The fused epilogue's meaning: maxpool 2/2 of tanh(y)."""
    return pool2d(np.tanh(y), 2, 2, "max")


def activation(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "tanh":
        return np.tanh(x)
    if kind == "relu":
        return np.maximum(x, 0)
    if kind == "sigmoid":
        return (1.0 / (1.0 + np.exp(-x))).astype(np.float32)
    raise PyconvError(f"unknown activation '{kind}'")


def fully_connected(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (x @ w.T + b).astype(np.float32)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
