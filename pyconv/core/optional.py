"""Optional packages. Each comes with an extra of the distribution (pyproject.toml); where one is missing, the
command that needs it stops with one line naming that extra, before it writes anything."""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import PyconvError

DISTRIBUTION = "pyconv-ece408"
# module -> the extra that installs it (pyproject.toml's [project.optional-dependencies]).
EXTRA = {"matplotlib": "bench", "ray": "grade", "cuda.bench": "bench", "torch": "torch"}
PACKAGE = {"matplotlib": "matplotlib", "ray": "Ray", "cuda.bench": "cuda-bench (NVBench)", "torch": "PyTorch"}


class MissingExtra(PyconvError):
    """An optional package is not installed."""


def install_hint(module: str) -> str:
    extra = EXTRA[module]
    also = " or [grade]" if module == "matplotlib" else ""
    return f"pip install '{DISTRIBUTION}[{extra}]'{also} (in a checkout: pip install -e '.[{extra}]')"


def missing_message(module: str, needed_for: str = "") -> str:
    why = f" ({needed_for} needs it)" if needed_for else ""
    return f"{PACKAGE[module]} is not installed{why}: {install_hint(module)}"


def require(module: str, needed_for: str = "") -> ModuleType:
    """The module, or MissingExtra naming the extra that installs it. A module that is installed but fails to
    import (a broken install, a missing driver) is a PyconvError saying so."""
    if module not in EXTRA:
        raise ValueError(f"{module!r} is not an optional package of pyconv")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is not None and (module == e.name or module.startswith(e.name + ".")):
            raise MissingExtra(missing_message(module, needed_for)) from None
        raise PyconvError(f"{PACKAGE[module]} is installed but does not import: {e}") from None


def available(module: str) -> bool:
    """Whether the module imports (without raising)."""
    try:
        require(module)
    except PyconvError:
        return False
    return True
