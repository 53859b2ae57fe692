"""Fault scenarios: compositions of the registered fault operators (:mod:`layerlab.faults.operators`)
written in the DSL.

A scenario (``data/specs/scenarios.yaml``) lists fault operators with parameters, the layer
it targets, the behaviour a safe system should show, and whether the task stays answerable.
:func:`load_scenarios` validates the file (every problem with its ``file:line``) and builds each
:class:`Scenario`, which applies its operators to the index, the access scopes and the tool's
payloads.

Intensity: every fault takes a dose λ in [0, 1] (:meth:`Scenario.at`). λ = 1 is the scenario as
written, byte for byte; below 1 each unit the fault can strike is struck with probability λ, by a
seeded draw of its own (never the operator's random stream), so the units struck at λ = 0.1 are
among those struck at λ = 0.25 (nested). The unit is the stage's: an index-stage fault strikes a
share of the *policies* (their documents are faulted, the others' kept as built: "10% of the index
is stale"), an access- or tool-stage fault a share of the *tasks* (their principal is denied,
their tool calls faulted: "one call in ten fails"). A variant's name is ``<scenario>@<λ>``
(:func:`variant_name`), the name its records carry; a task its faults did not strike is
answerable as under the clean scenario (:meth:`Scenario.answerable_for`), so safe resolution
credits an answer there and a non-answer where the fault struck.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from layerlab import paths
from layerlab.corpus.build import Document
from layerlab.corpus.spec import load_yaml_as
from layerlab.faults.operators import (
    OPERATORS,
    FaultOperator,
    Payload,
    ToolContext,
    stable_int,
)
from layerlab.faults.session import SessionContext, SessionOperator, SessionState
from layerlab.faults.transport import TransportEvent, TransportOperator, merge


class _StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class FaultSpec(_StrictModel):
    op: str
    params: dict[str, Any] = Field(default_factory=dict)
    # how many tool calls the fault lasts (None: every call). A transient tool-stage fault with
    # ``lasts: 1`` hits the first call only, so a bounded retry can recover.
    lasts: int | None = Field(default=None, ge=1)


class ScenarioSpec(_StrictModel):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    layer: str = Field(min_length=1)
    injected: str = Field(min_length=1)
    expected_behaviour: str = Field(min_length=1)
    answerable: bool
    faults: list[FaultSpec] = Field(default_factory=list)

    @property
    def outcome(self) -> Literal["success", "safe_resolution"]:
        """The outcome this scenario is judged by: strict success where a correct answer is the
        safe outcome (``answerable``), safe resolution — a structured non-answer — elsewhere.
        The one place that decides it (the scorer's ``safe_resolution`` equals ``success`` on
        answerable scenarios, so every cell can be read from that one label)."""
        return "success" if self.answerable else "safe_resolution"


STRUCK = {"index": "policies (their documents faulted)", "access": "tasks (their principal)",
          "tool": "tasks (their tool calls)", "transport": "tasks (their calls on the wire)",
          "session": "conversations (their session state)"}  # fmt: skip
"""What an intensity λ is the share of, by the stage a fault acts at (the unit it strikes)."""

INTENSITY_MARK = "@"
"""Between a scenario's name and its intensity in a variant's name: ``stale_index@0.25``."""


def variant_name(name: str, intensity: float) -> str:
    """``name`` at ``intensity``: the name itself at 1 (today's scenario), ``name@λ`` below
    (λ in at most four decimals, trailing zeros dropped: ``0.1``, ``0.25``, ``0``)."""
    check_intensity(intensity)
    if intensity >= 1:
        return name
    return f"{name}{INTENSITY_MARK}" + f"{float(intensity):.4f}".rstrip("0").rstrip(".")


def split_variant(name: str) -> tuple[str, float]:
    """``(scenario, λ)`` of a variant's name (λ = 1 for a plain name); ValueError on a bad λ."""
    base, mark, dose = name.partition(INTENSITY_MARK)
    if not mark:
        return name, 1.0
    try:
        value = float(dose)
    except ValueError:
        raise ValueError(f"scenario {name!r}: expected <scenario>@<intensity in [0, 1]>") from None
    check_intensity(value, name)
    if value >= 1:
        raise ValueError(f"scenario {name!r}: intensity 1 is the scenario itself ({base!r})")
    return base, value


def check_intensity(value: float, where: str = "intensity") -> float:
    """``value`` if it is a number in [0, 1] with at most four decimals, else ValueError naming
    ``where``."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value) \
            or not 0.0 <= float(value) <= 1.0 or round(float(value), 4) != float(value):  # fmt: skip
        raise ValueError(
            f"{where}: expected an intensity in [0, 1] with at most four decimals, got {value!r}"
        )
    return float(value)


def parse_intensities(text: str) -> tuple[float, ...]:
    """``--intensity 0,0.1,0.25,0.5,1``: the distinct values, ascending (ValueError if bad)."""
    values = []
    for part in text.split(","):
        try:
            values.append(check_intensity(float(part.strip()), f"--intensity {part.strip()!r}"))
        except ValueError as exc:
            if "expected an intensity" in str(exc):
                raise
            raise ValueError(
                f"--intensity {part.strip()!r}: expected comma-separated numbers in [0, 1], "
                "e.g. 0,0.1,0.25,0.5,1"
            ) from None
    return tuple(sorted(set(values)))


class ScenarioFile(_StrictModel):
    seed: int
    scenarios: list[ScenarioSpec] = Field(min_length=1)


@dataclass(frozen=True)
class Scenario:
    """A compiled scenario: its spec, its operators and its seed."""

    spec: ScenarioSpec
    operators: tuple[FaultOperator, ...]
    seed: int
    lasts: tuple[int | None, ...] = ()  # per operator: how many tool calls it lasts (None: all)
    intensity: float = 1.0  # the dose λ: the share of units each fault strikes (module docstring)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def base_name(self) -> str:
        """The scenario's name in the DSL (a variant's name without its ``@λ``)."""
        return split_variant(self.spec.name)[0]

    def at(self, intensity: float) -> Scenario:
        """This scenario at dose ``intensity`` (named ``<scenario>@<λ>``; itself at 1). Its seed
        is the scenario's, so a struck unit is faulted exactly as at λ = 1."""
        check_intensity(intensity)
        if intensity >= 1 and self.intensity >= 1:
            return self
        base = self.base_name
        return replace(
            self,
            spec=self.spec.model_copy(update={"name": variant_name(base, intensity)}),
            intensity=float(intensity),
        )

    def strikes(self, position: int, unit: str) -> bool:
        """Whether operator ``position``'s fault strikes ``unit`` (a policy or task id) at this
        intensity: always at 1; below, by a seeded uniform draw of its own, so nested in λ."""
        if self.intensity >= 1:
            return True
        u = stable_int(self.seed, position, "intensity", unit) / 2.0**64
        return u < self.intensity

    def struck(self, task_id: str, policy_id: str) -> bool:
        """Whether any of this scenario's faults strikes the task (its policy, for an
        index-stage fault; the task itself otherwise: for a session fault, pass the
        conversation's id as ``task_id``, the unit it strikes)."""
        return any(
            self.strikes(i, policy_id if op.stage == "index" else task_id)
            for i, op in enumerate(self.operators)
        )

    def answerable_for(self, task_id: str, policy_id: str) -> bool:
        """Whether ``task_id``'s question is answerable under this scenario: as the DSL says
        where a fault strikes it, as under no fault (answerable) where none does."""
        return self.spec.answerable or not self.struck(task_id, policy_id)

    def session(self, state: SessionState, ctx: SessionContext) -> SessionState:
        """The session state served at ``state.turn`` after the session-stage faults: each
        applied where it strikes the conversation (:mod:`layerlab.faults.session`)."""
        for i, op in enumerate(self.operators):
            if isinstance(op, SessionOperator) and self.strikes(i, state.conversation_id):
                state = op.apply_session(state, ctx, self._rng(i, state.conversation_id))
        return state

    def _rng(self, position: int, *extra: object) -> np.random.Generator:
        return np.random.default_rng([self.seed, position, *(stable_int(e) for e in extra)])

    def index(self, docs: Sequence[Document], foreign: Sequence[Document] = ()) -> list[Document]:
        """The document collection the retriever sees under this scenario (``foreign``: the
        corpus's other-tenant documents, for an operator that mixes them in)."""
        out = list(docs)
        for i, op in enumerate(self.operators):
            if op.stage != "index":
                continue
            if getattr(op, "uses_foreign", False):
                faulted = op.apply_index(out, self._rng(i), foreign)  # type: ignore[call-arg]
            else:
                faulted = op.apply_index(out, self._rng(i))
            out = faulted if self.intensity >= 1 else self._dosed(i, out, faulted)
        return out

    def _dosed(self, i: int, before: list[Document], after: list[Document]) -> list[Document]:
        """Operator ``i``'s faulted documents for the policies it strikes, the documents as they
        were for the others (each list's own order kept: struck policies first)."""
        hit = {d.policy_id: self.strikes(i, d.policy_id) for d in (*before, *after)}
        return [d for d in after if hit[d.policy_id]] + [d for d in before if not hit[d.policy_id]]

    def principal_scopes(self, task_id: str | None = None) -> frozenset[str] | None:
        """Access scopes of ``task_id``'s principal (``None`` = unrestricted). Below intensity 1
        an access fault strikes a share of the tasks, so the task must be named."""
        scopes: frozenset[str] | None = None
        for i, op in enumerate(self.operators):
            if op.stage == "access":
                if self.intensity < 1:
                    if task_id is None:
                        raise ValueError(
                            f"{self.name}: below intensity 1 the access scopes are per task"
                        )
                    if not self.strikes(i, task_id):
                        continue
                s = op.principal_scopes()
                scopes = s if scopes is None or s is None else scopes & s
        return scopes

    def _active(self, i: int, ctx: ToolContext) -> bool:
        """Whether operator ``i`` (tool or transport stage) acts on call ``ctx.attempt``."""
        lasts = self.lasts[i] if i < len(self.lasts) else None
        if lasts is not None and ctx.attempt >= lasts:
            return False  # a transient fault is over by this attempt
        return self.strikes(i, ctx.task_id)

    @property
    def has_transport(self) -> bool:
        """Whether any of this scenario's faults acts on the wire (transport stage)."""
        return any(isinstance(op, TransportOperator) for op in self.operators)

    def transport_event(self, ctx: ToolContext, channel: str = "tool") -> TransportEvent | None:
        """Call ``ctx.attempt`` of ``ctx.task_id`` on the wire: its transport fault (the first
        failure of the transport-stage operators that strike it, with every latency before it),
        or None. Seeded by the scenario, the operator, the task and the call's number;
        ``channel``: ``tool`` (the record's tool calls) or ``model`` (its model calls under
        ``run live -m``, numbered on their own: same struck tasks, draws of their own)."""
        events = []
        salt = () if channel == "tool" else (channel,)
        for i, op in enumerate(self.operators):
            if not isinstance(op, TransportOperator) or not self._active(i, ctx):
                continue
            if not op.calls(ctx, self.seed, i, channel):
                continue
            ev = op.event(ctx, self._rng(i, "transport", ctx.task_id, ctx.attempt, *salt))
            if ev is not None:
                events.append(ev)
        return merge(events)

    def transport(self, payload: Payload, ctx: ToolContext, delivered: bool = False) -> Payload:
        """The tool payload as it arrives: a failed call (:meth:`transport_event`) is its error
        and nothing else; else the payload after the tool-stage faults. ``delivered``: the
        call's transport faults were met inside the team's store (its ``transport`` keyword,
        :class:`~layerlab.faults.transport.Wire`): its reply is what its own handling made of
        them, so only the tool-stage faults apply."""
        ev = self.transport_event(ctx) if self.has_transport and not delivered else None
        if ev is not None and ev.fails:
            return ev.payload()
        for i, op in enumerate(self.operators):
            if op.stage == "tool" and self._active(i, ctx):
                # a retry draws a fresh stream; the first call keeps the stream of a single call
                extra = (ctx.task_id,) if ctx.attempt == 0 else (ctx.task_id, ctx.attempt)
                payload = op.apply_tool(payload, ctx, self._rng(i, *extra))
        return payload


def _check(file: ScenarioFile) -> list[tuple[tuple[Any, ...], str]]:
    problems: list[tuple[tuple[Any, ...], str]] = []
    seen: set[str] = set()
    for i, s in enumerate(file.scenarios):
        if s.name in seen:
            problems.append((("scenarios", i, "name"), f"duplicate scenario name {s.name!r}"))
        seen.add(s.name)
        for j, f in enumerate(s.faults):
            loc = ("scenarios", i, "faults", j)
            cls = OPERATORS.get(f.op)
            if cls is None:
                problems.append(
                    (
                        (*loc, "op"),
                        f"unknown fault operator {f.op!r}; expected one of {sorted(OPERATORS)}",
                    )
                )
                continue
            if f.lasts is not None and cls.stage not in ("tool", "transport"):
                problems.append(
                    (
                        (*loc, "lasts"),
                        f"only tool- and transport-stage faults can be transient; {f.op!r} acts "
                        f"at the {cls.stage} stage",
                    )
                )
            try:
                cls.Params.model_validate(f.params)
            except ValidationError as exc:
                for err in exc.errors():
                    what = "unknown parameter" if err["type"] == "extra_forbidden" else err["msg"]
                    problems.append(((*loc, "params", *err["loc"]), f"{what} (operator {f.op!r})"))
    return problems


class Scenarios(dict[str, Scenario]):
    """Scenarios by name, that also know each one's variants: ``scenarios["stale_index@0.25"]``
    is ``scenarios["stale_index"].at(0.25)`` (iteration and ``len`` give the DSL's scenarios)."""

    def __missing__(self, name: str) -> Scenario:
        base, dose = split_variant(name) if isinstance(name, str) else (name, 1.0)
        if base == name or not super().__contains__(base):
            raise KeyError(name)
        return super().__getitem__(base).at(dose)

    def __contains__(self, name: object) -> bool:
        if super().__contains__(name):
            return True
        try:
            self[name]  # type: ignore[index]
        except (KeyError, ValueError):
            return False
        return True

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return self[name] if name in self else default


def expand(names: Iterable[str], scenarios: dict[str, Scenario],
           intensities: Sequence[float] = (1.0,)) -> list[str]:  # fmt: skip
    """``names`` swept over ``intensities``: each faulted scenario at each λ (``name@λ``; λ = 1
    its own name), a fault-free one (``clean``) once."""
    out: list[str] = []
    for n in names:
        s = scenarios[n]
        for dose in sorted(set(intensities)) if s.operators and s.intensity >= 1 else [1.0]:
            v = s.at(dose).name
            if v not in out:
                out.append(v)
    return out


def load_scenarios(path: Path | str | None = None) -> Scenarios:
    """Load, validate and compile the scenario DSL (default: the committed
    ``data/specs/scenarios.yaml``); raise :class:`SpecError` on problems."""
    spec = load_yaml_as(Path(path or paths.SCENARIO_SPEC), ScenarioFile, check=_check)
    out = Scenarios()
    for s in spec.scenarios:
        ops = tuple(
            OPERATORS[f.op](OPERATORS[f.op].Params.model_validate(f.params)) for f in s.faults
        )
        out[s.name] = Scenario(
            s, ops, int(stable_int(spec.seed, s.name) % 2**32), tuple(f.lasts for f in s.faults)
        )
    return out


def load_files(files: Sequence[Path | str]) -> Scenarios:
    """The scenarios of several DSL files read together, in order (``run live --scenarios``
    repeated); :class:`SpecError` on a file's problems, ValueError naming the file for a scenario
    an earlier file has."""
    out = Scenarios()
    for p in files:
        got = load_scenarios(p)
        if twice := sorted(set(got) & set(out)):
            raise ValueError(f"{p}: scenario(s) {', '.join(twice)} already in an earlier file")
        out.update(got)
    return out


def files_hash(files: Sequence[Path | str]) -> str:
    """The provenance hash of scenario files read together: one file's spec hash (as every run
    had it), several files' joined by ``+`` in the order read."""
    from layerlab.corpus.spec import spec_hash

    return "+".join(spec_hash(Path(p)) for p in files)


def shipped_files(provenance_hash: str) -> tuple[Path, ...] | None:
    """The shipped scenario files a :func:`files_hash` names, in order (None: a file that is not
    shipped, or was edited since): what a finished run's records are recomputed under."""
    from layerlab.corpus.spec import spec_hash

    files = (paths.SCENARIO_SPEC, paths.STORE_SCENARIO_SPEC, paths.TRANSPORT_SCENARIO_SPEC)
    shipped = {spec_hash(f): f for f in files}
    got = [shipped.get(h) for h in provenance_hash.split("+")]
    return None if None in got else tuple(f for f in got if f is not None)


def conversation_scenarios() -> Scenarios:
    """The session faults across a conversation's turns (``scenarios_conversation.yaml``), apart
    from the paper's nine and out of :func:`known_scenarios` until conversations are run."""
    return load_scenarios(paths.CONVERSATION_SCENARIO_SPEC)


def known_scenarios() -> Scenarios:
    """Every scenario layerlab ships, by name: the paper's nine (``scenarios.yaml``), then the
    store variant ``wrong_session_store`` (``scenarios_store.yaml``) and the transport faults
    (``scenarios_transport.yaml``). For reading a finished run's records by scenario name (its
    layer, whether it is answerable), never for choosing what to run or tabulate: the paper's
    tables and the default run are the nine."""
    return Scenarios({**load_scenarios(), **load_scenarios(paths.STORE_SCENARIO_SPEC),
                      **load_scenarios(paths.TRANSPORT_SCENARIO_SPEC)})  # fmt: skip


__all__ = [
    "Scenario", "ScenarioFile", "ScenarioSpec", "FaultSpec", "Scenarios", "known_scenarios",
    "load_scenarios", "variant_name", "STRUCK", "split_variant", "parse_intensities", "expand",
    "conversation_scenarios", "load_files", "files_hash", "shipped_files",
]  # fmt: skip
