"""Readable terminal tables for the CLI (rich)."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Table


def _console() -> Console:
    # a pipe or a log file gets a fixed, readable width instead of rich's 80-column default
    return Console() if sys.stdout.isatty() else Console(width=120)


def print_audit(result: dict[str, Any], console: Console | None = None) -> None:
    """Print the retriever audit (one row per retriever and condition) plus cue and duplicate lines."""
    console = console or _console()
    table = Table(title=f"Retriever audit ({result['n_tasks']} tasks)")
    for col in ("retriever", "condition", "top-1 recall", "top-3 recall", "current-version pref."):
        table.add_column(col, justify="left" if col in {"retriever", "condition"} else "right")
    for name, per in result["retrievers"].items():
        for i, (cond, m) in enumerate(per.items()):
            table.add_row(
                name if i == 0 else "",
                cond,
                f"{m['top1_recall']:.3f}",
                f"{m['top3_recall']:.3f}",
                f"{m['current_version_preference']:.3f}",
                end_section=i == len(per) - 1,
            )
    console.print(table)
    cues = result["domain_cues"]
    console.print(
        f"domain cues: correct {cues['correct']}, incorrect {cues['incorrect']}, "
        f"unresolved {cues['unresolved']}"
    )
    for q in result["duplicate_query"]["queries"]:
        hits = ", ".join(f"{k} {v}/{len(q['tasks'])}" for k, v in q["top1_correct"].items())
        console.print(
            f"duplicate query in {' & '.join(q['domains'])}: {q['question']!r} — top-1 right: {hits}"
        )


def print_table2(summary: dict[str, Any], console: Console | None = None) -> None:
    """Print the deterministic results (paper Table 2) from a harness summary."""
    console = console or _console()
    table = Table(title=f"Deterministic results ({summary['records']} records)")
    table.add_column("scenario")
    arms = list(next(iter(summary["success"].values()), {}))
    for col in (*[f"S {a}" for a in arms], *[f"GF {a}" for a in arms], "main diagnosis"):
        table.add_column(col, justify="right" if col != "main diagnosis" else "left")
    for s, per in summary["success"].items():
        gf = summary["grounded_false_positive"][s]
        diag = summary["diagnostics"][s].get(arms[0], {}) if arms else {}
        main = max(diag.items(), key=lambda kv: (kv[1], kv[0]))[0] if diag else ""
        table.add_row(
            s,
            *[f"{per.get(a, 0):.3f}" for a in arms],
            *[f"{gf.get(a, 0):.3f}" for a in arms],
            main,
        )
    console.print(table)
    console.print(f"reached the reader: {summary['reached_reader']} of {summary['records']}")


def print_frame(df: Any, title: str, console: Console | None = None) -> None:
    """Print a small DataFrame as a rich table."""
    console = console or _console()
    table = Table(title=title)
    for c in df.columns:
        table.add_column(str(c))
    for row in df.itertuples(index=False):
        table.add_row(*(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row))
    console.print(table)


def print_recompute(head: dict[str, Any], console: Console | None = None) -> None:
    """Headline figures of ``layerlab recompute``, one block per kind of unit (never pooled)."""
    console = console or _console()
    for block, h in head["blocks"].items():
        table = Table(
            title=f"{block}: success by scenario ({h['records']} records, units: {', '.join(h['units'])})"
        )
        arms = list(next(iter(h["success"].values()), {}))
        for col in ("scenario", *arms):
            table.add_column(col, justify="left" if col == "scenario" else "right")
        for s, v in h["success"].items():
            table.add_row(s, *[f"{v.get(a, float('nan')):.3f}" for a in arms])
        console.print(table)
        g = h["schema_drift_gain"]
        m = h["specificity_margin"]
        console.print(
            f"schema_drift paired gain {100 * g['estimate']:.1f} pp "
            f"[{100 * g['ci95'][0]:.1f}, {100 * g['ci95'][1]:.1f}] ({head['n_boot']} resamples, "
            f"seed {head['seed']}; {h.get('design_label', 'bootstrap')})"
        )
        console.print(
            f"specificity margin {100 * m['margin']:.1f} pp [{100 * m['ci_low']:.1f}, {100 * m['ci_high']:.1f}]; "
            f"largest off-target change {100 * m['largest_off_target_change']:.1f} pp ({m['largest_off_target']})"
        )
        if h["note"]:
            console.print(f"note: {h['note']}")
    if head.get("specificity_matrix"):
        verdicts = ", ".join(f"{k} {v}" for k, v in head["specificity_matrix"].items())
        console.print(f"specificity matrix (Table 10): {verdicts}")


def print_wide(df: Any, title: str, console: Console | None = None) -> None:
    """Print a DataFrame of preformatted cells without wrapping them (wide tables, e.g. rates
    with intervals); a pipe or a log gets a width that fits the table."""
    console = console or (Console() if sys.stdout.isatty() else Console(width=200))
    table = Table(title=title, title_justify="left")
    for c in df.columns:
        table.add_column(str(c), no_wrap=True)
    for row in df.itertuples(index=False):
        table.add_row(*(str(v) for v in row))
    console.print(table)
