"""pyconv.native, the one importer of the native modules: PYCONV_NATIVE_DIR (a build folder of one's own, e.g. a
student's), and one-line errors that tell a module that is not built from one that is built but does not load.
Each case runs in a fresh process: a module, once imported, stays imported."""

from __future__ import annotations

import importlib.machinery
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from pyconv import native

PROBE = """
import sys
from pyconv import native
from pyconv.core.errors import PyconvError
try:
    m = native.module(sys.argv[1])
except PyconvError as e:
    print(type(e).__name__ + ": " + str(e))
else:
    print("loaded " + m.__file__)
"""


def probe(name: str, folder: Path | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != native.ENV_DIR}
    if folder is not None:
        env[native.ENV_DIR] = str(folder)
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, "-c", PROBE, name], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    (line,) = r.stdout.splitlines()
    return line


def built(name: str) -> Path:
    path = native._file_of(name, native.PACKAGE_DIR)
    if path is None:
        pytest.skip(f"pyconv.{name} is not built here")
    return path


def test_the_package_folder_by_default():
    path = built("_cpu")
    assert probe("_cpu", None) == f"loaded {path}"


def test_a_build_folder_of_ones_own(tmp_path):
    src = built("_cpu")
    shutil.copy(src, tmp_path / src.name)
    assert probe("_cpu", tmp_path) == f"loaded {tmp_path / src.name}"


def test_not_built_says_where_it_looked_and_how_to_build(tmp_path):
    line = probe("_gpu", tmp_path)
    assert line.startswith("NotBuilt: the CUDA module pyconv._gpu is not built")
    assert str(tmp_path) in line and "invoke build" in line


def _compile(tmp_path: Path, name: str, source: str) -> Path:
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    src = tmp_path / "m.cpp"
    src.write_text(source)
    out = tmp_path / f"{name}{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    subprocess.run([cxx, "-shared", "-fPIC", "-o", str(out), str(src)], check=True, capture_output=True)
    return out


def test_an_undefined_symbol_is_named_and_building_again_is_not_the_advice(tmp_path):
    """What a student build whose sources declare a function and define none looks like when it loads."""
    _compile(tmp_path, "_gpu", 'void conv_forward_student(const float*, int);\n'
                               'extern "C" void* PyInit__gpu() { conv_forward_student(nullptr, 0); return nullptr; }\n')
    line = probe("_gpu", tmp_path)
    assert line.startswith("LoadFailed: pyconv._gpu (") and "exists but does not load: undefined symbol" in line
    assert "conv_forward_student" in line  # demangled where c++filt is present, the mangled name otherwise
    if shutil.which("c++filt"):
        assert "conv_forward_student(float const*, int)" in line
    assert "nvcc" not in line and "invoke build" not in line


def test_a_file_that_is_no_module_is_reported_as_such(tmp_path):
    (tmp_path / f"_cpu{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_text("not a shared object")
    line = probe("_cpu", tmp_path)
    assert line.startswith("LoadFailed: pyconv._cpu (") and "exists but does not load" in line
    assert "invoke build" not in line


def test_no_gpu_is_its_own_error(monkeypatch):
    class Module:
        @staticmethod
        def available():
            return False

    monkeypatch.setitem(sys.modules, "pyconv._gpu", Module)
    with pytest.raises(native.NoGpu, match="no CUDA GPU is visible: milestones 3, 4 and final need one"):
        native.gpu()
    assert native.gpu(device=False) is Module
    monkeypatch.setitem(sys.modules, "pyconv._gpu", None)
    with pytest.raises(native.NotBuilt, match="pyconv._gpu is not built"):
        native.gpu(device=False)
    assert native.optional("_gpu") is None


PRECISION_NAMES = r"""
#include "common/variant.hpp"
#include <cstdio>
using pyconv::Precision;
int main() {
  for (Precision p : {Precision::Fp32, Precision::Tf32, Precision::Tf32x3, Precision::F16x3, Precision::F16})
    std::printf("%s\n", pyconv::precision_name(p));
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++")
def test_each_precision_reports_a_name_python_knows(tmp_path):
    """The descriptor's precision as the bindings report it: the split variants count as float32, one TF32 or FP16
    pass is reduced precision (pyconv.variants)."""
    from pyconv import variants

    src = tmp_path / "names.cpp"
    src.write_text(PRECISION_NAMES)
    exe = tmp_path / "names"
    subprocess.run(["g++", "-std=c++17", "-I", str(ROOT / "native"), str(src), "-o", str(exe)], check=True,
                   timeout=120)
    names = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=30).stdout.split()
    assert names == ["fp32", "tf32", "fp32", "fp32", "fp16"]
    assert set(names) == set(variants.PRECISIONS)
    assert [n for n in names if n in variants.REDUCED_PRECISIONS] == ["tf32", "fp16"]


def test_a_descriptor_says_fp16_and_is_reduced_precision():
    from pyconv import variants
    from pyconv.core.errors import PyconvError

    d = {"name": "gpu-half", "step": 23, "summary": "s", "device": "gpu", "epilogue": "none", "precision": "fp16",
         "rtol": 2e-3, "roles": {"final": {"role": "candidate", "reason": ""}}}
    v = variants.from_dict(d)
    assert v.precision == "fp16" and v.reduced_precision and v.rtol == 2e-3
    assert not variants.from_dict(dict(d, precision="fp32")).reduced_precision
    with pytest.raises(PyconvError, match="variant 'gpu-half': precision 'fp8' is none of fp32, tf32, fp16"):
        variants.from_dict(dict(d, precision="fp8"))
