"""Readable terminal tables for the CLI (rich)."""

from __future__ import annotations

import io
import re
import sys
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from layerlab.reporting.format.display import points


def _console() -> Console:
    # a pipe or a log file gets a fixed, readable width instead of rich's 80-column default
    return Console() if sys.stdout.isatty() else Console(width=120)


def print_audit(result: dict[str, Any], console: Console | None = None) -> None:
    """Print the retriever audit (one row per retriever and condition) plus cue and duplicate lines."""
    console = console or _console()
    table = Table(title=f"Retriever audit ({result['n_tasks']} tasks)")
    for col in ("retriever", "condition", "top-1 recall", "top-3 recall", "current-version pref."):
        table.add_column(col, justify="left" if col in {"retriever", "condition"} else "right")
    rows = [(n, per, "") for n, per in result["retrievers"].items()]
    beyond = result.get("beyond_paper") or {}
    rows += [(n, per, " (beyond the paper)") for n, per in beyond.items()]
    for name, per, label in rows:
        for i, (cond, m) in enumerate(per.items()):
            table.add_row(
                name + label if i == 0 else "",
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
    given, console = console, console or _console()
    for block, h in head["blocks"].items():
        import pandas as pd

        arms = list(next(iter(h["success"].values()), {}))
        frame = pd.DataFrame(
            [
                {"scenario": s, **{a: f"{v.get(a, float('nan')):.3f}" for a in arms}}
                for s, v in h["success"].items()
            ]
        )
        print_wide(
            frame,
            f"{block}: success by scenario ({h['records']} records, units: {', '.join(h['units'])})",
            given,
        )
        g = h["schema_drift_gain"]
        m = h["specificity_margin"]
        console.print(
            f"schema_drift paired gain {_pp(g['estimate'])} pp [{_pp(g['ci95'][0])}, "
            f"{_pp(g['ci95'][1])}] ({head['n_boot']} resamples, seed {head['seed']}; "
            f"{h.get('design_label', 'bootstrap')})"
        )
        console.print(
            f"specificity margin {_pp(m['margin'])} pp [{_pp(m['ci_low'])}, {_pp(m['ci_high'])}]; "
            f"largest off-target change {_pp(m['largest_off_target_change'])} pp ({m['largest_off_target']})"
        )
        if h["note"]:
            console.print(f"note: {h['note']}")
    if head.get("specificity_matrix"):
        verdicts = ", ".join(f"{k} {v}" for k, v in head["specificity_matrix"].items())
        console.print(f"specificity matrix (Table 10): {verdicts}")


def _pp(v: float) -> str:
    """The recompute headline's points: a share difference, a sign only when negative."""
    return points(v, share=True, sign="minus")


# a cell "0.812 [0.771, 0.847]" or "12.5% (30)" splits before its bracket when stacked
_BRACKET = re.compile(r"^(\S+) ([\[(].*)$")


def _width(renderable: Any) -> int:
    """The widest line ``renderable`` takes when nothing limits it (cells never wrap)."""
    probe = Console(width=100_000, file=io.StringIO(), color_system=None)
    with probe.capture() as cap:
        probe.print(renderable)
    return max((cell_len(line) for line in cap.get().splitlines()), default=0)


def _full(df: Any, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for c in df.columns:
        table.add_column(str(c), no_wrap=True)
    for row in df.itertuples(index=False):
        table.add_row(*(str(v) for v in row))
    return table


def _stacked(df: Any, title: str, group: Any, cols: list[str]) -> Table:
    """One table per group: a value above its interval (or count), headers over several lines."""
    table = Table(
        title=f"{title} — {group}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        padding=(0, 1, 0, 0),
    )
    for c in cols:
        table.add_column(str(c).replace(" ", "\n"), no_wrap=True)
    for i, row in enumerate(df[cols].itertuples(index=False)):
        table.add_row(*(_BRACKET.sub(r"\1\n\2", str(v)) for v in row), end_section=i < len(df) - 1)
    return table


def _blocks(df: Any, title: str, group: Any, label: str | None, width: int) -> list[Any]:
    """One block per row: its label line (``label``'s value and the records count), then one
    measure a line, the value beside its name, or below it when even that is too wide; rich
    wraps only at spaces, so no number is cut."""
    out: list[Any] = [f"[bold]{title} — {group}[/bold]"]
    names = [str(c) for c in df.columns[1:] if c not in (label, "records")]
    for row in df.itertuples(index=False):
        r = dict(zip(map(str, df.columns), row, strict=True))
        if label is not None:
            out.append(
                f"[bold]{r[label]}[/bold]"
                + (f" ({r['records']} records)" if "records" in r else "")
            )
        for per_line in range(len(names), 0, -1):  # as many measures a line as fit
            grid = Table.grid(padding=(0, 2, 0, 0))
            for _ in range(2 * per_line):
                grid.add_column(no_wrap=True)
            for i in range(0, len(names), per_line):
                chunk = names[i : i + per_line]
                cells = [x for c in chunk for x in (f"  {c}" if c is chunk[0] else c, str(r[c]))]
                grid.add_row(*cells, *[""] * (2 * per_line - len(cells)))
            if _width(grid) <= width:
                out.append(grid)
                break
        else:
            for c in names:
                out.extend((f"  {c}", f"    {r[c]}"))
    return out


def print_wide(df: Any, title: str, console: Console | None = None) -> None:
    """Print a DataFrame of preformatted cells (e.g. rates with intervals) so that it fits the
    terminal and no number is ever cut.

    The first column groups the rows (the model, the scenario). The whole table when it fits;
    else, per group, a table with each value above its interval; else, per row, one measure a
    line. Every column present is shown, whatever they are. A pipe or a log gets the whole table
    at the width it needs."""
    if console is None:
        console = Console() if sys.stdout.isatty() else None
    full = _full(df, title)
    if console is None:
        Console(width=max(120, _width(full))).print(full)
        return
    width = console.width
    if _width(full) <= width or df.empty:
        console.print(full)
        return
    first, *cols = [str(c) for c in df.columns]
    groups = list(dict.fromkeys(df[first]))
    single = len(groups) == len(df)  # one row a group (a scenario): no per-row label
    if not single:
        stacked = [_stacked(df[df[first] == g], title, g, cols) for g in groups]
        if max(_width(t) for t in stacked) <= width:
            for t in stacked:
                console.print(t)
            return
    for g in groups:
        label = None if single else cols[0]
        for part in _blocks(df[df[first] == g], title, g, label, width):
            console.print(part)
        console.print()


class ProgressBar:
    """The live run's progress bar (``update`` is the run's progress hook); its ETA comes from a
    smoothed rate that counts cache hits apart (:class:`~layerlab.harness.live.progress.Eta`).
    At 80 columns the bar narrows and the counters are cut, never the record total. A target's
    bar counts failures only (it makes no provider call and layerlab caches none of its replies)."""

    def __init__(self, target: bool = False) -> None:
        from layerlab.harness.live.progress import Eta

        self.p: Any = None
        self.task: Any = None
        self.eta = Eta()
        self.target = target

    def update(self, counters: Any, total: int) -> None:
        import time

        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
        from rich.table import Column

        from layerlab.harness.live.progress import format_eta

        if self.task is None:
            whole, cut = Column(no_wrap=True, min_width=2 * len(str(total)) + 1), Column(ratio=1, no_wrap=True)
            self.p = Progress(TextColumn("records"), BarColumn(bar_width=12), MofNCompleteColumn(table_column=whole),
                              TextColumn("{task.description}", table_column=cut), TextColumn("{task.fields[eta]}"))  # fmt: skip
            self.p.start()
            self.task = self.p.add_task("", total=total, eta=format_eta(None))
        c = counters
        self.eta.update(time.monotonic(), c.records, c.cache_hits)
        desc = f"calls {c.calls} hits {c.cache_hits} retries {c.retries} failures {c.failures}"
        if self.target:
            desc = f"failures {c.failures}"
        eta = format_eta(self.eta.remaining(c.records, total))
        self.p.update(self.task, completed=c.records, description=desc, eta=eta)

    def close(self) -> None:
        if self.task is not None:
            self.p.stop()
