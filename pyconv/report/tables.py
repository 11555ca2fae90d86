"""`invoke report`: a Markdown page and PNG plots from one `invoke bench` JSON file, and the README's performance
section generated from the same tables (between the markers `<!-- bench:begin -->` and `<!-- bench:end -->`).

The tables are built once (`tables`) and rendered two ways: aligned plain text (what `invoke bench` prints last)
and Markdown (`markdown_tables`, what the report and the README show). Every number comes from the JSON, read
through its typed records (pyconv.bench.schema)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..bench.schema import BenchResult, Check, CpuRow, LayerResult, Stats, shape_label, worst_and_geomean
from ..bench.schema import load as load_result
from ..core import optional, paths
from ..core.errors import PyconvError
from ..core.fileio import atomic_path, check_writable, write_text_atomic

README = paths.ROOT / "README.md"
BEGIN = "<!-- bench:begin -->"
END = "<!-- bench:end -->"
DEFAULT_OUT = paths.RESULTS / "report.md"


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------------------
# Reading


def load(path: str | os.PathLike) -> BenchResult:
    return load_result(path)


def record(result: BenchResult | dict) -> BenchResult:
    """A result as its record (a dict as the bench builds it is read the way a file is)."""
    return result if isinstance(result, BenchResult) else BenchResult.parse(result)


@contextlib.contextmanager
def _reading(name: str):
    """Rendering reads many nested fields: one that is missing or of the wrong type becomes one line naming the
    file, not a traceback."""
    try:
        yield
    except KeyError as e:
        raise PyconvError(f"benchmark file {name} is incomplete: a record lacks the field {e}") from None
    except (TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError, OverflowError) as e:
        raise PyconvError(f"benchmark file {name} has a field of the wrong type or value ({e})") from None


PARTS = (("layers", "GPU convolution ladder"), ("end_to_end", "End-to-end inference"), ("cpu", "CPU convolutions"))


def default_sources(folder: Path = paths.RESULTS) -> list[Path]:
    """The newest bench JSON of each kind (GPU layers, end to end, CPU), in that order: what the README shows."""
    newest: dict[str, tuple[float, Path]] = {}
    for p in folder.glob("bench-*.json"):
        try:
            doc = load(p)
        except PyconvError:
            continue
        for key, _ in PARTS:
            date = str(doc.date or "")  # a hand-edited file may hold anything there
            if getattr(doc, key) and (key not in newest or date > newest[key][0]):
                newest[key] = (date, p)
    found = list(dict.fromkeys(newest[key][1] for key, _ in PARTS if key in newest))
    if not found:
        raise PyconvError(f"no bench-*.json in {folder}: run `invoke bench` first, or pass --json")
    return found


def sources_of(json_arg: str | os.PathLike | None) -> list[Path]:
    """--json: one file, several comma-separated, or (None) the newest of each kind."""
    if json_arg is None:
        return default_sources()
    return [Path(p.strip()) for p in str(json_arg).split(",") if p.strip()]


def newest_json(folder: Path = paths.RESULTS) -> Path:
    """The most recently written results/bench-*.json."""
    files = sorted(folder.glob("bench-*.json"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise PyconvError(f"no bench-*.json in {folder}: run `invoke bench` first, or pass --json")
    return files[-1]


# ---------------------------------------------------------------------------------------------------------------
# Formatting


def num(v, digits: int = 3) -> str:
    """A number with `digits` significant digits (at least the integer part); '-' for None."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    v = float(v)
    if v == 0:
        return "0"
    mag = abs(v)
    if mag >= 10 ** (digits - 1):
        return f"{v:,.0f}"
    decimals = max(0, digits - 1 - int(f"{mag:e}".split("e")[1]))
    return f"{v:.{decimals}f}"


def _ms(s: Stats | None, key: str = "median", digits: int = 3) -> str:
    return num(getattr(s, key), digits) if s is not None else "-"


def _check(row) -> str:
    """A VariantRow's or CpuRow's correctness cell."""
    c: Check | None = row.check
    if getattr(row, "error", None):
        return "error: " + row.error
    if not c:
        return row.skipped or "-"
    if not c.passed:
        return f"FAIL ({c.why or ''})"
    return f"ok ({c.max_rel_err:.1e})"


def header_lines(result: BenchResult) -> list[str]:
    """Where and when the numbers were measured."""
    lines = []
    gpu = result.gpu
    if gpu:
        lines.append(f"GPU: {gpu.name} (sm_{gpu.compute_capability.replace('.', '')}, "
                     f"{gpu.multiprocessors} SMs), driver {result.driver or 'unknown'}, "
                     f"CUDA driver API {result.cuda_driver_api}, runtime {result.cuda_runtime}")
    cpu = result.host_cpu
    load = result.host_load
    busy = ""
    if load is not None and load.start is not None:
        busy = f"; load average {load.start} at the start, {load.end} at the end"
        if max(load.start, load.end or 0) > (cpu.cores if cpu.cores is not None else 1):
            busy += " (other work shared the CPU: CPU timings are pessimistic)"
    lines.append(f"Host CPU: {cpu.model}, {cpu.cores if cpu.cores is not None else '?'} cores{busy}")
    t = result.torch
    if t:
        lines.append(f"PyTorch {t.version} (CUDA {t.cuda or 'none'}, cuDNN {t.cudnn or 'none'})")
    lines.append(f"Commit {result.commit}, {result.date}")
    roof = result.roofline
    if roof:
        lines.append(f"Roofline (measured in this run): copy {num(roof.copy_GBps)} GB/s; FP32 "
                     f"{num(roof.fp32_GFLOPs)} GFLOP/s (FFMA probe {num(roof.fma_GFLOPs)}, cuBLAS SGEMM "
                     f"{num(roof.sgemm_GFLOPs)}; the higher is the ceiling)")
    s = result.settings
    timing = s.timing or {}
    if timing.get("method") == "nvbench":
        lines.append(f"GPU op times: NVBench {timing.get('version', '')} -- ms, min, p90 of the cold samples (L2 "
                     f"flushed before each), noise = relative std dev, warm = batched back-to-back launches; samples "
                     f"taken until the noise is under {timing.get('max_noise_pct')} % "
                     f"(or {timing.get('timeout_s')} s), "
                     f"throttled samples (SM clock < {num(100 * timing.get('throttle_threshold', 0))} % of default) "
                     "dropped")
        # files written before the per-sample files were read carry no flag: their NVBench rows have no p90
        if any(v.ms is not None and (v.ms.median_is_mean or (v.ms.method == "nvbench" and v.ms.p90 is None))
               for layer in result.layers for v in layer.variants):
            lines.append("  (this file's rows have no per-sample data: their ms is NVBench's mean of the cold samples, "
                         "min its minimum, no p90)")
    elif result.layers:
        lines.append("GPU op times: CUDA events around each launch (warm: L2 not flushed), noise = relative std dev"
                     + (f" (NVBench unavailable: {timing['why']})" if timing.get("why") else ""))
    keys = (("gpu_reps", "GPU reps"), ("cpu_reps", "CPU reps"), ("cpu_warmup", "CPU warm-up"),
            ("cpu_threads", "CPU threads"), ("cpu_naive_batch", "single-thread CPU variants' batch"))
    lines.append(f"Inputs: {s.inputs}; batch {s.batch}"
                 + (f"; GPU warm-up {s.warmup}" if result.gpu else "")
                 + "".join(f"; {label} {getattr(s, k)}" for k, label in keys if getattr(s, k) is not None))
    return lines


# ---------------------------------------------------------------------------------------------------------------
# Tables


def _layer_title(layer: LayerResult) -> str:
    return (f"{layer.model} {layer.layer}: B={layer.B} C={layer.C} {layer.H}x{layer.W} "
            f"M={layer.M} K={layer.K}" + (" (tanh + max-pool 2/2 follow)" if layer.tanh_pool_follows else ""))


def layer_table(layer: LayerResult) -> Table:
    fused_site = layer.tanh_pool_follows
    header = ["variant", "step", "ms", "min ms", "p90 ms", "noise %", "warm ms", "GFLOP/s", "GB/s", "% roofline",
              "x cuDNN"]
    if fused_site:
        header += ["+tanh+pool ms", "x cuDNN (fused)"]
    header.append("correctness (max rel err)")
    t = Table(_layer_title(layer), header)
    for r in layer.variants:
        row = [r.variant + (" (conv+tanh+pool)" if r.pools else "") + (" (x from host)" if r.x_on_host else ""),
               str(r.step), _ms(r.ms), _ms(r.ms, "min"), _ms(r.ms, "p90"), _ms(r.ms, "noise_pct", 2),
               _ms(r.ms, "warm_ms"), num(r.gflops), num(r.gbps), num(r.pct_roofline, 2),
               _against(num(r.x_cudnn, 2), r.cudnn_mode)]
        if fused_site:
            row += [_ms(r.tanh_pool_ms), _against(num(r.tanh_pool_x_cudnn, 2), r.cudnn_mode)]
        row.append(_check(r))
        t.rows.append(row)
    cud = layer.cudnn
    if cud.conv_ms is not None:
        c = cud.conv_ms
        row = ["cuDNN conv2d", "-", _ms(c), _ms(c, "min"), _ms(c, "p90"), _ms(c, "noise_pct", 2),
               _ms(c, "warm_ms"), num(layer.flops / (c.median * 1e6)), num(layer.bytes / (c.median * 1e6)),
               num(layer.floor_ms / c.median * 100, 2), "1"]
        if fused_site:
            f = cud.conv_tanh_pool_ms
            row += [_ms(f), "1" if f else "-"]
        row.append("reference")
        t.rows.append(row)
        t.notes.append(cud.source)
    elif cud.error is not None:
        t.notes.append("cuDNN: " + cud.error)
    for mode, reduced in (("TF32", layer.cudnn_tf32), ("FP16", layer.cudnn_fp16)):  # where a variant rounds
        if reduced is not None and reduced.conv_ms is not None:
            c = reduced.conv_ms
            row = [f"cuDNN conv2d {mode}", "-", _ms(c), _ms(c, "min"), _ms(c, "p90"), _ms(c, "noise_pct", 2),
                   _ms(c, "warm_ms"), num(layer.flops / (c.median * 1e6)), "-", "-", "-"]
            if fused_site:
                row += [_ms(reduced.conv_tanh_pool_ms), "-"]
            row.append(f"yardstick of the {mode}/reduced rows")
            t.rows.append(row)
            t.notes.append(reduced.source)
        elif reduced is not None and reduced.error is not None:
            t.notes.append(f"cuDNN {mode}: {reduced.error}")
    if any(r.cudnn_mode for r in layer.variants):
        t.notes.append("x cuDNN: a float32 variant against cuDNN FP32; one that rounds (TF32 or FP16) against the "
                       "faster of cuDNN TF32 and FP16, named beside its ratio")
    floor = f"roofline floor {num(layer.floor_ms)} ms"
    if fused_site:
        floor += f" (conv + tanh + pool, pooled output: {num(layer.floor_tanh_pool_ms)} ms)"
    t.notes.append(floor)
    for r in layer.variants:  # first layers: the uint8 path of the variants that have one (the network's input)
        if r.u8_ms is not None or r.u8_skipped:
            what = (f"{_ms(r.u8_ms)} ms (noise {_ms(r.u8_ms, 'noise_pct', 2)} %)" if r.u8_ms is not None
                    else r.u8_skipped)
            t.notes.append(f"{r.variant} from uint8 images: {what}")
    if layer.best:
        t.notes.append(f"best: {layer.best.variant} {num(layer.best.ms)} ms")
    return t


def _against(cell: str, mode: str | None) -> str:
    """A ratio to cuDNN, with the reduced cuDNN mode it is against where it is not cuDNN FP32."""
    return f"{cell} (vs {mode.upper()})" if mode and cell != "-" else cell


def gpu_summary_table(result: BenchResult) -> Table:
    t = Table("Best per layer (GPU)", ["model", "layer", "best variant", "ms", "floor ms", "% roofline",
                                       "cuDNN ms", "x cuDNN"])
    for layer in result.layers:
        b = layer.best
        if not b:
            t.rows.append([layer.model, layer.layer, "none passed", "-", "-", "-", "-", "-"])
            continue
        fused = bool(b.tanh_pool)
        floor = layer.floor_tanh_pool_ms if fused else layer.floor_ms
        yard = {"tf32": layer.cudnn_tf32, "fp16": layer.cudnn_fp16}.get(b.cudnn_mode or "") or layer.cudnn
        cud = yard.conv_tanh_pool_ms if fused else yard.conv_ms
        label = b.variant + (" (conv+tanh+pool)" if fused and not b.variant.endswith("+ pool") else "")
        t.rows.append([layer.model, layer.layer, label,
                       num(b.ms), num(floor), num(floor / b.ms * 100, 2), _against(_ms(cud), b.cudnn_mode),
                       num(b.x_cudnn, 2)])
        run = layer.best_as_run
        if run is not None and run.u8:  # the rows compare float32 input with cuDNN's; the network feeds uint8
            t.notes.append(f"{layer.model} {layer.layer} as the network runs it: {run.variant} from uint8 images, "
                           f"{num(run.ms)} ms")
    return t


def cpu_table(result: BenchResult) -> Table:
    t = Table("CPU variants against PyTorch on the CPU", ["model", "layer", "shape", "variant", "batch", "threads",
                                                          "median s", "min s", "GFLOP/s", "x PyTorch",
                                                          "correctness (max rel err)"])
    for r in result.cpu:
        shape = f"C={r.C} {r.H}x{r.W} M={r.M} K={r.K}"
        t.rows.append([r.model, r.layer, shape, r.variant, str(r.B), str(r.threads),
                       _ms(r.s), _ms(r.s, "min"), num(r.gflops), num(r.x_torch, 2),
                       _check(r) if r.check is not None or r.skipped is not None else "reference"])
    return t


def _differ(d) -> str:
    v = getattr(d, "differ_vs_pytorch", None)
    return "-" if v is None else str(v)


def end_to_end_table(result: BenchResult) -> Table:
    t = Table("End to end (whole network, batch in, labels out)",
              ["model", "batch", "who", "resident ms", "pinned ms", "pageable ms", "images/s (pinned)",
               "x PyTorch (pinned)", "Correctness", "labels that differ from PyTorch's", "peak device MB"])
    for e in result.end_to_end:
        for mode in ("resident_ms", "pinned_ms"):
            s = getattr(e.pyconv, mode)
            if s is not None and s.error is not None:
                t.notes.append(f"{e.model} pyconv {mode[:-3]}: {s.error}")
        fc = f", FC {e.fc_math}" if e.fc_math is not None else ""
        whos = [("pyconv " + ",".join(e.impls) + fc, e.pyconv)]
        rejected = e.rejected
        for r in rejected:
            whos.append((f"rejected: pyconv {','.join(r.impls)}, FC {r.fc_math}", r))
        if rejected:
            what = " and ".join(f"{','.join(r.impls)} changed {r.differ_vs_pytorch} label(s)" for r in rejected)
            runs = (f"{','.join(e.impls)} with FC {e.fc_math}, which changed none" if e.reduced_precision_ok
                    else "in float32")
            noun = "configuration" if len(rejected) == 1 else "configurations"
            t.notes.append(f"{e.model}: against PyTorch's float32 network, the reduced-precision {noun} {what}, so "
                           f"final runs {runs}")
        theirs = [("PyTorch" + (" eager-fp32" if e.yardsticks else ""), e.pytorch)]
        theirs += [(f"PyTorch {y.name} ({y.mode})", y) for y in e.yardsticks]
        for y in e.yardsticks:
            if y.compile_s is not None:
                t.notes.append(f"{e.model} {y.name}: compiled and autotuned in {num(y.compile_s)} s")
        if e.copy_floor_ms is not None:
            t.notes.append(f"{e.model} copy floor (the uint8 batch, pinned host-to-device): "
                           f"{_ms(e.copy_floor_ms)} ms")
        tr = e.pyconv.pinned_trace
        if tr and "error" not in tr:
            t.notes.append(f"{e.model} pyconv pinned, one call under a CUPTI trace (ms from the call's start): first "
                           f"copy starts {num(tr['first_copy_ms'])}, copies end {num(tr['copies_end_ms'])} "
                           f"(their own time {num(tr['copy_ms'])}), the GPU's last work ends "
                           f"{num(tr['gpu_end_ms'])}, the call returns {num(tr['call_ms'])}")
        sp = e.pyconv.pinned_span
        if sp:
            t.notes.append(f"{e.model} pyconv pinned, where the call's time goes (no trace, medians of the same "
                           f"calls): host clock {num(sp['host_ms']['median'])} ms, of which the GPU's span from just "
                           f"before the first copy to the pass's end (CUDA events) {num(sp['gpu_ms']['median'])} ms "
                           f"and the host's own share {num(sp['host_share_ms']['median'])} ms")
        if e.pyconv.pinned_op_times_ms is not None:
            t.notes.append(f"{e.model} pyconv pinned ms without per-layer timing; with the op-time events the final "
                           f"milestone prints its Op Time lines from: {_ms(e.pyconv.pinned_op_times_ms)} ms")
        eager_pinned = e.pytorch.pinned_ms.median if e.pytorch.pinned_ms else None
        for who, d in (*whos, *theirs):
            if d.error is not None:
                t.rows.append([e.model, str(e.batch), who, d.error, "", "", "", "", "", "", ""])
                continue
            mine = who.startswith("pyconv")
            if mine:
                x_pt = num(e.x_pytorch.get("pinned_ms"), 2)
            elif d.pinned_ms is not None and eager_pinned:
                x_pt = num(eager_pinned / d.pinned_ms.median, 2)
            else:
                x_pt = "-"
            moved = getattr(d, "labels_moved", None)
            t.rows.append([e.model, str(e.batch), who, _ms(d.resident_ms), _ms(d.pinned_ms),
                           _ms(d.pageable_ms), num(d.pinned_ms.images_per_s if d.pinned_ms else None),
                           x_pt, num(d.correctness, 4),
                           str(moved) if moved is not None else
                           ("0 (the reference)" if d is e.pytorch and e.yardsticks else _differ(d)),
                           num((d.peak_device_bytes or 0) / 2**20)])
    return t


def pipeline_table(result: BenchResult) -> Table | None:
    rows = [(e, e.pyconv.pipeline) for e in result.end_to_end if e.pyconv.pipeline]
    if not rows:
        return None
    chunks = sorted({p.chunks for _, sweep in rows for p in sweep})
    tapered = any(p.taper != 1 for _, sweep in rows for p in sweep)  # a column only in the files that swept it
    pieced = any(p.tail_pieces != 1 for _, sweep in rows for p in sweep)
    t = Table("Pipeline shape (pinned ms: the batch in chunks queued round-robin on streams"
              + (", each chunk `taper` times the one before" if tapered else "")
              + (", the last chunk's copy in `pieces`, its conv layers on each as it lands" if pieced else "") + ")",
              ["model", "streams", *(["taper"] if tapered else []), *(["pieces"] if pieced else []),
               *[f"{c} chunk{'s' if c > 1 else ''}" for c in chunks]])
    for e, sweep in rows:
        shapes = sorted({(p.streams, p.taper, p.tail_pieces) for p in sweep}, key=lambda k: (k[0], -k[1], k[2]))
        for shape in shapes:
            by_chunks = {p.chunks: p.pinned_ms for p in sweep if (p.streams, p.taper, p.tail_pieces) == shape}
            t.rows.append([e.model, str(shape[0]), *([f"{shape[1]:g}"] if tapered else []),
                           *([str(shape[2])] if pieced else []), *[_ms(by_chunks.get(c)) for c in chunks]])
    if rows and rows[0][0].chunks is not None:
        e = rows[0][0]
        t.notes.append(f"final runs {e.chunks} chunks on {e.streams} streams"
                       + (f", each {e.taper:g} times the one before" if e.taper != 1 else "")
                       + (f", the last copied in {e.tail_pieces} pieces" if e.tail_pieces != 1 else ""))
    return t


def multi_gpu_table(result: BenchResult) -> Table:
    t = Table("Several GPUs (batch split across GPUs, from pinned memory)",
              ["model", "batch", "GPUs", "pinned ms", "images/s", "speedup", "Correctness"])
    for e in result.end_to_end:
        for row in e.multi_gpu:
            t.rows.append([e.model, str(e.batch), str(row.gpus), _ms(row.pinned_ms),
                           num(row.pinned_ms.images_per_s), num(row.speedup, 2),
                           num(row.correctness, 4)])
    return t


def sweep_table(result: BenchResult) -> Table:
    sw = result.sweep
    # files from before cuDNN FP16 was measured compare the best of all with cuDNN TF32 only, and read as they did
    fp16 = any(r.cudnn_fp16_ms is not None for r in sw.rows)
    reduced = (["best (reduced precision allowed)", "ms", "cuDNN TF32 ms", "cuDNN FP16 ms", "x cuDNN reduced"] if fp16
               else ["best (TF32 allowed)", "ms", "cuDNN TF32 ms", "x TF32"])
    # files from before cuDNN FP32's kernels were recorded have no algorithm column
    algo = any(r.cudnn_fp32_kernels is not None or r.cudnn_fp32_kernels_error for r in sw.rows)
    t = Table(f"Sweep: {len({r.shape for r in sw.rows})} drawn layer shapes, batch {sw.batch} (seed {sw.seed}), "
              "without and with tanh + max-pool 2/2",
              ["shape", "+tanh+pool", "best float32", "ms", "cuDNN FP32 ms",
               *(["cuDNN FP32 algorithm"] if algo else []), "x FP32", *reduced, "failed / error"])
    for r in sw.rows:
        bad = [v.variant for v in r.variants if v.failed or v.error]
        cells = [r.best.variant if r.best else "none passed", num(r.best and r.best.ms), num(r.cudnn_tf32_ms)]
        if fp16:
            cells += [num(r.cudnn_fp16_ms), _against(num(r.x_cudnn_tf32, 2), r.x_cudnn_reduced_mode)]
        else:
            cells.append(num(r.x_cudnn_tf32, 2))
        t.rows.append([shape_label(r.shape, r.C, r.H, r.W, r.M, r.K), "yes" if r.tanh_pool else "no",
                       r.best_fp32.variant if r.best_fp32 else "none passed", num(r.best_fp32 and r.best_fp32.ms),
                       num(r.cudnn_fp32_ms), *([r.cudnn_fp32_algorithm or "-"] if algo else []),
                       num(r.x_cudnn_fp32, 2), *cells, ", ".join(bad) or "-"])
    t.notes += [sw.cudnn_source, f"warm-up {sw.warmup}, median of {sw.reps}; every variant's time (or why none) "
                "is in the JSON's sweep rows" + (f"; {sw.seconds:g} s in all" if sw.seconds is not None else "")]
    if algo:
        t.notes.append("cuDNN FP32 algorithm: the family the names of the kernels its conv launched show (the JSON "
                       "keeps the names); FFT and Winograd do fewer multiplies than a direct convolution")
        t.notes += [f"cuDNN FP32 kernels not recorded: {e}"
                    for e in dict.fromkeys(r.cudnn_fp32_kernels_error for r in sw.rows if r.cudnn_fp32_kernels_error)]
    t.notes += [f"cuDNN: {e}" for e in dict.fromkeys(r.cudnn_error for r in sw.rows if r.cudnn_error)]
    return t


def sweep_summary_table(result: BenchResult) -> Table:
    t = Table("Sweep summary (x cuDNN = cuDNN ms / our ms)", ["comparison", "rows", "worst", "worst row",
                                                               "geometric mean"])
    for s in result.sweep.summary:
        t.rows.append([s.title, str(s.rows) + (f" ({s.missing} without both times)" if s.missing else ""),
                       num(s.worst, 2), s.worst_row or "-", num(s.geomean, 2)])
    # The float32 comparison again per algorithm cuDNN FP32 ran (files that recorded it): where the ladder stands
    # against an FFT, which does fewer multiplies, and against a GEMM, which does the same.
    families: dict[str, list] = {}
    for r in result.sweep.rows:
        if r.cudnn_fp32_algorithm and r.x_cudnn_fp32:
            families.setdefault(r.cudnn_fp32_algorithm, []).append((r.x_cudnn_fp32, r))
    for family, pairs in sorted(families.items()):
        worst, w, geomean = worst_and_geomean(pairs)
        t.rows.append([f"best float32 variant x cuDNN FP32 where cuDNN ran {family}", str(len(pairs)),
                       num(worst, 2), shape_label(w.shape, w.C, w.H, w.W, w.M, w.K, w.tanh_pool), num(geomean, 2)])
    return t


def goals_table(result: BenchResult) -> Table:
    t = Table("Goals", ["goal", "target", "measured", "met", "note"])
    for g in result.goals:
        met = "-" if g.met is None else ("yes" if g.met else "NO")
        t.rows.append([g.name, f"{g.target} {g.unit}", num(g.measured), met, g.note])
    return t


def tables(result: BenchResult | dict) -> list[Table]:
    result = record(result)
    out: list[Table] = []
    if result.layers:
        out += [layer_table(layer) for layer in result.layers]
        out.append(gpu_summary_table(result))
    if result.cpu:
        out.append(cpu_table(result))
    if result.end_to_end:
        out.append(end_to_end_table(result))
        pipe = pipeline_table(result)
        if pipe:
            out.append(pipe)
        if any(e.multi_gpu for e in result.end_to_end):
            out.append(multi_gpu_table(result))
    if result.sweep is not None:
        out += [sweep_table(result), sweep_summary_table(result)]
    if result.goals:
        out.append(goals_table(result))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Rendering


def render_text(t: Table) -> str:
    widths = [max(len(h), *(len(r[i]) for r in t.rows)) if t.rows else len(h) for i, h in enumerate(t.header)]

    def line(cells):
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [t.title, line(t.header), line(["-" * w for w in widths])]
    out += [line(r) for r in t.rows]
    out += [f"  {n}" for n in t.notes if n]
    return "\n".join(out)


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def render_markdown(t: Table) -> str:
    out = [f"#### {t.title}", "", "| " + " | ".join(_md_cell(h) for h in t.header) + " |",
           "|" + "---|" * len(t.header)]
    out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in t.rows]
    notes = [n for n in t.notes if n]
    if notes:
        out += ["", *(f"- {_md_cell(n)}" for n in notes)]
    return "\n".join(out)


def text_tables(result: BenchResult | dict) -> str:
    result = record(result)
    return "\n".join(header_lines(result)) + "\n\n" + "\n\n".join(render_text(t) for t in tables(result)) + "\n"


def markdown_tables(result: BenchResult | dict) -> str:
    """The measurement's header and every table in Markdown: what the README's performance section shows."""
    result = record(result)
    head = ["Measured by `invoke bench`:", "", *(f"- {line}" for line in header_lines(result))]
    return "\n".join(head) + "\n\n" + "\n\n".join(render_markdown(t) for t in tables(result)) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# Plots


def _save(fig, dest: Path) -> tuple[Path, bytes]:
    """The PNG rendered in memory: written only once every plot and the page have rendered."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return dest, buf.getvalue()


def _bar_panels(groups: list[tuple[str, list[tuple[str, float, str]]]], xlabel: str, log: bool, dest: Path,
                title: str, ref: tuple[float, str] | None = None) -> tuple[Path, bytes]:
    """One horizontal bar panel per group (title, [(label, value, colour)]); `ref` (value, label): a dashed
    vertical line on every panel."""
    optional.require("matplotlib", "the report's plots")
    import matplotlib.pyplot as plt

    fig = bar_panels_figure(groups, xlabel, log, title, ref)
    try:
        return _save(fig, dest)
    finally:
        plt.close(fig)


def bar_panels_figure(groups, xlabel: str, log: bool, title: str, ref: tuple[float, str] | None = None):
    """_bar_panels' figure. Constrained layout keeps the figure's title clear of the first panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    height = sum(max(1, len(bars)) * 0.32 + 0.9 for _, bars in groups) + 0.3 * (title.count("\n") + 1)
    fig, axes = plt.subplots(len(groups), 1, figsize=(9, max(2.5, height)), squeeze=False, layout="constrained")
    for ax, (name, bars) in zip(axes[:, 0], groups, strict=True):
        labels = [b[0] for b in bars]
        values = [b[1] for b in bars]
        ax.barh(range(len(bars)), values, color=[b[2] for b in bars])
        ax.set_yticks(range(len(bars)), labels, fontsize=8)
        ax.invert_yaxis()
        if log and values:
            from matplotlib.ticker import NullFormatter

            ax.set_xscale("log")
            ax.set_xlim(min(values) / 4, max(values) * 3)  # bars start at the left edge: keep the shortest visible
            ax.xaxis.set_minor_formatter(NullFormatter())
        elif values:
            ax.set_xlim(0, max(values + ([ref[0]] if ref else [])) * 1.2)
        if ref is not None:
            ax.axvline(ref[0], color="black", linestyle="--", linewidth=1, label=ref[1])
            ax.legend(fontsize=7, loc="lower right")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        for i, v in enumerate(values):
            ax.text(v, i, f" {num(v)}", va="center", fontsize=7)
    fig.suptitle(title, fontsize=10)
    return fig


OURS, FUSED, THEIRS = "tab:blue", "tab:green", "tab:orange"


def _not_timed(r) -> str:
    """Why a ladder row has no bar: unsupported, not a fused site, failed the check, or an error."""
    if r.error:
        return "error"
    if r.check is not None and not r.check.passed:
        return "FAILED check"
    s = r.skipped or ""
    if s.startswith("unsupported"):
        return "unsupported"
    if "not followed by tanh" in s:
        return "no tanh+pool here"
    return s or "not timed"


def ladder_plot(layer: LayerResult, gpu: str, dest: Path) -> tuple[Path, bytes]:
    """One layer's ladder: every variant in step order (x) against its op time (log y), conv alone and, where tanh
    + max-pool follow, conv + tanh + pool beside it; cuDNN and the roofline floor as horizontal lines; a variant
    with no time is marked at the bottom with why (unsupported, failed ...)."""
    matplotlib = optional.require("matplotlib", "the report's plots")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    rows = sorted(layer.variants, key=lambda r: (r.step if r.step is not None else 99, r.variant))
    fused_site = layer.tanh_pool_follows
    width = 0.4 if fused_site else 0.7
    fig, ax = plt.subplots(figsize=(max(8.0, 0.55 * len(rows) + 3), 5.2))
    values = []
    labelled: set[str] = set()

    def bar(x: float, v: float, colour: str, label: str) -> None:
        ax.bar(x, v, width, color=colour, label=None if label in labelled else label)
        labelled.add(label)
        ax.text(x, v * 1.08, num(v), ha="center", va="bottom", fontsize=6, rotation=90,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.3, "alpha": 0.8})  # legible over lines
        values.append(v)

    missing = []
    for i, r in enumerate(rows):
        if r.ms is None:
            missing.append((i, _not_timed(r)))
            continue
        if r.pools:
            bar(i, r.ms.median, FUSED, "conv + tanh + pool (one fused launch)")
            continue
        bar(i - (width / 2 if fused_site else 0), r.ms.median, OURS, "conv")
        if r.tanh_pool_ms is not None:
            bar(i + width / 2, r.tanh_pool_ms.median, "tab:cyan", "conv, then the shared tanh + pool kernels")
    lines = [(layer.cudnn.conv_ms, THEIRS, "-", "cuDNN conv2d"),
             (layer.cudnn.conv_tanh_pool_ms, THEIRS, "--", "cuDNN conv2d + tanh + max_pool2d")]
    for s, colour, style, label in lines:
        if s is not None and s.median:
            ax.axhline(s.median, color=colour, linestyle=style, linewidth=1.4, label=f"{label} {num(s.median)} ms")
            values.append(s.median)
    floors = [(layer.floor_ms, "FP32 roofline floor (conv)", ":")]
    if fused_site and layer.floor_tanh_pool_ms:
        floors.append((layer.floor_tanh_pool_ms, "FP32 roofline floor (pooled output)", "-."))
    for f, label, style in floors:
        if f:
            ax.axhline(f, color="black", linestyle=style, linewidth=1.2, label=f"{label} {num(f)} ms")
            values.append(f)
    ax.set_yscale("log")
    lo, hi = (min(values), max(values)) if values else (0.01, 1.0)
    bottom = lo / 6
    ax.set_ylim(bottom, hi * 8)  # room above the tallest bar's label
    ax.yaxis.set_minor_formatter(NullFormatter())
    for i, why in missing:
        ax.text(i, bottom * 1.15, f"x {why}", ha="center", va="bottom", fontsize=7, rotation=90, color="tab:red")
    ax.set_xticks(range(len(rows)), [f"{r.step:02d} {r.variant}" if r.step is not None else r.variant
                                     for r in rows], rotation=50, ha="right", fontsize=7)
    ax.set_xlim(-0.7, len(rows) - 0.3)
    ax.set_ylabel("milliseconds (median, log scale)", fontsize=8)
    ax.set_xlabel("ladder step", fontsize=8)
    ax.set_title(f"{_layer_title(layer)}\n{gpu}", fontsize=9, pad=10)
    ax.grid(axis="y", which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    try:
        return _save(fig, dest)
    finally:
        plt.close(fig)


def plot_files(result: BenchResult | dict, stem: Path) -> list[tuple[Path, bytes]]:
    """PNGs beside the report, rendered (path, bytes) but not yet written: one ladder per GPU layer (ladder_plot),
    GPU % of roofline per variant per layer, CPU op time per variant per layer (log scale). Only the plots the
    JSON has data for."""
    result = record(result)
    written = []
    layers = result.layers
    if layers:
        roof = []
        for layer in layers:
            pct = []
            for r in layer.variants:
                if r.ms is None:
                    continue
                label = r.variant + (" (conv+tanh+pool)" if r.pools else "")
                pct.append((label, r.pct_roofline, FUSED if r.pools else OURS))
            cud = layer.cudnn
            if cud.conv_ms is not None:
                pct.append(("cuDNN conv2d", layer.floor_ms / cud.conv_ms.median * 100, THEIRS))
            roof.append((_layer_title(layer), pct))
        gpu = result.gpu.name if result.gpu else "GPU"
        for layer in layers:  # one ladder per layer
            name = f"{stem.name}-ladder-{paths.slug(layer.model)}-{paths.slug(layer.layer)}-b{layer.B}.png"
            written.append(ladder_plot(layer, gpu, stem.with_name(name)))
        written.append(_bar_panels(
            roof, "% of the FP32 roofline floor (higher is faster)", False,
            stem.with_name(stem.name + "-gpu-roofline.png"),
            f"% of the FP32 roofline floor, {gpu}\nfloor: the slower of FP32 arithmetic at this GPU's measured peak "
            "and moving the data once;\nvariants that round to TF32 or FP16 on tensor cores can pass 100 %",
            ref=(100.0, "FP32 floor (100 %)")))
    cpu: list[CpuRow] = result.cpu
    if cpu:
        groups: dict[str, list] = {}
        for r in cpu:
            if r.s is None or not r.B or r.B < 1:
                continue
            key = f"{r.model} {r.layer}: C={r.C} {r.H}x{r.W} M={r.M} K={r.K}"
            # per image: a single-thread variant runs a smaller batch than the others (the bench's batch rule)
            groups.setdefault(key, []).append((f"{r.variant} (timed at batch {r.B})", r.s.median / r.B * 1e3,
                                               THEIRS if r.variant.startswith("pytorch") else OURS))
        if groups:
            host = result.host_cpu.model
            written.append(_bar_panels(list(groups.items()), "ms per image (median time / batch, log scale)", True,
                                       stem.with_name(stem.name + "-cpu-op-time.png"),
                                       f"CPU op time per image, {host}"))
    return written


# ---------------------------------------------------------------------------------------------------------------
# The page and the README


def _anchor(name: str) -> str:
    return "file-" + paths.slug(Path(name).stem)


def _what(result: BenchResult) -> str:
    return ", ".join(title for key, title in PARTS if getattr(result, key)) or "benchmark"


def combined_markdown(results: list[tuple[str, BenchResult]]) -> str:
    """Each result's tables under a heading naming the file it came from (with an anchor the contents link)."""
    blocks = []
    for name, result in results:
        with _reading(name):
            result = record(result)
            blocks.append(f'<a id="{_anchor(name)}"></a>\n\n### {_what(result)} (`results/{name}`)\n\n'
                          + markdown_tables(result).rstrip())
    return "\n\n".join(blocks) + "\n"


def _evidence_sources(folder: Path) -> dict[str, list[str]]:
    """Per evidence file in folder/evidence/, the bench files its timings and verdicts came from."""
    from ..evidence import load as load_evidence

    out = {}
    for p in sorted((folder / "evidence").glob("*.json")):
        try:
            ev = load_evidence(p)
        except PyconvError:
            continue
        names = {t.source for e in ev.layers.values() for t in e.ranking if not t.first_use}
        names |= {v.source for v in ev.verdicts.values()}
        out[p.name] = sorted(names)
    return out


def report_markdown(results: list[tuple[str, BenchResult]], images: list[str],
                    folder: Path | None = None) -> str:
    """The page: a contents list, the README's summary with the files it draws on, what each GPU's evidence
    draws on, every file's tables (newest first), the plots."""
    folder = folder or paths.RESULTS
    t = summary_table(results)
    summary = render_markdown(t).split("\n", 2)[2]
    evidence = _evidence_sources(folder)
    contents = ["- [Summary](#summary): the README's table, and the bench files it is computed from"]
    if evidence:
        contents.append("- [What `final` chooses from](#what-final-chooses-from): the bench files each GPU's "
                        "evidence draws on")
    contents.append("- Every bench file's tables, newest first:")
    for name, r in results:
        with _reading(name):
            r = record(r)
            where = r.gpu.name if r.gpu else r.host_cpu.model
            contents.append(f"  - [`{name}`](#{_anchor(name)}): {_what(r)}; {where}, {str(r.date)[:10]}")
    if images:
        contents.append("- [Plots](#plots)")
    page = ["# pyconv benchmark report", "",
            "Generated by `invoke report` from the bench files in `results/` (`invoke promote --run RUN.json` adds a run "
            "and regenerates this page, the evidence and the README's summary). Files no longer here are listed, "
            "with the commit that removed them, in [ARCHIVE.md](ARCHIVE.md).", "",
            "## Contents", "", *contents, "",
            "## Summary", "", "The README's table. Where two files measured the same cell, the newer one counts.",
            "", summary, ""]
    if evidence:
        page += ["## What final chooses from", ""]
        for ev_name, names in evidence.items():
            page.append(f"- `evidence/{ev_name}`: " + (", ".join(f"[`{n}`](#{_anchor(n)})" for n in names)
                                                        or "measurements `final` made on first use only"))
        page.append("")
    page += ["## The bench files", "", combined_markdown(results).rstrip(), ""]
    if images:
        page += ["## Plots", ""] + [f"![{Path(i).stem}]({i})" for i in images] + [""]
    return "\n".join(page)


def all_sources(folder: Path = paths.RESULTS) -> list[Path]:
    """Every bench JSON in `folder`, newest measurement first: what the report page shows."""
    found = []
    for p in folder.glob("bench-*.json"):
        try:
            found.append((load(p).date, p.name, p))
        except PyconvError:
            continue
    if not found:
        raise PyconvError(f"no bench-*.json in {folder}: run `invoke bench` first, or pass --json")
    return [p for _, _, p in sorted(found, key=lambda t: (t[0], t[1]), reverse=True)]


def write_report(json_path: str | os.PathLike | None = None, out: str | os.PathLike | None = None,
                 folder: str | os.PathLike | None = None) -> tuple[Path, list[Path]]:
    """Report page + plots from bench JSON files (default: every one in `folder`, default results/, newest
    first, with plots of the newest of each kind only: the others' stay in their tables). With one file the
    plots are named after the page (report-gpu-op-time.png); with several, after page and file
    (report-<file>-gpu-op-time.png), so that a new bench file never renames another file's plots."""
    folder = Path(folder) if folder else paths.RESULTS
    dest = Path(out) if out else folder / DEFAULT_OUT.name
    if dest.suffix != ".md":
        raise PyconvError(f"--out must name a .md file, got {dest}")
    check_writable(dest, "report")
    sources = all_sources(folder) if json_path is None else sources_of(json_path)
    plotted = {p.name for p in default_sources(folder)} if json_path is None else {p.name for p in sources}
    results = [(src.name, load(src)) for src in sources]
    plots: list[tuple[Path, bytes]] = []
    for name, result in results:
        if name not in plotted:
            continue
        stem = dest.with_suffix("") if len(results) == 1 else dest.with_name(f"{dest.stem}-{Path(name).stem}")
        with _reading(name):
            plots += plot_files(result, stem)
    # Every table and plot has rendered (or failed in one line) before the first file is written.
    page = report_markdown(results, [p.name for p, _ in plots], folder)
    for p, png in plots:
        with atomic_path(p) as tmp:
            tmp.write_bytes(png)
    write_text_atomic(dest, page)
    return dest, [p for p, _ in plots]


def replace_between_markers(text: str, block: str, BEGIN: str = BEGIN, END: str = END) -> str:
    """`text` with what lies between BEGIN and END replaced by `block`; every other byte unchanged."""
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise PyconvError(f"the README needs exactly one {BEGIN} and one {END} marker (found "
                          f"{text.count(BEGIN)} and {text.count(END)}); nothing was changed")
    if text.index(END) < text.index(BEGIN):
        raise PyconvError(f"{END} comes before {BEGIN} in the README; nothing was changed")
    head, rest = text.split(BEGIN)
    tail = rest.split(END)[1]
    return head + BEGIN + "\n" + block.rstrip("\n") + "\n" + END + tail


# ---------------------------------------------------------------------------------------------------------------
# The README's one summary table


SOURCES_NOTE = "medians at batch 10000; from "
U8_NOTE = ("fastest variant per layer: a first layer counts what the network runs, from uint8 images where the "
           "variant reads them ")
SEMESTERS = {"fa17": "Fall 2017", "sp18": "Spring 2018", "fa18": "Fall 2018", "sp19": "Spring 2019",
             "fa19": "Fall 2019"}


def _machine(result: BenchResult, gpu: bool) -> str:
    if gpu:
        return result.gpu.name if result.gpu else "GPU"
    cpu = result.host_cpu
    return f"{cpu.model}, {cpu.cores} cores" if cpu.cores is not None else cpu.model


def _u8_note(layer: LayerResult) -> str:
    """A first layer counted from uint8 images (LayerResult.best_as_run), beside its float32 figure."""
    run, best = layer.best_as_run, layer.best
    text = f"`{layer.model}` {layer.layer}: {run.variant} from uint8 images, {num(run.ms)} ms"
    if best is not None:
        text += f" (from float32 images: {best.variant}, {num(best.ms)} ms)"
    return text


def summary_table(results: list[tuple[str, BenchResult]]) -> Table:
    """One table over several bench files: per course network (one column per architecture), the convolution
    from the course's first kernels to the ladder's best and the whole network against PyTorch. Each row names
    the machine it was measured on; where two files measured the same cell, the newer one counts."""
    results = sorted(((n, record(r)) for n, r in results), key=lambda nr: nr[1].date)  # newer overwrites older
    cols: dict[str, str] = {}  # arch -> column title
    model_arch: dict[str, str] = {}
    cells: dict[tuple[str, str], str] = {}  # (row label, arch) -> value
    machines: dict[str, str] = {}  # row key -> machine

    def put(key: str, label: str, machine: str, arch: str, value: float | None) -> None:
        if value is None:
            return
        machines.setdefault(key, machine)
        cells[(key, arch)] = num(value)
        rows_seen.setdefault(key, label)

    rows_seen: dict[str, str] = {}
    u8_notes: dict[str, list[str]] = {}  # arch -> its "fastest" cell's first layers counted from uint8 images
    cpu_seen: list[str] = []  # CPU variants in the order the bench files list them (the ladder's)
    shown: dict[str, str] = {}  # arch -> the model whose whole network is shown
    for _, r in results:
        for layer in r.layers:
            model_arch[layer.model] = layer.arch
        for e in r.end_to_end:
            model_arch[e.model] = e.arch
    for _, r in results:
        by_arch: dict[str, list[LayerResult]] = {}
        for layer in r.layers:
            if layer.arch in SEMESTERS:
                by_arch.setdefault(layer.arch, []).append(layer)
                cols.setdefault(layer.arch, f"{SEMESTERS[layer.arch]}, {layer.H}x{layer.W}")
        gpu = _machine(r, True)
        for arch, layers in by_arch.items():
            def total(pick, layers=layers):
                vals = [pick(site) for site in layers]
                return None if any(v is None for v in vals) else sum(vals)

            def variant_ms(name):
                return lambda site: next((v.ms.median for v in site.variants if v.variant == name and v.ms), None)

            # the ladder's first step (milestone 3's default), as the file names it
            base = next((v.variant for lr in layers for v in lr.variants if v.step == 0), None)
            if base:
                put("base", f"m3 `{base}`, conv layers (ms)", gpu, arch, total(variant_ms(base)))
            # a first layer as the network runs it: from uint8 images where the variant reads them (best_as_run)
            best = total(lambda layer: layer.best_as_run.ms if layer.best_as_run else None)
            put("best", "fastest variant per layer, conv layers (ms)", gpu, arch, best)
            if best is not None:
                u8_notes[arch] = [_u8_note(layer) for layer in layers if layer.best_as_run.u8]
            put("cudnn", "cuDNN conv2d, conv layers (ms)", gpu, arch,
                total(lambda layer: layer.cudnn.conv_ms.median if layer.cudnn.conv_ms else None))
        cpu_arch: dict[tuple[str, str], float] = {}
        for row in r.cpu:
            arch = model_arch.get(row.model)
            if arch not in SEMESTERS or row.s is None:
                continue
            cols.setdefault(arch, f"{SEMESTERS[arch]}, {row.H}x{row.W}")
            who = "pytorch" if row.variant.startswith("pytorch") else row.variant
            if who not in cpu_seen:
                cpu_seen.append(who)
            cpu_arch[(who, arch)] = cpu_arch.get((who, arch), 0.0) + row.s.median * 1e3
        cpu = _machine(r, False)
        for (who, arch), ms in cpu_arch.items():
            label = ("PyTorch conv2d on the CPU, conv layers (ms)" if who == "pytorch"
                     else f"m2 `{who}`, conv layers (ms)")
            put("cpu:" + who, label, cpu, arch, ms)
        # the whole network: one model per architecture, the first shipped one the oldest file lists; a newer file
        # updates its cells only with that same model (the column names it: fa17 has two, ece408-high and -low)
        seen: set[str] = set()
        for e in r.end_to_end:
            if e.arch not in SEMESTERS or e.arch in seen or e.pyconv.pinned_ms is None:
                continue
            if shown.setdefault(e.arch, e.model) != e.model:
                continue
            seen.add(e.arch)
            cols.setdefault(e.arch, SEMESTERS[e.arch])
            if e.multi_gpu:  # a run on a host with several GPUs: only its scaling counts here
                two = next((s for s in e.multi_gpu if s.gpus == 2), None)
                put("e2e2", "whole network on 2 GPUs, pinned input (ms)", f"2 x {gpu}", e.arch,
                    two.pinned_ms.median if two else None)
                continue
            put("e2e", "whole network (`final`), pinned input (ms)", gpu, e.arch, e.pyconv.pinned_ms.median)
            put("torch", "whole network in PyTorch + cuDNN, pinned input (ms)", gpu, e.arch,
                e.pytorch.pinned_ms.median if e.pytorch.pinned_ms else None)
    order = [*(f"cpu:{w}" for w in cpu_seen if w != "pytorch"), "cpu:pytorch", "base", "best", "cudnn", "e2e",
             "torch", "e2e2"]
    keys = [k for k in order if k in rows_seen] + [k for k in rows_seen if k not in order]
    archs = [a for a in SEMESTERS if a in cols]
    t = Table("Summary", ["measured", "on", *[cols[a] + (f" (`{shown[a]}`)" if a in shown else "") for a in archs]])
    for k in keys:
        t.rows.append([rows_seen[k], machines[k], *[cells.get((k, a), "-") for a in archs]])
    u8 = [f"{SEMESTERS[a]} {n}" for a in archs for n in u8_notes.get(a, [])]
    if u8:
        t.notes.append(U8_NOTE + "(that path checked against the reference and timed by the bench): "
                       + "; ".join(u8))
    t.notes.append(SOURCES_NOTE + ", ".join(f"[`{n}`](#{_anchor(n)})" for n, _ in
                                            sorted(results, key=lambda nr: nr[0])))
    return t


def readme_block(results: list[tuple[str, BenchResult]]) -> str:
    """What lies between the README's bench markers: the summary table, its sources named in the report."""
    t = summary_table(results)
    # the README keeps its lines short: the long notes stay in the report
    t.notes = [U8_NOTE.rstrip() + " (the report names them)" if n.startswith(U8_NOTE) else n for n in t.notes
               if not n.startswith(SOURCES_NOTE)]
    t.notes.append("medians at batch 10000; the bench files each cell comes from, and how they were measured: "
                   "[results/report.md](results/report.md#summary)")
    return render_markdown(t).split("\n", 2)[2] + "\n"  # the table without its heading


def source_name(path: Path) -> str:
    """How the page names a source: its name when it lies in results/, else the path as given."""
    try:
        return path.name if path.resolve().parent == paths.RESULTS.resolve() else str(path)
    except OSError:
        return str(path)


def readme_text(text: str, results: list[tuple[str, BenchResult]] | None = None,
                folder: Path | None = None) -> str:
    """The README `text` with its generated sections rewritten: the bench summary from `results` (None: from every
    bench file in `folder`, default results/) and the shipped models' table."""
    folder = folder or paths.RESULTS
    if results is None:
        results = [(p.name, load(p)) for p in all_sources(folder)]
    new = replace_between_markers(text, readme_block(results))
    models = folder / "model-accuracy.md"
    if models.exists() and "<!-- models:begin -->" in new:  # the shipped models' table, from `invoke accuracy-table`
        new = replace_between_markers(new, models.read_text(), "<!-- models:begin -->", "<!-- models:end -->")
    return new


def update_readme(results: list[tuple[str, BenchResult]] | None = None, readme: Path = README,
                  folder: Path | None = None) -> Path:
    """Rewrite the README's generated sections (`readme_text`); read and written as bytes so line endings stay as
    they are."""
    try:
        text = readme.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PyconvError(f"cannot read {readme}: {e}") from None
    new = readme_text(text, results, folder)
    if new != text:
        with atomic_path(readme) as tmp:
            tmp.write_bytes(new.encode("utf-8"))
    return readme
