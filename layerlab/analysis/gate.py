"""CI gates: thresholds on a run's rates and on Table 10's verdicts, each check passing or failing.

A team that puts the fault matrix in its CI wants one command that fails the build when a layer
regresses: ``layerlab gate RUN --min S:clean=0.6 --max GF:stale_index=0.1 --no-over-broad``.
A **threshold** names a measure by the short name the tables use (:data:`MEASURES`), optionally a
scenario, a mitigation arm and a model, and a bound::

    MEASURE[:SCENARIO][@ARM][/MODEL]=VALUE      e.g. S:clean@repair/local/qwen2.5-coder-1.5b=0.6

Without ``:SCENARIO`` the rate is over every scenario of the arm (the headline rate of
``results.json``); ``:*`` checks each scenario on its own. Without ``@ARM`` every arm is checked
on its own, without ``/MODEL`` every unit (``provider/model``, or the model's name alone). VALUE is
a share (``0.6``) or a percentage (``60%``). The syntax is :mod:`layerlab.analysis.thresholds`':
a scenario may be an intensity variant (``safe:stale_index@0.25=0.9``) and a measure a pass^k
over the run's epochs (``pass^4:stale_index@0.25=0.8``: the mean over the cell's tasks with at
least 4 epochs, a point estimate without an interval, so ``strict_ci`` compares it as it is).
Every rate is :func:`layerlab.analysis.results.rate`
— the rate and Clopper–Pearson interval clustered by task that ``results.json`` and the report show — over
the records of one model × scenario × arm cell; ``strict_ci`` compares the interval's bound that
is worse for the check (the lower bound for a minimum, the upper for a maximum) instead of the
point estimate. A threshold that matches no cell of the run is an input error, never a pass;
a cell whose label some records did not record (an archive migrated from schema 3) fails.

**Verdict gates** read Table 10 (:func:`layerlab.analysis.compare.matrix_summary`, with the
paper's resamples and seed, so the verdicts are the table's, at the equivalence margin δ of
``delta``, default :data:`layerlab.analysis.specificity.DELTA`): ``no_over_broad`` fails for every
mitigation whose verdict is over-broad *or inconclusive* (too few tasks to show it is not) —
but layerlab's own deliberately over-broad controls when the run holds every arm
(:func:`left_out_controls`: the summary line names them; a run that names its arms has each
checked),
``specific`` for each named mitigation whose verdict is not ``specific`` — inconclusive included,
and the line says so (each kind of unit judged as its own block, as the table does). ``min_power``
adds a check per judged mitigation: the chance of the verdict asked for at this size (specific,
or not over-broad), simulated from the run's own per-task rates with nothing changed off target
(:func:`layerlab.analysis.planning.with_chances`), must reach it.

:class:`GateSpec` is the same set of checks as a run configuration's ``gate:`` section. Each
:class:`Check` holds numbers and a reason code, never text: its line, the notes and the summary
are :mod:`layerlab.reporting.format.gatetext`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

# the threshold syntax is thresholds.py's; its names stay importable from here (the gate's API)
from layerlab.analysis.thresholds import (  # noqa: F401
    ALIASES,
    EACH,
    MEASURES,
    SYNTAX,
    Bound,
    GateError,
    Threshold,
    parse_key,
    parse_threshold,
    parse_value,
    pass_hat,
)
from layerlab.registry import did_you_mean

_FAILURE_SHARES = ("malformed", "provider_error")  # shares of a diagnostic, not archive labels


Share = Annotated[float, Field(ge=0, le=1)]


class GateSpec(BaseModel):
    """A run configuration's ``gate:`` section: the flags of ``layerlab gate`` as keys."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    min: dict[str, Share] = Field(default_factory=dict)  # MEASURE[:SCENARIO][@ARM][/MODEL]: share
    max: dict[str, Share] = Field(default_factory=dict)
    no_over_broad: bool = False
    specific: list[str] = Field(default_factory=list)
    strict_ci: bool = False
    delta: Share | None = None  # the verdicts' equivalence margin (default specificity.DELTA)
    min_power: Share | None = None  # P(the verdict asked for) at this size must reach it

    def problems(self) -> list[tuple[tuple[Any, ...], str]]:
        """``(location, message)`` per key that is not a threshold (for the config loader)."""
        out: list[tuple[tuple[Any, ...], str]] = []
        for bound in ("min", "max"):
            for key in getattr(self, bound):
                try:
                    parse_key(key, key)
                except GateError as exc:
                    out.append((("gate", bound, key), str(exc).split(": ", 1)[1]))
        return out

    def plan_problems(
        self,
        scenarios: Sequence[str],
        arms: Sequence[str],
        models: Sequence[str],
        baseline: str,
    ) -> list[tuple[tuple[Any, ...], str]]:
        """``(location, message)`` per gate that a run of these ``scenarios``, ``arms`` and
        ``models`` (``provider/model``; empty: a target run, not checked) could never pass as
        written: a threshold naming a scenario, arm or model the run lacks, a verdict gate on a
        run without a mitigation arm beside its baseline, a ``specific`` name the run lacks.
        What ``layerlab gate`` would refuse after the run, found before it (``run live``)."""
        out: list[tuple[tuple[Any, ...], str]] = []

        def lacks(loc: tuple[Any, ...], what: str, given: str, present: Sequence[str]) -> None:
            out.append(
                (loc, f"no {what} {given!r} in the run{did_you_mean(given, present)}; "
                      f"it runs: {', '.join(present)}")
            )  # fmt: skip

        names = [*models, *{m.split("/", 1)[-1] for m in models}]
        for bound in ("min", "max"):
            for key in getattr(self, bound):
                try:
                    _, scen, arm, model = parse_key(key, key)
                except GateError:
                    continue  # problems() reports it
                loc = ("gate", bound, key)
                if scen not in (None, EACH) and scen not in scenarios:
                    lacks(loc, "scenario", scen, scenarios)
                if arm is not None and arm not in arms:
                    lacks(loc, "mitigation arm", arm, arms)
                if model is not None and models and model not in names:
                    lacks(loc, "model", model, models)
        judged = [a for a in arms if a != baseline]
        if (self.no_over_broad or self.specific) and (baseline not in arms or not judged):
            key = "no_over_broad" if self.no_over_broad else "specific"
            out.append(
                (("gate", key), f"a verdict gate needs the baseline {baseline!r} and a mitigation "
                                f"arm beside it; the run's arms: {', '.join(arms)}")
            )  # fmt: skip
        for i, name in enumerate(self.specific):
            if name == baseline:
                out.append((("gate", "specific", i), f"{name!r} is the baseline: it has no verdict"))
            elif name not in judged:
                lacks(("gate", "specific", i), "mitigation arm", name, arms)
        return out

    def thresholds(self, origin: str) -> list[Threshold]:
        """The thresholds, each named by ``origin`` (the file) and its key."""
        return [
            Threshold(f"{origin}: gate.{b}: {k}", b, *parse_key(k, k), float(v))
            for b in ("min", "max")
            for k, v in getattr(self, b).items()
        ]


# why a check passed or failed: a threshold's value within its bound, beyond it, or not recorded;
# a verdict as asked, not, or inconclusive (never a pass); a power check's chance reached or short
Reason = Literal[
    "within", "beyond", "not_recorded",
    "as_asked", "not_as_asked", "inconclusive",
    "reached", "short", "not_simulated",
]  # fmt: skip
Asked = Literal["specific", "conclusive"]  # the verdict a check asks for (conclusive: not over-broad)
PLAN_BELOW = 0.8  # a failed verdict this unlikely at the run's size points to ``layerlab plan``


@dataclass(frozen=True)
class RateJudged:
    """What a threshold judged in one cell (model × scenario × arm): the rate of
    :func:`layerlab.analysis.results.rate`, its interval and count, and which number was
    compared with the bound (the point, or with ``strict_ci`` the interval's worse end)."""

    threshold: Threshold
    scenario: str | None  # None: over every scenario
    arm: str
    unit: str
    k: int
    n: int
    rate: float | None  # None: some records did not record the label (a migrated archive)
    ci: tuple[float, float] | None
    not_recorded: int = 0
    compared: Literal["rate", "ci_low", "ci_high"] = "rate"
    value: float | None = None  # the number compared with ``threshold.value``
    pass_k: int = 0  # a pass^k threshold's k (``n`` then counts tasks with >= k epochs), 0: a rate


@dataclass(frozen=True)
class VerdictJudged:
    """One mitigation's Table 10 row as a verdict or power check judged it: the margin ``delta``
    (``delta_set``: by ``--delta``), the simulated ``chance`` of the verdict asked at this size
    (nan: not simulated), the tasks ``specific`` needs (``floor``) and the run's ``tasks``."""

    mitigation: str
    block: str
    verdict: str
    reason: str  # Table 10's
    flag: str  # what asked: --no-over-broad, --specific NAME, --min-power P
    asked: Asked
    delta: float
    delta_set: bool
    chance: float
    sims: int
    floor: int
    tasks: int
    run: str | None = None  # the run folder, for the ``layerlab plan`` command (None: not shown)
    min_power: float | None = None

    @property
    def unlikely(self) -> bool:
        """Whether the verdict asked is unlikely at this size (a larger run would decide)."""
        return self.chance < PLAN_BELOW


@dataclass(frozen=True)
class Check:
    """One check's outcome: its kind, whether it passed, why (:data:`Reason`) and what it
    judged (a :class:`RateJudged` for a threshold, a :class:`VerdictJudged` for a verdict or
    power check). Numbers only: :mod:`layerlab.reporting.format.gatetext` writes its line."""

    kind: Literal["threshold", "verdict", "power"]
    passed: bool
    reason: Reason
    judged: RateJudged | VerdictJudged


KINDS = ("threshold", "verdict", "power")


@dataclass
class Outcome:
    """Every check of a gate over one run."""

    run: str
    checks: list[Check] = field(default_factory=list)
    left_out: tuple[str, ...] = ()  # over-broad controls --no-over-broad did not check
    # (--delta, the specs' margin) when --delta overrides the specs' margin: always stated
    margin_override: tuple[float, float] | None = None

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def counts(self) -> dict[str, tuple[int, int]]:
        """``kind -> (failed, checked)`` for each kind checked, in :data:`KINDS` order."""
        of = {k: [c.passed for c in self.checks if c.kind == k] for k in KINDS}
        return {k: (v.count(False), len(v)) for k, v in of.items() if v}


def _frame(df: pd.DataFrame) -> pd.DataFrame:
    """The run's records with the labels the measures read: ``results``' derived GF_cited and
    the failure shares as 0/1 labels (a share is the rate of its diagnostic)."""
    from layerlab.analysis.results import with_derived
    from layerlab.analysis.units import unit_labels

    out = with_derived(df)
    extra = {MEASURES[s]: df["diagnostic"] == MEASURES[s] for s in _FAILURE_SHARES}
    return out.assign(**extra, _unit=unit_labels(df))


def _pick(what: str, given: str | None, present: Sequence[str], where: str) -> list[str]:
    """The values of one dimension a threshold names: ``given`` (checked against the run), or
    every present value when not given."""
    if given is None:
        return list(present)
    if given in present:
        return [given]
    raise GateError(
        f"{where}: matches no cell: no {what} {given!r} in the run{did_you_mean(given, present)}; "
        f"it holds: {', '.join(present)}"
    )


def _units(given: str | None, df: pd.DataFrame, where: str) -> list[str]:
    """Units (``provider/model``) a threshold names: the full label or the model's name alone."""
    units = sorted(set(df["_unit"]))
    if given is None:
        return units
    hit = [u for u in units if given in (u, u.split("/", 1)[1])]
    if hit:
        return hit
    names = [*units, *sorted({u.split("/", 1)[1] for u in units})]
    raise GateError(
        f"{where}: matches no cell: no model {given!r} in the run{did_you_mean(given, names)}; "
        f"it holds: {', '.join(units)}"
    )


def check_threshold(df: pd.DataFrame, t: Threshold, strict_ci: bool = False) -> list[Check]:
    """One check per cell (model × scenario × arm) ``t`` names, in the order the tables use."""
    from layerlab.analysis import passk
    from layerlab.analysis.results import arm_order, rate
    from layerlab.analysis.units import ARM, scenario_order

    units = _units(t.model, df, t.source)
    arms = _pick("mitigation arm", t.arm, arm_order(df[ARM].unique()), t.source)
    scen_present = scenario_order(df)
    if t.scenario is None:
        scens: list[str | None] = [None]
    elif t.scenario == EACH:
        scens = list(scen_present)
    else:
        scens = list(_pick("scenario", t.scenario, scen_present, t.source))
    hat = pass_hat(t.measure)
    label = MEASURES[t.measure] if hat is None else hat[0]
    if hat is not None and (have := passk.epochs(df)) < hat[1]:
        raise GateError(f"{t.source}: {t.measure} needs {hat[1]} epochs of a task; the run has "
                        f"{have} (run live --epochs {hat[1]})")  # fmt: skip
    out = []
    for u in units:
        for s in scens:
            for a in arms:
                sub = df[(df["_unit"] == u) & (df[ARM] == a)]
                if s is not None:
                    sub = sub[sub["scenario"] == s]
                if sub.empty:  # e.g. an arm run for one model only
                    continue
                r = rate(sub, label) if hat is None else _pass_rate(sub, label, hat[1])
                out.append(_judge_rate(r, t, (s, a, u), strict_ci))
    if not out:
        raise GateError(f"{t.source}: matches no cell of the run (no records in those cells)")
    return out


def _pass_rate(sub: pd.DataFrame, label: str, k: int) -> dict[str, Any]:
    """pass^k of ``label`` over the cell's tasks with at least ``k`` epochs, shaped as a rate
    (``n``: those tasks; no interval: a point estimate, compared as one even with strict_ci)."""
    from layerlab.analysis import passk

    c = passk.cell(passk.task_counts(sub, label), k)
    return {"k": 0, "n": c["tasks"], "rate": c["pass^k"], "ci_low": None, "ci_high": None,
            "pass_k": k}  # fmt: skip


def _judge_rate(
    r: Mapping[str, Any], t: Threshold, cell: tuple[str | None, str, str], strict_ci: bool
) -> Check:
    """The check of one cell's rate ``r`` (``(scenario, arm, unit)``) against ``t``."""
    ci = None if r.get("ci_low") is None else (float(r["ci_low"]), float(r["ci_high"]))
    n = int(r["n"])
    if r.get("rate") is None:  # a label some records did not record (a migrated archive)
        judged = RateJudged(t, *cell, int(r.get("k", 0)), n, None, ci,
                            int(r.get("not_recorded", 0)))  # fmt: skip
        return Check("threshold", False, "not_recorded", judged)
    compared: Literal["rate", "ci_low", "ci_high"] = (
        ("ci_low" if t.bound == "min" else "ci_high") if strict_ci and ci else "rate"
    )
    v = float(r[compared])
    ok = v >= t.value if t.bound == "min" else v <= t.value
    judged = RateJudged(t, *cell, int(r["k"]), n, float(r["rate"]), ci, 0, compared, v,
                        int(r.get("pass_k", 0)))  # fmt: skip
    return Check("threshold", ok, "within" if ok else "beyond", judged)


def check_verdicts(
    run: Path | str,
    arms: Sequence[str],
    no_over_broad: bool,
    specific: Sequence[str],
    n_boot: int,
    seed: int,
    delta: float | None = None,
    min_power: float | None = None,
    left_out: Sequence[str] = (),
) -> list[Check]:
    """Table 10's verdicts of the run's own mitigation arms against its baseline, per block:
    with ``no_over_broad`` one check per mitigation but those ``left_out``
    (:func:`left_out_controls`), one per ``specific`` name, and with ``min_power`` one power
    check per mitigation judged (every one when no verdict gate is asked for)."""
    from layerlab.analysis import compare, specificity
    from layerlab.archive.manifest import book_for
    from layerlab.mitigations import book

    if no_over_broad:
        flag = "--no-over-broad"
    elif specific:
        flag = f"--specific {specific[0]}"
    else:
        flag = f"--min-power {min_power}"
    try:  # the run's own definitions of its arms, not what is installed now
        spec = book_for([run], arms)
    except book.UnknownArmError as exc:
        raise GateError(f"RUN {exc}") from None
    base = spec.baseline
    judged = [a for a in arms if a != base]
    for name in specific:
        if name == base:
            raise GateError(
                f"--specific {name}: the baseline arm has no verdict (it is what "
                "every mitigation is compared against)"
            )
        if name not in judged:
            raise GateError(
                f"--specific {name}: matches no mitigation of the run"
                f"{did_you_mean(name, judged) or did_you_mean(name, book.shipped().arms)}; "
                f"it holds: {', '.join(judged) or 'only the baseline ' + base}"
            )
    try:
        blocks = compare.matrix_summary(run, n_boot=n_boot, seed=seed, delta=delta)
    except (compare.CompareError, ValueError) as exc:
        raise GateError(f"{flag}: {exc}") from None
    out = []
    for block, mx in blocks.items():
        at = (float(mx.delta), delta is not None)
        rows = {str(r["mitigation"]): r for _, r in mx.summary.iterrows()}
        powered = set(rows) if (no_over_broad or not specific) else set(specific)
        if no_over_broad:
            for name, r in rows.items():
                if name in left_out:
                    continue
                v = str(r["verdict"])
                ok = not specificity.is_over_broad(v) and v != specificity.INCONCLUSIVE
                out.append(judge_verdict(ok, name, block, r, "--no-over-broad", at, run))
        for name in specific:
            if name in rows:
                r = rows[name]
                ok = str(r["verdict"]) == specificity.SPECIFIC
                out.append(judge_verdict(ok, name, block, r, f"--specific {name}", at, run))
        if min_power is not None:
            for name in (n for n in rows if n in powered):
                asked: Asked = "specific" if name in specific else "conclusive"
                out.append(_judge_power(name, block, rows[name], min_power, asked, at))
    return out


def margin_override(delta: float | None) -> tuple[float, float] | None:
    """``(delta, the specs' margin)`` when ``--delta`` overrides the specs' equivalence margin
    (a verdict at another margin is another claim, and the log must say which was tested);
    None when it does not (not given, or the specs' one margin)."""
    from layerlab.analysis import specificity

    if delta is None:
        return None
    spec = specificity.layer_margins()
    default = min(spec.values(), default=specificity.DELTA)
    if abs(delta - default) < 1e-12 and len(set(spec.values())) <= 1:
        return None
    return (delta, default)


def left_out_controls(run: Path | str, arms: Sequence[str]) -> tuple[str, ...]:
    """The arms ``--no-over-broad`` does not check: layerlab's deliberately over-broad controls
    (``roles.yaml`` ``over_broad_controls``, as the shipped spec defines them) when the run holds
    every matrix arm of the shipped spec (``--mitigation all``: the user named no arm); none when
    the run names its arms, so a control the user named is checked."""
    from layerlab.archive.manifest import book_for
    from layerlab.faults.roles import load_roles
    from layerlab.mitigations import book

    shipped = book.shipped()
    if not set(shipped.matrix_arms) <= set(arms):
        return ()
    try:
        defined = book_for([run], arms).arms
    except book.UnknownArmError:
        return ()  # check_verdicts reports it
    return tuple(
        n for n in load_roles().over_broad_controls
        if n in arms and defined.get(n) == shipped.arms.get(n)
    )  # fmt: skip


def chance(r: Mapping[str, Any], asked: str) -> float:
    """The probability a run of this design gets the verdict ``asked`` (``specific``, or
    ``conclusive``: specific or ineffective, what --no-over-broad passes on), from the matrix
    row's simulated shares (:mod:`layerlab.analysis.planning`); nan when not simulated."""
    if asked == "specific":
        return float(r.get("p specific", float("nan")))
    return float(r.get("p specific", float("nan"))) + float(r.get("p ineffective", float("nan")))


def _judged(name: str, block: str, r: Mapping[str, Any], flag: str, asked: Asked,
            at: tuple[float, bool], run: Any = None,
            min_power: float | None = None) -> VerdictJudged:  # fmt: skip
    """A Table 10 row ``r`` as what a check judged (``at``: the margin, set by --delta)."""
    return VerdictJudged(
        name, block, str(r["verdict"]), str(r.get("reason") or ""), flag, asked, at[0], at[1],
        chance(r, asked), int(r.get("sims", 0)), int(r.get("floor", 0)), int(r.get("tasks", 0)),
        None if run is None else str(run), min_power,
    )  # fmt: skip


def judge_verdict(ok: bool, name: str, block: str, r: Mapping[str, Any], flag: str,
                  at: tuple[float, bool], run: Any = None) -> Check:  # fmt: skip
    """The check of one mitigation's Table 10 row ``r`` (block ``block``, asked by ``flag``, at
    the margin ``at``: ``(delta, set by --delta)``): the gate's verdict check, and the one
    :mod:`layerlab.integrations.checks` explains ``run.specific(NAME)`` by; ``run`` the folder a
    failing, unlikely verdict's ``layerlab plan`` command names (None: no command)."""
    from layerlab.analysis.specificity import INCONCLUSIVE

    asked: Asked = "specific" if flag.startswith("--specific") else "conclusive"
    judged = _judged(name, block, r, flag, asked, at, run)
    if ok:
        return Check("verdict", True, "as_asked", judged)
    why: Reason = "inconclusive" if judged.verdict == INCONCLUSIVE else "not_as_asked"
    return Check("verdict", False, why, judged)


def _judge_power(name: str, block: str, r: Mapping[str, Any], min_power: float, asked: Asked,
                 at: tuple[float, bool]) -> Check:  # fmt: skip
    judged = _judged(name, block, r, f"--min-power {min_power:g}", asked, at, None, min_power)
    p = judged.chance
    if p != p:
        return Check("power", False, "not_simulated", judged)
    ok = p >= min_power
    return Check("power", ok, "reached" if ok else "short", judged)


def evaluate(
    run: Path | str,
    thresholds: Iterable[Threshold] = (),
    no_over_broad: bool = False,
    specific: Sequence[str] = (),
    strict_ci: bool = False,
    n_boot: int = 10_000,
    seed: int = 0,
    allow_partial: bool = False,
    delta: float | None = None,
    min_power: float | None = None,
) -> Outcome:
    """Every check of a gate over the run folder or archive ``run``; :class:`GateError` on bad
    input (a missing or partial archive, a threshold that matches no cell, an unknown name)."""
    from layerlab.analysis import compare
    from layerlab.analysis.units import ARM

    thresholds = list(thresholds)
    if not thresholds and not no_over_broad and not specific and min_power is None:
        raise GateError(
            "nothing to check: give --min/--max thresholds, --no-over-broad, --specific NAME, "
            "--min-power P or --config FILE with a gate: section"
        )
    try:
        src = compare.load(run)
    except compare.CompareError as exc:
        raise GateError(f"RUN {exc}") from None
    if src.partial and not allow_partial:
        raise GateError(
            f"RUN {run}: a partial archive (an unfinished run, or an archive file without its "
            "manifest); gate a finished run folder, or pass --allow-partial"
        )
    df = _frame(src.df)
    outcome = Outcome(str(run))
    for t in thresholds:
        outcome.checks.extend(check_threshold(df, t, strict_ci))
    if no_over_broad or specific or min_power is not None:
        arms = list(dict.fromkeys(df[ARM]))
        if no_over_broad:
            outcome.left_out = left_out_controls(run, arms)
        outcome.margin_override = margin_override(delta)
        outcome.checks.extend(
            check_verdicts(
                run, arms, no_over_broad, specific, n_boot, seed, delta, min_power, outcome.left_out
            )
        )
    return outcome
