"""`invoke promote --run RUN.json`: a bench run moved into results/, then everything results/ feeds regenerated from the
bench files it then holds: each GPU's evidence (what `final` chooses from, pyconv.bench.evidence.rebuild), the
report page and its plots, and the README's summary table (pyconv.report).

`invoke bench` writes new runs to results/runs/ (git-ignored), so that an experiment changes nothing `final` reads
and nothing git tracks until someone decides it should. A failed step restores every file it had changed: the
run stays where it was and results/ and the README are as before."""

from __future__ import annotations

import os
from pathlib import Path

from ..core import paths
from ..core.errors import PyconvError
from ..core.fileio import atomic_path
from . import evidence, schema


def _snapshot(folder: Path, readme: Path) -> dict[Path, bytes]:
    """The bytes of every file promote may rewrite: results/'s own files, its evidence, the README."""
    files = [p for p in folder.iterdir() if p.is_file()]
    files += [p for p in (folder / "evidence").glob("*") if p.is_file()]
    if readme.is_file():
        files.append(readme)
    return {p: p.read_bytes() for p in files}


def _restore(before: dict[Path, bytes], folder: Path) -> None:
    now = [p for p in folder.iterdir() if p.is_file()] + [p for p in (folder / "evidence").glob("*") if p.is_file()]
    for p in now:
        if p not in before:
            p.unlink(missing_ok=True)
    for p, data in before.items():
        if not p.exists() or p.read_bytes() != data:
            with atomic_path(p) as tmp:
                tmp.write_bytes(data)


def promote(run: str | os.PathLike, folder: str | os.PathLike | None = None, readme: str | os.PathLike | None = None,
            echo=print) -> Path:
    """Move the bench file `run` into `folder` (default results/) and regenerate the evidence, the report and the
    README's summary from the bench files there; the run's new path. Refused, with nothing changed: a file that
    is not a readable bench result, one named other than bench-*.json, one already in `folder`, or a name taken
    there (a bench file is never overwritten)."""
    from ..report import tables as report

    src = Path(run)
    folder = Path(folder) if folder else paths.RESULTS
    readme = Path(readme) if readme else report.README
    if not src.is_file():
        raise PyconvError(f"{src} is not a file (new runs are written to results/{paths.RUNS_DIR}/)")
    if not (src.name.startswith("bench-") and src.suffix == ".json"):
        raise PyconvError(f"{src.name}: a bench file is named bench-*.json (as `invoke bench` names it)")
    if src.resolve().parent == folder.resolve():
        raise PyconvError(f"{src} is already in {folder}")
    dest = folder / src.name
    if dest.exists():
        raise PyconvError(f"{dest} exists: a bench file is never overwritten; rename the run (bench-*.json) first")
    schema.load(src)  # one line naming the file when it is not a bench result
    folder.mkdir(parents=True, exist_ok=True)
    before = _snapshot(folder, readme)
    try:
        with atomic_path(dest) as tmp:
            tmp.write_bytes(src.read_bytes())
        for p in evidence.rebuild(folder, echo=echo):
            echo(f"wrote {p}")
        page, pngs = report.write_report(None, folder / report.DEFAULT_OUT.name, folder)
        echo(f"wrote {page}" + "".join(f", {p.name}" for p in pngs))
        for old in sorted(folder.glob(f"{page.stem}-*.png")):  # plots of a file that is no longer the newest
            if old not in pngs:
                old.unlink()
        echo(f"rewrote the benchmark summary of {report.update_readme(None, readme, folder)}")
    except BaseException:
        _restore(before, folder)
        raise
    src.unlink()
    echo(f"promoted {src} to {dest}")
    return dest
