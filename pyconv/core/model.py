"""The project's model file: one HDF5 file per network, holding the layer list and the weights.

Layout (version 1):
    attrs:   format="pyconv-model", version=1, name, arch, input_shape=[C, H, W], description, layers=<JSON list>
    weights/<layer name>/weight  float32   conv: [M][C][K][K]; fc: [out][in] (y = x W^T + b)
    weights/<layer name>/bias    float32   fc only: [out]
The weight datasets are written byte-shuffled and gzip-compressed (lossless; HDF5 undoes it on read, and files
written without it read the same). The shipped models live in git: on the fa18 model this stores 15% fewer bytes
than plain float32 (9.55 against 11.26 MB), where gzip alone saves 7% and LZF with the shuffle 7%; ece408-fa19 is
11.21 MB instead of 12.97, and 11.18 against 12.04 MB once git has zlib-compressed each (as it does every blob).
Layer dicts in `layers`: {"type": "conv", "name", "out_channels", "kernel"} | {"type": "tanh"|"relu"|"sigmoid"} |
{"type": "pool", "mode": "max"|"avg", "kernel", "stride"} | {"type": "flatten"} |
{"type": "fc", "name", "out_features"} | {"type": "softmax"}.
`load_model` validates everything (shapes chain, float32, finite) and names the first problem it finds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from . import paths
from .errors import PyconvError
from .fileio import atomic_path

FORMAT = "pyconv-model"
VERSION = 1
ACTIVATIONS = ("tanh", "relu", "sigmoid")
DEFAULT_MODEL = "ece408"
# Lossless: the shuffle groups the float32s' exponent bytes together, which is what gzip finds to compress.
WEIGHT_STORAGE = {"shuffle": True, "compression": "gzip", "compression_opts": 4}


@dataclass
class Layer:
    type: str
    name: str = ""
    out_channels: int = 0  # conv
    kernel: int = 0  # conv, pool
    mode: str = ""  # pool: max | avg
    stride: int = 0  # pool
    out_features: int = 0  # fc
    weight: np.ndarray | None = field(default=None, repr=False)
    bias: np.ndarray | None = field(default=None, repr=False)

    def spec(self) -> dict:
        """The JSON form stored in the file (weights go to datasets, not here)."""
        keys = {
            "conv": ("name", "out_channels", "kernel"),
            "pool": ("mode", "kernel", "stride"),
            "fc": ("name", "out_features"),
        }.get(self.type, ())
        return {"type": self.type, **{k: getattr(self, k) for k in keys}}


@dataclass
class Model:
    name: str
    arch: str
    input_shape: tuple[int, int, int]  # C, H, W
    layers: list[Layer]
    description: str = ""
    path: Path | None = None

    @property
    def convs(self) -> list[Layer]:
        return [layer for layer in self.layers if layer.type == "conv"]

    @property
    def input_size(self) -> int:
        return self.input_shape[1]

    def digest(self) -> str:
        """SHA-256 over the architecture and every weight: names these exact weights (a retrained model of the
        same name gets another digest)."""
        import hashlib

        h = hashlib.sha256(repr((tuple(self.input_shape), [la.spec() for la in self.layers])).encode())
        for la in self.layers:
            for a in (la.weight, la.bias):
                if a is not None:
                    h.update(np.ascontiguousarray(a, dtype=np.float32).tobytes())
        return h.hexdigest()

    def summary(self) -> str:
        parts = []
        for layer in self.layers:
            if layer.type == "conv":
                parts.append(f"conv {layer.out_channels}@{layer.kernel}x{layer.kernel}")
            elif layer.type == "pool":
                parts.append(f"{layer.mode}pool {layer.kernel}/{layer.stride}")
            elif layer.type == "fc":
                parts.append(f"FC {layer.out_features}")
            else:
                parts.append(layer.type)
        c, h, w = self.input_shape
        return f"{c}x{h}x{w}: " + " -> ".join(parts)


def shape_trace(model: Model) -> list[tuple[int, ...]]:
    """Shape after each layer (per image); raises PyconvError naming the first layer that does not chain."""
    shape: tuple[int, ...] = tuple(model.input_shape)
    out = []
    for i, layer in enumerate(model.layers):
        where = f"model '{model.name}': layer {i} ({layer.type}{' ' + layer.name if layer.name else ''})"
        t = layer.type
        if t == "conv":
            if len(shape) != 3:
                raise PyconvError(f"{where}: a convolution needs a C x H x W input, got {shape}")
            c, h, w = shape
            wt = layer.weight
            if wt is None or wt.ndim != 4:
                raise PyconvError(f"{where}: weight must be 4-D [M][C][K][K]")
            m, wc, kh, kw = wt.shape
            if wc != c:
                raise PyconvError(f"{where}: weight expects {wc} input channels but the input has {c}")
            if kh != kw or m != layer.out_channels or kh != layer.kernel:
                raise PyconvError(f"{where}: weight shape {wt.shape} disagrees with the layer "
                                  f"({layer.out_channels}@{layer.kernel}x{layer.kernel})")
            if kh > h or kw > w:
                raise PyconvError(f"{where}: kernel {kh}x{kw} is larger than its {h}x{w} input")
            shape = (m, h - kh + 1, w - kw + 1)
        elif t in ACTIVATIONS or t == "softmax":
            pass
        elif t == "pool":
            if len(shape) != 3:
                raise PyconvError(f"{where}: pooling needs a C x H x W input, got {shape}")
            if layer.mode not in ("max", "avg") or layer.kernel < 1 or layer.stride < 1:
                raise PyconvError(f"{where}: pooling needs mode max|avg, kernel >= 1, stride >= 1")
            c, h, w = shape
            if layer.kernel > h or layer.kernel > w:
                raise PyconvError(f"{where}: pooling window {layer.kernel} is larger than its {h}x{w} input")
            shape = (c, (h - layer.kernel) // layer.stride + 1, (w - layer.kernel) // layer.stride + 1)
        elif t == "flatten":
            shape = (int(np.prod(shape)),)
        elif t == "fc":
            if len(shape) != 1:
                raise PyconvError(f"{where}: a fully connected layer needs a flat input (add flatten), got {shape}")
            wt, b = layer.weight, layer.bias
            if wt is None or wt.ndim != 2 or b is None or b.ndim != 1:
                raise PyconvError(f"{where}: needs a 2-D weight [out][in] and a 1-D bias [out]")
            if wt.shape[1] != shape[0]:
                raise PyconvError(f"{where}: weight takes {wt.shape[1]} inputs but the layer before gives {shape[0]}")
            if wt.shape[0] != layer.out_features or b.shape[0] != layer.out_features:
                raise PyconvError(f"{where}: weight {wt.shape} / bias {b.shape} disagree with out_features "
                                  f"{layer.out_features}")
            shape = (layer.out_features,)
        else:
            raise PyconvError(f"{where}: unknown layer type '{t}'")
        out.append(shape)
    return out


def validate(model: Model) -> None:
    if len(model.input_shape) != 3 or min(model.input_shape) < 1:
        raise PyconvError(f"model '{model.name}': input_shape must be [C, H, W], got {model.input_shape}")
    if not model.convs:
        raise PyconvError(f"model '{model.name}': has no convolution layer")
    for layer in model.layers:
        for kind, arr in (("weight", layer.weight), ("bias", layer.bias)):
            if arr is None:
                continue
            if arr.dtype != np.float32:
                raise PyconvError(f"model '{model.name}': {layer.name}/{kind} has dtype {arr.dtype}, must be float32")
            if not np.all(np.isfinite(arr)):
                raise PyconvError(f"model '{model.name}': {layer.name}/{kind} contains NaN or Inf")
    shapes = shape_trace(model)
    if len(shapes[-1]) != 1:
        raise PyconvError(f"model '{model.name}': the network must end in a flat class vector, ends in {shapes[-1]}")


def save_model(model: Model, dest: str | Path) -> Path:
    """Validate, then write atomically (an interrupted save leaves no file)."""
    validate(model)
    dest = Path(dest)
    with atomic_path(dest, suffix=".h5") as tmp:
        with h5py.File(tmp, "w") as f:
            f.attrs["format"] = FORMAT
            f.attrs["version"] = VERSION
            f.attrs["name"] = model.name
            f.attrs["arch"] = model.arch
            f.attrs["input_shape"] = np.asarray(model.input_shape, dtype=np.int64)
            f.attrs["description"] = model.description
            f.attrs["layers"] = json.dumps([layer.spec() for layer in model.layers])
            for layer in model.layers:
                for kind, arr in (("weight", layer.weight), ("bias", layer.bias)):
                    if arr is not None:
                        f.create_dataset(f"weights/{layer.name}/{kind}", data=arr, **WEIGHT_STORAGE)
    return dest


def read_model_file(path: str | Path) -> Model:
    path = Path(path)
    try:
        f = h5py.File(path, "r")
    except FileNotFoundError:
        raise PyconvError(f"model file {path} does not exist") from None
    except OSError as e:
        raise PyconvError(f"model file {path} is not a readable HDF5 file ({e})") from None
    with f:
        if f.attrs.get("format") != FORMAT:
            raise PyconvError(f"model file {path} is not a pyconv model (attribute format != '{FORMAT}')")
        if int(f.attrs.get("version", -1)) != VERSION:
            raise PyconvError(f"model file {path} has format version {f.attrs.get('version')}, this build reads {VERSION}")
        try:
            specs = json.loads(f.attrs["layers"])
            name = str(f.attrs["name"])
            arch = str(f.attrs["arch"])
            input_shape = tuple(int(v) for v in f.attrs["input_shape"])
            description = str(f.attrs.get("description", ""))
        except (KeyError, ValueError, TypeError) as e:
            raise PyconvError(f"model file {path}: missing or malformed attribute ({e})") from None
        layers = []
        for spec in specs:
            if not isinstance(spec, dict) or "type" not in spec:
                raise PyconvError(f"model file {path}: malformed layer entry {spec!r}")
            unknown = set(spec) - {"type", "name", "out_channels", "kernel", "mode", "stride", "out_features"}
            if unknown:
                raise PyconvError(f"model file {path}: layer {spec!r} has unknown keys {sorted(unknown)}")
            layer = Layer(**spec)
            if layer.type in ("conv", "fc"):
                group = f"weights/{layer.name}"
                try:
                    layer.weight = f[f"{group}/weight"][()]
                    if layer.type == "fc":
                        layer.bias = f[f"{group}/bias"][()]
                except KeyError:
                    raise PyconvError(f"model file {path}: dataset {group}/{'bias' if layer.type == 'fc' and f'{group}/weight' in f else 'weight'} is missing") from None
                except OSError as e:
                    raise PyconvError(f"model file {path}: cannot read {group} ({e})") from None
            layers.append(layer)
    model = Model(name=name, arch=arch, input_shape=input_shape, layers=layers, description=description, path=path)
    validate(model)
    return model


def model_path(name: str) -> Path:
    for folder in (paths.MODELS, paths.IMPORTED_MODELS):
        p = folder / f"{name}.h5"
        if p.exists():
            return p
    raise PyconvError(f"unknown model '{name}' (available: {', '.join(available_models()) or 'none'})")


def available_models() -> list[str]:
    names = []
    for folder in (paths.MODELS, paths.IMPORTED_MODELS):
        if folder.is_dir():
            names += sorted(p.stem for p in folder.glob("*.h5"))
    return names


def shipped_models() -> list[str]:
    return sorted(p.stem for p in paths.MODELS.glob("*.h5")) if paths.MODELS.is_dir() else []


def load_model(name_or_path: str | Path) -> Model:
    """A model by name (datasets/models/NAME.h5, then datasets/models/imported/NAME.h5) or by file path."""
    p = Path(name_or_path)
    if p.suffix == ".h5" or p.exists():
        return read_model_file(p)
    return read_model_file(model_path(str(name_or_path)))
