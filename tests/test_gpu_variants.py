"""Each GPU variant at its own edges, from one table (variant_edges.EDGES): its edge shapes against the reference, its
supported and refused shapes, FP16's range, layers in turn, and the precision it declares. A variant this build
lacks skips, naming it (a student handout; the ladder's history without `invoke build --ladder`, marked `ladder`)."""

from __future__ import annotations

import pytest
from built_variants import needs
from gpu_helpers import (
    check_beyond_fp16_range,
    check_layers_in_turn,
    check_refused_for_shared_memory,
    check_shape,
    descriptor,
    gpu,
    requires_gpu,
    requires_gpu_module,
)
from variant_edges import EDGES


def _shape_id(s) -> str:
    return "B{}-C{}-{}x{}-M{}-K{}".format(*s)


def _params(field: str, each: bool = True) -> list:
    """pytest params (name, item) for every item of each variant's `field` (each=False: (name,) where it is set),
    each marked to skip where the build lacks the variant; the ladder marker is added by conftest.py."""
    out = []
    for name, e in EDGES.items():
        value = getattr(e, field)
        items = value if each else ([value] if value else [])
        for item in items:
            shape = getattr(item, "shape", item)
            ident = f"{name}-{_shape_id(shape) if isinstance(shape, tuple) and len(shape) == 6 else shape}"
            marks = [needs(name)]
            if field == "supported" and e.supported_asks_the_gpu:
                marks.append(requires_gpu)
            out.append(pytest.param(name, item, marks=marks, id=ident))
    return out


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("name, shape", _params("shapes"))
def test_edge_shapes_match_reference(name, shape):
    check_shape(name, shape, EDGES[name].seed)


@requires_gpu_module
@pytest.mark.parametrize("name, shape", _params("supported"))
def test_supported_shapes_are_supported(name, shape):
    """supports() is host code: no GPU needed, except where it asks the device (wgmma: a Hopper GPU)."""
    assert gpu().why_unsupported(name, *shape) == ""


@requires_gpu_module
@pytest.mark.parametrize("name, refusal", _params("refused"))
def test_refused_shapes_are_refused_in_one_line(name, refusal):
    if refusal.shared_memory:  # conv raises too, before any GPU work
        why = check_refused_for_shared_memory(name, refusal.shape)
    else:
        why = gpu().why_unsupported(name, *refusal.shape)
        assert why.startswith(f"{name}: ") and "\n" not in why
    if refusal.says:
        assert why == f"{name}: {refusal.says}"
    assert all(word in why for word in refusal.contains), why


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("name, channel", _params("fp16_channels"))
def test_beyond_fp16_range_is_never_a_wrong_number(name, channel):
    check_beyond_fp16_range(name, EDGES[name].seed, channel)


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("name, shapes", _params("in_turn", each=False))
def test_a_smaller_layer_after_a_larger_one_reuses_the_workspace_correctly(name, shapes):
    check_layers_in_turn(name, shapes, EDGES[name].seed)


@requires_gpu_module
@pytest.mark.parametrize("name, rtol", _params("rtol", each=False))
def test_the_declared_tolerance_and_precision(name, rtol):
    v = descriptor(name)
    assert v["rtol"] == rtol and v["precision"] == EDGES[name].precision, v


@requires_gpu_module
@pytest.mark.ladder
@needs("gpu-split-f16", "gpu-split-f16-lean", "gpu-split-f16-igemm")
def test_the_split_igemm_takes_the_largest_shapes_the_other_split_steps_refuse():
    g = gpu()
    for shape in EDGES["gpu-split-f16-igemm"].supported:
        assert g.why_unsupported("gpu-split-f16", *shape) and g.why_unsupported("gpu-split-f16-lean", *shape)
