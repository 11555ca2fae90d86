"""The one module that imports the native modules: pyconv._cpu (the CPU convolutions, always built),
pyconv._gpu (CUDA, built where nvcc and cuBLAS are found) and pyconv._cupti (the CUPTI trace).

PYCONV_NATIVE_DIR names a folder holding the built modules (for example a student build folder): they are loaded
from there instead of from the package, and the whole process uses those. Every failure is a PyconvError of one
line that says which case it is: not built (the file is not there), built but not loadable (the dynamic loader's
reason, with the undefined symbol named when that is the reason: rebuilding the same sources would not help), or
no GPU visible."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from .core.errors import PyconvError

ENV_DIR = "PYCONV_NATIVE_DIR"
PACKAGE_DIR = Path(__file__).resolve().parent

# What each module is and what building it needs: the words the "not built" error uses.
WHAT = {"_cpu": ("the native CPU module", "run `invoke build` (or `pip install .`)"),
        "_gpu": ("the CUDA module", "run `invoke build` on a machine with nvcc and cuBLAS (or `pip install` with "
                 "-Ccmake.define.PYCONV_GPU=ON)"),
        "_cupti": ("the CUPTI trace module", "run `invoke build` with a CUDA toolkit that has CUPTI")}


class NotBuilt(PyconvError):
    """The module's file does not exist where it is looked for."""


class LoadFailed(PyconvError):
    """The module's file exists but the dynamic loader (or the module's own init) refused it."""


class NoGpu(PyconvError):
    """pyconv._gpu loads but no CUDA GPU is visible."""


def native_dir() -> Path:
    """Where the modules are loaded from: $PYCONV_NATIVE_DIR, else the package's own folder."""
    env = os.environ.get(ENV_DIR)
    return Path(env).expanduser().resolve() if env else PACKAGE_DIR


def _file_of(name: str, folder: Path) -> Path | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        p = folder / f"{name}{suffix}"
        if p.is_file():
            return p
    return None


def _demangle(symbol: str) -> str:
    tool = shutil.which("c++filt")
    if not tool or not symbol.startswith("_Z"):
        return symbol
    try:
        out = subprocess.run([tool, symbol], capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return symbol
    return out or symbol


def explain_load_error(name: str, path: Path, error: BaseException) -> str:
    """One line on why an existing module file failed to load. An undefined symbol is named (demangled): the
    sources it was built from declare a function that none of them defines."""
    text = " ".join(str(error).split())
    m = re.search(r"undefined symbol: (\S+)", text)
    if m:
        sym = _demangle(m.group(1))
        return (f"pyconv.{name} ({path}) exists but does not load: undefined symbol {sym} (declared and used in "
                "the sources it was built from, defined in none of them)")
    m = re.search(r"(\S+\.so[.\d]*): cannot open shared object file", text)
    if m:
        return f"pyconv.{name} ({path}) exists but does not load: the shared library {m.group(1)} is not found"
    text = text.replace(str(path), "").strip(" :")
    return f"pyconv.{name} ({path}) exists but does not load: {text}"


def module(name: str) -> ModuleType:
    """pyconv._cpu, pyconv._gpu or pyconv._cupti from native_dir(); NotBuilt or LoadFailed otherwise."""
    if name not in WHAT:
        raise ValueError(f"no native module {name!r}")
    what, how = WHAT[name]
    full = f"pyconv.{name}"
    if full in sys.modules:  # loaded before (from wherever it was loaded), or replaced by a test
        mod = sys.modules[full]
        if mod is None:
            raise NotBuilt(f"{what} {full} is not built (its import is disabled in this process); {how}")
        return mod
    folder = native_dir()
    path = _file_of(name, folder)
    if path is None and folder == PACKAGE_DIR:
        # An editable install (`pip install -e .`) keeps the modules it built in its own folder, found through the
        # import system; modules `invoke build` wrote into the checkout's pyconv/ take precedence (found above).
        spec = importlib.util.find_spec(full)
        path = Path(spec.origin) if spec is not None and spec.origin else None
    if path is None:
        where = f"${ENV_DIR} = {folder}" if folder != PACKAGE_DIR else "the pyconv package"
        raise NotBuilt(f"{what} pyconv.{name} is not built (no {name} module in {where}); {how}")
    try:
        spec = importlib.util.spec_from_file_location(full, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules[full] = mod  # `from pyconv import _gpu` anywhere now finds this build
    except ImportError as e:
        raise LoadFailed(explain_load_error(name, path, e)) from None
    return mod


def cpu() -> ModuleType:
    return module("_cpu")


def gpu(device: bool = True, needed_by: str = "milestones 3, 4 and final need one") -> ModuleType:
    """pyconv._gpu; device=True also requires a visible CUDA GPU (NoGpu otherwise, naming who needs it).
    device=False is enough for what needs no GPU: the registry, why_unsupported, argument checks."""
    g = module("_gpu")
    if device and not g.available():
        raise NoGpu(f"no CUDA GPU is visible: {needed_by}")
    return g


def cupti() -> ModuleType:
    return module("_cupti")


def optional(name: str) -> ModuleType | None:
    """The module, or None when it is not built; a module that exists but does not load is still an error."""
    try:
        return module(name)
    except NotBuilt:
        return None
