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
`load_model` validates everything (shapes chain, float32, finite) and names the first problem it finds. Every
attribute and dataset is checked for its type, shape and size before a byte of it is read, against the layer
spec and the bounds below: a tiny file may declare a huge (chunked, mostly empty) dataset.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from . import paths
from .checks import MODEL_NAME_RE
from .errors import PyconvError
from .fileio import write_hdf5_atomic

FORMAT = "pyconv-model"
VERSION = 1
ACTIVATIONS = ("tanh", "relu", "sigmoid")
DEFAULT_MODEL = "ece408"
LAYER_TYPES = ("conv", "pool", "flatten", "fc", "softmax", *ACTIVATIONS)

# Bounds of a model file, far above the course's networks (9-10 layers, at most 50 channels, 72x72 inputs,
# 3.6 M weights, 52 K values per image after a layer) and far below what would exhaust a machine.
MAX_LAYERS = 64
MAX_DIM = 4096  # channels, features, image side, kernel, pool window
MAX_WEIGHTS = 1 << 26  # float32 values in all weights together (256 MB)
MAX_VALUES_PER_IMAGE = 1 << 22  # what one image becomes after any layer (16 MB of float32)
MAX_FILE_BYTES = 4 * MAX_WEIGHTS + (16 << 20)  # the weights plus room for HDF5's own metadata
MAX_TEXT = 1 << 16  # characters of the layers JSON, the description
ARCH_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}")
LAYER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
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
    if len(model.input_shape) != 3 or min(model.input_shape) < 1 or max(model.input_shape) > MAX_DIM:
        raise PyconvError(f"model '{model.name}': input_shape must be [C, H, W], each 1..{MAX_DIM}, got "
                          f"{model.input_shape}")
    if len(model.layers) > MAX_LAYERS:
        raise PyconvError(f"model '{model.name}': {len(model.layers)} layers, at most {MAX_LAYERS} are supported")
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
    for i, shape in enumerate(shapes):
        if int(np.prod(shape, dtype=np.int64)) > MAX_VALUES_PER_IMAGE:
            raise PyconvError(f"model '{model.name}': layer {i} makes {shape} values per image, more than the "
                              f"{MAX_VALUES_PER_IMAGE} supported")
    if len(shapes[-1]) != 1:
        raise PyconvError(f"model '{model.name}': the network must end in a flat class vector, ends in {shapes[-1]}")


def save_model(model: Model, dest: str | Path) -> Path:
    """Validate, then write atomically (an interrupted save leaves no file)."""
    validate(model)

    def fill(f):
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

    return write_hdf5_atomic(dest, fill)


def _attr(f, key: str, path: Path):
    """Attribute `key`, its size checked before it is read (a damaged header may declare any size)."""
    if key not in f.attrs:
        raise PyconvError(f"model file {path}: attribute '{key}' is missing")
    try:
        aid = h5py.h5a.open(f.id, key.encode())
        shape, dtype = aid.shape, aid.dtype
        if int(np.prod(shape or (), dtype=np.float64)) > 16:
            raise PyconvError(f"model file {path}: attribute '{key}' holds {shape} values")
        if dtype.itemsize > MAX_TEXT * 4:
            raise PyconvError(f"model file {path}: attribute '{key}' is {dtype.itemsize} bytes")
        value = f.attrs[key]
    except (OSError, TypeError, ValueError, KeyError) as e:
        raise PyconvError(f"model file {path}: attribute '{key}' is unreadable ({e})") from None
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            raise PyconvError(f"model file {path}: attribute '{key}' is not UTF-8 text") from None
    return value


def _text(value, key: str, path: Path, pattern: re.Pattern | None = None, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str) or len(value) > limit or (pattern is not None and not pattern.fullmatch(value)):
        shown = repr(value) if not isinstance(value, str) or len(value) <= 80 else repr(value[:80]) + "..."
        raise PyconvError(f"model file {path}: attribute '{key}' must be " + (
            "a short name of letters, digits, '.', '_' or '-'" if pattern is not None else
            f"text of at most {limit} characters") + f", got {shown}")
    return value


def _layer(spec, i: int, path: Path) -> Layer:
    """One layer entry of the layers JSON: known keys, each of the right type and within bounds."""
    where = f"model file {path}: layer {i}"
    if not isinstance(spec, dict) or not isinstance(spec.get("type"), str):
        raise PyconvError(f"{where} must be an object with a 'type', got {_short(spec)}")
    if spec["type"] not in LAYER_TYPES:
        raise PyconvError(f"{where} has unknown type {_short(spec['type'])} (known: {', '.join(LAYER_TYPES)})")
    unknown = set(spec) - {"type", "name", "out_channels", "kernel", "mode", "stride", "out_features"}
    if unknown:
        raise PyconvError(f"{where} ({spec['type']}) has unknown keys {_short(sorted(unknown))}")
    # what each layer type needs: a conv with 0 output channels (or a 0 kernel) would make empty tensors downstream
    needed = {"conv": ("out_channels", "kernel"), "pool": ("kernel", "stride"), "fc": ("out_features",)}
    for key in ("out_channels", "kernel", "stride", "out_features"):
        v = spec.get(key, 0)
        low = 1 if key in needed.get(spec["type"], ()) else 0
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= MAX_DIM:
            raise PyconvError(f"{where} ({spec['type']}): '{key}' must be an integer 1..{MAX_DIM}, got {_short(v)}")
    if spec["type"] in ("conv", "fc"):
        name = spec.get("name")
        if not isinstance(name, str) or not LAYER_NAME_RE.fullmatch(name):
            raise PyconvError(f"{where} ({spec['type']}): 'name' must be letters, digits, '.', '_' or '-', got "
                              f"{_short(name)}")
    elif not isinstance(spec.get("name", ""), str) or len(spec.get("name", "")) > 64:
        raise PyconvError(f"{where} ({spec['type']}): 'name' must be a short text, got {_short(spec.get('name'))}")
    if not isinstance(spec.get("mode", ""), str):
        raise PyconvError(f"{where} ({spec['type']}): 'mode' must be max or avg, got {_short(spec.get('mode'))}")
    return Layer(**spec)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


def _dataset(f, key: str, want_ndim: int, known: dict[int, int], path: Path, budget: list[int]) -> np.ndarray:
    """Read dataset `key` after checking, from its header alone, that it is float32 with `want_ndim` axes, the
    sizes the layer spec fixes (known: axis -> size), and no more values than remain of MAX_WEIGHTS."""
    try:
        obj = f.get(key)
    except (OSError, KeyError, ValueError) as e:
        raise PyconvError(f"model file {path}: cannot read {key} ({e})") from None
    if obj is None:
        raise PyconvError(f"model file {path}: dataset {key} is missing")
    if not isinstance(obj, h5py.Dataset):
        raise PyconvError(f"model file {path}: {key} is not a dataset")
    shape, dtype = obj.shape, obj.dtype
    if dtype != np.float32:
        raise PyconvError(f"model file {path}: {key} has dtype {dtype}, must be float32")
    if shape is None or len(shape) != want_ndim:
        raise PyconvError(f"model file {path}: {key} has shape {shape}, must have {want_ndim} axes")
    for axis, size in known.items():
        if shape[axis] != size:
            raise PyconvError(f"model file {path}: {key} has shape {shape}, which disagrees with the layer "
                              f"(axis {axis} must be {size})")
    count = int(np.prod(shape, dtype=np.float64))
    if count > budget[0]:
        raise PyconvError(f"model file {path}: {key} declares {shape} = {count} values; all weights together may "
                          f"hold at most {MAX_WEIGHTS}")
    budget[0] -= count
    try:
        return obj[()]
    except (OSError, ValueError, TypeError) as e:
        raise PyconvError(f"model file {path}: cannot read {key} ({e})") from None


def read_model_file(path: str | Path) -> Model:
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise PyconvError(f"model file {path} does not exist") from None
    except OSError as e:
        raise PyconvError(f"model file {path} cannot be read ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block the open, a device never end
        raise PyconvError(f"model file {path} is not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise PyconvError(f"model file {path} is {st.st_size} bytes; a model holds at most {MAX_FILE_BYTES}")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise PyconvError(f"model file {path} is not a readable HDF5 file ({e})") from None
    with f:
        if f.attrs.get("format") not in (FORMAT, FORMAT.encode()):
            raise PyconvError(f"model file {path} is not a pyconv model (attribute format != '{FORMAT}')")
        version = _attr(f, "version", path)
        if isinstance(version, (bool, str)) or not isinstance(version, (int, np.integer)) or int(version) != VERSION:
            raise PyconvError(f"model file {path} has format version {_short(version)}, this build reads {VERSION}")
        layers_json = _text(_attr(f, "layers", path), "layers", path)
        name = _text(_attr(f, "name", path), "name", path, MODEL_NAME_RE)
        arch = _text(_attr(f, "arch", path), "arch", path, ARCH_RE)
        description = _text(_attr(f, "description", path), "description", path) if "description" in f.attrs else ""
        raw_shape = _attr(f, "input_shape", path)
        try:
            input_shape = tuple(int(v) for v in np.asarray(raw_shape).reshape(-1))
            if np.asarray(raw_shape).dtype.kind not in "iu" or len(input_shape) != 3:
                raise ValueError
        except (TypeError, ValueError):
            raise PyconvError(f"model file {path}: attribute 'input_shape' must be three integers [C, H, W], "
                              f"got {_short(raw_shape)}") from None
        if min(input_shape) < 1 or max(input_shape) > MAX_DIM:
            raise PyconvError(f"model file {path}: input_shape {input_shape} must be [C, H, W], each 1..{MAX_DIM}")
        try:
            specs = json.loads(layers_json)
        except RecursionError:
            raise PyconvError(f"model file {path}: the layers JSON is nested too deeply") from None
        except ValueError as e:
            raise PyconvError(f"model file {path}: the layers attribute is not JSON ({e})") from None
        if not isinstance(specs, list) or not 1 <= len(specs) <= MAX_LAYERS:
            raise PyconvError(f"model file {path}: the layers attribute must be a list of 1..{MAX_LAYERS} layers, "
                              f"got {_short(specs)}")
        layers = [_layer(spec, i, path) for i, spec in enumerate(specs)]
        names = [la.name for la in layers if la.type in ("conv", "fc")]
        if len(set(names)) != len(names):
            raise PyconvError(f"model file {path}: two layers share a name ({', '.join(names)})")
        budget = [MAX_WEIGHTS]
        for layer in layers:
            group = f"weights/{layer.name}"
            if layer.type == "conv":
                layer.weight = _dataset(f, f"{group}/weight", 4, {0: layer.out_channels, 2: layer.kernel,
                                                                  3: layer.kernel}, path, budget)
            elif layer.type == "fc":
                layer.weight = _dataset(f, f"{group}/weight", 2, {0: layer.out_features}, path, budget)
                layer.bias = _dataset(f, f"{group}/bias", 1, {0: layer.out_features}, path, budget)
    model = Model(name=name, arch=arch, input_shape=input_shape, layers=layers, description=description, path=path)
    validate(model)
    return model


def model_path(name: str) -> Path:
    if MODEL_NAME_RE.fullmatch(name):
        for folder in paths.model_folders():
            p = folder / f"{name}.h5"
            if p.exists():
                return p
    raise PyconvError(f"unknown model '{name}' (available: {', '.join(available_models()) or 'none'})")


def available_models() -> list[str]:
    """Models by name: regular files NAME.h5 whose NAME is a valid model name (a FIFO or a folder named *.h5 is
    not a model, and would block or fail the listing)."""
    names = []
    for folder in paths.model_folders():
        try:
            found = sorted(p.stem for p in folder.glob("*.h5") if MODEL_NAME_RE.fullmatch(p.stem) and _regular(p))
        except OSError:
            continue
        names += found
    return names


def _regular(p: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(p).st_mode)
    except OSError:
        return False


def shipped_models() -> list[str]:
    return sorted(p.stem for p in paths.MODELS.glob("*.h5")
                  if MODEL_NAME_RE.fullmatch(p.stem) and _regular(p)) if paths.MODELS.is_dir() else []


def load_model(name_or_path: str | Path) -> Model:
    """A model by name (datasets/models/NAME.h5, then datasets/models/imported/NAME.h5) or by file path."""
    text = str(name_or_path)
    if "\0" in text:
        raise PyconvError(f"model {text!r}: a name or path cannot hold a NUL character")
    p = Path(text)
    try:
        is_path = p.suffix == ".h5" or os.sep in text or p.exists()
    except OSError as e:  # e.g. a name longer than the file system allows
        raise PyconvError(f"model {text[:60]}...: {e.strerror or e}") from None
    return read_model_file(p if is_path else model_path(text))
