"""Fashion-MNIST: fetch, verify, resize the way the course did, and store in one HDF5 file.

Sources, in order: an explicit folder, $FASHION_MNIST_DIR, /usr/share/datasets/fashion-mnist (Debian/Ubuntu package
`dataset-fashion-mnist`, installed with apt-get when absent and we are root), else the official download URLs.
Each file is verified by the SHA-256 of its *decompressed* idx content (Debian recompresses the .gz files, so
their gz checksums differ from upstream's while the content is identical).

The resized sets are made exactly as the course's generator did, per image:
    resize(img / 256.0, (S, S), order=1, mode="constant", cval=0) * 256, cast to uint8 (truncation)
with scikit-image; 48x48 (Spring 2019), 64x64 (Spring 2018), 70x70 (Fall 2019), 72x72 (Fall 2018).

The file carries a format version; a file of another version (e.g. one written before a set was added) is
rebuilt by `prepare`, which says why in one line.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import urllib.error
import urllib.request
import zlib
from pathlib import Path

import h5py
import numpy as np

from . import paths
from .errors import PyconvError
from .fileio import atomic_path

FORMAT = "pyconv-fashion-mnist"
VERSION = 2  # 1: sizes 28, 48, 64, 72; 2: adds 70 (Fall 2019)
SIZES = (28, 48, 64, 70, 72)  # 28 is the original; the others are the course's resized sets
SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")
APT_PACKAGE = "dataset-fashion-mnist"
URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"

# name -> (SHA-256 of the decompressed idx file, idx magic, count)
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


def _folder_has_all(folder: Path) -> bool:
    return folder.is_dir() and all(_find_in(folder, n) for n in FILES)


def _apt_install() -> bool:
    """Install the Debian package when we are root and apt-get exists; True when the files are then there."""
    if os.name != "posix" or os.geteuid() != 0 or not shutil.which("apt-get"):
        return False
    print(f"installing the Debian package {APT_PACKAGE} ...", flush=True)
    r = subprocess.run(["apt-get", "install", "-y", "-q", APT_PACKAGE], capture_output=True, text=True)
    if r.returncode != 0:  # the package index may be stale on a fresh machine
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True)
        r = subprocess.run(["apt-get", "install", "-y", "-q", APT_PACKAGE], capture_output=True, text=True)
    return r.returncode == 0 and _folder_has_all(SYSTEM_DIR)


def _download(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        target = dest / f"{name}.gz"
        if target.exists():
            continue
        print(f"downloading {URL}{name}.gz ...", flush=True)
        try:
            with urllib.request.urlopen(f"{URL}{name}.gz", timeout=60) as r, atomic_path(target) as tmp:
                tmp.write_bytes(r.read())
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            raise PyconvError(
                f"Fashion-MNIST not found locally and the download of {name}.gz failed ({e}). Give a folder with "
                f"the four files (invoke data --source DIR or $FASHION_MNIST_DIR), or install the Debian package "
                f"{APT_PACKAGE}") from None


def locate(source: str | os.PathLike | None = None) -> Path:
    """The folder holding the four files, by the documented order of sources."""
    if source is not None:
        folder = Path(source)
        if not _folder_has_all(folder):
            missing = [n for n in FILES if not _find_in(folder, n)]
            raise PyconvError(f"--source {folder}: missing {', '.join(missing)} (.gz or raw idx)")
        return folder
    env = os.environ.get("FASHION_MNIST_DIR")
    if env:
        folder = Path(env)
        if not _folder_has_all(folder):
            missing = [n for n in FILES if not _find_in(folder, n)]
            raise PyconvError(f"$FASHION_MNIST_DIR={folder}: missing {', '.join(missing)} (.gz or raw idx)")
        return folder
    if _folder_has_all(SYSTEM_DIR) or _apt_install():
        return SYSTEM_DIR
    raw = paths.DATASETS / "raw"
    _download(raw)
    return raw


def read_idx(path: Path, name: str) -> np.ndarray:
    """Decompress (when .gz), verify the SHA-256 and the header, return the array."""
    try:
        content = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, zlib.error) as e:
        raise PyconvError(f"{path}: corrupt or truncated gzip file ({e})") from None
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
        return np.frombuffer(content, dtype=np.uint8, offset=16).reshape(count, int(rows), int(cols))
    return np.frombuffer(content, dtype=np.uint8, offset=8).astype(np.int64)


def course_resize(images: np.ndarray, size: int, desc: str = "") -> np.ndarray:
    """The course's generator, per image: resize(img/256, (S, S), bilinear, constant 0) * 256 -> uint8 (truncate)."""
    from skimage.transform import resize
    from tqdm import tqdm

    out = np.empty((len(images), size, size), dtype=np.uint8)
    for i in tqdm(range(len(images)), desc=desc or f"resize to {size}x{size}", unit="img", mininterval=0.5):
        out[i] = (resize(images[i] / 256.0, (size, size), order=1, mode="constant", cval=0) * 256).astype(np.uint8)
    return out


def why_invalid(path: Path | None = None) -> str | None:
    """None for a complete file of this format and version (every split, every size, the right counts); else
    one line saying what is wrong with it. Default: the project's data file."""
    path = Path(path or paths.DATA_FILE)
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != FORMAT:
                return f"{path} is not a {FORMAT} file"
            version = int(f.attrs.get("version", -1))
            if version != VERSION:
                return (f"{path} has format version {version}, this build writes version {VERSION} "
                        f"(image sizes {', '.join(map(str, SIZES))})")
            for split, n in (("train", 60000), ("test", 10000)):
                if f"{split}/labels" not in f or f[f"{split}/labels"].shape != (n,):
                    return f"{path}: {split}/labels is missing or not {n} labels"
                for s in SIZES:
                    key = f"{split}/images_{s}"
                    if key not in f or f[key].shape != (n, s, s):
                        return f"{path}: {key} is missing or not {n} images of {s}x{s}"
        return None
    except FileNotFoundError:
        return f"{path} does not exist"
    except OSError as e:
        return f"{path} is not a readable HDF5 file ({e})"


def is_valid(path: Path | None = None) -> bool:
    return why_invalid(path) is None


def prepare(source: str | os.PathLike | None = None, force: bool = False, dest: Path | None = None) -> Path:
    """Write datasets/fashion-mnist.h5 (atomically); do nothing when a valid one is there (unless force)."""
    dest = Path(dest or paths.DATA_FILE)
    why = why_invalid(dest)
    if not force and why is None:
        print(f"{dest} is up to date")
        return dest
    if why is not None and dest.exists():
        print(f"rebuilding: {why}", flush=True)
    folder = locate(source)
    print(f"reading Fashion-MNIST from {folder}", flush=True)
    arrays = {n: read_idx(_find_in(folder, n), n) for n in FILES}
    with atomic_path(dest, suffix=".h5") as tmp:
        with h5py.File(tmp, "w") as f:
            f.attrs["format"] = FORMAT
            f.attrs["version"] = VERSION
            f.attrs["source_sha256"] = [FILES[n][0] for n in FILES]
            for split, prefix in (("train", "train"), ("test", "t10k")):
                images = arrays[f"{prefix}-images-idx3-ubyte"]
                f.create_dataset(f"{split}/labels", data=arrays[f"{prefix}-labels-idx1-ubyte"])
                for s in SIZES:
                    imgs = images if s == 28 else course_resize(images, s, f"{split} {s}x{s}")
                    f.create_dataset(f"{split}/images_{s}", data=imgs, chunks=(min(1000, len(imgs)), s, s),
                                     compression="gzip", compression_opts=1)
    print(f"wrote {dest}")
    return dest


def require_data(path: Path | None = None) -> None:
    path = Path(path or paths.DATA_FILE)
    if not path.exists():
        raise PyconvError(f"{path} is missing: run `invoke data` first")


def _load(split: str, size: int, count: int | None) -> tuple[np.ndarray, np.ndarray]:
    require_data()
    if size not in SIZES:
        raise PyconvError(f"no {size}x{size} image set (available: {', '.join(map(str, SIZES))})")
    try:
        with h5py.File(paths.DATA_FILE, "r") as f:
            version = int(f.attrs.get("version", -1))
            if version != VERSION:
                raise PyconvError(f"{paths.DATA_FILE} has format version {version}, this build reads version "
                                  f"{VERSION} (image sizes {', '.join(map(str, SIZES))}): run `invoke data`")
            n = f[f"{split}/labels"].shape[0] if count is None else count
            x = f[f"{split}/images_{size}"][:n]
            y = f[f"{split}/labels"][:n]
    except (OSError, KeyError) as e:
        raise PyconvError(f"{paths.DATA_FILE} is damaged ({e}); run `invoke data --force`") from None
    return x[:, None, :, :], y


def load_test(size: int, count: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The first `count` test images, uint8 [N][1][S][S], and their labels (int64)."""
    return _load("test", size, count)


def load_train(size: int) -> tuple[np.ndarray, np.ndarray]:
    """The 60000 training images, uint8 [N][1][S][S], and their labels (int64)."""
    return _load("train", size, None)


def accuracy(pred: np.ndarray, labels: np.ndarray) -> float:
    """The course's Correctness: the share of predicted labels equal to the true ones."""
    return float(np.mean(np.asarray(pred) == np.asarray(labels)))
