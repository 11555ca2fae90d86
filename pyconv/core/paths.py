"""Where the project keeps things. Every location can be overridden by an environment variable."""

from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import PyconvError

ROOT = Path(__file__).resolve().parents[2]
DATASETS = Path(os.environ.get("PYCONV_DATASETS", ROOT / "datasets"))
DATA_FILE = Path(os.environ.get("PYCONV_DATA_FILE", DATASETS / "fashion-mnist.h5"))
MODELS = DATASETS / "models"  # shipped models (tracked in git)
IMPORTED_MODELS = MODELS / "imported"  # models a user imported from a checkpoint of their own (git-ignored)
LOGS = Path(os.environ.get("PYCONV_LOGS", ROOT / "logs"))
RESULTS = ROOT / "results"
# The course's own checkpoints live beside the project and are never copied into it.
COURSE_MODELS = Path(os.environ.get("PYCONV_COURSE_MODELS", ROOT.parent / "shared" / "course-models"))
EVIDENCE = RESULTS / "evidence"  # per GPU: what `final` chooses from (pyconv.evidence), written by `invoke bench`
RUNS_DIR = "runs"  # results/runs/: new bench runs (git-ignored) until `invoke promote` moves one into results/
TUNING = RESULTS / "tuning"  # per GPU: the tensor-core kernel's tile configuration per layer shape


def slug(text: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3': a GPU's or a CPU's name as a file name."""
    s = re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")
    if not s:
        raise PyconvError(f"cannot make a file name from {text!r}")
    return s


def python_env(env: dict | None = None) -> dict:
    """`env` (default: this process's environment) with this checkout first on PYTHONPATH, so that a child
    `python -m pyconv.<module>` imports this package from any working directory (the user's stays the child's,
    so relative paths they gave keep their meaning)."""
    env = dict(os.environ if env is None else env)
    rest = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + rest if rest else "")
    return env
