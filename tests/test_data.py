"""Fashion-MNIST: checksums, corrupt/truncated inputs, the course resize, idempotent preparation."""

import gzip
import shutil

import h5py
import numpy as np
import pytest
from conftest import needs_data

from pyconv.core import data, paths
from pyconv.core.errors import PyconvError

SYSTEM = data.SYSTEM_DIR


def _source_dir():
    if data._folder_has_all(SYSTEM):
        return SYSTEM
    pytest.skip("no local Fashion-MNIST source folder")


def test_every_file_verifies_by_decompressed_sha256():
    src = _source_dir()
    for name, (_, _, count) in data.FILES.items():
        arr = data.read_idx(data._find_in(src, name), name)
        assert arr.shape[0] == count
    labels = data.read_idx(data._find_in(src, "t10k-labels-idx1-ubyte"), "t10k-labels-idx1-ubyte")
    assert set(np.unique(labels)) == set(range(10))


def test_raw_idx_is_accepted_as_well_as_gz(tmp_path):
    src = _source_dir()
    name = "t10k-labels-idx1-ubyte"
    raw = tmp_path / name
    raw.write_bytes(gzip.decompress((src / f"{name}.gz").read_bytes()))
    assert data.read_idx(raw, name).shape == (10000,)


def test_checksum_mismatch_is_named(tmp_path):
    src = _source_dir()
    name = "t10k-labels-idx1-ubyte"
    content = bytearray(gzip.decompress((src / f"{name}.gz").read_bytes()))
    content[100] ^= 0xFF
    bad = tmp_path / f"{name}.gz"
    bad.write_bytes(gzip.compress(bytes(content)))
    with pytest.raises(PyconvError, match="checksum mismatch"):
        data.read_idx(bad, name)


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_or_truncated_gzip_is_named(tmp_path, damage):
    src = _source_dir()
    name = "t10k-images-idx3-ubyte"
    blob = (src / f"{name}.gz").read_bytes()
    bad = tmp_path / f"{name}.gz"
    bad.write_bytes(blob[: len(blob) // 2] if damage == "truncate" else b"\x1f\x8b" + b"not gzip at all" * 10)
    with pytest.raises(PyconvError, match="corrupt or truncated"):
        data.read_idx(bad, name)


def test_missing_files_in_source_are_listed(tmp_path):
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(b"")
    with pytest.raises(PyconvError, match="missing train-images-idx3-ubyte"):
        data.locate(tmp_path)


def test_env_folder_is_used_and_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("FASHION_MNIST_DIR", str(tmp_path))
    with pytest.raises(PyconvError, match=r"\$FASHION_MNIST_DIR"):
        data.locate()


def test_failed_preparation_leaves_no_file(tmp_path):
    src = _source_dir()
    folder = tmp_path / "src"
    shutil.copytree(src, folder)
    (folder / "t10k-labels-idx1-ubyte.gz").write_bytes(b"\x1f\x8b garbage")
    dest = tmp_path / "out" / "fm.h5"
    with pytest.raises(PyconvError):
        data.prepare(source=folder, dest=dest)
    assert not dest.exists()
    assert not list((tmp_path / "out").glob("*")), "a temporary file was left behind"


def _old_file(path, version=1):
    """A data file as an older version wrote it (its sets are not what this version's check looks at)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        f.attrs["format"] = data.FORMAT
        f.attrs["version"] = version
        f.create_dataset("test/labels", data=np.zeros(10000, np.int64))
        f.create_dataset("test/images_28", data=np.zeros((10000, 28, 28), np.uint8))
    return path


def test_older_file_is_rebuilt_with_one_line_saying_why(tmp_path, monkeypatch, capsys):
    src = _source_dir()
    monkeypatch.setattr(data, "SIZES", (28,))  # the rebuild logic without minutes of resizing
    dest = _old_file(tmp_path / "fm.h5")
    assert data.why_invalid(dest) == (f"{dest} has format version 1, this build writes version {data.VERSION} "
                                      "(image sizes 28)")
    data.prepare(source=src, dest=dest, train=True)
    said = [ln for ln in capsys.readouterr().out.splitlines() if "version" in ln]
    assert said == [f"rebuilding: {dest} has format version 1, this build writes version {data.VERSION} "
                    "(image sizes 28)"]
    assert data.is_valid(dest)
    with h5py.File(dest) as f:
        assert int(f.attrs["version"]) == data.VERSION and f["train/images_28"].shape == (60000, 28, 28)


def test_reading_an_older_file_says_to_run_invoke_data(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "DATA_FILE", _old_file(tmp_path / "fm.h5"))
    with pytest.raises(PyconvError, match=r"has format version 1, this build reads version \d+ .*run `invoke data`$"):
        data.load_test(28, 5)


def test_incomplete_file_names_what_is_missing(tmp_path, monkeypatch):
    dest = _old_file(tmp_path / "fm.h5", version=data.VERSION)
    assert data.why_invalid(dest) == f"{dest}: test/images_48 is missing or not 10000 images of 48x48"
    monkeypatch.setattr(data, "SIZES", (28,))
    assert data.why_invalid(dest) is None  # the test split is all the milestones read
    assert data.why_invalid(dest, data.WITH_TRAIN) == f"{dest}: train/labels is missing or not 60000 labels"
    assert data.why_invalid(tmp_path / "none.h5") == f"{tmp_path / 'none.h5'} does not exist"


def test_training_set_is_written_only_when_asked(tmp_path, monkeypatch, capsys):
    src = _source_dir()
    monkeypatch.setattr(data, "SIZES", (28,))  # the logic without minutes of resizing
    dest = tmp_path / "fm.h5"
    data.prepare(source=src, dest=dest)
    with h5py.File(dest) as f:
        assert "train" not in f and f["test/images_28"].shape == (10000, 28, 28)
    with pytest.raises(PyconvError, match=r"holds no training set: run `invoke data --train`$"):
        data.check(28, "train", dest)
    data.prepare(source=src, dest=dest, train=True)
    with h5py.File(dest) as f:
        assert f["train/images_28"].shape == (60000, 28, 28) and f["train/labels"].shape == (60000,)
    capsys.readouterr()
    data.prepare(dest=dest)  # a file holding both splits is up to date for the milestones too
    assert "up to date" in capsys.readouterr().out


def test_a_test_only_source_folder_is_enough_for_the_test_split(tmp_path):
    src = _source_dir()
    for name in data.files_for(data.TEST_ONLY):
        shutil.copy(data._find_in(src, name), tmp_path)
    assert data.locate(tmp_path, data.TEST_ONLY) == tmp_path
    with pytest.raises(PyconvError, match="missing train-images-idx3-ubyte"):
        data.locate(tmp_path, data.WITH_TRAIN)


@needs_data
def test_prepared_file_is_valid_and_second_run_does_nothing(capsys):
    before = paths.DATA_FILE.stat().st_mtime_ns
    data.prepare()
    assert "up to date" in capsys.readouterr().out
    assert paths.DATA_FILE.stat().st_mtime_ns == before


@needs_data
def test_resized_sets_are_made_as_the_course_made_them():
    with h5py.File(paths.DATA_FILE) as f:
        orig = f["test/images_28"][:20]
        for s in (48, 64, 70, 72):
            assert np.array_equal(f[f"test/images_{s}"][:20], data.course_resize(orig, s))


@needs_data
def test_load_test_shapes():
    x, y = data.load_test(48, 7)
    assert x.shape == (7, 1, 48, 48) and x.dtype == np.uint8 and y.shape == (7,)
    with pytest.raises(PyconvError, match="no 50x50"):
        data.load_test(50, 1)
