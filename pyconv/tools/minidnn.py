"""The Mini-DNN student slot (the course since Fall 2020): which interface generation an edition used, and where a
student's files are in the folder they hand in.

The course changed its student interface five times; each generation is a folder native/minidnn/<generation>/
holding the course's headers (reproduced declarations), its skeletons and minidnn-generation.h, the facts the
glue (native/minidnn/minidnn_cpu.cpp, minidnn_gpu.cu) compiles against:

  2020fa  conv_forward_cpu(y, x, k, B, M, C, H, W, K); GPUInterface::conv_forward_gpu(host_y, host_x, host_k, ...)
          one host call that allocates, copies, launches and frees
  2021sp  the same CPU function; GPUInterface::conv_forward_gpu_prolog / conv_forward_gpu / _epilog (device
          pointers returned through float**)
  2022fa  the 2021sp calls, parameters renamed (output, input, mask, Batch, Map_out, Channel, Height, Width, K)
  2023fa  a stride `const int S` last on all four functions (output (H - K) / S + 1)
  2024sp  the 2022fa calls, no stride; files under Project/project/src/layer/custom/, one GPUInterface file per
          milestone (new-forward.cu, matmul-unroll.cu or unroll-new-forward.cu with the framework's matmul.h,
          kernel-fusion-forward.cu, m3-forward.cu): a build takes one of them (--gpu-file)

INTERFACE_OF is the one table from edition to generation; the editions table (pyconv.core.editions) may import it
or take its place. Editions before 2020fa (MXNet) are not in it: their students' files go to native/student/."""

from __future__ import annotations

from pathlib import Path

from ..core import paths
from ..core.checks import cmake_safe
from ..core.errors import PyconvError

INTERFACE_OF = {
    "2020fa": "2020fa",
    "2021sp": "2021sp", "2021fa": "2021sp", "2022sp": "2021sp",
    "2022fa": "2022fa", "2023sp": "2022fa",
    "2023fa": "2023fa",
    "2024sp": "2024sp", "2024fa": "2024sp", "2025sp": "2024sp", "2025fa": "2024sp",
}

CPU_FILE = "cpu-new-forward.cc"
# The files that define GPUInterface, per generation; the first is the default of --gpu-file.
GPU_FILES = {
    "2020fa": ("new-forward.cu",), "2021sp": ("new-forward.cu",), "2022fa": ("new-forward.cu",),
    "2023fa": ("new-forward.cu",),
    "2024sp": ("new-forward.cu", "matmul-unroll.cu", "unroll-new-forward.cu", "kernel-fusion-forward.cu",
               "m3-forward.cu"),
}
# Where the course's folders put the student's files, tried in this order below the folder given.
LAYOUTS = (".", "custom", "Project/custom", "Project/project/src/layer/custom", "project/src/layer/custom")


def generation_of(edition: str) -> str:
    """The interface generation of a Mini-DNN edition; one line for any other name."""
    try:
        return INTERFACE_OF[edition]
    except KeyError:
        raise PyconvError(f"--edition {edition!r} is not a Mini-DNN edition (known: {', '.join(INTERFACE_OF)})") \
            from None


def generation_dir(generation: str) -> Path:
    return paths.ROOT / "native" / "minidnn" / generation


def gpu_file(generation: str, name: str | None) -> str:
    """The student's file that defines GPUInterface: `name`, which must be one the generation used, or its first."""
    files = GPU_FILES[generation]
    if name is None:
        return files[0]
    if name not in files:
        raise PyconvError(f"--gpu-file {name!r}: the {generation} interface's GPU files are {', '.join(files)}")
    return name


def student_folder(student: str, generation: str, gpu: str) -> Path:
    """The folder holding the student's files: DIR itself, or the course's custom/ folder below it (LAYOUTS).
    One line when none holds cpu-new-forward.cc or the GPU file."""
    d = cmake_safe(Path(student).expanduser().resolve(), "--student")
    if not d.is_dir():
        raise PyconvError(f"--student {student!r}: {d} is not a folder")
    for sub in LAYOUTS:
        f = (d / sub).resolve()
        if (f / CPU_FILE).is_file() or (f / gpu).is_file():
            return f
    raise PyconvError(f"--student {student!r}: neither {CPU_FILE} nor {gpu} in {d} or in its "
                      f"{', '.join(s + '/' for s in LAYOUTS[1:])} (the {generation} interface's files)")


def build_dir(student: str, generation: str, gpu: str) -> Path:
    """build/student-<first 10 hex of sha1 of the student's folder>-<generation>: one per folder and interface."""
    import hashlib

    d = student_folder(student, generation, gpu)
    return paths.ROOT / "build" / f"student-{hashlib.sha1(str(d).encode()).hexdigest()[:10]}-{generation}"


def cmake_args(generation: str | None, gpu: str | None) -> list[str]:
    """The configure flags of the slot; spelled out as '' when off, so that no earlier configure's value stays."""
    return [f"-DPYCONV_MINIDNN_GENERATION={generation or ''}", f"-DPYCONV_MINIDNN_GPU_FILE={gpu or 'new-forward.cu'}"]
