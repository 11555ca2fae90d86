"""The model file: round trip and every way it can be wrong."""

import h5py
import numpy as np
import pytest

from pyconv.core.errors import PyconvError
from pyconv.core.model import Layer, Model, load_model, read_model_file, save_model


def tiny_model(rng, name="tiny"):
    return Model(name=name, arch="test", input_shape=(1, 12, 12), layers=[
        Layer("conv", name="conv1", out_channels=3, kernel=3, weight=rng.standard_normal((3, 1, 3, 3)).astype(np.float32)),
        Layer("tanh"),
        Layer("pool", mode="max", kernel=2, stride=2),
        Layer("flatten"),
        Layer("fc", name="fc1", out_features=10, weight=rng.standard_normal((10, 75)).astype(np.float32),
              bias=rng.standard_normal(10).astype(np.float32)),
        Layer("softmax"),
    ])


def test_round_trip(tmp_path, rng):
    m = tiny_model(rng)
    p = save_model(m, tmp_path / "m.h5")
    back = load_model(p)
    assert back.input_shape == (1, 12, 12)
    assert [layer.spec() for layer in back.layers] == [layer.spec() for layer in m.layers]
    for a, b in zip(m.layers, back.layers):
        for arr in ("weight", "bias"):
            if getattr(a, arr) is not None:
                assert np.array_equal(getattr(a, arr), getattr(b, arr))


def test_weights_are_stored_compressed_and_read_back_exactly(tmp_path, rng):
    m = tiny_model(rng)
    p = save_model(m, tmp_path / "m.h5")
    with h5py.File(p) as f:
        stored = [f[f"weights/{layer.name}/{kind}"] for layer in m.layers for kind in ("weight", "bias")
                  if getattr(layer, kind) is not None]
        assert [(d.compression, d.shuffle) for d in stored] == [("gzip", True)] * 3
        stored = [d.name for d in stored]
    # A file written without compression (as the first shipped models were) reads the same.
    plain = tmp_path / "plain.h5"
    with h5py.File(p) as src, h5py.File(plain, "w") as dst:
        dst.attrs.update(src.attrs)
        for name in stored:
            dst.create_dataset(name, data=src[name][()])
    assert load_model(plain).digest() == load_model(p).digest() == m.digest()


def test_unknown_model_lists_known():
    with pytest.raises(PyconvError, match="unknown model 'no-such-model'"):
        load_model("no-such-model")


def test_truncated_file(tmp_path, rng):
    p = save_model(tiny_model(rng), tmp_path / "m.h5")
    blob = p.read_bytes()
    p.write_bytes(blob[: len(blob) // 3])
    with pytest.raises(PyconvError, match="not a readable HDF5 file|cannot read"):
        read_model_file(p)


def test_not_hdf5(tmp_path):
    p = tmp_path / "m.h5"
    p.write_text("hello")
    with pytest.raises(PyconvError, match="not a readable HDF5 file"):
        read_model_file(p)


def _edit(path, fn):
    with h5py.File(path, "r+") as f:
        fn(f)


def test_missing_dataset(tmp_path, rng):
    p = save_model(tiny_model(rng), tmp_path / "m.h5")
    _edit(p, lambda f: f.__delitem__("weights/fc1/bias"))
    with pytest.raises(PyconvError, match="weights/fc1/bias is missing"):
        read_model_file(p)


def test_wrong_dtype(tmp_path, rng):
    p = save_model(tiny_model(rng), tmp_path / "m.h5")

    def f64(f):
        w = f["weights/conv1/weight"][()]
        del f["weights/conv1/weight"]
        f["weights/conv1/weight"] = w.astype(np.float64)

    _edit(p, f64)
    with pytest.raises(PyconvError, match="conv1/weight has dtype float64"):
        read_model_file(p)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_weights(tmp_path, rng, bad):
    p = save_model(tiny_model(rng), tmp_path / "m.h5")

    def poison(f):
        w = f["weights/fc1/weight"]
        arr = w[()]
        arr[3, 4] = bad
        w[...] = arr

    _edit(p, poison)
    with pytest.raises(PyconvError, match="fc1/weight contains NaN or Inf"):
        read_model_file(p)


def test_shapes_that_do_not_chain(tmp_path, rng):
    m = tiny_model(rng)
    m.layers[4].weight = rng.standard_normal((10, 74)).astype(np.float32)
    with pytest.raises(PyconvError, match="takes 74 inputs but the layer before gives 75"):
        save_model(m, tmp_path / "m.h5")
    assert not (tmp_path / "m.h5").exists()
    m = tiny_model(rng)
    m.input_shape = (2, 12, 12)
    with pytest.raises(PyconvError, match="expects 1 input channels but the input has 2"):
        save_model(m, tmp_path / "m.h5")
    m = tiny_model(rng)
    m.input_shape = (1, 2, 2)
    with pytest.raises(PyconvError, match="larger than its 2x2 input"):
        save_model(m, tmp_path / "m.h5")


def test_chain_broken_inside_file(tmp_path, rng):
    p = save_model(tiny_model(rng), tmp_path / "m.h5")
    _edit(p, lambda f: f.attrs.__setitem__("input_shape", np.array([1, 14, 14])))
    with pytest.raises(PyconvError, match="takes 75 inputs but the layer before gives 108"):
        read_model_file(p)
