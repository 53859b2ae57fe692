"""One live run's configuration, its two doors and its one validation.

:class:`RunConfig` is everything a live run is given, in four parts: :class:`Matrix` (what to
run: scenarios, arms, tasks and their ``--limit``, shard, epochs, retriever, the corpus and
scenario files, ``--until-decided``'s ask), :class:`System` (the system under test: groups of
models, each with its request settings, or a team's target; agent mode, shared replies),
``execution`` (:class:`~layerlab.harness.live.settings.RunSettings`: budget, concurrency, resume,
cache, error threshold) and :class:`Outputs` (the run folder, sample log, progress bar and the
YAML file the run was configured by). The command line builds it with :meth:`RunConfig.from_cli`,
a run configuration file with :meth:`RunConfig.from_yaml`, Python users and the pytest plugin
with the constructor; all of them hand it to :func:`layerlab.harness.runner.execute`.

:meth:`RunConfig.groups` is the one place a :class:`~layerlab.harness.live.settings.LiveConfig`
(what determines the records, hashed into the run id) is made of a configuration, one per set of
model settings: the arms checked, ``--limit``'s tasks chosen (:mod:`layerlab.harness.selection`),
an until-decided run planned. Every refusal on the way is a :class:`ConfigError`, one line naming
the flag (or the file and field, or the argument) and what was expected; the invariants of
``LiveConfig`` and ``RunSettings`` stay with those types and are reported through it.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from layerlab import paths
from layerlab.corpus.build import AnswerKey, Corpus, Task
from layerlab.corpus.spec import SpecError
from layerlab.faults.scenario import Scenario
from layerlab.harness.live.settings import (
    DEFAULT_MAX_ERROR_RATE,
    AgentMode,
    LiveConfig,
    LiveRunError,
    RunSettings,
)
from layerlab.harness.selection import LIMIT_SEED, select_tasks
from layerlab.harness.targets.spec import TargetSpec
from layerlab.models.llm import ProviderSettings
from layerlab.system import retrieval

SUBRUNS = "runs"  # where models with their own settings run before their archives are merged
FLAGS = {"mitigations": "--mitigation", "limit": "--limit", "tasks": "--tasks",
         "intensity": "--intensity"}  # fmt: skip
"""The command line's names of the fields a refusal names (the Python door: the field's own)."""
UNTIL_FLAGS = {"specific": "--specific", "no_over_broad": "--no-over-broad",
               "max_tasks": "--max-tasks", "batch": "--batch", "delta": "--delta"}  # fmt: skip
# flags a run configuration sets itself: refused next to --config rather than silently ignored
CONFIG_OWNS = (
    "model", "scenario", "mode", "tasks", "api_base", "epochs", "replicates", "share_replies",
    "response_format", "seed", "local_servers", "budget", "concurrency", "timeout", "max_tokens",
    "attempts", "backoff", "temperature", "top_p", "limit", "limit_seed", "max_error_rate", "retry_seed",
    "sample_log", "agent", "max_steps", "tool_protocol", "target", "target_name", "target_version",
    "target_setting", "retriever", "intensity",
)  # fmt: skip


class ConfigError(LiveRunError):
    """A configuration a run cannot start from: one line naming the flag (the file and field,
    the argument) and what was expected. ``usage``: a usage error (the CLI exits 2, not 1)."""

    def __init__(self, message: str, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


class ConfigProblems(ConfigError):
    """A spec file's problems (``spec``, one line each ``file:line: field: ...``); ``what``
    names them in the count line when there are several."""

    def __init__(self, spec: SpecError, what: str) -> None:
        super().__init__(str(spec))
        self.spec, self.what = spec, what


@dataclass(frozen=True)
class Until:
    """``--until-decided``'s ask: the verdicts to wait for and the looks' size (None: the
    defaults of :mod:`layerlab.analysis.sequential`)."""

    specific: tuple[str, ...] = ()
    no_over_broad: bool = False
    max_tasks: int | None = None
    batch: int | None = None
    delta: float | None = None


@dataclass(frozen=True)
class Matrix:
    """What to run: scenarios (None: every one of the DSL), mitigation arms as named (``all``
    expands; None: the contract arms; ``baseline``: the baseline arm first beside those named),
    task ids (None: every task) and a stratified ``limit`` of them, shard, epochs (``replicates``:
    their earlier name), the search tool's retriever, the corpus and scenario files, and the
    intensities each faulted scenario runs at (``name@λ``; :mod:`layerlab.faults.scenario`)."""

    scenarios: tuple[str, ...] | None = None
    mitigations: tuple[str, ...] | None = None
    baseline: bool = False
    tasks: tuple[str, ...] | None = None
    limit: int | None = None
    limit_seed: int = LIMIT_SEED
    shard: str | tuple[int, int] | None = None
    epochs: int = 1
    replicates: int | None = None
    retriever: str = retrieval.REPORTED.name
    corpus_dir: Path = paths.CORPUS_DIR
    scenarios_path: Path = paths.SCENARIO_SPEC
    more_scenarios: tuple[Path, ...] = ()  # further scenario files, after ``scenarios_path``
    until_decided: Until | None = None
    intensities: tuple[float, ...] = (1.0,)  # ``--intensity``: each faulted scenario at each λ


@dataclass(frozen=True)
class ModelGroup:
    """Models that share every request setting: one live run. A target's group names no model;
    its settings are what the target's calls get (their timeout)."""

    models: tuple[str, ...] = ()
    settings: ProviderSettings = field(default_factory=ProviderSettings)
    response_format: str = "none"
    seed: int | None = None  # base of the per-record seeds sent to servers
    local_servers: int | None = None  # llama.cpp servers per local/ model; None: the run's


@dataclass(frozen=True)
class System:
    """The system under test: model groups, or a team's ``target`` (one group of its settings);
    ``agent``: agent mode's (protocol, max steps), the protocol ``auto`` resolved per group."""

    groups: tuple[ModelGroup, ...] = ()
    target: TargetSpec | None = None
    agent: tuple[str, int] | None = None
    share_replies: bool | None = None

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(m for g in self.groups for m in g.models)


@dataclass(frozen=True)
class Outputs:
    """Where a run's outputs go: the run folder, the private sample log (outside it), whether a
    progress bar is shown, and the YAML file the run was configured by (kept as ``run.yaml``)."""

    out: Path | None = None
    sample_log: Path | None = None
    progress: bool = True
    config_file: Path | None = None
    config_text: str | None = field(default=None, compare=False, repr=False)


class Inputs:
    """The corpus, its answer key and the scenarios a run reads, loaded once when first asked
    (a broken one: :class:`ConfigError`, or :class:`ConfigProblems` for the scenario DSL)."""

    def __init__(self, corpus_dir: Path = paths.CORPUS_DIR,
                 scenarios_path: Path = paths.SCENARIO_SPEC, *more: Path) -> None:  # fmt: skip
        # ``more``: further scenario files (``--scenarios`` repeated, e.g. scenarios_transport.yaml)
        self.corpus_dir, self.scenario_paths = Path(corpus_dir), (Path(scenarios_path), *map(Path, more))
        self.scenarios_path = self.scenario_paths[0]

    @cached_property
    def loaded(self) -> tuple[Corpus, AnswerKey]:
        from layerlab.corpus import build

        try:
            return build.load(self.corpus_dir), build.load_answer_key(self.corpus_dir)
        except (build.CorpusError, OSError, ValueError) as exc:
            raise ConfigError(str(exc)) from None

    @property
    def corpus(self) -> Corpus:
        return self.loaded[0]

    @property
    def key(self) -> AnswerKey:
        return self.loaded[1]

    @cached_property
    def scenarios(self) -> dict[str, Scenario]:
        from layerlab.faults.scenario import load_files

        try:
            return load_files(self.scenario_paths)
        except SpecError as exc:
            raise ConfigProblems(exc, "scenario spec problem(s)") from None
        except ValueError as exc:  # a scenario in two files
            raise ConfigError(f"--scenarios {exc}") from None

    @property
    def scenario_hash(self) -> str:
        """The scenarios' provenance hash (:func:`layerlab.faults.scenario.files_hash`)."""
        from layerlab.faults.scenario import files_hash

        return files_hash(self.scenario_paths)


@dataclass(frozen=True)
class Group:
    """One live run of a configuration: its models, its config, its local servers (None: the
    run's) and its folder (``""``: the run folder itself, else a sub-run's)."""

    models: tuple[str, ...]
    config: LiveConfig
    local_servers: int | None
    folder: str


@dataclass(frozen=True)
class RunConfig:
    """Everything a live run is given (the module's docstring); ``labels``: how a refusal names
    a field (the command line's flags, a file's keys; default the field's own name)."""

    system: System
    matrix: Matrix = field(default_factory=Matrix)
    execution: RunSettings = field(default_factory=RunSettings)
    outputs: Outputs = field(default_factory=Outputs)
    labels: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def label(self, name: str) -> str:
        return self.labels.get(name, name)

    @classmethod
    def from_cli(cls, args: Mapping[str, Any], given: Collection[str] = (),
                 inputs: Inputs | None = None) -> RunConfig:  # fmt: skip
        """``run live``'s flags (``args``: each parameter's value by name, as parsed; ``given``:
        the names given on the command line) as a configuration, checked as far as it can be
        before the corpus is read. With ``--config`` the file is the configuration
        (:meth:`from_yaml`) and the flags it owns are refused beside it."""
        return _from_cli(dict(args), set(given), inputs)

    @classmethod
    def from_yaml(cls, path: Path, *, out: Path | None = None,
                  execution: RunSettings | None = None, progress: bool = True,
                  inputs: Inputs | None = None) -> RunConfig:  # fmt: skip
        """A run configuration file as a configuration: validated against the corpus and
        scenarios (``inputs``; default the committed ones), every problem one line
        ``file:line: field: ...`` (:class:`ConfigProblems`). ``execution`` holds what the
        command gives (resume, retry errors, the cache, local servers); the file sets budget,
        concurrency, error rate and retry seed."""
        return _from_yaml(Path(path), out, execution, progress, inputs or Inputs())

    def check_execution(self) -> None:
        """The execution settings and the run folder, checked before anything is read or
        written (:meth:`RunSettings.check`, every group's endpoints and models)."""
        if self.outputs.out is None:
            raise ConfigError("out: expected a run folder")
        bases = [b for g in self.system.groups for b in g.settings.api_bases]
        try:
            self.execution.check(self.outputs.out, bases, self.system.models)
        except LiveRunError as exc:
            raise ConfigError(str(exc)) from None

    def arms(self) -> tuple[str, ...]:
        """The mitigation arms, expanded (``all``) and each checked against the specs a live run
        resolves an arm from (``mitigations.yaml``, then ``mitigations_transport.yaml``)."""
        from layerlab.mitigations import load_run_mitigations

        try:
            book = load_run_mitigations()
        except SpecError as exc:
            raise ConfigProblems(exc, "mitigation spec problem(s)") from None
        arms = book.expand(self.matrix.mitigations)
        for a in arms:
            try:
                book.arm(a)
            except KeyError as exc:
                raise ConfigError(f"{self.label('mitigations')}: {exc.args[0]}") from None
        if self.matrix.baseline and arms:
            return tuple(dict.fromkeys((book.baseline, *arms)))
        return arms or book.contract_arms

    def groups(self, tasks: Sequence[Task], scenarios: Sequence[str],
               known: Mapping[str, Scenario] | None = None) -> list[Group]:  # fmt: skip
        """The live runs this configuration makes, one per group of model settings, each with
        its :class:`LiveConfig` (the one place one is made of a configuration). ``known``: the
        loaded scenarios, which a sweep over intensities expands."""
        m, s = self.matrix, self.system
        arms = self.arms()
        names = tuple(m.scenarios or scenarios)
        if m.intensities != (1.0,):
            from layerlab.faults.scenario import expand

            if known is None:
                raise ValueError("an intensity sweep needs the loaded scenarios (known=)")
            try:
                names = tuple(expand(names, known, m.intensities))  # type: ignore[arg-type]
            except (KeyError, ValueError) as exc:
                raise ConfigError(f"{self.label('intensity')}: {exc}") from None
        made = []
        for g in s.groups:
            try:
                agent = None if s.agent is None else AgentMode.auto(g.models, *s.agent)
                made.append(LiveConfig(
                    models=g.models, scenarios=names, mitigations=arms,
                    task_ids=m.tasks, settings=g.settings, epochs=m.epochs,
                    replicates=m.replicates, share_replies=s.share_replies,
                    response_format=g.response_format,  # type: ignore[arg-type]
                    seed=g.seed, agent=agent, target=s.target, retriever=m.retriever, shard=m.shard,
                ))  # fmt: skip
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        if m.until_decided is not None:
            made = [_plan_until(c, tasks, m) for c in made]
        elif m.limit is not None:
            try:
                ids = select_tasks(tasks, m.tasks, m.limit, m.limit_seed, self.label("limit"))
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            made = [dataclasses.replace(c, task_ids=ids) for c in made]
        out = []
        for i, (g, c) in enumerate(zip(s.groups, made, strict=True)):
            slug = re.sub(r"[^a-z0-9]+", "-", c.models[0].lower()).strip("-")
            folder = "" if len(made) == 1 else f"{SUBRUNS}/{i + 1:02d}-{slug}"
            out.append(Group(c.models, c, g.local_servers, folder))
        return out


def cpu_servers() -> int:
    """The default llama.cpp servers per ``local/`` model: one per core."""
    return os.cpu_count() or 1


def _from_cli(a: dict[str, Any], given: set[str], inputs: Inputs | None) -> RunConfig:
    """:meth:`RunConfig.from_cli`: the flags refused where they do nothing, then the parts."""
    _refuse_flags(a, given)
    out = Path(a["out"])
    if a.get("config_path") is not None:
        execution = RunSettings(resume=bool(a.get("resume")), retry_errors=bool(a.get("retry_errors")),
                                accept_code_change=bool(a.get("accept_code_change")),
                                cache_dir=a.get("cache_dir"), local_servers=cpu_servers())  # fmt: skip
        RunConfig(System(), execution=execution, outputs=Outputs(out)).check_execution()
        for name in CONFIG_OWNS:
            if name in given:
                raise ConfigError(f"--{name.replace('_', '-')}: set it in the run configuration "
                                  f"{a['config_path']}, not next to --config")  # fmt: skip
        inputs = inputs or Inputs(a.get("corpus_dir", paths.CORPUS_DIR), *_scenario_files(a))
        return RunConfig.from_yaml(a["config_path"], out=out, execution=execution,
                                   progress=a.get("progress", True), inputs=inputs)  # fmt: skip
    target = _target(a)
    models = tuple(a.get("model") or ())
    if not models and target is None:
        raise ConfigError("-m/--model: give at least one model (or a run configuration with --config)")
    d = ProviderSettings()
    try:
        settings = ProviderSettings(
            timeout_s=a.get("timeout", d.timeout_s), max_tokens=a.get("max_tokens", d.max_tokens),
            attempts=a.get("attempts", d.attempts), backoff_s=a.get("backoff", d.backoff_s),
            temperature=a.get("temperature"), top_p=a.get("top_p"),
            api_bases=tuple(a.get("api_base") or ()),
        )  # fmt: skip
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    group = ModelGroup(models, settings, a.get("response_format") or "none", a.get("seed"))
    agent = (a.get("tool_protocol") or "auto", a.get("max_steps") or 4) if a.get("agent") else None
    config = RunConfig(
        System((group,), target, agent, a.get("share_replies")),
        execution=RunSettings(
            budget=a.get("budget"), concurrency=a.get("concurrency", 8),
            resume=bool(a.get("resume")), retry_errors=bool(a.get("retry_errors")),
            accept_code_change=bool(a.get("accept_code_change")),
            cache_dir=a.get("cache_dir"), local_servers=a.get("local_servers") or cpu_servers(),
            max_error_rate=a.get("max_error_rate", DEFAULT_MAX_ERROR_RATE),
            seed=a.get("retry_seed", 0),
        ),
        outputs=Outputs(out, a.get("sample_log"), a.get("progress", True)),
        labels=FLAGS,
    )  # fmt: skip
    config.check_execution()
    return dataclasses.replace(config, matrix=_cli_matrix(a))


def _refuse_flags(a: Mapping[str, Any], given: set[str]) -> None:
    """Flags that do nothing where they are given: refused, not ignored."""
    if not a.get("until_decided"):
        for name, flag in UNTIL_FLAGS.items():
            if name in given:
                raise ConfigError(f"{flag}: an --until-decided setting; give --until-decided too",
                                  usage=True)  # fmt: skip
    if a.get("config_path") is not None:
        for flag, on in (("--shard", a.get("shard") is not None),
                         ("--until-decided", bool(a.get("until_decided")))):  # fmt: skip
            if on:
                raise ConfigError(f"{flag}: not with --config yet (give the run's flags instead)")
        return
    if not a.get("agent"):  # agent-mode flags do nothing in single-call mode
        for name, flag in (("max_steps", "--max-steps"), ("tool_protocol", "--tool-protocol")):
            if name in given:
                raise ConfigError(f"{flag}: an agent-mode setting; give --agent too (it does "
                                  "nothing in single-call mode)", usage=True)  # fmt: skip


def _cli_matrix(a: Mapping[str, Any]) -> Matrix:
    until = None
    if a.get("until_decided"):
        until = Until(tuple(a.get("specific") or ()), bool(a.get("no_over_broad")),
                      a.get("max_tasks"), a.get("batch"), a.get("delta"))  # fmt: skip
    return Matrix(
        scenarios=tuple(a.get("scenario") or ()) or None,
        mitigations=tuple(a.get("mode") or ()) or None,
        tasks=None if a.get("tasks") is None else task_ids(a["tasks"]),
        limit=a.get("limit"), limit_seed=a.get("limit_seed") or LIMIT_SEED, shard=a.get("shard"),
        epochs=a.get("epochs", 1), replicates=a.get("replicates"),
        retriever=a.get("retriever") or retrieval.REPORTED.name,
        corpus_dir=Path(a.get("corpus_dir", paths.CORPUS_DIR)),
        scenarios_path=_scenario_files(a)[0], more_scenarios=_scenario_files(a)[1:], until_decided=until,
        intensities=_intensities(a.get("intensity")),
    )  # fmt: skip


def _scenario_files(a: Mapping[str, Any]) -> tuple[Path, ...]:
    """``--scenarios``: one file or several (repeated), in order; default the paper's."""
    got = a.get("scenarios_path")
    got = [got] if isinstance(got, (str, Path)) else list(got or ())
    return tuple(Path(p) for p in got) or (paths.SCENARIO_SPEC,)


def _intensities(text: str | None) -> tuple[float, ...]:
    """``--intensity 0,0.1,1`` as its values (default: 1, the scenarios as written)."""
    if text is None:
        return (1.0,)
    from layerlab.faults.scenario import parse_intensities

    try:
        return parse_intensities(text)
    except ValueError as exc:
        raise ConfigError(str(exc), usage=True) from None


def _target(a: Mapping[str, Any]) -> TargetSpec | None:
    """``--target`` and its flags as a checked target (None without ``--target``); a bad one is
    a usage error."""
    from layerlab.harness.targets import TargetError, check_target, parse_settings, parse_target

    name, version = a.get("target_name") or "", a.get("target_version") or ""
    settings = a.get("target_setting")
    if a.get("target") is None:
        if name or version or settings:
            raise ConfigError("--target-name/--target-version/--target-setting: only with --target",
                              usage=True)  # fmt: skip
        return None
    if a.get("model"):
        raise ConfigError("--target replaces -m/--model: give one or the other", usage=True)
    try:
        spec = parse_target(a["target"], name, version, parse_settings(settings or []))
        check_target(spec)
    except TargetError as exc:
        raise ConfigError(str(exc), usage=True) from None
    return spec


def task_ids(tasks: str) -> tuple[str, ...]:
    """``--tasks``: a file with one id per line, or comma-separated ids."""
    p = Path(tasks)
    if p.exists() or "/" in tasks or tasks.endswith((".txt", ".lst")):
        try:
            raw = p.read_text(encoding="utf-8").split()
        except FileNotFoundError:
            raise ConfigError(
                f"--tasks {tasks}: no such file (expected a file or comma-separated ids)"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--tasks {tasks}: cannot read the file as UTF-8 text ({exc})") from None
        where = f"--tasks {tasks}"
    else:
        raw = tasks.split(",")
        where = "--tasks"
    ids = tuple(t.strip() for t in raw if t.strip())
    if not ids:
        raise ConfigError(
            f"{where}: no task ids given (expected ids like hr-01-q1, one per line or comma-separated)"
        )
    odd = [t for t in ids if not re.fullmatch(r"[a-z][a-z0-9_]*-\d{2}-q\d+", t)]
    if odd:
        raise ConfigError(f"{where}: {odd[0]!r} is not a task id (expected ids like hr-01-q1)")
    return ids


def _from_yaml(path: Path, out: Path | None, execution: RunSettings | None, progress: bool,
               inputs: Inputs) -> RunConfig:  # fmt: skip
    """:meth:`RunConfig.from_yaml`: the file loaded and checked, then the parts."""
    from layerlab.harness import configfile
    from layerlab.mitigations import load_run_mitigations

    corpus, scenarios = inputs.corpus, inputs.scenarios
    ids = [t.task_id for t in corpus.tasks]
    book = load_run_mitigations()
    try:
        spec = configfile.load_run_config(path, list(scenarios), list(book.arms), ids, book.source)
        text = path.read_text(encoding="utf-8")
    except SpecError as exc:
        raise ConfigProblems(exc, "problem(s) in the run configuration; nothing run") from None
    execution = dataclasses.replace(
        execution or RunSettings(local_servers=cpu_servers()), budget=spec.budget,
        concurrency=spec.concurrency, max_error_rate=spec.max_error_rate, seed=spec.retry_seed,
    )  # fmt: skip
    config = RunConfig(
        spec_system(spec),
        spec_matrix(spec, ids, inputs.corpus_dir, inputs.scenarios_path),
        execution,
        Outputs(out, spec.sample_log_path(path), progress, path, text),
        labels={k: f"{path}: {k}" for k in FLAGS},
    )
    if out is not None:
        config.check_execution()
    return config


def spec_matrix(spec: Any, task_ids: Sequence[str], corpus_dir: Path = paths.CORPUS_DIR,
                scenarios_path: Path = paths.SCENARIO_SPEC) -> Matrix:  # fmt: skip
    """What a loaded run configuration (:class:`~layerlab.harness.configfile.RunConfigSpec`)
    runs; its ``tasks`` in corpus order (``task_ids``)."""
    named = None if spec.tasks is None else set(spec.tasks)
    return Matrix(
        scenarios=tuple(spec.scenarios or ()) or None,
        mitigations=tuple(spec.mitigations or ()) or None,
        tasks=None if named is None else tuple(t for t in task_ids if t in named),
        limit=spec.limit, limit_seed=spec.limit_seed, epochs=spec.n_epochs,
        retriever=spec.retriever, corpus_dir=Path(corpus_dir), scenarios_path=Path(scenarios_path),
        intensities=tuple(sorted(set(spec.intensity))) if spec.intensity else (1.0,),
    )  # fmt: skip


def spec_system(spec: Any) -> System:
    """The system a loaded run configuration tests: its target, or its models grouped by their
    effective settings (models that share every one run together)."""
    from layerlab.harness.configfile import ModelEntry

    if spec.target is not None:  # the user's system: one run, no provider settings of a model's
        s = spec.settings_for(ModelEntry(model=spec.target.spec))
        return System((ModelGroup((), s["settings"]),), target=spec.target.target())
    keyed: dict[tuple[Any, ...], list[str]] = {}
    for m in spec.models:
        s = spec.settings_for(m)
        keyed.setdefault((s["settings"], s["response_format"], s["seed"], s["local_servers"]),
                         []).append(m.model)  # fmt: skip
    agent = None if spec.agent is None else (spec.agent.protocol, spec.agent.max_steps)
    groups = tuple(ModelGroup(tuple(ms), *k) for k, ms in keyed.items())
    return System(groups, agent=agent, share_replies=spec.share_replies)


def _usage(message: str) -> ConfigError:
    return ConfigError(message, usage=True)


def _plan_until(config: LiveConfig, tasks: Sequence[Task], m: Matrix) -> LiveConfig:
    """``config`` as an until-decided run: its task ids the first ``max_tasks`` of the nested
    stratified order (``limit_seed``) of its tasks (``--tasks`` or all), and the plan."""
    from layerlab.analysis import sequential
    from layerlab.analysis.specificity import DELTA
    from layerlab.harness.live.settings import UntilDecided
    from layerlab.harness.selection import stratified_order
    from layerlab.mitigations import load_mitigations

    ask = m.until_decided
    assert ask is not None
    if m.limit is not None:
        raise _usage("--limit: not with --until-decided (its looks choose the tasks; "
                     "--max-tasks N caps them)")  # fmt: skip
    if config.shard is not None:
        raise _usage("--shard: not with --until-decided (a run that stops when it has decided "
                     "is judged whole)")  # fmt: skip
    if not ask.specific and not ask.no_over_broad:
        raise _usage("--until-decided: name the verdicts to wait for: --specific MITIGATION "
                     "(repeatable) and/or --no-over-broad")  # fmt: skip
    base = load_mitigations().baseline
    judged = [a for a in config.mitigations if a != base]
    if base not in config.mitigations or not judged:
        raise _usage(f"--until-decided: its verdicts compare arms with the baseline: give "
                     f"--mitigation {base} and the mitigations to judge")  # fmt: skip
    for name in ask.specific:
        if name not in judged:
            raise _usage(f"--specific {name}: not a judged arm of this run (its arms besides "
                         f"the baseline {base}: {', '.join(judged)})")  # fmt: skip
    wanted = None if config.task_ids is None else set(config.task_ids)
    pool = [t for t in tasks if wanted is None or t.task_id in wanted]
    n = min(sequential.MAX_TASKS, len(pool)) if ask.max_tasks is None else ask.max_tasks
    if n > len(pool):
        raise _usage(f"--max-tasks {n}: only {len(pool)} tasks to choose from (expected 1 to "
                     f"{len(pool)})")  # fmt: skip
    try:
        plan = sequential.Plan(n, ask.batch or sequential.BATCH,
                               delta=DELTA if ask.delta is None else ask.delta)  # fmt: skip
    except ValueError as exc:
        raise _usage(str(exc)) from None
    order = stratified_order(pool, m.limit_seed)[:n]
    u = UntilDecided(plan.max_tasks, plan.batch, tuple(dict.fromkeys(ask.specific)),
                     ask.no_over_broad, plan.alpha, plan.delta, m.limit_seed, plan.sizes[0])  # fmt: skip
    return dataclasses.replace(config, task_ids=order, until_decided=u)
