"""Argument checks shared by the tasks: integers given on the command line (as strings) or from Python, and names
that become file names. Callers word their own messages; these only decide what is valid."""

from __future__ import annotations

import re

from .errors import PyconvError

MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def as_int(value) -> int:
    """An int from an int, an integral float, or a string of digits; ValueError for anything else (bools too)."""
    if isinstance(value, bool) or value is None:
        raise ValueError(value)
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(value)
        return int(value)
    return value if isinstance(value, int) else int(str(value).strip())


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
    """A model name is also a file name under datasets/models/: no separators, no leading dot."""
    if not isinstance(name, str) or not MODEL_NAME_RE.match(name):
        raise PyconvError(f"model name must be letters, digits, '.', '_' or '-' (starting with a letter or digit), "
                          f"got {name!r}")
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
