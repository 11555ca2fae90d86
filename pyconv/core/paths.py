"""Where the project keeps things. Every location can be overridden by an environment variable."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATASETS = Path(os.environ.get("PYCONV_DATASETS", ROOT / "datasets"))
DATA_FILE = Path(os.environ.get("PYCONV_DATA_FILE", DATASETS / "fashion-mnist.h5"))
MODELS = DATASETS / "models"  # shipped models (tracked in git)
IMPORTED_MODELS = MODELS / "imported"  # models a user imported from a checkpoint of their own (git-ignored)
LOGS = Path(os.environ.get("PYCONV_LOGS", ROOT / "logs"))
RESULTS = ROOT / "results"
# The course's own checkpoints live beside the project and are never copied into it.
COURSE_MODELS = Path(os.environ.get("PYCONV_COURSE_MODELS", ROOT.parent / "shared" / "course-models"))
