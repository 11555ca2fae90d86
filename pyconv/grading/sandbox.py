"""One step of a grading job (a build, a milestone run) under limits.

What every step gets, with or without a sandbox program:
- its own session and process group (start_new_session), so the whole tree can be killed at once;
- a wall-clock limit: past it every process of the session is sent SIGKILL;
- rlimits set by a small launcher before exec (not preexec_fn: the grader runs inside Ray's threaded workers,
  where preexec_fn may deadlock): RLIMIT_FSIZE (one file), RLIMIT_CPU, and RLIMIT_AS where the step runs no CUDA
  (the CUDA driver reserves far more address space than it uses, so an address-space limit breaks cudaInit);
- a watchdog that sums the resident memory of the session's processes, counts them, and measures the step's
  writable folder: over any limit, the session is killed and the reason recorded. RLIMIT_NPROC would be the
  kernel's own process limit, but it is not enforced for root, and graders often run as root;
- stdin from /dev/null, stdout+stderr captured up to a cap (the head and the tail are kept).

Where bubblewrap (`bwrap`) works, the step also runs with no network (its own loopback only), its own PID
namespace (a process that leaves the session still dies with the sandbox), a read-only view of the whole file
system (/tmp included), other teams' folders hidden, and only its scratch folder writable. Where only
`unshare` works, the step gets no network and nothing else. What is not isolated is listed in the README.

When a step ends, its process group, its session and every process carrying its marker (STEP_MARKER, in its
environment: one that left the session with setsid still has it) are killed, and the grader checks that none is
left; what it checked and found is the step's `cleanup`, quoted by the evidence instead of a claim it did not
check."""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")
MB = 1 << 20
STEP_MARKER = "PYCONV_GRADE_STEP"  # in every step's environment: finds the processes that left its session
RUN_MARKER = "PYCONV_GRADE_RUN"  # in every job's environment: finds what a stopped grading run left behind


@dataclass(frozen=True)
class Limits:
    """Per-step limits. Seconds are wall-clock; megabytes are MiB."""

    wall_s: float = 900.0
    memory_mb: int = 8192  # resident memory of all the step's processes together (and RLIMIT_AS where allowed)
    file_mb: int = 1024  # RLIMIT_FSIZE: the largest file one process may write
    disk_mb: int = 2048  # everything written under the scratch folder
    processes: int = 256  # processes alive at once in the step's session
    cpu_s: int = 0  # RLIMIT_CPU per process; 0 = twice the wall limit
    output_kb: int = 256  # captured output kept (half from the start, half from the end)


@dataclass
class StepResult:
    """What happened to one step. `killed` names the grader's own reason for killing it, if it did."""

    name: str
    returncode: int  # exit status; -N when ended by signal N
    elapsed_s: float
    peak_rss_mb: float
    output: str
    killed: str | None = None  # "timeout" | "memory" | "processes" | "disk"
    detail: str = ""  # why it was killed, in words that do not change from one run to the next
    measured: str = ""  # the value measured when it was killed (for the log: it varies between runs)
    isolation: str = "none"
    cleanup: str = ""  # what the grader checked when it ended the step's processes, and what it found left

    @property
    def signal_name(self) -> str | None:
        if self.returncode < 0:
            return _signame(-self.returncode)
        return None


def _signame(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


# --- which sandbox program works here: checked for every job (a node's bwrap can break or be removed while a Ray
# worker lives on), never cached; present is not enough, namespaces may be off

BWRAP_PROBE = ["bwrap", "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--die-with-parent", "--", "true"]


class SandboxUnavailable(Exception):
    """A job that must run under bwrap found none that works on its node (the grader's problem, not the team's)."""


def _probe(argv: list[str]) -> str | None:
    """None when argv starts a process here; else why not, in a few words."""
    if shutil.which(argv[0]) is None:
        return "not installed"
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]


def bwrap_problem() -> str | None:
    """None when bubblewrap works here; else what is wrong, as the end of a sentence."""
    forced = os.environ.get("PYCONV_GRADE_ISOLATION")
    if forced in ("none", "unshare"):
        return f"PYCONV_GRADE_ISOLATION={forced} turns its sandbox (bubblewrap) off"
    why = _probe(BWRAP_PROBE)
    if why == "not installed":
        return "bubblewrap (bwrap), its sandbox, is not installed"
    if why:
        return f"bubblewrap (bwrap) is installed but cannot start a sandbox here ({why[:160]})"
    return None


def detect_isolation() -> str:
    """'bwrap', 'unshare' or 'none': the strongest sandbox that actually starts a process on this machine now.
    PYCONV_GRADE_ISOLATION=none|unshare|bwrap forces a weaker one (for comparison and tests)."""
    forced = os.environ.get("PYCONV_GRADE_ISOLATION")
    if forced in ("none", "unshare", "bwrap"):
        return forced
    if _probe(BWRAP_PROBE) is None:
        return "bwrap"
    if _probe(_unshare_prefix() + ["true"]) is None:
        return "unshare"
    return "none"


def _unshare_prefix() -> list[str]:
    # root may make a network namespace directly; anyone else needs a user namespace for it
    return ["unshare", "--net", "--"] if os.geteuid() == 0 else ["unshare", "--net", "--map-root-user", "--"]


def bwrap_prefix(scratch: Path, hide: list[Path], limits: Limits, gpu: bool) -> list[str]:
    """The bwrap command line: read-only /, a minimal /dev (plus the NVIDIA device nodes for a GPU step), a private
    /proc, `hide` covered by empty tmpfs (other teams' scratch and submissions, the grades), the scratch
    folder writable, no network."""
    args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev"]
    if gpu:
        for node in sorted(glob.glob("/dev/nvidia*")):
            args += ["--dev-bind", node, node]
    # /tmp stays as read-only as the rest (TMPDIR points into the scratch folder): a private tmpfs there would
    # also hide a checkout, a data file or a Python that lives under /tmp (CI clones often do)
    args += ["--proc", "/proc"]
    for h in hide:
        if h.exists():
            args += ["--tmpfs", str(h)]  # before the scratch bind: a scratch inside `h` stays visible
    for f in secret_files():
        args += ["--ro-bind", "/dev/null", str(f)]
    args += ["--bind", str(scratch), str(scratch), "--unshare-net", "--unshare-pid", "--unshare-ipc",
             "--unshare-uts", "--die-with-parent", "--chdir", str(scratch)]
    if os.geteuid() == 0:
        # A grader running as root keeps every capability inside bwrap unless told otherwise, and with
        # CAP_SYS_ADMIN `mount -o remount,bind,rw /` undoes the read-only view (measured: tests/test_grade_safety.py)
        args += ["--cap-drop", "ALL"]
    return args + ["--"]


def secret_files() -> list[Path]:
    """Files a job must not read even though the grader can: Ray's cluster token (whoever holds it can run code
    on every node of the cluster) and the key that signs the grade records (whoever holds it can forge one)."""
    from .schema import key_path

    out = [Path.home() / ".ray" / "auth_token", key_path()]
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        out.append(Path(os.environ["RAY_AUTH_TOKEN_PATH"]))
    return [f.resolve() for f in out if f.is_file()]


def job_environment(base: dict[str, str]) -> dict[str, str]:
    """The grader's environment without Ray's own variables (RAY_AUTH_TOKEN among them) and without the path of
    the grader's key; CUDA_VISIBLE_DEVICES, which Ray set for this job's GPU, stays."""
    return {k: v for k, v in base.items() if not k.startswith("RAY_") and k != "PYCONV_GRADE_KEY_FILE"}


# The launcher sets the rlimits, then execs the step: it runs outside the sandbox, before bwrap.
_LAUNCHER = r"""
import os, resource, sys
as_mb, fsize_mb, cpu_s = (int(v) for v in sys.argv[1:4])
if as_mb:
    resource.setrlimit(resource.RLIMIT_AS, (as_mb << 20, as_mb << 20))
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_mb << 20, fsize_mb << 20))
resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
os.execvp(sys.argv[5], sys.argv[5:])
"""


def run_step(name: str, argv: list[str], *, scratch: Path, env: dict[str, str], limits: Limits, gpu: bool = False,
             hide: list[Path] | None = None, isolation: str | None = None) -> StepResult:
    """Run argv in `scratch` under `limits` (and the sandbox where one works); return what happened."""
    isolation = isolation or detect_isolation()
    if isolation == "bwrap":
        prefix = bwrap_prefix(scratch, hide or [], limits, gpu)
    elif isolation == "unshare":
        prefix = _unshare_prefix()
    else:
        prefix = []
    # Every process of the step inherits this marker: one that leaves the session (setsid) and its process group
    # is still found by it in /proc and killed with the rest (unless it also clears its environment, which only
    # bwrap's PID namespace covers).
    marker = f"{STEP_MARKER}={secrets.token_hex(8)}"
    env = {**env, STEP_MARKER: marker.split("=", 1)[1]}
    as_mb = 0 if gpu else limits.memory_mb
    cpu_s = limits.cpu_s or int(2 * limits.wall_s) + 1
    full = [sys.executable, "-c", _LAUNCHER, str(as_mb), str(limits.file_mb), str(cpu_s), "--", *prefix, *argv]
    start = time.monotonic()
    proc = subprocess.Popen(full, cwd=scratch, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    reader = _CappedReader(proc.stdout, limits.output_kb * 1024)
    reader.start()
    killed, detail, measured, peak_rss = None, "", "", 0
    # Where RLIMIT_AS holds the step, the allocation fails inside the program first (it says so, the same way
    # every time); the watchdog is the backstop there, and the limit itself for CUDA steps.
    rss_limit = limits.memory_mb * MB * (1 if gpu else 1.25)
    next_disk = start
    status = ru = None
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        now = time.monotonic()
        count, rss = _session_usage(proc.pid)
        peak_rss = max(peak_rss, rss)
        if killed is None:
            if now - start > limits.wall_s:
                killed, detail = "timeout", f"ran past its wall-clock limit of {limits.wall_s:g} s"
                measured = f"{now - start:.1f} s"
            elif rss > rss_limit:
                killed, detail = "memory", f"its processes held more than the memory limit of {limits.memory_mb} MiB"
                measured = f"{rss / MB:.0f} MiB resident"
            elif count > limits.processes:
                killed, detail = "processes", f"more than {limits.processes} processes at once"
                measured = f"{count} processes"
            elif now >= next_disk:
                used = _folder_bytes(scratch)
                next_disk = now + 1.0
                if used > limits.disk_mb * MB:
                    killed, detail = "disk", f"wrote more than {limits.disk_mb} MiB into its folder"
                    measured = f"{used / MB:.0f} MiB written"
            if killed:
                _kill_session(proc.pid, marker)
        else:
            _kill_session(proc.pid, marker)  # a process forked after the first kill
        time.sleep(0.05)
    elapsed = time.monotonic() - start
    # anything the step left behind (a daemon, a process that outlived its parent), then a check that it is gone
    left = _end_all(proc.pid, marker)
    cleanup = ("every process found in its session, its process group or carrying its marker was killed"
               if not left else f"{left} of its processes could not be killed")
    if isolation == "bwrap" and not left:
        cleanup += " (and its sandbox's PID namespace ended)"
    proc.returncode = os.waitstatus_to_exitcode(status)
    reader.join(timeout=5)
    proc.stdout.close()
    peak_rss = max(peak_rss, ru.ru_maxrss * 1024)
    return StepResult(name=name, returncode=proc.returncode, elapsed_s=elapsed, peak_rss_mb=peak_rss / MB,
                      output=reader.text(), killed=killed, detail=detail, measured=measured,
                      isolation=isolation, cleanup=cleanup)


def _session_usage(sid: int) -> tuple[int, int]:
    """(processes, resident bytes) of every process whose session id is `sid`."""
    count = rss = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2:].split()
            if int(fields[3]) != sid:  # field 6 of stat: session
                continue
            count += 1
            rss += int(fields[21]) * PAGE  # field 24: rss in pages
        except (OSError, ValueError, IndexError):
            continue
    return count, rss


def _pids() -> list[int]:
    return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]


def _carries(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:
        return False


def _members(sid: int, marker: str | None) -> list[int]:
    """Processes in session `sid` (or group `sid`), and with a marker, every process whose environment holds it."""
    out, m = [], marker.encode() if marker else None
    for pid in _pids():
        try:
            if os.getsid(pid) == sid or os.getpgid(pid) == sid:
                out.append(pid)
                continue
        except (ProcessLookupError, PermissionError):
            continue
        if m and _carries(pid, m):
            out.append(pid)
    return out


def _kill_session(sid: int, marker: str | None = None) -> None:
    """SIGKILL the process group, every process still in the session (one that changed its group too), and with
    a marker every process that carries it (one that left the session with setsid)."""
    try:
        os.killpg(sid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in _members(sid, marker):
        if pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _end_all(sid: int, marker: str, wait_s: float = 5.0) -> int:
    """Kill what is left of a step and check: how many of its processes are still alive after `wait_s` (a
    SIGKILLed process takes a moment to go; a zombie whose parent is gone counts as gone)."""
    deadline = time.monotonic() + wait_s
    while True:
        _kill_session(sid, marker)
        left = [p for p in _members(sid, marker) if p != os.getpid() and not _zombie(p)]
        if not left or time.monotonic() > deadline:
            return len(left)
        time.sleep(0.1)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2:][:1] == b"Z"
    except (OSError, ValueError):
        return True


def sweep(marker_name: str, value: str) -> int:
    """Kill every process whose environment holds marker_name=value (the steps of a grading run that was stopped
    while its jobs ran); returns how many were found."""
    m = f"{marker_name}={value}".encode()
    found = [p for p in _pids() if p != os.getpid() and _carries(p, m)]
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return len(found)


def _folder_bytes(folder: Path) -> int:
    total = 0
    stack = [str(folder)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                        elif e.is_file(follow_symlinks=False):
                            total += e.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
        except OSError:
            continue
    return total


class _CappedReader(threading.Thread):
    """Drains a pipe, keeping its first and last `cap/2` bytes (a step that prints forever cannot fill memory)."""

    def __init__(self, pipe, cap: int):
        super().__init__(daemon=True)
        self.pipe, self.half = pipe, cap // 2
        self.head, self.tail, self.dropped = bytearray(), bytearray(), 0

    def run(self):
        fd = self.pipe.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            room = self.half - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self.tail += chunk
                if len(self.tail) > self.half:
                    self.dropped += len(self.tail) - self.half
                    del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        middle = f"\n[... {self.dropped} bytes of output left out ...]\n" if self.dropped else ""
        return bytes(self.head).decode(errors="replace") + middle + bytes(self.tail).decode(errors="replace")
