"""What a run asks: a stratified, seeded task subset (``--limit N``) and YAML run configurations.

A quick look at a model should still cover every domain and as many policy units as it can,
rather than the first N task ids (which are one domain's). :func:`stratified_tasks` interleaves
the domains and, within a domain, takes one question variant of each policy before a second
variant of any; every order is drawn from a seeded generator, so the same ``N`` and seed give the
same tasks (and the run id, which covers the task set, lets ``--resume`` find the run again).

A run configuration (``run live --config run.yaml``) names the models, each with its own
endpoints and settings, the scenarios, mitigations, tasks, budget and epochs; it is validated
by the spec loader (``file:line: field: what was expected``; an endpoint carrying credentials is
refused) and stored with the run, every URL in it recorded as ``local`` or ``remote``. Example::

    models:
      - model: hosted_vllm/meta-llama/Llama-3.1-8B-Instruct
        api_base: [http://gpu1:8000/v1, http://gpu2:8000/v1]
        response_format: json_schema
      - model: openai/gpt-4o-mini
        temperature: 0.0
      - model: local/smollm2-135m
    defaults: {timeout: 120, max_tokens: 400}
    scenarios: [clean, stale_index, schema_drift]
    mitigations: [strict, repair]
    limit: 24
    epochs: 2                 # every cell asked twice (replicates: the earlier name)
    seed: 11                  # base of the per-record seeds sent to servers (also per model)
    budget: 5000
    max_error_rate: 0.1       # exit 4 when a model's provider-error share is above this
    retry_seed: 3             # seed of the retry jitter
    sample_log: ~/.cache/layerlab/samples/run.jsonl   # private per-sample log (relative: to this file)
    gate: {min: {S:clean: 0.6}, max: {GF:stale_index: 0.1}}   # layerlab gate RUN --config run.yaml
    agent: {protocol: auto, max_steps: 4}   # agent mode: the model calls the faulted tools

Your own system instead of ``models`` (README, "Test your own RAG system")::

    target: {spec: "python:my_rag.app:answer", name: my-rag, version: "1.4", settings: {top_k: 3}}

Your own retriever or vector store as the tool's first stage (docs/retrievers.md)::

    retriever: "python:my_rag.store:MyRetriever"     # or langchain:my_rag.store:make_store

Every ``run live`` setting a paper reports has a key here; the flags it owns are refused next to
``--config`` rather than silently ignored.

Keys never go in the file: they come from the environment only.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from layerlab._secrets import SECRET_MARK, credentials_in, is_secret, redact, secret_shape
from layerlab.analysis.gate import GateSpec
from layerlab.corpus.build import AnswerKey, Corpus, Task
from layerlab.corpus.spec import load_yaml_as
from layerlab.harness.live.settings import DEFAULT_MAX_ERROR_RATE, RunSettings
from layerlab.models.llm import ProviderSettings
from layerlab.models.routing import api_base_problem, redact_urls
from layerlab.registry import did_you_mean
from layerlab.system import retrieval

LIMIT_SEED = 0  # default seed of the --limit selection


def stratified_order(tasks: Sequence[Task], seed: int = LIMIT_SEED) -> tuple[str, ...]:
    """Every task id of ``tasks`` in one seeded, stratified order whose first ``n`` are the
    ``--limit n`` selection for every ``n`` (so the selections are nested: ``run live
    --until-decided`` grows its task set along it, each look holding the one before).

    Domains take turns (in a seeded order); each domain yields its policies in a seeded order,
    one variant each (a seeded variant per policy), before any policy gives a second variant.
    The generator's draws do not depend on how many tasks are taken, so the same seed gives the
    same order."""
    rng = np.random.default_rng(seed)
    by_domain: dict[str, dict[str, list[Task]]] = defaultdict(lambda: defaultdict(list))
    for t in tasks:
        by_domain[t.domain][t.policy_id].append(t)
    queues: dict[str, list[Task]] = {}
    for d in sorted(by_domain):
        pols = sorted(by_domain[d])
        pol_order = [pols[i] for i in rng.permutation(len(pols))]
        variants = {}
        for p in pol_order:
            vs = sorted(by_domain[d][p], key=lambda t: t.task_id)
            variants[p] = [vs[i] for i in rng.permutation(len(vs))]
        depth = max(len(v) for v in variants.values())
        queues[d] = [
            variants[p][r] for r in range(depth) for p in pol_order if r < len(variants[p])
        ]
    domains = sorted(queues)
    domain_order = [domains[i] for i in rng.permutation(len(domains))]
    depth = max((len(q) for q in queues.values()), default=0)
    return tuple(
        queues[d][r].task_id for r in range(depth) for d in domain_order if r < len(queues[d])
    )


def stratified_tasks(tasks: Sequence[Task], n: int, seed: int = LIMIT_SEED) -> tuple[str, ...]:
    """``n`` task ids stratified by domain and policy unit, chosen with a seeded generator: the
    first ``n`` of :func:`stratified_order`, returned in the order of ``tasks``. ``n`` at least
    ``len(tasks)`` returns all."""
    if n < 1:
        raise ValueError(f"--limit: expected a number of tasks >= 1, got {n}")
    if n >= len(tasks):
        return tuple(t.task_id for t in tasks)
    chosen = set(stratified_order(tasks, seed)[:n])
    return tuple(t.task_id for t in tasks if t.task_id in chosen)


# --- the YAML run configuration (``run live --config run.yaml``) ------------------------------

CONFIG_COPY = "run.yaml"  # the configuration, its endpoints redacted, stored in the run folder
SUBRUNS = "runs"  # where models with their own settings run before their archives are merged


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


class TargetEntry(BaseModel):
    """The system under test instead of models (``run live --target``): ``spec`` is
    ``python:MODULE:ATTR``, ``langchain:MODULE:FACTORY``, ``llamaindex:MODULE:FACTORY`` or an
    http(s) URL."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    spec: str = Field(min_length=1)
    name: str = ""
    version: str = ""
    settings: dict[str, str | int | float | bool] = Field(default_factory=dict)

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

    def run(self, given: RunSettings) -> RunSettings:
        """The run settings: those the configuration sets, the others as ``given``."""
        return dataclasses.replace(
            given,
            budget=self.budget,
            concurrency=self.concurrency,
            max_error_rate=self.max_error_rate,
            seed=self.retry_seed,
        )

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
    scenarios: Sequence[str], mitigations: Sequence[str], task_ids: Sequence[str]
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
                        f"unknown mitigation {a!r}{hint}; known: {', '.join(mitigations)}",
                    )
                )
        known = set(task_ids)
        for i, t in enumerate(c.tasks or ()):
            if t not in known:
                out.append((("tasks", i), f"unknown task id {t!r} (e.g. {task_ids[0]})"))
        return out + (c.gate.problems() + _gate_plan(c, scenarios) if c.gate else [])

    return check


def _gate_plan(c: RunConfigSpec, scenarios: Sequence[str]) -> list[tuple[tuple[Any, ...], str]]:
    """The ``gate:`` section checked against what the run will hold (before it runs)."""
    from layerlab.harness.deterministic import contract_arms

    assert c.gate is not None
    arms = list(c.mitigations or contract_arms())  # what execute() runs
    models = [m.model for m in c.models]
    return c.gate.plan_problems(c.scenarios or scenarios, arms, models, contract_arms()[0])


def load_run_config(
    path: Path, scenarios: Sequence[str], mitigations: Sequence[str], task_ids: Sequence[str]
) -> RunConfigSpec:
    """Load and validate a run configuration; :class:`~layerlab.corpus.spec.SpecError` lists every
    problem as ``file:line: field: what was expected``."""
    return load_yaml_as(Path(path), RunConfigSpec, _checks(scenarios, mitigations, task_ids))


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


def stored_config(text: str) -> str:
    """The run configuration as the run folder keeps it: as given, except that every secret is
    replaced by ``'(secret: not stored)'`` (a target setting that is one by its name or value,
    any other value shaped like one: :func:`layerlab._secrets.is_secret`; the
    manifest keeps the settings' hash) and every URL (endpoints, and any in a comment) by
    ``local`` or ``remote``: a shareable folder holds no secret, host or port (credentials in an
    endpoint are refused before, :func:`load_run_config`)."""
    spans, values = _secret_spans(text)
    for start, end in sorted(spans, reverse=True):  # from the end: earlier offsets hold
        keep = "\n" if text[start:end].endswith("\n") else ""  # a block scalar's last newline
        text = f"{text[:start]}'{SECRET_MARK}'{keep}{text[end:]}"
    return redact_urls(redact(text, values))  # and any left in comments


def _secret_spans(text: str) -> tuple[set[tuple[int, int]], list[str]]:
    """The (start, end) character offsets in ``text`` of the YAML values that are secrets: a
    ``target.settings`` value by its name or shape, any other scalar by its shape; and those
    values. Each node is visited once (an alias is its anchor's node)."""
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:  # not reached: the file was loaded before the run
        return set(), []
    spans: set[tuple[int, int]] = set()
    values: list[str] = []
    seen: set[int] = set()

    def mark(n: yaml.Node) -> None:
        spans.add((n.start_mark.index, n.end_mark.index))
        values.append(str(n.value))

    def walk(n: yaml.Node | None, settings: bool, path: tuple[str, ...]) -> None:
        if n is None or id(n) in seen:
            return
        seen.add(id(n))
        if isinstance(n, yaml.ScalarNode):
            if secret_shape(n.value):
                mark(n)
            return
        pairs = n.value if isinstance(n, yaml.MappingNode) else [(None, v) for v in n.value]
        for k, v in pairs:
            name = k.value if isinstance(k, yaml.ScalarNode) else ""
            if settings and isinstance(v, yaml.ScalarNode) and is_secret(name, v.value):
                seen.add(id(v))
                mark(v)
                continue
            walk(v, path + (name,) == ("target", "settings"), (*path, str(name)))

    walk(root, False, ())
    return spans, values


def endpoints(spec: RunConfigSpec) -> tuple[list[str], list[str]]:
    """(every endpoint, every model) of a configuration: what :meth:`RunSettings.check` checks
    before anything is written."""
    return [b for m in spec.models for b in m.api_base], [m.model for m in spec.models]


@dataclass(frozen=True)
class Group:
    """Models that share every setting: one live run."""

    models: tuple[str, ...]
    config: Any  # live.LiveConfig
    local_servers: int | None
    folder: str  # "" for the run folder itself, else its sub-run folder name


def plan(spec: RunConfigSpec, all_scenarios: Sequence[str], tasks: Sequence[Task]) -> list[Group]:
    """The live runs a configuration makes: one per distinct set of model settings."""
    from layerlab.harness import live
    from layerlab.harness.deterministic import contract_arms

    pool = [t for t in tasks if spec.tasks is None or t.task_id in set(spec.tasks)]
    if spec.limit is not None and spec.limit > len(pool):
        raise ValueError(
            f"limit: {spec.limit} tasks asked, only {len(pool)} to choose from (expected 1 to "
            f"{len(pool)}; leave limit out to ask them all)"
        )
    task_ids: tuple[str, ...] | None = (
        stratified_tasks(pool, spec.limit, spec.limit_seed)
        if spec.limit is not None
        else (tuple(t.task_id for t in pool) if spec.tasks is not None else None)
    )
    if spec.target is not None:  # the user's system: one run, no provider settings
        s = spec.settings_for(ModelEntry(model=spec.target.spec))
        cfg = live.LiveConfig(
            models=(), scenarios=tuple(spec.scenarios or all_scenarios),
            mitigations=tuple(spec.mitigations or contract_arms()), task_ids=task_ids,
            settings=s["settings"], epochs=spec.n_epochs, target=spec.target.target(),
            retriever=spec.retriever,
        )  # fmt: skip
        return [Group(cfg.models, cfg, None, "")]
    groups: dict[tuple[Any, ...], list[str]] = {}
    eff: dict[tuple[Any, ...], dict[str, Any]] = {}
    for m in spec.models:
        s = spec.settings_for(m)
        k = (s["settings"], s["response_format"], s["seed"], s["local_servers"])
        groups.setdefault(k, []).append(m.model)
        eff[k] = s
    out = []
    for i, (k, models) in enumerate(groups.items()):
        s = eff[k]
        cfg = live.LiveConfig(
            models=tuple(models),
            scenarios=tuple(spec.scenarios or all_scenarios),
            mitigations=tuple(spec.mitigations or contract_arms()),
            task_ids=task_ids,
            settings=s["settings"],
            epochs=spec.n_epochs,
            share_replies=spec.share_replies,
            response_format=s["response_format"],
            seed=s["seed"],
            agent=(
                live.AgentMode.auto(models, spec.agent.protocol, spec.agent.max_steps)
                if spec.agent is not None
                else None
            ),
            retriever=spec.retriever,
        )
        slug = re.sub(r"[^a-z0-9]+", "-", models[0].lower()).strip("-")
        folder = "" if len(groups) == 1 else f"{SUBRUNS}/{i + 1:02d}-{slug}"
        out.append(Group(tuple(models), cfg, s["local_servers"], folder))
    return out


def execute(
    spec: RunConfigSpec,
    config_text: str,
    out: Path,
    corpus: Corpus,
    key: AnswerKey,
    scenarios: Mapping[str, Any],
    run: RunSettings,
    *,
    scenario_hash: str,
    progress: Callable[[], Any] | None = None,
    samples: Any = None,
    say: Callable[[str], None] = lambda _m: None,
) -> tuple[bool, str, tuple[str, ...]]:
    """Run a configuration into ``out``; return (complete, message, models whose provider-error
    share exceeded ``max_error_rate``).

    ``run`` holds the settings the command gives (resume, retry_errors, cache_dir and the
    default ``local_servers``); the configuration sets the others (:meth:`RunConfigSpec.run`).
    Models that share their settings run together; models with their own endpoints or settings
    run into ``out/runs/NN-<model>/`` and are merged into ``out`` (archive, manifest,
    results.json). The configuration is stored as ``out/run.yaml`` (:func:`stored_config`:
    every endpoint recorded as ``local`` or ``remote``, as the manifest does). The budget is
    shared: each run gets what the runs before it left.
    """
    from layerlab import archive
    from layerlab._io import atomic_write_text
    from layerlab.analysis import results
    from layerlab.harness import live

    groups = plan(spec, list(scenarios), corpus.tasks)
    run = spec.run(run)
    messages: list[str] = []
    over: list[str] = []
    finished: list[Group] = []
    try:
        _run_groups(groups, out, corpus, key, scenarios, run, scenario_hash, progress, samples,
                    say, messages, finished, over)  # fmt: skip
    except live.LiveRunError:
        _stopped(groups, finished, out, "a run failed")
        raise
    complete = len(finished) == len(groups)
    atomic_write_text(out / CONFIG_COPY, stored_config(config_text))
    if len(groups) > 1 and complete:
        archive.merge([out / g.folder for g in groups], out, in_place=True)
        results.write_results(out)
    elif len(groups) > 1:
        _stopped(groups, finished, out, "a run did not finish")
    return complete, "\n".join(messages), tuple(over)


def _stopped(groups: Sequence[Group], finished: Sequence[Group], out: Path, why: str) -> None:
    """A configuration of several runs that stopped early: the runs made so far (finished or
    partial) are merged into ``out`` under a manifest that says which models finished."""
    from layerlab import archive

    if len(groups) < 2:
        return
    made = [out / g.folder for g in groups if (out / g.folder / archive.MANIFEST).exists()]
    if not made:
        return
    done = [m for g in finished for m in g.models]
    rest = [m for g in groups if g not in finished for m in g.models]
    note = (
        f"stopped early ({why}): finished {', '.join(done) or 'none'}; "
        f"not finished {', '.join(rest)}; continue with --resume"
    )
    archive.merge(made, out, note=note, complete=False, in_place=True)


def _run_groups(
    groups: Sequence[Group],
    out: Path,
    corpus: Corpus,
    key: AnswerKey,
    scenarios: Mapping[str, Any],
    run: RunSettings,
    scenario_hash: str,
    progress: Callable[[], Any] | None,
    samples: Any,
    say: Callable[[str], None],
    messages: list[str],
    finished: list[Group],
    over: list[str],
) -> None:
    """Run the groups in turn, sharing the budget; stop after the first incomplete one."""
    from layerlab.harness import live

    left = run.budget
    for g in groups:
        folder = out / g.folder if g.folder else out
        bar = progress() if progress else None  # one progress bar per run
        mine = dataclasses.replace(
            run, budget=left, local_servers=g.local_servers or run.local_servers
        )
        try:
            r = live.run_live(
                corpus,
                key,
                scenarios,
                g.config,
                folder,
                scenario_hash=scenario_hash,
                progress=bar.update if bar else None,
                say=say,
                samples=samples,
                **mine.kwargs(),
            )
        finally:
            if bar:
                bar.close()
        if left is not None:
            left = max(0, left - r.counters.calls)
        messages.append(f"{', '.join(g.models)}: {r.message}")
        over += r.over_error_rate
        if not r.complete:
            break
        finished.append(g)
