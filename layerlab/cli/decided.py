"""``run live --until-decided``: its flags' help, which flags the command line gave, and what it
prints when it stops. Its flags are checked and turned into the run's plan (the nested task order
and :class:`~layerlab.harness.live.settings.UntilDecided`) by the run configuration
(:mod:`layerlab.harness.config`); the looks themselves are :mod:`layerlab.harness.live.looks`'s."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from layerlab.harness.live.looks import Decided

HELP = {
    "until_decided": "Add tasks in seeded, stratified looks (--batch more each, up to "
    "--max-tasks) until every verdict asked (--specific, --no-over-broad) is conclusive; each "
    "look judged at its share of a 5% error rate (Pocock-type spending: docs/live-runs.md).",
    "specific": "With --until-decided: wait for this mitigation's Table 10 verdict (repeatable).",
    "no_over_broad": "With --until-decided: wait for every mitigation's verdict (in a run of "
    "every arm, all but layerlab's over-broad controls, as gate --no-over-broad).",
    "max_tasks": "With --until-decided: the budget of tasks, the last look's size (default 120, "
    "or every task when fewer).",
    "batch": "With --until-decided: tasks per look, the first look's size and each look's "
    "increment (default 24).",
    "delta": "With --until-decided: the verdicts' equivalence margin as a share (default 0.10, "
    "gate's; give gate the same --delta).",
}


def given(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def report(decided: Decided, echo: Callable[[str], Any]) -> None:
    """The looks made and the lines the run stopped on (or why it goes on)."""
    for lk in decided.looks:
        said = "; ".join(f"{k} {v['verdict']}" for k, v in lk.verdicts.items())
        echo(f"look {lk.look}: {lk.tasks} tasks, {lk.records} records, α = {lk.alpha:.3g}: {said}")
    if decided.result is None and decided.over:
        echo("until decided: this run had already stopped; nothing asked")
    for line in decided.lines() if decided.over else ():
        echo(line)
