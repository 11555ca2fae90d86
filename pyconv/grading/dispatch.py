"""Running grading jobs: on Ray (an embedded local Ray, or a running cluster), or one after another without it.

Ray is an optional extra (`pip install '.[grade]'`). Each job is one Ray task that asks for what it needs: one
CPU, and one GPU for milestones 3, 4 and final, so a node runs as many GPU jobs at once as it has GPUs, and Ray
sets CUDA_VISIBLE_DEVICES to the one it gave. The job's code (this package) travels with the task; the project it
runs is the checkout on the node (the same commit: a node with another one refuses the job).

Results come back as jobs finish, in whatever order; the caller writes the records. A job that fails for a reason
of the grader's own (a node without the checkout, a lost node) is reported as an error, never as a team's
verdict."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from ..core import optional
from ..core.errors import PyconvError
from .job import JobResult, JobSpec, checkout_commit, needs_gpu, node_root, run_job


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
    return run_job(spec)


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
    import ray

    # The job code goes to the workers with the task: a copy of just what it imports (this package and two core
    # modules; not the built native modules, which are each node's own). The project it runs is the node's checkout.
    staging = tempfile.TemporaryDirectory(prefix="pyconv-grading-")
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
    try:
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
            done, _ = ray.wait(list(pending), num_returns=1)
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
    finally:
        ray.shutdown()
        staging.cleanup()


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
