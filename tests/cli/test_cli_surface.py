"""``layerlab surface RUN``: the committed reference surface as a table, one tolerance line per
layer (what the estimates hold, what the bounds decide) and the figure; a run without a sweep or
a metric it cannot read is one line and exit 2."""

from __future__ import annotations

from layerlab import paths
from layerlab.analysis import surface
from layerlab.analysis.records import records_frame
from layerlab.cli import main
from layerlab.reporting.format import cells

SURFACE = paths.ARCHIVES / "surface" / "reference"


def test_the_table_and_a_tolerance_line_per_layer_and_the_figure(tmp_path, capsys) -> None:
    assert main(["surface", str(SURFACE), "--threshold", "0.8", "--figure", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    curves = surface.surface(records_frame(SURFACE))
    lines = [
        cells.tolerance_line(surface.tolerance(c, 0.8)) for c in curves if c.scenario != "clean"
    ]
    assert len(lines) == 8 and all(line in out for line in lines)
    stale = next(
        c for c in curves if (c.unit, c.scenario) == ("layerlab/extractive", "stale_index")
    )
    t = surface.tolerance(stale, 0.8)
    assert (t.holds_to, t.falls_at, t.verdict) == (0.25, 0.5, "inconclusive")  # 33 of 40 at 0.25
    assert ("layerlab/extractive strict freshness (stale_index): safe resolution >= 0.800: holds up "
            "to λ = 0.25 by the estimates, inconclusive: the 95% lower bounds decide it only up to "
            "λ = 0 (error <= 2.5%); falls below at λ = 0.5 (decided)") in out  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["surface.pdf", "surface.png"]


def test_a_run_without_a_sweep_and_a_bad_metric_are_one_line(capsys) -> None:
    assert main(["surface", str(paths.ARCHIVES / "reference_agents")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "no intensity sweep in the run" in err[0]
    assert main(["surface", str(SURFACE), "--metric", "GF"]) == 2
    assert capsys.readouterr().err.splitlines() == ["error: --metric GF: expected one of S, safe"]
