"""``run live --until-decided``: its flags checked and turned into the run's plan (the nested
task order and :class:`~layerlab.harness.live.settings.UntilDecided`), and what it prints when
it stops. The looks themselves are :mod:`layerlab.harness.live.looks`'s."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import typer

from layerlab.cli.app import _usage

if TYPE_CHECKING:
    from layerlab.corpus.build import Corpus
    from layerlab.harness.live import LiveConfig
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
FLAGS = {"specific": "--specific", "no_over_broad": "--no-over-broad", "max_tasks": "--max-tasks",
         "batch": "--batch", "delta": "--delta"}  # fmt: skip


def given(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def plan_config(
    config: LiveConfig,
    corpus: Corpus,
    limit: int | None,
    limit_seed: int,
    specific: Sequence[str],
    no_over_broad: bool,
    max_tasks: int | None,
    batch: int | None,
    delta: float | None,
) -> LiveConfig:
    """``config`` as an until-decided run: its task ids the first ``max_tasks`` of the nested
    stratified order (``--limit-seed``) of its tasks (``--tasks`` or all), and the plan. Bad
    flags: one line, exit 2."""
    from layerlab.analysis import sequential
    from layerlab.analysis.specificity import DELTA
    from layerlab.harness.live.settings import UntilDecided
    from layerlab.harness.runconfig import stratified_order
    from layerlab.mitigations import load_mitigations

    if limit is not None:
        raise _usage("--limit: not with --until-decided (its looks choose the tasks; "
                     "--max-tasks N caps them)")  # fmt: skip
    if config.shard is not None:
        raise _usage("--shard: not with --until-decided (a run that stops when it has decided "
                     "is judged whole)")  # fmt: skip
    if not specific and not no_over_broad:
        raise _usage("--until-decided: name the verdicts to wait for: --specific MITIGATION "
                     "(repeatable) and/or --no-over-broad")  # fmt: skip
    base = load_mitigations().baseline
    judged = [m for m in config.mitigations if m != base]
    if base not in config.mitigations or not judged:
        raise _usage(f"--until-decided: its verdicts compare arms with the baseline: give "
                     f"--mitigation {base} and the mitigations to judge")  # fmt: skip
    for name in specific:
        if name not in judged:
            raise _usage(f"--specific {name}: not a judged arm of this run (its arms besides "
                         f"the baseline {base}: {', '.join(judged)})")  # fmt: skip
    pool = config.run_task_ids(corpus)
    n = min(sequential.MAX_TASKS, len(pool)) if max_tasks is None else max_tasks
    if n > len(pool):
        raise _usage(f"--max-tasks {n}: only {len(pool)} tasks to choose from (expected 1 to "
                     f"{len(pool)})")  # fmt: skip
    try:
        plan = sequential.Plan(n, batch or sequential.BATCH, delta=DELTA if delta is None else delta)
    except ValueError as exc:
        raise _usage(str(exc)) from None
    tasks = [t for t in corpus.tasks if t.task_id in set(pool)]
    order = stratified_order(tasks, limit_seed)[:n]
    u = UntilDecided(plan.max_tasks, plan.batch, tuple(dict.fromkeys(specific)), no_over_broad,
                     plan.alpha, plan.delta, limit_seed, plan.sizes[0])  # fmt: skip
    return dataclasses.replace(config, task_ids=order, until_decided=u)


def refuse_without(ctx: typer.Context) -> None:
    """The until-decided flags do nothing without ``--until-decided``: refused, not ignored."""
    for name, flag in FLAGS.items():
        if given(ctx, name):
            raise _usage(f"{flag}: an --until-decided setting; give --until-decided too")


def report(decided: Decided, echo: Callable[[str], Any]) -> None:
    """The looks made and the lines the run stopped on (or why it goes on)."""
    for lk in decided.looks:
        said = "; ".join(f"{k} {v['verdict']}" for k, v in lk.verdicts.items())
        echo(f"look {lk.look}: {lk.tasks} tasks, {lk.records} records, α = {lk.alpha:.3g}: {said}")
    if decided.result is None and decided.over:
        echo("until decided: this run had already stopped; nothing asked")
    for line in decided.lines() if decided.over else ():
        echo(line)
