"""A convolution's least work (flops, bytes) and the roofline floor of the GPU it runs on, measured in the same
run: max(bytes / copy bandwidth, flops / FP32 rate); the FP32 rate is the higher of the FFMA probe and cuBLAS
SGEMM (no TF32)."""

from __future__ import annotations

from ..core.errors import PyconvError
from .timing import GPU_REPS, stats

COPY_BYTES = 1 << 30


def conv_flops(B: int, C: int, H: int, W: int, M: int, K: int) -> int:
    """2 flops (multiply + add) per tap: 2*B*M*Ho*Wo*C*K*K."""
    return 2 * B * M * (H - K + 1) * (W - K + 1) * C * K * K


def conv_bytes(B: int, C: int, H: int, W: int, M: int, K: int, pooled: bool = False) -> int:
    """The least traffic a convolution can make: x read once, k read once, y written once (float32). pooled: y is
    the max-pool 2/2 of the conv output (floor mode), as the fused conv + tanh + pool writes it."""
    ho, wo = H - K + 1, W - K + 1
    if pooled:
        ho, wo = ho // 2, wo // 2
    return 4 * (B * C * H * W + M * C * K * K + B * M * ho * wo)


def floor_ms(flops: int, nbytes: int, copy_GBps: float, fp32_GFLOPs: float) -> float:
    """The roofline floor in milliseconds: the slower of moving the bytes and doing the flops."""
    if copy_GBps <= 0 or fp32_GFLOPs <= 0:
        raise PyconvError("roofline: bandwidth and FP32 rate must be positive")
    return max(nbytes / (copy_GBps * 1e9), flops / (fp32_GFLOPs * 1e9)) * 1e3


def rates(flops: int, nbytes: int, ms: float, floor: float) -> dict:
    """GFLOP/s, GB/s and % of the roofline floor of one timed op."""
    return {"gflops": flops / (ms * 1e6), "gbps": nbytes / (ms * 1e6), "pct_roofline": floor / ms * 100.0}


def measure_roofline(g, reps: int = GPU_REPS) -> dict:
    copy = stats(g.measure_copy_bandwidth(COPY_BYTES, reps))["median"]
    fma = stats(g.measure_fma_rate(reps))["median"]
    sgemm = stats(g.measure_sgemm_rate(8192, max(3, reps // 2)))["median"]
    return {"copy_GBps": copy, "fma_GFLOPs": fma, "sgemm_GFLOPs": sgemm, "fp32_GFLOPs": max(fma, sgemm),
            "fp32_source": "sgemm" if sgemm > fma else "ffma-probe", "copy_bytes": COPY_BYTES}
