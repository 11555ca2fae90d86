"""Argument checks shared by the tasks: integers given on the command line (as strings) or from Python, and names
that become file names. Callers word their own messages; these only decide what is valid."""

from __future__ import annotations

import re
from pathlib import Path

from .errors import PyconvError

MODEL_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # used with fullmatch: `$` lets a "\n" through
INT_RE = re.compile(r"[+-]?[0-9]+")  # ASCII only: int() also takes "١٠٠", "1_000" and " 7 "


def as_int(value) -> int:
    """An int from an int, an integral float, or a string of ASCII digits (an optional sign, at most 18 of them);
    ValueError for anything else (bools, other scripts' digits, underscores, surrounding blanks)."""
    if isinstance(value, bool) or value is None:
        raise ValueError(value)
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(value)
        return int(value)
    if isinstance(value, int):
        return value
    text = str(value)
    if not INT_RE.fullmatch(text) or len(text.lstrip("+-")) > 18:
        raise ValueError(value)
    return int(text)


def check_positive_int(value, what: str) -> int:
    """`what` must be a positive integer (see as_int); the message names it."""
    try:
        n = as_int(value)
    except (TypeError, ValueError):
        raise PyconvError(f"{what} must be a positive integer, got {value!r}") from None
    if n <= 0:
        raise PyconvError(f"{what} must be a positive integer, got {n}")
    return n


def check_model_name(name) -> str:
    """A model name is also a file name under datasets/models/: no separators, no leading dot, no control
    characters, at most 100 characters."""
    if not isinstance(name, str) or not MODEL_NAME_RE.fullmatch(name):
        raise PyconvError(f"model name must be 1 to 100 letters, digits, '.', '_' or '-' (starting with a letter or "
                          f"digit), got {name!r}")
    return name


MAX_BATCH = 10000  # the test set's size: every milestone and the bench take 1..10000 images


def check_batch(batch) -> int:
    """1..10000, an integer (a string like '100' is accepted; '1.5', '0', '-3', 'abc' are not)."""
    try:
        n = as_int(batch)
    except (TypeError, ValueError):
        raise PyconvError(f"batch must be an integer between 1 and {MAX_BATCH}, got {batch!r}") from None
    if not 1 <= n <= MAX_BATCH:
        raise PyconvError(f"batch must be an integer between 1 and {MAX_BATCH}, got {n}")
    return n


def cmake_safe(path: Path, what: str) -> Path:
    """CMake splits a value at `;` (a list): a path holding one reaches the compiler as two paths, and the build
    would go on without the half it lost. Refused in one line."""
    if ";" in str(path):
        raise PyconvError(f"{what} {str(path)!r} holds a ';', which CMake reads as a list separator: rename or "
                          "move the folder")
    return path
