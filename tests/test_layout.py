"""The package's layout: no import cycle, no module over 600 lines, no file read at import."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "layerlab"
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    out = {}
    for f in sorted(PACKAGE.rglob("*.py")):
        parts = f.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of import nodes under ``if TYPE_CHECKING:`` (not imported at run time)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for b in node.body for n in ast.walk(b))
    return skip


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports, at top level or inside functions.

    ``from layerlab.x import y`` names the module ``layerlab.x.y`` when that is a module, else
    ``layerlab.x``; a package's ``__init__`` imports are edges from the package.
    """
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_only(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = name.split(".") if is_pkg else name.split(".")[:-1]
                    up = here[: len(here) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names
                ]
            for t in targets:
                while t and t not in mods:  # ``import layerlab.x.y`` of a non-module: its owner
                    t = t.rpartition(".")[0]
                if t and t != name:
                    graph[name].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[tuple[str, str]]]:
    """The strongly connected components with more than one module, as their edge lists."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[tuple[str, str]]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted((a, b) for a in comp for b in graph[a] if b in comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_import_graph_sees_function_level_and_package_imports() -> None:
    g = import_graph()
    assert "layerlab.analysis.units" in g["layerlab.analysis.stats"]  # a re-export
    assert "layerlab.archive" in g["layerlab.analysis.records"]
    assert "layerlab.faults.scenario" in g["layerlab.analysis.units"]  # inside a function


def test_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles (edges within each):\n" + "\n".join(
        "  " + ", ".join(f"{a} -> {b}" for a, b in c) for c in found
    )


def test_no_module_over_600_lines() -> None:
    counts = {
        str(f.relative_to(ROOT)): len(f.read_text(encoding="utf-8").splitlines())
        for f in sorted(PACKAGE.rglob("*.py"))
    }
    long = {f: n for f, n in counts.items() if n > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


_NO_READS = """
import importlib, os, sys
root, names = sys.argv[1], sys.argv[2:]
env = tuple(os.path.abspath(p) + os.sep for p in {sys.prefix, sys.base_prefix})  # a venv inside
reads = []
current = [None]

def hook(event, args):
    if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.path.abspath(os.fsdecode(args[0]))
        inside = path.startswith(root + os.sep) and not path.startswith(env)
        # package metadata (a `pip wheel .` leaves layerlab.egg-info/) is read by importlib.metadata
        # for any installed package's plug-ins (pydantic's), not by layerlab
        metadata = any(p.endswith((".egg-info", ".dist-info")) for p in path.split(os.sep))
        if inside and not metadata and not path.endswith((".py", ".pyc")):
            reads.append(f"{current[0]}: {path}")

sys.addaudithook(hook)
for name in names:
    current[0] = name
    importlib.import_module(name)
print("\\n".join(reads))
"""


def _reads_at_import(root: Path) -> str:
    """The files under ``root`` that importing every module reads (one per line), run from
    ``root`` (so a build leftover there, such as ``layerlab.egg-info/``, is on ``sys.path``)."""
    names = [m for m in _modules() if not m.endswith("__main__")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_NO_READS), str(root), *names],
        capture_output=True,
        text=True,
        cwd=root,
        env=env,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout.strip()


def test_no_file_read_at_import() -> None:
    """Importing every module (in a fresh interpreter) reads no file of the repository: specs,
    corpus and archives are read by functions, when asked for. The first module to read
    (whose import fills a cache the others would hit) is named."""
    reads = _reads_at_import(ROOT)
    assert not reads, "files read at import:\n" + reads


def test_import_check_ignores_build_leftovers(tmp_path: Path) -> None:
    """A `pip wheel .` leaves ``layerlab.egg-info/`` (and ``build/``, ``dist/``) in the checkout:
    package metadata read by importlib.metadata (pydantic looks for its plug-ins there) is not a
    read of the repository's data, so the import check above stays independent of them."""
    meta = tmp_path / "layerlab.egg-info"
    meta.mkdir()
    (meta / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: layerlab\nVersion: 0.1.0\n")
    (meta / "entry_points.txt").write_text("[console_scripts]\nlayerlab = layerlab.cli:main\n")
    (tmp_path / "build" / "lib" / "layerlab").mkdir(parents=True)
    (tmp_path / "dist").mkdir()
    assert not _reads_at_import(tmp_path)
