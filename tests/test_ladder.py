"""The ladder apart from its history: docs/ladder.md is what `invoke ladder-doc` writes from the registry; the live
steps (native/cuda/kernels/) are what a milestone or final can choose, and none of them reaches into the history
(native/cuda/ladder/). Read from the source text: no build and no GPU needed, except where a test compares the reading
with the built module."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from variant_edges import EDGES

from pyconv import ladder
from pyconv.core import paths
from pyconv.core.errors import PyconvError

STEPS = ladder.registry()
CUDA = paths.ROOT / "native" / "cuda"


def test_the_document_is_what_the_registry_and_the_findings_say():
    assert ladder.render(STEPS) == ladder.DOC.read_text(), \
        "docs/ladder.md differs from the descriptors and docs/ladder-findings/: run `invoke ladder-doc`"


def test_the_comparison_sees_a_changed_summary_and_a_changed_finding(tmp_path):
    committed = ladder.DOC.read_text()
    renamed = [s if s.step != 6 else ladder.Step(**{**s.__dict__, "summary": s.summary + " (edited)"}) for s in STEPS]
    assert ladder.render(renamed) != committed
    findings = tmp_path / "findings"
    findings.mkdir()
    for f in ladder.FINDINGS_DIR.glob("*.md"):
        (findings / f.name).write_text(f.read_text())
    (findings / "23.md").write_text((findings / "23.md").read_text() + "\nA new measurement.\n")
    assert ladder.render(STEPS, findings) != committed


def test_every_step_once_in_order_with_its_file_named_for_it():
    assert [s.step for s in STEPS] == list(range(len(STEPS)))
    for s in STEPS:
        assert s.file.parent == (Path("native/cuda/kernels") if s.live else Path("native/cuda/ladder"))
        assert s.name.startswith("gpu-") and s.summary


def test_a_file_without_one_descriptor_is_one_line(tmp_path):
    bad = tmp_path / "conv_40_nothing.cu"
    bad.write_text("// no descriptor\n")
    with pytest.raises(PyconvError, match="expected one PYCONV_REGISTER_GPU_CONV"):
        ladder.parse_file(bad, live=True)


def test_the_reading_agrees_with_the_built_module():
    try:
        from pyconv import _gpu
    except ImportError:
        pytest.skip("pyconv._gpu not built: the reading is compared with the built registry where it is")
    built = {v["name"]: v for v in _gpu.variants() if 0 <= v["step"] < 100}
    read = {s.name: s for s in STEPS}
    assert set(built) <= set(read)
    for name, v in built.items():
        assert (v["step"], v["summary"]) == (read[name].step, read[name].summary), name
    live = {s.name for s in STEPS if s.live}
    assert live <= set(built), "a live step is missing from the build"


# ------------------------------------------------------------------------------------------ live apart from history

def _sources(*folders: str) -> list[Path]:
    return [p for f in folders for p in sorted((CUDA / f).glob("*.cu*"))]


def test_kernels_holds_the_live_steps_only_and_at_most_16_files():
    files = sorted(p.name for p in (CUDA / "kernels").iterdir())
    assert len(files) <= 16, files
    assert files == sorted(s.file.name for s in STEPS if s.live)


def test_no_live_file_includes_or_calls_a_ladder_file():
    defined_live, used_live = set(), {}
    for p in _sources("kernels", "runtime") + [CUDA / "bindings.cu"]:
        text = p.read_text()
        assert '"cuda/ladder/' not in text, f"{p.name} includes a ladder file"
        defined_live |= set(re.findall(r"^(?:void|std::string|bool|int|float) (conv_\w+)\(.*\)\s*\{", text, re.M))
        for name in re.findall(r"\b(conv_(?:fwd|supports)_gpu_\w+)\(", text):
            used_live.setdefault(name, p.name)
    history = {name for p in _sources("ladder")
               for name in re.findall(r"^(?:void|std::string) (conv_\w+)\(.*\)\s*\{", p.read_text(), re.M)}
    reached = {name: where for name, where in used_live.items() if name in history and name not in defined_live}
    assert not reached, f"live files call functions defined only in the ladder: {reached}"


PRECISION = {"Tf32": "tf32", "F16": "fp16"}  # the rest compute as accurately as float32 (variant.hpp)


def test_the_live_steps_cover_every_default_and_every_fastest_variant_in_the_evidence():
    """Whatever the precision verdict allows (float32 only, TF32, FP16 or both), the variant final takes for each
    measured shape is live, as is each milestone's default."""
    by_name = {s.name: s for s in STEPS}
    needed = {s.name: "a milestone's default" for s in STEPS if s.defaults}
    for path in sorted((paths.ROOT / "results" / "evidence").glob("*.json")):
        for layer in json.loads(path.read_text())["layers"]:
            for allowed in ((), ("tf32",), ("fp16",), ("tf32", "fp16")):
                for t in layer["ranking"]:
                    s = by_name.get(t["variant"])
                    if s is not None and PRECISION.get(s.precision, "fp32") in ("fp32", *allowed):
                        needed.setdefault(s.name, f"fastest on {layer['C']}x{layer['H']}x{layer['W']} "
                                                  f"M={layer['M']} K={layer['K']} in {path.name}")
                        break
    history = {name: why for name, why in needed.items() if not by_name[name].live}
    assert not history, f"history steps that final or a milestone can choose: {history}"


def test_every_plain_variant_of_the_ladder_has_edges_or_a_test_of_its_kind():
    """The table covers the plain convolutions from step 17 on (the fused ones: test_gpu_fused_first_layer.py; steps
    0-16 at random and course shapes: test_gpu_engine.py, test_gpu_any_shape.py), and names no variant the ladder
    lacks."""
    steps = STEPS
    assert set(EDGES) <= {s.name for s in steps}
    later = {s.name for s in steps if s.step >= 17 and s.epilogue == "None" and s.name != "gpu-tensor-core-igemm"}
    assert later <= set(EDGES), later - set(EDGES)
    assert all(np.all(np.array(e.shapes) > 0) for e in EDGES.values())
