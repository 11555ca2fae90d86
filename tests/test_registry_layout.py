"""Adding a variant touches exactly one new file (docs/architecture.md, "Adding a variant"): in a temporary copy of the
native tree, a throwaway CPU variant (native/cpu/kernels/) and a throwaway GPU variant (native/cuda/kernels/) are
added as files and nothing else, CMake configures and builds the modules, and the registries list them in ladder
order with the roles their files state. The CPU one also runs and is checked against the numpy reference; the GPU one
is compiled and imported only (variants() needs no GPU). A duplicate name or step is refused when the module loads. A
student's folder (PYCONV_STUDENT_DIR) is compiled only when its header is there, ahead of native/.

Builds only the targets it needs, for CUDA architecture 90 only; the GPU copy keeps GPU_KERNELS_KEPT of the
ladder (the runtime does not depend on any particular ladder file, as in a student handout, which has none: there
the copies hold the throwaway variants alone, and the expectations below follow this build's registry)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from built_variants import CPU_VARIANTS, GPU_VARIANTS, M2_DEFAULT

ROOT = Path(__file__).resolve().parent.parent
GPU_KERNELS_KEPT = ("conv_00_baseline.cu",)
# What the copies list besides the throwaway variants: this build's ladder without the student's (step order), and
# of the GPU ladder the step-0 file kept (none in a student handout).
LADDER_CPU = [v.name for v in CPU_VARIANTS if not v.student]
KEPT_GPU = [v.name for v in GPU_VARIANTS if v.step == 0 and not v.student
            and (ROOT / "native" / "cuda" / "kernels" / GPU_KERNELS_KEPT[0]).exists()]

pytestmark = pytest.mark.slow

CPU_VARIANT = r"""
// A test's throwaway CPU variant: the seven-loop convolution with the image loop innermost-but-one.
#include "cpu/runtime/registry.hpp"

namespace pyconv {
namespace {

void conv_fwd_cpu_throwaway(const float* x, const float* k, float* y, const ConvShape& s) {
  const int64_t Ho = s.Ho(), Wo = s.Wo();
  for (int64_t m = 0; m < s.M; ++m)
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t h = 0; h < Ho; ++h)
        for (int64_t w = 0; w < Wo; ++w) {
          float acc = 0.0f;
          for (int64_t c = 0; c < s.C; ++c)
            for (int64_t p = 0; p < s.K; ++p)
              for (int64_t q = 0; q < s.K; ++q)
                acc += x[((b * s.C + c) * s.H + h + p) * s.W + w + q] * k[((m * s.C + c) * s.K + p) * s.K + q];
          y[((b * s.M + m) * Ho + h) * Wo + w] = acc;
        }
}

std::string supports_throwaway(const ConvShape& s) {
  return s.K > 5 ? "cpu-throwaway: K <= 5 only" : "";
}

}  // namespace

PYCONV_REGISTER_CPU_CONV(CpuConvVariant{
    .name = "cpu-throwaway",
    .step = 7,
    .summary = "a test's throwaway CPU variant",
    .rtol = 1e-5,
    .launch = conv_fwd_cpu_throwaway,
    .supports = supports_throwaway,
    .roles = {.m2 = on_request("added by a test")},
});

}  // namespace pyconv
"""

GPU_VARIANT = r"""
// A test's throwaway GPU variant: one thread per output element (compiled, never run by the test).
#include "cuda/runtime/cuda_check.cuh"
#include "cuda/runtime/registry.cuh"

namespace pyconv {
namespace {

__global__ void throwaway_kernel(const float* x, const float* k, float* y, int C, int H, int W, int M, int K,
                                 int Ho, int Wo, long long n) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int w = int(i % Wo), h = int(i / Wo % Ho), m = int(i / Wo / Ho % M);
  const long long b = i / Wo / Ho / M;
  float acc = 0.0f;
  for (int c = 0; c < C; ++c)
    for (int p = 0; p < K; ++p)
      for (int q = 0; q < K; ++q)
        acc += x[((b * C + c) * H + h + p) * W + w + q] * k[((m * C + c) * K + p) * K + q];
  y[i] = acc;
}

void conv_fwd_gpu_throwaway(const float* x, const float* k, float* y, const ConvShape& s, cudaStream_t st) {
  const long long n = s.y_size();
  throwaway_kernel<<<unsigned((n + 255) / 256), 256, 0, st>>>(x, k, y, int(s.C), int(s.H), int(s.W), int(s.M),
                                                             int(s.K), int(s.Ho()), int(s.Wo()), n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-throwaway",
    .step = 42,
    .summary = "a test's throwaway GPU variant",
    .launch = conv_fwd_gpu_throwaway,
    .roles = {.m3 = on_request("added by a test"), .m4 = candidate(), .final = never("added by a test")},
});

}  // namespace pyconv
"""


def _cublas_root() -> str | None:
    """The PyPI wheel's cuBLAS folder, as `invoke build` finds it (None: rely on the CUDA toolkit's)."""
    try:
        import nvidia
    except ImportError:
        return None
    for base in nvidia.__path__:
        for sub in ("cu13", "cublas", "cu12"):
            if (Path(base) / sub / "include" / "cublas_v2.h").exists():
                return str(Path(base) / sub)
    return None


def _run(argv: list, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A configured copy of the native tree with one throwaway variant file added per device."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake not found")
    src = tmp_path_factory.mktemp("tree")
    shutil.copy2(ROOT / "CMakeLists.txt", src / "CMakeLists.txt")
    shutil.copytree(ROOT / "native", src / "native", ignore=shutil.ignore_patterns("__pycache__"))
    kernels = src / "native" / "cuda" / "kernels"
    for f in kernels.glob("conv_*.cu"):
        if f.name not in GPU_KERNELS_KEPT:
            f.unlink()
    # The documented touch points: one new file each, nothing else edited (a handout has no kernels/ folders yet).
    (src / "native" / "cpu" / "kernels").mkdir(parents=True, exist_ok=True)
    kernels.mkdir(parents=True, exist_ok=True)
    (src / "native" / "cpu" / "kernels" / "conv_cpu_throwaway.cpp").write_text(CPU_VARIANT)
    (kernels / "conv_42_throwaway.cu").write_text(GPU_VARIANT)

    no_student = src / "no-student"  # the student half of the build stays off: only the ladder is listed
    no_student.mkdir()
    build, modules = src / "build", src / "modules"
    configure(src, build, modules, no_student)
    return src, build, modules


def configure(src: Path, build_dir: Path, modules: Path, student_dir: Path) -> str:
    import pybind11

    args = ["cmake", "-S", src, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}", f"-DPython_EXECUTABLE={sys.executable}",
            "-DPYCONV_NATIVE_ARCH=OFF", "-DCMAKE_CUDA_ARCHITECTURES=90", f"-DPYCONV_MODULE_DIR={modules}",
            f"-DPYCONV_STUDENT_DIR={student_dir}"]
    if _cublas_root():
        args.append(f"-DPYCONV_CUBLAS_ROOT={_cublas_root()}")
    r = _run(args)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def build(build_dir: Path, target: str) -> None:
    r = _run(["cmake", "--build", build_dir, "--target", target, "--parallel", "2"])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]


def variants_of(modules: Path, module: str) -> list[dict]:
    """`module`.variants() from the built copy, in a child (the package's own modules stay loaded here)."""
    code = (f"import json, sys; sys.path.insert(0, {str(modules)!r}); import {module}; "
            f"print(json.dumps({module}.variants()))")
    r = _run([sys.executable, "-c", code])
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


PLAN = """
import json, sys
from pyconv import plan, variants
from pyconv.plan import ConvSite

sites = [ConvSite(0, "conv1", 2, 1, 12, 12, 4, 5, True), ConvSite(1, "conv2", 2, 4, 4, 4, 8, 3, False)]
vs = variants.all_variants()
out = {"m2 takes": [v.name for v in vs if v.device == "cpu" and v.role("2").role != "never"]}
for m, impl in json.loads(sys.argv[1]):
    try:
        out[f"{m} {impl}"] = plan.plan(m, sites, vs, impl=impl).impls
    except Exception as e:
        out[f"{m} {impl}"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def plans_of(modules: Path, asks: list) -> dict:
    """pyconv.plan with the copy's modules (PYCONV_NATIVE_DIR), in a child: {"m2 takes": [...], "<m> <impl>": ...}"""
    env = {**os.environ, "PYCONV_NATIVE_DIR": str(modules), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", PLAN, json.dumps(asks)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_new_cpu_variant_file_is_registered_and_runs(tree):
    src, build_dir, modules = tree
    build(build_dir, "_cpu")
    vs = variants_of(modules, "_cpu")
    names = [v["name"] for v in vs]
    assert names == [*LADDER_CPU, "cpu-throwaway"]  # step order: 0, 1, 7
    v = vs[-1]
    assert v["step"] == 7 and v["device"] == "cpu" and v["rtol"] == pytest.approx(1e-5)
    assert v["roles"]["m2"] == {"role": "on-request", "reason": "added by a test"}
    assert v["roles"]["m3"] == {"role": "never", "reason": "not a GPU variant"}

    # It computes: the copy's module on random inputs against the numpy reference, and its support check.
    code = (
        f"import sys, numpy as np; sys.path.insert(0, {str(modules)!r}); import _cpu\n"
        "rng = np.random.default_rng(0)\n"
        "x = rng.uniform(-1, 1, (2, 3, 9, 11)).astype(np.float32)\n"
        "k = rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)\n"
        "np.save(sys.argv[1], np.stack([_cpu.conv(n, x, k) for n in sys.argv[2:]]))\n"
        "print(_cpu.why_unsupported('cpu-throwaway', 1, 1, 9, 9, 1, 7))\n")
    out = src / "y.npy"
    r = _run([sys.executable, "-c", code, out, *names])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "cpu-throwaway: K <= 5 only"
    ys = np.load(out)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (2, 3, 9, 11)).astype(np.float32)
    k = rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
    from pyconv.core import reference

    for name, got in zip(names, ys, strict=True):  # the throwaway and every variant of the copy's ladder
        np.testing.assert_allclose(got, reference.conv2d(x, k), rtol=1e-5, atol=1e-5, err_msg=name)

    # Milestone 2 takes it with --impl (its role), and its default stays the ladder's (cpu-fast); a copy without
    # one (a handout's) runs the first variant that runs on request: this one.
    got = plans_of(modules, [["2", "cpu-throwaway"], ["2", None]])
    assert got["m2 takes"] == [*LADDER_CPU, "cpu-throwaway", "numpy"]
    assert got["2 cpu-throwaway"] == ["cpu-throwaway"] * 2
    assert got["2 None"] == [M2_DEFAULT or "cpu-throwaway"] * 2


def test_a_new_gpu_variant_file_is_compiled_and_registered(tree):
    src, build_dir, modules = tree
    r = _run(["cmake", "--build", build_dir, "--target", "help"])
    if " _gpu" not in r.stdout:
        pytest.skip("CMake configured no GPU module (no GPU visible: PYCONV_GPU=AUTO; or no nvcc or cuBLAS)")
    build(build_dir, "_gpu")
    vs = variants_of(modules, "_gpu")
    assert [(v["name"], v["step"]) for v in vs] == [*((n, 0) for n in KEPT_GPU), ("gpu-throwaway", 42)]
    v = vs[-1]
    assert v["device"] == "gpu" and v["rtol"] == pytest.approx(1e-4) and v["precision"] == "fp32"
    assert v["epilogue"] == "none" and v["x_on_host"] is False and v["reads_u8"] is False
    assert v["roles"] == {"m2": {"role": "never", "reason": "not a CPU variant"},
                          "m3": {"role": "on-request", "reason": "added by a test"},
                          "m4": {"role": "candidate", "reason": ""},
                          "final": {"role": "never", "reason": "added by a test"}}
    if KEPT_GPU:
        assert vs[0]["roles"]["m3"]["role"] == "default"

    # The Plan: --impl runs it on every layer where its role allows; final refuses it with its file's reason.
    got = plans_of(modules, [["4", "gpu-throwaway"], ["3", "gpu-throwaway"], ["final", "gpu-throwaway"],
                             ["4", None]])
    assert got["4 gpu-throwaway"] == got["3 gpu-throwaway"] == ["gpu-throwaway"] * 2
    assert got["final gpu-throwaway"] == ("PyconvError: --impl gpu-throwaway is not allowed in the final "
                                          "milestone: added by a test")
    # no milestone-4 default in this copy: its first candidate (the kept baseline, else the throwaway)
    assert got["4 None"] == [(KEPT_GPU or ["gpu-throwaway"])[0]] * 2


@pytest.mark.parametrize("clash", ["name", "step"])
def test_a_duplicate_name_or_step_is_refused_when_the_module_loads(tree, clash):
    src, build_dir, modules = tree
    dup = src / "native" / "cpu" / "kernels" / "conv_cpu_duplicate.cpp"
    text = CPU_VARIANT.replace("conv_fwd_cpu_throwaway", "conv_fwd_cpu_duplicate")
    text = text.replace(".step = 7", ".step = 8") if clash == "name" else text.replace('"cpu-throwaway"', '"cpu-other"')
    dup.write_text(text)
    try:
        build(build_dir, "_cpu")
        r = _run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(modules)!r}); import _cpu"])
    finally:
        dup.unlink()
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: invalid CPU variant registry:")
    if clash == "name":
        assert "two CPU variants named 'cpu-throwaway'" in last
    else:
        assert "both claim step 7" in last
    assert "conv_cpu_throwaway.cpp" in last and "conv_cpu_duplicate.cpp" in last


STUDENT_GLUE = r"""
// A test's stand-in for the student glue: the student's header, registered as a CPU variant.
#include "new-forward.h"
#include "cpu/runtime/registry.hpp"
// One header name in both native/ and the student's folder: the student's must win.
#include "which_folder.h"
static_assert(kWhichFolder == 2, "the student's folder must come before native/ on the include path");

namespace pyconv {
PYCONV_REGISTER_CPU_CONV(CpuConvVariant{
    .name = "cpu-student",
    .step = 100,
    .summary = "the student's convolution",
    .launch = student_conv,
    .roles = {.m2 = on_request("a student's variant")},
});
}  // namespace pyconv
"""

STUDENT_HEADER = r"""
#pragma once
#include "common/conv_shape.hpp"

inline void student_conv(const float* x, const float* k, float* y, const pyconv::ConvShape& s) {
  for (int64_t i = 0; i < s.y_size(); ++i) y[i] = 0.0f;
  (void)x;
  (void)k;
}
"""


def test_student_files_are_compiled_only_when_present(tmp_path):
    """PYCONV_STUDENT_DIR: without new-forward.h the glue is skipped; with it, the glue is compiled with the
    student's folder before native/ on the include path and its variant registers."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake not found")
    src = tmp_path / "tree"
    src.mkdir()
    shutil.copy2(ROOT / "CMakeLists.txt", src / "CMakeLists.txt")
    shutil.copytree(ROOT / "native", src / "native", ignore=shutil.ignore_patterns("__pycache__"))
    glue = src / "native" / "student"
    shutil.rmtree(glue, ignore_errors=True)
    glue.mkdir()
    (glue / "student_cpu.cpp").write_text(STUDENT_GLUE)
    (src / "native" / "which_folder.h").write_text("#pragma once\nconstexpr int kWhichFolder = 1;\n")
    student = tmp_path / "student"
    student.mkdir()
    (student / "which_folder.h").write_text("#pragma once\nconstexpr int kWhichFolder = 2;\n")
    build_dir, modules = tmp_path / "build", tmp_path / "modules"

    configure(src, build_dir, modules, student)  # no new-forward.h yet: skipped
    build(build_dir, "_cpu")
    assert [v["name"] for v in variants_of(modules, "_cpu")] == LADDER_CPU

    (student / "new-forward.h").write_text(STUDENT_HEADER)
    out = configure(src, build_dir, modules, student)
    assert "_cpu includes the student's" in out
    build(build_dir, "_cpu")
    vs = variants_of(modules, "_cpu")
    assert [v["name"] for v in vs] == [*LADDER_CPU, "cpu-student"]
    assert vs[-1]["roles"]["m2"] == {"role": "on-request", "reason": "a student's variant"}
