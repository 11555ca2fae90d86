"""Files in and out: every file the project produces appears whole or not at all, every file it reads is read
up to a bound derived from what it may hold, and a failure says in one line which file and why.

Writes go to a private temporary folder beside the destination (`.NAME.<random>.tmp/NAME`), renamed over the
destination once complete. The writer holds an exclusive flock on that folder for as long as it lives, so a
later run can tell a folder left by a killed writer (no lock) from one still being written (locked), and removes
the first kind: a SIGKILL (which no handler sees) costs disk space only until the next write of that file."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from .errors import PyconvError

# Temporary files of the version before the locked folders (`.NAME.<random><suffix>.tmp`, plain files) carry no
# lock; one untouched for this long belongs to no live writer (the longest write, `invoke data`, takes minutes).
LEGACY_TEMP_AGE_S = 6 * 3600


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _why(e: OSError) -> str:
    return e.strerror or str(e)


def _locked_by_a_live_writer(folder: Path) -> bool:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return True  # not ours to judge (gone already, or unreadable): leave it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the lock we may just have taken
    return False


def remove_stale_temps(dest: Path) -> list[Path]:
    """Remove the temporary folders beside `dest` that writers killed before they finished left behind (no
    process holds their lock); returns what was removed."""
    removed = []
    try:
        candidates = list(dest.parent.glob(f".{_glob_escape(dest.name)}.*.tmp"))
    except OSError:
        return removed
    for p in candidates:
        try:
            st = p.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            if _locked_by_a_live_writer(p):
                continue
            shutil.rmtree(p, ignore_errors=True)
        elif stat.S_ISREG(st.st_mode) and time.time() - st.st_mtime > LEGACY_TEMP_AGE_S:
            with contextlib.suppress(OSError):
                p.unlink()
        else:
            continue
        removed.append(p)
    return removed


def _glob_escape(name: str) -> str:
    import glob

    return glob.escape(name)


def check_writable(dest: str | os.PathLike, what: str = "output") -> Path:
    """Fail now, in one line, when `dest` could not be written later: it is a folder, its name is too long, a
    parent is a file, or the folder refuses a new file (read-only, no permission). Run before long work, so
    that work is not lost to an unwritable destination. Creates nothing that stays."""
    dest = Path(dest)
    name_max = 255  # what Linux file systems allow; asked of the file system below where it can say
    too_long = [part for part in dest.parts if len(os.fsencode(part)) > name_max]
    if too_long:
        raise PyconvError(f"{what}: the name {too_long[0][:40]}... is longer than the {name_max} bytes a file name "
                          "may have")
    try:
        if dest.is_dir():
            raise PyconvError(f"{what} {dest} is a folder, not a file")
        ancestor = dest.parent
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        with contextlib.suppress(OSError, ValueError):
            name_max = os.pathconf(ancestor, "PC_NAME_MAX")
        too_long = [part for part in dest.parts if len(os.fsencode(part)) > name_max]
        if too_long:
            raise PyconvError(f"{what}: the name {too_long[0][:40]}... is longer than the {name_max} bytes a file "
                              "name may have here")
        if not ancestor.is_dir():
            raise PyconvError(f"{what} {dest}: {ancestor} is a file, not a folder")
        # The one honest test of "can I create something here": permission bits do not tell (root ignores them;
        # a read-only mount, an ACL do not show in them). The probe goes where the first new entry would.
        fd, probe = tempfile.mkstemp(prefix=f".{dest.name[:64]}.", suffix=".probe", dir=ancestor)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise PyconvError(f"{what} {dest} cannot be written ({_why(e)})") from None
    return dest


def check_free_space(folder: Path, need_bytes: int, what: str) -> None:
    """Refuse a long write the disk cannot hold: one line with what is needed and what is free."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return  # no figure to compare with; the write itself will say what went wrong
    if free < need_bytes:
        raise PyconvError(f"{what} needs up to {need_bytes / 2**20:.0f} MB in {probe}, only {free / 2**20:.0f} MB "
                          "are free")


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike, suffix: str = "", need_bytes: int = 0) -> Iterator[Path]:
    """Yield a temporary path for `dest` (same name, in a private folder beside it); on success rename it over
    `dest`, on any error or signal remove it. need_bytes: refuse up front when the disk has less free.

    Two processes writing the same destination at once never share a half file; the last rename wins. OSError
    from the writing (a full disk, a read-only folder) becomes one PyconvError line naming `dest`. `suffix` is
    kept for callers of the earlier version (the temporary file now has `dest`'s own name)."""
    del suffix
    dest = Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PyconvError(f"cannot write {dest}: cannot create its folder ({_why(e)})") from None
    if dest.is_dir():
        raise PyconvError(f"cannot write {dest}: it is a folder")
    remove_stale_temps(dest)
    if need_bytes:
        check_free_space(dest.parent, need_bytes, f"writing {dest}")
    try:
        # Created under a name no sweep looks at, locked, then renamed to the swept pattern: a sweep never sees
        # an unlocked folder of a live writer.
        fresh = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".new", dir=dest.parent))
        lock_fd = os.open(fresh, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        folder = fresh.with_suffix(".tmp")
        os.rename(fresh, folder)
    except OSError as e:
        raise PyconvError(f"cannot write {dest} ({_why(e)})") from None
    tmp_path = folder / dest.name
    try:
        try:
            yield tmp_path
            os.chmod(tmp_path, 0o666 & ~_umask())  # give the file the usual permissions
            os.replace(tmp_path, dest)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise PyconvError(f"cannot write {dest}: the disk is full; nothing was written") from None
            raise PyconvError(f"cannot write {dest} ({_why(e)}); nothing was written") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(lock_fd)


def write_hdf5_atomic(dest: str | os.PathLike, fill) -> Path:
    """An HDF5 file built in memory by fill(h5py.File), then written atomically as plain bytes.

    HDF5's own writer never touches the disk: when one of its writes fails (a full disk; measured with a file
    size limit, h5py 3.16 / HDF5 1.14) the library is left in a state that crashes the interpreter (SIGSEGV)
    while Python unwinds, whereas a failed write of bytes is a clean OSError, and the exact size is known
    before the first byte goes out (free space is checked against it)."""
    import io

    import h5py

    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        fill(f)
    image = buf.getbuffer()
    try:
        with atomic_path(dest, need_bytes=len(image)) as tmp, open(tmp, "wb") as out:
            out.write(image)
    finally:
        image.release()
    return Path(dest)


def write_text_atomic(dest: str | os.PathLike, text: str) -> Path:
    with atomic_path(dest) as tmp:
        tmp.write_text(text)
    return Path(dest)


def read_bounded(path: str | os.PathLike, limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most `limit` bytes. Devices (/dev/zero), FIFOs and folders are refused
    before they are opened (a FIFO would block, a device never end); a larger file is refused without being read
    into memory."""
    path = Path(path)
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise PyconvError(f"{what} {path} is not a regular file")
        if st.st_size > limit:
            raise PyconvError(f"{what} {path} is {st.st_size} bytes; a valid one is at most {limit}")
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise PyconvError(f"{what} {path} does not exist") from None
    except OSError as e:
        raise PyconvError(f"cannot read {what} {path} ({_why(e)})") from None
    if len(data) > limit:  # grew while we looked
        raise PyconvError(f"{what} {path} is larger than {limit} bytes; a valid one is at most that")
    return data


def read_json(path: str | os.PathLike, limit: int, what: str):
    """A JSON document from a regular file of at most `limit` bytes; PyconvError naming the file when it is
    missing, too large, not JSON, nested past Python's recursion limit or holding an integer past its digit
    limit."""
    import json

    path = Path(path)
    text = read_bounded(path, limit, what)
    try:
        return json.loads(text)
    except RecursionError:
        raise PyconvError(f"{what} {path} is nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an over-long integer
        raise PyconvError(f"{what} {path} is unreadable: {e}") from None


@contextlib.contextmanager
def atomic_folder(dest: str | os.PathLike) -> Iterator[Path]:
    """Yield a new empty folder beside `dest` (`.NAME.<random>.tmp/NAME`, locked as atomic_path's are); on success
    rename it to `dest` (which must be absent or empty), on any error or signal remove it. A writer killed outright
    leaves an unlocked temporary folder that the next write of `dest` removes; `dest` itself is never half-made."""
    dest = Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PyconvError(f"cannot write {dest}: cannot create its folder ({_why(e)})") from None
    remove_stale_temps(dest)
    try:
        fresh = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".new", dir=dest.parent))
        lock_fd = os.open(fresh, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        folder = fresh.with_suffix(".tmp")
        os.rename(fresh, folder)
    except OSError as e:
        raise PyconvError(f"cannot write {dest} ({_why(e)})") from None
    inner = folder / dest.name
    try:
        inner.mkdir(mode=0o777)
        yield inner
        try:
            os.rename(inner, dest)  # replaces an empty folder; refuses a non-empty one
        except OSError as e:
            raise PyconvError(f"cannot write {dest} ({_why(e)}); nothing was written") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(lock_fd)
