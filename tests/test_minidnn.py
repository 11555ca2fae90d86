"""The Mini-DNN student slot (native/minidnn, the course since Fall 2020): per interface generation, our fixtures
written in the course's style (tests/fixtures/minidnn/<generation>/{good,wrong,broken}) and the course's skeletons
compiled behind the same glue as cpu-student / gpu-student.

Most tests build a small ctypes harness (tests/native/minidnn_harness.cpp + the glue + the student's file), so
each folder is tested without a CMake build; a few run `invoke build --edition E --student DIR` and
`invoke milestone` end to end. The GPU half is compiled with nvcc here (no GPU needed) and run where a GPU is."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, assert_close, needs_data, random_conv_inputs, random_conv_shapes

from pyconv.core import reference
from pyconv.tools import minidnn

NATIVE = ROOT / "native"
FIXTURES = ROOT / "tests" / "fixtures" / "minidnn"
HARNESS = ROOT / "tests" / "native" / "minidnn_harness.cpp"
GENERATIONS = sorted(minidnn.GPU_FILES)
RTOL, ATOL = 1e-4, 1e-4
SKELETON = re.compile(r"wrote nothing to the output \(all zeros\) from a non-zero input and kernel: is "
                      r"(cpu-new-forward\.cc|new-forward\.cu) still the course's skeleton\?")

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found")


def _gpu_visible() -> bool:
    smi = shutil.which("nvidia-smi")
    return smi is not None and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


needs_gpu_device = pytest.mark.skipif(NVCC is None or not _gpu_visible(), reason="no CUDA GPU visible")


def fixture(generation: str, kind: str) -> Path:
    """The folder holding the files (below the course's layout of that generation)."""
    return minidnn.student_folder(str(FIXTURES / generation / kind), generation, "new-forward.cu")


def stride_of(generation: str) -> bool:
    return "PYCONV_MINIDNN_STRIDE 1" in (minidnn.generation_dir(generation) / "minidnn-generation.h").read_text()


def expected(x, k, stride):
    return reference.conv2d(x, k)[:, :, ::stride, ::stride]


class Harness:
    def __init__(self, lib: Path):
        self.lib = ctypes.CDLL(str(lib))
        self.lib.pyconv_minidnn_generation.restype = ctypes.c_char_p
        self.lib.pyconv_minidnn_last_time.restype = ctypes.c_double

    def run(self, x, k, stride=1):
        """(y, None) or (None, the error line); y poisoned first."""
        b, c, h, w = x.shape
        m, _, kk, _ = k.shape
        y = np.full((b, m, (h - kk) // stride + 1, (w - kk) // stride + 1), np.nan, np.float32)
        err = ctypes.create_string_buffer(4096)
        fp = ctypes.POINTER(ctypes.c_float)
        rc = self.lib.pyconv_minidnn_conv(y.ctypes.data_as(fp), np.ascontiguousarray(x).ctypes.data_as(fp),
                                          np.ascontiguousarray(k).ctypes.data_as(fp), b, m, c, h, w, kk, stride,
                                          err, len(err))
        return (None, err.value.decode()) if rc else (y, None)


def _compile(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True)


def _includes(folder: Path, generation: str) -> list[str]:
    # As CMakeLists.txt orders them: the student's folder, the generation's headers, native/.
    return [f"-I{folder}", f"-I{minidnn.generation_dir(generation)}", f"-I{NATIVE}"]


def _cpu_cmd(folder: Path, generation: str, out: Path) -> list[str]:
    return ["g++", "-std=c++17", "-O2", "-shared", "-fPIC", *_includes(folder, generation), str(HARNESS),
            str(NATIVE / "minidnn" / "minidnn_cpu.cpp"), str(NATIVE / "cpu" / "runtime" / "registry.cpp"),
            str(folder / "cpu-new-forward.cc"), "-o", str(out)]


def _gpu_sources(folder: Path, generation: str, gpu_file: str) -> list[str]:
    srcs = [str(folder / gpu_file)]
    if re.search(r'^\s*#\s*include\s*[<"]matmul\.h[>"]', (folder / gpu_file).read_text(), re.M):
        srcs.append(str(minidnn.generation_dir(generation) / "matmul.cu"))  # as CMakeLists.txt adds it
    return srcs


@pytest.fixture(scope="session")
def cpu_harness(tmp_path_factory):
    built: dict[tuple, Harness] = {}

    def get(folder: Path, generation: str) -> Harness:
        key = (folder, generation)
        if key not in built:
            lib = tmp_path_factory.mktemp("minidnn-cpu") / "harness.so"
            r = _compile(_cpu_cmd(folder, generation, lib))
            assert r.returncode == 0, f"{folder} did not compile:\n{r.stderr[-4000:]}"
            built[key] = Harness(lib)
        return built[key]

    return get


# ------------------------------------------------------------------------------------------------ the table
def test_every_edition_maps_to_a_generation_folder_with_headers_and_skeletons():
    for edition, gen in minidnn.INTERFACE_OF.items():
        d = minidnn.generation_dir(gen)
        for f in ("minidnn-generation.h", "cpu-new-forward.h", "gpu-new-forward.h", "cpu-new-forward.cc",
                  "new-forward.cu"):
            assert (d / f).is_file(), (edition, f)
    assert set(minidnn.INTERFACE_OF.values()) == set(GENERATIONS)


def test_unknown_edition_and_gpu_file_are_one_line():
    from pyconv.core.errors import PyconvError

    with pytest.raises(PyconvError, match="'2019sp' is not a Mini-DNN edition"):
        minidnn.generation_of("2019sp")
    with pytest.raises(PyconvError, match="the 2021sp interface's GPU files are new-forward.cu"):
        minidnn.gpu_file("2021sp", "m3-forward.cu")
    assert minidnn.gpu_file("2024sp", "unroll-new-forward.cu") == "unroll-new-forward.cu"


@pytest.mark.parametrize("layout", ["flat", "custom", "Project/project/src/layer/custom"])
def test_student_folder_is_found_in_the_course_layouts(tmp_path, layout):
    inner = tmp_path if layout == "flat" else tmp_path / layout
    inner.mkdir(parents=True, exist_ok=True)
    (inner / "cpu-new-forward.cc").write_text("// empty\n")
    assert minidnn.student_folder(str(tmp_path), "2021sp", "new-forward.cu") == inner.resolve()


def test_folder_without_the_files_is_one_line(tmp_path):
    from pyconv.core.errors import PyconvError

    with pytest.raises(PyconvError, match=r"neither cpu-new-forward\.cc nor new-forward\.cu in .* custom/"):
        minidnn.student_folder(str(tmp_path), "2021sp", "new-forward.cu")


# ------------------------------------------------------------------------------------------------ CPU, per generation
@pytest.mark.parametrize("generation", GENERATIONS)
def test_good_cpu_fixture_matches_the_reference_at_random_shapes(cpu_harness, rng, generation):
    h = cpu_harness(fixture(generation, "good"), generation)
    assert h.lib.pyconv_minidnn_generation().decode() == generation
    strides = (1, 2, 3) if stride_of(generation) else (1,)
    for i, shape in enumerate(random_conv_shapes(rng, 40)):
        x, k = random_conv_inputs(rng, shape)
        s = strides[i % len(strides)]
        y, err = h.run(x, k, s)
        assert err is None, (shape, s, err)
        assert_close(y, expected(x, k, s), RTOL, ATOL, f"{generation} {shape} S={s}")
        assert h.lib.pyconv_minidnn_last_time(0) >= 0 and h.lib.pyconv_minidnn_last_time(1) >= 0


@pytest.mark.parametrize("generation", GENERATIONS)
def test_wrong_cpu_fixture_misses_the_last_row(cpu_harness, rng, generation):
    h = cpu_harness(fixture(generation, "wrong"), generation)
    x, k = random_conv_inputs(rng, (2, 3, 12, 11, 4, 3))
    y, err = h.run(x, k)
    assert err is None
    ref = expected(x, k, 1)
    assert_close(y[:, :, :-1], ref[:, :, :-1], RTOL, ATOL, generation)
    assert np.all(y[:, :, -1] == 0) and np.all(ref[:, :, -1] != 0)  # the glue's zeros, never written


@pytest.mark.parametrize("generation", [g for g in GENERATIONS if not stride_of(g)])
def test_a_stride_is_refused_where_the_interface_has_none(cpu_harness, rng, generation):
    h = cpu_harness(fixture(generation, "good"), generation)
    x, k = random_conv_inputs(rng, (1, 1, 9, 9, 1, 3))
    y, err = h.run(x, k, 2)
    assert y is None and err == f"the {generation} interface has no stride (S=2 asked)"


@pytest.mark.parametrize("generation", GENERATIONS)
def test_course_skeleton_is_one_line(cpu_harness, rng, generation):
    h = cpu_harness(minidnn.generation_dir(generation), generation)
    x, k = random_conv_inputs(rng, (1, 2, 8, 8, 3, 3))
    y, err = h.run(x, k)
    assert y is None and "\n" not in err and SKELETON.search(err), err
    assert err.startswith("cpu-student: conv_forward_cpu wrote nothing")


@pytest.mark.parametrize("generation", GENERATIONS)
def test_broken_cpu_fixture_does_not_compile(tmp_path, generation):
    r = _compile(_cpu_cmd(fixture(generation, "broken"), generation, tmp_path / "h.so"))
    assert r.returncode != 0 and "cpu-new-forward.cc" in r.stderr and "error" in r.stderr


# ------------------------------------------------------------------------------------------------ GPU, per generation
def _gpu_file_cases():
    cases = []
    for g in GENERATIONS:
        for kind in ("good", "wrong", "broken"):
            cases.append((g, kind, "new-forward.cu"))
        cases.append((g, "skeleton", "new-forward.cu"))
    cases.append(("2024sp", "good", "unroll-new-forward.cu"))
    return cases


def _gpu_folder(generation, kind):
    return minidnn.generation_dir(generation) if kind == "skeleton" else fixture(generation, kind)


@pytest.mark.slow
@needs_nvcc
@pytest.mark.parametrize(("generation", "kind", "gpu_file"), _gpu_file_cases(),
                         ids=[f"{g}-{k}-{f}" for g, k, f in _gpu_file_cases()])
def test_cu_files_compile_with_nvcc_behind_the_glue(tmp_path, generation, kind, gpu_file):
    """Compiled, not linked: what `invoke build --target minidnn_gpu_student` does, on one architecture."""
    folder = _gpu_folder(generation, kind)
    for src in [str(NATIVE / "minidnn" / "minidnn_gpu.cu"), *_gpu_sources(folder, generation, gpu_file)]:
        r = _compile(["nice", "-n", "10", NVCC, "-std=c++17", "-c", "-arch=sm_90", *_includes(folder, generation),
                      src, "-o", str(tmp_path / (Path(src).name + ".o"))])
        if kind == "broken" and src.endswith(gpu_file):
            assert r.returncode != 0 and "undeclared_name" in r.stderr, r.stderr[-2000:]
        else:
            assert r.returncode == 0, f"{src}:\n{r.stderr[-4000:]}"


@pytest.fixture(scope="session")
def gpu_harness(tmp_path_factory):
    built: dict[tuple, Harness] = {}

    def get(folder: Path, generation: str, gpu_file: str = "new-forward.cu") -> Harness:
        key = (folder, generation, gpu_file)
        if key not in built:
            lib = tmp_path_factory.mktemp("minidnn-gpu") / "harness.so"
            r = _compile([NVCC, "-std=c++17", "-O2", "-arch=native", "-shared", "-Xcompiler", "-fPIC",
                          *_includes(folder, generation), "-x", "cu", str(HARNESS),
                          str(NATIVE / "minidnn" / "minidnn_gpu.cu"), str(NATIVE / "cuda" / "runtime" / "registry.cu"),
                          *_gpu_sources(folder, generation, gpu_file), "-o", str(lib)])
            assert r.returncode == 0, f"{folder}/{gpu_file} did not compile:\n{r.stderr[-4000:]}"
            built[key] = Harness(lib)
        return built[key]

    return get


@pytest.mark.gpu
@needs_gpu_device
@pytest.mark.parametrize(("generation", "gpu_file"), [(g, "new-forward.cu") for g in GENERATIONS] +
                         [("2024sp", "unroll-new-forward.cu")])
def test_good_gpu_fixture_matches_the_reference_and_records_both_times(gpu_harness, rng, generation, gpu_file):
    h = gpu_harness(fixture(generation, "good"), generation, gpu_file)
    strides = (1, 2, 3) if stride_of(generation) else (1,)
    for i, shape in enumerate(random_conv_shapes(rng, 30)):
        x, k = random_conv_inputs(rng, shape)
        s = strides[i % len(strides)]
        y, err = h.run(x, k, s)
        assert err is None, (shape, s, err)
        assert_close(y, expected(x, k, s), RTOL, ATOL, f"{generation} {shape} S={s}")
        op, layer = h.lib.pyconv_minidnn_last_time(0), h.lib.pyconv_minidnn_last_time(1)
        assert 0 <= op <= layer


@pytest.mark.gpu
@needs_gpu_device
@pytest.mark.parametrize("generation", GENERATIONS)
def test_wrong_gpu_fixture_misses_the_last_row_and_skeleton_is_one_line(gpu_harness, rng, generation):
    x, k = random_conv_inputs(rng, (2, 3, 12, 11, 4, 3))
    y, err = gpu_harness(fixture(generation, "wrong"), generation).run(x, k)
    ref = expected(x, k, 1)
    # the last row is never written: zeros, or whatever the student's own cudaMalloc held (2020fa copies it back)
    assert err is None and not np.allclose(y[:, :, -1], ref[:, :, -1])
    assert_close(y[:, :, :-1], ref[:, :, :-1], RTOL, ATOL, generation)
    y, err = gpu_harness(minidnn.generation_dir(generation), generation).run(x, k)
    assert y is None and SKELETON.search(err) and err.startswith("gpu-student: GPUInterface wrote nothing"), err


# ------------------------------------------------------------------------------------------------ end to end (CPU)
def invoke(*args, env=None, timeout=900):
    import os

    return subprocess.run([sys.executable, "-m", "invoke", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def build(edition: str, folder: Path):
    r = invoke("build", "--edition", edition, "--student", folder, "--target", "_cpu")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    bdir = minidnn.build_dir(str(folder), minidnn.generation_of(edition), "new-forward.cu")
    assert f"built and imported {bdir}" in r.stdout


def correctness(out: str) -> float:
    """The run's accuracy: the course's `Test Accuracy` line (a Mini-DNN edition) or the project's `Correctness`."""
    return float(re.search(r"^(?:Correctness|Test Accuracy): (\S+)", out, re.M).group(1))


@pytest.mark.slow
@needs_data
# The CPU convolution milestone as each edition numbered it: 2020fa's m2, m1 from 2021sp on.
@pytest.mark.parametrize(("edition", "generation", "m"), [("2020fa", "2020fa", 2), ("2023fa", "2023fa", 1)])
def test_good_fixture_through_build_and_milestone_gives_cpu_naive_correctness(tmp_path, edition, generation, m):
    folder = FIXTURES / generation / "good"
    build(edition, folder)
    env = {"PYCONV_LOGS": str(tmp_path)}
    r = invoke("milestone", "--m", m, "--edition", edition, "--student", folder, "--batch", 100, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    # the course's lines, the Op Time from the student slot's own clock
    assert r.stdout.count("Conv-CPU==") == 2, r.stdout
    assert len(re.findall(r"^Op Time: [0-9.e+-]+ ms$", r.stdout, re.M)) == 2, r.stdout
    assert "Layer check: 2 conv layer(s) match the reference" in r.stdout
    naive = invoke("milestone", "--m", 2, "--impl", "cpu-naive", "--model", "ece408-86", "--batch", 100, env=env)
    assert naive.returncode == 0, naive.stdout + naive.stderr
    assert correctness(r.stdout) == correctness(naive.stdout)


@pytest.mark.slow
@needs_data
def test_wrong_fixture_is_caught_by_the_layer_check_and_skeleton_is_one_line(tmp_path):
    env = {"PYCONV_LOGS": str(tmp_path)}
    folder = FIXTURES / "2022fa" / "wrong"
    build("2023sp", folder)
    r = invoke("milestone", "--m", 1, "--edition", "2023sp", "--student", folder, "--batch", 100, env=env)
    assert r.returncode != 0
    assert re.search(r"^error: layer check: conv1 \(cpu-student\) does not match the reference", r.stdout, re.M), \
        r.stdout
    skeleton = minidnn.generation_dir("2021sp")
    build("2021fa", skeleton)
    r = invoke("milestone", "--m", 1, "--edition", "2021fa", "--student", skeleton, "--batch", 10, env=env)
    assert r.returncode != 0 and "Traceback" not in r.stdout + r.stderr
    errors = [line for line in r.stdout.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and SKELETON.search(errors[0]), r.stdout


@pytest.mark.slow
def test_broken_fixture_build_fails_in_one_line():
    r = invoke("build", "--edition", "2021fa", "--student", FIXTURES / "2021sp" / "broken", "--target", "_cpu")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("error: the build failed"), r.stderr[-2000:]
