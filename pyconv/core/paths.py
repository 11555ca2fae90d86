"""Where the project keeps things: the one place that says so.

In a checkout (the package's folder sits beside CMakeLists.txt and native/, as in an editable install) everything
stays in the checkout: datasets/ (the data file; the shipped models in datasets/models/), logs/, results/. An
installed package (`pip install`) reads its shipped models and GPU evidence from its own package data and writes
the data file, logs, grade records and bench files into a per-user data folder: $PYCONV_HOME, else
$XDG_DATA_HOME/pyconv, else ~/.local/share/pyconv (the XDG convention). PYCONV_HOME moves a checkout's writable
files too; PYCONV_DATASETS, PYCONV_DATA_FILE and PYCONV_LOGS move one kind each."""

from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import PyconvError

PACKAGE = Path(__file__).resolve().parents[1]
ROOT = PACKAGE.parent  # the checkout; for an installed package, the site-packages folder holding it
IN_CHECKOUT = (ROOT / "CMakeLists.txt").is_file() and (ROOT / "native").is_dir()
HOME_ENV = "PYCONV_HOME"


def user_data_home(environ=os.environ) -> Path:
    """The per-user data folder of an installed package: $PYCONV_HOME, $XDG_DATA_HOME/pyconv, ~/.local/share/pyconv."""
    if environ.get(HOME_ENV):
        return Path(environ[HOME_ENV]).expanduser()
    xdg = environ.get("XDG_DATA_HOME", "")
    # The XDG spec: a relative XDG_DATA_HOME is invalid and is ignored.
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "pyconv"


HOME = ROOT if IN_CHECKOUT and not os.environ.get(HOME_ENV) else user_data_home()
DATASETS = Path(os.environ.get("PYCONV_DATASETS", HOME / "datasets"))
DATA_FILE = Path(os.environ.get("PYCONV_DATA_FILE", DATASETS / "fashion-mnist.h5"))
# Shipped models: tracked in git in a checkout, package data once installed (PYCONV_DATASETS replaces them).
_SHIPPED = IN_CHECKOUT or "PYCONV_DATASETS" in os.environ
MODELS = (ROOT / "datasets" / "models" if "PYCONV_DATASETS" not in os.environ else DATASETS / "models") \
    if _SHIPPED else PACKAGE / "data" / "models"
USER_MODELS = DATASETS / "models"  # models a user trained (`invoke train`); in a checkout, beside the shipped ones
IMPORTED_MODELS = USER_MODELS / "imported"  # models a user imported from a checkpoint of their own (git-ignored)
LOGS = Path(os.environ.get("PYCONV_LOGS", HOME / "logs"))
RESULTS = HOME / "results"
# The course's own checkpoints live beside the project and are never copied into it.
_COURSE_DEFAULT = ROOT.parent / "shared" / "course-models" if IN_CHECKOUT else HOME / "course-models"
COURSE_MODELS = Path(os.environ.get("PYCONV_COURSE_MODELS", _COURSE_DEFAULT))
EVIDENCE = RESULTS / "evidence"  # per GPU: what `final` chooses from (pyconv.evidence), written by `invoke bench`
RUNS_DIR = "runs"  # results/runs/: new bench runs (git-ignored) until `invoke promote` moves one into results/
# The GPU evidence shipped with the project: read where EVIDENCE has no file for the GPU.
SHIPPED_EVIDENCE = ROOT / "results" / "evidence" if IN_CHECKOUT else PACKAGE / "data" / "evidence"
TUNING = RESULTS / "tuning"  # per GPU: the tensor-core kernel's tile configuration per layer shape


def model_folders() -> list[Path]:
    """Where models are looked up by name, in order: shipped, trained by the user, imported by the user."""
    return list(dict.fromkeys((MODELS, USER_MODELS, IMPORTED_MODELS)))


def require_checkout(what: str) -> Path:
    """The checkout's root, or a PyconvError saying that `what` needs one (an installed package has no sources)."""
    if not IN_CHECKOUT:
        raise PyconvError(f"{what} needs a checkout of the project (its CMake sources); this pyconv is installed "
                          f"in {ROOT}: clone the project and run it there, or `pip install -e` the clone")
    return ROOT


def describe() -> str:
    """Where things are, for `pyconv --help`."""
    where = "this checkout" if HOME == ROOT else "the per-user data folder"
    return (f"Files: the data file, logs, records and bench files go to {where}:\n  {HOME}\n"
            f"(${HOME_ENV} moves it; installed, the default is $XDG_DATA_HOME/pyconv, else ~/.local/share/pyconv).\n"
            f"Shipped models: {MODELS}")


def slug(text: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3': a GPU's or a CPU's name as a file name."""
    s = re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")
    if not s:
        raise PyconvError(f"cannot make a file name from {text!r}")
    return s


def python_env(env: dict | None = None) -> dict:
    """`env` (default: this process's environment) with the folder holding this package first on PYTHONPATH, so
    that a child `python -m pyconv.<module>` imports this package from any working directory (the user's stays the
    child's, so relative paths they gave keep their meaning)."""
    env = dict(os.environ if env is None else env)
    rest = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + rest if rest else "")
    return env
