"""The table registry is the one list of generated tables: ``paper/main.tex`` inputs exactly the
registered tables, in the registry's order and under its file names; the notebooks write each
registered table by naming its entry; every entry's inputs and builder agree."""

from __future__ import annotations

import inspect
import json
import re

import pytest

from layerlab import paths
from layerlab.reporting.paper import build, tables


def _main_tex() -> str:
    text = (paths.PAPER / build.MAIN).read_text(encoding="utf-8")
    return re.sub(r"(?<!\\)%.*", "", text)  # comments do not count


def _inputs(text: str) -> list[str]:
    return re.findall(r"\\input\{tables/([^}]+)\.tex\}", text)


def test_main_tex_inputs_exactly_the_registered_tables_in_order() -> None:
    inputs = _inputs(_main_tex())
    stems = [t.stem for t in tables.TABLES]
    assert sorted(set(stems) - set(inputs)) == [], "registered tables main.tex does not \\input"
    assert sorted(set(inputs) - set(stems)) == [], "main.tex inputs tables/... not registered"
    assert inputs == stems, "main.tex inputs the tables in another order than the registry"


def test_appendix_tables_come_after_appendix() -> None:
    body, _, appendix = _main_tex().partition("\\appendix")
    assert _inputs(body) == [t.stem for t in tables.TABLES if not t.appendix]
    assert _inputs(appendix) == [t.stem for t in tables.TABLES if t.appendix]


def test_paper_numbers_and_labels() -> None:
    for i in range(1, 11):
        t = tables.REGISTRY[f"table{i}"]
        assert t.number == str(i) and t.label == f"tab:table{i}"
    assert [t.number for t in tables.TABLES if t.appendix][:2] == ["A1", "A2"]
    assert len(tables.REGISTRY) == len(tables.TABLES), "an id registered twice"


def test_label_is_what_the_exporter_writes(tmp_path) -> None:
    t = tables.REGISTRY["table1"]
    from layerlab.faults.scenario import load_scenarios

    frame = t.build(load_scenarios())
    t.write(frame, tmp_path, t.caption_of(frame))
    tex = (tmp_path / f"{t.stem}.tex").read_text(encoding="utf-8")
    assert f"\\label{{{t.label}}}" in tex and t.caption in tex


@pytest.mark.parametrize("table", tables.TABLES, ids=lambda t: t.id)
def test_entry_inputs_fit_its_builder(table: tables.Table) -> None:
    assert set(table.inputs) <= set(tables.INPUTS)
    inspect.signature(table.builder).bind(*table.inputs)  # the builder takes them positionally
    dynamic = {"table10", "table10_cells"}  # the builder writes the whole caption
    assert (table.caption is None) == (table.id in dynamic)


def test_recompute_builds_the_archive_based_entries() -> None:
    recomputed = {t.id for t in tables.RECOMPUTED}
    assert {"table4", "table5", "table10", "paper_comparison"} <= recomputed
    available = {"records", "analysis", "safe_analysis", "audit", "matrix", "matrix_records"}
    assert all(set(t.inputs) <= available for t in tables.RECOMPUTED)


def test_notebooks_publish_every_registered_table_by_name() -> None:
    published: list[str] = []
    for nb_path in sorted(paths.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
        for c in nb["cells"]:
            if c["cell_type"] == "code":
                published += re.findall(r"tables\.publish\(\"([^\"]+)\"", "".join(c["source"]))
    assert sorted(published) == sorted(tables.REGISTRY), "a table not published, or twice"


def test_unknown_input_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown inputs"):
        tables.Table("x", tables.table1, ("corpus_of_nowhere",))


def test_the_tables_face_names_each_builder_once_and_lazily() -> None:
    import subprocess
    import sys

    from layerlab.reporting.paper import tables

    assert sorted(tables.__all__) == sorted(tables._OWNER)
    from importlib import import_module

    for name, family in tables._OWNER.items():
        assert getattr(tables, name) is getattr(import_module(f"{tables.__name__}.{family}"), name)
    code = (
        "import sys; from layerlab.reporting.paper.tables.benchmark import table1; "
        "print(sorted(m for m in sys.modules if m.startswith('layerlab.reporting.paper.tables.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "layerlab.reporting.paper.tables.specificity" not in out.stdout  # Table 1 alone


def test_the_conversational_matrix_is_each_readers_arms_and_none_without_arms() -> None:
    """Table A9: a row per reader and session mitigation of the committed archive, the target
    cells starred, the verdicts the matrix's; an archive that played no arm adds no row."""
    from layerlab.analysis import conversations
    from layerlab.analysis.convmatrix import matrices
    from layerlab.mitigations.session import load_session_mitigations
    from layerlab.reporting.paper.tables.conversations import conversations_matrix

    runs = conversations.load([paths.REFERENCE_CONVERSATIONS])
    t = conversations_matrix(runs)
    book = load_session_mitigations().book()
    arms = list(load_session_mitigations().matrix_arms)
    assert sorted(zip(t["system"], t["arm"], strict=True)) == sorted(
        (s, a) for s in ("layerlab/extractive", "layerlab/cautious") for a in arms)
    mx = matrices(runs["reference"], book)
    for _, r in t.iterrows():
        summary = mx[r["system"]].summary.set_index("mitigation").loc[r["arm"]]
        assert r["verdict"] == summary["verdict"]
        starred = {c for c in t.columns if str(r[c]).startswith("*")}
        assert starred == set(summary["targets"].split(", "))
    assert conversations_matrix({"base": conversations.baseline(runs["reference"])}).empty
