"""Hostile input and faults, one section per class of the hardening issue, met as a careless or hostile user
meets them: through `python -m invoke`, from any folder, with damaged files, signals and full disks. Each class
has at least one test that fails on the code before the fix. (The fuzz test, test_fuzz.py, mutates the same
kinds of files at random; test_bad_input.py holds the earlier one-line checks.)"""

from __future__ import annotations

import gzip
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from built_variants import CPU, M2_DEFAULT, M2_PICK, needs
from conftest import ROOT, needs_data
from gpu_helpers import random_model
from test_mxnet_import import lenet, node, write_params, write_symbol

from pyconv.core import data, fileio, mxnet_import, paths
from pyconv.core.errors import PyconvError
from pyconv.core.model import save_model

MEMORY = 2 << 30  # address space allowed to a task in the memory-bound tests (an interpreter with numpy: ~0.2 GB)


def invoke(*args, cwd=ROOT, env=None, timeout=300, memory=None, fsize=None, root=None):
    """`python -m invoke ARGS` as a user runs it; root: run it from outside the checkout with `-r ROOT`."""
    def limits():
        if memory:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG, like ENOSPC
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    argv = [sys.executable, "-m", "invoke", *(["-r", str(root)] if root else []), *map(str, args)]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, preexec_fn=limits)


def assert_one_line(r, *msgs: str, code: int = 1):
    out = r.stdout + r.stderr
    assert r.returncode == code, f"exit {r.returncode}\n{out}"
    assert "Traceback" not in out, out
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{r.stderr}"
    assert lines[0].startswith("error: ") and lines[0].isprintable(), lines[0]
    assert not lines[0].startswith(("error: internal error", "error: out of memory")), lines[0]
    for msg in msgs:
        assert msg in lines[0], lines[0]
    return lines[0]


def everything_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def a_model(path: Path, name: str = "m", size: int = 28) -> Path:
    save_model(random_model(np.random.default_rng(1), (1, size, size), name=name), path)
    return path


def a_checkpoint(folder: Path, nodes_edit=None) -> tuple[Path, Path]:
    arrays, nodes = lenet(np.random.default_rng(3))
    if nodes_edit:
        nodes = nodes_edit(nodes)
    folder.mkdir(parents=True, exist_ok=True)
    sym, params = folder / "net-symbol.json", folder / "net-0001.params"
    write_params(params, arrays)
    write_symbol(sym, nodes)
    return sym, params


def source_folder() -> Path:
    if data._folder_has_all(data.SYSTEM_DIR):
        return data.SYSTEM_DIR
    pytest.skip("no local Fashion-MNIST source folder")


# ------------------------------------------------------------------------------- 1: from any folder
def _cases(tmp: Path) -> dict:
    sym, params = a_checkpoint(tmp / "ckpt")
    cpu_bench = ROOT / "tests/fixtures/results-before/bench-cpu-intel-r-xeon-r-processor-2026-11-22.json"
    return {
        "models": (["models"], {}, 0, "ece408"),
        "data": (["data"], {}, 0, "up to date"),
        "data-source": (["data", "--source", tmp / "nowhere"], {}, 1, "--source"),
        "setup": (["setup", "--source", tmp / "nowhere"], {}, 1, "--source"),
        "build": (["build", "--jobs", "x"], {}, 2, "--jobs"),
        "import-mxnet": (["import-mxnet", "--symbol", sym, "--params", params, "--name", "anywhere",
                          "--input-size", 14], {"PYCONV_DATASETS": str(tmp / "ds")}, 0, "wrote"),
        "milestone": (["milestone", "--m", 2, "--batch", 10, "--impl", M2_PICK], {}, 0, "Correctness: "),
        "profile": (["profile", "--m", 3, "--batch", 0], {}, 2, "batch must be"),
        "sanitize": (["sanitize", "--timeout", "soon"], {}, 1, "--timeout"),
        "accuracy-table": (["accuracy-table"], {"PYCONV_DATASETS": str(tmp / "empty"), "PYCONV_DATA_FILE": str(paths.DATA_FILE)},
                           1, "no shipped models"),
        "bench": (["bench", "--cpu", "--model", "sp19", "--batch", 1, "--reps", 1, "--variants", M2_DEFAULT or CPU[0],
                   "--out", tmp / "b.json"], {}, 0, "wrote"),
        "report": (["report", "--json", cpu_bench, "--out", tmp / "r.md"], {}, 0, "wrote"),
        "train": (["train", "--arch", "fa17", "--name", "anywhere", "--max-batches", 1, "--epochs", 1],
                  {"PYCONV_DATASETS": str(tmp / "ds"), "PYCONV_DATA_FILE": str(paths.DATA_FILE)}, 0, "wrote"),
    }


@needs_data
@pytest.mark.parametrize("where", ["subfolder", "outside"])
@pytest.mark.parametrize("task", ["models", "data", "data-source", "setup", "build", "import-mxnet", "milestone",
                                  "profile", "sanitize", "accuracy-table", "bench", "report", "train"])
def test_every_task_works_from_any_folder(tmp_path, where, task):
    """Class 1: from a folder of the checkout (tests/) and from outside it with `invoke -r PATH`, each task
    does what it does from the root: the milestone child finds the package, relative paths stay the user's."""
    if task == "train":
        pytest.importorskip("torch")
    if task == "report":
        pytest.importorskip("matplotlib")  # without it: one line naming the extra (tests/test_optional.py)
    args, env, code, said = _cases(tmp_path)[task]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    r = invoke(*args, cwd=ROOT / "tests" if where == "subfolder" else outside,
               root=ROOT if where == "outside" else None, env={"PYCONV_LOGS": str(tmp_path / "logs"), **env})
    assert "No module named" not in r.stdout + r.stderr, r.stdout + r.stderr
    if code:
        assert_one_line(r, said, code=code)
    else:
        assert r.returncode == 0 and said in r.stdout, r.stdout + r.stderr


@needs_data
def test_a_relative_model_path_keeps_its_meaning_in_the_child(tmp_path):
    a_model(tmp_path / "mine.h5", name="mine")
    r = invoke("milestone", "--m", 2, "--batch", 10, "--model", "mine.h5", "--impl", M2_PICK, cwd=tmp_path,
               root=ROOT, env={"PYCONV_LOGS": str(tmp_path / "logs")})
    assert r.returncode == 0 and "Model: mine" in r.stdout, r.stdout + r.stderr


# ------------------------------------------------------------------------------- 2: huge declared datasets
def huge_model(path: Path, consistent: bool) -> Path:
    """A valid model whose conv1 weight is replaced by a chunked, never-written dataset declaring gigabytes (a
    few KB on disk): 4x1x40000x40000 as in the audit (25 GB), or, consistent with the layer spec (every size
    within its bound), 4096x1x4096x4096 (275 GB)."""
    a_model(path)
    shape = (4096, 1, 4096, 4096) if consistent else (4, 1, 40000, 40000)
    with h5py.File(path, "r+") as f:
        del f["weights/conv1/weight"]
        f.create_dataset("weights/conv1/weight", shape=shape, dtype=np.float32, chunks=(1, 1, 64, 64))
        if consistent:
            layers = json.loads(f.attrs["layers"])
            layers[0].update(out_channels=4096, kernel=4096)
            f.attrs["layers"] = json.dumps(layers)
    assert path.stat().st_size < 1 << 20
    return path


@pytest.mark.parametrize("consistent,msg", [(False, "which disagrees with the layer"),
                                            (True, "declares (4096, 1, 4096, 4096)")])
def test_a_tiny_file_declaring_a_huge_weight_is_refused_before_it_is_read(tmp_path, consistent, msg):
    """Class 2: the shape is checked against the layer spec and the weight bound from the header alone, within
    a 2 GB address space and seconds."""
    path = huge_model(tmp_path / "huge.h5", consistent)
    start = time.monotonic()
    r = invoke("milestone", "--m", 2, "--batch", 10, "--model", path, memory=MEMORY,
               env={"PYCONV_LOGS": str(tmp_path / "logs")})
    assert_one_line(r, msg)
    assert time.monotonic() - start < 60
    assert everything_under(tmp_path / "logs") == []


@needs_data
def test_a_small_model_that_needs_more_memory_than_there_is_is_refused_before_the_run(tmp_path):
    """Class 2, at run time: every size within the file bounds (a 0.5 MB file), yet 2000 channels of 44x44 per
    image are 145 GB at batch 10000: refused in one line before the child starts, not left to the OOM killer."""
    from pyconv.core.model import Layer, Model

    rng = np.random.default_rng(0)
    model = Model(name="wide", arch="test", input_shape=(1, 48, 48), layers=[
        Layer("conv", name="conv1", out_channels=2000, kernel=5, weight=rng.random((2000, 1, 5, 5), np.float32)),
        Layer("pool", mode="max", kernel=22, stride=22), Layer("flatten"),
        Layer("fc", name="fc1", out_features=10, weight=rng.random((10, 8000), np.float32),
              bias=np.zeros(10, np.float32)), Layer("softmax")])
    save_model(model, tmp_path / "wide.h5")
    r = invoke("milestone", "--m", 2, "--batch", 10000, "--model", tmp_path / "wide.h5",
               env={"PYCONV_LOGS": str(tmp_path / "logs")})
    assert_one_line(r, "milestone 2 on model 'wide' at batch 10000 needs about", "a smaller --batch needs less")
    assert everything_under(tmp_path / "logs") == []


def test_models_lists_past_a_huge_file_in_imported(tmp_path):
    imported = tmp_path / "datasets" / "models" / "imported"
    imported.mkdir(parents=True)
    huge_model(imported / "huge.h5", consistent=False)
    r = invoke("models", memory=MEMORY, env={"PYCONV_DATASETS": str(tmp_path / "datasets")})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "huge             unreadable: " in r.stdout and "disagrees with the layer" in r.stdout


# ------------------------------------------------------------------------------- 3: no shell strings
def test_build_flags_reach_no_shell(tmp_path):
    """Class 3: the audit's injection is refused as a value (before, the shell ran `touch pwned`)."""
    r = invoke("build", "--cuda-arch", '90" ; touch pwned; echo "', "--build-dir", tmp_path / "b", cwd=tmp_path,
               root=ROOT)
    assert_one_line(r, "--cuda-arch must be")
    assert not (tmp_path / "pwned").exists() and not (ROOT / "pwned").exists()
    assert not (tmp_path / "b").exists(), "nothing is configured for a refused flag"


def test_configure_arguments_are_one_argument_each(tmp_path):
    from pyconv.tools import build

    args = build.configure_args(tmp_path / "a b; touch x", debug=False, portable=False, cuda_arch="80;90")
    assert args[args.index("-B") + 1] == str(tmp_path / "a b; touch x")
    assert "-DCMAKE_CUDA_ARCHITECTURES=80;90" in args
    for value in ("native", "90", "80;90", "90a-real", "all-major", "80,90"):
        assert build.check_cuda_arch(value)
    for value in ("90; rm -rf ~", "$(id)", "9", "90 ", "`x`", ""):
        with pytest.raises(PyconvError):
            build.check_cuda_arch(value)


def test_clean_never_deletes_a_folder_cmake_did_not_make(tmp_path):
    keep = tmp_path / "precious"
    keep.mkdir()
    (keep / "thesis.tex").write_text("years of work")
    r = invoke("build", "--clean", "--build-dir", keep)
    assert_one_line(r, "not a CMake build folder")
    assert (keep / "thesis.tex").exists()
    for where in (".", "..", str(ROOT)):
        assert_one_line(invoke("build", "--clean", "--build-dir", where), "is the checkout or a folder above it")


def _cache(bdir: Path) -> dict[str, str]:
    out = {}
    for line in (bdir / "CMakeCache.txt").read_text().splitlines():
        if ":" in line and "=" in line and not line.startswith(("//", "#")):
            key, value = line.split("=", 1)
            out[key.split(":")[0]] = value
    return out


@pytest.mark.slow
def test_build_in_a_path_with_spaces_names_a_missing_symbol_and_keeps_no_flag(tmp_path):
    """Class 3 and issue 13 (items 4, 5): a copy of the checkout under a path with spaces, built from outside
    with `invoke -r` into a build folder with spaces (CPU module only: CUDACXX points nowhere, for time).
    Without the CPU registry's source the module links but cannot import: the build fails in one line naming
    the symbol. Restored, it builds and imports; --debug --portable and --cuda-arch apply to that build only."""
    copy = tmp_path / "a checkout" / "py conv"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if (ROOT / rel).is_file():
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, copy / rel)
    registry = copy / "native" / "cpu" / "runtime" / "registry.cpp"
    original = registry.read_text()
    registry.unlink()
    env = {"CUDACXX": "/nonexistent"}
    common = ("build", "--build-dir", "b u i l d", "--jobs", 2)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    r = invoke(*common, "--debug", cwd=outside, root=copy, env=env, timeout=900)
    # CMake and the compiler speak above it; the build's verdict is the one last line.
    assert r.returncode == 1 and "Traceback" not in r.stdout + r.stderr, r.stdout[-3000:] + r.stderr
    line = r.stderr.strip().splitlines()[-1]
    for said in ("error: _cpu", "does not import", "undefined symbol pyconv::cpu_conv_registry()",
                 "a source file missing from the build"):
        assert said in line, line
    registry.write_text(original)
    bdir = copy / "b u i l d"
    r = invoke(*common, "--debug", "--portable", "--cuda-arch", 90, cwd=outside, root=copy, env=env, timeout=900)
    assert r.returncode == 0 and "built and imported" in r.stdout, r.stdout[-3000:] + r.stderr
    cache = _cache(bdir)
    assert (cache["CMAKE_BUILD_TYPE"], cache["PYCONV_NATIVE_ARCH"], cache["CMAKE_CUDA_ARCHITECTURES"]) == \
        ("Debug", "OFF", "90")
    r = invoke(*common, cwd=outside, root=copy, env=env, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    cache = _cache(bdir)
    assert (cache["CMAKE_BUILD_TYPE"], cache["PYCONV_NATIVE_ARCH"]) == ("Release", "ON")
    assert "CMAKE_CUDA_ARCHITECTURES" not in cache, "a plain build returns to the default architectures"


# ------------------------------------------------------------------------------- 4: the MXNet graph
def _dangling(nodes):  # the audit's case: a relu fed by the first conv that nothing consumes
    return [*nodes[:-1], node("Activation", "dangling_relu", [2], act_type="relu"), nodes[-1]]


def _cycle(nodes):
    nodes[3]["inputs"] = [[5, 0, 0]]
    return nodes


def _param_from_op(nodes):  # the second conv's weight is the output of the first activation
    nodes[6]["inputs"] = [[4, 0, 0], [3, 0, 0]]
    return nodes


@pytest.mark.parametrize("edit,msg", [
    (_dangling, "node 'dangling_relu' (Activation) is not on the path from the input to the output"),
    (_cycle, "takes an input from a later node"),
    (_param_from_op, "takes the output of 'activation0' as a parameter"),
])
def test_symbol_graph_off_the_path_or_cyclic_is_refused(tmp_path, edit, msg):
    """Class 4: the graph is walked from `heads`; before, the dangling relu was spliced into the network."""
    sym, params = a_checkpoint(tmp_path / "ckpt", edit)
    r = invoke("import-mxnet", "--symbol", sym, "--params", params, "--name", "net", "--input-size", 14,
               env={"PYCONV_DATASETS": str(tmp_path / "ds")})
    assert_one_line(r, msg)
    assert everything_under(tmp_path / "ds") == []


def test_heads_must_name_one_output(tmp_path):
    sym, params = a_checkpoint(tmp_path / "ckpt")
    graph = json.loads(sym.read_text())
    for heads in ([], [[16, 0, 0], [10, 0, 0]], [[99, 0, 0]], "x"):
        sym.write_text(json.dumps({**graph, "heads": heads}))
        with pytest.raises(PyconvError, match="'heads' must name exactly one output node"):
            mxnet_import.import_checkpoint(sym, params, "net", input_size=14, dest_dir=tmp_path / "out")
    sym.write_text(json.dumps({**graph, "heads": [[0, 0, 0]]}))  # the input itself: no layer at all
    with pytest.raises(PyconvError):
        mxnet_import.import_checkpoint(sym, params, "net", input_size=14, dest_dir=tmp_path / "out")
    assert everything_under(tmp_path / "out") == []


# ------------------------------------------------------------------------------- 5: faults mid-write
def test_sigterm_during_data_leaves_nothing_and_says_so(tmp_path):
    """Class 5: SIGTERM while `invoke data --force` works: one line, 128 + 15, nothing in the destination."""
    src = source_folder()
    dest = tmp_path / "ds"
    proc = subprocess.Popen([sys.executable, "-m", "invoke", "data", "--force", "--train", "--source", str(src)],
                            cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYCONV_DATASETS": str(dest),
                                 "PYCONV_DATA_FILE": str(dest / "fashion-mnist.h5")})
    assert proc.stdout.readline().startswith("reading Fashion-MNIST")
    time.sleep(2)  # reading, checking and resizing: a minute of work
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)  # a loaded 2-core machine took over 60 s
    r = subprocess.CompletedProcess(proc.args, proc.returncode, out, err.splitlines()[-1] + "\n" if err else "")
    assert "Traceback" not in err, err
    assert_one_line(r, "stopped by SIGTERM", code=128 + signal.SIGTERM)
    assert everything_under(dest) == []


_KILLED_WRITER = """
import os, signal, sys
sys.path.insert(0, {root!r})
from pyconv.core.fileio import atomic_path
with atomic_path({dest!r}) as tmp:
    tmp.write_text("half of it")
    if {hold}:
        print("writing", flush=True)
        sys.stdin.read()
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_writers_temporary_is_removed_by_the_next_write_a_live_ones_is_not(tmp_path):
    """Class 5: SIGKILL cannot be caught; the temporary folder it leaves carries no lock, and the next write of
    the same file removes it, while a writer still alive keeps its own."""
    dest = tmp_path / "out" / "result.json"

    def writer(hold: bool):
        return subprocess.Popen([sys.executable, "-c", _KILLED_WRITER.format(root=str(ROOT), dest=str(dest),
                                                                              hold=hold)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    killed = writer(hold=False)
    killed.communicate(timeout=60)
    assert killed.returncode == -signal.SIGKILL
    stale = [p for p in dest.parent.iterdir() if p.name.startswith(".result.json.")]
    assert len(stale) == 1 and (stale[0] / "result.json").read_text() == "half of it"
    alive = writer(hold=True)
    assert alive.stdout.readline() == "writing\n"
    fileio.write_text_atomic(dest, "whole")
    assert dest.read_text() == "whole"
    left = [p for p in dest.parent.iterdir() if p.name.startswith(".result.json.")]
    assert len(left) == 1 and left[0] != stale[0], "the stale folder goes, the live writer's stays"
    alive.kill()
    alive.communicate(timeout=60)
    fileio.write_text_atomic(dest, "again")
    assert everything_under(dest.parent) == ["result.json"]


def test_a_write_that_fails_midway_is_one_line_and_leaves_nothing(tmp_path):
    """Class 5: a file size limit makes the model's write fail as a full disk does (before: HDF5 raised inside
    its writer and the interpreter crashed on the way out, exit 139)."""
    sym, params = a_checkpoint(tmp_path / "ckpt")
    dest = tmp_path / "ds"
    r = invoke("import-mxnet", "--symbol", sym, "--params", params, "--name", "net", "--input-size", 14,
               fsize=4096, env={"PYCONV_DATASETS": str(dest)})
    assert_one_line(r, "cannot write", "net.h5", "nothing was written")
    assert not list(dest.rglob("*.h5")) and not list(dest.rglob(".*")), everything_under(dest)


def test_free_space_is_checked_before_the_work(tmp_path, monkeypatch):
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(fileio.shutil, "disk_usage", lambda p: usage(1 << 30, 1 << 30, 5 << 20))
    with pytest.raises(PyconvError, match=rf"needs up to {data.EXPECTED_BYTES['test'] >> 20} MB .* only 5 MB are free"):
        data.prepare(dest=tmp_path / "fm.h5", force=True)
    assert everything_under(tmp_path) == []


# ------------------------------------------------------------------------------- 6: failing early, one line
def test_bench_out_that_cannot_be_written_fails_before_the_benchmark(tmp_path):
    """Class 6: before, `invoke bench --out DIR` ran the whole benchmark and then printed a traceback."""
    afile = tmp_path / "a-file"
    afile.write_text("")
    for out, msg in ((tmp_path, "is a folder"), (afile / "b.json", "is a file, not a folder"),
                     (tmp_path / ("x" * 300 + ".json"), "is longer than the 255 bytes a file name")):
        start = time.monotonic()
        r = invoke("bench", "--cpu", "--model", "sp19", "--out", out)
        assert_one_line(r, msg)
        assert "CPU variants" not in r.stdout and time.monotonic() - start < 30


@needs_data
def test_logs_that_is_a_file_fails_before_the_child(tmp_path):
    logs = tmp_path / "logs"
    logs.write_text("not a folder")
    r = invoke("milestone", "--m", 2, "--batch", 10, env={"PYCONV_LOGS": str(logs)})
    assert_one_line(r, "is a file, not a folder")
    assert "Loading" not in r.stdout


@pytest.fixture
def unwritable(tmp_path) -> Path:
    """A folder nothing can be created in: read-only by its mode, or (root ignores modes) under /sys."""
    if os.geteuid() != 0:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    try:
        fd, probe = tempfile.mkstemp(dir="/sys")
    except OSError:
        yield Path("/sys/pyconv-datasets")
        return
    os.close(fd)
    os.unlink(probe)
    pytest.skip("no folder here refuses root")


def test_unwritable_datasets_fail_before_the_data_is_read(unwritable, tmp_path):
    r = invoke("data", "--force", env={"PYCONV_DATASETS": str(unwritable),
                                       "PYCONV_DATA_FILE": str(unwritable / "fashion-mnist.h5")})
    assert_one_line(r, "cannot be written")
    assert "reading Fashion-MNIST" not in r.stdout


@pytest.mark.parametrize("layers,msg", [
    ("[" * 20000 + "]" * 20000, "nested too deeply"),
    (json.dumps([{"type": "conv", "name": "conv1", "out_channels": "4", "kernel": 5}]), "'out_channels' must be"),
    (json.dumps([{"type": ["conv"]}]), "must be an object with a 'type'"),
    (json.dumps({"type": "conv"}), "must be a list of"),
    (json.dumps([{"type": "conv", "name": "conv1", "out_channels": 4, "kernel": 5.0}]), "'kernel' must be"),
], ids=["deep", "string-count", "list-type", "object", "float-kernel"])
def test_layers_json_nested_or_of_the_wrong_type_is_one_line(tmp_path, layers, msg):
    path = a_model(tmp_path / "m.h5")
    with h5py.File(path, "r+") as f:
        f.attrs["layers"] = layers
    assert_one_line(invoke("milestone", "--m", 3, "--model", path, env={"PYCONV_LOGS": str(tmp_path)}), msg)


def _bench_without(tmp_path: Path, drop) -> Path:
    doc = json.loads((ROOT / "tests/fixtures/results-before/bench-nvidia-h200-2026-11-23.json").read_text())
    drop(doc)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("drop,msg", [
    (lambda d: d["layers"][0].pop("B"), "is malformed: LayerResult: no 'B'"),
    (lambda d: d["layers"][0]["variants"][0].update(ms="fast"), "Stats: expected an object, got str"),
    (lambda d: d.update(layers={"not": "a list"}), "LayerResult: expected an object"),
    (lambda d: d["goals"].append(7), "Goal: expected an object, got int"),
    # Of the right shape, of the wrong type: the field's declared type is checked at load, and named.
    (lambda d: d["layers"][0]["variants"][2]["ms"].update(median="fast"), "Stats: 'median' must be float, got str"),
    (lambda d: d["layers"][1].update(floor_ms=None), "LayerResult: 'floor_ms' must be float, got NoneType"),
], ids=["missing", "retyped", "not-a-list", "goal", "median-text", "floor-none"])
def test_report_names_a_malformed_bench_file_in_one_line(tmp_path, drop, msg):
    out = tmp_path / "out"
    r = invoke("report", "--json", _bench_without(tmp_path, drop), "--out", out / "r.md")
    assert_one_line(r, "bench.json", msg)
    assert everything_under(out) == []


# ------------------------------------------------------------------------------- 7: bounded reads
def test_a_gzip_bomb_as_source_is_not_inflated(tmp_path):
    """Class 7: 4 GB of zeros in 4 MB of gzip as the training images; at most the real file's size (plus one
    byte) is ever inflated, within a 2 GB address space."""
    src = tmp_path / "src"
    src.mkdir()
    for name in data.FILES:
        (src / f"{name}.gz").write_bytes(gzip.compress(b"x"))
    (src / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(bytes(64 << 20), 9) * 64)
    start = time.monotonic()
    r = invoke("data", "--source", src, "--force", "--train", memory=MEMORY,
               env={"PYCONV_DATASETS": str(tmp_path / "ds")})
    assert_one_line(r, "decompresses to more than 47040016 bytes")
    assert time.monotonic() - start < 60
    assert everything_under(tmp_path / "ds") == []


@pytest.mark.parametrize("which", ["--params", "--symbol"])
def test_dev_zero_as_a_checkpoint_file_is_refused_unread(tmp_path, which):
    sym, params = a_checkpoint(tmp_path / "ckpt")
    args = {"--symbol": sym, "--params": params, which: "/dev/zero"}
    r = invoke("import-mxnet", *[v for kv in args.items() for v in kv], "--name", "net", "--input-size", 14,
               memory=MEMORY, timeout=60, env={"PYCONV_DATASETS": str(tmp_path / "ds")})
    assert_one_line(r, "/dev/zero is not a regular file")


def test_reads_are_bounded_by_what_a_file_may_hold(tmp_path):
    big = tmp_path / "big.params"
    with open(big, "wb") as f:
        f.truncate(mxnet_import.MAX_PARAMS_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(PyconvError, match="a valid one is at most"):
        mxnet_import.read_params(big)
    fifo = tmp_path / "fifo.h5"
    os.mkfifo(fifo)
    from pyconv.core.model import read_model_file

    with pytest.raises(PyconvError, match="is not a regular file"):
        read_model_file(fifo)


# ------------------------------------------------------------------------------- 8: foreign data files
def foreign_data_file(path: Path, count: int = 10000, images="u1", labels="i8", label_max: int = 9) -> Path:
    """A well-formed HDF5 file in this format's layout, at 48x48 only, with chunked, never-written images (the
    file stays small whatever it declares)."""
    with h5py.File(path, "w") as f:
        f.attrs["format"] = data.FORMAT
        f.attrs["version"] = data.VERSION
        f.create_dataset("test/images_48", shape=(count, 48, 48), dtype=images, chunks=(100, 48, 48),
                         fillvalue=np.nan if images[0] == "f" else 0)
        values = np.arange(count) % (label_max + 1)
        f["test/labels"] = values.astype(labels) if labels[0] in "iu" else values.astype(str).astype(labels)
    return path


@needs_data
@pytest.mark.parametrize("kwargs,msg", [
    ({"count": 100}, "test/labels is (100,) int64; this format holds 10000 integer labels"),
    ({"images": "f4"}, "test/images_48 is (10000, 48, 48) float32"),
    ({"labels": "S2"}, "this format holds 10000 integer labels"),
    ({"label_max": 12}, "test/labels holds values outside 0..9"),
])
def test_a_foreign_data_file_is_refused_before_the_run(tmp_path, kwargs, msg):
    """Class 8: before, 100 images answered --batch 10000 (and the log said b10000); NaN images and string
    labels gave a Correctness and exit 0."""
    path = foreign_data_file(tmp_path / "foreign.h5", **kwargs)
    r = invoke("milestone", "--m", 2, "--batch", 10000,
               env={"PYCONV_DATA_FILE": str(path), "PYCONV_LOGS": str(tmp_path / "logs")})
    assert_one_line(r, msg, "run `invoke data --force`")
    assert "Correctness" not in r.stdout and everything_under(tmp_path / "logs") == []


# ------------------------------------------------------------------------------- 9: native code
@pytest.mark.parametrize("name", CPU)
def test_out_sharing_memory_with_x_or_k_is_refused(name):
    """Class 9: before, an `out` overlapping x was accepted and the two variants disagreed."""
    from student_variants import skip_if_unstarted

    from pyconv import _cpu

    buf = np.ones(1000, np.float32)
    x = buf[:64].reshape(1, 1, 8, 8)
    k = buf[900:909].reshape(1, 1, 3, 3)
    for out, what in ((buf[10:46].reshape(1, 1, 6, 6), "x"), (buf[880:916].reshape(1, 1, 6, 6), "k")):
        with pytest.raises(ValueError, match=f"out: shares memory with {what}"):
            _cpu.conv(name, x, k, out)
    skip_if_unstarted(name, _cpu.conv)  # the refusals above are the runtime's; the sum below is the variant's
    beside = buf[64:100].reshape(1, 1, 6, 6)  # adjacent, not overlapping
    np.testing.assert_allclose(_cpu.conv(name, x, k, beside), np.full((1, 1, 6, 6), 9.0))


_ALLOC_FAILS = """
import resource, sys
sys.path.insert(0, {root!r})
import numpy as np
from pyconv import _cpu
_cpu.conv("cpu-fast", np.ones((2, 1, 8, 8), np.float32), np.ones((1, 1, 3, 3), np.float32))  # threads started
x = np.zeros((1, 64, 1024, 1024), np.float32)  # 256 MB, never touched: each thread's copy would be as large
k = np.ones((1, 64, 1, 1), np.float32)
out = np.empty((1, 1, 1024, 1024), np.float32)
vm = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + (64 << 20), vm + (64 << 20)))
try:
    _cpu.conv("cpu-fast", x, k, out)
except MemoryError:
    print("MemoryError")
"""


@needs("cpu-fast")
def test_cpu_fast_allocation_failure_raises_instead_of_ending_the_process():
    """Class 9: a buffer that cannot be allocated inside the OpenMP region (before: std::terminate, SIGABRT)."""
    r = subprocess.run([sys.executable, "-c", _ALLOC_FAILS.format(root=str(ROOT))], capture_output=True, text=True,
                       timeout=120)
    assert (r.returncode, r.stdout.strip()) == (0, "MemoryError"), (r.returncode, r.stdout, r.stderr)


# ------------------------------------------------------------------------------- 10: small ones
@pytest.mark.parametrize("task", ["import-mxnet", "train"])
def test_a_model_name_ending_in_a_newline_is_refused(tmp_path, task):
    sym, params = a_checkpoint(tmp_path / "ckpt")
    args = (["import-mxnet", "--symbol", sym, "--params", params, "--input-size", 14] if task == "import-mxnet"
            else ["train", "--arch", "sp19"])
    r = invoke(*args, "--name", "mynet\n", env={"PYCONV_DATASETS": str(tmp_path / "ds")})
    assert_one_line(r, "model name must be", "'mynet\\n'")
    assert everything_under(tmp_path / "ds") == []


def test_escape_codes_in_a_models_name_never_reach_the_terminal(tmp_path):
    path = a_model(tmp_path / "datasets" / "models" / "imported" / "ansi.h5")
    with h5py.File(path, "r+") as f:
        f.attrs["name"] = "\x1b[2J\x1b[31mowned"
    r = invoke("milestone", "--m", 3, "--model", path)
    assert_one_line(r, "attribute 'name' must be", "\\x1b[2J")
    r = invoke("models", env={"PYCONV_DATASETS": str(tmp_path / "datasets")})
    assert r.returncode == 0 and "ansi             unreadable:" in r.stdout, r.stdout + r.stderr
    assert "\x1b" not in r.stdout + r.stderr


def test_models_lists_past_a_fifo_and_an_unreadable_file(tmp_path):
    imported = tmp_path / "datasets" / "models" / "imported"
    imported.mkdir(parents=True)
    os.mkfifo(imported / "fifo.h5")
    (imported / "junk.h5").write_text("not HDF5")
    a_model(imported / "good.h5", name="good")
    (imported / "folder.h5").mkdir()
    r = invoke("models", timeout=60, env={"PYCONV_DATASETS": str(tmp_path / "datasets")})
    assert r.returncode == 0, r.stdout + r.stderr
    names = [line.split()[0] for line in r.stdout.splitlines()]
    assert names == ["good", "junk"], r.stdout
    assert "junk             unreadable: " in r.stdout


@needs_data
def test_data_source_is_checked_even_when_the_data_is_up_to_date(tmp_path):
    assert_one_line(invoke("data", "--source", tmp_path / "nowhere"), "--source", "missing")
    r = invoke("data", "--source", source_folder())
    assert r.returncode == 0 and "up to date (--source" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("batch", ["\u0661\u0660\u0660", "1_0", " 10", "10\n", "\uff11\uff10"])
def test_only_ascii_digits_make_a_batch(tmp_path, batch):
    r = invoke("milestone", "--m", 2, "--batch", batch, env={"PYCONV_LOGS": str(tmp_path)})
    assert_one_line(r, "--batch must be an integer between 1 and 10000", code=2)
    assert everything_under(tmp_path) == []
