"""A team's variant against the reference at the test shapes:
`python -m pyconv.grading.shapes --m M --record F [--edition E]`.

Runs in a grading job after the build, with PYCONV_NATIVE_DIR naming the team's build folder, so the variant
checked is the team's cpu-student (milestone 2) or gpu-student (3, 4, final). The shapes are the conv layers of the
team's own edition's network (pyconv.core.editions; a small batch: the layer checks of the milestone runs cover the
full batch), never another semester's: many students' files hard-code their semester's sizes, and the course only
ever ran them on those. Then, once those pass, the edge cases a kernel written for those layers may get wrong (K = 1,
K = H = W, odd and non-square sizes, one output channel, more channels than a tile): reported, not graded. The check
is the project's one verify harness (pyconv.verify: random non-zero inputs, a NaN-poisoned output, atol +
rtol*|ref|). Prints one line per shape, each naming the semester's layer or the edge case; writes the record
{"variant", "edition", "semester", "edges": "not run" | "running" | "done", "shapes": [{"shape", "layer", "edge",
"ok", "why", "max_abs_err"[, "raised"]}]} after every shape, and exits 1 when a layer of the edition's network fails
(at once when the team's code raised there: a crash, not a wrong answer).
A step that dies while "edges" is "running" died on an edge case (pyconv.grading.job reads it so)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

EDGE_SHAPES = (  # (B, C, H, W, M, K)
    (1, 1, 1, 1, 1, 1), (1, 1, 5, 5, 1, 5), (2, 3, 7, 9, 1, 7), (2, 5, 9, 17, 3, 1), (3, 2, 13, 6, 5, 6),
    (1, 12, 33, 33, 24, 7), (2, 1, 40, 31, 7, 3), (1, 20, 18, 18, 33, 5),
)
COURSE_BATCH = 4


def course_layers(edition: str | None = None) -> list[tuple[str, tuple[int, ...]]]:
    """(label, shape) of each conv layer of the edition's network, e.g. ("Fall 2021 conv2", (4, 4, 40, 40, 16, 7))."""
    from ..core import archs, editions

    ed = editions.get(edition)
    arch = archs.get_arch(ed.arch)
    out = []
    c, size = 1, arch.input_size
    for i, (m, k) in enumerate(arch.convs):
        out.append((f"{ed.semester} conv{i + 1}", (COURSE_BATCH, c, size, size, m, k)))
        c, size = m, size - k + 1
        if window := arch.pool_after(i):
            size = (size - window) // window + 1
    return out


def course_shapes(edition: str | None = None) -> list[tuple[int, ...]]:
    return [shape for _, shape in course_layers(edition)]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m pyconv.grading.shapes")
    p.add_argument("--m", required=True)
    p.add_argument("--record", required=True)
    p.add_argument("--edition", default=None)
    a = p.parse_args(argv)
    import numpy as np

    from .. import native, variants, verify
    from ..core import editions
    from ..core.errors import PyconvError
    from .job import student_variant

    name = student_variant(a.m)
    try:
        ed = editions.get(a.edition)
        if a.m == "2":
            mod, registry = native.cpu(), variants.cpu_variants(with_reference=False)
        else:
            mod, registry = native.gpu(), variants.gpu_variants()
        variant = variants.find(registry, name)
    except PyconvError as e:
        print(f"error: {e}", flush=True)
        return 2
    rng = np.random.default_rng(408)
    record = {"variant": name, "edition": ed.name, "semester": ed.semester, "shapes": [], "edges": "not run"}

    def check(label: str, shape: tuple[int, ...], edge: bool) -> bool:
        """One shape: its entry in the record (written at once); False when the team's code raised."""
        b, ch, h, w, m, k = shape
        where = f"{label} B={b} C={ch} H={h} W={w} M={m} K={k}"
        entry = {"shape": list(shape), "layer": label, "edge": edge, "ok": False, "why": "", "max_abs_err": None}
        why = variant.why_unsupported(shape)
        raised = False
        if why:  # the student variant refuses only what 32-bit indexing cannot address: none of these
            entry["why"] = f"refused: {why}"
        else:
            try:
                c = verify.check_variant(mod.conv, variant, shape, rng)
                entry.update(ok=c.passed, why=c.why, max_abs_err=c.max_abs_err)
            except (RuntimeError, ValueError, MemoryError) as e:  # the team's CHECK, a CUDA error, bad_alloc
                entry.update(why=f"{type(e).__name__}: {' '.join(str(e).split())}", raised=True)
                raised = True
        record["shapes"].append(entry)
        Path(a.record).write_text(json.dumps(record))
        print(("error: " if raised and not edge else "") + f"{name} at {where}"
              + (f" ({ed.semester}'s network)" if not edge else "") + ": " + ("ok" if entry["ok"] else entry["why"]),
              flush=True)
        return not raised

    for label, shape in course_layers(ed.name):
        if not check(label, shape, edge=False):
            return 1
    if not all(e["ok"] for e in record["shapes"]):
        return 1
    # The edge cases are reported, not graded: the course only ever ran its own network, and many students'
    # files are written for its sizes (a crash here is the team's file outside them, said in the step's log).
    record["edges"] = "running"
    for shape in EDGE_SHAPES:
        check("edge case", shape, edge=True)
    record["edges"] = "done"
    Path(a.record).write_text(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
