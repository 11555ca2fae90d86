"""Signals: SIGTERM and SIGHUP stop a task as Ctrl-C does, and a child never outlives the task that started it.

A handler that raises runs wherever the interpreter happens to be. Inside a finalizer (a weakref callback such as
WeakValueDictionary's, a `__del__`; h5py closes its objects through them) an exception cannot propagate: Python
prints "Exception ignored in ... Traceback" and carries on, so the stop was lost and the task finished its work
(seen with SIGTERM during `invoke data`). There the handler raises nothing and has the signal delivered again a
moment later, when the finalizer has returned. A finalizer this module does not recognise still swallows the
raise: sys.unraisablehook then sees the Terminated, prints nothing and has the signal delivered again the same way."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

from .errors import Terminated

# Code whose frames are finalizers, or run inside them: a raise there is swallowed.
_FINALIZER_FILES = ("weakref.py", "_weakrefset.py")
_FINALIZER_NAMES = ("__del__", "_remove_dead_weakref")
_REDELIVER_S = 0.05
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _in_finalizer(frame) -> bool:
    f, depth = frame, 0
    while f is not None and depth < 4:
        code = f.f_code
        if code.co_name in _FINALIZER_NAMES or os.path.basename(code.co_filename) in _FINALIZER_FILES:
            return True
        if "h5py" in code.co_filename:  # h5py's close and its objects' finalizers
            return True
        f, depth = f.f_back, depth + 1
    return False


def _redeliver(signum: int) -> None:
    timer = threading.Timer(_REDELIVER_S, os.kill, (os.getpid(), signum))
    timer.daemon = True
    timer.start()


def _unraisable(unraisable) -> None:
    if isinstance(unraisable.exc_value, Terminated):
        _redeliver(unraisable.exc_value.signum)  # swallowed by a finalizer: once more, outside it
        return
    _previous_hook(unraisable)


_previous_hook = sys.unraisablehook


def raise_terminated(signum, frame):
    """The SIGTERM / SIGHUP handler of every task: raises Terminated (a KeyboardInterrupt) where the process is,
    unless that is a finalizer; then the same signal is sent again shortly, to land outside it."""
    global _previous_hook
    if sys.unraisablehook is not _unraisable:
        _previous_hook, sys.unraisablehook = sys.unraisablehook, _unraisable
    if _in_finalizer(frame):
        _redeliver(signum)
        return
    raise Terminated(signum)


def die_with_parent():
    """A preexec_fn for subprocess.Popen: on Linux the child gets SIGKILL when the process that started it dies,
    even by SIGKILL (which no handler sees); elsewhere None (nothing to run). The parent may already be gone by
    the time the child runs this: then the child ends at once. libc is looked up here, in the parent: the child
    between fork and exec must do no more than the call."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def preexec():
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(128 + signal.SIGKILL)

    return preexec
