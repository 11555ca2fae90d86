"""The MXNet importer: synthetic checkpoints in every NDArray header version, refusals, the course checkpoint."""

import json
import struct

import numpy as np
import pytest
from built_variants import CPU_VARIANTS
from conftest import needs_course, needs_data

from pyconv.core import mxnet_import
from pyconv.core.errors import PyconvError
from pyconv.core.model import load_model


def write_params(path, arrays: dict, version="v2", magic=0x112):
    out = struct.pack("<QQQ", magic, 0, len(arrays))
    for arr in arrays.values():
        if version == "v2":
            out += struct.pack("<Iii", 0xF993FAC9, 0, arr.ndim) + struct.pack(f"<{arr.ndim}q", *arr.shape)
        elif version == "v1":
            out += struct.pack("<II", 0xF993FAC8, arr.ndim) + struct.pack(f"<{arr.ndim}q", *arr.shape)
        else:
            out += struct.pack("<I", arr.ndim) + struct.pack(f"<{arr.ndim}I", *arr.shape)
        out += struct.pack("<iii", 1, 0, 0) + arr.astype("<f4").tobytes()
    out += struct.pack("<Q", len(arrays))
    for name in arrays:
        b = f"arg:{name}".encode()
        out += struct.pack("<Q", len(b)) + b
    path.write_bytes(out)


def node(op, name, inputs=(), **attrs):
    return {"op": op, "name": name, "attrs": {k: str(v) for k, v in attrs.items()}, "inputs": [[i, 0, 0] for i in inputs]}


def write_symbol(path, nodes):
    path.write_text(json.dumps({"nodes": nodes, "arg_nodes": [], "heads": [[len(nodes) - 1, 0, 0]]}))


def lenet(rng):
    arrays = {
        "convolution0_weight": rng.standard_normal((4, 1, 3, 3)).astype(np.float32),
        "new0_weight": rng.standard_normal((5, 4, 3, 3)).astype(np.float32),
        "fullyconnected0_weight": rng.standard_normal((7, 5 * 4 * 4)).astype(np.float32),
        "fullyconnected0_bias": rng.standard_normal(7).astype(np.float32),
        "fullyconnected1_weight": rng.standard_normal((10, 7)).astype(np.float32),
        "fullyconnected1_bias": rng.standard_normal(10).astype(np.float32),
    }
    nodes = [
        node("null", "data"), node("null", "convolution0_weight"),
        node("Convolution", "convolution0", [0, 1], kernel=(3, 3), num_filter=4, no_bias=True),
        node("Activation", "activation0", [2], act_type="relu"),
        node("Pooling", "pooling0", [3], kernel=(2, 2), stride=(2, 2), pool_type="avg"),
        node("null", "new0_weight"),
        node("New", "new0", [4, 5], kernel=(3, 3), num_filter=5),
        node("Activation", "activation1", [6], act_type="sigmoid"),
        node("null", "fullyconnected0_weight"), node("null", "fullyconnected0_bias"),
        node("FullyConnected", "fullyconnected0", [7, 8, 9], num_hidden=7),
        node("Activation", "activation2", [10], act_type="tanh"),
        node("null", "fullyconnected1_weight"), node("null", "fullyconnected1_bias"),
        node("FullyConnected", "fullyconnected1", [11, 12, 13], num_hidden=10),
        node("null", "softmax_label"), node("SoftmaxOutput", "softmax", [14, 15]),
    ]
    return arrays, nodes


@pytest.mark.parametrize("version", ["v2", "v1", "legacy"])
def test_round_trip(tmp_path, rng, version):
    arrays, nodes = lenet(rng)
    write_params(tmp_path / "m.params", arrays, version)
    write_symbol(tmp_path / "m-symbol.json", nodes)
    p = mxnet_import.import_checkpoint(tmp_path / "m-symbol.json", tmp_path / "m.params", "synthetic",
                                       input_size=14, dest_dir=tmp_path)
    m = load_model(p)
    assert [layer.type for layer in m.layers] == ["conv", "relu", "pool", "conv", "sigmoid", "flatten", "fc",
                                                  "tanh", "fc", "softmax"]
    assert m.layers[2].mode == "avg"
    assert np.array_equal(m.layers[0].weight, arrays["convolution0_weight"])
    assert np.array_equal(m.layers[3].weight, arrays["new0_weight"])
    assert np.array_equal(m.layers[6].weight, arrays["fullyconnected0_weight"])
    assert np.array_equal(m.layers[8].bias, arrays["fullyconnected1_bias"])


def test_unsupported_op_is_named(tmp_path, rng):
    arrays, nodes = lenet(rng)
    nodes[3] = node("LeakyReLU", "leaky0", [2])
    write_params(tmp_path / "m.params", arrays)
    write_symbol(tmp_path / "m-symbol.json", nodes)
    with pytest.raises(PyconvError, match="unsupported MXNet op 'LeakyReLU'"):
        mxnet_import.import_checkpoint(tmp_path / "m-symbol.json", tmp_path / "m.params", "x", dest_dir=tmp_path)
    assert not (tmp_path / "x.h5").exists()


def test_convolution_with_bias_is_refused(tmp_path, rng):
    arrays, nodes = lenet(rng)
    nodes[2] = node("Convolution", "convolution0", [0, 1], kernel=(3, 3), num_filter=4, no_bias=False)
    write_params(tmp_path / "m.params", arrays)
    write_symbol(tmp_path / "m-symbol.json", nodes)
    with pytest.raises(PyconvError, match="has a bias"):
        mxnet_import.import_checkpoint(tmp_path / "m-symbol.json", tmp_path / "m.params", "x", dest_dir=tmp_path)


def test_bad_magic(tmp_path, rng):
    arrays, _ = lenet(rng)
    write_params(tmp_path / "m.params", arrays, magic=0x113)
    with pytest.raises(PyconvError, match="bad magic 0x113"):
        mxnet_import.read_params(tmp_path / "m.params")


def test_truncated_params(tmp_path, rng):
    arrays, _ = lenet(rng)
    write_params(tmp_path / "m.params", arrays)
    blob = (tmp_path / "m.params").read_bytes()
    (tmp_path / "m.params").write_bytes(blob[:200])
    with pytest.raises(PyconvError, match="truncated"):
        mxnet_import.read_params(tmp_path / "m.params")


def test_missing_weight_is_named(tmp_path, rng):
    arrays, nodes = lenet(rng)
    del arrays["new0_weight"]
    write_params(tmp_path / "m.params", arrays)
    write_symbol(tmp_path / "m-symbol.json", nodes)
    with pytest.raises(PyconvError, match="no array 'new0_weight'"):
        mxnet_import.import_checkpoint(tmp_path / "m-symbol.json", tmp_path / "m.params", "x", dest_dir=tmp_path)


def test_not_json(tmp_path, rng):
    (tmp_path / "s.json").write_text("{nope")
    arrays, _ = lenet(rng)
    write_params(tmp_path / "m.params", arrays)
    with pytest.raises(PyconvError, match="not an MXNet symbol file"):
        mxnet_import.import_checkpoint(tmp_path / "s.json", tmp_path / "m.params", "x", dest_dir=tmp_path)


def test_shipped_names_are_never_overwritten(tmp_path):
    from pyconv.core.model import shipped_models

    shipped = shipped_models()
    if not shipped:
        pytest.skip("no shipped models yet")
    with pytest.raises(PyconvError, match="is a shipped model"):
        mxnet_import.import_checkpoint(tmp_path / "s.json", tmp_path / "m.params", shipped[0])


@needs_course
def test_course_checkpoint_structure(course_model):
    assert course_model.summary() == ("1x48x48: conv 6@5x5 -> tanh -> maxpool 2/2 -> conv 16@5x5 -> flatten -> "
                                      "FC 140 -> tanh -> FC 10 -> softmax")


COURSE_ACCURACY = {100: (0.84,), 1000: (0.852,), 10000: (0.8397, 0.8398)}


@needs_course
@needs_data
@pytest.mark.parametrize("impl", [v.name for v in CPU_VARIANTS if not v.student] + ["numpy"])
@pytest.mark.parametrize("batch", [100, 1000, 10000])
def test_course_checkpoint_correctness(course_model, impl, batch):
    from pyconv.core import data
    from pyconv.engines.cpu import forward_cpu

    if impl != "numpy":
        pytest.importorskip("pyconv._cpu")
    x, labels = data.load_test(48, batch)
    acc = float(np.mean(forward_cpu(course_model, x.astype(np.float32), impl).labels == labels))
    assert round(acc, 4) in COURSE_ACCURACY[batch]
