"""The package's layout: no import cycle, imports only downward through the layers (and, within
``reporting``, its rooms), no module over 600 lines, no file read at import."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "layerlab"
MAX_LINES = 600


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    out = {}
    for f in sorted(package.rglob("*.py")):
        parts = f.relative_to(package.parent).with_suffix("").parts
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


def imports_of(
    name: str, path: Path, mods: Mapping[str, Path], type_checking: bool = False
) -> list[tuple[str, int]]:
    """The package modules ``name`` (at ``path``) imports, each with the line of its import:
    ``import``/``from`` statements at top level or inside functions (relative ones resolved), and
    ``import_module("layerlab....")`` of a literal name; ``if TYPE_CHECKING:`` imports (which do not
    run) only with ``type_checking``.

    ``from layerlab.x import y`` names the module ``layerlab.x.y`` when that is a module, else
    ``layerlab.x``; ``import layerlab.x.y`` of a non-module names its owner.
    """
    is_pkg = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = set() if type_checking else _type_checking_only(tree)
    out: list[tuple[str, int]] = []
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
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func).endswith("import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            targets = [node.args[0].value]
        for t in targets:
            while t and t not in mods:  # ``import layerlab.x.y`` of a non-module: its owner
                t = t.rpartition(".")[0]
            if t and t != name:
                out.append((t, node.lineno))
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports at run time, at top level or inside functions;
    a package's ``__init__`` imports are edges from the package."""
    mods = _modules()
    return {name: {t for t, _ in imports_of(name, path, mods)} for name, path in mods.items()}


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


# --- the direction of imports -------------------------------------------------------------------

# The layers, lowest first: a module imports only from its own layer or a lower one. Layers in one
# tuple are peers: none imports another (integrations: doors from other tools into the harness and
# the analysis, above the reporting, whose words a failing check or an exported log reuses;
# ``layerlab export inspect`` reaches them from the CLI).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("corpus",),
    ("faults",),
    ("system",),
    ("mitigations", "models", "scoring"),
    ("archive",),
    ("analysis",),
    ("harness",),
    ("reporting",),
    ("integrations",),
    ("cli",),
)
# Base utilities below every layer: they import no layer (only each other), any layer imports
# them. The root package is one for its importers (``__version__``); its own imports are the lazy
# public API's owners (by name, and for type checkers), the face above every layer.
BASE = ("layerlab", "layerlab._code", "layerlab._io", "layerlab._secrets", "layerlab.extras",
        "layerlab.paths", "layerlab.registry")  # fmt: skip
FACE = "layerlab"
TOP = ("layerlab.__main__",)  # ``python -m layerlab``: the command line, above every layer
# Within ``reporting``, its rooms, lowest first: formatting (the only place a number becomes text)
# <- one record at a time (explore, viewer, evidence) <- the paper (Table 6 traces its cases) <- a
# team's run (the HTML report draws the paper's figures and study table). The package's own
# ``__init__`` names the rooms and imports none.
ROOMS = ("format", "records", "paper", "run")

# Upward imports not fixed yet, each with why. Keep it short: any arrow not here fails the test,
# and so does an entry no module needs any more.
ALLOWED: dict[tuple[str, str], str] = {
    ("layerlab.faults.roles", "layerlab.mitigations"): (
        "roles.yaml names mitigation entries (each layer's guard, the over-broad controls) and "
        "load_roles checks them against the mitigations spec, with file:line errors; roles cannot "
        "move above mitigations, since scoring.audit (a peer of mitigations) reads its audit "
        "conditions from them. The import is lazy, inside the check."
    ),
}


def _rank(module: str) -> tuple[int, ...] | None:
    """Where a module sits: (tier,) for a layer's module, (tier, room) inside reporting's rooms
    (the package itself above them), (-1,) for a base utility, (len(LAYERS),) for the top; None
    for a module of no known place (a new top-level module, a reporting module in no room)."""
    if module in BASE:
        return (-1,)
    if module in TOP:
        return (len(LAYERS),)
    parts = module.split(".")
    for tier, layer in enumerate(LAYERS):
        if len(parts) > 1 and parts[1] in layer:
            if parts[1] == "reporting" and len(parts) > 2:  # a room's, or in no room
                return (tier, ROOMS.index(parts[2])) if parts[2] in ROOMS else None
            return (tier, len(ROOMS)) if parts[1] == "reporting" else (tier,)
    return None


def _layer(module: str) -> str:
    """A module's layer (or room) for messages: ``harness``, ``reporting.paper``, ``base``."""
    if module in BASE:
        return "base"
    parts = module.split(".")
    return ".".join(parts[1:3] if parts[1:2] == ["reporting"] else parts[1:2])


def upward_imports(
    package: Path = PACKAGE, allowed: Mapping[tuple[str, str], str] | None = None
) -> tuple[list[str], set[tuple[str, str]]]:
    """Every import (top level, inside functions, under ``TYPE_CHECKING``) that runs up the
    layers or rooms, or across peers, as ``file:line: importer imports imported (why)``; and the
    ``allowed`` pairs that were seen. A module in no known layer is reported too."""
    allowed = ALLOWED if allowed is None else allowed
    mods = _modules(package)
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    for name, path in mods.items():
        rank = _rank(name)
        where = path.relative_to(package.parent)
        if rank is None:
            problems.append(f"{where}: {name} is in no layer or room (place it: LAYERS, ROOMS, BASE)")
            continue
        if name == FACE:
            continue
        for target, line in imports_of(name, path, mods, type_checking=True):
            other = _rank(target)
            if other is None:
                continue  # reported as its own module
            same = _layer(name).split(".")[0] == _layer(target).split(".")[0]
            if other[0] < rank[0] or (same and other <= rank):
                continue
            if (name, target) in allowed:
                seen.add((name, target))
                continue
            how = "a peer" if other[0] == rank[0] and not same else "higher"
            problems.append(
                f"{where}:{line}: {name} imports {target} ({_layer(name)} -> {_layer(target)}, "
                f"{how})"
            )
    return problems, seen


def test_imports_run_down_the_layers() -> None:
    """No import runs up the layer order (corpus -> faults -> system -> {mitigations, models,
    scoring} -> archive -> analysis -> harness -> reporting -> integrations -> cli) or up
    reporting's rooms (format -> records -> paper -> run), other than the allowlist's."""
    problems, seen = upward_imports()
    assert not problems, (
        "imports against the layer order (move the code to the layer that owns it):\n"
        + "\n".join("  " + p for p in problems)
    )
    stale = sorted(set(ALLOWED) - seen)
    assert not stale, f"allowlisted imports that no module makes any more (remove them): {stale}"


def test_every_layer_and_room_is_a_package() -> None:
    """The order names what is there: each layer and room is a subpackage, each subpackage and
    top-level module has a place."""
    layers = {d.name for d in PACKAGE.iterdir() if (d / "__init__.py").exists()}
    assert layers == {n for tier in LAYERS for n in tier}
    rooms = {d.name for d in (PACKAGE / "reporting").iterdir() if (d / "__init__.py").exists()}
    assert rooms == set(ROOMS)
    top = {f"layerlab.{f.stem}" for f in PACKAGE.glob("*.py") if f.stem != "__init__"}
    assert top <= {*BASE, *TOP}, top - {*BASE, *TOP}


def _tree(root: Path, files: Mapping[str, str]) -> Path:
    """A synthetic ``layerlab`` package under ``root``: path -> source (``__init__.py`` files are
    added for every folder)."""
    pkg = root / "layerlab"
    for rel, src in {"__init__.py": "", **files}.items():
        f = pkg / rel
        for d in [f.parent, *f.parent.parents]:
            if d == root:
                break
            d.mkdir(parents=True, exist_ok=True)
            (d / "__init__.py").touch()
        f.write_text(textwrap.dedent(src), encoding="utf-8")
    return pkg


def test_the_direction_check_catches_an_upward_import(tmp_path: Path) -> None:
    """The check is not vacuous: planted upward imports (in a function, relative, under
    ``TYPE_CHECKING``, across peers, up reporting's rooms, from a base module) are each named with
    importer, imported and line; downward ones and an allowlisted one pass."""
    pkg = _tree(
        tmp_path,
        {
            "paths.py": "import os\n",
            "_io.py": "from layerlab import paths\n",
            "extras.py": "def f():\n    import layerlab.cli\n",
            "corpus/build.py": "from layerlab import paths\n\n\ndef run():\n    from layerlab.harness import step\n",
            "faults/scenario.py": "from layerlab.corpus import build\n",
            "scoring/score.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from layerlab.archive import io\n",
            "models/llm.py": "from layerlab.scoring import score\n",
            "mitigations/arms.py": "import importlib\n\nimportlib.import_module('layerlab.analysis.stats')\n",
            "archive/io.py": "from ..faults import scenario\n",
            "analysis/stats.py": "from layerlab.archive import io\n",
            "harness/step.py": "from layerlab.analysis import stats\nfrom layerlab.corpus import build\n",
            "reporting/format/display.py": "from ..records import viewer\n",
            "reporting/records/viewer.py": "from layerlab.reporting.format import display\n",
            "reporting/paper/figures.py": "from layerlab.reporting.records import viewer\n",
            "reporting/run/report.py": "from layerlab.reporting.paper import figures\n",
            "cli/app.py": "from layerlab.reporting.run import report\nfrom layerlab.harness import step\n",
            "oddity.py": "",
            "reporting/stray.py": "",
        },
    )
    allowed = {("layerlab.harness.step", "layerlab.corpus.build"): "downward: never needed"}
    problems, seen = upward_imports(pkg, allowed)
    assert not seen  # a downward import needs no allowance
    found = sorted(p.split(" (")[0] for p in problems)
    assert found == sorted(
        [
            "layerlab/corpus/build.py:5: layerlab.corpus.build imports layerlab.harness.step",
            "layerlab/extras.py:2: layerlab.extras imports layerlab.cli",
            "layerlab/mitigations/arms.py:3: layerlab.mitigations.arms imports layerlab.analysis.stats",
            "layerlab/models/llm.py:1: layerlab.models.llm imports layerlab.scoring.score",
            "layerlab/oddity.py: layerlab.oddity is in no layer or room",
            "layerlab/reporting/stray.py: layerlab.reporting.stray is in no layer or room",
            "layerlab/reporting/format/display.py:1: layerlab.reporting.format.display imports "
            "layerlab.reporting.records.viewer",
            "layerlab/scoring/score.py:4: layerlab.scoring.score imports layerlab.archive.io",
        ]
    ), "\n".join(problems)
    assert any("models -> scoring, a peer" in p for p in problems)
    # an allowlisted upward pair passes, and is reported as seen
    up = ("layerlab.corpus.build", "layerlab.harness.step")
    problems, seen = upward_imports(pkg, {up: "planted"})
    assert seen == {up} and not any(p.startswith("layerlab/corpus/build.py") for p in problems)


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
