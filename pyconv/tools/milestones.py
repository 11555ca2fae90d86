"""The course's milestones as standalone runs.

`run(...)` (the parent) validates the arguments, then runs the milestone in a child process under
timelog.run_timed, which prints and logs the /usr/bin/time block. The child (`python -m pyconv.tools.milestones`)
prints what the course printed:
    Loading fashion-mnist data... done
    Loading model... done
    New Inference
    Op Time: <seconds>            (one per conv layer, that layer's convolution only)
    Correctness: <acc> Model: <name>
Milestone 1 runs the network in PyTorch (engines/framework.py); 2, 3, 4 and final run the Plan that pyconv.plan
makes for them (the variant per conv layer, from the variants' roles and, for final, this GPU's evidence) on the
CPU engine (2) or the GPU engine (3, 4, final).

With `--edition E` (pyconv.core.editions) the milestone is read in that edition's numbering and runs its network;
a Mini-DNN edition (2020fa on) prints what its m1..m3 programs printed (print_minidnn) instead of the lines above.
The MXNet editions (2017fa-2019fa, the default 2019sp among them) print exactly the lines above."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .. import evidence, measure, native, variants
from ..core import data, editions, paths
from ..core.checks import MAX_BATCH, check_batch
from ..core.data import accuracy
from ..core.editions import Edition
from ..core.errors import PyconvError, one_line
from ..core.model import DEFAULT_MODEL, Model, load_model
from ..plan import Plan, conv_sites, plan
from ..bench import tags
from . import layercheck, profile_hook, timelog


def _device_name(m: str) -> str:
    if m == "2":
        return f"cpu: {tags.host_cpu()['model']}"
    return native.gpu().device_info()["name"]

MILESTONES = ("1", "2", "3", "4", "final")


def check_milestone(m) -> str:
    m = str(m).strip().lower()
    if m not in MILESTONES:
        raise PyconvError(f"unknown milestone '{m}' (known: {', '.join(MILESTONES)})")
    return m


def print_result(op_times: list[float], accuracy: float | None, model_name: str,
                 names: list[str] | None = None, check_lines: list[str] | None = None) -> None:
    """The course's lines: `Op Time: <seconds>` per conv layer (then the layer and its variant: the number stays
    the third word), the layer check's lines, then Correctness."""
    for i, t in enumerate(op_times):
        print(f"Op Time: {t:.6f}" + (f" {names[i]}" if names else ""))
    for line in check_lines or []:
        print(line)
    if accuracy is not None:
        print(f"Correctness: {accuracy:.4g} Model: {model_name}", flush=True)


def print_minidnn(edition: Edition, device: str, op_times: list[float], layer_times: list[float] | None,
                  accuracy: float, check_lines: list[str]) -> None:
    """What the course's Mini-DNN programs printed after `Loading model...Done`: per conv layer `Conv-CPU==` or
    `Conv-GPU==` with its `Op Time: X ms` (C++'s default float formatting, six significant digits), on the GPU
    its `Layer Time` (prolog + kernel + epilog) first; a blank line; `Test Accuracy: X`. Fall 2020 printed its
    GPU times in a block after the accuracy instead. The project's layer check goes before the blank line.
    layer_times None: this engine does not time the layer apart from the op; said in the Layer Time line."""
    gpu = device == "gpu"
    def layer(i: int) -> str:
        return f"{layer_times[i] * 1e3:.6g} ms" if layer_times else "n/a (this engine times the convolution alone)"

    timings_after = gpu and edition.interface == "2020fa"
    for i, t in enumerate(op_times):
        print("Conv-GPU==" if gpu else "Conv-CPU==")
        if gpu and not timings_after:
            print(f"Layer Time: {layer(i)}")
        if not timings_after:
            print(f"Op Time: {t * 1e3:.6g} ms")
    for line in check_lines:
        print(line)
    print()
    print(f"Test Accuracy: {accuracy:.6g}", flush=True)
    if timings_after:
        print("--------------------------------\n-           TIMINGS\n--------------------------------")
        for i, t in enumerate(op_times):
            print(f"Layer {i + 1} OpTime: {t * 1e3:.6g} ms")
            print(f"Layer {i + 1} LayerTime: {layer(i)}")
    print(flush=True)


def _student_slot(module, p: Plan):
    """The native module whose Mini-DNN student slot runs every conv layer of plan p (its timings reset), or None
    when a layer runs another variant or the module holds no Mini-DNN student."""
    if not all(c.variant.endswith("-student") for c in p.layers):
        return None
    if not getattr(module, "student_generation", lambda: "")():
        return None
    module.student_reset_times()
    return module


def _course_times(slot, n_layers: int) -> tuple[list[float], list[float]] | None:
    """(Op Times, Layer Times) in seconds from the student slot's own clock: one call per conv layer. None when the
    slot did not see exactly one call a layer (then the engine's op times stand)."""
    if slot is None:
        return None
    t = slot.student_times()
    if len(t["op_ms"]) != n_layers or len(t["layer_ms"]) != n_layers:
        return None
    return [v / 1e3 for v in t["op_ms"]], [v / 1e3 for v in t["layer_ms"]]


def load_inputs(model: Model, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """The first `batch` test images at the model's input size, uint8 [N][1][S][S], and their labels."""
    return data.load_test(model.input_size, batch)


def make_plan(m: str, model: Model, batch: int, impl: str | None = None, fallback: bool = False,
              gpu_name: str | None = None, echo=print) -> Plan:
    """What milestone m (2, 3, 4 or final) runs for `model` at this batch. final reads the evidence of this GPU
    (or of the GPU named gpu_name, which needs none visible): results/evidence/<gpu>.json, pyconv.evidence; on the
    visible GPU it first measures the layer shapes that file lacks (pyconv.measure; progress to `echo`)."""
    sites = conv_sites(model, batch)
    if m == "2":
        return plan(m, sites, variants.cpu_variants(), None, impl)
    ev = None
    if gpu_name is None:
        gpu_name = native.gpu().device_info()["name"]
        if m == "final" and impl is None:
            ev = measure.evidence_for(sites, gpu_name, echo=echo)
    elif m == "final" and impl is None:
        ev = evidence.for_gpu(gpu_name)
    return plan(m, sites, variants.gpu_variants(), ev, impl, model_digest=model.digest(), fallback=fallback)


def explain(m, batch=MAX_BATCH, model: str = DEFAULT_MODEL, impl: str | None = None, fallback: bool = False,
            gpu_name: str | None = None) -> list[str]:
    """The plan milestone m would run, in words (`invoke plan`); gpu_name: for that GPU, without one visible."""
    m = check_milestone(m)
    if m == "1":
        raise PyconvError("milestone 1 runs PyTorch's own convolutions: it has no plan (explain 2, 3, 4 or final)")
    p = make_plan(m, load_model(model), check_batch(batch), impl, fallback, gpu_name)
    return ([f"for {gpu_name}"] if gpu_name and p.device == "gpu" else []) + p.lines()


def run_planned(m: str, model: Model, x: np.ndarray, labels: np.ndarray, impl: str | None = None, gpus: str = "1",
                fallback: bool = False, record: layercheck.MilestoneRecord | None = None,
                edition: Edition | None = None) -> bool:
    """Milestone 2, 3, 4 or final in this process: prints 'New Inference', one Op Time per conv layer (with the
    layer and its variant), the layer check (outside the timed region) and Correctness (a Mini-DNN `edition`:
    print_minidnn's lines instead). Returns whether every conv layer matched the reference on the sample; fills
    `record` as it goes."""
    minidnn = edition is not None and edition.minidnn
    if m == "2":
        from ..engines import cpu

        p = make_plan(m, model, len(x), impl)
        if record is not None:
            record.layers = [layercheck.LayerRecord(c.site.index, c.site.layer, c.variant) for c in p.layers]
        rtols = {v.name: v.rtol for v in variants.cpu_variants()}
        idx = layercheck.sample_indices(len(x))
        if not minidnn:
            print("New Inference", flush=True)
        slot = _student_slot(native.cpu(), p) if minidnn else None
        res = cpu.run_plan(p, model, x, capture=idx)
        course_times = _course_times(slot, len(p.layers))
        checks = [layercheck.compare(y, xin, layer.weight, idx, rtols.get(c.variant, variants.DEFAULT_RTOL))
                  for c, (xin, y), layer in zip(p.layers, res.captured, model.convs)]
    else:
        from ..engines import gpu

        n_gpus = gpu.parse_gpus(gpus)
        if n_gpus > 1 and m != "final":
            raise PyconvError(f"--gpus {gpus}: only the final milestone runs on several GPUs")
        p = make_plan(m, model, len(x), impl, fallback)
        if record is not None:
            record.layers = [layercheck.LayerRecord(c.site.index, c.site.layer, c.variant) for c in p.layers]
        engine = gpu.engine_for(p, model, n_gpus)
        if not minidnn:
            print("New Inference", flush=True)
        slot = _student_slot(native.gpu(), p) if minidnn else None
        res = gpu.run_plan(p, engine, x)
        course_times = _course_times(slot, len(p.layers))  # read before the layer check runs the kernels again
        gv = variants.gpu_variants()
        checks = layercheck.check_gpu_layers(model, x, p.layers, {v.name: v.rtol for v in gv},
                                             {v.name: v.epilogue for v in gv})
    acc = accuracy(res.labels, labels)
    layers = [layercheck.LayerRecord(c.site.index, c.site.layer, c.variant, t, chk)
              for c, t, chk in zip(p.layers, res.op_times, checks)]
    bad = [r for r in layers if not r.check.ok]
    n = len(layercheck.sample_indices(len(x)))
    lines = ([f"error: {layercheck.failure_line(r)}" for r in bad] if bad else
             [f"Layer check: {len(layers)} conv layer(s) match the reference on {n} images (first and last)"])
    if minidnn:
        # A Mini-DNN student's slot times its calls as the course's framework did (Op Time: conv_forward_gpu alone;
        # Layer Time: prolog + kernel + epilog); the project's own variants have the engine's op time only.
        op_ms, layer_ms = course_times if course_times else (res.op_times, None)
        print_minidnn(edition, p.device, op_ms, layer_ms, acc, lines)
    else:
        print_result(res.op_times, acc, model.name, [f"{c.site.layer} {c.variant}" for c in p.layers], lines)
    if record is not None:
        record.layers, record.correctness = layers, float(acc)
        record.exit_reason = "layer check failed" if bad else "ok"
    return not bad


def _child(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m pyconv.tools.milestones")
    p.add_argument("--m", required=True)
    p.add_argument("--batch", required=True)
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--impl", default=None)
    p.add_argument("--device", default="both")
    p.add_argument("--gpus", default="1")
    p.add_argument("--fallback", action="store_true")
    p.add_argument("--record", default=None)
    p.add_argument("--edition", default=None)
    a = p.parse_args(argv)
    rec: list[layercheck.MilestoneRecord] = []  # filled once the run has one
    trace = profile_hook.child_start()  # only with PYCONV_PROFILE set (`invoke profile`): CUPTI-trace this process
    try:
        code = _child_run(a, rec)
    finally:
        if rec and not write_record(rec[0], a.record):
            code = 2
        # Flush the trace while the CUDA context and the modules are alive, not from an exit handler.
        profile_hook.child_finish(trace)
    return code


def _child_run(a: argparse.Namespace, rec: list) -> int:
    try:
        m, batch = check_milestone(a.m), check_batch(a.batch)
        ed = editions.get(a.edition) if a.edition else None
        minidnn = ed is not None and ed.minidnn
        if minidnn:  # the course's m1.cc .. m3.cc
            print(f"Test batch size: {batch}")
        print("Loading fashion-mnist data..." + ("" if minidnn else " "), end="", flush=True)
        model = load_model(a.model)
        x, labels = load_inputs(model, batch)
        print("Done" if minidnn else "done", flush=True)
        print("Loading model..." + ("" if minidnn else " "), end="", flush=True)
        print("Done" if minidnn else "done", flush=True)
        if m == "1":
            from ..engines.framework import run_m1

            run_m1(model, x, labels, device=a.device)
        else:
            if a.record:
                rec.append(layercheck.MilestoneRecord(m, model.name, model.digest(), batch, _device_name(m),
                                                      commit=tags.git_commit(), date=tags.utc_now()))
            if not run_planned(m, model, x, labels, impl=a.impl, gpus=a.gpus, fallback=a.fallback,
                               record=rec[0] if rec else None, edition=ed):
                return 1
    except (PyconvError, RuntimeError) as e:  # RuntimeError: a native module's own error, one line too
        print(f"error: {one_line(e)}", flush=True)
        if rec:
            rec[0].exit_reason = one_line(e)
        return 2
    return 0


def write_record(rec: layercheck.MilestoneRecord, dest: str) -> bool:
    """Write the run's record to dest; where that fails (the destination became a folder, the disk filled), to
    dest + '.kept-<pid>.json' beside it, saying so in one line. Returns whether dest got it."""
    try:
        rec.write(dest)
        return True
    except PyconvError as e:
        kept = f"{dest}.kept-{os.getpid()}.json"
        try:
            rec.write(kept)
            where = f"the record was written to {kept} instead"
        except PyconvError as e2:
            where = f"the record is lost ({one_line(e2)})"
        print(f"error: --record: {one_line(e)}; {where}", flush=True)
        return False


def student_native_dir(student: str, m: str, edition: str | None = None) -> Path:
    """The build folder `invoke build --student DIR [--edition E]` wrote DIR's modules to; one line when the module
    this milestone needs is not there."""
    from . import minidnn as md
    from .build import student_build_dir

    if edition is None:
        bdir, again = student_build_dir(student), f"invoke build --student {student}"
    else:
        gen = md.generation_of(edition)
        bdir = md.build_dir(student, gen, md.gpu_file(gen, None))
        again = f"invoke build --edition {edition} --student {student}"
    name = "_cpu" if m == "2" else "_gpu"
    if native._file_of(name, bdir) is None:
        raise PyconvError(f"--student {student}: no {name} module built for it in {bdir}: run `{again}` first")
    return bdir


def provenance(m: str, model: Model, p: Plan | None, argv: Sequence[str] | None = None,
               student_dir: Path | None = None) -> list[str]:
    """The log's header: what ran, from which tree, where, on which weights, with which variant per layer."""
    cpu = tags.host_cpu()
    lines = [f"command: {' '.join(shlex.quote(a) for a in (argv if argv is not None else sys.argv))}",
             f"commit: {tags.git_commit()}", f"date: {tags.utc_now()}",
             f"host CPU: {cpu['model']} ({cpu['cores']} cores)"]
    if m not in ("1", "2"):
        info = native.gpu().device_info()
        lines.append(f"GPU: {info['name']}; driver {tags.nvidia_driver() or 'unknown'}")
    lines.append(f"model: {model.name} (digest {model.digest()})")
    if student_dir is not None:
        lines.append(f"native modules: {student_dir} (invoke build --student)")
    if p is not None:
        lines += [f"plan: {line}" for line in p.lines()]
    return [f"# {line}" for line in lines]


def run(m, batch=None, model: str | None = None, impl: str | None = None, posix: bool = False,
        device: str = "both", gpus: str = "1", env: dict | None = None, fallback: bool = False,
        student: str | None = None, record: str | None = None, edition: str | None = None) -> int:
    """Validate, then run the milestone in a child under the /usr/bin/time-style logger. Returns the exit code.
    student: run the modules `invoke build --student DIR` built (PYCONV_NATIVE_DIR for the child). record: the
    child writes one JSON record of the run there (pyconv.tools.layercheck.MilestoneRecord). edition: read m in
    that edition's numbering (pyconv.core.editions; None: the default edition, whose numbering is the project's);
    model and batch default to the edition's."""
    chosen = editions.resolve(edition, m, device, model, batch)
    m, model, batch = chosen.milestone, chosen.model, chosen.batch
    m = check_milestone(m)
    batch = check_batch(batch)
    sdir = None
    if student is not None:
        if m == "1":
            raise PyconvError("--student: milestone 1 runs PyTorch's convolutions, not a student's")
        impl = student_impl(m, impl)
        sdir = student_native_dir(student, m, edition)
    # Every check that can be made before the child starts is made here, before a log is written: the parent
    # loads the very modules the child will (a student's build through PYCONV_NATIVE_DIR).
    with native_dir_set(sdir):
        return _run_checked(m, batch, model, impl, posix, device, gpus, env, fallback, student, sdir, record,
                            edition, chosen)


def student_impl(m: str, impl: str | None) -> str:
    """The variant `--student` runs: the student's own (cpu-student for milestone 2, gpu-student for 3, 4 and
    final); any other --impl would run the project's code under the student's name, and is refused."""
    own = "cpu-student" if m == "2" else "gpu-student"
    if impl is not None and impl != own:
        raise PyconvError(f"--student runs the student's own variant ({own} at milestone {m}); --impl {impl} would "
                          "not run the student's code (leave --impl out)")
    return own


@contextlib.contextmanager
def native_dir_set(folder: Path | None):
    """$PYCONV_NATIVE_DIR = folder for the duration (nothing when None), as the child will have it."""
    if folder is None:
        yield
        return
    before = os.environ.get(native.ENV_DIR)
    os.environ[native.ENV_DIR] = str(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(native.ENV_DIR, None)
        else:
            os.environ[native.ENV_DIR] = before


def check_student_variant(student: str, sdir: Path, m: str, impl: str, edition: str | None = None) -> None:
    """The student's build must hold the student's variant: a build that left the student's file out (it was
    missing, or its folder's path was split) would otherwise be blamed on --impl."""
    found = variants.cpu_variants() if m == "2" else variants.gpu_variants()
    if impl not in {v.name for v in found}:
        if edition is None:
            header, again = ("new-forward.h" if m == "2" else "new-forward.cuh"), f"invoke build --student {student}"
        else:
            header = "the student's CPU file" if m == "2" else "the student's GPU file"
            again = f"invoke build --edition {edition} --student {student}"
        raise PyconvError(f"--student {student}: the build in {sdir} holds no {impl}: {header} was not compiled into "
                          f"it; run `{again}` again")


def _run_checked(m: str, batch: int, model: str, impl: str | None, posix: bool, device: str, gpus: str,
                 env: dict | None, fallback: bool, student: str | None, sdir: Path | None,
                 record: str | None, edition: str | None = None, chosen=None) -> int:
    if record is not None:
        if m == "1":
            raise PyconvError("--record: milestone 1 has no plan to record (record 2, 3, 4 or final)")
        from ..core.fileio import check_writable

        check_writable(Path(record), "--record")
        record = str(Path(record).resolve())
    loaded = load_model(model)  # fail here, in one line, before starting a child
    if device not in ("cpu", "gpu", "both"):
        raise PyconvError(f"--device must be cpu, gpu or both, got '{device}'")
    data.check(loaded.input_size)  # a foreign or damaged data file is named here, not in the child
    data.check_model_input(loaded.name, loaded.input_shape)  # a model the images cannot feed
    if m == "2":
        from ..engines.cpu import check_memory, peak_bytes

        # first: a model the machine cannot hold is refused whatever variant would run it
        check_memory(peak_bytes(loaded, batch), f"milestone 2 on model '{loaded.name}' at batch {batch}")
        native.cpu()  # a module that is missing or does not load (a wrong $PYCONV_NATIVE_DIR): one line here
        if sdir is not None:
            check_student_variant(student, sdir, m, impl, edition)
        make_plan(m, loaded, batch, impl)  # an --impl milestone 2 cannot run: one line here
    env = paths.python_env(env)
    if sdir is not None:
        env = {**env, native.ENV_DIR: str(sdir)}
    if m in ("3", "4", "final"):
        native.gpu()  # no GPU or no CUDA build: one line here rather than a failing child
        if sdir is not None:
            check_student_variant(student, sdir, m, impl, edition)
        if impl is not None:
            make_plan(m, loaded, batch, impl, fallback)  # an unknown or refused --impl: one line here
    if m == "1":
        return _run_m1(batch, model, device, posix, env)
    argv = [sys.executable, "-m", "pyconv.tools.milestones", "--m", m, "--batch", str(batch), "--model", model,
            "--device", device, "--gpus", str(gpus)]
    if impl:
        argv += ["--impl", impl]
    if fallback:
        argv.append("--fallback")
    if record:
        argv += ["--record", record]
    if edition is not None:
        argv += ["--edition", chosen.edition.name]
    planned = None
    if m == "final" and impl is None:
        # Layer shapes this GPU has no evidence for are measured here, before the timed run (a damaged evidence
        # file: one line here).
        planned = make_plan(m, loaded, batch)
    try:
        header = "\n".join(provenance(m, loaded, planned or make_plan(m, loaded, batch, impl, fallback),
                                      student_dir=sdir))
    except PyconvError as e:
        header = f"# provenance incomplete: {one_line(e)}"
    tag = (f"{chosen.edition.name}-m{chosen.label}-" if edition is not None else f"m{m}-") + \
        f"{Path(model).stem}-b{batch}" + (f"-{impl}" if impl else "")
    timelog.check_log_folder(tag)
    if m != "2":
        # CUDA loads kernels lazily by default: the first launch of each would load its module inside the
        # timed convolution. Load them when the context is created instead (the user's own choice wins).
        env = {"CUDA_MODULE_LOADING": os.environ.get("CUDA_MODULE_LOADING", "EAGER"), **env}
    code, log, _ = timelog.run_timed(argv, tag=tag, posix=posix, env=env, header=header + "\n")
    print(f"log: {log}")
    return code


def _run_m1(batch: int, model: str, device: str, posix: bool, env: dict | None) -> int:
    """Milestone 1: one timed child per device, so m1.1 (CPU) and m1.2 (GPU) each get their own time block
    and log. Without a visible CUDA GPU, m1.2 is skipped in one line (an error when only it was asked)."""
    from ..engines.framework import cuda_available, require_torch

    require_torch()  # fail here, naming the extra, before starting a child
    code = 0
    for sub, dev in (("m1.1", "cpu"), ("m1.2", "gpu")):
        if device not in (dev, "both"):
            continue
        if dev == "gpu" and not cuda_available():
            if device == "gpu":
                raise PyconvError("m1.2 needs a CUDA GPU: PyTorch sees none "
                                  "(torch.cuda.is_available() is False)")
            print(f"{sub}: no CUDA GPU visible; skipped", flush=True)
            continue
        argv = [sys.executable, "-m", "pyconv.tools.milestones", "--m", "1", "--batch", str(batch),
                "--model", model, "--device", dev]
        tag = f"{sub}-{Path(model).stem}-b{batch}"
        timelog.check_log_folder(tag)
        sub_code, log, _ = timelog.run_timed(argv, tag=tag, posix=posix, env=env)
        print(f"log: {log}")
        code = code or sub_code
    return code


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
