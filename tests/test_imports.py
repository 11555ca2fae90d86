"""The package's import graph: no cycle anywhere inside pyconv/, and imports only downward through the layers.

Read from the source with ast (nothing is imported), function-level imports included: a cycle hidden inside a
function still ties two modules together."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "pyconv"

# Lowest first. A module may import modules of its own layer or of a layer before it, never after it.
LAYERS = [
    ("core", ["pyconv", "pyconv.core"]),
    ("native", ["pyconv.native"]),
    ("descriptors", ["pyconv.variants", "pyconv.verify", "pyconv.evidence", "pyconv.autotune", "pyconv.ladder"]),
    ("plan", ["pyconv.plan"]),
    ("engines", ["pyconv.engines"]),
    ("bench schema", ["pyconv.bench.schema"]),
    ("report", ["pyconv.report"]),
    ("bench", ["pyconv.bench"]),
    ("first-use measuring", ["pyconv.measure"]),  # final's own bench of a shape it has no evidence for
    ("grading", ["pyconv.grading"]),
    ("tools", ["pyconv.tools"]),
    ("command line", ["pyconv.cli", "pyconv.__main__"]),  # the Invoke tasks and the `pyconv` program over them
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The pyconv modules `name` imports anywhere in its source (relative imports resolved; `from pkg import x`
    counts x when x is a module, else pkg)."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known and "." in t:  # pyconv.core.model.Layer -> pyconv.core.model
                t = t.rsplit(".", 1)[0]
            if t in known and t != name:
                out.add(t)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def layer_of(name: str) -> int:
    """The layer whose longest matching prefix names the module."""
    best, best_len = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (name == p or name.startswith(p + ".")) and len(p) > best_len and not (p == "pyconv" and name != p):
                best, best_len = i, len(p)
    assert best is not None, f"{name} is in no layer: add it to LAYERS"
    return best


def test_the_graph_sees_function_level_and_relative_imports():
    g = graph()
    # found only inside functions or through `from .. import x`: the parser must see them for the checks to mean
    # anything
    assert "pyconv.native" in g["pyconv.tools.milestones"]
    assert "pyconv.core.errors" in g["pyconv.native"]
    assert "pyconv.autotune" in g["pyconv.engines.gpu"]  # imported inside engine_for
    assert "pyconv.bench.schema" in g["pyconv.report.tables"]


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_pyconv():
    found = cycles(graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_imports_go_down_the_layers_only():
    wrong = []
    for name, deps in graph().items():
        for d in deps:
            if layer_of(d) > layer_of(name):
                wrong.append(f"{name} ({LAYERS[layer_of(name)][0]}) imports {d} ({LAYERS[layer_of(d)][0]})")
    assert not wrong, "\n".join(sorted(wrong))


def test_package_inits_import_nothing_of_pyconv():
    """Importing pyconv.x.y runs pyconv/__init__.py and pyconv/x/__init__.py first: they must stay empty of
    imports for the module-level graph to be the whole truth."""
    g = graph()
    inits = [module_name(p) for p in PACKAGE.rglob("__init__.py")]
    assert all(not g[n] for n in inits), {n: g[n] for n in inits if g[n]}


def test_only_pyconv_native_imports_the_native_modules():
    natives = {"pyconv._cpu", "pyconv._gpu", "pyconv._cupti"}
    offenders = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = {a.name for a in node.names}
                if (node.module in ("pyconv", None) or node.level) and names & {"_cpu", "_gpu", "_cupti"}:
                    offenders.append(name)
                if (node.module or "") in natives:
                    offenders.append(name)
            elif isinstance(node, ast.Import) and {a.name for a in node.names} & natives:
                offenders.append(name)
    assert sorted(set(offenders)) == [], offenders
