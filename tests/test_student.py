"""The student slots (native/student): the course's skeletons and finished student files, compiled unchanged against
the compatibility headers (native/compat) and run through the same glue as cpu-student / gpu-student
(native/student/student_glue.hpp).

Most tests build a small harness (tests/native/student_*_harness.*) around one folder's files, so any folder can be
tested without rebuilding the project: our own fixtures (tests/fixtures/student/), the slots' skeletons and, when
PYCONV_STUDENT_SOLUTIONS names a folder of public solutions (one sub-folder per team with its two files, and an
archs.json mapping each sub-folder to its semester's architecture), those. Public solutions are never part of
the project.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, assert_close, random_conv_inputs, random_conv_shapes
from student_variants import skip_if_unstarted

from pyconv import variants
from pyconv.core import archs, reference
from pyconv.core.errors import PyconvError

NATIVE = ROOT / "native"
SLOT = NATIVE / "student"
FIXTURES = ROOT / "tests" / "fixtures" / "student"
HARNESS = ROOT / "tests" / "native"
OWN = ["good", "probe_api", "probe_macros"]  # our finished files, correct at every shape
# The finished files are solutions: a student handout leaves tests/fixtures/student/ out, and the tests that need
# them skip there. The slot itself is tested in both: as the course's skeleton while it holds one, else as the
# student's work, against the reference like the fixtures.
HAVE_FIXTURES = FIXTURES.is_dir()
needs_fixtures = pytest.mark.skipif(not HAVE_FIXTURES, reason="the finished student files (tests/fixtures/student/) "
                                                              "are not in this tree: a student handout leaves them "
                                                              "out (they are solutions)")
RTOL = 1e-4  # the project's default; the fixtures compute in float32 exactly as the reference's order allows
SKELETON_CPU = re.compile(r"new-forward\.h:\d+: Check failed: 0 == 1 \(0 vs\. 1\): "
                          r"Remove this line and replace it with your implementation\.")
SKELETON_GPU = re.compile(r"new-forward\.cuh:\d+: Check failed: 0 == 1 \(0 vs\. 1\): "
                          r"Remove this line and replace with your implementation")

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found")


def solution_folders() -> list[tuple[Path, str]]:
    """(folder, architecture) of each public solution named by PYCONV_STUDENT_SOLUTIONS/archs.json."""
    base = os.environ.get("PYCONV_STUDENT_SOLUTIONS")
    if not base:
        return []
    base = Path(base)
    return [(base / name, arch) for name, arch in json.loads((base / "archs.json").read_text()).items()]


SOLUTIONS = solution_folders()
needs_solutions = pytest.mark.skipif(not SOLUTIONS, reason="PYCONV_STUDENT_SOLUTIONS not set")


def slot_file(ext: str) -> Path:
    return SLOT / f"new-forward.{ext}"


def skip_while_skeleton(ext: str) -> None:
    if variants.holds_skeleton(slot_file(ext).read_text(), slot_file(ext)):
        pytest.skip(f"native/student/new-forward.{ext} still holds the course's skeleton: write your implementation "
                    "there and this test checks it against the reference")


def skip_unless_skeleton(ext: str) -> None:
    if not variants.holds_skeleton(slot_file(ext).read_text(), slot_file(ext)):
        pytest.skip(f"native/student/new-forward.{ext} holds a student's own file, no longer the course's skeleton")


def own_folders() -> list:
    """The slot (the student's file: skipped while it holds the skeleton) and, where they are, our finished files."""
    return [pytest.param(SLOT, id="slot"), *[pytest.param(FIXTURES / f, id=f) for f in OWN if HAVE_FIXTURES]]


def tolerance(rtol: float, shape) -> tuple[float, float]:
    """The project's rule: atol + rtol*|ref|, atol = rtol*sqrt(C*K*K) (float32 sums of C*K*K products)."""
    _, c, _, _, _, k = shape
    return rtol, rtol * float(np.sqrt(c * k * k))


def arch_conv_shapes(name: str, batch: int) -> list[tuple[int, int, int, int, int, int]]:
    """(B, C, H, W, M, K) of each conv layer of a course architecture (valid conv, a 2x2 pool after conv1)."""
    arch = archs.get_arch(name)
    shapes, c, size = [], 1, arch.input_size
    for i, (m, k) in enumerate(arch.convs):
        shapes.append((batch, c, size, size, m, k))
        c, size = m, size - k + 1
        if i == 0 or arch.pool_after_conv2:
            size //= 2
    return shapes


# ------------------------------------------------------------------------------------------------ the harnesses
def _compile(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, f"{what} did not compile:\n{done.stderr[-4000:]}"


def _includes(folder: Path) -> list[str]:
    # The student's folder first (the glue includes <new-forward.h>), then the compat headers, then native/.
    return [f"-I{folder}", f"-I{NATIVE / 'compat'}", f"-I{NATIVE}"]


class Harness:
    """One folder's file behind the glue, as a ctypes library: run(x, k) -> (y, error line or None)."""

    def __init__(self, lib_path: Path, symbol: str):
        self._fn = getattr(ctypes.CDLL(str(lib_path)), symbol)

    def run(self, x: np.ndarray, k: np.ndarray, poison: float = np.nan):
        b, c, h, w = x.shape
        m, _, kk, _ = k.shape
        y = np.full((b, m, h - kk + 1, w - kk + 1), poison, np.float32)
        err = ctypes.create_string_buffer(4096)
        ptr = ctypes.POINTER(ctypes.c_float)
        rc = self._fn(np.ascontiguousarray(x).ctypes.data_as(ptr), np.ascontiguousarray(k).ctypes.data_as(ptr),
                      y.ctypes.data_as(ptr), *(ctypes.c_longlong(v) for v in (b, c, h, w, m, kk)), err, len(err))
        return (None, err.value.decode()) if rc else (y, None)


@pytest.fixture(scope="session")
def cpu_harness(tmp_path_factory):
    built: dict[Path, Harness] = {}

    def get(folder: Path) -> Harness:
        if folder not in built:
            lib = tmp_path_factory.mktemp("cpu-harness") / "student_cpu.so"
            _compile(["g++", "-std=c++17", "-O2", "-shared", "-fPIC", *_includes(folder),
                      str(HARNESS / "student_cpu_harness.cpp"), "-o", str(lib)], f"{folder}/new-forward.h")
            built[folder] = Harness(lib, "pyconv_student_cpu")
        return built[folder]

    return get


@pytest.fixture(scope="session")
def gpu_harness(tmp_path_factory):
    built: dict[Path, Harness] = {}

    def get(folder: Path) -> Harness:
        if folder not in built:
            lib = tmp_path_factory.mktemp("gpu-harness") / "student_gpu.so"
            _compile([NVCC, "-std=c++17", "-O3", "-arch=native", "-shared", "-Xcompiler", "-fPIC", *_includes(folder),
                      str(HARNESS / "student_gpu_harness.cu"), "-o", str(lib)], f"{folder}/new-forward.cuh")
            built[folder] = Harness(lib, "pyconv_student_gpu")
        return built[folder]

    return get


def _one_line(message: str) -> str:
    assert message and "\n" not in message, f"not one line: {message!r}"
    return message


# ------------------------------------------------------------------------------------------------ the compat layer
@pytest.mark.parametrize("as_cuda", [False, pytest.param(True, marks=[needs_nvcc, pytest.mark.slow])],
                         ids=["g++", "nvcc"])
def test_compat_checks_and_tensor_api(tmp_path, as_cuda):
    exe = tmp_path / "compat_checks"
    src = str(HARNESS / "compat_checks.cpp")
    if as_cuda:
        _compile([NVCC, "-std=c++17", "-x", "cu", "-arch=sm_90", f"-I{NATIVE / 'compat'}", src, "-o", str(exe)],
                 "compat_checks.cpp (CUDA)")
    else:
        _compile(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{NATIVE / 'compat'}", src, "-o", str(exe)],
                 "compat_checks.cpp")
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    lines = dict(line.split(": ", 1) for line in out)
    loc = r"compat_checks\.cpp:\d+: "
    expected = {
        "eq": loc + r"Check failed: 2 == 3 \(2 vs\. 3\): two is not 3",
        "ne": loc + r"Check failed: 4 != 4 \(4 vs\. 4\)",
        "lt": loc + r"Check failed: 5u < 5u \(5 vs\. 5\): strict",
        "le": loc + r"Check failed: 7 <= 6 \(7 vs\. 6\)",
        "gt": loc + r"Check failed: -1 > 0 \(-1 vs\. 0\): negative",
        "ge": loc + r"Check failed: 1\.5 >= 2\.5 \(1\.5 vs\. 2\.5\)",
        "check": loc + r"Check failed: 1 \+ 1 == 3: arithmetic second line",  # std::endl folded into the line
        "fatal": loc + r"Not Implemented\.",
        "notnull": loc + r"Check failed: 'p' must be non NULL",
        "shape": loc + r"Check failed: .*\(\(2,3\) vs\. \(2,4\)\): shapes",
        "index": r"mshadow::Tensor: index 3 is out of range \[0, 3\) in a 1-d \(sub-\)tensor",
        "tensor": r"5 2 2 0 4 24 1\.5 4",
    }
    if as_cuda:
        expected["cuda"] = loc + r"CUDA: cudaErrorInvalidValue: invalid argument in `cudaErrorInvalidValue`"
    for case, pattern in expected.items():
        assert re.fullmatch(pattern, lines.get(case, "<missing>")), f"{case}: {lines.get(case)!r}"
    assert lines["cases"] == str(sum(1 for c in expected if c != "tensor"))
    if as_cuda:
        assert lines["cuda-info"] == "half 0.25, default stream null, 256 threads"


# ------------------------------------------------------------------------------------------------ CPU (milestone 2)
def test_skeleton_cpu_fails_with_the_course_sentence(cpu_harness, rng):
    skip_unless_skeleton("h")
    x, k = random_conv_inputs(rng, (2, 1, 12, 12, 3, 5))
    y, err = cpu_harness(SLOT).run(x, k)
    assert y is None
    assert SKELETON_CPU.fullmatch(_one_line(err)), err


@pytest.mark.parametrize("folder", own_folders())
def test_own_cpu_files_match_the_reference(cpu_harness, rng, folder):
    if folder == SLOT:
        skip_while_skeleton("h")
    harness = cpu_harness(folder)
    for shape in random_conv_shapes(rng, 16, max_b=3, max_hw=30):
        x, k = random_conv_inputs(rng, shape)
        y, err = harness.run(x, k)  # y starts as NaN: an unwritten element cannot pass
        assert err is None, f"{folder.name} {shape}: {err}"
        rtol, atol = tolerance(RTOL, shape)
        assert_close(y, reference.conv2d(x, k), rtol, atol, what=f"{folder.name} {shape}")


@needs_fixtures
def test_framework_zeroes_y_for_files_that_accumulate(cpu_harness, rng):
    # The 'good' fixture only accumulates (+=), as the course's framework allowed: a poisoned y must not leak.
    x, k = random_conv_inputs(rng, (2, 3, 9, 11, 4, 3))
    y, err = cpu_harness(FIXTURES / "good").run(x, k, poison=1e6)
    assert err is None
    rtol, atol = tolerance(RTOL, (2, 3, 9, 11, 4, 3))
    assert_close(y, reference.conv2d(x, k), rtol, atol, what="good, y poisoned with 1e6")


@needs_fixtures
def test_wrong_cpu_file_misses_exactly_the_last_row(cpu_harness, rng):
    shape = (2, 3, 10, 12, 4, 3)
    x, k = random_conv_inputs(rng, shape)
    y, err = cpu_harness(FIXTURES / "wrong_last_row").run(x, k)
    assert err is None
    ref = reference.conv2d(x, k)
    rtol, atol = tolerance(RTOL, shape)
    with pytest.raises(AssertionError, match="elements off; worst at"):
        assert_close(y, ref, rtol, atol)
    assert_close(y[:, :, :-1], ref[:, :, :-1], rtol, atol, what="every row but the last")
    assert (y[:, :, -1] == 0).all(), "the framework zeroed y; the skipped row must still hold those zeros"


@needs_fixtures
@pytest.mark.parametrize("old, new, tensor", [
    ("const int H_out = H - K + 1;", "const int H_out = H;", "y"),  # rows of y that do not exist
    ("x[b][c][h + p][w + q]", "x[b][c][h + p + 1][w + q]", "x"),  # one row of x too far
])
def test_loop_past_the_end_stops_with_one_line(cpu_harness, rng, tmp_path, old, new, tensor):
    # Mistakes seen in public milestone-2 files (loops to H, or to H + K - 1): MXNet wrote or read past the end
    # silently; the compat layer stops at the first bad index and names the tensor.
    text = (FIXTURES / "good" / "new-forward.h").read_text()
    assert old in text
    (tmp_path / "new-forward.h").write_text(text.replace(old, new))
    x, k = random_conv_inputs(rng, (1, 2, 8, 8, 3, 3))
    y, err = cpu_harness(tmp_path).run(x, k)
    assert y is None
    pattern = (rf"{tensor}(\[\.\])*\[(\d+)\](\[\.\])*: index \2 is out of range \[0, \d+\): "
               rf"a loop runs past the end of {tensor}")
    assert re.fullmatch(pattern, _one_line(err)), err


def test_registered_cpu_student_runs_the_slot():
    """After `invoke build`: pyconv._cpu lists cpu-student and runs the slot's file: the skeleton stops at its
    sentence (a clean tree), a student's own file is checked against the reference."""
    try:
        from pyconv import _cpu
    except ImportError:
        pytest.skip("pyconv._cpu not built")
    found = [v for v in _cpu.variants() if v["name"] == "cpu-student"]
    if not found:
        pytest.skip("pyconv._cpu was built without the student glue")
    (v,) = found
    assert v["roles"]["m2"]["role"] == "on-request" and v["roles"]["m2"]["reason"]
    assert v["device"] == "cpu"
    x = np.ones((1, 1, 6, 6), np.float32)
    k = np.ones((2, 1, 3, 3), np.float32)
    if not variants.holds_skeleton(slot_file("h").read_text(), slot_file("h")):
        _matches_on_a_small_problem(_cpu.conv, "cpu-student", v["rtol"])
        return
    with pytest.raises(RuntimeError) as info:
        _cpu.conv("cpu-student", x, k)
    assert SKELETON_CPU.fullmatch(_one_line(str(info.value)))


def _matches_on_a_small_problem(conv, name: str, rtol: float) -> None:
    """The registered student variant, built from a slot holding the student's own file, on random non-zero
    inputs (a module built before the file was written still stops at the skeleton: rebuild, invoke build)."""
    shape = (2, 3, 9, 8, 4, 3)
    x, k = random_conv_inputs(np.random.default_rng(408), shape)
    rtol_, atol = tolerance(float(rtol) or variants.DEFAULT_RTOL, shape)  # a descriptor's 0: the default
    assert_close(conv(name, x, k), reference.conv2d(x, k), rtol_, atol, what=f"{name} (the slot's file) {shape}")


@needs_fixtures
def test_a_finished_file_is_not_taken_for_the_skeleton():
    """A finished new-forward.cuh keeps the skeleton's general template, CHECK sentence included (the course runs
    float only): only the float specialisation's sentence marks an unstarted slot."""
    good = FIXTURES / "good"
    assert "Remove this line and replace it with your implementation." in (good / "new-forward.cuh").read_text()
    for ext in ("h", "cuh"):
        assert not variants.holds_skeleton((good / f"new-forward.{ext}").read_text(), f"new-forward.{ext}")
    with pytest.raises(PyconvError, match="not a student slot"):
        variants.holds_skeleton("", "forward.cu")


@needs_fixtures
def test_unstarted_student_variants_skip_and_finished_ones_run(cpu_harness):
    """tests/student_variants.py: what tests over every variant use for cpu-student / gpu-student."""
    def conv_of(folder):
        def conv(name, x, k):
            y, err = cpu_harness(folder).run(x, k)
            if err:
                raise RuntimeError(err)
            return y
        return conv

    skip_if_unstarted("cpu-student", conv_of(FIXTURES / "good"))  # a finished file: the test goes on

    def unstarted(name, x, k):  # what the skeleton's forward() raises, whatever the slot holds now
        raise RuntimeError("new-forward.h:25: Check failed: 0 == 1 (0 vs. 1): Remove this line and replace it with "
                           "your implementation.")

    with pytest.raises(pytest.skip.Exception, match="still holds the course's skeleton"):
        skip_if_unstarted("cpu-student", unstarted)
    # The slot itself: skipped while it holds the skeleton, run (and not skipped) once the student has written it.
    if variants.holds_skeleton(slot_file("h").read_text(), slot_file("h")):
        with pytest.raises(pytest.skip.Exception, match="still holds the course's skeleton"):
            skip_if_unstarted("cpu-student", conv_of(SLOT))
    else:
        skip_if_unstarted("cpu-student", conv_of(SLOT))

    def failing(name, x, k):
        raise RuntimeError("new-forward.h:40: Check failed: C == 1 (3 vs. 1): this team hard-coded one channel")

    with pytest.raises(RuntimeError, match="hard-coded one channel"):  # any other error fails the calling test
        skip_if_unstarted("cpu-student", failing)
    skip_if_unstarted("cpu-not-a-student", failing)  # not a student variant: nothing is run


# ------------------------------------------------------------------------------------------------ compiles
COMPILE_FOLDERS = [SLOT] + [FIXTURES / f for f in [*OWN, "wrong_last_row"] if HAVE_FIXTURES]


@pytest.mark.parametrize("folder", COMPILE_FOLDERS, ids=lambda p: p.name)
def test_cpu_glue_compiles(tmp_path, folder):
    _compile(["g++", "-std=c++17", "-c", *_includes(folder), str(SLOT / "student_cpu.cpp"), "-o",
              str(tmp_path / "student_cpu.o")], f"native/student/student_cpu.cpp with {folder.name}")


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("folder", COMPILE_FOLDERS, ids=lambda p: p.name)
def test_gpu_glue_compiles(tmp_path, folder):
    _compile([NVCC, "-std=c++17", "-c", "-arch=sm_90", *_includes(folder), str(SLOT / "student_gpu.cu"), "-o",
              str(tmp_path / "student_gpu.o")], f"native/student/student_gpu.cu with {folder.name}")


@needs_solutions
@pytest.mark.parametrize("index", range(len(SOLUTIONS)))
def test_public_solution_compiles_unchanged(tmp_path, index):
    folder, _ = SOLUTIONS[index]
    _compile(["g++", "-std=c++17", "-c", *_includes(folder), str(SLOT / "student_cpu.cpp"), "-o",
              str(tmp_path / "student_cpu.o")], f"{folder.name}/new-forward.h")
    if NVCC:
        _compile([NVCC, "-std=c++17", "-c", "-arch=sm_90", *_includes(folder), str(SLOT / "student_gpu.cu"), "-o",
                  str(tmp_path / "student_gpu.o")], f"{folder.name}/new-forward.cuh")


# ------------------------------------------------------------------------------------------------ GPU (milestones 3+)
def _gpu_visible() -> bool:
    if NVCC is None or shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


requires_gpu = pytest.mark.skipif(not _gpu_visible(), reason="no CUDA GPU visible (or no nvcc)")
GPU_STUDENT_RTOL = 1e-2  # gpu-student's tolerance (students may use fp16; native/student/student_gpu.cu)


@pytest.mark.gpu
@requires_gpu
def test_skeleton_gpu_fails_with_the_course_sentence(gpu_harness, rng):
    skip_unless_skeleton("cuh")
    x, k = random_conv_inputs(rng, (2, 1, 12, 12, 3, 5))
    y, err = gpu_harness(SLOT).run(x, k)
    assert y is None
    assert SKELETON_GPU.fullmatch(_one_line(err)), err


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("folder", own_folders())
def test_own_gpu_files_match_the_reference(gpu_harness, rng, folder):
    rtol = RTOL
    if folder == SLOT:
        skip_while_skeleton("cuh")
        rtol = GPU_STUDENT_RTOL
    harness = gpu_harness(folder)
    for shape in random_conv_shapes(rng, 16, max_b=3, max_hw=40):
        x, k = random_conv_inputs(rng, shape)
        y, err = harness.run(x, k)
        assert err is None, f"{folder.name} {shape}: {err}"
        rtol_, atol = tolerance(rtol, shape)
        assert_close(y, reference.conv2d(x, k), rtol_, atol, what=f"{folder.name} {shape}")


@pytest.mark.gpu
@requires_gpu
@needs_fixtures
def test_wrong_gpu_file_misses_exactly_the_last_row(gpu_harness, rng):
    shape = (2, 3, 20, 22, 4, 5)
    x, k = random_conv_inputs(rng, shape)
    y, err = gpu_harness(FIXTURES / "wrong_last_row").run(x, k)
    assert err is None
    ref = reference.conv2d(x, k)
    rtol, atol = tolerance(RTOL, shape)
    assert_close(y[:, :, :-1], ref[:, :, :-1], rtol, atol, what="every row but the last")
    assert (y[:, :, -1] == 0).all()


@pytest.mark.gpu
@requires_gpu
@needs_solutions
@pytest.mark.parametrize("index", range(len(SOLUTIONS)))
def test_public_solution_matches_the_reference_on_its_network(gpu_harness, rng, index):
    folder, arch = SOLUTIONS[index]
    harness = gpu_harness(folder)
    for shape in arch_conv_shapes(arch, batch=100):
        x, k = random_conv_inputs(rng, shape)
        y, err = harness.run(x, k)
        assert err is None, f"{folder.name} {shape}: {err}"
        rtol, atol = tolerance(GPU_STUDENT_RTOL, shape)
        assert_close(y, reference.conv2d(x, k), rtol, atol, what=f"{folder.name} {arch} {shape}")


@pytest.mark.gpu
@requires_gpu
def test_registered_gpu_student_runs_the_slot():
    """After `invoke build`: pyconv._gpu lists gpu-student and runs the slot's file: the skeleton stops at its
    sentence (a clean tree), a student's own file is checked against the reference."""
    try:
        from pyconv import _gpu
    except ImportError:
        pytest.skip("pyconv._gpu not built")
    found = [v for v in _gpu.variants() if v["name"] == "gpu-student"]
    if not found:
        pytest.skip("pyconv._gpu was built without the student glue")
    (v,) = found
    assert all(v["roles"][m]["role"] == "on-request" for m in ("m3", "m4", "final"))
    if not variants.holds_skeleton(slot_file("cuh").read_text(), slot_file("cuh")):
        _matches_on_a_small_problem(_gpu.conv, "gpu-student", v["rtol"])
        return
    with pytest.raises(RuntimeError) as info:
        _gpu.conv("gpu-student", np.ones((1, 1, 6, 6), np.float32), np.ones((2, 1, 3, 3), np.float32))
    assert SKELETON_GPU.fullmatch(_one_line(str(info.value)))
