"""The YAML run configuration's file (``run live --config run.yaml``): its schema and its loader.

A run configuration names the models, each with its own endpoints and settings (or a target),
the scenarios, mitigations, tasks, budget and epochs (docs/run-config.md). It is validated here,
every problem one line ``file:line: field: what was expected`` (an endpoint carrying credentials
is refused), against the scenarios, mitigation arms and task ids it may name; what the run makes
of it is :meth:`layerlab.harness.config.RunConfig.from_yaml`'s, and the copy a run folder keeps
is :func:`layerlab.harness.runconfig.stored_config`'s. Keys never go in the file: they come from
the environment only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from layerlab._secrets import credentials_in
from layerlab.analysis.gate import GateSpec
from layerlab.corpus.spec import load_yaml_as
from layerlab.harness.live.settings import DEFAULT_MAX_ERROR_RATE
from layerlab.harness.selection import LIMIT_SEED
from layerlab.models.llm import ProviderSettings
from layerlab.models.routing import api_base_problem
from layerlab.registry import did_you_mean
from layerlab.system import retrieval


class _Settings(BaseModel):
    """Request settings; ``None`` inherits (a model's from ``defaults``, ``defaults`` from the
    paper's: 180 s timeout, 600 tokens, 3 attempts, 2 s backoff, temperature not sent)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    timeout: float | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)
    attempts: int | None = Field(default=None, ge=1)
    backoff: float | None = Field(default=None, ge=0)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    response_format: Literal["none", "json_schema"] | None = None
    seed: int | None = None
    local_servers: int | None = Field(default=None, ge=1)


class ModelEntry(_Settings):
    """One model, with its own endpoints and settings."""

    model: str = Field(min_length=1)
    api_base: list[str] = Field(default_factory=list)  # servers of this model (several: spread)


class AgentSpec(BaseModel):
    """Agent mode (``run live --agent``): the model calls the faulted tools itself."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    protocol: Literal["auto", "native", "json_action"] = "auto"
    max_steps: int = Field(4, ge=1, le=16)


def _kind(value: Any) -> str:
    """A YAML value's kind, as a user wrote it."""
    if value is None:
        return "null"
    return {dict: "a mapping", list: "a list"}.get(type(value), type(value).__name__)


def _settings_mapping(value: Any) -> Any:
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of setting names to values, got {_kind(value)}")
    return value


def _setting_value(value: Any) -> Any:
    """One problem for a setting's value that no ``--target-setting`` could give (pydantic's
    union would give one per allowed type)."""
    if not isinstance(value, str | int | float | bool):
        raise ValueError(
            f"expected a string, a number or true/false (what --target-setting KEY=VALUE gives), "
            f"got {_kind(value)}"
        )
    return value


_Setting = Annotated[str | int | float | bool, BeforeValidator(_setting_value)]


class TargetEntry(BaseModel):
    """The system under test instead of models (``run live --target``): ``spec`` is
    ``python:MODULE:ATTR``, ``langchain:MODULE:FACTORY``, ``llamaindex:MODULE:FACTORY`` or an
    http(s) URL."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    spec: str = Field(min_length=1)
    name: str = ""
    version: str = ""
    settings: Annotated[dict[str, _Setting], BeforeValidator(_settings_mapping)] = Field(
        default_factory=dict
    )

    def target(self) -> Any:
        from layerlab.harness.targets import parse_target

        return parse_target(self.spec, self.name, self.version, self.settings)


class RunConfigSpec(BaseModel):
    """A run: models with their endpoints and settings (or a target), scenarios, mitigations,
    tasks, budget."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    models: list[ModelEntry] = Field(default_factory=list)
    target: TargetEntry | None = None  # the user's own system instead of models
    defaults: _Settings = _Settings()
    scenarios: list[str] | None = None  # default: every scenario of the DSL
    mitigations: list[str] | None = None  # default: the contract arms (strict, repair)
    tasks: list[str] | None = None  # task ids; default all
    limit: int | None = Field(default=None, ge=1)  # a stratified, seeded subset of the tasks
    limit_seed: int = LIMIT_SEED
    epochs: int = Field(1, ge=1)  # every cell asked this many times (pass@k, pass^k)
    replicates: int | None = Field(default=None, ge=1)  # the earlier name of epochs
    # each faulted scenario at each of these intensities (``name@λ``); default [1]: as written
    intensity: list[Annotated[float, Field(ge=0, le=1)]] | None = Field(default=None, min_length=1)
    budget: int | None = Field(default=None, ge=0)  # hard cap on provider calls over the whole run
    concurrency: int = Field(8, ge=1)
    share_replies: bool | None = None  # default: shared exactly when decoding is greedy
    max_error_rate: float = Field(DEFAULT_MAX_ERROR_RATE, ge=0, le=1)  # share of provider errors
    retry_seed: int = 0  # seed of the retry jitter
    sample_log: str | None = Field(default=None, min_length=1)  # private log, outside the run
    gate: GateSpec | None = None  # CI gates on the finished run: ``layerlab gate RUN --config``
    agent: AgentSpec | None = None  # agent mode; default: single-call mode
    # the search tool's first stage: a registered retriever or a team's own
    # (python:MODULE:FACTORY, langchain:MODULE:FACTORY; docs/retrievers.md)
    retriever: str = Field(retrieval.REPORTED.name, min_length=1)

    @property
    def n_epochs(self) -> int:
        """``epochs``, or ``replicates`` (its earlier name) where that is the one given."""
        return self.replicates if self.replicates is not None else self.epochs

    def sample_log_path(self, config_file: Path) -> Path | None:
        """The sample log's path: ``~`` expanded, a relative path taken from the config's folder."""
        if self.sample_log is None:
            return None
        p = Path(self.sample_log).expanduser()
        return p if p.is_absolute() else Path(config_file).parent / p

    def settings_for(self, m: ModelEntry) -> dict[str, Any]:
        """A model's effective settings: its own, else ``defaults``, else the paper's."""
        d = ProviderSettings()
        pick = {
            k: getattr(m, k) if getattr(m, k) is not None else getattr(self.defaults, k)
            for k in _Settings.model_fields
        }
        return {
            "settings": ProviderSettings(
                timeout_s=pick["timeout"] if pick["timeout"] is not None else d.timeout_s,
                max_tokens=pick["max_tokens"] or d.max_tokens,
                attempts=pick["attempts"] or d.attempts,
                backoff_s=pick["backoff"] if pick["backoff"] is not None else d.backoff_s,
                temperature=pick["temperature"],
                top_p=pick["top_p"],
                api_bases=tuple(m.api_base),
            ),
            "response_format": pick["response_format"] or "none",
            "seed": pick["seed"],
            "local_servers": pick["local_servers"],
        }


def _checks(
    scenarios: Sequence[str], mitigations: Sequence[str], task_ids: Sequence[str], arms_from: str = ""
) -> Callable[[RunConfigSpec], list[tuple[tuple[Any, ...], str]]]:
    def check(c: RunConfigSpec) -> list[tuple[tuple[Any, ...], str]]:
        out: list[tuple[tuple[Any, ...], str]] = []
        if not c.models and c.target is None:
            out.append((("models",), "expected at least one model (or a target)"))
        if c.models and c.target is not None:
            out.append((("target",), "a target replaces the models: give one or the other"))
        if c.replicates is not None and "epochs" in c.model_fields_set:
            out.append((("replicates",), "the earlier name of epochs: give epochs only"))
        if c.agent is not None and c.target is not None:
            out.append((("agent",), "a target calls the tools itself: no agent mode with a target"))
        if c.target is not None:
            from layerlab.harness.targets import TargetError

            try:
                c.target.target()
            except TargetError as exc:
                out.append((("target", "spec"), str(exc).removeprefix("--target: ")))
        try:  # a registered name, or a team's factory that imports
            retrieval.check(c.retriever, "retriever")
        except retrieval.RetrieverError as exc:
            out.append((("retriever",), str(exc).removeprefix("retriever").lstrip(": ")))
        seen: set[str] = set()
        for i, m in enumerate(c.models):
            if m.model in seen:
                out.append((("models", i, "model"), f"{m.model!r} is listed twice"))
            seen.add(m.model)
            if "/" not in m.model:
                out.append(
                    (("models", i, "model"), "expected provider/model, e.g. openai/gpt-4o-mini")
                )
            if m.model.startswith("local/") and m.api_base:
                out.append(
                    (("models", i, "api_base"), "a local/ model is served by layerlab: no api_base")
                )
            for j, b in enumerate(m.api_base):
                if credentials_in(b):  # never echoed: the message names what, not the value
                    out.append((("models", i, "api_base", j), api_base_problem(b) or ""))
                elif not b.startswith(("http://", "https://")):
                    out.append(
                        (("models", i, "api_base", j), f"expected an http(s) URL, got {b!r}")
                    )
        for i, s in enumerate(c.scenarios or ()):
            if s not in scenarios:
                hint = did_you_mean(s, scenarios)
                out.append(
                    (
                        ("scenarios", i),
                        f"unknown scenario {s!r}{hint}; known: {', '.join(scenarios)}",
                    )
                )
        for i, a in enumerate(c.mitigations or ()):
            if a not in mitigations:
                hint = did_you_mean(a, mitigations)
                out.append(
                    (
                        ("mitigations", i),
                        f"unknown mitigation {a!r}{hint}; known: {', '.join(mitigations)}"
                        + (f" (from {arms_from})" if arms_from else ""),
                    )
                )
        known = set(task_ids)
        for i, t in enumerate(c.tasks or ()):
            if t not in known:
                out.append((("tasks", i), f"unknown task id {t!r} (e.g. {task_ids[0]})"))
        n = len(known & set(c.tasks)) if c.tasks is not None else len(known)
        if known and c.limit is not None and c.limit > n:  # no task ids given: not judged here
            out.append((("limit",), f"{c.limit} tasks asked, only {n} to choose from (expected "
                                    f"1 to {n}; leave limit out to ask them all)"))  # fmt: skip
        return out + (c.gate.problems() + _gate_plan(c, scenarios) if c.gate else [])

    return check


def _gate_plan(c: RunConfigSpec, scenarios: Sequence[str]) -> list[tuple[tuple[Any, ...], str]]:
    """The ``gate:`` section checked against what the run will hold (before it runs)."""
    from layerlab.harness.deterministic import contract_arms

    assert c.gate is not None
    arms = list(c.mitigations or contract_arms())  # what execute() runs
    models = [m.model for m in c.models]
    names = list(c.scenarios or scenarios)
    if c.intensity:  # the variants the sweep will run, as a threshold names them
        from layerlab.faults.scenario import expand, known_scenarios

        known = known_scenarios()
        if all(n in known for n in names):  # an unknown name is reported on its own
            names = expand(names, known, c.intensity)
    return c.gate.plan_problems(names, arms, models, contract_arms()[0])


def load_run_config(
    path: Path, scenarios: Sequence[str], mitigations: Sequence[str], task_ids: Sequence[str],
    arms_from: str = "",
) -> RunConfigSpec:  # fmt: skip
    """Load and validate a run configuration; :class:`~layerlab.corpus.spec.SpecError` lists every
    problem as ``file:line: field: what was expected`` (``arms_from``: the spec files the
    ``mitigations`` names come from, said beside an unknown one)."""
    return load_yaml_as(Path(path), RunConfigSpec,
                        _checks(scenarios, mitigations, task_ids, arms_from))  # fmt: skip


class _GateFile(BaseModel):
    """What ``layerlab gate --config`` reads of a file: its ``gate:`` section (the rest of a run
    configuration is ``run live``'s business)."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    gate: GateSpec


def load_gate(path: Path) -> GateSpec:
    """The ``gate:`` section of a run configuration (or of a file holding only that section),
    validated like the rest (:class:`~layerlab.corpus.spec.SpecError`, ``file:line: field: ...``)."""
    known = sorted({"gate", *RunConfigSpec.model_fields})  # a misspelt key: its gate lost
    return load_yaml_as(Path(path), _GateFile, lambda f: [
        ((k,), f"unknown top-level key (expected one of: {', '.join(known)})")
        for k in f.model_extra or {} if k not in known] + f.gate.problems()).gate  # fmt: skip



def endpoints(spec: RunConfigSpec) -> tuple[list[str], list[str]]:
    """(every endpoint, every model) of a configuration: what :meth:`RunSettings.check` checks
    before anything is written."""
    return [b for m in spec.models for b in m.api_base], [m.model for m in spec.models]
