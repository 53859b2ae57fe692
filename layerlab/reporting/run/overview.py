"""A live run at a glance, for notebooks: success by model, scenario and arm
(:func:`run_overview`) and whether two runs hold the same records (:func:`same_records`); and
what the terminal prints after a run (:func:`print_run_results`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from layerlab import archive
from layerlab.analysis.records import records_frame

if TYPE_CHECKING:
    from layerlab.harness.live import LiveResult


def run_overview(result: LiveResult) -> pd.DataFrame:
    """Success by model × scenario × mitigation arm of a finished run (what a notebook shows)."""
    df = records_frame(result.out)
    g = df.groupby(["provider", "model", "scenario", "mitigation"], sort=False)["success"].mean()
    wide = g.unstack("mitigation").reset_index()
    arms = [m for m in _arms(df) if m in wide]
    return wide[["provider", "model", "scenario", *arms]]


def _arms(df: pd.DataFrame) -> list[str]:
    """The arms of a records frame, in the order they first appear."""
    return list(dict.fromkeys(df["mitigation"]))


def same_records(a: Path | str, b: Path | str) -> bool:
    """Whether two run folders (or archives) hold the same records, label for label.

    Run ids are ignored: they name the run, not its content.
    """

    def load(p: Path | str) -> list[tuple[Any, ...]]:
        p = Path(p)
        recs = archive.read_records(p / archive.ARCHIVE if p.is_dir() else p)
        return sorted(tuple(v for k, v in r.__dict__.items() if k != "run_id") for r in recs)

    return load(a) == load(b)


def print_run_results(
    out: Any, echo: Any, sample_log: Any = None, corpus_dir: Any = None
) -> None:
    """After a live run: a target run's findings per layer first, then the results table by
    model (and reference agent), an agent run's steps, calls and cost, error lines, all from the
    folder's ``results.json``; ``echo`` prints a line. ``sample_log``: the run's private log
    (path), whose dominant failure of a failing fault-free layer joins its finding
    (:mod:`layerlab.reporting.run.dominant`; the documents' policies from ``corpus_dir``)."""
    import json

    from layerlab.analysis import results
    from layerlab.reporting.format import cells
    from layerlab.reporting.format.terminal import print_wide
    from layerlab.reporting.run import agentsummary
    from layerlab.reporting.run.findings import finding_lines

    p = out / results.RESULTS
    if not p.exists():
        return
    res = json.loads(p.read_text(encoding="utf-8"))
    if res.get("target"):
        echo(f"target: {results.target_line(res['target'])}")
        from layerlab.reporting.run import dominant

        found = res.get("findings") or []
        private = dominant.for_run(found, sample_log, _run_id(out), corpus_dir=corpus_dir)
        for line in finding_lines(found, width=_width(), private=private):
            echo(line)
    for ref, title in (
        (False, "Results by model"),
        (True, "Reference agents (deterministic baselines, not models)"),
    ):
        df = cells.results_table(res, reference=ref)
        if not df.empty:
            if res.get("target") and not ref:
                title = "Results by arm (strict/repair: the harness's contract; other arms add a guard)"
            print_wide(df, f"{title}: rate [95% interval]")
    epochs = [row for m in res["models"] for row in cells.passk_rows(m)]
    if epochs:  # a run of more than one epoch: beside S, how often one of k / all k succeed
        print_wide(pd.DataFrame(epochs), "Epochs: S and safe resolution beside pass@k (one of "
                   "k epochs succeeds) and pass^k (all k do), k = the epochs, by scenario")  # fmt: skip
    agentsummary.print_for(out, echo)  # an agent run's mode and steps per scenario
    if res.get("usage"):  # cost and time over every invocation of the run
        print_wide(cells.usage_table(res["usage"]), "Calls, tokens, cost and time")
    for line in results.error_summary(res):
        echo(f"errors: {line}")
    echo(f"results: {p} (interval: {res['interval']})")


def _run_id(out: Any) -> str | None:
    """The run's id from its manifest (None: unreadable), so that another run's sample-log
    entries are not counted."""
    from layerlab import archive

    try:
        return str(archive.read_manifest(out)["run_id"])
    except Exception:  # a folder without a readable manifest: every entry of the log counts
        return None


def _width() -> int | None:
    """The terminal's width for wrapped findings; None (a finding on one line, for grep) for a
    pipe or a log file."""
    import shutil
    import sys

    return shutil.get_terminal_size((80, 24)).columns if sys.stdout.isatty() else None
