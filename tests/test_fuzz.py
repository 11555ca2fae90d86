"""Fuzzing the inputs a user hands the project (Hypothesis): model files, MXNet checkpoints, idx files and bench
JSON, each mutated by truncation, bit flips, fields of the wrong type, huge declared sizes and deep nesting, then
given to the task that reads it, through the command line as a user would run it.

Whatever the mutation, the task must either succeed or end with the project's own one-line error (exit status
1, `error: ...` on stderr, no traceback, not the last-resort "internal error" or "out of memory" lines), within
a memory bound (RLIMIT_AS: 1 GiB above the interpreter) and a time bound, leaving no file behind and changing
no existing file. Runs go through a fork server (fuzz_worker.py) so that a crash or a hang is a finding, not the
end of the test session.

Examples per target: PYCONV_FUZZ_EXAMPLES scales them (default 1: about a minute on two cores); runs are
derandomized, so a CI failure reproduces."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import ROOT
from gpu_helpers import random_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyconv.core import data
from pyconv.core.model import save_model

SCALE = float(os.environ.get("PYCONV_FUZZ_EXAMPLES", "1"))
MEMORY = 1 << 30  # bytes a run may add to the interpreter's address space
TIMEOUT = 30  # seconds per run


def fuzz_settings(n: int):
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None, derandomize=True, database=None,
                    print_blob=True, suppress_health_check=list(HealthCheck))


def _digest(p: Path) -> str:
    st_ = p.lstat()
    if st_.st_size > 64 << 20:  # the sparse 10 GB file: its size and times say whether it was touched
        return f"{st_.st_size}:{st_.st_mtime_ns}:{st_.st_ctime_ns}"
    return hashlib.sha256(p.read_bytes()).hexdigest()


def tree_digest(*folders: Path) -> dict[str, str]:
    """Every file under the folders, by path, with its SHA-256: what a run must leave unchanged."""
    out = {}
    for folder in folders:
        if folder.is_file():
            out[str(folder)] = _digest(folder)
            continue
        for p in sorted(folder.rglob("*")) if folder.exists() else []:
            if p.is_file() and not p.is_symlink():
                out[str(p)] = _digest(p)
    return out


def leftovers(folder: Path) -> list[str]:
    """Everything under `folder` (hidden temporaries and empty folders included)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


class Worker:
    """The fork server (fuzz_worker.py), started with the environment the tasks read at import."""

    def __init__(self, scratch: Path, env: dict):
        self.scratch = scratch
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("fuzz_worker.py"))],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, **env, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                                          "MPLBACKEND": "Agg", "PYCONV_DEBUG": ""}, cwd=scratch)
        assert json.loads(self.proc.stdout.readline()).get("ready"), "the fuzz worker did not start"

    def run(self, *argv) -> tuple[int, str, str]:
        out, err = self.scratch / "stdout.txt", self.scratch / "stderr.txt"
        req = {"argv": [str(a) for a in argv], "cwd": str(self.scratch), "out": str(out), "err": str(err),
               "timeout": TIMEOUT, "memory": MEMORY}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        return reply["status"], out.read_text(errors="replace"), err.read_text(errors="replace")

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


def check_outcome(status: int, stdout: str, stderr: str, what: str) -> bool:
    """True when the run succeeded; asserts that otherwise it failed the project's way."""
    shown = f"{what}\nstatus {status}\nstdout:\n{stdout[-2000:]}\nstderr:\n{stderr[-2000:]}"
    assert status != -14, f"timed out after {TIMEOUT}s: {shown}"
    assert status in (0, 1), f"died (negative: a signal) or escaped the CLI: {shown}"
    assert "Traceback" not in stdout + stderr, shown
    if status == 0:
        assert stderr == "", shown
        return True
    lines = stderr.splitlines()
    assert len(lines) == 1 and stderr.endswith("\n"), f"not one line: {shown}"
    assert lines[0].startswith("error: "), shown
    assert not lines[0].startswith(("error: internal error", "error: out of memory")), shown
    assert lines[0].isprintable(), shown
    return False


# ------------------------------------------------------------------------------------------- mutations
HUGE_INTS = [0, -1, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**64 - 1]
DEEP = "\x00DEEP\x00"  # replaced by 100000 nested brackets after json.dumps (which cannot nest that deep)
LONG_NUMBER = "\x00NUMBER\x00"  # replaced by a 5000-digit integer (past Python's int() digit limit)
HOSTILE_TEXT = ["", "\x1b[31mred\x1b[0m", "a\nb", "../../etc/passwd", "x" * 5000, "\u0661\u0660\u0660", "1_000",
                "NaN", "0x10", "-5", "(5, 5)", "(99999999999, 1)"]

json_scalar = st.one_of(st.none(), st.booleans(), st.sampled_from(HUGE_INTS), st.integers(-(2**70), 2**70),
                        st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(HOSTILE_TEXT),
                        st.text(max_size=12), st.just(DEEP), st.just(LONG_NUMBER))
json_value = st.recursive(json_scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                             st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                          max_leaves=6)


def _dump(doc) -> bytes:
    text = json.dumps(doc)
    text = text.replace(json.dumps(DEEP), "[" * 100000 + "]" * 100000)
    return text.replace(json.dumps(LONG_NUMBER), "1" + "0" * 5000).encode()


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


# A mutation is drawn first, as plain data whose shape never depends on the file it will damage (so Hypothesis
# can replay and shrink it), then applied: positions and choices among a file's fields are taken modulo what the
# file has.
json_edit = st.tuples(st.integers(0, 1 << 16), st.sampled_from(["delete", "replace", "replace", "nest"]), json_value)
json_edits = st.lists(json_edit, min_size=1, max_size=3)
byte_edit = st.fixed_dictionaries({
    "action": st.sampled_from(["truncate", "flip", "flip", "span", "field"]),
    "at": st.lists(st.integers(0, 1 << 24), min_size=1, max_size=8), "bit": st.integers(0, 7),
    "span": st.binary(min_size=1, max_size=16), "hot": st.booleans(), "width": st.sampled_from([4, 8]),
    "value": st.sampled_from(HUGE_INTS)})


def mutate_json(doc, edits):
    """Delete, retype or replace fields anywhere in `doc` (a fresh copy), or nest one deeply."""
    doc = json.loads(json.dumps(doc))
    for index, action, value in edits:
        paths = list(_paths(doc))
        path = paths[index % len(paths)]
        if not path:
            return {"delete": None, "replace": value, "nest": DEEP}[action]
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if action == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = value if action == "replace" else DEEP
    return doc


def mutate_bytes(blob: bytes, edit: dict, hot: list[int] | None = None) -> bytes:
    """Truncate, flip bits, overwrite a span, or write a huge integer over a header field (one of `hot`)."""
    b = bytearray(blob)
    n = max(1, len(b))
    at = [i % n for i in edit["at"]]
    if edit["action"] == "truncate":
        return bytes(b[:at[0]])
    if edit["action"] == "flip":
        for i in at:
            b[i] ^= 1 << edit["bit"]
    elif edit["action"] == "span":
        b[at[0]:at[0] + 16] = edit["span"]
    else:
        i = hot[edit["at"][0] % len(hot)] if hot and edit["hot"] else at[0]
        b[i:i + edit["width"]] = (edit["value"] % (1 << (8 * edit["width"]))).to_bytes(edit["width"], "little")
    return bytes(b)


# ------------------------------------------------------------------------------------------- model files
@pytest.fixture(scope="module")
def model_blob(tmp_path_factory) -> Path:
    """The base model file (a path: Hypothesis prints a failing example's arguments, and bytes would flood it)."""
    path = tmp_path_factory.mktemp("model") / "base.h5"
    save_model(random_model(np.random.default_rng(11), (1, 28, 28), name="fuzz"), path)
    return path


H5_VALUES = st.one_of(st.sampled_from(HUGE_INTS[:8]), st.floats(allow_nan=True), st.sampled_from(HOSTILE_TEXT),
                      st.just(np.arange(6, dtype=np.int64)), st.just(np.array([[1, 28], [28, 1]])),
                      st.just(np.array([b"1", b"28", b"28"])), st.just(np.float64(1.0)), st.just(b"\xff\xfe bytes"))
DATASETS = ["weights/conv1/weight", "weights/conv2/weight", "weights/fc1/weight", "weights/fc1/bias",
            "weights/fc2/weight", "weights/fc2/bias"]


model_edit = st.fixed_dictionaries({
    "what": st.sampled_from(["attr", "layers", "layers", "dataset", "dataset", "bytes-only"]),
    "key": st.sampled_from(["format", "version", "name", "arch", "input_shape", "description", "layers"]),
    "delete": st.booleans(), "value": H5_VALUES, "json": json_edits, "dataset": st.sampled_from(DATASETS),
    "kind": st.sampled_from(["dtype", "shape", "huge", "group", "scalar", "missing", "nan"]),
    "dtype": st.sampled_from(["f8", "i4", "u1", "?", "S4"]), "dims": st.lists(st.integers(0, 9), max_size=5),
    "axis": st.integers(0, 3), "huge": st.sampled_from([40000, 2**20, 2**31]), "bytes": st.none() | byte_edit})


def mutate_model(path: Path, edit: dict) -> None:
    """One structural change through HDF5 (an attribute, the layers JSON, a dataset), then maybe bytes."""
    with h5py.File(path, "r+") as f:
        if edit["what"] == "attr":
            if edit["delete"]:
                del f.attrs[edit["key"]]
            else:
                f.attrs[edit["key"]] = edit["value"]
        elif edit["what"] == "layers":
            f.attrs["layers"] = _dump(mutate_json(json.loads(f.attrs["layers"]), edit["json"])).decode()
        elif edit["what"] == "dataset":
            key = edit["dataset"]
            old = f[key][()]
            del f[key]
            kind = edit["kind"]
            if kind == "dtype":
                f[key] = old.astype(edit["dtype"])
            elif kind == "shape":
                f[key] = np.ones(edit["dims"], np.float32)
            elif kind == "huge":  # chunked and never written: a few bytes on disk, terabytes declared
                dims = list(old.shape)
                dims[edit["axis"] % len(dims)] = edit["huge"]
                f.create_dataset(key, shape=dims, dtype=np.float32, chunks=tuple(1 for _ in dims))
            elif kind == "group":
                f.create_group(key)
            elif kind == "scalar":
                f[key] = np.float32(1)
            elif kind == "nan":
                f[key] = np.full(old.shape, np.nan, np.float32)
    if edit["bytes"] is not None:
        path.write_bytes(mutate_bytes(path.read_bytes(), edit["bytes"]))


@pytest.fixture
def model_worker(tmp_path):
    env = {"PYCONV_DATASETS": str(tmp_path / "datasets"), "PYCONV_LOGS": str(tmp_path / "logs"),
           "PYCONV_DATA_FILE": str(tmp_path / "no-data.h5")}
    w = Worker(tmp_path, env)
    yield w
    w.close()


@given(model_edit, st.booleans())
@fuzz_settings(120)
def test_fuzz_model_files(model_worker, model_blob, edit, listing):
    """`invoke milestone` on a mutated model file (it reads and validates the model, then stops at the missing
    data file), or `invoke models` with it in imported/ (which lists damaged files as unreadable)."""
    scratch = model_worker.scratch
    imported = scratch / "datasets" / "models" / "imported"
    shutil.rmtree(scratch / "datasets", ignore_errors=True)
    path = scratch / "input" / "fuzz.h5"
    path.parent.mkdir(exist_ok=True)
    shutil.copy(model_blob, path)
    mutate_model(path, edit)
    if listing:
        imported.mkdir(parents=True)
        shutil.copy(path, imported / "fuzz.h5")
    before = tree_digest(path.parent, scratch / "datasets")
    if listing:
        ok = check_outcome(*model_worker.run("models"), "invoke models")
        assert ok, "a damaged model must not fail the listing"
    else:
        status, out, err = model_worker.run("milestone", "--m", "3", "--batch", "10", "--model", path)
        check_outcome(status, out, err, "invoke milestone")
        assert status == 1  # a valid model stops at the missing data file
    assert tree_digest(path.parent, scratch / "datasets") == before
    assert leftovers(scratch / "logs") == []


# ------------------------------------------------------------------------------------------- MXNet checkpoints
def params_blob(arrays: dict) -> tuple[bytes, list[int]]:
    """An MXNet .params file (v2 headers) and the offsets of its header fields (counts, ndims, dims, type flags,
    name lengths): where a huge integer hurts most."""
    out = bytearray(struct.pack("<QQQ", 0x112, 0, len(arrays)))
    hot = [16]
    for arr in arrays.values():
        hot += [len(out), len(out) + 4, len(out) + 8]
        out += struct.pack("<IiI", 0xF993FAC9, 0, arr.ndim)
        hot += [len(out) + 8 * i for i in range(arr.ndim)]
        out += struct.pack(f"<{arr.ndim}q", *arr.shape)
        hot.append(len(out) + 8)
        out += struct.pack("<iii", 1, 0, 0) + arr.astype("<f4").tobytes()
    hot.append(len(out))
    out += struct.pack("<Q", len(arrays))
    for name in arrays:
        hot.append(len(out))
        b = f"arg:{name}".encode()
        out += struct.pack("<Q", len(b)) + b
    return bytes(out), hot


class Checkpoint:
    """The base checkpoint: symbol graph, .params bytes and their header fields' offsets (a short repr: Hypothesis
    prints a failing example's arguments)."""

    def __init__(self):
        from test_mxnet_import import lenet

        arrays, nodes = lenet(np.random.default_rng(3))
        self.blob, self.hot = params_blob(arrays)
        self.graph = {"nodes": nodes, "arg_nodes": [], "heads": [[len(nodes) - 1, 0, 0]]}

    def __repr__(self):
        return "Checkpoint(lenet, seed 3)"


@pytest.fixture(scope="module")
def checkpoint():
    return Checkpoint()


@pytest.fixture
def import_worker(tmp_path):
    w = Worker(tmp_path, {"PYCONV_DATASETS": str(tmp_path / "datasets"), "PYCONV_LOGS": str(tmp_path / "logs")})
    yield w
    w.close()


symbol_edit = st.fixed_dictionaries({
    "what": st.sampled_from(["json", "json", "dangling", "cycle", "heads", "bytes"]), "node": st.integers(0, 64),
    "target": st.integers(0, 64), "json": json_edits, "bytes": byte_edit,
    "heads": st.sampled_from([[], [[0, 0, 0]], [[3, 0, 0], [16, 0, 0]], [[99, 0, 0]], "x"])})


def mutate_symbol(graph: dict, edit: dict) -> bytes:
    graph = json.loads(json.dumps(graph))
    nodes = graph["nodes"]
    what = edit["what"]
    if what == "dangling":  # an extra op that nothing consumes
        nodes.insert(len(nodes) - 1, {"op": "Activation", "name": "dangling", "attrs": {"act_type": "relu"},
                                      "inputs": [[edit["node"] % (len(nodes) - 1), 0, 0]]})
        graph["heads"] = [[len(nodes) - 1, 0, 0]]
    elif what == "cycle":  # a node fed by itself or a later one
        i = 1 + edit["node"] % (len(nodes) - 1)
        nodes[i]["inputs"] = [[i + edit["target"] % (len(nodes) - i), 0, 0]]
    elif what == "heads":
        graph["heads"] = edit["heads"]
    elif what == "json":
        graph = mutate_json(graph, edit["json"])
    blob = _dump(graph)
    return mutate_bytes(blob, edit["bytes"]) if what == "bytes" else blob


@given(st.sampled_from(["symbol", "params", "both"]), symbol_edit, byte_edit)
@fuzz_settings(120)
def test_fuzz_mxnet_checkpoints(import_worker, checkpoint, target, sym_edit, params_edit):
    """`invoke import-mxnet` on a mutated symbol or .params file: a model file, or one line and no file."""
    graph, blob, hot = checkpoint.graph, checkpoint.blob, checkpoint.hot
    scratch = import_worker.scratch
    shutil.rmtree(scratch / "datasets", ignore_errors=True)
    inputs = scratch / "input"
    inputs.mkdir(exist_ok=True)
    sym, params = inputs / "net-symbol.json", inputs / "net-0001.params"
    sym.write_bytes(mutate_symbol(graph, sym_edit) if target != "params" else _dump(graph))
    params.write_bytes(mutate_bytes(blob, params_edit, hot) if target != "symbol" else blob)
    before = tree_digest(inputs)
    status, out, err = import_worker.run("import-mxnet", "--symbol", sym, "--params", params, "--name", "fuzz",
                                         "--input-size", "14")
    made = leftovers(scratch / "datasets")
    if check_outcome(status, out, err, "invoke import-mxnet"):
        # A graph that is not one chain from the input to one output is never a network to splice together.
        assert target == "params" or sym_edit["what"] not in ("dangling", "cycle", "heads"), \
            f"accepted a symbol with {sym_edit['what']}: {out}"
        assert made == ["models", "models/imported", "models/imported/fuzz.h5"], made
    else:
        assert [m for m in made if m not in ("models", "models/imported")] == [], made
    assert tree_digest(inputs) == before


# ------------------------------------------------------------------------------------------- idx files
def fake_idx(name: str, rows: int = 4) -> bytes:
    """An idx file with the right header for `name` and a few records (a real one holds 10000 or 60000)."""
    _, magic, _ = data.FILES[name]
    rng = np.random.default_rng(len(name))
    if magic == 2051:
        return struct.pack(">IIII", magic, rows, 28, 28) + rng.integers(0, 256, rows * 784, np.uint8).tobytes()
    return struct.pack(">II", magic, rows) + rng.integers(0, 10, rows, np.uint8).tobytes()


def gzip_bomb(decompressed_gb: int) -> bytes:
    """Gzip members of zeros back to back (one stream to gzip): kilobytes that inflate to gigabytes."""
    member = gzip.compress(bytes(64 << 20), compresslevel=9)
    return member * (decompressed_gb * 16)


@pytest.fixture(scope="module")
def bomb(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bomb") / "bomb.gz"
    path.write_bytes(gzip_bomb(4))
    return path


@pytest.fixture
def data_worker(tmp_path):
    dest = tmp_path / "datasets"
    w = Worker(tmp_path, {"PYCONV_DATASETS": str(dest), "PYCONV_DATA_FILE": str(dest / "fashion-mnist.h5"),
                          "PYCONV_LOGS": str(tmp_path / "logs")})
    yield w
    w.close()


@given(st.sampled_from(list(data.FILES)), st.lists(st.booleans(), min_size=4, max_size=4),
       st.sampled_from(["bytes", "bytes", "bomb", "sparse", "devzero", "fifo", "folder", "empty"]), byte_edit)
@fuzz_settings(80)
def test_fuzz_idx_files(data_worker, bomb, victim, gzipped, kind, edit):
    """`invoke data --source DIR --force --train` with one of the four files mutated (or replaced by a gzip bomb, a
    huge sparse file, /dev/zero, a FIFO, a folder): one line, nothing written."""
    scratch = data_worker.scratch
    src = scratch / "src"
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(scratch / "datasets", ignore_errors=True)
    src.mkdir()
    for name, gz in zip(data.FILES, gzipped, strict=True):
        blob = gzip.compress(fake_idx(name)) if gz else fake_idx(name)
        target = src / (f"{name}.gz" if gz else name)
        if name != victim:
            target.write_bytes(blob)
        elif kind == "bytes":
            target.write_bytes(mutate_bytes(blob, edit, [0, 4, 8, 12]))
        elif kind == "bomb":
            shutil.copy(bomb, src / f"{name}.gz")
        elif kind == "sparse":
            with open(src / name, "wb") as f:
                f.truncate(10 << 30)
        elif kind == "devzero":
            os.symlink("/dev/zero", target)
        elif kind == "fifo":
            os.mkfifo(target)
        elif kind == "folder":
            target.mkdir()
        else:
            target.write_bytes(b"")
    before = tree_digest(src)
    status, out, err = data_worker.run("data", "--source", src, "--force", "--train")  # all four files read
    check_outcome(status, out, err, "invoke data")
    assert status == 1, "fake Fashion-MNIST files must never be accepted"
    assert leftovers(scratch / "datasets") == []
    assert tree_digest(src) == before


# ------------------------------------------------------------------------------------------- bench JSON
BENCH_DIR = ROOT / "tests" / "fixtures" / "results-before"  # frozen: results/ changes as runs are promoted
BENCH_BASES = ["bench-cpu-intel-r-xeon-r-processor-2026-11-22.json", "bench-e2e-sp19-nvidia-h200-2026-11-22.json",
               "bench-nvidia-h200-2026-11-22-specialised-occupancy.json"]


@pytest.fixture(scope="module")
def bench_docs():
    docs = [json.loads((BENCH_DIR / name).read_text()) for name in BENCH_BASES if (BENCH_DIR / name).exists()]
    if not docs:
        pytest.skip("no bench JSON in tests/fixtures/results-before/ to mutate")
    return docs


@pytest.fixture
def report_worker(tmp_path):
    w = Worker(tmp_path, {"PYCONV_LOGS": str(tmp_path / "logs")})
    yield w
    w.close()


@given(st.integers(0, 2), json_edits, st.none() | byte_edit)
@fuzz_settings(60)
def test_fuzz_bench_json(report_worker, bench_docs, which, edits, edit):
    """`invoke report --json F --out DIR/r.md` on a mutated bench file: the page (and its plots), or one line
    and no file."""
    scratch = report_worker.scratch
    out_dir = scratch / "report"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir()
    blob = _dump(mutate_json(bench_docs[which % len(bench_docs)], edits))
    if edit is not None:
        blob = mutate_bytes(blob, edit)
    src = scratch / "bench-fuzz.json"
    src.write_bytes(blob)
    before = tree_digest(src, ROOT / "results", ROOT / "README.md")
    status, out, err = report_worker.run("report", "--json", src, "--out", out_dir / "r.md")
    made = leftovers(out_dir)
    if check_outcome(status, out, err, "invoke report"):
        assert "r.md" in made and all(m == "r.md" or m.endswith(".png") for m in made), made
    else:
        assert made == [], made
    assert tree_digest(src, ROOT / "results", ROOT / "README.md") == before
