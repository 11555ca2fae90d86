"""`/usr/bin/time` for the milestones: the run happens in a child process, the parent collects the child's real
resource usage with os.wait4 and its elapsed time, and formats them as GNU time does.

Default (GNU time's default format):
    4.40user 2.85system 0:01.99elapsed 363%CPU (0avgtext+0avgdata 332360maxresident)k
    0inputs+28240outputs (0major+110723minor)pagefaults 0swaps
With posix=True (`time -p`):
    real 1.99
    user 4.40
    sys 2.85
Every figure comes from the kernel's rusage for the child (and its children) or the parent's monotonic clock."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..core import paths
from ..core.fileio import check_writable, write_text_atomic
from ..core.signals import die_with_parent


@dataclass
class TimeRecord:
    user: float
    system: float
    elapsed: float
    maxresident_kb: int
    avgtext_kb: int
    avgdata_kb: int
    inputs: int
    outputs: int
    major: int
    minor: int
    swaps: int
    exit_status: int

    @classmethod
    def from_rusage(cls, ru: os.struct_rusage, elapsed: float, exit_status: int) -> TimeRecord:
        return cls(user=ru.ru_utime, system=ru.ru_stime, elapsed=elapsed, maxresident_kb=ru.ru_maxrss,
                   avgtext_kb=ru.ru_ixrss, avgdata_kb=ru.ru_idrss, inputs=ru.ru_inblock, outputs=ru.ru_oublock,
                   major=ru.ru_majflt, minor=ru.ru_minflt, swaps=ru.ru_nswap, exit_status=exit_status)

    def gnu(self) -> str:
        """GNU time's default block (plus its 'Command exited with non-zero status' line when it applies)."""
        cpu = f"{round(100 * (self.user + self.system) / self.elapsed)}%" if self.elapsed > 0 else "?%"
        head = f"Command exited with non-zero status {self.exit_status}\n" if self.exit_status else ""
        return (f"{head}{self.user:.2f}user {self.system:.2f}system {format_elapsed(self.elapsed)}elapsed {cpu}CPU "
                f"({self.avgtext_kb}avgtext+{self.avgdata_kb}avgdata {self.maxresident_kb}maxresident)k\n"
                f"{self.inputs}inputs+{self.outputs}outputs ({self.major}major+{self.minor}minor)pagefaults "
                f"{self.swaps}swaps")

    def posix(self) -> str:
        head = f"Command exited with non-zero status {self.exit_status}\n" if self.exit_status else ""
        return f"{head}real {self.elapsed:.2f}\nuser {self.user:.2f}\nsys {self.system:.2f}"


def format_elapsed(seconds: float) -> str:
    """GNU time's %E: [hours:]minutes:seconds with hundredths."""
    cs = int(round(seconds * 100))
    h, rem = divmod(cs, 360000)
    m, rem = divmod(rem, 6000)
    s, c = divmod(rem, 100)
    return f"{h}:{m:02d}:{s:02d}.{c:02d}" if h else f"{m}:{s:02d}.{c:02d}"


_GNU_RE = re.compile(
    r"(?:Command exited with non-zero status (?P<status>\d+)\n)?"
    r"(?P<user>\d+\.\d\d)user (?P<system>\d+\.\d\d)system (?P<elapsed>(?:\d+:)?\d+:\d\d\.\d\d)elapsed "
    r"(?P<cpu>\d+|\?)%CPU \((?P<avgtext>\d+)avgtext\+(?P<avgdata>\d+)avgdata (?P<maxres>\d+)maxresident\)k\n"
    r"(?P<inputs>\d+)inputs\+(?P<outputs>\d+)outputs \((?P<major>\d+)major\+(?P<minor>\d+)minor\)pagefaults "
    r"(?P<swaps>\d+)swaps")
_POSIX_RE = re.compile(r"real (?P<real>\d+\.\d\d)\nuser (?P<user>\d+\.\d\d)\nsys (?P<sys>\d+\.\d\d)")


def parse_gnu(text: str) -> dict:
    """Parse a GNU time block back (tests use it to check the format); raises ValueError if there is none."""
    m = _GNU_RE.search(text)
    if not m:
        raise ValueError("no GNU time block found")
    d = m.groupdict()
    parts = [float(p) for p in d["elapsed"].split(":")]
    elapsed = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    return {"user": float(d["user"]), "system": float(d["system"]), "elapsed": elapsed,
            "cpu_percent": None if d["cpu"] == "?" else int(d["cpu"]), "maxresident_kb": int(d["maxres"]),
            "inputs": int(d["inputs"]), "outputs": int(d["outputs"]), "major": int(d["major"]),
            "minor": int(d["minor"]), "swaps": int(d["swaps"]), "exit_status": int(d["status"] or 0)}


def parse_posix(text: str) -> dict:
    m = _POSIX_RE.search(text)
    if not m:
        raise ValueError("no `time -p` block found")
    return {k: float(v) for k, v in m.groupdict().items()}


def log_path(tag: str, pid: int) -> Path:
    """logs/<tag>-<date>-<time>-<child pid>.log: unique per run, so concurrent runs never share a log. The tag
    (it holds a model's file name) keeps only file-name-safe characters and at most 100 of them."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    tag = re.sub(r"[^A-Za-z0-9._-]", "_", tag)[:100]
    return paths.LOGS / f"{tag}-{stamp}-{pid}.log"


def check_log_folder(tag: str) -> None:
    """Fail before the run, in one line, when its log could not be written afterwards."""
    check_writable(log_path(tag, os.getpid()), "log")


def run_timed(argv: list[str], tag: str, posix: bool = False, env: dict | None = None,
              echo=None, header: str = "") -> tuple[int, Path, TimeRecord]:
    """Run argv as a child, echo its output live, then print and log the time block.

    Returns (exit status, log path, record). The log holds the program's output followed by the time block;
    it is written atomically once the child has ended."""
    echo = echo or sys.stdout
    start = time.monotonic()
    # die_with_parent: a parent killed outright (SIGKILL, which nothing can catch) takes the child with it
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, bufsize=1,
                            preexec_fn=die_with_parent())
    captured = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            captured.append(line)
            echo.write(line)
            echo.flush()
    except BaseException:  # SIGTERM or Ctrl-C in the parent: the child must not run on unwatched
        proc.kill()
        proc.wait()
        raise
    proc.stdout.close()
    _, status, ru = os.wait4(proc.pid, 0)
    elapsed = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # keep Popen from waiting again
    code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    rec = TimeRecord.from_rusage(ru, elapsed, code)
    block = rec.posix() if posix else rec.gnu()
    echo.write(block + "\n")
    echo.flush()
    path = log_path(tag, proc.pid)
    write_text_atomic(path, header + "".join(captured) + block + "\n")
    return code, path, rec
