"""Readable terminal tables for the CLI (rich)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def print_audit(result: dict[str, Any], console: Console | None = None) -> None:
    """Print the retriever audit as one table per condition plus the cue and duplicate lines."""
    console = console or Console()
    conditions = list(next(iter(result["retrievers"].values())))
    table = Table(title=f"Retriever audit ({result['n_tasks']} tasks)")
    table.add_column("retriever")
    for c in conditions:
        table.add_column(f"{c}\ntop-1", justify="right")
        table.add_column(f"{c}\ntop-3", justify="right")
        table.add_column(f"{c}\ncurrent pref.", justify="right")
    for name, per in result["retrievers"].items():
        cells = []
        for c in conditions:
            m = per[c]
            cells += [
                f"{m['top1_recall']:.3f}",
                f"{m['top3_recall']:.3f}",
                f"{m['current_version_preference']:.3f}",
            ]
        table.add_row(name, *cells)
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
