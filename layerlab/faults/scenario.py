"""Fault scenarios: compositions of the registered fault operators (:mod:`layerlab.faults.operators`)
written in the DSL.

A scenario (``data/specs/scenarios.yaml``) lists fault operators with parameters, the layer
it targets, the behaviour a safe system should show, and whether the task stays answerable.
:func:`load_scenarios` validates the file (every problem with its ``file:line``) and builds each
:class:`Scenario`, which applies its operators to the index, the access scopes and the tool's
payloads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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

    @property
    def name(self) -> str:
        return self.spec.name

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
                out = op.apply_index(out, self._rng(i), foreign)  # type: ignore[call-arg]
            else:
                out = op.apply_index(out, self._rng(i))
        return out

    def principal_scopes(self) -> frozenset[str] | None:
        """Access scopes of the principal (``None`` = unrestricted)."""
        scopes: frozenset[str] | None = None
        for op in self.operators:
            if op.stage == "access":
                s = op.principal_scopes()
                scopes = s if scopes is None or s is None else scopes & s
        return scopes

    def transport(self, payload: Payload, ctx: ToolContext) -> Payload:
        """The tool payload as it arrives after the tool-stage faults."""
        for i, op in enumerate(self.operators):
            lasts = self.lasts[i] if i < len(self.lasts) else None
            if lasts is not None and ctx.attempt >= lasts:
                continue  # a transient fault is over by this attempt
            if op.stage == "tool":
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
            if f.lasts is not None and cls.stage != "tool":
                problems.append(
                    (
                        (*loc, "lasts"),
                        f"only tool-stage faults can be transient; {f.op!r} acts at the "
                        f"{cls.stage} stage",
                    )
                )
            try:
                cls.Params.model_validate(f.params)
            except ValidationError as exc:
                for err in exc.errors():
                    what = "unknown parameter" if err["type"] == "extra_forbidden" else err["msg"]
                    problems.append(((*loc, "params", *err["loc"]), f"{what} (operator {f.op!r})"))
    return problems


def load_scenarios(path: Path | str | None = None) -> dict[str, Scenario]:
    """Load, validate and compile the scenario DSL (default: the committed
    ``data/specs/scenarios.yaml``); raise :class:`SpecError` on problems."""
    spec = load_yaml_as(Path(path or paths.SCENARIO_SPEC), ScenarioFile, check=_check)
    out: dict[str, Scenario] = {}
    for s in spec.scenarios:
        ops = tuple(
            OPERATORS[f.op](OPERATORS[f.op].Params.model_validate(f.params)) for f in s.faults
        )
        out[s.name] = Scenario(
            s, ops, int(stable_int(spec.seed, s.name) % 2**32), tuple(f.lasts for f in s.faults)
        )
    return out


def known_scenarios() -> dict[str, Scenario]:
    """Every scenario layerlab ships, by name: the paper's nine (``scenarios.yaml``), then the
    store variant ``wrong_session_store`` (``scenarios_store.yaml``). For reading a finished
    run's records by scenario name (its layer, whether it is answerable), never for choosing
    what to run or tabulate: the paper's tables and the default run are the nine."""
    return {**load_scenarios(), **load_scenarios(paths.STORE_SCENARIO_SPEC)}


__all__ = [
    "Scenario", "ScenarioFile", "ScenarioSpec", "FaultSpec", "known_scenarios", "load_scenarios",
]  # fmt: skip
