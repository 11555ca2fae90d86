"""The inference engine on the GPU: the whole network runs in pyconv._gpu (CUDA C++), a batch goes to the device
once (as uint8) and only the predicted labels come back.

Milestone 3 uses the course's baseline kernel (gpu-baseline); milestone 4 and final pick one registry variant per
conv layer through `choose_impls`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.errors import PyconvError
from ..core.model import Model

BASELINE = "gpu-baseline"


def gpu_module():
    """pyconv._gpu, or a PyconvError saying why it cannot be used (not built, or no GPU visible)."""
    try:
        from .. import _gpu
    except ImportError as e:
        raise PyconvError(f"the CUDA module pyconv._gpu is not built ({e}); run `invoke build` on a machine "
                          "with nvcc") from None
    if not _gpu.available():
        raise PyconvError("no CUDA GPU is visible: milestones 3, 4 and final need one")
    return _gpu


def variant_names() -> list[str]:
    from .. import _gpu

    return [v["name"] for v in _gpu.variants()]


def check_impl(impl: str) -> str:
    names = variant_names()
    if impl not in names:
        raise PyconvError(f"unknown GPU implementation '{impl}' (known: {', '.join(names)})")
    return impl


# Milestone 4 runs one of three optimisations (--impl picks; the first is the default): the three fastest
# distinct techniques on the H200 at batch 10000 (results/bench-nvidia-h200-2026-11-22*.json): the specialised
# direct convolution (sp19 conv2 0.597 ms), the fused conv+tanh+pool epilogue (sp19 conv1 0.242 ms with pooling)
# and the register-tiled implicit GEMM (0.743 / 0.743 ms). A layer the fused one cannot take runs the first.
M4_IMPLS = ("gpu-specialised", "gpu-fused-tanh-pool", "gpu-register-tiled")


def conv_sites(model: Model, batch: int):
    """(B, C, H, W, M, K, tanh_pool_follows) for every conv layer of `model` at this batch size."""
    from ..core.model import shape_trace

    shapes = [tuple(model.input_shape), *shape_trace(model)]
    sites = []
    for i, layer in enumerate(model.layers):
        if layer.type != "conv":
            continue
        c, h, w = shapes[i]
        nxt = model.layers[i + 1:i + 3]
        fused = (len(nxt) == 2 and nxt[0].type == "tanh" and nxt[1].type == "pool" and nxt[1].mode == "max"
                 and nxt[1].kernel == 2 and nxt[1].stride == 2)
        sites.append((batch, c, h, w, layer.out_channels, layer.kernel, fused))
    return sites


def _first_supported(site, candidates) -> str:
    from .. import _gpu

    b, c, h, w, m, k, fused = site
    variants = {v["name"]: v for v in _gpu.variants()}
    for name in candidates:
        v = variants.get(name)
        if v is None or (v["epilogue"] == "tanh-maxpool2" and not fused):
            continue
        if not _gpu.why_unsupported(name, b, c, h, w, m, k):
            return name
    raise PyconvError(f"no GPU variant among {', '.join(candidates)} supports conv layer {site[:6]}")


def choose_impls(model: Model, milestone: str, impl: str | None = None, batch: int = 10000) -> list[str]:
    """One registry variant per conv layer.

    --impl given: that variant for every layer (a fused variant only where tanh + maxpool 2/2 follow; elsewhere
    the milestone's non-fused choice). Otherwise m3: the baseline; m4: M4_IMPLS[0]; final: what final_config
    picks (per layer from this GPU's bench results, in float32 unless TF32 was verified for these weights)."""
    sites = conv_sites(model, batch)
    if impl is not None:
        check_impl(impl)
        return [_first_supported(s, [impl, M4_IMPLS[0], BASELINE]) for s in sites]
    if milestone == "3":
        return [BASELINE] * len(sites)
    if milestone == "4":
        return [_first_supported(s, [M4_IMPLS[0], BASELINE]) for s in sites]
    return final_config(model, batch).impls


@dataclass
class GpuResult:
    labels: np.ndarray
    op_times: list[float] = field(default_factory=list)
    peak_bytes: int = 0
    passes: int = 1


# `final` may compute in TF32 on the tensor cores (float32 sums): the fully connected layers through cuBLAS
# (measured on an H200, sp19 FC1 10000 x 5184 -> 140: 0.53 ms in FP32, 0.13 ms in TF32) and the conv layers
# whose fastest variant rounds to TF32 (pyconv.tuning.reduced_precision). Reduced precision is used for a model
# only where `invoke bench --end-to-end` on this GPU found that it changes no label against PyTorch's float32
# network (pyconv.tuning.precision_verdict); otherwise, and for a model never benchmarked here, final runs in
# float32. Milestones 3 and 4 always run in float32, the course's arithmetic.
FINAL_FC_MATH = "tf32"
FC_MATHS = ("fp32", "tf32")


@dataclass
class FinalConfig:
    impls: list[str]
    fc_math: str
    why: str  # one line: which precision and on what evidence


def final_config(model: Model, batch: int, exact: bool | None = None) -> FinalConfig:
    """What the final milestone runs for `model`: exact=None decides from the recorded verdict on this GPU;
    True / False force float32 / the reduced-precision candidate (the end-to-end bench measures both)."""
    from .. import _gpu, tuning

    sites = conv_sites(model, batch)
    gpu_name = _gpu.device_info()["name"]
    tuning.load_cache(gpu_name)
    why = "forced"
    if exact is None:
        verdict = tuning.precision_verdict(model.digest(), gpu_name)
        if verdict is None:
            exact, why = True, "float32: no end-to-end bench of these weights on this GPU has checked TF32"
        elif verdict["reduced_precision_ok"]:
            exact, why = False, f"TF32 allowed: no label differs from PyTorch's (bench of {verdict['bench_date']})"
        else:
            exact, why = True, "float32: TF32 changed labels in the end-to-end bench"
    if exact:
        return FinalConfig(tuning.choose_impls_final(sites, exact=True), "fp32", why)
    impls = tuning.choose_impls_final(sites)
    return FinalConfig(impls, FINAL_FC_MATH, why)


class GpuEngine:
    """`model` on GPU `device`, weights uploaded once; `forward` may be called many times. fc_math: how the fully
    connected layers multiply ('fp32' or 'tf32', see FINAL_FC_MATH)."""

    def __init__(self, model: Model, device: int = 0, fc_math: str = "fp32"):
        g = gpu_module()
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

    def forward(self, x: np.ndarray, impls: list[str] | str | None = None, chunks: int = 1,
                streams: int = 2) -> GpuResult:
        """Labels for x[N][C][H][W] (uint8 or float32); impls: one variant per conv layer (or one for all)."""
        if impls is None or isinstance(impls, str):
            impls = choose_impls(self.model, "3", impls, batch=len(x))
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


def parse_gpus(gpus) -> int:
    """--gpus N|all -> how many GPUs to use (1 <= N <= the GPUs visible)."""
    g = gpu_module()
    visible = g.device_count()
    text = str(gpus).strip().lower()
    if text == "all":
        return visible
    try:
        n = int(text)
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

    def forward(self, x: np.ndarray, impls: list[str], chunks: int = 1, streams: int = 2) -> GpuResult:
        parts = [p for p in np.array_split(x, len(self.engines)) if len(p)]
        if len(parts) == 1:
            return self.engines[0].forward(parts[0], impls, chunks, streams)
        results = list(self._pool.map(lambda ep: ep[0].forward(ep[1], impls, chunks, streams),
                                      zip(self.engines, parts)))
        # The GPUs run each layer at the same time: a layer's op time is the slowest GPU's.
        op_times = [max(ts) for ts in zip(*(r.op_times for r in results))]
        return GpuResult(labels=np.concatenate([r.labels for r in results]), op_times=op_times,
                         peak_bytes=max(r.peak_bytes for r in results), passes=max(r.passes for r in results))


# `final` streams the batch through the network in chunks on several CUDA streams (copy of chunk i+1 overlaps
# compute of chunk i); each conv is then timed by CUDA events on its stream, summed over the chunks. Chosen from
# the pipeline sweep of `invoke bench --end-to-end` on an H200 (sp19, batch 10000, pinned): 1 chunk 1.14-1.20 ms,
# 2 chunks 0.94-0.97, 4 chunks on 2 streams 1.02, 4 chunks on 4 streams 0.855, 8 chunks 0.95-1.22 (more chunks
# cost more host-side launches than they hide).
FINAL_CHUNKS = 4
FINAL_STREAMS = 4


def run_gpu_milestone(m: str, model: Model, x_uint8: np.ndarray, labels: np.ndarray, impl: str | None = None,
                      gpus: str = "1") -> None:
    """Milestone 3, 4 or final on the GPU: prints 'New Inference', one Op Time per conv layer, Correctness."""
    from ..tools.milestones import accuracy, print_result

    n_gpus = parse_gpus(gpus)
    if n_gpus > 1 and m != "final":
        raise PyconvError(f"--gpus {gpus}: only the final milestone runs on several GPUs")
    if m == "final" and impl is None:
        cfg = final_config(model, len(x_uint8))
        impls, fc_math = cfg.impls, cfg.fc_math
    else:
        impls, fc_math = choose_impls(model, m, impl, batch=len(x_uint8)), "fp32"
    engine = MultiGpuEngine(model, n_gpus, fc_math) if n_gpus > 1 else GpuEngine(model, fc_math=fc_math)
    chunks = FINAL_CHUNKS if m == "final" and len(x_uint8) >= 4 * FINAL_CHUNKS else 1
    print("New Inference", flush=True)
    res = engine.forward(x_uint8, impls, chunks, FINAL_STREAMS)
    print_result(res.op_times, accuracy(res.labels, labels), model.name)
