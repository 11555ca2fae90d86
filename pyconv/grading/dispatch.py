"""Running grading jobs: on Ray (an embedded local Ray, or a running cluster), or one after another without it.

Ray is an optional extra (`pip install '.[grade]'`). Each job is one Ray task that asks for what it needs: one
CPU, and one GPU for milestones 3, 4 and final, so a node runs as many GPU jobs at once as it has GPUs, and Ray
sets CUDA_VISIBLE_DEVICES to the one it gave. The job's code (this package) travels with the task; the project it
runs is the checkout on the node (the same commit: a node with another one refuses the job).

Results come back as jobs finish, in whatever order; the caller writes the records. A job that fails for a reason
of the grader's own (a node without the checkout, a lost node) is reported as an error, never as a team's
verdict."""

from __future__ import annotations

import functools
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from ..core import optional
from ..core.errors import PyconvError, Terminated
from .job import JobResult, JobSpec, checkout_commit, needs_gpu, node_root, run_job
from .sandbox import SandboxUnavailable


class GraderError(Exception):
    """A job that could not be graded for a reason that is not the team's (reported, never recorded)."""


def grade_on_this_node(spec: JobSpec) -> JobResult:
    """The body of one job wherever it runs: check the node's checkout, then run the job."""
    root = node_root(spec)
    if not (root / "tasks.py").exists() and spec.project is None:
        raise GraderError(f"no pyconv checkout at {root} on {socket.gethostname()} "
                          "(set PYCONV_GRADE_ROOT when starting this node's `ray start`)")
    commit = checkout_commit(root)
    if spec.project is None and commit != spec.commit:
        raise GraderError(f"the checkout at {root} on {socket.gethostname()} is at {commit}, "
                          f"the grading run at {spec.commit}: records would not be comparable")
    try:
        return run_job(spec)
    except SandboxUnavailable as e:
        raise GraderError(str(e)) from None


def address_space_problem() -> str | None:
    """Why Ray cannot start under this process's address-space limit (`ulimit -v`), or None. Ray's processes
    reserve tens of GiB of virtual memory (its object store, gRPC's arenas) and fail to map it one by one, while
    the driver waits: measured, 14 silent minutes under `ulimit -v 8000000` before this check."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    return (f"Ray cannot run under an address-space limit (ulimit -v {soft // 1024} KiB here): its processes "
            "reserve far more virtual memory than they use. Raise it for this shell (ulimit -v unlimited) and run "
            "again; the memory each team may use is --memory-mb (enforced per step)")


def ray_available() -> bool:
    return optional.available("ray")


def visible_gpus() -> int:
    """GPUs this machine offers to an embedded Ray: CUDA_VISIBLE_DEVICES if set, else what nvidia-smi lists."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        return len([d for d in cvd.split(",") if d.strip() and d.strip() != "-1"])
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return len([ln for ln in out.stdout.splitlines() if ln.startswith("GPU ")]) if out.returncode == 0 else 0


def run_jobs(specs: list[JobSpec], cluster: str | None, say: Callable[[str], None],
             cpus_per_job: float = 1.0) -> Iterator[tuple[JobSpec, JobResult | None, str | None, dict]]:
    """Yield (spec, result or None, grader error or None, placement) as each job ends.

    cluster: None = an embedded local Ray (or, without Ray, this process, one job after another);
    an address = a running cluster ("auto" = the one `ray start` left on this machine)."""
    cluster = cluster or os.environ.get("RAY_ADDRESS") or None
    if not ray_available():
        if cluster:
            raise optional.MissingExtra(optional.missing_message("ray", f"--cluster {cluster}"))
        if any(needs_gpu(s.milestone) for s in specs) and visible_gpus() < 1:
            raise PyconvError("milestones 3, 4 and final need a GPU, and this machine shows none")
        say(f"Ray is not installed ({optional.install_hint('ray')}): grading the {len(specs)} job(s) one after another "
            "in this process")
        for spec in specs:
            try:
                yield spec, grade_on_this_node(spec), None, {"node": "local", "host": socket.gethostname()}
            except GraderError as e:
                yield spec, None, str(e), {"node": "local", "host": socket.gethostname()}
        return
    yield from _run_on_ray(specs, cluster, say, cpus_per_job)


def _run_on_ray(specs, cluster, say, cpus_per_job):
    why = address_space_problem()
    if why:
        raise PyconvError(why)
    import signal

    import ray

    # The job code goes to the workers with the task: a copy of just what it imports (this package and two core
    # modules; not the built native modules, which are each node's own). The project it runs is the node's checkout.
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    received: list[int] = []
    staging = tempfile.TemporaryDirectory(prefix="pyconv-grading-")
    try:
        runtime_env = {"py_modules": [str(_job_package(Path(staging.name)))],
                       "env_vars": {k: v for k, v in os.environ.items() if k.startswith("PYCONV_")}}
        if cluster:
            try:
                ray.init(address=cluster, runtime_env=runtime_env, logging_level="ERROR", log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise PyconvError(f"cannot reach the Ray cluster at {cluster}: {str(e).splitlines()[0]}") from None
            where = f"the Ray cluster at {cluster}"
        else:
            gpus = visible_gpus()
            ray.init(num_cpus=os.cpu_count(), num_gpus=gpus, include_dashboard=False, runtime_env=runtime_env,
                     logging_level="ERROR", log_to_driver=False)
            where = f"an embedded local Ray ({os.cpu_count()} CPUs, {gpus} GPUs)"
        # Ray's driver installs its own SIGTERM handler (a stack dump, then exit 15 or an abort): the caller's,
        # which ends in one line after the cleanup below, is put back, noting the signal on the way (Ray turns any
        # exception a handler raises inside its waits into a bare KeyboardInterrupt, losing which signal it was).
        for signum, handler in previous.items():
            if callable(handler):
                signal.signal(signum, functools.partial(_noting, received, handler))
        res = ray.cluster_resources()
        say(f"grading {len(specs)} job(s) on {where}: {len(ray.nodes())} node(s), "
            f"{res.get('CPU', 0):g} CPUs, {res.get('GPU', 0):g} GPUs")
        if any(needs_gpu(s.milestone) for s in specs) and res.get("GPU", 0) < 1:
            raise PyconvError("milestones 3, 4 and final need a GPU, and this Ray cluster has none")
        remote = ray.remote(_ray_job)
        pending = {}
        for spec in specs:
            opts = {"num_cpus": cpus_per_job, "num_gpus": 1 if needs_gpu(spec.milestone) else 0, "max_retries": 0}
            pending[remote.options(**opts).remote(spec)] = spec
        while pending:
            # a short wait at a time: a signal's handler runs between two waits, never after the last job
            done, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            if not done:
                continue
            ref = done[0]
            spec = pending.pop(ref)
            try:
                result, placement = ray.get(ref)
                yield spec, result, None, placement
            except GraderError as e:
                yield spec, None, str(e), {}
            except ray.exceptions.RayTaskError as e:
                cause = e.cause if isinstance(getattr(e, "cause", None), GraderError) else e
                yield spec, None, str(cause).strip().splitlines()[-1], {}
            except ray.exceptions.RayError as e:
                yield spec, None, f"Ray lost the job: {str(e).splitlines()[0]}", {}
    except KeyboardInterrupt as e:
        if received and received[-1] != signal.SIGINT and not isinstance(e, Terminated):
            raise Terminated(received[-1]) from None
        raise
    finally:
        # a second signal during the cleanup must not cut it short: Ray's processes and the staging folder go first
        for signum in previous:
            signal.signal(signum, signal.SIG_IGN)
        try:
            if ray.is_initialized():
                ray.shutdown()
            staging.cleanup()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def _noting(received: list[int], handler, signum, frame):
    received.append(signum)
    handler(signum, frame)


def _job_package(dest: Path) -> Path:
    """dest/pyconv holding the modules a job imports, and nothing else."""
    src = Path(__file__).resolve().parent.parent
    pkg = dest / "pyconv"
    for rel in ("__init__.py", "core/__init__.py", "core/errors.py", "core/fileio.py"):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, pkg / rel)
    shutil.copytree(src / "grading", pkg / "grading", ignore=shutil.ignore_patterns("__pycache__"))
    return pkg


def _ray_job(spec: JobSpec) -> tuple[JobResult, dict]:
    import ray

    ctx = ray.get_runtime_context()
    placement = {"node": ctx.get_node_id(), "host": socket.gethostname(),
                 "gpus": ",".join(str(g) for g in ray.get_gpu_ids())}
    return grade_on_this_node(spec), placement
