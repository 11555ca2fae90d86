"""The conv layers a bench measures: a model's (or, by architecture name, an architecture's shapes), as the JSON
records them."""

from __future__ import annotations

import numpy as np

from ..core.errors import PyconvError
from ..core.model import Model
from ..plan import conv_sites


def shapes_only_model(arch_name: str) -> Model:
    """An architecture's layers with zero weights of the right shapes: enough for conv_sites."""
    from ..core import archs

    m = archs.empty_model(arch_name, name=arch_name, description="shapes only")
    c, h, w = m.input_shape
    flat = 0
    for layer in m.layers:
        if layer.type == "conv":
            layer.weight = np.zeros((layer.out_channels, c, layer.kernel, layer.kernel), np.float32)
            c, h, w = layer.out_channels, h - layer.kernel + 1, w - layer.kernel + 1
        elif layer.type == "pool":
            h, w = (h - layer.kernel) // layer.stride + 1, (w - layer.kernel) // layer.stride + 1
        elif layer.type == "flatten":
            flat = c * h * w
        elif layer.type == "fc":
            layer.weight = np.zeros((layer.out_features, flat), np.float32)
            layer.bias = np.zeros(layer.out_features, np.float32)
            flat = layer.out_features
    return m


def layer_model(name: str) -> Model:
    """A model by name, or (when no model has that name) an architecture's shapes."""
    from ..core.archs import ARCHS
    from ..core.model import available_models, load_model

    if name in ARCHS and name not in available_models():
        return shapes_only_model(name)
    try:
        return load_model(name)
    except PyconvError as e:
        raise PyconvError(f"{e}; an architecture name ({', '.join(ARCHS)}) also works for the layer benchmark") \
            from None


def sites_of(model: Model, batch: int) -> list[dict]:
    """Each conv layer as the bench JSON records it."""
    return [{"model": model.name, "arch": model.arch, "layer": s.layer, "B": s.B, "C": s.C, "H": s.H, "W": s.W,
             "M": s.M, "K": s.K, "tanh_pool_follows": s.tanh_pool_follows} for s in conv_sites(model, batch)]


def shape_key(site: dict) -> tuple[int, int, int, int, int]:
    return site["C"], site["H"], site["W"], site["M"], site["K"]


def _dims(site: dict) -> tuple[int, int, int, int, int, int]:
    return site["B"], site["C"], site["H"], site["W"], site["M"], site["K"]
