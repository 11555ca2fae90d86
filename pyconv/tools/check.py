"""`invoke check --student DIR`: compile a student's new-forward.cuh (and new-forward.h) exactly as the build would,
one translation unit each (the glue file of native/student/ that includes it), and nothing else: seconds, not the
minutes of a whole CUDA module, and no GPU needed. A machine without a GPU builds no pyconv._gpu (PYCONV_GPU=AUTO),
so this is how a student there learns that their CUDA file compiles before handing it in.

The compilers run with argument lists, never through a shell; their messages go straight to the terminal."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..core import paths
from ..core.errors import PyconvError
from . import build

NATIVE = paths.ROOT / "native"
GLUE = {"new-forward.cuh": NATIVE / "student" / "student_gpu.cu",
        "new-forward.h": NATIVE / "student" / "student_cpu.cpp"}


def _compiler(env: str, names: tuple[str, ...], what: str) -> str:
    found = os.environ.get(env) or next((p for p in map(shutil.which, names) if p), None)
    if not found:
        raise PyconvError(f"{what} not found (set {env}, or install it): cannot compile-check the student's file")
    return found


def compile_argv(header: str, student: Path, out: Path, cuda_arch: str = "90") -> list[str]:
    """The compiler's command line for one student file: the student's folder, then the course's stand-ins
    (native/compat), then native/ on the include path, as CMakeLists.txt's pyconv_student puts them."""
    includes = ["-I", str(student), "-I", str(NATIVE / "compat"), "-I", str(NATIVE)]
    if header == "new-forward.cuh":
        if not re.fullmatch(r"[0-9]{2,3}[a-z]?", cuda_arch):
            raise PyconvError(f"--cuda-arch must be one architecture number like 90 or 80, got {cuda_arch!r}")
        nvcc = _compiler("CUDACXX", ("nvcc",), "nvcc (the CUDA compiler)")
        return [nvcc, "-std=c++17", f"-arch=sm_{cuda_arch}", *includes, "-c", str(GLUE[header]), "-o", str(out)]
    cxx = _compiler("CXX", ("c++", "g++", "clang++"), "a C++ compiler")
    return [cxx, "-std=c++17", "-fopenmp", *includes, "-c", str(GLUE[header]), "-o", str(out)]


def check_student(student: str, cuda_arch: str = "90", echo=print) -> None:
    """Compile each of the student's files present; PyconvError naming the first that does not compile."""
    folder = build.student_folder(student)
    with tempfile.TemporaryDirectory(prefix="pyconv-check-") as tmp:
        for header in GLUE:
            if not (folder / header).is_file():
                continue
            argv = compile_argv(header, folder, Path(tmp) / "student.o", cuda_arch)
            code = subprocess.run(argv).returncode
            if code != 0:
                raise PyconvError(f"{folder / header} does not compile ({Path(argv[0]).name} exited with status "
                                  f"{code}; its messages are above)")
            echo(f"{folder / header} compiles ({Path(argv[0]).name}"
                 + (f", sm_{cuda_arch}" if header.endswith(".cuh") else "") + ")")
