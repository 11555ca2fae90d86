"""Convert an MXNet checkpoint (symbol JSON + .params NDArray list) into the project's model file, without MXNet.

Supported ops (what the course networks use): the custom `New` convolution and the stock `Convolution` (no_bias,
stride 1, no padding, no dilation, one group), `Activation` tanh/relu/sigmoid, `Pooling` max/avg with kernel/stride
(valid convention), `Flatten`, `FullyConnected` (with bias), `SoftmaxOutput`. Anything else is refused by name.

.params layout (little endian): u64 magic 0x112, u64 reserved, u64 count, then per array: u32 magic 0xF993FAC9
(v2: i32 storage type, 0 = dense; u32 ndim; i64 dims) or 0xF993FAC8 (v1: u32 ndim; i64 dims) or a legacy u32 ndim
followed by u32 dims; then i32 dev_type, i32 dev_id, i32 type_flag (0 = float32) and the raw data; then u64 name
count and per name u64 length + bytes (`arg:new0_weight`, `aux:...`)."""

from __future__ import annotations

import ast
import json
import re
import struct
from pathlib import Path

import numpy as np

from . import paths
from .checks import check_model_name
from .errors import PyconvError
from .model import Layer, Model, save_model

PARAMS_MAGIC = 0x112
NDARRAY_V2 = 0xF993FAC9
NDARRAY_V1 = 0xF993FAC8
DTYPES = {0: np.float32}  # type_flag -> dtype; the course checkpoints are float32
TYPE_NAMES = {1: "float64", 2: "float16", 3: "uint8", 4: "int32", 5: "int8", 6: "int64"}
SUPPORTED_OPS = ("New", "Convolution", "Activation", "Pooling", "Flatten", "FullyConnected", "SoftmaxOutput")


class _Reader:
    def __init__(self, data: bytes, path: Path):
        self.data, self.pos, self.path = data, 0, path

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise PyconvError(f"{self.path}: truncated .params file (wanted {size} bytes at offset {self.pos})")
        vals = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += size
        return vals if len(vals) > 1 else vals[0]

    def raw(self, size: int) -> bytes:
        if self.pos + size > len(self.data):
            raise PyconvError(f"{self.path}: truncated .params file (array data ends past the file)")
        out = self.data[self.pos:self.pos + size]
        self.pos += size
        return out


def read_params(path: str | Path) -> dict[str, np.ndarray]:
    """The NDArray list of a .params file, by name with its `arg:`/`aux:` prefix removed."""
    path = Path(path)
    try:
        r = _Reader(path.read_bytes(), path)
    except OSError as e:
        raise PyconvError(f"cannot read {path} ({e.strerror or e})") from None
    magic = r.take("Q")
    if magic != PARAMS_MAGIC:
        raise PyconvError(f"{path}: bad magic 0x{magic:x} (an MXNet .params file starts with 0x112)")
    r.take("Q")  # reserved
    count = r.take("Q")
    if count > 1 << 20:
        raise PyconvError(f"{path}: implausible array count {count}")
    arrays = []
    for i in range(count):
        head = r.take("I")
        if head == NDARRAY_V2:
            stype = r.take("i")
            if stype != 0:
                raise PyconvError(f"{path}: array {i} has sparse storage type {stype}; only dense arrays are supported")
            ndim = r.take("I")
            dims = [r.take("q") for _ in range(ndim)]
        elif head == NDARRAY_V1:
            ndim = r.take("I")
            dims = [r.take("q") for _ in range(ndim)]
        else:  # legacy: the u32 just read is ndim, dims are u32
            ndim = head
            if ndim > 32:
                raise PyconvError(f"{path}: array {i} has an unknown header 0x{head:x}")
            dims = [r.take("I") for _ in range(ndim)]
        if any(d < 0 for d in dims):
            raise PyconvError(f"{path}: array {i} has a negative dimension {dims}")
        r.take("i")  # dev_type
        r.take("i")  # dev_id
        flag = r.take("i")
        if flag not in DTYPES:
            raise PyconvError(f"{path}: array {i} has dtype {TYPE_NAMES.get(flag, flag)}; only float32 is supported")
        dtype = np.dtype(DTYPES[flag])
        n = int(np.prod(dims)) if dims else 1
        arrays.append(np.frombuffer(r.raw(n * dtype.itemsize), dtype=dtype).reshape(dims).copy())
    n_names = r.take("Q")
    if n_names != count:
        raise PyconvError(f"{path}: {count} arrays but {n_names} names")
    names = []
    for _ in range(n_names):
        length = r.take("Q")
        names.append(r.raw(length).decode("utf-8", errors="replace"))
    return {re.sub(r"^(arg|aux):", "", n): a for n, a in zip(names, arrays)}


def _attrs(node: dict) -> dict:
    return node.get("attrs") or node.get("attr") or node.get("param") or {}


def _tuple(text: str | None, default: tuple) -> tuple:
    if text is None:
        return default
    v = ast.literal_eval(text)
    return tuple(v) if isinstance(v, (tuple, list)) else (v,)


def _bool(text: str | None, default: bool) -> bool:
    return default if text is None else str(text).strip().lower() in ("true", "1")


def parse_symbol(path: str | Path, params: dict[str, np.ndarray], name: str, input_shape: tuple[int, int, int]) -> Model:
    path = Path(path)
    try:
        graph = json.loads(path.read_text())
        nodes = graph["nodes"]
    except OSError as e:
        raise PyconvError(f"cannot read {path} ({e.strerror or e})") from None
    except (ValueError, KeyError, TypeError):
        raise PyconvError(f"{path} is not an MXNet symbol file (JSON with a 'nodes' list)") from None

    def weight(key: str) -> np.ndarray:
        if key not in params:
            raise PyconvError(f"the .params file has no array '{key}' (it has: {', '.join(sorted(params))})")
        return params[key]

    layers: list[Layer] = []
    flat = False
    counts = {"conv": 0, "fc": 0}
    for node in nodes:
        op, nname, a = node.get("op"), node.get("name", "?"), _attrs(node)
        if op == "null":
            continue
        if op not in SUPPORTED_OPS:
            raise PyconvError(f"{path}: unsupported MXNet op '{op}' (node '{nname}'); supported: {', '.join(SUPPORTED_OPS)}")
        try:
            if op in ("New", "Convolution"):
                if op == "Convolution":
                    if not _bool(a.get("no_bias"), False):
                        raise PyconvError(f"{path}: Convolution '{nname}' has a bias; only no_bias convolutions are supported")
                    for key, default in (("stride", (1, 1)), ("pad", (0, 0)), ("dilate", (1, 1))):
                        if set(_tuple(a.get(key), default)) - {default[0]}:
                            raise PyconvError(f"{path}: Convolution '{nname}' has {key}={a.get(key)}; only stride 1, "
                                              "no padding, no dilation are supported")
                    if int(a.get("num_group", 1)) != 1:
                        raise PyconvError(f"{path}: Convolution '{nname}' is grouped; not supported")
                kernel = _tuple(a.get("kernel"), ())
                w = weight(f"{nname}_weight")
                counts["conv"] += 1
                layers.append(Layer("conv", name=f"conv{counts['conv']}", out_channels=int(a["num_filter"]),
                                    kernel=int(kernel[0]), weight=w))
            elif op == "Activation":
                act = a.get("act_type")
                if act not in ("tanh", "relu", "sigmoid"):
                    raise PyconvError(f"{path}: Activation '{nname}' has act_type '{act}'; supported: tanh, relu, sigmoid")
                layers.append(Layer(act))
            elif op == "Pooling":
                if _bool(a.get("global_pool"), False) or a.get("pooling_convention", "valid") != "valid":
                    raise PyconvError(f"{path}: Pooling '{nname}': global pooling and the 'full' convention are not supported")
                mode = a.get("pool_type", "max")
                if mode not in ("max", "avg"):
                    raise PyconvError(f"{path}: Pooling '{nname}' has pool_type '{mode}'; supported: max, avg")
                kernel = _tuple(a.get("kernel"), ())
                stride = _tuple(a.get("stride"), (1, 1))
                if len(set(kernel)) != 1 or len(set(stride)) != 1 or set(_tuple(a.get("pad"), (0, 0))) != {0}:
                    raise PyconvError(f"{path}: Pooling '{nname}' must be square, unpadded (kernel={kernel}, stride={stride})")
                layers.append(Layer("pool", mode=mode, kernel=int(kernel[0]), stride=int(stride[0])))
            elif op == "Flatten":
                layers.append(Layer("flatten"))
                flat = True
            elif op == "FullyConnected":
                if _bool(a.get("no_bias"), False):
                    raise PyconvError(f"{path}: FullyConnected '{nname}' has no bias; the model format requires one")
                if not flat and _bool(a.get("flatten"), True):
                    layers.append(Layer("flatten"))  # MXNet's FullyConnected flattens its input itself
                    flat = True
                counts["fc"] += 1
                layers.append(Layer("fc", name=f"fc{counts['fc']}", out_features=int(a["num_hidden"]),
                                    weight=weight(f"{nname}_weight"), bias=weight(f"{nname}_bias")))
            elif op == "SoftmaxOutput":
                layers.append(Layer("softmax"))
        except (KeyError, ValueError, SyntaxError, IndexError) as e:
            raise PyconvError(f"{path}: node '{nname}' ({op}) has malformed attributes ({e})") from None
    return Model(name=name, arch="mxnet", input_shape=input_shape, layers=layers,
                 description=f"imported from MXNet checkpoint {path.name}")


def import_checkpoint(symbol: str | Path, params: str | Path, name: str, input_size: int = 48,
                      channels: int = 1, force: bool = False, dest_dir: Path | None = None) -> Path:
    """Convert and write datasets/models/imported/NAME.h5. Shipped model names are never overwritten."""
    check_model_name(name)
    if (paths.MODELS / f"{name}.h5").exists():
        raise PyconvError(f"'{name}' is a shipped model; choose another name for the imported one (e.g. course-{name})")
    dest = Path(dest_dir or paths.IMPORTED_MODELS) / f"{name}.h5"
    if dest.exists() and not force:
        raise PyconvError(f"{dest} exists; pass --force to overwrite it")
    if input_size < 1:
        raise PyconvError(f"input size must be >= 1, got {input_size}")
    model = parse_symbol(symbol, read_params(params), name, (channels, input_size, input_size))
    model.description += f"; input {channels}x{input_size}x{input_size}"
    return save_model(model, dest)
