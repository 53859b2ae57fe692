"""What a live run is and how it is carried out, and the one validation of both.

:class:`LiveConfig` holds everything that determines the records (its hash is the run id);
:class:`RunSettings` how they are made (budget, concurrency, resume, cache, error threshold),
which changes no record. :meth:`RunSettings.check` and :meth:`LiveConfig.check` are the only
checks of a run's settings: the CLI (``run live``), the YAML run configuration and the Python API
(:func:`~layerlab.harness.live.run.run_live`) all call them, and all report the same
:class:`LiveRunError` messages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any, Literal

from layerlab.corpus.build import Corpus
from layerlab.corpus.spec import SpecError
from layerlab.faults.scenario import Scenario
from layerlab.harness import deterministic as harness
from layerlab.harness.targets.spec import PROVIDER as TARGET_PROVIDER
from layerlab.harness.targets.spec import TargetError, TargetSpec, parse_target
from layerlab.models import local as models_mod
from layerlab.models.agents import AGENT_SUFFIX
from layerlab.models.cache import default_cache_dir
from layerlab.models.llm import ProviderSettings
from layerlab.models.routing import api_base_problem, environment_endpoint_problem, split_model
from layerlab.registry import did_you_mean
from layerlab.system import retrieval

DEFAULT_MAX_ERROR_RATE = 0.2
"""Share of a model's provider calls that may end in ``provider_error`` before the run is
flagged: above it the archive is still written (it is data) but the run counts as failed."""


class LiveRunError(RuntimeError):
    """A run that cannot go on (bad settings, fatal provider error, resume mismatch)."""


class ServerDied(LiveRunError):
    """A local model server this run started has died (its message says how and what to do)."""


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C (or SIGTERM, which the CLI turns into one) after its records so
    far were saved: the progress log, and the run folder as a partial archive (``--resume``
    continues it)."""

    def __init__(self, out: Path, run_id: str, records: int, expected: int):
        super().__init__(f"{records} of {expected} records saved in {out}")
        self.out, self.run_id, self.records, self.expected = out, run_id, records, expected


@dataclass(frozen=True)
class AgentMode:
    """Agent mode (:mod:`layerlab.harness.agent`): the model calls the faulted tools itself,
    for up to ``max_steps`` tool-calling turns, through ``protocol`` (``native``: the provider's
    tool calls; ``json_action``: one JSON action per reply, schema-constrained where the server
    supports it)."""

    protocol: str = "native"
    max_steps: int = 4

    def __post_init__(self) -> None:
        from layerlab.system.agentprompt import PROTOCOLS

        if self.protocol not in PROTOCOLS:
            raise ValueError(
                f"--tool-protocol {self.protocol!r}: expected one of {', '.join(PROTOCOLS)} "
                "(or auto)"
            )
        if not 1 <= self.max_steps <= 16:
            raise ValueError(f"--max-steps {self.max_steps}: expected 1-16")

    @staticmethod
    def auto(models: Sequence[str], protocol: str = "auto", max_steps: int = 4) -> AgentMode:
        """``protocol="auto"``: ``json_action`` when every model is a local model (llama.cpp
        with the model's own chat template does not return tool calls), else ``native``."""
        if protocol == "auto":
            local = bool(models) and all(map(models_mod.is_local, models))
            protocol = "json_action" if local else "native"
        return AgentMode(protocol, max_steps)


@dataclass(frozen=True)
class UntilDecided:
    """``run live --until-decided``: the run's tasks (:attr:`LiveConfig.task_ids`, at most
    ``max_tasks``) in the nested stratified order its looks take them, looks of ``batch`` more
    tasks each, each judged at its share of ``alpha`` (:mod:`layerlab.analysis.sequential`) at
    margin ``delta`` until every verdict asked (``specific`` arms, every arm's with
    ``no_over_broad``) is conclusive. ``tasks``: the look this invocation makes (the first
    ``tasks`` of the order); ``looks``: the looks made so far as the manifest records them.
    Neither is in the run id: the looks of one plan are one run, each holding the one before."""

    max_tasks: int
    batch: int
    specific: tuple[str, ...] = ()
    no_over_broad: bool = False
    alpha: float = 0.05
    delta: float = 0.10
    limit_seed: int = 0
    tasks: int = 0
    looks: tuple[Mapping[str, Any], ...] = ()

    def identity(self) -> dict[str, Any]:
        """What the run id holds of the plan (the order itself is the config's task ids)."""
        d = dataclasses.asdict(self)
        del d["tasks"], d["looks"]
        return d


@dataclass(frozen=True)
class LiveConfig:
    """Everything that determines a live run's records (budget and concurrency do not)."""

    models: tuple[str, ...]
    scenarios: tuple[str, ...]
    mitigations: tuple[str, ...] = field(default_factory=harness.contract_arms)
    task_ids: tuple[str, ...] | None = None
    settings: ProviderSettings = field(default_factory=ProviderSettings)
    # the search tool's first stage: a registered retriever, or a team's own
    # (``python:MODULE:FACTORY``, ``langchain:MODULE:FACTORY``: docs/retrievers.md)
    retriever: str = retrieval.REPORTED.name
    # the fingerprint of a team's retriever code (module and package SHA-256), set when a run
    # starts (:func:`layerlab.system.retrieval.code`); in the run id and the manifest
    retriever_code: tuple[tuple[str, str], ...] = ()
    # Each cell is asked ``epochs`` times, each epoch its own draw (one call per record, its own
    # seed): records carry the epoch index as ``replicate``. A system whose epochs would be
    # identical (:meth:`identical_epochs`) runs one (:meth:`epochs_for`).
    epochs: int = 1
    # Share one reply between records whose prompts are identical: it forces every difference
    # between arms on an unchanged prompt to zero. ``None`` (the default) shares exactly when
    # decoding is greedy (temperature 0), where a reply is a function of its prompt: a server's
    # floating-point noise (prompt-prefix reuse, batch shapes) is then not read as an effect.
    share_replies: bool | None = None
    # "json_schema": ask the server to constrain decoding to the reply contract (REPLY_SCHEMA).
    response_format: Literal["none", "json_schema"] = "none"
    # Base of the per-record seeds sent to servers that honour one (local models always get
    # one, base 0 unless given; other providers only when it is given).
    seed: int | None = None
    # None: single-call mode (the harness searches, the model reads); else agent mode
    agent: AgentMode | None = None
    # None: a model answers; else the user's system under test answers (``--target``), and
    # ``models`` is its one ``target/NAME``
    target: TargetSpec | str | None = None
    # None: every task; else (I, N): shard I of N of the tasks (shards.py; not in the run id)
    shard: tuple[int, int] | str | None = None
    # None: a run of fixed size; else ``--until-decided`` (``task_ids``: the plan's order)
    until_decided: UntilDecided | None = None
    # the earlier name of ``epochs`` (``--replicates``, ``replicates:``): the same setting
    replicates: InitVar[int | None] = None

    def __post_init__(self, replicates: int | None = None) -> None:
        if replicates is not None:
            if self.epochs not in (1, replicates):
                raise ValueError(f"--replicates {replicates} is the old name of --epochs "
                                 f"{self.epochs}: give one")  # fmt: skip
            object.__setattr__(self, "epochs", replicates)
        if isinstance(self.shard, str):
            from layerlab.harness.live.shards import parse_shard

            object.__setattr__(self, "shard", parse_shard(self.shard))
        if isinstance(self.target, str):
            object.__setattr__(self, "target", parse_target(self.target))
        if isinstance(self.target, TargetSpec):
            if self.models and self.models != (self.target.model,):
                raise ValueError("--target replaces -m/--model: give one or the other")
            if self.agent is not None:
                raise ValueError("--target with --agent: a target calls the tools itself")
            object.__setattr__(self, "models", (self.target.model,))
        elif any(split_model(m)[0] == TARGET_PROVIDER for m in self.models):
            raise ValueError(f"-m/--model {self.models[0]!r}: a target is given with --target")
        if self.epochs < 1:
            raise ValueError(f"--epochs {self.epochs}: expected a whole number >= 1")
        settings = self.settings
        if (
            settings.temperature is None
            and self.models
            and all(map(models_mod.is_local, self.models))
        ):
            # local models decode greedily unless a run says otherwise (llama.cpp's server
            # would otherwise sample at its own default of 0.8)
            settings = dataclasses.replace(settings, temperature=0.0)
            object.__setattr__(self, "settings", settings)
        if self.share_replies is None:
            object.__setattr__(self, "share_replies", settings.temperature == 0)
        if self.response_format not in ("none", "json_schema"):
            raise ValueError(
                f"--response-format {self.response_format!r}: expected 'none' or 'json_schema'"
            )

    def record_model(self, model: str) -> tuple[str, str]:
        """(provider, model) as this run's records name the ``-m`` model ``model``."""
        provider, name = split_model(model)
        return (provider, name + AGENT_SUFFIX) if self.agent is not None else (provider, name)

    def identical_epochs(self, model: str) -> str | None:
        """Why every epoch of ``-m`` model ``model`` would give the same records (so one is
        asked), or None when they may differ: a deterministic reference agent, or a greedy model
        whose identical prompts share one reply (``share_replies``; without it each epoch asks
        again, and a server's floating-point noise is what the epochs measure). A target is a
        team's own system: whether it is deterministic cannot be known before it answers."""
        from layerlab.models.agents import is_reference

        if self.target is not None:
            return None
        if is_reference(split_model(model)[0]):
            return "is a deterministic reference agent"
        if self.settings.temperature == 0 and self.share_replies:
            return "is greedy (temperature 0)"
        return None

    def epochs_for(self, model: str) -> int:
        """The epochs asked of ``-m`` model ``model``: ``epochs``, or 1 where they would be
        identical (:meth:`identical_epochs`)."""
        return 1 if self.identical_epochs(model) is not None else self.epochs

    def epochs_notes(self) -> list[str]:
        """One line per model that runs fewer epochs than asked, and why."""
        return [
            f"--epochs {self.epochs}: {m} {why}, its epochs would be identical; running 1 epoch"
            for m in self.models
            if self.epochs > 1 and (why := self.identical_epochs(m)) is not None
        ]

    def check(self, corpus: Corpus, scenarios: Mapping[str, Scenario]) -> None:
        """Refuse scenarios, task ids or reference agents the corpus and scenarios do not know."""
        try:  # a registered name, or a team's python:/langchain: factory that imports
            retrieval.check(self.retriever)
        except retrieval.RetrieverError as exc:
            raise LiveRunError(str(exc)) from None

        unknown = [s for s in self.scenarios if s not in scenarios]
        if unknown:
            raise LiveRunError(
                f"--scenario: unknown scenario(s) {unknown}{did_you_mean(unknown[0], scenarios)}; "
                f"known: {sorted(scenarios)}"
            )
        if self.task_ids is not None:
            if not self.task_ids:
                raise LiveRunError("--tasks: no task ids given (expected ids like hr-01-q1)")
            known = {t.task_id for t in corpus.tasks}
            bad_ids = [t for t in self.task_ids if t not in known]
            if bad_ids:
                raise LiveRunError(f"--tasks: unknown task id(s) {bad_ids[:5]}")
        if self.until_decided is not None:
            u = self.until_decided
            if isinstance(self.shard, tuple):
                raise LiveRunError("--until-decided with --shard: a run that stops when it has "
                                   "decided is judged whole (leave out --shard)")  # fmt: skip
            if self.task_ids is None or not 1 <= u.tasks <= len(self.task_ids):
                raise LiveRunError(f"--until-decided: a look of {u.tasks} of the plan's "
                                   f"{len(self.task_ids or ())} tasks")  # fmt: skip
        if isinstance(self.shard, tuple):
            from layerlab.harness.live.shards import check_shard

            try:
                check_shard(self.shard, len(self.run_task_ids(corpus)))
            except ValueError as exc:
                raise LiveRunError(str(exc)) from None
        if isinstance(self.target, TargetSpec):
            from layerlab.harness.targets import check_target

            try:
                check_target(self.target)
            except TargetError as exc:
                raise LiveRunError(str(exc)) from None
            return
        for m in self.models:
            check_model_name(m)


    def run_task_ids(self, corpus: Corpus) -> list[str]:
        """The run's tasks in corpus order (every shard's together)."""
        wanted = None if self.task_ids is None else set(self.task_ids)
        return [t.task_id for t in corpus.tasks if wanted is None or t.task_id in wanted]

    def this_shard(self, corpus: Corpus) -> LiveConfig:
        """The config that runs this invocation's tasks only: this shard's, or this look's of an
        until-decided run (the first ``until_decided.tasks`` of its order); itself otherwise."""
        if self.until_decided is not None and self.task_ids is not None:
            look = set(self.task_ids[: self.until_decided.tasks])
            ids = tuple(t for t in self.run_task_ids(corpus) if t in look)
            return dataclasses.replace(self, task_ids=ids, until_decided=None)
        if not isinstance(self.shard, tuple):
            return self
        from layerlab.harness.live.shards import shard_tasks

        ids = tuple(shard_tasks(self.run_task_ids(corpus), self.shard))
        return dataclasses.replace(self, task_ids=ids, shard=None)


def check_model_name(model: str) -> None:
    """Refuse a ``-m`` model string that no call could reach, with a suggestion that fits what
    was typed: a bare name (a registered local model, a reference agent), a misspelt provider,
    an unknown local model or reference agent. Other names are the provider's to judge (the
    preflight asks)."""
    from layerlab.models import agents

    provider, name = split_model(model)
    if not name.strip() or ("/" in model and not provider.strip()):
        raise LiveRunError(f"--model {model!r}: expected provider/name, e.g. openai/gpt-4o-mini")
    if "/" not in model:
        known = [f"{models_mod.PREFIX}{n}" for n in _local_names()]
        known += [f"{agents.PROVIDER}/{a}" for a in agents.AGENTS]
        hint = did_you_mean(model, known) or " (write provider/name, e.g. openai/gpt-4o-mini)"
        raise LiveRunError(f"--model: {model!r} names no provider{hint}")
    if provider == agents.PROVIDER:
        try:
            agents.check_name(model)
        except ValueError as exc:
            raise LiveRunError(f"--model: {exc}") from None
    elif models_mod.is_local(model):
        try:
            models_mod.lookup(model)
        except (models_mod.ModelError, SpecError) as exc:
            raise LiveRunError(f"--model: {exc}") from None
    else:
        providers = _providers()
        if providers and provider not in providers:
            raise LiveRunError(
                f"--model: unknown provider {provider!r} in {model!r}"
                f"{did_you_mean(provider, providers)}; write provider/name, e.g. openai/gpt-4o-mini"
            )


def _local_names() -> list[str]:
    try:
        return list(models_mod.load_registry())
    except SpecError:
        return []


def _providers() -> set[str]:
    """The providers litellm knows (with custom ones registered so far), plus ``local`` and
    ``layerlab``; empty when litellm is not importable (the preflight then reports it)."""
    from layerlab.models import agents
    from layerlab.models.llm import import_litellm

    try:
        litellm = import_litellm()
    except ImportError:
        return set()
    known = {getattr(p, "value", p) for p in litellm.provider_list}
    known |= {p.get("provider") for p in litellm.custom_provider_map}
    return {str(p) for p in known if p} | {agents.PROVIDER, models_mod.PREFIX.rstrip("/")}


def sampling(config: LiveConfig) -> dict[str, Any]:
    """How replies were decoded, for the manifest and every caption of real-model numbers."""
    s = config.settings
    return {
        "decoding": s.decoding,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "max_tokens": s.max_tokens,
        "seed": config.seed,
        "replicates": max_epochs(config),
        "share_replies": config.share_replies,
    }


def max_epochs(config: LiveConfig) -> int:
    """The most epochs any of the run's models is asked (the manifest's ``replicates``)."""
    return max((config.epochs_for(m) for m in config.models), default=config.epochs)


def epochs_entry(config: LiveConfig) -> dict[str, Any]:
    """The manifest's ``epochs``: requested, run per model, and why a model ran fewer."""
    why = {m: r for m in config.models if (r := config.identical_epochs(m)) is not None}
    return {
        "requested": config.epochs,
        "run": {m: config.epochs_for(m) for m in config.models},
        "why": {m: f"{r}: its epochs would be identical" for m, r in why.items()},
    }


@dataclass(frozen=True)
class RunSettings:
    """How a live run is carried out; none of it changes a record (nor the run id).

    The fields are :func:`~layerlab.harness.live.run.run_live`'s keyword arguments of the same
    names (:meth:`kwargs`).
    """

    budget: int | None = None  # hard cap on provider calls, retries included
    concurrency: int = 8
    resume: bool = False
    retry_errors: bool = False  # with resume: ask the provider_error cells again
    cache_dir: Path | None = None  # default: default_cache_dir()
    local_servers: int = 1  # llama.cpp servers per local/ model
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    seed: int = 0  # seed of the retry jitter
    preflight: bool = True
    workers: int | None = None  # default: worker_processes()
    accept_code_change: bool = False  # with resume: go on under the target's changed code

    @property
    def cache_folder(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else default_cache_dir()

    def kwargs(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def check(self, out: Path, api_bases: Sequence[str] = (), models: Sequence[str] = ()) -> None:
        """Refuse settings a run cannot go on with, before anything is loaded or written: an
        output folder that cannot be written, a negative budget, an error rate outside [0, 1],
        ``retry_errors`` without ``resume``, a bad endpoint URL or one carrying credentials
        (given, or in an endpoint variable of a provider among ``models``: whether replies are
        cached or not), a cache inside the run folder."""
        from layerlab._io import writable_folder_problem

        problem = writable_folder_problem(out)
        if problem:
            raise LiveRunError(f"--out {out}: {problem}")
        if self.budget is not None and self.budget < 0:
            raise LiveRunError(f"--budget: expected a number of calls >= 0, got {self.budget}")
        if not 0.0 <= self.max_error_rate <= 1.0:
            raise LiveRunError(
                f"--max-error-rate: expected a share between 0 and 1, got {self.max_error_rate}"
            )
        if self.retry_errors and not self.resume:
            raise LiveRunError(
                "--retry-errors: only with --resume (it re-asks a run's error cells)"
            )
        if self.accept_code_change and not self.resume:
            raise LiveRunError("--accept-code-change: only with --resume (it continues a run)")
        for base in api_bases:
            bad = api_base_problem(base)
            if bad:
                raise LiveRunError(f"--api-base: {bad}")
        workers_from_env()
        bad = environment_endpoint_problem(models)
        if bad:
            raise LiveRunError(bad)
        if _inside(self.cache_folder, Path(out)):
            raise LiveRunError(
                f"--cache-dir {self.cache_folder}: inside the run folder; the cache holds model "
                "replies and must stay outside what is shared"
            )


MAX_WORKERS = 256


def workers_from_env() -> int | None:
    """``LAYERLAB_WORKERS``: worker processes of a live run (1: none, in process), or None when
    unset (one per core); anything but a whole number from 1 to :data:`MAX_WORKERS` is refused."""
    import os

    env = os.environ.get("LAYERLAB_WORKERS")
    if env is None or not env.strip():
        return None
    try:
        n = int(env.strip())
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_WORKERS:
        raise LiveRunError(
            f"LAYERLAB_WORKERS={env!r}: expected a whole number of worker processes from 1 "
            f"(none: the run stays in this process) to {MAX_WORKERS}, or unset (one per core)"
        )
    return n


def _inside(child: Path, parent: Path) -> bool:
    try:
        child.resolve().relative_to(parent.resolve())
    except ValueError:
        return False
    return True
