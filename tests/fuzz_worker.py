"""A fork server for the fuzz tests: imports the CLI (tasks.py) and the package once, then runs each request as
`invoke <argv>` in a forked child under a memory bound (RLIMIT_AS) and a time bound (SIGALRM), with stdout and
stderr captured. A crash, a hang or memory exhaustion in the child is reported, never suffered by the test.

Protocol: one JSON request per line on stdin {"argv": [...], "cwd": str, "out": str, "err": str, "timeout": s,
"memory": bytes above the worker's own address space}; one JSON reply per line on stdout {"status": exit status
or -signal, "seconds": float}. The child's output goes to the files named by "out" and "err"."""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _address_space() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def _child(req: dict, program) -> None:
    os.chdir(req["cwd"])
    for fd, name in ((1, req["out"]), (2, req["err"])):
        target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    limit = _address_space() + int(req["memory"])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.alarm(int(req["timeout"]))
    code = 0
    try:
        program.run(["invoke", *req["argv"]])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # an escape past the CLI's own handling: shown as a traceback, which the test refuses
        import traceback

        traceback.print_exc()
        code = 99
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    import importlib.util

    from invoke import Collection, Program

    spec = importlib.util.spec_from_file_location("pyconv_tasks", ROOT / "tasks.py")
    tasks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tasks)
    program = Program(namespace=Collection.from_module(tasks), name="invoke", binary="invoke")
    # What the tasks import lazily, imported once here so that each fork starts warm.
    import h5py  # noqa: F401
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401

    from pyconv.core import data, model, mxnet_import  # noqa: F401
    from pyconv.report import tables  # noqa: F401

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(req, program)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        print(json.dumps({"status": code, "seconds": time.monotonic() - start}), flush=True)


if __name__ == "__main__":
    main()
