"""Display formatting: one place, percentages and intervals, p-values as bounds, a real index, and
committed notebooks free of raw 6-decimal floats."""

from __future__ import annotations

import re

import pandas as pd

from layerlab import paths
from layerlab.reporting.format import display


def test_scalars() -> None:
    assert display.percent(0.975) == "97.5%" and display.percent(float("nan")) == display.MISSING
    assert display.points(97.5) == "+97.5" and display.points(-0.04) == "0.0" and display.points(-3.26) == "-3.3"
    assert display.count(8640) == "8,640"


def test_the_equivalence_margin_is_stated_as_a_setting_not_signed_points() -> None:
    # the captions, compare --matrix and the gate: no sign, no fixed decimals
    assert display.margin(0.1) == "δ = 10 pp" and display.margin(0.025) == "δ = 2.5 pp"
    assert display.points(0.1, share=True) == "+10.0"  # an estimate's rule, not the margin's


def test_p_values_are_bounds_below_a_thousandth() -> None:
    assert display.p_value(0.2) == "0.2" and display.p_value(0.0123) == "0.0123"
    assert display.p_value(4e-4) == "< 1e-3" and display.p_value(3e-7) == "< 1e-6"
    assert display.p_value(1.049668e-140) == "< 1e-10" and display.p_value(0.0) == "< 1e-10"
    # the library's printed forms (stats.format_p) are read back, text is kept
    assert display.p_value("1.05e-140") == "< 1e-10" and display.p_value("< 1e-301") == "< 1e-10"
    assert display.p_value("0 (no residual variation)") == "0 (no residual variation)"
    assert display.p_value("") == display.MISSING


def test_table_formats_rates_intervals_counts_and_index() -> None:
    df = pd.DataFrame(
        {
            "scenario": ["clean", "stale_index"],
            "strict": [0.975, 0.0],
            "strict 95% low": [0.946461, 0.0],
            "strict 95% high": [0.988511, 0.015754],
            "repair-strict (pp)": [97.5, 0.0],
            "95% low (pp)": [95.41, 0.0],
            "95% high (pp)": [99.2, 0.0],
            "n per mode": [480, 480],
            "exactly zero": [False, True],
            "gee p": ["1.05e-140", ""],
        }
    )
    t = display.table(df)
    assert t.index.name == "scenario" and list(t.index) == ["clean", "stale_index"]
    assert t.loc["clean", "strict [95% CI]"] == "97.5% [94.6%, 98.9%]"
    assert t.loc["clean", "repair-strict (pp) [95% CI]"] == "+97.5 [+95.4, +99.2]"
    assert t.loc["stale_index", "repair-strict (pp) [95% CI]"] == "0.0 [0.0, 0.0]"
    assert t.loc["clean", "n per mode"] == "480" and t.loc["stale_index", "exactly zero"] == "yes"
    assert t.loc["clean", "gee p"] == "< 1e-10"
    assert "strict 95% low" not in t.columns


def test_an_interval_of_uncertain_owner_is_not_attached_to_a_guess() -> None:
    df = pd.DataFrame(
        {
            "target": ["schema_drift"],
            "margin (pp)": [97.5],
            "plug-in margin (pp)": [97.0],
            "95% low (pp)": [95.8],
            "95% high (pp)": [99.2],
        }
    )
    t = display.table(df)
    assert list(t.columns) == ["margin (pp)", "plug-in margin (pp)", "95% low (pp)", "95% high (pp)"]


def test_index_uses_the_fewest_label_columns_that_identify_a_row() -> None:
    df = pd.DataFrame({"retriever": ["a", "a", "b"], "condition": ["x", "y", "x"], "r": [0.5, 0.25, 1.0]})
    t = display.table(df)
    assert list(t.index.names) == ["retriever", "condition"]
    no_labels = display.table(pd.DataFrame({"n": [1, 2]}))
    assert list(no_labels.index) == [1, 2] and no_labels.index.name == "#"


def test_unit_kind_is_one_wording() -> None:
    assert display.unit_kind("layerlab") == display.unit_kind("deterministic") == display.REFERENCE_AGENT
    assert display.unit_kind("local") == display.REAL_MODEL == "real model"
    assert display.unit_label("local/smollm2-135m") == "local/smollm2-135m — real model"


def test_committed_notebooks_show_no_raw_floats_or_bare_range_index() -> None:
    import nbformat

    raw = re.compile(r"(?<![\d.])\d+\.\d{5,}\b")
    for nb_path in sorted(paths.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(nb_path, as_version=4)
        for c in nb.cells:
            if c.cell_type != "code":
                continue
            for o in c.outputs:
                text = "".join(o.get("data", {}).get("text/plain", ""))
                html = "".join(o.get("data", {}).get("text/html", ""))
                if 'class="dataframe"' in html:  # a table of numbers (an explorer page is not)
                    assert "display.table(" in c.source, f"{nb_path.name}: a table not formatted: {c.source!r}"
                    assert not raw.search(text), f"{nb_path.name}: raw float in {text[:200]!r}"
                    # every displayed table has row labels (a scenario, an arm...), not 1..n
                    assert "<th>#</th>" not in html, f"{nb_path.name}: rows numbered: {c.source!r}"


def test_a_grouped_table_keeps_its_row_labels() -> None:
    """``groupby(...).size().unstack()`` (the "which layer breaks it" tables) leaves the labels in
    the index: they stay the rows' names, one level per grouping column."""
    df = pd.DataFrame({"scenario": ["clean", "clean", "stale_index"], "diagnostic": ["ok", "x", "ok"]})
    t = display.table(df.groupby(["scenario", "diagnostic"], sort=False).size().unstack(fill_value=0))
    assert t.index.name == "scenario" and list(t.index) == ["clean", "stale_index"]
    assert list(t.columns) == ["ok", "x"] and t.loc["stale_index", "x"] == "0"
    two = display.table(df.groupby(["scenario", "diagnostic"]).size().rename("n").to_frame())
    assert list(two.index.names) == ["scenario", "diagnostic"] and list(two["n"]) == ["1", "1", "1"]


def test_a_gain_between_rates_is_shown_in_points_not_as_a_rate() -> None:
    t = display.table(pd.DataFrame({"model": ["a"], "strict": [0.0], "repair": [0.975], "gain": [0.975],
                                    "gee risk difference": [-0.5]}))
    assert t.loc["a", "gain"] == "+97.5 pp" and t.loc["a", "repair"] == "97.5%"
    assert t.loc["a", "gee risk difference"] == "-50.0 pp"


# --- the one rate and one percentage-point formatter (issue 45) -------------------------------


def test_points_rules_are_explicit_arguments() -> None:
    """Each caller's rule is an argument of the one formatter, not a private copy: notebooks and
    findings never show a signed zero; compare and Table 10 keep the sign as written (identical
    runs read +0.0); captions sign only a negative; a share difference is scaled once."""
    assert display.points(0.125, share=True) == "+12.5" and display.points(12.5) == "+12.5"
    assert display.points(-0.0004, share=True) == "0.0" and display.points(0.0, share=True) == "0.0"
    assert display.points(0.0, share=True, sign="always") == "+0.0"
    assert display.points(-0.0004, share=True, sign="always") == "-0.0"
    assert display.points(0.125, share=True, sign="minus") == "12.5"
    assert display.points(-0.125, share=True, sign="minus") == "-12.5"
    assert display.points(0.3333, 3, share=True, sign="minus") == "33.330"
    same = display.points(0.0, interval=(0.0, 0.0), share=True, sign="always", missing="-")
    assert same == "+0.0 [+0.0, +0.0]"
    assert display.points(0.1, interval=(-0.02, 0.2), share=True) == "+10.0 [-2.0, +20.0]"
    assert display.points(None) == display.MISSING and display.points(float("nan"), missing="-") == "-"


def test_rate_rules_are_explicit_arguments() -> None:
    """A run's rates as shares to 3 decimals, compare's as percentages without the sign, the
    notebook's with it; the interval left out when it has no low end; "-" or "–" for none."""
    assert display.rate(0.8125, (0.771, 0.847)) == "0.812 [0.771, 0.847]"
    assert display.rate(0.8125, (0.771, 0.847), percent=True) == "81.2 [77.1, 84.7]"
    assert display.rate(0.975, percent=True, suffix="%") == display.percent(0.975) == "97.5%"
    assert display.rate(0.5, (None, None)) == "0.500" and display.rate(0.5, digits=2) == "0.50"
    assert display.rate(None, missing="-") == "-" and display.rate(float("nan")) == display.MISSING


def test_run_tables_format_through_the_owner() -> None:
    """results.json's cells, compare's and the matrix's are the one formatter's text."""
    from types import SimpleNamespace

    from layerlab.reporting.format import cells

    r = {"rate": 0.65, "ci_low": 0.534, "ci_high": 0.754, "k": 52, "n": 80}
    assert cells.rate_cell(r) == display.rate(0.65, (0.534, 0.754)) == "0.650 [0.534, 0.754]"
    assert cells.rate_cell({"rate": None, "not_recorded": 3}) == "not recorded (3)"
    assert cells.rate_cell({"rate": None}) == "-"
    assert cells.share_cell({"share": 0.125, "k": 30}) == "12.5% (30)"
    table = pd.DataFrame({"scenario": ["clean"], "arm": ["strict"], "tasks": [80],
                          "this_run": [0.65], "this_run_ci": [[0.534, 0.754]], "other": [0.65],
                          "other_ci": [[0.534, 0.754]], "difference": [0.0],
                          "difference_ci": [[0.0, 0.0]]})  # fmt: skip
    c = SimpleNamespace(table=table)
    row = cells.comparison(c).iloc[0]  # type: ignore[arg-type]
    assert row["this run %"] == "65.0 [53.4, 75.4]" and row["difference pp"] == "+0.0 [+0.0, +0.0]"


def test_lead_columns_come_first_for_reading_and_a_wrong_name_is_one_line() -> None:
    """Notebook 09 shows Table 10's verdict first (no sideways scroll); the rest keep their
    order, the values their formatting; a column that is not there is named."""
    df = pd.DataFrame({"mitigation": ["a", "b"], "layer(s)": ["x", "y"], "gain": [0.5, 0.25],
                       "verdict": ["specific", "inconclusive"]})  # fmt: skip
    plain, led = display.table(df), display.table(df, lead="verdict")
    assert list(led.columns) == ["verdict", *[c for c in plain.columns if c != "verdict"]]
    assert led["verdict"].tolist() == ["specific", "inconclusive"]
    assert led.drop(columns="verdict").equals(plain.drop(columns="verdict"))
    try:
        display.table(df, lead="verdicts")
    except KeyError as exc:
        assert "lead: no column 'verdicts'" in str(exc)
    else:
        raise AssertionError("an unknown lead column was accepted")
