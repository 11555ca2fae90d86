"""Fashion-MNIST: fetch, verify, resize the way the course did, and store in one HDF5 file.

Sources, in order: an explicit folder, $FASHION_MNIST_DIR, /usr/share/datasets/fashion-mnist (Debian/Ubuntu package
`dataset-fashion-mnist`, installed with apt-get when absent and we are root), else the official download URLs.
Each file is verified by the SHA-256 of its *decompressed* idx content (Debian recompresses the .gz files, so
their gz checksums differ from upstream's while the content is identical).

The resized sets are made exactly as the course's generator did, per image:
    resize(img / 256.0, (S, S), order=1, mode="constant", cval=0) * 256, cast to uint8 (truncation)
with scikit-image; 48x48 (Spring 2019), 64x64 (Spring 2018), 70x70 (Fall 2019), 72x72 (Fall 2018), 86x86 (the
Mini-DNN editions, Fall 2020 on). The course shipped its 86x86 set (`fmnist-86`, idx files) only inside its container
image, without the generator; it is made here by the same generator as the others, so every size shares one
resampling (bilinear, the 28x28 image scaled up by 86/28 = 3.07 to the network's input).

The file carries a format version; a file of another version (e.g. one written before a set was added) is
rebuilt by `prepare`, which says why in one line. It holds the test split (what the milestones read) and, when
training asked for it (`invoke data --train`, or `invoke train` preparing its own), the training split too: a
file with both, as earlier builds wrote it, is read as before.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import urllib.error
import urllib.request
import zlib
from pathlib import Path

import h5py
import numpy as np

from . import paths, system_packages
from .errors import PyconvError
from .fileio import atomic_path, check_free_space, check_writable, read_bounded, write_hdf5_atomic

FORMAT = "pyconv-fashion-mnist"
VERSION = 3  # 1: sizes 28, 48, 64, 72; 2: adds 70 (Fall 2019); 3: adds 86 (the Mini-DNN editions)
SIZES = (28, 48, 64, 70, 72, 86)  # 28 is the original; the others are the course's resized sets
SYSTEM_DIR = system_packages.FASHION_MNIST_DIR
APT_PACKAGE = "dataset-fashion-mnist"
URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"

# name -> (SHA-256 of the decompressed idx file, idx magic, count)
ROWS = COLS = 28
# What each split takes in the written file (gzip level 1 over the six sizes; version 2's five sizes took 642 MB for
# both here, and the 86x86 sets add about a third). Checked (a little under it) before the resizing starts, so a
# disk that cannot hold it fails in seconds, not after the work; the exact size is checked again before the write.
EXPECTED_BYTES = {"test": 110 << 20, "train": 670 << 20}
MAX_DOWNLOAD = 64 << 20  # the largest official .gz (training images) is 26 MB
FILES = {
    "train-images-idx3-ubyte": ("c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888", 2051, 60000),
    "train-labels-idx1-ubyte": ("bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9", 2049, 60000),
    "t10k-images-idx3-ubyte": ("5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b", 2051, 10000),
    "t10k-labels-idx1-ubyte": ("0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34", 2049, 10000),
}


def _find_in(folder: Path, name: str) -> Path | None:
    for candidate in (folder / f"{name}.gz", folder / name):
        if candidate.is_file():
            return candidate
    return None


SPLITS = {"test": "t10k", "train": "train"}  # split -> the prefix of its idx files
TEST_ONLY = ("test",)
WITH_TRAIN = ("test", "train")


def files_for(splits=WITH_TRAIN) -> list[str]:
    """The idx files holding these splits."""
    return [n for n in FILES if n.split("-")[0] in {SPLITS[s] for s in splits}]


def _folder_has_all(folder: Path, names=None) -> bool:
    return folder.is_dir() and all(_find_in(folder, n) for n in (FILES if names is None else names))


def _apt_install() -> bool:
    """Install the Debian package when we are root and apt-get exists; True when the files are then there."""
    return system_packages.install([APT_PACKAGE]) and _folder_has_all(SYSTEM_DIR)


def _download(dest: Path, names=None) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for name in FILES if names is None else names:
        target = dest / f"{name}.gz"
        if target.exists():
            continue
        print(f"downloading {URL}{name}.gz ...", flush=True)
        try:
            with urllib.request.urlopen(f"{URL}{name}.gz", timeout=60) as r:
                blob = r.read(MAX_DOWNLOAD + 1)
            if len(blob) > MAX_DOWNLOAD:
                raise PyconvError(f"{URL}{name}.gz is larger than {MAX_DOWNLOAD} bytes: not the Fashion-MNIST file")
            with atomic_path(target) as tmp:
                tmp.write_bytes(blob)
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            raise PyconvError(
                f"Fashion-MNIST not found locally and the download of {name}.gz failed ({e}). Give a folder with "
                f"the four files (invoke data --source DIR or $FASHION_MNIST_DIR), or install the Debian package "
                f"{APT_PACKAGE}") from None


def locate(source: str | os.PathLike | None = None, splits=WITH_TRAIN) -> Path:
    """The folder holding the files of these splits, by the documented order of sources."""
    names = files_for(splits)
    if source is not None:
        folder = Path(source)
        if not _folder_has_all(folder, names):
            missing = [n for n in names if not _find_in(folder, n)]
            raise PyconvError(f"--source {folder}: missing {', '.join(missing)} (.gz or raw idx)")
        return folder
    env = os.environ.get("FASHION_MNIST_DIR")
    if env:
        folder = Path(env)
        if not _folder_has_all(folder, names):
            missing = [n for n in names if not _find_in(folder, n)]
            raise PyconvError(f"$FASHION_MNIST_DIR={folder}: missing {', '.join(missing)} (.gz or raw idx)")
        return folder
    if _folder_has_all(SYSTEM_DIR, names) or _apt_install():
        return SYSTEM_DIR
    raw = paths.DATASETS / "raw"
    _download(raw, names)
    return raw


def idx_size(name: str) -> int:
    """Bytes of the decompressed idx file: a u32 magic, one u32 per axis, then the uint8 values."""
    _, magic, count = FILES[name]
    return 16 + count * ROWS * COLS if magic == 2051 else 8 + count


def read_idx(path: Path, name: str) -> np.ndarray:
    """Decompress (when .gz), verify the SHA-256 and the header, return the array. At most the file's known size
    (plus one byte, to notice more) is ever decompressed or read: a gzip bomb costs nothing."""
    size = idx_size(name)
    if path.suffix == ".gz":
        try:
            with gzip.open(path, "rb") as g:
                content = g.read(size + 1)
        except (OSError, EOFError, zlib.error) as e:
            raise PyconvError(f"{path}: corrupt or truncated gzip file ({e})") from None
    else:
        content = read_bounded(path, size + 1, "idx file")
    if len(content) > size:
        raise PyconvError(f"{path}: decompresses to more than {size} bytes, the size of the Fashion-MNIST {name}: "
                          "not that file")
    want, magic, count = FILES[name]
    got = hashlib.sha256(content).hexdigest()
    if got != want:
        raise PyconvError(f"{path}: checksum mismatch (SHA-256 of the decompressed content is {got[:16]}..., "
                          f"expected {want[:16]}...): the file is damaged or not the Fashion-MNIST {name}")
    # Header: big-endian u32 magic, then one u32 per dimension (passing the checksum implies a valid header;
    # the checks below keep the parser honest on its own).
    head = np.frombuffer(content, dtype=">u4", count=2)
    if int(head[0]) != magic or int(head[1]) != count:
        raise PyconvError(f"{path}: unexpected idx header {head.tolist()}")
    if magic == 2051:
        rows, cols = np.frombuffer(content, dtype=">u4", count=2, offset=8)
        if (int(rows), int(cols)) != (ROWS, COLS):
            raise PyconvError(f"{path}: images are {rows}x{cols}, Fashion-MNIST's are {ROWS}x{COLS}")
        return np.frombuffer(content, dtype=np.uint8, offset=16).reshape(count, ROWS, COLS)
    return np.frombuffer(content, dtype=np.uint8, offset=8).astype(np.int64)


def course_resize(images: np.ndarray, size: int, desc: str = "") -> np.ndarray:
    """The course's generator, per image: resize(img/256, (S, S), bilinear, constant 0) * 256 -> uint8 (truncate)."""
    from skimage.transform import resize
    from tqdm import tqdm

    out = np.empty((len(images), size, size), dtype=np.uint8)
    for i in tqdm(range(len(images)), desc=desc or f"resize to {size}x{size}", unit="img", mininterval=0.5):
        out[i] = (resize(images[i] / 256.0, (size, size), order=1, mode="constant", cval=0) * 256).astype(np.uint8)
    return out


COUNTS = {"train": 60000, "test": 10000}


def _version(f: h5py.File):
    v = f.attrs.get("version", -1)
    return int(v) if np.ndim(v) == 0 and not isinstance(v, (str, bytes)) and float(v).is_integer() else v


def problem(f: h5py.File, split: str, size: int) -> str:
    """'' when one split at one size is as this format writes it (checked from the headers alone: dataset kinds,
    shapes, dtypes), else what is wrong. A foreign file must not answer a batch with fewer images, or float or
    text labels, and still print a Correctness. (The format and version attributes are checked by the callers.)"""
    n = COUNTS[split]
    images, labels = f.get(f"{split}/images_{size}"), f.get(f"{split}/labels")
    if not isinstance(labels, h5py.Dataset):
        return f"{split}/labels is missing or not {n} labels"
    if labels.shape != (n,) or labels.dtype.kind not in "iu":
        return f"{split}/labels is {labels.shape} {labels.dtype}; this format holds {n} integer labels"
    if not isinstance(images, h5py.Dataset) or images.shape != (n, size, size):
        return f"{split}/images_{size} is missing or not {n} images of {size}x{size}" if not isinstance(
            images, h5py.Dataset) else (f"{split}/images_{size} is {images.shape} {images.dtype}; this format holds "
                                        f"{n} images of {size}x{size} uint8")
    if images.dtype != np.uint8:
        return (f"{split}/images_{size} is {images.shape} {images.dtype}; this format holds {n} images of "
                f"{size}x{size} uint8")
    return ""


def why_invalid(path: Path | None = None, splits=TEST_ONLY) -> str | None:
    """None for a file of this format and version holding these splits complete (every size, the right counts and
    dtypes); else one line saying what is wrong with it. Default: the project's data file, the test split."""
    path = Path(path or paths.DATA_FILE)
    try:
        if path.exists() and not path.is_file():  # a FIFO would block the open, a folder fail inside HDF5
            return f"{path} is not a regular file"
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") not in (FORMAT, FORMAT.encode()):
                return f"{path} is not a {FORMAT} file"
            version = _version(f)
            if version != VERSION:
                return (f"{path} has format version {version}, this build writes version {VERSION} "
                        f"(image sizes {', '.join(map(str, SIZES))})")
            for split in splits:
                for s in SIZES:
                    why = problem(f, split, s)
                    if why:
                        return f"{path}: {why}"
        return None
    except FileNotFoundError:
        return f"{path} does not exist"
    except (OSError, KeyError, ValueError, TypeError) as e:
        return f"{path} is not a readable HDF5 file ({e})"


def is_valid(path: Path | None = None) -> bool:
    return why_invalid(path) is None


def prepare(source: str | os.PathLike | None = None, force: bool = False, dest: Path | None = None,
            train: bool = False) -> Path:
    """Write datasets/fashion-mnist.h5 (atomically) with the test split, and the training split too with train;
    do nothing when a valid one holding them is there (unless force).

    An explicit source is checked even then (a mistyped folder is named, not ignored). The destination's
    folder and free space are checked before the minute of reading and resizing, not after it."""
    dest = Path(dest or paths.DATA_FILE)
    splits = WITH_TRAIN if train else TEST_ONLY
    folder = locate(source, splits) if source is not None else None
    why = why_invalid(dest, splits)
    if not force and why is None:
        print(f"{dest} is up to date" + (f" (--source {folder} not read; --force rebuilds from it)"
                                         if folder else ""))
        return dest
    if why is not None and dest.exists():
        print(f"rebuilding: {why}", flush=True)
    check_writable(dest, "data file")
    check_free_space(dest.parent, sum(EXPECTED_BYTES[s] for s in splits), f"writing {dest}")
    folder = folder or locate(source, splits)
    print(f"reading Fashion-MNIST from {folder}", flush=True)
    arrays = {n: read_idx(_find_in(folder, n), n) for n in files_for(splits)}

    def fill(f):
        f.attrs["format"] = FORMAT
        f.attrs["version"] = VERSION
        f.attrs["source_sha256"] = [FILES[n][0] for n in FILES]
        for split in splits:
            prefix = SPLITS[split]
            images = arrays[f"{prefix}-images-idx3-ubyte"]
            f.create_dataset(f"{split}/labels", data=arrays[f"{prefix}-labels-idx1-ubyte"])
            for s in SIZES:
                imgs = images if s == 28 else course_resize(images, s, f"{split} {s}x{s}")
                f.create_dataset(f"{split}/images_{s}", data=imgs, chunks=(min(1000, len(imgs)), s, s),
                                 compression="gzip", compression_opts=1)

    write_hdf5_atomic(dest, fill)
    print(f"wrote {dest}")
    return dest


def require_data(path: Path | None = None) -> None:
    path = Path(path or paths.DATA_FILE)
    if not path.exists():
        raise PyconvError(f"{path} is missing: run `invoke data` first")
    if not path.is_file():  # a FIFO would block the open, a folder fail inside HDF5
        raise PyconvError(f"{path} is not a regular file: run `invoke data --force`")


def check(size: int, split: str = "test", path: Path | None = None) -> None:
    """The data file holds `split` at `size` as this format and version write it (see problem), with labels 0..9;
    one line naming what is not. Run before the data is used, and by the milestones before their child starts."""
    path = Path(path or paths.DATA_FILE)
    require_data(path)
    if size not in SIZES:
        raise PyconvError(f"no {size}x{size} image set (available: {', '.join(map(str, SIZES))})")
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") not in (FORMAT, FORMAT.encode()):
                raise PyconvError(f"{path} is not a {FORMAT} file; run `invoke data --force`")
            version = _version(f)
            if version != VERSION:
                raise PyconvError(f"{path} has format version {version}, this build reads version {VERSION} "
                                  f"(image sizes {', '.join(map(str, SIZES))}): run `invoke data`")
            if split == "train" and "train" not in f:
                raise PyconvError(f"{path} holds no training set: run `invoke data --train`")
            why = problem(f, split, size)
            if not why:
                labels = f[f"{split}/labels"][()]
                if labels.size and (labels.min() < 0 or labels.max() > 9):
                    why = f"{split}/labels holds values outside 0..9 ({labels.min()}..{labels.max()})"
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise PyconvError(f"{path} is damaged ({e}); run `invoke data --force`") from None
    if why:
        raise PyconvError(f"{path}: {why}; run `invoke data --force`")


def check_model_input(name: str, input_shape) -> None:
    """The data's images are one channel, square: a model declaring another input is refused in one line."""
    c, h, w = (int(v) for v in input_shape)
    if c != 1 or h != w:
        raise PyconvError(f"model '{name}' takes {c} x {h} x {w} inputs; the Fashion-MNIST images are 1 x S x S "
                          "(one channel, square)")


def _load(split: str, size: int, count: int | None) -> tuple[np.ndarray, np.ndarray]:
    check(size, split)
    try:
        with h5py.File(paths.DATA_FILE, "r") as f:
            n = f[f"{split}/labels"].shape[0] if count is None else count
            x = f[f"{split}/images_{size}"][:n]
            y = f[f"{split}/labels"][:n]
    except (OSError, KeyError, ValueError) as e:
        raise PyconvError(f"{paths.DATA_FILE} is damaged ({e}); run `invoke data --force`") from None
    return x[:, None, :, :], np.asarray(y, dtype=np.int64)


def load_test(size: int, count: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The first `count` test images, uint8 [N][1][S][S], and their labels (int64)."""
    return _load("test", size, count)


def load_train(size: int) -> tuple[np.ndarray, np.ndarray]:
    """The 60000 training images, uint8 [N][1][S][S], and their labels (int64)."""
    return _load("train", size, None)


def prepare_train() -> None:
    """The training split in the data file, written now (with the test split) when it is not there yet."""
    if why_invalid(splits=WITH_TRAIN) is not None:
        prepare(train=True)


def accuracy(pred: np.ndarray, labels: np.ndarray) -> float:
    """The course's Correctness: the share of predicted labels equal to the true ones."""
    return float(np.mean(np.asarray(pred) == np.asarray(labels)))
