"""`invoke <task>` in a checkout. The tasks live in pyconv/cli/tasks.py, the same ones the `pyconv` command runs.

    invoke --list              every task
    invoke <task> --help       its flags
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this checkout's package, from any folder (invoke -r)

from pyconv.cli.tasks import *  # noqa: E402,F403
