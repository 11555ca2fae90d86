"""`invoke handout --dest DIR`: the student edition of this tree, as the course handed out its project folder.

The handout is the committed tree (HEAD, through `git archive`: nothing uncommitted, nothing git-ignored) without
the assignment's answers and the teachers' tools:
- every variant file: native/cpu/kernels/, native/cuda/kernels/ and native/cuda/ladder/ (cpu-naive, cpu-fast,
  gpu-baseline and the optimised ladder, live and history). The student slots native/student/new-forward.h and .cuh are then the only variants, and the
  milestones take them by default (the rule: the first Default variant present, else the student's);
- the finished student files kept as test fixtures, and the grader's fixture teams;
- the grader (pyconv/grading/, this module, grade and leaderboard) with its tests, and its block of tasks.py.
With an edition (`--edition 2021fa`), the handout's default edition is that one (pyconv/core/editions.py's
DEFAULT_EDITION is rewritten), so the student's `invoke milestone --m 1` is that semester's milestone 1 on its network.
It is written as a new git repository with one commit, so that students can diff their work against it.
The slots must hold the course's skeletons: a tree whose committed slot holds a solution is refused.
Its own tests pass as handed out: they take variant names from the registry (tests/built_variants.py), so tests of
a left-out variant skip naming it, and tests of the student's variants skip while the slots hold the skeletons and
run once the student has written code (tests/test_handout.py builds a handout and checks both)."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

from ..core import editions, paths
from ..core.errors import PyconvError
from ..core.fileio import atomic_folder
from ..variants import SKELETON_MARKS, holds_skeleton

# Paths (a trailing / is a folder) that a handout leaves out, with why.
LEFT_OUT = (
    # the assignment's answers: every variant file, CPU and GPU
    "native/cpu/kernels/",
    "native/cuda/kernels/",
    "native/cuda/ladder/",
    # the ladder's document (each step's technique and findings) and its tests
    "docs/ladder.md",
    "docs/ladder-findings/",
    "tests/test_ladder.py",
    # finished student files kept as fixtures (ours, and the grader's teams)
    "tests/fixtures/student/",
    "tests/fixtures/teams/",
    "tests/fixtures/edition-teams/",
    "tests/fixtures/gpu-teams/",
    "tests/fixtures/safety/",
    "tests/fixtures/fake_project/",
    # the teachers' tools and their tests
    "pyconv/grading/",
    "pyconv/tools/grade.py",
    "pyconv/tools/leaderboard.py",
    "pyconv/tools/handout.py",
    "docs/grading-trust.md",
    "tests/test_grade.py",
    "tests/test_grade_cluster.py",
    "tests/test_grade_hardening.py",
    "tests/test_grade_safety.py",
    "tests/test_grade_project.py",
    "tests/test_grade_editions.py",
    "tests/test_handout.py",
)
SLOTS = ("native/student/new-forward.h", "native/student/new-forward.cuh")
# The tasks' file: its teachers' tasks sit between these two lines; the handout's copy ends before them
TASKS_FILE = "pyconv/cli/tasks.py"
TASKS_BEGIN = "# --- teachers' tasks (left out of a student handout) ---"
TASKS_END = "# --- end of teachers' tasks ---"


def left_out(path: str) -> bool:
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in LEFT_OUT)


def strip_teacher_tasks(text: str) -> str:
    if TASKS_BEGIN not in text:
        return text
    head, rest = text.split(TASKS_BEGIN, 1)
    tail = rest.split(TASKS_END, 1)[1] if TASKS_END in rest else ""
    return head.rstrip() + "\n" + tail.lstrip("\n")


def _git(root: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=300, **kw)


EDITIONS_FILE = "pyconv/core/editions.py"


def set_default_edition(text: str, name: str) -> str:
    """editions.py's text with DEFAULT_EDITION set to `name` (the one line that assigns it)."""
    lines = text.splitlines(keepends=True)
    hits = [i for i, ln in enumerate(lines) if ln.startswith("DEFAULT_EDITION = ")]
    if len(hits) != 1:
        raise PyconvError(f"{EDITIONS_FILE}: expected one line 'DEFAULT_EDITION = ...', found {len(hits)}")
    lines[hits[0]] = f'DEFAULT_EDITION = "{name}"  # this handout\'s semester\n'
    return "".join(lines)


def write_handout(dest, root: Path = paths.ROOT, say=print, edition: str | None = None) -> Path:
    if dest is None:
        raise PyconvError("give the folder to write the handout into: invoke handout --dest DIR")
    if root == paths.ROOT:
        paths.require_checkout("writing a handout")
    ed = editions.get(edition)  # an unknown edition: one line, before anything is written
    dest = Path(dest).resolve()
    if dest.exists() and any(dest.iterdir()):
        raise PyconvError(f"{dest} exists and is not empty: the handout goes into a new folder")
    if dest == root or root in dest.parents:
        raise PyconvError(f"{dest} is inside the project's tree: write the handout somewhere else")
    head = _git(root, "rev-parse", "--short=12", "HEAD", text=True)
    if head.returncode:
        raise PyconvError(f"{root} is not a git checkout: the handout is made from its committed tree")
    archive = _git(root, "archive", "--format=tar", "HEAD")
    if archive.returncode:
        raise PyconvError(f"git archive failed: {archive.stderr.decode(errors='replace').strip()}")
    # Written into a folder beside dest and renamed at the end: an interrupted handout leaves no half-made tree
    # in dest's place (it would block the rerun).
    with atomic_folder(dest) as tmp:
        kept, dropped = _write_tree(archive.stdout, tmp, head.stdout.strip(), edition and ed.name)
    say(f"wrote the student edition of {head.stdout.strip()} ({ed.semester}, {ed.name}: model {ed.model}, milestones "
        f"{', '.join(m.label for m in ed.milestones)}) to {dest}: {kept} files, {dropped} left out "
        "(variant files, finished student files, the grader)")
    return dest


def _write_tree(archive: bytes, dest: Path, commit: str, edition: str | None = None) -> tuple[int, int]:
    """The handout's files from the tar of HEAD, its tasks.py cut, committed as a new repository."""
    kept, dropped = 0, 0
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        # files and links only: their folders are made as needed, so a folder left out leaves no empty husk
        # (an empty pyconv/grading/ would import as a namespace package)
        members = [m for m in tar.getmembers() if m.isfile() or m.issym()]
        names = {m.name for m in members if m.isfile()}
        for slot in SLOTS:
            if slot not in names:
                raise PyconvError(f"{slot} is not in the committed tree: the handout needs the student slots")
            if not holds_skeleton(tar.extractfile(slot).read().decode(errors="replace"), slot):
                mark = SKELETON_MARKS[Path(slot).name]
                raise PyconvError(f"the committed {slot} is not the course's skeleton (no '{mark}'): "
                                  "a handout must not carry a solution")
        for m in members:
            if left_out(m.name):
                dropped += m.isfile()
                continue
            tar.extract(m, dest, filter="tar") if hasattr(tarfile, "data_filter") else tar.extract(m, dest)
            kept += m.isfile()
    tasks = dest / TASKS_FILE
    tasks.write_text(strip_teacher_tasks(tasks.read_text()))
    if edition is not None:
        table = dest / EDITIONS_FILE
        table.write_text(set_default_edition(table.read_text(), edition))
    env = {**os.environ, "GIT_AUTHOR_NAME": "pyconv handout", "GIT_AUTHOR_EMAIL": "handout@pyconv",
           "GIT_COMMITTER_NAME": "pyconv handout", "GIT_COMMITTER_EMAIL": "handout@pyconv"}
    for args in (["init", "-q"], ["add", "-A"],
                 ["commit", "-q", "-m", f"pyconv, student edition (from {commit})"]):
        r = subprocess.run(["git", "-C", str(dest), *args], capture_output=True, text=True, env=env, timeout=300)
        if r.returncode:
            raise PyconvError(f"git {args[0]} in {dest} failed: {r.stderr.strip()}")
    return kept, dropped
