"""The whole network end to end: the final milestone's plan on the GPU engine and PyTorch + cuDNN on the same
model and images (resident, pinned, pageable); Correctness; peak device memory; the labels that differ from
PyTorch's float32 network, which is the precision verdict final reads (pyconv.evidence)."""

from __future__ import annotations

import numpy as np

from .. import evidence, native, variants
from ..core import data
from ..core.data import accuracy
from ..core.errors import PyconvError
from ..core.model import Model, load_model
from ..engines import gpu
from ..plan import Plan, conv_sites, plan
from .schema import REDUCED_CANDIDATES, candidate_key
from .timing import batch_stats, host_timed, time_cuda_events

# The reduced candidates measured, in this order, after final's fastest reduced plan moved a label (plan precisions).
FALLBACK_PRECISIONS = REDUCED_CANDIDATES[1:]

# The pipeline shapes (chunks, streams, taper) the end-to-end bench sweeps; the final plan's were chosen from it:
# equal parts at every chunk count on 2 and 4 streams, then tapering parts on 4 (each smaller than the one before,
# or larger: a network that computes slower than it copies starts computing after a smaller first copy).
PIPELINE_CHUNKS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32)
PIPELINE_STREAMS = (2, 4)
PIPELINE_TAPERS = (2.0, 1.5, 1.25, 0.9, 0.8, 0.7, 0.6, 0.5)
TAPER_CHUNKS = (3, 4, 5, 6, 8)
# Then equal parts on 4 streams with the last part's copy in pieces (tail_pieces; every other row has one piece).
PIPELINE_TAIL_PIECES = (2, 3, 4)
PIECES_CHUNKS = (3, 4, 5, 6, 8)
# Then both at once: a shrinking last part in pieces (a verdict runs a combination only where it was timed:
# pyconv.bench.evidence.pipeline_shape).
COMBINED_TAPERS = (0.9, 0.8, 0.7)
COMBINED_PIECES = (2, 3)
# The sweep's shapes are timed in rounds, each round every shape in turn (a share of the reps each): a drift over
# the sweep's seconds then moves every shape alike instead of the shapes timed last. Timed one after another, one
# shape's two measurements in one run differed by up to 6% (final's pinned time and its sweep row, sp19 on an H200:
# results/bench-e2e-nvidia-h200-2026-11-25-sp19-pieces.json 0.516 and 0.542 ms, -2026-11-24-sp19-taper.json 0.542
# and 0.575), more than the 1-4% the tail pieces and tapers are chosen by.
PIPELINE_ROUNDS = 4
PIPELINE_SHAPES = ([(c, st, 1.0, 1) for st in PIPELINE_STREAMS for c in PIPELINE_CHUNKS]
                   + [(c, 4, t, 1) for t in PIPELINE_TAPERS for c in TAPER_CHUNKS]
                   + [(c, 4, 1.0, q) for q in PIPELINE_TAIL_PIECES for c in PIECES_CHUNKS]
                   + [(c, 4, t, q) for t in COMBINED_TAPERS for q in COMBINED_PIECES for c in TAPER_CHUNKS])


def final_plan(model: Model, batch: int, precision: str) -> Plan:
    """The final milestone's plan for `model` on this GPU, its precision forced ('reduced' or 'fp32')."""
    ev = evidence.for_gpu(native.gpu().device_info()["name"])
    return plan("final", conv_sites(model, batch), variants.gpu_variants(), ev, model_digest=model.digest(),
                precision=precision)


def _measure_ours(model: Model, p: Plan, x: np.ndarray, xp: np.ndarray | None, labels: np.ndarray, warmup: int,
                  reps: int, sweep: bool) -> tuple[dict, np.ndarray]:
    """One plan on the GPU engine: resident, pageable and (xp: the batch in pinned memory) pinned times,
    Correctness, peak device memory, optionally the pipeline sweep; and its predicted labels."""
    batch = len(x)
    impls, chunks, streams, taper, pieces = p.impls, p.chunks, p.streams, p.taper, p.tail_pieces
    engine = gpu.engine_for(p, model)
    net = engine.net
    ours: dict = {}
    try:
        # As final runs the batch (its chunks on its streams), the copies left out.
        ours["resident_ms"] = batch_stats(net.forward_resident(x, impls, warmup, reps, chunks, streams, taper), batch)
    except ValueError as e:
        ours["resident_ms"] = {"error": str(e)}
    # From host memory the batch streams through in chunks on several streams, as the final milestone runs it.
    times, r = host_timed(lambda: net.forward(x, impls, chunks, streams, taper=taper, tail_pieces=pieces), warmup,
                          reps)
    ours["pageable_ms"] = batch_stats(times, batch)
    ours["correctness"] = accuracy(r["labels"], labels)
    ours["passes"] = int(r["passes"])
    predicted = np.asarray(r["labels"])
    if xp is not None:
        # The network alone: no per-layer op-time events (each costs time of its own between the layers).
        times, r = host_timed(lambda: net.forward(xp, impls, chunks, streams, False, taper, pieces), warmup, reps)
        ours["pinned_ms"] = batch_stats(times, batch)
        ours["pinned_correctness"] = accuracy(r["labels"], labels)
        ours["peak_device_bytes"] = int(net.peak_bytes)  # before the sweep's other pipeline shapes grow buffers
        ours["pinned_span"] = span_pass(lambda: net.forward(xp, impls, chunks, streams, False, taper, pieces, True),
                                        warmup, reps, batch)
        # Right after the timed calls, so the traced pass is the same replayed graph.
        ours["pinned_trace"] = trace_pass(lambda: net.forward(xp, impls, chunks, streams, False, taper, pieces))
        # The same with the op-time events that the final milestone prints its Op Time lines from.
        times, _ = host_timed(lambda: net.forward(xp, impls, chunks, streams, taper=taper, tail_pieces=pieces),
                              warmup, reps)
        ours["pinned_op_times_ms"] = batch_stats(times, batch)
        if sweep:
            # How the pipeline's shape matters: the pinned time for other chunk and stream counts and tapers (the
            # final plan's, pyconv.plan.pipeline, were chosen from this sweep).
            shapes = [s for s in PIPELINE_SHAPES if s[0] <= batch]
            swept: dict[tuple, list[float]] = {s: [] for s in shapes}
            for _ in range(PIPELINE_ROUNDS):
                for s in shapes:
                    # warm-up each round: the shape before was another graph (the first call runs plain, the
                    # second captures)
                    times, _ = host_timed(lambda s=s: net.forward(xp, impls, s[0], s[1], False, s[2], s[3]),
                                          max(warmup, 2), -(-reps // PIPELINE_ROUNDS))
                    swept[s] += times
            ours["pipeline"] = [{"chunks": c, "streams": st, "taper": t, "tail_pieces": q,
                                 "pinned_ms": batch_stats(swept[(c, st, t, q)], batch)} for c, st, t, q in shapes]
    else:
        ours["pinned_ms"] = {"error": "needs PyTorch to allocate pinned host memory"}
    ours.setdefault("peak_device_bytes", int(net.peak_bytes))
    del engine
    return ours, predicted


def bench_end_to_end(model_name: str, batch: int, warmup: int, reps: int, torch=None, gpus: int = 1,
                     compiled: bool = False) -> dict:
    """The final milestone's configuration of the GPU engine and PyTorch + cuDNN on one model: resident, pinned,
    pageable; Correctness; peak device memory; the labels that differ from PyTorch's float32 network.

    The reduced-precision candidate (final's plan with every variant allowed: a TF32 or FP16 variant where one is
    fastest, and the fully connected layers in cuBLAS FP16 where the last conv writes half, else TF32) is measured
    first; when a label differs from PyTorch's, the same with TF32 fully connected layers, then final's plan with
    TF32 alone, then with float32 conv layers and TF32 fully connected layers (FALLBACK_PRECISIONS), each where it
    differs from what was measured, and the first that moves no label is kept; failing all, the float32
    configuration is measured too and is what final runs ("pyconv"; the rejected candidates stay in
    "pyconv_reduced", "pyconv_reduced_fc_tf32", "pyconv_tf32" and "pyconv_fc_tf32"). The entry records the verdict
    for these weights (model_digest, reduced_precision_ok) and the variants and FC math that earned it (impls, which
    reduced precisions it checked; fc_math), which final reads through the evidence file (pyconv.evidence,
    pyconv.plan.precision_decision).
    Without PyTorch nothing can be verified: the float32 configuration is measured and no verdict is recorded."""
    model = load_model(model_name)
    x, labels = data.load_test(model.input_size, batch)
    x = np.ascontiguousarray(x)
    batch = len(x)
    cfg = final_plan(model, batch, "fp32" if torch is None else "reduced")
    entry: dict = {"model": model.name, "arch": model.arch, "batch": batch, "model_digest": model.digest(),
                   "input": "uint8 test images (as the milestones feed them)",
                   "chunks": cfg.chunks, "streams": cfg.streams, "taper": cfg.taper,
                   "tail_pieces": cfg.tail_pieces}
    xp = torch.from_numpy(x).pin_memory().numpy() if torch is not None else None  # page-locked: a direct DMA
    ours, predicted = _measure_ours(model, cfg, x, xp, labels, warmup, reps, sweep=True)
    if torch is not None:
        entry["copy_floor_ms"] = copy_floor(torch, x, warmup, reps)
        entry["pytorch"], torch_labels = _torch_end_to_end(torch, model, x, labels, warmup, reps)
        torch.cuda.empty_cache()
        if compiled:
            entry["yardsticks"] = [torch_config(torch, cfg, model, x, labels, torch_labels, warmup, reps)
                                   for cfg in COMPILED_CONFIGS]
        ours["differ_vs_pytorch"] = int(np.count_nonzero(predicted != torch_labels))
        entry["reduced_precision_ok"] = ours["differ_vs_pytorch"] == 0
        if not entry["reduced_precision_ok"]:
            entry[candidate_key("reduced")] = dict(ours, impls=cfg.impls, fc_math=cfg.fc_math)
            # Less rounding, step by step: the fully connected layers in TF32, TF32 alone (FP16's narrower
            # range may be what moved a label), then float32 conv layers with the fully connected layers in TF32. A
            # candidate the same as one measured already is skipped; the first that moves no label is what final
            # runs.
            tried = [cfg]
            for precision in FALLBACK_PRECISIONS:
                cand = final_plan(model, batch, precision)
                if any(c.impls == cand.impls and c.fc_math == cand.fc_math for c in tried):
                    continue
                tried.append(cand)
                # swept too: the configuration final keeps is the one whose sweep picks its taper (evidence)
                ours, predicted = _measure_ours(model, cand, x, xp, labels, warmup, reps, sweep=True)
                ours["differ_vs_pytorch"] = int(np.count_nonzero(predicted != torch_labels))
                if ours["differ_vs_pytorch"] == 0:
                    entry["reduced_precision_ok"], cfg = True, cand
                    break
                entry[candidate_key(precision)] = dict(ours, impls=cand.impls, fc_math=cand.fc_math)
            if not entry["reduced_precision_ok"]:
                cfg = final_plan(model, batch, "fp32")
                ours, predicted = _measure_ours(model, cfg, x, xp, labels, warmup, reps, sweep=True)
                ours["differ_vs_pytorch"] = int(np.count_nonzero(predicted != torch_labels))
    else:
        entry["pytorch"] = {"error": "PyTorch with CUDA is not installed: no baseline"}
    entry["impls"], entry["fc_math"] = cfg.impls, cfg.fc_math
    entry["pyconv"] = ours
    if "median" in entry["pytorch"].get("resident_ms", {}):
        for mode in ("resident_ms", "pinned_ms", "pageable_ms"):
            if "median" in entry["pytorch"].get(mode, {}) and "median" in ours.get(mode, {}):
                entry.setdefault("x_pytorch", {})[mode] = entry["pytorch"][mode]["median"] / ours[mode]["median"]
    if gpus > 1 and xp is not None:
        # Scaling: the same batch from pinned memory split over 1..gpus GPUs (one network and stream set each).
        scaling = []
        for n in range(1, gpus + 1):
            multi = gpu.MultiGpuEngine(model, n, cfg.fc_math)
            times, r = host_timed(lambda m=multi: gpu.run_plan(cfg, m, xp), warmup, reps)
            scaling.append({"gpus": n, "pinned_ms": batch_stats(times, batch),
                            "correctness": accuracy(r.labels, labels)})
            del multi
        base = scaling[0]["pinned_ms"]["median"]
        for row in scaling:
            row["speedup"] = base / row["pinned_ms"]["median"]
        entry["multi_gpu"] = scaling
    return entry


def _torch_end_to_end(torch, model: Model, x: np.ndarray, labels: np.ndarray, warmup: int,
                      reps: int) -> tuple[dict, np.ndarray]:
    """PyTorch + cuDNN (float32, TF32 off) timings, and its predicted labels."""
    from ..engines.framework import build_net

    net = build_net(model).eval().cuda()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    out: dict = {"source": f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
                           "cudnn.benchmark on, TF32 off"}
    with torch.inference_mode():
        xd = torch.from_numpy(x).cuda()
        out["resident_ms"] = batch_stats(time_cuda_events(torch, lambda: net(xd.float()).argmax(dim=1), warmup, reps),
                                     len(x))
        pinned = torch.from_numpy(x).pin_memory()
        pageable = torch.from_numpy(x)

        def run(host):
            return net(host.to("cuda").float()).argmax(dim=1).cpu()  # .cpu() waits for the device

        times, pred = host_timed(lambda: run(pinned), warmup, reps)
        out["pinned_ms"] = batch_stats(times, len(x))
        times, pred = host_timed(lambda: run(pageable), warmup, reps)
        out["pageable_ms"] = batch_stats(times, len(x))
        out["correctness"] = accuracy(pred.numpy(), labels)
    out["peak_device_bytes"] = int(torch.cuda.max_memory_allocated())
    out["name"] = "eager-fp32"
    return out, pred.numpy()


# torch.compile yardsticks beside eager PyTorch (issue 15): mode="max-autotune" (Triton kernels autotuned per shape,
# CUDA graphs), one configuration per precision. Each costs minutes of compilation (its compile_s is recorded).
COMPILED_CONFIGS = ("compiled-fp32", "compiled-tf32", "compiled-fp16-channels-last")
COMPILE_MODE = "max-autotune"


def span_pass(fn, warmup: int, reps: int, batch: int) -> dict:
    """Where a pinned call's time goes without a trace (CUPTI slows the host's calls): the host clock of each call
    beside its GPU span (gpu_ms: CUDA events from just before the first copy to the pass's end), and the host's own
    share, their difference per call. `fn` runs the pass with gpu_span=True."""
    spans: list[float] = []

    def call():
        r = fn()
        spans.append(float(r["gpu_ms"]))
        return r

    host, _ = host_timed(call, warmup, reps)
    gpu_ms = spans[warmup:]
    return {"host_ms": batch_stats(host, batch), "gpu_ms": batch_stats(gpu_ms, batch),
            "host_share_ms": batch_stats([h - g for h, g in zip(host, gpu_ms)], batch)}


def trace_pass(fn) -> dict:
    """Where one call's time goes, from a CUPTI trace of it (pyconv._cupti; the second of two traced calls):
    milliseconds from the call's start on the host to the first copy's start, to the end of the last host-to-device
    copy, to the end of the GPU's last work, and to the call's return; the copies' own time; and every copy and
    kernel (name, stream, start and duration in microseconds from the call's start). {"error": ...} where CUPTI is
    not built or refuses."""
    try:
        cu = native.cupti()
        cu.start()
    except (PyconvError, RuntimeError) as e:  # not built, or CUPTI refused (CuptiError)
        return {"error": f"unavailable: {e}"}
    try:
        fn()  # the first call under a trace also pays CUPTI's own set-up (milliseconds): not the call's time
        t0 = cu.timestamp()
        fn()
        t1 = cu.timestamp()
    finally:
        cu.stop()
    acts = [r for r in cu.records() if r["kind"] in ("kernel", "memcpy", "memset") and r["start_ns"] >= t0]
    h2d = [r for r in acts if r["kind"] == "memcpy" and "HtoD" in r["name"]]
    if not acts or not h2d:
        return {"error": "the trace holds no host-to-device copy"}
    def ms(ns: int) -> float:
        return (ns - t0) / 1e6

    return {"first_copy_ms": ms(min(r["start_ns"] for r in h2d)), "copies_end_ms": ms(max(r["end_ns"] for r in h2d)),
            "gpu_end_ms": ms(max(r["end_ns"] for r in acts)), "call_ms": ms(t1),
            "copy_ms": sum(r["end_ns"] - r["start_ns"] for r in h2d) / 1e6,
            "activities": [{"name": r["name"][:80], "stream": r.get("stream"),
                            "start_us": round(ms(r["start_ns"]) * 1e3, 1),
                            "us": round((r["end_ns"] - r["start_ns"]) / 1e3, 1)}
                           for r in sorted(acts, key=lambda r: r["start_ns"])]}


def copy_floor(torch, x: np.ndarray, warmup: int, reps: int) -> dict:
    """The uint8 batch's host-to-device copy from pinned memory, CUDA events: no pinned end-to-end run can beat it."""
    pinned = torch.from_numpy(x).pin_memory()
    dst = torch.empty(pinned.shape, dtype=pinned.dtype, device="cuda")
    return batch_stats(time_cuda_events(torch, lambda: dst.copy_(pinned, non_blocking=True), warmup, reps), len(x))


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def torch_config(torch, name: str, model: Model, x: np.ndarray, labels: np.ndarray, torch_labels: np.ndarray,
                 warmup: int, reps: int, device: str = "cuda") -> dict:
    """One torch.compile configuration of the PyTorch network: compile seconds, resident and pinned times,
    Correctness and the labels it moves against eager float32 PyTorch. Any failure to compile or run (no Triton,
    an Inductor error) is the row's error, "unavailable: <why>", never the bench's end."""
    import time

    from ..engines.framework import build_net

    row: dict = {"name": name, "mode": COMPILE_MODE, "source": f"torch {torch.__version__} torch.compile"}
    fp16, tf32 = "fp16" in name, "tf32" in name
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
        net = build_net(model).eval().to(device)
        dtype = torch.float16 if fp16 else torch.float32
        if fp16:
            net = net.to(dtype=dtype, memory_format=torch.channels_last)

        def forward(images):
            z = images.to(dtype)
            if fp16:
                z = z.contiguous(memory_format=torch.channels_last)
            return net(z).argmax(dim=1)

        fn = torch.compile(forward, mode=COMPILE_MODE)
        with torch.inference_mode():
            xd = torch.from_numpy(x).to(device)
            t0 = time.perf_counter()
            pred = fn(xd).cpu()  # the first call compiles (and autotunes)
            row["compile_s"] = time.perf_counter() - t0
            row["resident_ms"] = batch_stats(time_cuda_events(torch, lambda: fn(xd), warmup, reps), len(x))
            pinned = torch.from_numpy(x).pin_memory()
            times, pred = host_timed(lambda: fn(pinned.to(device, non_blocking=True)).cpu(), warmup, reps)
            row["pinned_ms"] = batch_stats(times, len(x))
        pred = pred.numpy()
        row["correctness"] = accuracy(pred, labels)
        row["labels_moved"] = int(np.count_nonzero(pred != torch_labels))
        row["peak_device_bytes"] = int(torch.cuda.max_memory_allocated()) if device == "cuda" else None
    except Exception as e:  # torch.compile raises many kinds (BackendCompilerFailed, InductorError, ...)
        row = {"name": name, "mode": COMPILE_MODE, "error": "unavailable: " + _first_line(e)}
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
        if device == "cuda":
            torch.cuda.empty_cache()
    return row
