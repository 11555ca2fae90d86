"""pyconv's command line: thin Invoke tasks over the pyconv package (the logic lives in pyconv/ and native/).
The `pyconv` program runs them (pyconv.__main__), and so does `invoke` in a checkout (through its tasks.py).

    pyconv --list              every task (in a checkout: invoke --list)
    pyconv <task> --help       its flags
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from invoke import Exit

from pyconv.cli.parsing import MAX_BATCH, UsageError, task


def user_errors(fn):
    """Every way a task can fail ends in one line on stderr: the project's own errors (PyconvError) with exit
    status 1; SIGTERM, SIGHUP and Ctrl-C with 128 + the signal, after the cleanup of any half-written file; and,
    as a last resort, an OSError or an unexpected exception named in one line too. PYCONV_DEBUG=1 shows the
    traceback instead."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import signal

        from pyconv.core.errors import PyconvError, one_line
        from pyconv.core.signals import raise_terminated

        debug = os.environ.get("PYCONV_DEBUG", "") not in ("", "0")
        previous = {s: signal.signal(s, raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
        try:
            return fn(*args, **kwargs)
        except PyconvError as e:
            if debug:
                raise
            raise Exit(f"error: {one_line(e)}", code=1) from None
        except KeyboardInterrupt as e:
            signum = getattr(e, "signum", signal.SIGINT)
            raise Exit(f"error: stopped by {signal.Signals(signum).name}; no half-written file was kept",
                       code=128 + signum) from None
        except Exit:
            raise
        except MemoryError:
            if debug:
                raise
            raise Exit("error: out of memory", code=1) from None
        except OSError as e:
            if debug:
                raise
            where = f" ({e.filename})" if e.filename else ""
            raise Exit(f"error: {one_line(e.strerror or e)}{one_line(where)}", code=1) from None
        except Exception as e:
            if debug:
                raise
            raise Exit(f"error: internal error: {type(e).__name__}: {one_line(e)} (a bug: PYCONV_DEBUG=1 shows "
                       "where)", code=1) from None
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    return wrapper


@task(help={"source": "folder holding the four Fashion-MNIST .gz (or raw idx) files; else $FASHION_MNIST_DIR, "
                      "/usr/share/datasets/fashion-mnist (apt package dataset-fashion-mnist), the official URLs",
            "force": "rebuild datasets/fashion-mnist.h5 even when a valid one exists",
            "train": "also the 60000 training images (what `invoke train` reads; it prepares them itself if absent)"})
@user_errors
def data(c, source=None, force=False, train=False):
    """Fetch and verify Fashion-MNIST, write datasets/fashion-mnist.h5: the test images the milestones read (28x28
    and the course's 48/64/70/72 sets); with --train the training images too."""
    from pyconv.core import data as d

    d.prepare(source=source, force=force, train=train)


@task(help={"build_dir": "CMake build folder (default build/, or build/student-<hash> with --student)", "debug": "Debug instead of Release",
            "clean": "delete the build folder first (only a folder CMake made)",
            "jobs": "parallel compile jobs (default: all cores)",
            "cuda_arch": "CUDA architectures, e.g. 90 or native (default: native with a GPU, else 80;90)",
            "portable": "no -march=native for the CPU module (to carry the build to another CPU)",
            "student": "a folder holding a student's new-forward.h / new-forward.cuh (a team's submission): compiled "
                       "as cpu-student / gpu-student into a build folder of its own (default build/student-<hash>), "
                       "run with `invoke milestone --student DIR`",
            "target": "build only these CMake targets, e.g. _cpu (comma-separated)",
            "edition": "a Mini-DNN edition (2020fa on): --student DIR holds its cpu-new-forward.cc / new-forward.cu",
            "gpu_file": "with --edition: the student's file defining GPUInterface (default new-forward.cu)",
            "gpu": "compile the CUDA modules even where no GPU is visible (default: only where nvidia-smi sees one); "
                   "fails when nvcc or cuBLAS is missing",
            "ladder": "also compile the ladder's history steps (native/cuda/ladder/) into pyconv._gpu (implies --gpu)"},
      ints={"jobs": (0, None)})
@user_errors
def build(c, build_dir=None, debug=False, clean=False, jobs=0, cuda_arch="", portable=False, student=None,
          target=None, edition=None, gpu_file=None, gpu=False, ladder=False):
    """Configure and build the native modules (pyconv._cpu always, pyconv._gpu where a GPU is visible or with --gpu),
    then import each one: a module that does not load fails the build, naming the missing symbol. Flags apply
    to this build only (a plain `invoke build` returns to the defaults)."""
    from pyconv.tools import build as b

    for path in b.build(build_dir=build_dir, debug=debug, clean_first=clean, jobs=jobs, cuda_arch=cuda_arch,
                        portable=portable, student=student, targets=target, edition=edition, gpu_file=gpu_file,
                        gpu=gpu, ladder=ladder):
        print(f"built and imported {path}")


@task(help={"student": "a folder holding a student's new-forward.cuh and/or new-forward.h",
            "cuda_arch": "the GPU architecture nvcc compiles for (default 90)"})
@user_errors
def check(c, student=None, cuda_arch="90"):
    """Compile-check a student's files alone (nvcc for new-forward.cuh, no GPU needed; seconds, not a whole build)."""
    from pyconv.tools import check as ch

    if student is None:
        raise UsageError("--student DIR is required (the folder holding new-forward.cuh / new-forward.h)")
    ch.check_student(student, cuda_arch=cuda_arch)


@task(help={"only": "run only the fast or only the slow tests",
            "pytest_args": "more pytest arguments for both runs, e.g. \"-x -k cpu\" (split like a shell would, never "
                           "run by one)"})
@user_errors
def test(c, only=None, pytest_args=""):
    """The tests: the fast ones, then the slow ones, as two pytest runs with their 20 slowest tests listed."""
    from pyconv.tools import testsuite

    code = testsuite.run(only=only, pytest_args=pytest_args)
    if code:
        raise Exit(code=code)


@task(help={"source": "as for `invoke data`"})
@user_errors
def setup(c, source=None):
    """Everything a fresh checkout needs: the Debian packages (pyconv/core/system_packages.py), data, then build
    (Python packages come from requirements.txt)."""
    from pyconv.core import system_packages

    system_packages.ensure()
    data(c, source=source)
    build(c)


@task(help={"symbol": "the MXNet *-symbol.json", "params": "the MXNet *-NNNN.params",
            "name": "name of the new model (written to datasets/models/imported/NAME.h5)",
            "input_size": "input image size (default: 48, Spring 2019)", "force": "overwrite an imported model"},
      ints={"input_size": (1, None)})
@user_errors
def import_mxnet(c, symbol=None, params=None, name=None, input_size=48, force=False):
    """Convert an MXNet checkpoint (symbol JSON + .params) into the project's HDF5 model format, without MXNet."""
    from pyconv.core import mxnet_import
    from pyconv.core.checks import check_positive_int

    missing = [f"--{flag}" for flag, v in (("symbol", symbol), ("params", params), ("name", name)) if v is None]
    if missing:
        raise UsageError(f"{', '.join(missing)} required")
    size = check_positive_int(input_size, "--input-size")
    path = mxnet_import.import_checkpoint(symbol, params, name, input_size=size, force=force)
    print(f"wrote {path}")


@task(help={"m": "milestone: 1, 2, 3, 4 or final (with --edition: as that edition numbered them)",
            "batch": "number of test images, 1..10000 (default: the edition's, 10000)",
            "model": "model name (default: the edition's, ece408; `invoke models` lists them)",
            "edition": "the course's semester, e.g. 2021fa (default 2019sp): its milestone numbering, network and "
                       "batch (pyconv/core/editions.py); with --student, the edition the folder was built for",
            "impl": "convolution variant on every conv layer (m2: a CPU variant or numpy; m3/4/final: a GPU variant); "
                    "a layer it cannot take is an error",
            "fallback": "with --impl: a layer the variant cannot take runs milestone 4's (else 3's) default instead",
            "posix": "print the `time -p` form (real/user/sys) instead of GNU time's default block",
            "device": "m1 (and an edition's milestone with a CPU and a GPU program): cpu, gpu or both",
            "gpus": "final only: number of GPUs or 'all'",
            "student": "run DIR's own variant (cpu-student at m2, gpu-student at 3/4/final) from the modules "
                       "`invoke build --student DIR [--edition E]` built; --impl may only name that variant",
            "record": "write one JSON record of the run (per layer: variant, Op Time, check; Correctness) to FILE"},
      ints={"batch": (1, MAX_BATCH)})
@user_errors
def milestone(c, m=None, batch=None, model=None, impl=None, fallback=False, posix=False, device="both",
              gpus="1", student=None, record=None, edition=None):
    """Run a course milestone: prints Op Time per conv layer and Correctness, logs a /usr/bin/time block."""
    from pyconv.tools import milestones

    if m is None:
        raise UsageError("--m is required (1, 2, 3, 4 or final)")
    code = milestones.run(m, batch=batch, model=model, impl=impl, posix=posix, device=device, gpus=gpus,
                          fallback=fallback, student=student, record=record, edition=edition)
    if code:
        raise Exit(code=code)


@task(help={"m": "milestone: 2, 3, 4 or final", "batch": "number of images, 1..10000 (default 10000)",
            "model": "model name (default ece408)", "impl": "as for `invoke milestone`",
            "fallback": "as for `invoke milestone`",
            "gpu": "explain for this GPU by name (e.g. 'NVIDIA H200'; default: the visible one)"},
      ints={"batch": (1, MAX_BATCH)})
@user_errors
def plan(c, m=None, batch=MAX_BATCH, model="ece408", impl=None, fallback=False, gpu=None):
    """What a milestone would run, and why: the variant per conv layer, the FC math, the precision, the pipeline."""
    from pyconv.tools import milestones

    if m is None:
        raise UsageError("--m is required (2, 3, 4 or final)")
    print("\n".join(milestones.explain(m, batch=batch, model=model, impl=impl, fallback=fallback, gpu_name=gpu)))


@task(help={"results": "folder of bench JSON files (default results/); the files go to <folder>/evidence/"})
@user_errors
def evidence(c, results=None):
    """Rebuild each GPU's evidence file (what `final` chooses from) from the bench JSON files in results/."""
    from pyconv.bench import evidence as ev

    for path in ev.rebuild(results, echo=print):
        print(f"wrote {path}")


@task
@user_errors
def ladder_doc(c):
    """Write docs/ladder.md from the variants' descriptors (live and history) and docs/ladder-findings/NN.md."""
    from pyconv import ladder

    print(f"wrote {ladder.write()}")


@task(help={"m": "milestone to profile: 1, 3, 4 or final (2 runs on the CPU: nothing to trace)",
            "batch": "number of test images, 1..10000 (default: the edition's, 10000)",
            "model": "model name (default: the edition's, ece408; `invoke models` lists them)",
            "impl": "m3/4/final: the GPU convolution variant (default: the milestone's own)",
            "edition": "the course's semester, e.g. 2021fa (default 2019sp): its milestone numbering, network and "
                       "batch (pyconv/core/editions.py)"},
      ints={"batch": (1, MAX_BATCH)})
@user_errors
def profile(c, m=None, batch=None, model=None, impl=None, edition=None):
    """nvprof's summary of a milestone (kernels, memcpy/memset, CUDA API calls; `*` = over 90%), via CUPTI."""
    from pyconv.tools import profile as prof

    if m is None:
        raise UsageError("--m is required (1, 3, 4 or final)")
    code = prof.run_profile(m, batch=batch, model=model, impl=impl, edition=edition)
    if code:
        raise Exit(code=code)


@task
@user_errors
def models(c):
    """List the available models with their architecture (a damaged model file is listed as unreadable)."""
    from pyconv.core.errors import PyconvError, one_line
    from pyconv.core.model import available_models, load_model

    for name in available_models():
        try:
            m = load_model(name)
        except PyconvError as e:  # one damaged file in imported/ must not hide the others
            print(f"{name:16s} unreadable: {one_line(e)}")
            continue
        print(f"{name:16s} {m.arch:6s} {m.summary()}")


@task(help={"arch": "architecture: fa17, sp18, fa18, sp19, fa19 or fa20 (pyconv/core/archs.py)",
            "name": "name of the new model (written to datasets/models/NAME.h5)",
            "epochs": "passes over the 60000 training images, >= 1 (default 2)",
            "seed": "seed of the initialisation and the shuffling: same seed, same weights on one machine "
                    "(default 0)",
            "batch_size": "images per training step (default 64)", "lr": "Adam learning rate (default 0.001)",
            "max_batches": "stop after this many steps in all (for a deliberately under-trained model)",
            "threads": "CPU threads for PyTorch (default 1; the weights depend on it, so it is fixed)",
            "force": "overwrite an existing model file of that name"},
      ints={"epochs": (1, None), "seed": (0, None), "batch_size": (1, None), "max_batches": (1, None),
            "threads": (1, None)})
@user_errors
def train(c, arch=None, name=None, epochs=2, seed=0, batch_size=64, lr=None, max_batches=None, threads=1,
          force=False):
    """Train a course network with PyTorch on Fashion-MNIST and write it as a model file (needs PyTorch)."""
    from pyconv.tools import train as t

    if arch is None or name is None:
        raise UsageError("--arch and --name are required")
    path = t.train(arch, name, epochs=epochs, seed=seed, batch_size=batch_size, lr=1e-3 if lr is None else lr,
                   max_batches=max_batches, threads=threads, force=force)
    print(f"wrote {path}")


@task
@user_errors
def accuracy_table(c):
    """Measure every shipped model at 100/1000/10000 (as milestone 2); write results/model-accuracy.json, .md"""
    from pyconv.tools import train as t

    t.accuracy_table()
    print(f"wrote {t.ACCURACY_JSON} and {t.ACCURACY_MD}")
    print(t.ACCURACY_MD.read_text(), end="")



@task(help={"tools": "comma-separated compute-sanitizer tools (default: all four: memcheck, racecheck, "
                     "initcheck, synccheck)",
            "variants": "comma-separated GPU variants (default: every registry entry)",
            "m": "GPU milestone also run whole under memcheck: 3, 4, final, or none (default 3)",
            "model": "model of that milestone run (default ece408, else the first available)",
            "batch": "batch of that milestone run, 1..10000 (default 64)",
            "timeout": "seconds allowed to each sanitized process (default 600)"},
      ints={"batch": (1, MAX_BATCH)}, also={"m": ("milestone",)})
@user_errors
def sanitize(c, tools=None, variants=None, m="3", model=None, batch=64, timeout="600"):
    """compute-sanitizer over every GPU variant at edge shapes and one milestone run; fails on any error."""
    from pyconv.tools import sanitize as s

    code = s.run_sanitize(tools=tools, variants=variants, milestone=m, model=model, batch=batch,
                          timeout=timeout)
    if code:
        raise Exit(code=code)


@task(help={"model": "model(s) whose conv layers to benchmark, comma-separated; an architecture name (fa17, sp18, "
                     "fa18, sp19, fa19) works too (default ece408; for --end-to-end: every shipped model)",
            "batch": "images per layer, 1..10000 (default 10000; a single-thread CPU variant such as cpu-naive then "
                     "runs 1000 unless --batch is given)",
            "reps": "timed runs per measurement (default 20 on the GPU, 5 on the CPU)",
            "warmup": "untimed runs before the timed ones (default 5; the CPU does one)",
            "cpu": "benchmark the CPU variants against PyTorch on the CPU",
            "gpu": "benchmark the GPU variants against cuDNN (the default where a GPU is visible)",
            "end_to_end": "time the whole network (resident, pinned, pageable) against PyTorch + cuDNN, and trace "
                          "one pinned call (CUPTI: where its time goes)",
            "out": "JSON to write (default results/runs/bench-<gpu-slug>-<date>.json, or "
                   "bench-cpu-<cpu>-<date>.json; `invoke promote` moves a run into results/)",
            "variants": "only these variants, comma-separated (GPU and/or CPU registry names)",
            "gpus": "--end-to-end: also measure scaling over 1..N GPUs (N or 'all'; default 1)",
            "compiled": "--end-to-end: models also timed against torch.compile max-autotune (FP32, TF32, fp16 "
                        "channels_last; minutes of compilation each): names, 'all' or 'none' (default ece408)",
            "sweep": "our best correct variant against cuDNN FP32, TF32 and FP16 on 40 drawn layer shapes, without and "
                     "with tanh + max-pool 2/2 (warm-up 2, 5 reps unless given; --batch reduces the batch)",
            "edition": "the course's semester (e.g. 2021fa): its network is the default --model"},
      ints={"batch": (1, MAX_BATCH), "reps": (1, None), "warmup": (0, None)})
@user_errors
def bench(c, model=None, batch=None, reps=None, warmup=None, cpu=False, gpu=False, end_to_end=False, out=None,
          variants=None, gpus="1", compiled=None, sweep=False, edition=None):
    """Every variant on every conv layer: op time, GFLOP/s, GB/s, % of roofline, x cuDNN; JSON in results/runs/."""
    from pyconv.bench import run as b
    from pyconv.core import editions

    if edition is not None and model is None:
        model = editions.get(edition).model

    b.run(model=model, batch=batch, reps=reps, warmup=warmup, cpu=cpu, gpu=gpu, end_to_end=end_to_end, out=out,
          variants=variants, gpus=gpus, compiled=compiled, sweep=sweep)


@task(help={"json": "bench JSON file(s) to report on, comma-separated (default: every bench-*.json in results/)",
            "out": "Markdown page to write (default results/report.md; plots go beside it)",
            "readme": "also regenerate README.md's summary table (between <!-- bench:begin --> and "
                      "<!-- bench:end -->) and its models table"})
@user_errors
def report(c, json=None, out=None, readme=False):
    """results/report.md: every bench file's tables (newest first) and plots; --readme: the README's summary."""
    from pyconv.report import tables as r

    dest, pngs = r.write_report(json, out)
    print(f"wrote {dest}" + "".join(f", {p.name}" for p in pngs))
    if readme:
        results = None if json is None else [(r.source_name(src), r.load(src)) for src in r.sources_of(json)]
        print(f"rewrote the benchmark summary of {r.update_readme(results)}")


@task(help={"run": "the bench JSON to move into results/ (new runs are written to results/runs/)"})
@user_errors
def promote(c, run=None):
    """Move a bench run into results/; regenerate the evidence, results/report.md and the README's summary."""
    from pyconv.bench.promote import promote as move

    if run is None:
        raise UsageError("--run is required: invoke promote --run results/runs/bench-....json")
    move(run)


# --- teachers' tasks (left out of a student handout) ---


@task(help={"submissions": "folder with one folder per team (its new-forward.h and/or new-forward.cuh, optionally "
                           "members.txt with one name a line)",
            "m": "milestone: 2 (new-forward.h, CPU), 3, 4 or final (new-forward.cuh, GPU); default 2",
            "runs": "timed runs at the last batch; the fastest counts, as the course did (default 3)",
            "batches": "Correctness batches, comma-separated, the last one timed (default 100,1000,10000)",
            "model": "model the milestones run (default ece408)",
            "sanitize": "also run the first batch under compute-sanitizer memcheck (GPU milestones)",
            "cluster": "address of a running Ray cluster (default $RAY_ADDRESS; neither: an embedded local Ray)",
            "grades": "folder for the records (default results/grades)",
            "timeout_build": "wall-clock seconds for a team's build (default 900)",
            "timeout_run": "wall-clock seconds for each milestone run (default 900)",
            "memory_mb": "memory for each step, MiB, all its processes together (default 8192)",
            "cuda_arch": "passed to each team's build (e.g. 90)",
            "project": "testing the grader: a Python script standing in for the project's command line",
            "keep": "keep each job's scratch folder (its build and logs) for inspection",
            "jobs_cpus": "CPUs each job asks Ray for (default 1)",
            "no_sandbox": "run the teams' code without bubblewrap, with your own rights (each record says so)",
            "edition": "the class's semester, e.g. 2021fa (default 2019sp): --m in its numbering, its network, "
                       "its layer shapes only, its performance grade"},
      ints={"runs": (1, None), "timeout_build": (1, None), "timeout_run": (1, None), "memory_mb": (1, None),
            "jobs_cpus": (1, None)})
@user_errors
def grade(c, submissions=None, m="2", runs=3, batches=None, model=None, sanitize=False, cluster=None,
          grades=None, timeout_build=900, timeout_run=900, memory_mb=8192, cuda_arch="", project=None,
          keep=False, jobs_cpus=1, no_sandbox=False, edition=None):
    """Grade every team of a submissions folder at one milestone (on Ray): a JSON record each in results/grades/."""
    from pyconv.tools import grade as g

    code = g.grade(submissions, m=m, runs=runs, batches=batches, model=model, sanitize=sanitize, cluster=cluster,
                   grades=grades, timeout_build=timeout_build, timeout_run=timeout_run, memory_mb=memory_mb,
                   cuda_arch=cuda_arch, project=project, keep=keep, jobs_cpus=jobs_cpus, no_sandbox=no_sandbox,
                   edition=edition)
    if code:
        raise Exit(code=code)


@task(help={"grades": "folder of grade records (default results/grades)",
            "m": "only this milestone (default: every milestone with records)",
            "out": "folder for leaderboard-m<M>.md/.csv/.png (default: the grades folder)"})
@user_errors
def leaderboard(c, grades=None, m=None, out=None):
    """The class's standings from the grade records: Markdown, CSV and PNG, ranked by the sum of Op Times."""
    from pyconv.tools import grade as g
    from pyconv.tools import leaderboard as lb

    written = lb.write_leaderboard(Path(grades) if grades else g.DEFAULT_GRADES, milestone=m, out=out)
    print("wrote " + ", ".join(str(p) for p in written))


@task(help={"dest": "new folder for the student edition (must not exist or be empty)",
            "edition": "the semester handed out, e.g. 2021fa (default 2019sp): its network, files and milestones"})
@user_errors
def handout(c, dest=None, edition=None):
    """Write the student edition of this tree: skeletons in the student slots, no variant files, no grader."""
    from pyconv.tools import handout as h

    if dest is None:
        raise UsageError("--dest DIR is required (a new folder for the student edition)")
    h.write_handout(dest, edition=edition)


# --- end of teachers' tasks ---
