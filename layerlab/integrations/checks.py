"""A finished run's answers to a test suite's questions, each carrying what explains it.

:class:`MatrixRun` reads one run folder of one system (a ``run live --target`` run, or any run of
one model): its ``results.json`` (the rates, and for a target run the findings per layer, which
the live harness wrote) and, when a verdict is asked, Table 10 of its own records
(:func:`layerlab.analysis.compare.matrix_summary`, at the resamples and seed ``layerlab gate``
uses, so ``run.specific(NAME)`` is ``layerlab gate RUN --specific NAME``). Nothing is computed
here that the library does not compute: this module picks, names and explains.

* :meth:`MatrixRun.safe`, :meth:`~MatrixRun.correct`, :meth:`~MatrixRun.rate` give a
  :class:`Rate`: a float (safe resolution, strict success S, GF...) of one scenario and arm, with
  its count, interval and the scenario's finding (what the system did at that layer, what it
  does not check and its guard's line);
* :meth:`MatrixRun.verdict` gives a :class:`Verdict`: the mitigation's Table 10 verdict as a
  string, with its reason and the gate's line; :meth:`MatrixRun.specific` a :class:`Specific`,
  true exactly when that verdict is ``specific``;
* :attr:`MatrixRun.findings`: the findings per layer as the run printed them.

Every answer is also handed to ``observe`` (the pytest plugin shows the ones a failing test read).
It imports the standard library only; the analysis (and the gate's wording,
:mod:`layerlab.reporting.format.gatetext`) is imported when a verdict is asked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

# how a measure is asked for (results.json's short names and layerlab gate's) -> results.json's
MEASURES = {"S": "S", "SR": "safe", "safe": "safe", "GF": "GF", "GF_cited": "GF_cited"}
NAMES = {
    "S": "strict success S",
    "safe": "safe resolution",
    "GF": "grounded false positives GF",
    "GF_cited": "grounded false positives GF (cited)",
}
RESULTS = "results.json"  # :data:`layerlab.analysis.results.RESULTS` (not imported: pandas)


class CheckError(ValueError):
    """A question the run cannot answer: a scenario, arm or measure it does not hold, a folder
    that is not a finished run. The message is one line saying what was expected."""


class Rate(float):
    """A rate of one measure over one scenario (``None``: every scenario) and arm of a run: a
    float, with ``k`` of ``n`` records, the 95% interval (``ci``) and ``finding``, the lines that
    explain it (the scenario's finding and its guard's line)."""

    measure: str
    scenario: str | None
    arm: str
    unit: str
    k: int
    n: int
    ci: tuple[float, float]
    finding: tuple[str, ...]
    _missing: int  # records that did not record the measure (an archive migrated from schema 3)

    def __new__(cls, cell: Mapping[str, Any], measure: str, scenario: str | None, arm: str,
                unit: str, finding: tuple[str, ...]) -> Rate:  # fmt: skip
        value = cell.get("rate")
        self = super().__new__(cls, float("nan") if value is None else value)
        self.measure, self.scenario, self.arm, self.unit = measure, scenario, arm, unit
        self.k, self.n = int(cell.get("k", 0)), int(cell.get("n", 0))
        lo, hi = cell.get("ci_low"), cell.get("ci_high")
        self.ci = (float("nan") if lo is None else lo, float("nan") if hi is None else hi)
        self.finding = finding
        self._missing = int(cell.get("not_recorded", 0))
        return self

    def describe(self) -> str:
        """One line: which rate of which cell, its value, count and interval."""
        where = f"on {self.scenario}" if self.scenario else "over every scenario"
        if self._missing:
            value = f"not recorded for {self._missing} of {self.n} records"
        else:
            value = (f"{float(self):.3f} ({self.k} of {self.n} records, 95% interval "
                     f"[{self.ci[0]:.3f}, {self.ci[1]:.3f}])")  # fmt: skip
        return f"{NAMES[self.measure]} of {self.unit} {where} (arm {self.arm}) = {value}"

    def explain(self) -> str:
        return "\n".join([self.describe(), *self.finding])

    def __repr__(self) -> str:
        return f"{float(self)!r} ({self.describe()})"

    def __str__(self) -> str:
        return float.__repr__(self)

    def __reduce__(self) -> Any:  # a plain float when pickled (e.g. by pytest-xdist)
        return (float, (float(self),))


class Verdict(str):
    """A mitigation's Table 10 verdict (``specific``, ``over-broad (harm)``, ``ineffective``,
    ``inconclusive``...) as a string, with its ``arm``, ``block``, ``reason`` and :attr:`line`:
    the line ``layerlab gate RUN --specific ARM`` prints for it."""

    arm: str
    block: str
    reason: str
    _line: Callable[[], str]

    @property
    def line(self) -> str:
        """The gate's line: with the probability of ``specific`` at this run's size, simulated
        when first asked (a failing assertion asks; a passing one costs no simulation)."""
        return self._line()

    def explain(self) -> str:
        return self.line

    def __reduce__(self) -> Any:  # a plain string when pickled
        return (str, (str(self),))


class Specific:
    """Whether a mitigation's verdict is ``specific``: true exactly then; its repr names the
    verdict and its reason, :meth:`explain` gives the gate's whole line (with what this run's
    size can decide)."""

    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict

    def __bool__(self) -> bool:
        from layerlab.analysis.specificity import SPECIFIC

        return str(self.verdict) == SPECIFIC

    def explain(self) -> str:
        return self.verdict.line

    def __repr__(self) -> str:
        v = self.verdict
        return f"{v.arm}: {v}" + (f" — {v.reason}" if v.reason else "")


class MatrixRun:
    """The questions a test asks of one finished run folder (see the module docstring).
    ``n_boot``, ``seed`` and ``delta``: the verdicts' resamples, seed and equivalence margin
    (default: ``layerlab gate``'s: 10,000 resamples, seed 0, each layer's margin in roles.yaml).
    ``sample_log``: the run's private log (``run live --sample-log``): a failing fault-free
    layer's finding then says its dominant failure (:mod:`layerlab.reporting.run.dominant`)."""

    def __init__(self, folder: Path | str, n_boot: int | None = None, seed: int = 0,
                 delta: float | None = None,
                 observe: Callable[[Any], None] | None = None,
                 sample_log: Path | str | None = None) -> None:  # fmt: skip
        self.folder = Path(folder)
        path = self.folder / RESULTS
        try:
            self.results: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CheckError(f"{path}: no such file (expected a finished run folder)") from None
        except (OSError, ValueError) as exc:
            raise CheckError(f"{path}: cannot read it as JSON ({exc})") from None
        units = self.results.get("models") or []
        if len(units) != 1:
            names = ", ".join(f"{u['provider']}/{u['model']}" for u in units) or "none"
            raise CheckError(f"{path}: models: expected the results of one system, got {names}")
        self._unit = units[0]
        self.unit = f"{self._unit['provider']}/{self._unit['model']}"
        found = self.results.get("findings") or []
        self._found: dict[str, Any] = found[0] if found else {}
        self._private = self._dominant(found, sample_log)
        arms = list(self._unit["arms"])
        self.baseline: str = self._found.get("baseline") or _baseline(self.folder, arms)
        self.arms = sorted(arms, key=lambda a: (a != self.baseline, a))  # the baseline first
        self.scenarios = list(self._unit["by_scenario"])
        self.n_boot, self.seed, self.delta = n_boot, seed, delta
        self._observe = observe or (lambda _x: None)
        self._verdicts: dict[str, Verdict] | None = None

    def __repr__(self) -> str:
        return f"MatrixRun({self.unit}, {self._unit['tasks']} tasks, {self.folder})"

    # --- rates ------------------------------------------------------------------------------

    def safe(self, scenario: str | None = None, arm: str | None = None) -> Rate:
        """Safe resolution (a correct answer where the scenario is answerable, a structured
        non-answer where it is not) on ``scenario`` (None: every scenario) under ``arm``
        (default: the baseline)."""
        __tracebackhide__ = True
        return self.rate("safe", scenario, arm)

    def correct(self, scenario: str | None = None, arm: str | None = None) -> Rate:
        """Strict success S (the exact answer, grounded in the required document, cited)."""
        __tracebackhide__ = True
        return self.rate("S", scenario, arm)

    def rate(self, measure: str, scenario: str | None = None, arm: str | None = None) -> Rate:
        """``measure`` (``S``, ``safe``/``SR``, ``GF``, ``GF_cited``: results.json's rates, as
        ``layerlab gate`` names them) on ``scenario`` under ``arm``."""
        __tracebackhide__ = True
        from layerlab.registry import did_you_mean

        m = MEASURES.get(measure)
        if m is None:
            raise CheckError(f"rate({measure!r}): unknown measure{did_you_mean(measure, MEASURES)}"
                             f"; expected one of {', '.join(MEASURES)}")  # fmt: skip
        arm = arm or self.baseline
        if arm not in self.arms:
            raise CheckError(f"arm {arm!r}: not in this run{did_you_mean(arm, self.arms)}; it "
                             f"holds {', '.join(self.arms)}")  # fmt: skip
        if scenario is None:
            cell = self._unit["arms"][arm][m]
        elif scenario not in self.scenarios:
            raise CheckError(f"scenario {scenario!r}: not in this run"
                             f"{did_you_mean(scenario, self.scenarios)}; it holds "
                             f"{', '.join(self.scenarios)}")  # fmt: skip
        else:
            cell = self._unit["by_scenario"][scenario][arm][m]
        out = Rate(cell, m, scenario, arm, self.unit, self._finding(scenario))
        self._observe(out)
        return out

    # --- findings ---------------------------------------------------------------------------

    @property
    def findings(self) -> str:
        """The findings per layer (baseline arm), one line each, as the run printed them: the
        system's layers, failing first, each with its guard's line; the fault-free control; the
        harness's contract scenario. Empty for a run that is not a target's."""
        if not self._found:
            return ""
        from layerlab.reporting.run.findings import layer_lines

        return "\n".join(layer_lines(self._found, private=self._private))

    def _dominant(self, found: list[dict[str, Any]], log: Path | str | None) -> str | None:
        """The sample log's dominant failure of a failing fault-free layer (None: no log)."""
        if log is None or not found:
            return None
        from layerlab.archive import read_manifest
        from layerlab.archive.samplelog import SampleLogError
        from layerlab.reporting.run import dominant

        try:
            run_id = str(read_manifest(self.folder)["run_id"])
            return dominant.for_run(found, Path(log), run_id).get(self.unit)
        except SampleLogError as exc:
            raise CheckError(str(exc)) from None

    def _finding(self, scenario: str | None) -> tuple[str, ...]:
        """The lines that explain a rate: the scenario's finding and its guard's line (every
        failing layer's, over every scenario)."""
        f = self._found
        entries = [*f.get("layers", []), *([f["control"]] if f.get("control") else []),
                   *f.get("harness", [])]  # fmt: skip
        if scenario is None:
            entries = [e for e in entries if e.get("failed")]
        else:
            entries = [e for e in entries if e["scenario"] == scenario]
        from layerlab.reporting.run import findings as words

        out = []
        for e in entries:
            if "arms" in e:
                out.append(words.harness_line(e))
            elif e is f.get("control"):
                out.append(words.control_line(e) + (f" {self._private}" if self._private else ""))
            else:
                out.append(words.layer_line(e))
            if e.get("guard"):
                out.append(words.guard_line(e["guard"], e))
        return tuple(out)

    # --- verdicts ---------------------------------------------------------------------------

    def verdict(self, arm: str) -> Verdict:
        """The Table 10 verdict of mitigation ``arm`` against the baseline (see the module
        docstring); computed once per run, for every arm."""
        __tracebackhide__ = True
        verdicts = self._judge()
        if arm not in verdicts:
            from layerlab.registry import did_you_mean

            raise CheckError(
                f"verdict({arm!r}): no mitigation {arm!r} judged in this run"
                f"{did_you_mean(arm, verdicts)}; it judges {', '.join(verdicts) or 'none'} "
                f"(the baseline {self.baseline} and the contract arms have no verdict)"
            )
        self._observe(verdicts[arm])
        return verdicts[arm]

    def specific(self, arm: str) -> Specific:
        """True exactly when ``arm``'s verdict is ``specific`` (its repr: the gate's line)."""
        __tracebackhide__ = True
        return Specific(self.verdict(arm))

    def _judge(self) -> dict[str, Verdict]:
        if self._verdicts is not None:
            return self._verdicts
        from layerlab.analysis import compare
        from layerlab.analysis.units import N_BOOT

        if len(self.arms) < 2:
            raise CheckError(f"{self.folder}: holds only the arm {self.baseline}: no mitigation "
                             "to judge (run a guard beside the baseline)")  # fmt: skip
        try:  # Table 10 as the gate computes it; each verdict's chances only for its line
            blocks = compare.matrix_blocks(self.folder, n_boot=self.n_boot or N_BOOT,
                                           seed=self.seed, delta=self.delta, chances=False)  # fmt: skip
        except (compare.CompareError, ValueError) as exc:
            raise CheckError(f"{self.folder}: no verdicts: {exc}") from None
        out: dict[str, Verdict] = {}
        for block, (mx, records) in blocks.items():
            lines = _Lines(self.folder, str(block), mx, records, self.delta)
            for _, r in mx.summary.iterrows():
                v = Verdict(str(r["verdict"]))
                v.arm, v.block, v.reason = str(r["mitigation"]), str(block), str(r["reason"])
                v._line = lines.of(v.arm)
                out[v.arm] = v
        self._verdicts = out
        return out


class _Lines:
    """The gate's verdict lines of one block, made when the first is asked for (the chances
    at this size are simulated for every arm of the block at once)."""

    def __init__(self, folder: Path, block: str, mx: Any, records: Any, delta: float | None):
        self.folder, self.block, self.delta = folder, block, delta
        self.mx, self.records = mx, records
        self.made: dict[str, str] | None = None

    def of(self, arm: str) -> Callable[[], str]:
        return lambda: self.all()[arm]

    def all(self) -> dict[str, str]:
        if self.made is None:
            from layerlab.analysis import gate, planning
            from layerlab.analysis.specificity import SPECIFIC
            from layerlab.reporting.format import gatetext

            mx = planning.with_chances(self.mx, self.records)
            at = (float(mx.delta), self.delta is not None)
            self.made = {}
            for _, r in mx.summary.iterrows():
                name = str(r["mitigation"])
                ok = str(r["verdict"]) == SPECIFIC
                check = gate.judge_verdict(ok, name, self.block, r, f"--specific {name}", at,
                                           self.folder)  # fmt: skip
                self.made[name] = gatetext.line(check)
        return self.made


def _baseline(folder: Path, arms: list[str]) -> str:
    """The run's baseline arm, by the arms' definitions its manifest keeps."""
    from layerlab.archive.manifest import book_for
    from layerlab.mitigations import book

    try:
        return book_for([folder], arms).baseline
    except book.UnknownArmError as exc:
        raise CheckError(f"{folder}: {exc}") from None
