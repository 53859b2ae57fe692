"""``run live --until-decided``: a live run that grows its task set in looks until every verdict
asked for is conclusive or its budget of tasks is spent.

The plan (:class:`~layerlab.harness.live.settings.UntilDecided`) fixes the order the tasks are
taken in (a nested stratified order, :func:`layerlab.harness.runconfig.stratified_order`) and the
looks (:mod:`layerlab.analysis.sequential`: sizes, each look's level of α). Each look is one
:func:`~layerlab.harness.live.run.run_live` of the same run id on the first ``n_j`` tasks: the
progress log already holds the records of the looks before, so only the new tasks are asked
(the resume machinery), and a Ctrl-C or a kill leaves a folder ``--resume`` continues. After a
complete look its verdicts are judged (Table 10's, :func:`layerlab.analysis.compare.matrix_blocks`
at the look's level) and the look is recorded in the manifest's ``until_decided`` block.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerlab import archive
from layerlab.analysis import sequential
from layerlab.corpus.build import AnswerKey, Corpus
from layerlab.faults.scenario import Scenario
from layerlab.harness.live.run import LiveResult, run_live
from layerlab.harness.live.settings import LiveConfig, LiveRunError, RunInterrupted, RunSettings

N_BOOT, SEED = 10_000, 0  # the verdicts' bootstrap: gate's defaults, so gate judges the same


@dataclass(frozen=True)
class Decided:
    """Where an until-decided invocation stopped: the last look's run (None when the run had
    already stopped before this invocation), the plan, the looks judged, whether it is over."""

    result: LiveResult | None
    plan: sequential.Plan
    looks: tuple[sequential.Look, ...]
    over: bool

    def lines(self) -> list[str]:
        return sequential.summary(self.plan, self.looks)


def plan_of(config: LiveConfig) -> sequential.Plan:
    u = config.until_decided
    assert u is not None
    return sequential.Plan(u.max_tasks, u.batch, u.alpha, u.delta)


def recorded_looks(out: Path, config: LiveConfig, resume: bool) -> list[sequential.Look]:
    """The looks the folder's manifest records (none for a new run; a folder of a run of fixed
    size is refused by :func:`run_live` itself). A folder whose looks were planned otherwise
    (other budget, batch, margin, order or verdicts asked) is refused: its levels were spent by
    another plan."""
    import json

    if not resume or not (Path(out) / archive.MANIFEST).exists():
        return []
    try:
        m = archive.read_manifest(out)
    except archive.ArchiveError as exc:
        raise LiveRunError(str(exc)) from None
    ud = m.get("until_decided") or {}
    u = config.until_decided
    assert u is not None
    mine = json.loads(json.dumps({**u.identity(), "order": list(config.task_ids or ())}))
    if ud and {k: ud.get(k) for k in mine} != mine:
        raise LiveRunError(
            f"{out} holds run {m['run_id']} with other settings than this command; resume with "
            "the original models, filters and settings (an until-decided run: the same "
            "--until-decided, --specific, --no-over-broad, --max-tasks, --batch, --delta and "
            "--limit-seed too)"
        )
    return [sequential.Look.from_dict(d) for d in ud.get("looks") or []]


def run_until_decided(
    corpus: Corpus,
    key: AnswerKey,
    scenarios: Mapping[str, Scenario],
    config: LiveConfig,
    out: Path,
    run: RunSettings,
    *,
    scenario_hash: str,
    progress: Callable[[], Any] | None = None,
    say: Callable[[str], None] = lambda _m: None,
    samples: Any = None,
) -> Decided:
    """Make the looks still to make (``run.resume``: after those the folder records), each one
    :func:`run_live` of the look's tasks, then judge it; stop when every verdict asked is
    conclusive, the last look is made, or a look ends unfinished (budget of calls, errors: its
    result says so, and ``--resume`` continues). ``progress`` makes each look's progress bar.
    The calls budget (``run.budget``) is over the whole run: every look's calls count."""
    plan, ud = plan_of(config), config.until_decided
    assert ud is not None
    looks = recorded_looks(out, config, run.resume)
    result: LiveResult | None = None
    while (j := sequential.next_look(plan, looks)) is not None:
        n, level = plan.sizes[j], plan.levels[j]
        say(f"until decided: look {j + 1} of at most {len(plan.sizes)}, {n} tasks, level "
            f"α = {level:.3g} ({sequential.SPENDING})")  # fmt: skip
        u = dataclasses.replace(ud, tasks=n, looks=tuple(lk.as_dict() for lk in looks))
        # --budget is over the whole run (each look's run_live counts the looks before it)
        kw = {**run.kwargs(), "resume": run.resume or bool(looks) or j > 0}
        bar = progress() if progress is not None else None
        try:
            result = run_live(
                corpus, key, scenarios, dataclasses.replace(config, until_decided=u), out,
                scenario_hash=scenario_hash, progress=bar.update if bar else None, say=say,
                samples=samples, **kw,
            )  # fmt: skip
        finally:
            if bar is not None:
                bar.close()
        if not result.complete or result.over_error_rate:
            return Decided(result, plan, tuple(looks), False)
        records = int(result.manifest.get("records", 0))
        try:
            looks.append(judge_look(out, config, plan, j, records))
            record(out, plan, looks)
        except KeyboardInterrupt:  # the look's records are saved: --resume judges it again
            raise RunInterrupted(out, result.manifest["run_id"], records, records) from None
    return Decided(result, plan, tuple(looks), True)


def asked(out: Path, config: LiveConfig, rows: Mapping[str, Any]) -> list[str]:
    """The arms whose verdicts the run waits for: the ``--specific`` ones and, with
    ``--no-over-broad``, every judged arm but the controls gate leaves out in a run of every arm
    (:func:`layerlab.analysis.gate.left_out_controls`)."""
    from layerlab.analysis.gate import left_out_controls

    u = config.until_decided
    assert u is not None
    names = list(u.specific)
    if u.no_over_broad:
        skip = set(left_out_controls(out, list(config.mitigations)))
        names += [a for a in rows if a not in names and a not in skip]
    return names


def judge_look(
    out: Path, config: LiveConfig, plan: sequential.Plan, j: int, records: int
) -> sequential.Look:
    """Look ``j`` (from 0) of the finished records in ``out``: Table 10's verdict of every arm
    asked, judged at the look's level (as ``compare --matrix`` and ``gate`` judge; with several
    blocks of units, each block's verdict, named ``ARM [block]``)."""
    from layerlab.analysis import compare

    level = plan.levels[j]
    try:
        blocks = compare.matrix_blocks(out, N_BOOT, SEED, plan.delta, alpha=level)
    except (compare.CompareError, ValueError) as exc:
        raise LiveRunError(f"--until-decided: cannot judge look {j + 1}: {exc}") from None
    verdicts: dict[str, dict[str, str]] = {}
    for block, (mx, _) in blocks.items():
        rows = {str(r["mitigation"]): r for _, r in mx.summary.iterrows()}
        for name in asked(out, config, rows):
            r = rows[name]
            label = name if len(blocks) == 1 else f"{name} [{block}]"
            verdicts[label] = {"verdict": str(r["verdict"]), "reason": str(r["reason"] or "")}
    return sequential.Look(j + 1, plan.sizes[j], records, level, verdicts)


def record(out: Path, plan: sequential.Plan, looks: list[sequential.Look]) -> None:
    """Write the looks judged so far into the manifest's ``until_decided`` block, with the run's
    outcome (``decided``, ``budget spent`` or ``looking``) and its summary lines."""
    m = archive.read_manifest(out)
    over = sequential.stopped(plan, looks)
    everything = set(sequential.decisions(looks)) >= set(looks[-1].verdicts)
    ud = {
        **m["until_decided"],
        "looks": [lk.as_dict() for lk in looks],
        "outcome": ("decided" if everything else "budget spent") if over else "looking",
        "summary": sequential.summary(plan, looks),
    }
    archive.write_manifest(out, {**m, "until_decided": ud})
