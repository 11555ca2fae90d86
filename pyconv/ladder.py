"""The GPU ladder as a document: docs/ladder.md, written by `invoke ladder-doc` from two sources and nothing else:
- the registry: each step's descriptor, PYCONV_REGISTER_GPU_CONV(GpuConvVariant{...}) at the end of its file, read
  from the source text (no build, no GPU: CI writes and checks the document anywhere; tests/test_ladder.py compares
  this reading with the built module's _gpu.variants() where one is built). A file in native/cuda/kernels/ is live
  (a milestone or final can choose it today); one in native/cuda/ladder/ is history, compiled only with
  `invoke build --ladder`;
- each step's measured findings, docs/ladder-findings/NN.md: prose with numbers and the results files they came
  from, kept out of the kernel files (which say in a few lines why the code is the way it is) and in one Markdown
  file per step, so that a new measurement is one edit to one file that the generator reads as it is.

tests/test_ladder.py regenerates the document in memory and fails where it differs from the committed one."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from .core import paths
from .core.errors import PyconvError
from .core.fileio import atomic_path

CUDA = paths.ROOT / "native" / "cuda"
LIVE_DIR = CUDA / "kernels"
HISTORY_DIR = CUDA / "ladder"
FINDINGS_DIR = paths.ROOT / "docs" / "ladder-findings"
DOC = paths.ROOT / "docs" / "ladder.md"

_REGISTER = re.compile(r"PYCONV_REGISTER_GPU_CONV\(GpuConvVariant\{(.*?)\n\}\);", re.S)
_STRINGS = r'((?:\s*"(?:[^"\\]|\\.)*")+)'  # one or more adjacent C string literals


@dataclass(frozen=True)
class Step:
    step: int
    name: str
    summary: str
    live: bool
    file: Path  # relative to the checkout
    precision: str  # the descriptor's Precision:: value ("Fp32" where it names none)
    epilogue: str  # the descriptor's Epilogue:: value ("None" where it names none)
    defaults: tuple[str, ...]  # the milestones (m3, m4, final) whose default it is

    @property
    def status(self) -> str:
        return "live" if self.live else "history"

    def findings_file(self, folder: Path = FINDINGS_DIR) -> Path:
        return folder / f"{self.step:02d}.md"


def _string(body: str, field: str, where: Path) -> str:
    m = re.search(rf"\.{field}\s*={_STRINGS}", body)
    if m is None:
        raise PyconvError(f"{where}: its descriptor has no .{field} string")
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1))).replace('\\"', '"')


def parse_file(path: Path, live: bool) -> Step:
    """The step a variant file registers, from its descriptor's text."""
    text = path.read_text()
    found = _REGISTER.findall(text)
    rel = path.relative_to(paths.ROOT) if path.is_relative_to(paths.ROOT) else path
    if len(found) != 1:
        raise PyconvError(f"{rel}: expected one PYCONV_REGISTER_GPU_CONV descriptor, found {len(found)}")
    body = found[0]
    step = re.search(r"\.step\s*=\s*(\d+)", body)
    if step is None:
        raise PyconvError(f"{rel}: its descriptor has no .step")
    precision = re.search(r"\.precision\s*=\s*Precision::(\w+)", body)
    epilogue = re.search(r"\.epilogue\s*=\s*Epilogue::(\w+)", body)
    roles = re.search(r"\.roles\s*=\s*\{(.*)\}", body, re.S)
    defaults = tuple(m for m in ("m3", "m4", "final")
                     if roles and re.search(rf"\.{m}\s*=\s*default_role\(\)", roles.group(1)))
    return Step(int(step.group(1)), _string(body, "name", rel), _string(body, "summary", rel), live, rel,
                precision.group(1) if precision else "Fp32", epilogue.group(1) if epilogue else "None", defaults)


def registry(live_dir: Path = LIVE_DIR, history_dir: Path = HISTORY_DIR) -> list[Step]:
    """Every step of the ladder, live and history, in step order."""
    steps = [parse_file(p, live) for d, live in ((live_dir, True), (history_dir, False))
             for p in sorted(d.glob("conv_*.cu"))]
    seen: dict[int, Step] = {}
    for s in steps:
        if s.step in seen:
            raise PyconvError(f"step {s.step} is registered twice: {seen[s.step].file} and {s.file}")
        if not s.file.name.startswith(f"conv_{s.step:02d}_"):
            raise PyconvError(f"{s.file}: registers step {s.step}, but its name says otherwise")
        seen[s.step] = s
    return sorted(steps, key=lambda s: s.step)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _wrap(text: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, break_long_words=False, break_on_hyphens=False)


WIDTH = 120  # the project's line length; a table row is one line whatever its length


def render(steps: list[Step], findings_dir: Path = FINDINGS_DIR) -> str:
    """docs/ladder.md's text."""
    live = [s for s in steps if s.live]
    out = ["# The GPU ladder", "",
           "<!-- Written by `invoke ladder-doc` from the variants' descriptors and docs/ladder-findings/NN.md: edit",
           "those, then regenerate. tests/test_ladder.py fails where this file and they disagree. -->", ""]
    out += _wrap(f"{len(steps)} steps, each one file that registers one GPU variant. The {len(live)} live steps "
                 "(native/cuda/kernels/) are what a milestone or `final` can choose today: each milestone's default, "
                 "the variants they fall back to, and each variant that is the fastest on some layer shape in the "
                 "evidence (results/evidence/). The others are history (native/cuda/ladder/): the steps that led "
                 "here, compiled only with `invoke build --ladder`, their tests marked `ladder` (they skip, saying "
                 "so, in a build without them).")
    out += ["", "| step | variant | | what it changes |", "| ---: | --- | --- | --- |"]
    for s in steps:
        note = s.status + (f", default of {', '.join(s.defaults)}" if s.defaults else "")
        out.append(f"| {s.step} | [{s.name}](#step-{s.step:02d}) | {note} | {_cell(s.summary)} |")
    for s in steps:
        out += ["", f"## Step {s.step:02d}", ""]
        out += _wrap(f"**{s.name}** ({s.status}, [{s.file.name}](../{s.file})): {s.summary}.")
        out.append("")
        f = s.findings_file(findings_dir)
        out.append(f.read_text().strip() if f.is_file() else "No findings recorded.")
    return "\n".join(out) + "\n"


def write(dest: Path = DOC) -> Path:
    text = render(registry())
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(dest) as tmp:
        tmp.write_text(text)
    return dest
