"""The docs' "Extending layerlab" (docs/extending.md) and layout (docs/layout.md) sections cannot
go stale: every path, Python name, command and make target they name exists."""

from __future__ import annotations

import importlib
import re

import pytest
from docfiles import section

from layerlab import paths
from layerlab.cli import main

EXTENDING = section("Extending layerlab")
TICKED = re.findall(r"`([^`\n]+)`", EXTENDING + section("Data flow and layout"))


def _paths() -> list[str]:
    out = []
    for t in TICKED:
        if " " in t or t.startswith(("layerlab.", "@", "[", "\\")) or "(" in t:
            continue
        if "/" in t or re.search(r"\.(py|yaml|tex|toml|md)$", t):
            out.append(t.split("<", 1)[0])  # `tables/<id>.tex`: the folder before a placeholder
    return sorted(set(out))


def _names() -> list[str]:
    return sorted({t for t in TICKED if re.fullmatch(r"layerlab(\.\w+)+", t)})


def _commands() -> list[list[str]]:
    out = []
    for t in TICKED:
        if t.startswith("layerlab ") and not t.startswith("layerlab run live --model"):
            words = [w for w in t.split()[1:] if not w.startswith(("-", "<"))]
            out.append(words)
    return sorted(map(list, {tuple(w) for w in out}))


def test_the_sections_name_something() -> None:
    assert len(_paths()) >= 20 and len(_names()) >= 5 and len(_commands()) >= 5


@pytest.mark.parametrize("rel", _paths())
def test_every_path_exists(rel: str) -> None:
    candidates = [paths.ROOT / rel, paths.ROOT / "layerlab" / rel]
    assert any(c.exists() for c in candidates), f"docs name {rel!r}, which does not exist"


@pytest.mark.parametrize("dotted", _names())
def test_every_python_name_resolves(dotted: str) -> None:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            assert hasattr(obj, attr), f"docs name {dotted!r}: no {attr!r} in {obj!r}"
            obj = getattr(obj, attr)
        return
    pytest.fail(f"docs name {dotted!r}, which does not import")


@pytest.mark.parametrize("words", _commands(), ids=" ".join)
def test_every_command_exists(words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*words, "--help"]) == 0, f"`layerlab {' '.join(words)}` is not a command"


def _layout_entries() -> dict[str, str]:
    """The layout tree's entries under ``layerlab/``: folder or file -> its description."""
    block = section("Data flow and layout").split("```")[3]
    entries: dict[str, str] = {}
    name = None
    for line in block.splitlines():
        m = re.match(r"^  (\w+/|\w+\.py) +(.*)$", line)
        if m:
            name = m.group(1)
            entries[name] = m.group(2)
        elif name and line.startswith("    "):
            entries[name] += " " + line.strip()
        else:
            name = None
    return entries


def test_the_layout_tree_lists_every_layer_and_module() -> None:
    entries = _layout_entries()
    pkg = paths.ROOT / "layerlab"
    layers = {f"{d.name}/" for d in pkg.iterdir() if (d / "__init__.py").exists()}
    assert layers == {e for e in entries if e.endswith("/")}, "the tree and the subpackages differ"
    for layer in layers:
        words = set(re.findall(r"\w+", entries[layer]))
        for mod in (pkg / layer).iterdir():
            stem = mod.stem if mod.suffix == ".py" else mod.name
            if stem.startswith("__") or not (mod.suffix == ".py" or (mod / "__init__.py").exists()):
                continue
            assert stem in words, f"docs/layout.md's tree does not name {layer}{mod.name}"
        nested = [m for m in (pkg / layer).iterdir() if (m / "__init__.py").exists()]
        for sub in nested:
            for mod in sub.glob("[!_]*.py"):
                if sub.name == "tables":
                    continue  # the table registry's builders are listed by the registry itself
                assert mod.stem in words, (
                    f"docs/layout.md's tree does not name {layer}{sub.name}/{mod.name}"
                )


def test_every_make_target_exists() -> None:
    makefile = (paths.ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z-]+):", makefile, re.M))
    named = set(re.findall(r"`make ([a-z-]+)", EXTENDING))
    assert named and named <= targets, named - targets


def test_a_renamed_path_would_be_caught() -> None:
    # the checks above are not vacuous: a path that does not exist fails them
    with pytest.raises(AssertionError):
        test_every_path_exists("layerlab/no_such_layer/module.py")
    with pytest.raises(AssertionError):
        test_every_python_name_resolves("layerlab.mitigations.NoSuchThing")
