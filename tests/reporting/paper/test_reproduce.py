"""The freshness check: a regenerated artifact tree is compared byte for byte with the committed one."""

from __future__ import annotations

import shutil
from pathlib import Path

from layerlab import paths
from layerlab.reporting.paper import reproduce


def _copy_committed(tmp: Path) -> Path:
    for d in paths.ARTIFACT_DIRS:
        shutil.copytree(paths.COMMITTED_ARTIFACTS / d, tmp / d)
    for f in paths.ARTIFACT_FILES:
        (tmp / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(paths.COMMITTED_ARTIFACTS / f, tmp / f)
    return tmp


def test_identical_tree_is_fresh(tmp_path: Path) -> None:
    assert reproduce.compare(_copy_committed(tmp_path)) == []


def test_a_moved_number_a_missing_and_an_extra_artifact_are_reported(tmp_path: Path) -> None:
    root = _copy_committed(tmp_path)
    t2 = root / "paper" / "tables" / "table2.csv"
    header, first, *rest = t2.read_text().splitlines(keepends=True)
    name, value, *cells = first.split(",")
    moved = f"{float(value) / 2:.4f}"  # a number moves, whatever the committed value
    t2.write_text("".join([header, ",".join([name, moved, *cells]), *rest]))
    (root / "figures" / "retriever_ablation.png").unlink()
    (root / "figures" / "extra.png").write_bytes(b"x")
    problems = "\n".join(reproduce.compare(root))
    assert "paper/tables/table2.csv: differs from the committed file" in problems
    assert "figures/retriever_ablation.png: committed but no notebook generates it" in problems
    assert "figures/extra.png: generated but not committed" in problems


def test_notebooks_are_thin_and_parameterised() -> None:
    import nbformat

    nbs = reproduce.notebooks()
    assert len(nbs) >= 6 and [nb.name[:2] for nb in nbs] == sorted(nb.name[:2] for nb in nbs)
    for nb_path in nbs:
        nb = nbformat.read(nb_path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code[0].source.startswith("from layerlab"), nb_path.name
        assert code[1].metadata.get("tags") == ["parameters"], nb_path.name
        for line in code[1].source.splitlines():
            assert ": " in line.split("=")[0] and "#" in line, (
                f"{nb_path.name}: untyped or uncommented parameter {line!r}"
            )
        assert not any(
            "\ndef " in "\n" + c.source or "\nclass " in "\n" + c.source for c in code
        ), nb_path.name
        # committed executed, so nbval has outputs to compare
        assert all(c.execution_count is not None for c in code), (
            f"{nb_path.name}: committed unexecuted"
        )


def test_opening_and_saving_a_committed_notebook_changes_nothing() -> None:
    """What JupyterLab does to a notebook it opens, runs nothing in and autosaves: the running
    kernel's ``language_info`` and the kernelspec it was started from go into the metadata,
    and the file is written back through nbformat (``NO_CONVERT``). Every committed notebook
    must come out byte-identical, so opening one leaves ``git status`` clean."""
    import nbformat
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3")
    try:
        info = kc.kernel_info(reply=True, timeout=60)["content"]["language_info"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    changed = []
    for path in reproduce.notebooks():
        raw = path.read_text(encoding="utf-8")
        nb = nbformat.reads(raw, as_version=nbformat.NO_CONVERT)
        nb.metadata["kernelspec"] = reproduce.kernelspec()
        nb.metadata["language_info"] = info
        if nbformat.writes(nb, version=nbformat.NO_CONVERT) + "\n" != raw:
            changed.append(path.name)
    assert not changed, f"opening and saving rewrites: {changed}"
