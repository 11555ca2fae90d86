"""`invoke build`: configure and build the native modules with CMake, then prove that each one imports.

Programs run with argument lists, never through a shell: a flag's value (`--cuda-arch`, `--build-dir`) reaches
CMake as one argument whatever it holds, and a checkout whose path has a space builds like any other.

Every build configures with every flag spelled out (build type, -march=native or not, the CUDA architectures or
their removal from the cache), so a flag given once is not silently kept by the next plain `invoke build`.

A module that links is not yet a module that loads: Python extension modules may leave symbols undefined until
import, so a source file missing from the build (or a function declared and never defined) still "builds".
After building, each module target CMake reports (through its file API, `.cmake/api/v1`) is imported in a fresh
interpreter; one that fails ends the build in one line naming the missing symbol (pyconv.native says the same
when such a module is imported later; the build says it first)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..core import paths
from ..core.errors import PyconvError, one_line

# What CMake accepts in CMAKE_CUDA_ARCHITECTURES: native | all | all-major | a list of numbers with optional
# -real / -virtual ("80;90", "90a-real"). Checked here so that a typo is one line, not a CMake page.
_ARCH = r"[0-9]{2,3}[a-z]?(-real|-virtual)?"
CUDA_ARCH_RE = re.compile(rf"native|all|all-major|{_ARCH}([;,]{_ARCH})*")
_FILE_API_QUERY = Path(".cmake/api/v1/query/codemodel-v2")

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
    bdir = (paths.ROOT / build_dir).resolve()
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
    d = Path(student).expanduser().resolve()
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


def configure_args(bdir: Path, debug: bool, portable: bool, cuda_arch: str, student: Path | None = None) -> list[str]:
    import pybind11

    args = ["cmake", "--no-warn-unused-cli", "-S", str(paths.ROOT), "-B", str(bdir),
            f"-DCMAKE_BUILD_TYPE={'Debug' if debug else 'Release'}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}", f"-DPython_EXECUTABLE={sys.executable}",
            f"-DPYCONV_NATIVE_ARCH={'OFF' if portable else 'ON'}"]
    cublas = _cublas_root()
    if cublas:
        args.append(f"-DPYCONV_CUBLAS_ROOT={cublas}")
    # No --cuda-arch: drop an earlier one from the cache, so CMakeLists.txt's default applies again.
    args.append(f"-DCMAKE_CUDA_ARCHITECTURES={cuda_arch}" if cuda_arch else "-UCMAKE_CUDA_ARCHITECTURES")
    # A student build: the student's folder in the slots' place, the modules in the build folder (never pyconv/).
    # Spelled out for the plain build too, so neither is kept from an earlier configure of the same folder.
    args.append(f"-DPYCONV_STUDENT_DIR={student or paths.ROOT / 'native' / 'student'}")
    args.append(f"-DPYCONV_MODULE_DIR={bdir if student else paths.ROOT / 'pyconv'}")
    return args


def _run(argv: list[str], what: str) -> None:
    try:
        code = subprocess.run(argv).returncode
    except FileNotFoundError:
        raise PyconvError(f"{argv[0]} not found: install it (pip install -r requirements.txt brings cmake)") from None
    if code != 0:
        raise PyconvError(f"{what} failed (`{argv[0]}` exited with status {code}; its messages are above)")


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
          portable: bool = False, student: str | None = None, targets: str | None = None) -> list[Path]:
    """Configure (every flag spelled out), build, and import each module. Returns the modules' paths.
    student: a folder holding new-forward.h / new-forward.cuh, compiled as cpu-student / gpu-student into a build
    folder of its own (default build/student-<hash of its path>), the modules written there (run them with
    `invoke milestone --student DIR`). targets: 'a,b' builds only those CMake targets (e.g. _cpu)."""
    paths.require_checkout("building the native modules")
    arch = check_cuda_arch(cuda_arch) if cuda_arch else ""
    n_jobs = check_jobs(jobs)
    sdir = student_folder(student) if student else None
    if build_dir is None:
        build_dir = str(student_build_dir(student)) if student else "build"
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
    _run(configure_args(bdir, debug, portable, arch, sdir), "CMake configure")
    _run(["cmake", "--build", str(bdir), "--parallel", str(n_jobs), *(["--target", *wanted] if wanted else [])],
         "the build")
    return check_modules(bdir, wanted or None)
