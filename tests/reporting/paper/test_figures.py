"""Figures: one panel per unit (real models apart from reference agents, labelled), n and
intervals from the library's interval functions, legends that hide nothing, inline display."""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from layerlab import paths
from layerlab.analysis import stats
from layerlab.reporting.format import display
from layerlab.reporting.paper import figures


@pytest.fixture(scope="module")
def ref() -> pd.DataFrame:
    return stats.records_frame()


@pytest.fixture(scope="module")
def with_model(ref: pd.DataFrame) -> pd.DataFrame:
    """The reference agents plus a 'real model' that fails every other task of the extractive
    agent's records (a different rate, so pooling would show)."""
    m = ref[ref["model"] == "extractive"].copy()
    m["provider"], m["model"] = "local", "fake-model"
    m["success"] = m["success"] & (m["task_id"].rank(method="dense").astype(int) % 2 == 0)
    return pd.concat([ref, m], ignore_index=True)


def test_unit_rates_never_pool_units_and_use_the_library_interval(with_model: pd.DataFrame) -> None:
    long = figures.unit_rates(with_model)
    assert list(dict.fromkeys(long["unit"])) == [
        "local/fake-model",
        "layerlab/cautious",
        "layerlab/extractive",
    ]
    assert set(long.loc[long["unit"] == "local/fake-model", "kind"]) == {display.REAL_MODEL}
    assert set(long.loc[long["unit"] != "local/fake-model", "kind"]) == {display.REFERENCE_AGENT}
    labels = stats.unit_labels(with_model)
    for unit, sub in long.groupby("unit"):
        expected = stats.rates(with_model[labels == unit])
        np.testing.assert_allclose(sub["rate"].to_numpy(), expected["rate"].to_numpy())
        np.testing.assert_allclose(sub["ci_low"].to_numpy(), expected["ci_low"].to_numpy())
        np.testing.assert_allclose(sub["ci_high"].to_numpy(), expected["ci_high"].to_numpy())
        assert set(sub["n"]) == {len(with_model[labels == unit]) // len(sub)}
    # the model and the agent it was derived from differ: nothing was averaged across them
    a = long[(long["unit"] == "local/fake-model") & (long["scenario"] == "clean")][
        "rate"
    ].to_numpy()
    b = long[(long["unit"] == "layerlab/extractive") & (long["scenario"] == "clean")][
        "rate"
    ].to_numpy()
    assert (a < b).all()


def test_rates_by_unit_has_a_labelled_panel_per_unit_with_n(with_model: pd.DataFrame) -> None:
    fig = figures.rates_by_unit(with_model, "Success")
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert len(titles) == 3
    assert (
        titles[0].startswith("local/fake-model — real model")
        and "n = 240 records per point" in titles[0]
    )
    assert all("reference agent (deterministic baseline)" in t for t in titles[1:])
    assert "3 unit(s), one panel each" in fig._suptitle.get_text()
    assert "95% cluster-aware Clopper-Pearson" in fig._suptitle.get_text()
    for ax in fig.axes:  # every point carries an error bar
        assert any(c.__class__.__name__ == "ErrorbarContainer" for c in ax.containers)
    plt.close(fig)


def test_records_or_several_frames_are_accepted(ref: pd.DataFrame) -> None:
    a = figures.unit_rates([ref[ref["model"] == "cautious"], ref[ref["model"] == "extractive"]])
    b = figures.unit_rates(ref)
    pd.testing.assert_frame_equal(a, b)


def test_forest_has_one_panel_per_unit_with_task_pairs(with_model: pd.DataFrame) -> None:
    fig = figures.paired_effects_by_unit(with_model, "Effects", n_boot=200, seed=1)
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    # the title names the method every cell used; a bootstrap only where a cell used one
    head = fig._suptitle.get_text()
    assert "95% intervals: Tango's score interval" in head and "in every cell" in head
    assert "bootstrap" not in head and "resamples" not in head
    assert len(titles) == 3 and "real model" in titles[0]
    assert all("task pairs per scenario" in t for t in titles)
    # the schema-drift effect is written out with its interval, so a narrow interval is readable
    texts = [t.get_text() for t in fig.axes[1].texts]
    assert any(re.fullmatch(r"\+\d+\.\d \[\+\d+\.\d, \+\d+\.\d\]", t) for t in texts)
    # legible at page width: at most two panels a row, so three units take two rows
    cols = {round(ax.get_position().x0, 3) for ax in fig.axes}
    rows = {round(ax.get_position().y0, 3) for ax in fig.axes}
    assert len(cols) == 2 and len(rows) == 2
    # each label sits beside its own interval (anchored at the interval's end, a few points off)
    for ax in fig.axes:
        for t in ax.texts:
            x, _ = t.xy
            lo, hi = (float(v) for v in re.findall(r"[+-]\d+\.\d", t.get_text())[1:])
            assert min(abs(x - lo), abs(x - hi)) < 0.06 and abs(t.get_position()[0]) <= 4
    plt.close(fig)


def test_retriever_ablation_shows_zero_and_hides_no_bar() -> None:
    t3 = pd.DataFrame(
        {
            "retriever": ["tfidf", "tfidf", "explicit_domain_filter", "explicit_domain_filter"],
            "condition": ["clean", "corrupted_metadata"] * 2,
            "top-1 recall": [0.55, 0.5, 0.95, 0.0],
        }
    )
    fig = figures.retriever_ablation(t3, 240, "Top-1 recall")
    ax = fig.axes[0]
    fig.canvas.draw()
    leg = ax.get_legend()
    # legend below the axes: it covers no point
    assert leg.get_window_extent().y1 <= ax.get_window_extent().y0
    assert "0.0%" in [t.get_text() for t in ax.texts]  # the zero is labelled
    xs = np.concatenate([line.get_xdata() for line in ax.lines])
    assert 0.0 in xs  # and drawn as a point
    assert any("sensitivity" in t.get_text() for t in ax.get_yticklabels())
    assert "n = 240 tasks per point" in ax.get_title()
    plt.close(fig)


def test_retriever_ablation_is_the_papers_rows_only() -> None:
    from layerlab.reporting.paper.tables.benchmark import BEYOND

    t3 = pd.DataFrame(
        {
            "retriever": ["tfidf", f"dense{BEYOND}", f"DenseStore{BEYOND}"],
            "condition": ["clean"] * 3,
            "top-1 recall": [0.55, 0.56, 0.94],
        }
    )
    fig = figures.retriever_ablation(t3, 240, "Top-1 recall")
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["tfidf"]
    plt.close(fig)


def test_specificity_heatmap_prints_intervals_and_no_negative_zero() -> None:
    cells = pd.DataFrame(
        {
            "mitigation": ["a", "a", "b", "b"],
            "scenario": ["s1", "s2", "s1", "s2"],
            "target": [True, False, False, True],
            "estimate": [0.9, -0.004, -0.0001, 0.5],
            "ci_low": [0.85, -0.01, -0.002, 0.4],
            "ci_high": [0.95, 0.0, 0.0, 0.6],
            "n_pairs": [240] * 4,
        }
    )
    fig = figures.specificity_heatmap(cells, "Effects", ["deterministic/extractive"])
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "+90\n[+85, +95]" in texts
    assert not any(re.search(r"-0\b", t) for t in texts)
    title = fig.axes[0].get_title()
    assert (
        "reference agent (deterministic baseline)" in title
        and "n = 240 task pairs per cell" in title
    )
    plt.close(fig)
    cells["method"] = ["score", "score", "bootstrap", "score"]
    fig = figures.specificity_heatmap(cells, "Effects")
    title = " ".join(fig.axes[0].get_title().split())
    assert ("95% intervals in brackets: Tango's score interval (3 cells), the calibrated "
            "bootstrap (1 cell)") in title  # fmt: skip
    plt.close(fig)
    cells["method"] = "score"
    fig = figures.specificity_heatmap(cells, "Effects")
    title = fig.axes[0].get_title()
    assert "Tango's score interval in every cell" in title and "bootstrap" not in title
    plt.close(fig)


def test_show_returns_the_saved_png_for_inline_display(tmp_path, ref: pd.DataFrame) -> None:
    shown = figures.show(figures.rates_by_unit(ref, "Success"), "x", tmp_path)
    assert shown._repr_png_() == (tmp_path / "x.png").read_bytes()
    assert repr(shown) == "<figure: figures/x.png, figures/x.pdf>"
    again = figures.show(figures.rates_by_unit(ref, "Success"), "y", tmp_path)
    assert (
        again.png == shown.png
        and (tmp_path / "x.pdf").read_bytes() == (tmp_path / "y.pdf").read_bytes()
    )


def test_committed_notebooks_show_every_figure_inline() -> None:
    import nbformat

    for nb_path in sorted(paths.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(nb_path, as_version=4)
        for c in nb.cells:
            if c.cell_type == "code" and "figures.show(" in c.source:
                kinds = {k for o in c.outputs for k in o.get("data", {})}
                assert "image/png" in kinds, f"{nb_path.name}: a figure cell shows no image"
            if c.cell_type == "code":
                assert "figures.save(" not in c.source, f"{nb_path.name}: figure saved, not shown"


def test_the_surface_has_a_panel_per_layer_and_a_row_per_unit_with_the_run_s_intervals() -> None:
    from layerlab.analysis import surface
    from layerlab.analysis.records import records_frame

    curves = surface.surface(records_frame(paths.ARCHIVES / "surface" / "reference"))
    fig = figures.reliability_surface(curves, "surface")
    axes = np.array(fig.axes).reshape(2, 4)
    assert [a.get_title() for a in axes[0]] == [
        "availability\n(missing_tool_output)", "completeness\n(partial_timeout)",
        "freshness\n(stale_index)", "session_state\n(wrong_session)"]  # fmt: skip
    assert [a.get_ylabel() for a in axes[:, 0]] == [
        "layerlab/cautious\nstrict",
        "layerlab/extractive\nstrict",
    ]
    stale = next(
        c for c in curves if (c.unit, c.scenario) == ("layerlab/extractive", "stale_index")
    )
    ax = axes[1, 2]
    safe = next(line for line in ax.lines if line.get_marker() == "o")  # safe resolution over λ
    assert list(safe.get_xdata()) == [p.intensity for p in stale.points]
    assert list(safe.get_ydata()) == [p.rates["safe"].rate for p in stale.points]
    # the clean scenario's safe resolution is every panel's dashed floor
    clean = next(c for c in curves if (c.unit, c.scenario) == ("layerlab/extractive", "clean"))
    assert any(
        list(line.get_ydata()) == [clean.points[0].rates["safe"].rate] * 2 for line in ax.lines
    )
    plt.close(fig)


def test_conversations_have_a_panel_per_system_a_line_per_scenario_and_the_turns_counted() -> None:
    from layerlab.analysis import conversations

    recs = conversations.load([paths.REFERENCE_CONVERSATIONS])["reference"]
    # an arm is a system of its own (never pooled with the baseline); the figure draws the baseline
    arms = {r["model"] for r in conversations.turn_rates(recs)}
    assert {"layerlab/extractive", "layerlab/extractive [history_summarisation]"} <= arms
    rates = conversations.turn_rates(conversations.baseline(recs))
    fig = figures.conversations_by_turn(rates, "Conversations")
    axes = fig.axes
    assert [a.get_title().split("\n")[0] for a in axes] == ["layerlab/cautious", "layerlab/extractive"]
    assert all(display.unit_kind("layerlab") in a.get_title() for a in axes)
    scens = sorted({r["scenario"] for r in rates})
    assert sorted(t.get_text() for t in axes[-1].get_legend().get_texts()) == scens
    assert axes[0].get_xticklabels()[0].get_text() == "t0\nn=80"  # every conversation has a turn 0
    assert "exact 95% Clopper-Pearson" in fig._suptitle.get_text()
    plt.close(fig)


def test_the_conversations_table_blocks_systems_and_states_the_leak_with_its_interval() -> None:
    from layerlab.analysis import conversations
    from layerlab.reporting.paper import tables

    runs = conversations.load([paths.REFERENCE_CONVERSATIONS])
    t = tables.conversations_table(runs)
    assert set(t["block"]) == {"reference agents (deterministic baselines)"}
    row = t[(t["system"] == "layerlab/extractive") & (t["scenario"] == "swapped_session")].iloc[0]
    s = conversations.summarise(runs["reference"])["layerlab/extractive"]["swapped_session"]
    k, n = s["leak_turns"]["k"], s["leak_turns"]["n"]
    assert row["leaked turns"] == f"{k}/{n}" and k > 0
    assert row["leak [95% CI]"].startswith(f"{s['leak_turns']['rate']:.3f} [")
    assert row["S t0"] == f"{s['by_turn'][0]['S']:.3f}" and row["breaks at"] == f"t{s['break']['turn']}"
