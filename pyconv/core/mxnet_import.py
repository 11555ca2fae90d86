"""Convert an MXNet checkpoint (symbol JSON + .params NDArray list) into the project's model file, without MXNet.

Supported ops (what the course networks use): the custom `New` convolution and the stock `Convolution` (no_bias,
stride 1, no padding, no dilation, one group), `Activation` tanh/relu/sigmoid, `Pooling` max/avg with kernel/stride
(valid convention), `Flatten`, `FullyConnected` (with bias), `SoftmaxOutput`. Anything else is refused by name.

.params layout (little endian): u64 magic 0x112, u64 reserved, u64 count, then per array: u32 magic 0xF993FAC9
(v2: i32 storage type, 0 = dense; u32 ndim; i64 dims) or 0xF993FAC8 (v1: u32 ndim; i64 dims) or a legacy u32 ndim
followed by u32 dims; then i32 dev_type, i32 dev_id, i32 type_flag (0 = float32) and the raw data; then u64 name
count and per name u64 length + bytes (`arg:new0_weight`, `aux:...`).

The symbol is read as a graph, not as a list: from its output (`heads`) back through each node's data input
(`inputs[0]`) to the input variable. That path is the network; every other input of a node on it must be a
variable (weights, bias, the label), and a node that is not on it (a dangling `relu`, a second branch) is
refused by name rather than spliced in. Inputs must refer to earlier nodes (MXNet writes its graphs in
topological order), which also rules out cycles.

Both files are read up to a bound derived from what they may hold: the .params file no more than the largest
model's weights (pyconv.model.MAX_WEIGHTS) plus headers, the symbol a few MB of JSON."""

from __future__ import annotations

import json
import math
import re
import struct
from pathlib import Path

import numpy as np

from . import paths
from .checks import check_model_name
from .errors import PyconvError
from .fileio import read_bounded
from .model import MAX_DIM, MAX_WEIGHTS, Layer, Model, save_model

PARAMS_MAGIC = 0x112
NDARRAY_V2 = 0xF993FAC9
NDARRAY_V1 = 0xF993FAC8
DTYPES = {0: np.float32}  # type_flag -> dtype; the course checkpoints are float32
TYPE_NAMES = {1: "float64", 2: "float16", 3: "uint8", 4: "int32", 5: "int8", 6: "int64"}
SUPPORTED_OPS = ("New", "Convolution", "Activation", "Pooling", "Flatten", "FullyConnected", "SoftmaxOutput")
MAX_PARAMS_BYTES = 4 * MAX_WEIGHTS + (1 << 20)  # the weights of the largest model a file may hold, plus headers
MAX_SYMBOL_BYTES = 16 << 20  # the course's symbol is 2.7 KB
MAX_NODES = 4096
MAX_NDIM = 32


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
    r = _Reader(read_bounded(path, MAX_PARAMS_BYTES, ".params file"), path)
    magic = r.take("Q")
    if magic != PARAMS_MAGIC:
        raise PyconvError(f"{path}: bad magic 0x{magic:x} (an MXNet .params file starts with 0x112)")
    r.take("Q")  # reserved
    count = r.take("Q")
    if count > len(r.data) // 16:  # every array takes at least a header and its three type words
        raise PyconvError(f"{path}: implausible array count {count}")
    arrays = []
    for i in range(count):
        head = r.take("I")
        if head == NDARRAY_V2:
            stype = r.take("i")
            if stype != 0:
                raise PyconvError(f"{path}: array {i} has sparse storage type {stype}; only dense arrays are supported")
            ndim = _ndim(r.take("I"), i, path)
            dims = [r.take("q") for _ in range(ndim)]
        elif head == NDARRAY_V1:
            ndim = _ndim(r.take("I"), i, path)
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
        n = math.prod(dims)  # Python integers: numpy's product of huge declared sizes wraps around
        if n * dtype.itemsize > len(r.data) - r.pos:
            raise PyconvError(f"{path}: truncated .params file (array {i} declares {dims}, more than the file holds)")
        arrays.append(np.frombuffer(r.raw(n * dtype.itemsize), dtype=dtype).reshape(dims).copy())
    n_names = r.take("Q")
    if n_names != count:
        raise PyconvError(f"{path}: {count} arrays but {n_names} names")
    names = []
    for _ in range(n_names):
        length = r.take("Q")
        names.append(re.sub(r"^(arg|aux):", "", r.raw(length).decode("utf-8", errors="replace")))
    if len(set(names)) != len(names):
        raise PyconvError(f"{path}: two arrays share a name")
    return dict(zip(names, arrays, strict=True))


def _ndim(ndim: int, i: int, path: Path) -> int:
    if ndim > MAX_NDIM:
        raise PyconvError(f"{path}: array {i} declares {ndim} dimensions")
    return ndim


def _attrs(node: dict) -> dict:
    a = node.get("attrs") or node.get("attr") or node.get("param") or {}
    if not isinstance(a, dict):
        raise ValueError(f"attributes must be an object, got {type(a).__name__}")
    return {str(k): str(v) for k, v in a.items()}


_TUPLE_RE = re.compile(r"\(?\s*([0-9]{1,6}(?:\s*,\s*[0-9]{1,6})*)\s*,?\s*\)?")


def _tuple(text: str | None, default: tuple) -> tuple:
    """'(5, 5)', '5' or '[2,2]' -> a tuple of ints (an MXNet shape attribute); ValueError for anything else."""
    if text is None:
        return default
    m = _TUPLE_RE.fullmatch(text.strip().replace("[", "(").replace("]", ")"))
    if not m:
        raise ValueError(f"not a tuple of integers: {text[:40]!r}")
    return tuple(int(v) for v in m.group(1).split(","))


def _int(text, what: str) -> int:
    """A size attribute: a decimal integer 1..MAX_DIM."""
    text = str(text).strip()
    if not re.fullmatch(r"[0-9]{1,6}", text) or not 1 <= int(text) <= MAX_DIM:
        raise ValueError(f"{what} must be an integer 1..{MAX_DIM}, got {text[:40]!r}")
    return int(text)


def _bool(text: str | None, default: bool) -> bool:
    return default if text is None else str(text).strip().lower() in ("true", "1")


def _chain(graph, path: Path) -> list[dict]:
    """The op nodes from the input variable to the output, in order (see the module's docstring)."""
    if not isinstance(graph, dict) or not isinstance(graph.get("nodes"), list):
        raise PyconvError(f"{path} is not an MXNet symbol file (JSON with a 'nodes' list)")
    nodes = graph["nodes"]
    if not 1 <= len(nodes) <= MAX_NODES:
        raise PyconvError(f"{path}: {len(nodes)} nodes; a symbol has 1..{MAX_NODES}")
    for i, n in enumerate(nodes):
        if not isinstance(n, dict) or not isinstance(n.get("op"), str) or not isinstance(n.get("name", "?"), str):
            raise PyconvError(f"{path}: node {i} is not an object with an 'op' and a 'name'")
        inputs = n.get("inputs", [])
        if not isinstance(inputs, list) or not all(
                isinstance(e, list) and e and all(isinstance(v, int) and not isinstance(v, bool) for v in e)
                for e in inputs):
            raise PyconvError(f"{path}: node {i} ('{n.get('name', '?')}') has malformed inputs")
        if any(not 0 <= e[0] < i for e in inputs):
            raise PyconvError(f"{path}: node {i} ('{n.get('name', '?')}') takes an input from a later node (a "
                              "cycle, or nodes out of order)")
    heads = graph.get("heads", [[len(nodes) - 1, 0, 0]])
    if (not isinstance(heads, list) or len(heads) != 1 or not isinstance(heads[0], list) or not heads[0]
            or not isinstance(heads[0][0], int) or not 0 <= heads[0][0] < len(nodes)):
        raise PyconvError(f"{path}: 'heads' must name exactly one output node, got {str(heads)[:80]}")
    chain, params = [], set()
    at = heads[0][0]
    while nodes[at]["op"] != "null":
        node = nodes[at]
        chain.append(at)
        inputs = node.get("inputs", [])
        if not inputs:
            raise PyconvError(f"{path}: node '{node.get('name', '?')}' ({node['op']}) has no input")
        for e in inputs[1:]:
            if nodes[e[0]]["op"] != "null":
                raise PyconvError(f"{path}: node '{node.get('name', '?')}' ({node['op']}) takes the output of "
                                  f"'{nodes[e[0]].get('name', '?')}' as a parameter; only a chain of layers is "
                                  "supported")
            params.add(e[0])
        at = inputs[0][0]
    off_path = [n for i, n in enumerate(nodes) if n["op"] != "null" and i not in chain]
    if off_path:
        n = off_path[0]
        raise PyconvError(f"{path}: node '{n.get('name', '?')}' ({n['op']}) is not on the path from the input to the "
                          f"output{f' (nor are {len(off_path) - 1} more)' if len(off_path) > 1 else ''}; the "
                          "importer takes a chain of layers only")
    return [nodes[i] for i in reversed(chain)]


def parse_symbol(path: str | Path, params: dict[str, np.ndarray], name: str, input_shape: tuple[int, int, int]) -> Model:
    path = Path(path)
    text = read_bounded(path, MAX_SYMBOL_BYTES, "symbol file")
    try:
        graph = json.loads(text)
    except RecursionError:
        raise PyconvError(f"{path}: the JSON is nested too deeply for an MXNet symbol file") from None
    except ValueError:
        raise PyconvError(f"{path} is not an MXNet symbol file (JSON with a 'nodes' list)") from None
    chain = _chain(graph, path)

    def weight(key: str) -> np.ndarray:
        if key not in params:
            raise PyconvError(f"the .params file has no array '{key}' (it has: {', '.join(sorted(params))})")
        return params[key]

    layers: list[Layer] = []
    flat = False
    counts = {"conv": 0, "fc": 0}
    for node in chain:
        op, nname = node["op"], node.get("name", "?")
        if op not in SUPPORTED_OPS:
            raise PyconvError(f"{path}: unsupported MXNet op '{op}' (node '{nname}'); supported: {', '.join(SUPPORTED_OPS)}")
        try:
            a = _attrs(node)
            if op in ("New", "Convolution"):
                if op == "Convolution":
                    if not _bool(a.get("no_bias"), False):
                        raise PyconvError(f"{path}: Convolution '{nname}' has a bias; only no_bias convolutions are supported")
                    for key, default in (("stride", (1, 1)), ("pad", (0, 0)), ("dilate", (1, 1))):
                        if set(_tuple(a.get(key), default)) - {default[0]}:
                            raise PyconvError(f"{path}: Convolution '{nname}' has {key}={a.get(key)}; only stride 1, "
                                              "no padding, no dilation are supported")
                    if _int(a.get("num_group", 1), "num_group") != 1:
                        raise PyconvError(f"{path}: Convolution '{nname}' is grouped; not supported")
                kernel = _tuple(a.get("kernel"), ())
                if len(set(kernel)) != 1:
                    raise ValueError(f"kernel must be square, got {kernel}")
                w = weight(f"{nname}_weight")
                counts["conv"] += 1
                layers.append(Layer("conv", name=f"conv{counts['conv']}",
                                    out_channels=_int(a["num_filter"], "num_filter"),
                                    kernel=_int(kernel[0], "kernel"), weight=w))
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
                layers.append(Layer("pool", mode=mode, kernel=_int(kernel[0], "kernel"),
                                    stride=_int(stride[0], "stride")))
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
                layers.append(Layer("fc", name=f"fc{counts['fc']}", out_features=_int(a["num_hidden"], "num_hidden"),
                                    weight=weight(f"{nname}_weight"), bias=weight(f"{nname}_bias")))
            elif op == "SoftmaxOutput":
                layers.append(Layer("softmax"))
        except (KeyError, ValueError, IndexError) as e:
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
