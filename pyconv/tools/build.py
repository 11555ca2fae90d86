"""`invoke build`: configure and build the native modules with CMake, then prove that each one imports.

Programs run with argument lists, never through a shell: a flag's value (`--cuda-arch`, `--build-dir`) reaches
CMake as one argument whatever it holds, and a checkout whose path has a space builds like any other.

Every build configures with every flag spelled out (build type, -march=native or not, the CUDA architectures or
their removal from the cache), so a flag given once is not silently kept by the next plain `invoke build`.

A module that links is not yet a module that loads: Python extension modules may leave symbols undefined until
import, so a source file missing from the build (or a function declared and never defined) still "builds".
After building, each module target CMake reports (through its file API, `.cmake/api/v1`) is imported in a fresh
interpreter; one that fails ends the build in one line naming the missing symbol (pyconv.native says the same
when such a module is imported later; the build says it first).

A module is never rewritten in place: CMake links into the build folder (<build>/modules), and only a module that
imports is copied beside its destination (pyconv/, or the student build folder) and renamed over it, so a
milestone started during a build loads the old module or the new one, never half of one. A module the linker left
broken (a build killed mid-link leaves a short file newer than its objects, which make takes for up to date) is
recognised by the record of the last modules that imported (<build>/modules/imported.json) and deleted before the
next build, which then links it again. Two builds of one folder take turns (a lock on the folder). CMake and its
children (make, the compilers, the linker) run in a process group of their own: a stopped build stops them all
and waits for them before it says so."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..core import paths
from ..core.checks import cmake_safe
from ..core.errors import PyconvError, one_line

# What CMake accepts in CMAKE_CUDA_ARCHITECTURES: native | all | all-major | a list of numbers with optional
# -real / -virtual ("80;90", "90a-real"). Checked here so that a typo is one line, not a CMake page.
_ARCH = r"[0-9]{2,3}[a-z]?(-real|-virtual)?"
CUDA_ARCH_RE = re.compile(rf"native|all|all-major|{_ARCH}([;,]{_ARCH})*")
_FILE_API_QUERY = Path(".cmake/api/v1/query/codemodel-v2")
LINK_DIR = "modules"  # inside the build folder: where CMake links the modules (PYCONV_MODULE_DIR)
_IMPORTED = "imported.json"  # in LINK_DIR: (size, mtime) of each linked module that imported
_STOP_GRACE_S = 20  # how long a stopped build's children get to stop on SIGTERM (make deletes a half target)

# Run in a fresh interpreter per module: the module's own init function, loaded from its file.
_IMPORT_CHECK = """
import importlib.util, sys
name, path = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location(name, path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
"""


def check_cuda_arch(value: str) -> str:
    if not CUDA_ARCH_RE.fullmatch(value):
        raise PyconvError(f"--cuda-arch must be native, all, all-major or architecture numbers like 90 or "
                          f"'80;90' (optionally -real/-virtual), got {value!r}")
    return value.replace(",", ";")


def check_jobs(value) -> int:
    from ..core.checks import as_int

    try:
        n = as_int(value)
    except (TypeError, ValueError):
        raise PyconvError(f"--jobs must be a non-negative integer, got {value!r}") from None
    if n < 0:
        raise PyconvError(f"--jobs must be a non-negative integer, got {n}")
    return n or os.cpu_count() or 1


def build_folder(build_dir: str) -> Path:
    """The build folder: relative to the checkout, or absolute. Never the checkout itself or one of its
    parents, and never a file."""
    bdir = cmake_safe((paths.ROOT / build_dir).resolve(), "--build-dir")
    root = paths.ROOT.resolve()
    if bdir == root or bdir in root.parents:
        raise PyconvError(f"--build-dir {build_dir!r} is the checkout or a folder above it; name a folder of its own")
    if bdir.exists() and not bdir.is_dir():
        raise PyconvError(f"--build-dir {build_dir!r}: {bdir} is a file")
    return bdir


def clean(bdir: Path) -> None:
    """Delete a build folder, but only one that CMake made (or an empty one): --clean must not remove a folder
    a typo pointed at."""
    if not bdir.exists():
        return
    if not (bdir / "CMakeCache.txt").is_file() and any(bdir.iterdir()):
        raise PyconvError(f"--clean: {bdir} is not a CMake build folder (no CMakeCache.txt); not deleting it")
    shutil.rmtree(bdir)


def _cublas_root() -> Path | None:
    try:
        import nvidia
    except ImportError:
        return None
    for base in nvidia.__path__:
        for sub in ("cu13", "cublas", "cu12"):
            if (Path(base) / sub / "include" / "cublas_v2.h").exists():
                return Path(base) / sub
    return None


STUDENT_FILES = ("new-forward.h", "new-forward.cuh")


def student_folder(student: str) -> Path:
    """A student's folder (a team's submission): it must exist and hold new-forward.h and/or new-forward.cuh."""
    d = cmake_safe(Path(student).expanduser().resolve(), "--student")
    if not d.is_dir():
        raise PyconvError(f"--student {student!r}: {d} is not a folder")
    if not any((d / f).is_file() for f in STUDENT_FILES):
        raise PyconvError(f"--student {student!r}: {d} holds neither {' nor '.join(STUDENT_FILES)}")
    return d


def student_build_dir(student: str) -> Path:
    """The build folder of a student's folder: build/student-<first 10 hex of sha1 of its absolute path>."""
    import hashlib

    d = student_folder(student)
    return paths.ROOT / "build" / f"student-{hashlib.sha1(str(d).encode()).hexdigest()[:10]}"


def configure_args(bdir: Path, debug: bool, portable: bool, cuda_arch: str, student: Path | None = None,
                   minidnn: tuple[str, str] | None = None, gpu: bool = False, ladder: bool = False) -> list[str]:
    """minidnn: (generation, GPU file) of a Mini-DNN edition. gpu: compile the CUDA modules whether or not a GPU is
    visible (PYCONV_GPU=ON; else AUTO: only where one is); ladder: also the ladder's history steps
    (PYCONV_LADDER, which asks for the CUDA modules too)."""
    import pybind11

    args = ["cmake", "--no-warn-unused-cli", "-S", str(paths.ROOT), "-B", str(bdir),
            f"-DCMAKE_BUILD_TYPE={'Debug' if debug else 'Release'}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}", f"-DPython_EXECUTABLE={sys.executable}",
            f"-DPYCONV_NATIVE_ARCH={'OFF' if portable else 'ON'}",
            f"-DPYCONV_GPU={'ON' if gpu or ladder else 'AUTO'}", f"-DPYCONV_LADDER={'ON' if ladder else 'OFF'}"]
    cublas = _cublas_root()
    if cublas:
        args.append(f"-DPYCONV_CUBLAS_ROOT={cublas}")
    # No --cuda-arch: drop an earlier one from the cache, so CMakeLists.txt's default applies again.
    args.append(f"-DCMAKE_CUDA_ARCHITECTURES={cuda_arch}" if cuda_arch else "-UCMAKE_CUDA_ARCHITECTURES")
    # A student build: the student's folder in the slots' place. The modules are linked inside the build folder
    # and installed from there (install_modules). Spelled out every time, so nothing is kept from an earlier
    # configure of the same folder. minidnn: (generation, GPU file) of a Mini-DNN edition; without a student, that
    # generation's skeletons.
    from . import minidnn as md

    default = md.generation_dir(minidnn[0]) if minidnn else paths.ROOT / "native" / "student"
    args.append(f"-DPYCONV_STUDENT_DIR={student or default}")
    args.append(f"-DPYCONV_MODULE_DIR={bdir / LINK_DIR}")
    args += md.cmake_args(*(minidnn or (None, None)))
    return args


def module_destination(bdir: Path, student: bool) -> Path:
    """Where the built modules are installed: pyconv/, or a student build's own folder (PYCONV_NATIVE_DIR)."""
    return bdir if student else paths.ROOT / "pyconv"


def stop_group(proc: subprocess.Popen, grace_s: float = _STOP_GRACE_S) -> None:
    """Stop a child started with start_new_session=True and every process of its group: SIGTERM (make then
    deletes the target it was writing), SIGKILL after grace_s; returns once the child is reaped."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    # the group outlives its leader while a grandchild finishes: wait until none is left (bounded)
    for _ in range(int(grace_s * 10)):
        try:
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _run(argv: list[str], what: str) -> None:
    """Run a CMake step in a process group of its own; on any interruption (Ctrl-C, SIGTERM, an error) stop
    the whole group before passing the interruption on."""
    try:
        proc = subprocess.Popen(argv, start_new_session=True)
    except FileNotFoundError:
        raise PyconvError(f"{argv[0]} not found: install it (pip install -r requirements.txt brings cmake)") from None
    try:
        code = proc.wait()
    except BaseException:
        stop_group(proc)
        raise
    if code != 0:
        raise PyconvError(f"{what} failed (`{argv[0]}` exited with status {code}; its messages are above)")


@contextlib.contextmanager
def build_lock(bdir: Path, say=print):
    """One build of a folder at a time: a second waits for the first (saying so) instead of racing it."""
    fd = os.open(bdir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another build of {bdir} to finish", flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _stat_key(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _imported_record(bdir: Path) -> dict:
    try:
        record = json.loads((bdir / LINK_DIR / _IMPORTED).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def forget_unproven_modules(bdir: Path) -> list[Path]:
    """Delete each linked module of the last build that is not the very file that last imported (a link
    killed midway, a module that failed its import, one changed by hand): make would take it for up to date.
    The next build links it again. Returns what was deleted."""
    try:
        artifacts = module_artifacts(bdir)
    except PyconvError:
        return []  # never configured: nothing linked yet
    proven = _imported_record(bdir)
    deleted = []
    for _, path in artifacts:
        if path.parent != bdir / LINK_DIR:
            continue  # a folder configured before the modules were linked in the build folder: not ours to delete
        key = _stat_key(path)
        if key is not None and proven.get(path.name) != key:
            path.unlink()
            deleted.append(path)
    return deleted


def _remember_imported(bdir: Path, built: list[Path]) -> None:
    record = {**_imported_record(bdir), **{p.name: _stat_key(p) for p in built}}
    from ..core.fileio import write_text_atomic

    write_text_atomic(bdir / LINK_DIR / _IMPORTED, json.dumps(record, indent=1) + "\n")


def install_modules(built: list[Path], dest: Path) -> list[Path]:
    """Copy each module beside its destination under a temporary name, then rename it over the old one: a
    process loading the module at that moment gets the old file or the new one, whole. A destination that is
    already this very build (same size and time) is left alone."""
    out = []
    for src in built:
        target = dest / src.name
        if target.resolve() == src.resolve():
            out.append(target)
            continue
        key = _stat_key(src)
        if _stat_key(target) != key:
            fd, tmp = tempfile.mkstemp(prefix=f".{src.name}.", suffix=".new", dir=dest)
            os.close(fd)
            try:
                shutil.copy2(src, tmp)
                os.replace(tmp, target)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        out.append(target)
    return out


def module_artifacts(bdir: Path) -> list[tuple[str, Path]]:
    """(target name, built file) of every Python module target, from the reply of CMake's file API."""
    reply = bdir / ".cmake/api/v1/reply"
    indexes = sorted(reply.glob("index-*.json"))
    if not indexes:
        raise PyconvError(f"CMake wrote no file-API reply in {reply}; cannot tell which modules were built")
    index = json.loads(indexes[-1].read_text())
    model_file = next(r["jsonFile"] for r in index["objects"] if r["kind"] == "codemodel")
    model = json.loads((reply / model_file).read_text())
    out = []
    for config in model["configurations"]:
        for t in config["targets"]:
            target = json.loads((reply / t["jsonFile"]).read_text())
            if target.get("type") != "MODULE_LIBRARY":
                continue
            for a in target.get("artifacts", []):
                p = Path(a["path"])
                out.append((target["name"], p if p.is_absolute() else bdir / p))
    return out


def _demangle(symbol: str) -> str:
    tool = shutil.which("c++filt")
    if not tool:
        return symbol
    r = subprocess.run([tool, symbol], capture_output=True, text=True)
    return r.stdout.strip() or symbol if r.returncode == 0 else symbol


def import_failure(target: str, path: Path) -> str:
    """'' when the module at `path` imports in a fresh interpreter, else why not (the undefined symbol, named)."""
    r = subprocess.run([sys.executable, "-c", _IMPORT_CHECK, f"pyconv.{target}", str(path)], capture_output=True,
                       text=True, cwd=path.parent)
    if r.returncode == 0:
        return ""
    text = r.stderr.strip().splitlines()
    last = text[-1] if text else f"exit status {r.returncode}"
    m = re.search(r"undefined symbol: (\S+)", r.stderr)
    if m:
        return (f"undefined symbol {_demangle(m.group(1))} ({m.group(1)}): a source file missing from the build "
                "(native/, CMakeLists.txt), or a function declared but never defined")
    return last


def check_modules(bdir: Path, targets: list[str] | None = None) -> list[Path]:
    """Import every module target (or those named); PyconvError naming the first that does not load and why."""
    built = []
    for target, path in module_artifacts(bdir):
        if targets and target not in targets:
            continue
        if not path.exists():
            raise PyconvError(f"the build reported success but {path} is missing")
        why = import_failure(target, path)
        if why:
            raise PyconvError(f"{path.name} was built but does not import: {one_line(why)}")
        built.append(path)
    return built


def build(build_dir: str | None = None, debug: bool = False, clean_first: bool = False, jobs="0", cuda_arch: str = "",
          portable: bool = False, student: str | None = None, targets: str | None = None, edition: str | None = None,
          gpu_file: str | None = None, gpu: bool = False, ladder: bool = False) -> list[Path]:
    """Configure (every flag spelled out), build, and import each module. Returns the modules' paths.
    student: a folder holding new-forward.h / new-forward.cuh, compiled as cpu-student / gpu-student into a build
    folder of its own (default build/student-<hash of its path>), the modules written there (run them with
    `invoke milestone --student DIR`). targets: 'a,b' builds only those CMake targets (e.g. _cpu).
    edition: a Mini-DNN edition (pyconv.tools.minidnn): the student's cpu-new-forward.cc and GPU file (gpu_file,
    default new-forward.cu) in DIR or its custom/ folder, compiled for that edition's interface (without a
    student: its skeletons); the build folder is then build/student-<hash>-<generation>.
    gpu, ladder: see configure_args."""
    from . import minidnn as md

    paths.require_checkout("building the native modules")

    arch = check_cuda_arch(cuda_arch) if cuda_arch else ""
    n_jobs = check_jobs(jobs)
    minidnn = None
    if edition is not None:
        gen = md.generation_of(edition)
        minidnn = (gen, md.gpu_file(gen, gpu_file))
    elif gpu_file is not None:
        raise PyconvError("--gpu-file names a Mini-DNN student's file: give --edition too")
    if minidnn and student:
        sdir = md.student_folder(student, *minidnn)
    else:
        sdir = student_folder(student) if student else None
    if build_dir is None:
        if student:
            build_dir = str(md.build_dir(student, *minidnn) if minidnn else student_build_dir(student))
        else:
            build_dir = "build"
    bdir = build_folder(build_dir)
    if sdir is not None and bdir == build_folder("build"):
        raise PyconvError("--student builds into a folder of its own: --build-dir must not be the project's build/")
    wanted = [t.strip() for t in str(targets).split(",") if t.strip()] if targets else []
    if clean_first:
        clean(bdir)
    query = bdir / _FILE_API_QUERY
    try:
        query.parent.mkdir(parents=True, exist_ok=True)
        query.touch()
    except OSError as e:
        raise PyconvError(f"cannot create the build folder {bdir} ({e.strerror or e})") from None
    with build_lock(bdir):
        forget_unproven_modules(bdir)
        _run(configure_args(bdir, debug, portable, arch, sdir, minidnn, gpu=gpu, ladder=ladder), "CMake configure")
        _run(["cmake", "--build", str(bdir), "--parallel", str(n_jobs), *(["--target", *wanted] if wanted else [])],
             "the build")
        built = check_modules(bdir, wanted or None)
        _remember_imported(bdir, built)
        return install_modules(built, module_destination(bdir, sdir is not None))
