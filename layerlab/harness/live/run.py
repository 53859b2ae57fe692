"""A live run from start to end: :func:`run_live` (and :func:`run_matrix` for notebooks).

Everything that can be checked is checked before the run folder is touched: the settings
(:meth:`RunSettings.check`, :meth:`LiveConfig.check`), the folder, a resumed run's identity
and a **preflight** (the first call of every model must succeed, so a misspelt model, a missing
key or a dead endpoint is a one-line setup error, not a run of ``provider_error`` records).
Then the cells still to make run in this process or in worker processes, the progress log is
written as records come, and the archive, manifest and per-model results are written at the end,
complete or not (a budget-stopped run is a valid partial archive that ``resume`` continues).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerlab import archive
from layerlab.analysis import passk, results
from layerlab.archive import Record
from layerlab.corpus.build import AnswerKey, Corpus, Task
from layerlab.faults.scenario import Scenario
from layerlab.harness.live import agentlog, calls, codechange, failed, runmanifest
from layerlab.harness.live.budget import Budget, Counters
from layerlab.harness.live.engine import (
    RunContext,
    reply_key,
    reply_seed,
    routes_for,
    run_in_process,
    todo_cells,
)
from layerlab.harness.live.progress import (
    ProgressHook,
    ProgressLog,
    RecordWriter,
    SampleHook,
    read_progress,
    rewrite_progress,
    trim_torn_tail,
)
from layerlab.harness.live.settings import (
    DEFAULT_MAX_ERROR_RATE,
    LiveConfig,
    LiveRunError,
    RunInterrupted,
    RunSettings,
    ServerDied,
)
from layerlab.harness.live.workers import run_workers, worker_processes
from layerlab.harness.prepare import PreparedScenario, prepare
from layerlab.harness.step import admit
from layerlab.models import local as models_mod
from layerlab.models.cache import ResponseCache
from layerlab.models.cachecheck import CacheError, flag_for, open_cache
from layerlab.models.llm import import_litellm
from layerlab.models.routing import Route, endpoint_label, split_model
from layerlab.system import prompt, retrieval
from layerlab.system.retrieval import RetrieverError


@dataclass(frozen=True)
class LiveResult:
    """What :func:`run_live` did: the folder, its manifest, the counters, whether it is complete,
    a message for the user and the per-model error counts."""

    out: Path
    manifest: dict[str, Any]
    counters: Counters
    complete: bool
    message: str
    errors: dict[str, dict[str, int]] = field(default_factory=dict)
    over_error_rate: tuple[str, ...] = ()
    """Models whose provider-error rate exceeded ``max_error_rate``: the run counts as failed."""
    cache_dir: Path | None = None


def run_live(
    corpus: Corpus,
    key: AnswerKey,
    scenarios: Mapping[str, Scenario],
    config: LiveConfig,
    out: Path,
    *,
    scenario_hash: str,
    budget: int | None = None,
    concurrency: int = 8,
    resume: bool = False,
    retry_errors: bool = False,
    cache_dir: Path | None = None,
    progress: ProgressHook | None = None,
    local_servers: int = 1,
    say: Callable[[str], None] = lambda _m: None,
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE,
    seed: int = 0,
    preflight: bool = True,
    samples: SampleHook | None = None,
    workers: int | None = None,
    run: RunSettings | None = None,
    accept_code_change: bool = False,
) -> LiveResult:
    """Run (or resume) a live matrix into ``out``; see the package docstring.

    ``local/NAME`` models are fetched if needed and served by ``local_servers`` llama.cpp
    servers each for the duration of the run. Everything that can be checked is checked before
    the run folder is touched: settings, the folder, the cache location and (``preflight``) one
    call per model. ``seed`` seeds the retry jitter; ``retry_errors`` (with ``resume``) asks
    ``provider_error`` cells again. ``workers`` worker processes share the cells (default:
    :func:`worker_processes`, one per core where the run allows it); this process stays the
    only writer of the run folder. ``run``: these settings as one :class:`RunSettings` (a
    :class:`~layerlab.harness.config.RunConfig`'s ``execution``, which
    :func:`layerlab.harness.runner.execute` passes); without it the keyword settings of the same
    names make one. ``accept_code_change`` resumes a run whose target's code changed
    (:mod:`.codechange`).
    """
    if run is None:
        run = RunSettings(
            budget=budget, concurrency=concurrency, resume=resume, retry_errors=retry_errors,
            cache_dir=cache_dir, local_servers=local_servers, max_error_rate=max_error_rate,
            seed=seed, preflight=preflight, workers=workers, accept_code_change=accept_code_change,
        )  # fmt: skip
    out, began = Path(out), time.time()
    config = _checked(corpus, scenarios, config, out, run, say)
    st = _begin(corpus, key, scenarios, config, out, run, scenario_hash, say)
    with _local_servers(config, run.local_servers, say) as local:
        # a server of k slots is k endpoints of one slot each (llama-server: --parallel k)
        bases = {m: [s.api_base for s in servers for _ in range(s.settings.slots)]
                 for m, servers in local.items()}  # fmt: skip
        _preflight_step(st, bases, set(local))
        target = _open_target(config)  # set up (its setup()) before anything is written
        _open_folder(st, began)  # from here on the run folder is written
        finished = _make(st, target, bases, progress, samples)
        local_prov = {
            m: models_mod.provenance(models_mod.lookup(m), servers) for m, servers in local.items()
        }
        server_cpu = {m: models_mod.cpu_seconds(servers) for m, servers in local.items()}
    return _finish(st, finished, local_prov, server_cpu, began)


@dataclass
class _Live:
    """One invocation of :func:`run_live` as it goes: what it was given, its plan, the records
    done before it, its counters, cache and budget, and how its cells ended."""

    corpus: Corpus
    key: AnswerKey
    scenarios: Mapping[str, Scenario]
    config: LiveConfig
    out: Path
    run: RunSettings
    scenario_hash: str
    say: Callable[[str], None]
    work: LiveConfig  # what this process runs: the shard's (or the look's) tasks
    n_tasks: int
    plan: dict[str, Any]
    old: dict[str, Any] | None  # the run folder's manifest (None: a new run)
    stands: dict[str, Any] | None  # the manifest as it is on disk
    done: dict[tuple[Any, ...], Record]
    report: Any
    cache: ResponseCache
    counters: Counters = field(default_factory=Counters)
    budget: Budget = field(default_factory=lambda: Budget(None))
    rng: random.Random = field(default_factory=random.Random)
    prepared: dict[str, PreparedScenario] = field(default_factory=dict)
    written: dict[tuple[Any, ...], Record] = field(default_factory=dict)
    alog: ProgressLog | None = None
    fatal: LiveRunError | None = None
    interrupted: bool = False
    code_history: Any = None  # a target's code changes accepted on resume (codechange)
    elog: Any = None  # the run's private error log (failed.open_log), while cells are made

    @property
    def plog(self) -> Path:
        return self.out / archive.PROGRESS

    def prepare_all(self) -> None:
        for n in self.config.scenarios:
            if n not in self.prepared:
                self.prepared[n] = prepare(self.corpus, self.scenarios[n], self.config.retriever)


def _checked(
    corpus: Corpus, scenarios: Mapping[str, Scenario], config: LiveConfig, out: Path,
    run: RunSettings, say: Callable[[str], None],
) -> LiveConfig:  # fmt: skip
    """The settings checked (nothing written yet) and the config with the code it runs: a
    target's and a team's retriever's fingerprints, in the run id."""
    run.check(out, config.settings.api_bases, config.models)
    config.check(corpus, scenarios)
    for line in config.epochs_notes():  # a greedy model or a reference agent: one epoch
        say(line)
    if config.target is not None:  # the target's code in the run id (targets/identity.py)
        from layerlab.harness.targets.identity import with_code

        config = dataclasses.replace(config, target=with_code(runmanifest.target_of(config), say))
    if retrieval.is_external(config.retriever):  # a team's retriever code, in the run id too
        code = tuple(sorted(retrieval.code(config.retriever).items()))
        config = dataclasses.replace(config, retriever_code=code)
    return config


def _begin(
    corpus: Corpus, key: AnswerKey, scenarios: Mapping[str, Scenario], config: LiveConfig,
    out: Path, run: RunSettings, scenario_hash: str, say: Callable[[str], None],
) -> _Live:  # fmt: skip
    """The run's plan, what a resumed folder already holds, and the reply cache opened."""
    from layerlab.models import agents

    config, code_history = codechange.reconcile(
        out, config, lambda c: runmanifest.run_id_for(c, corpus, scenario_hash), run.resume,
        run.accept_code_change,
    )  # fmt: skip
    work = config.this_shard(corpus)  # what this process runs: the shard's tasks (shards.py)
    n_tasks = len(work.task_ids) if work.task_ids is not None else len(corpus.tasks)
    plan = runmanifest.manifest(config, corpus, scenario_hash, n_tasks).to_dict()
    old = stands = runmanifest.resumed(out, plan, run.resume)  # ``stands``: the manifest as it is on disk
    runmanifest.check_runtime(out, old, [m for m in config.models if models_mod.is_local(m)])
    if old is not None:  # a killed invocation's calls, kept since in its own file
        old = runmanifest.before_resume(out, old)
    answerable = {n: s.spec.answerable for n, s in scenarios.items()}  # lines from schema 2
    done, report = read_progress(
        out / archive.PROGRESS, plan["run_id"], drop_errors=run.retry_errors, answerable=answerable
    )
    if old is not None or done:
        say(f"resuming {plan['run_id']}: {len(done)} of {plan['expected_records']} records done")
    try:  # a damaged, locked or misplaced cache is said in one line, before any call
        cache = open_cache(run.cache_folder, say, flag_for(run.cache_dir))
    except CacheError as exc:
        raise LiveRunError(f"{exc} (nothing written)") from None
    if config.target is None:  # a target run asks no provider: litellm is not imported
        agents.register()
    return _Live(corpus, key, scenarios, config, out, run, scenario_hash, say, work, n_tasks, plan, old, stands,
                 done, report, cache, budget=_budget(run.budget, old), rng=random.Random(run.seed),
                 code_history=code_history)  # fmt: skip


def _budget(limit: int | None, old: Mapping[str, Any] | None) -> Budget:
    """``--budget`` over the whole run: the calls the earlier invocations made (the manifest's
    ``calls.made``, a killed one's folded in) are spent already, so a resume gets what is left."""
    budget = Budget(limit)
    budget.used = int(((old or {}).get("calls") or {}).get("made", 0))
    return budget


def _preflight_step(st: _Live, bases: Mapping[str, list[str]], started: set[str]) -> None:
    """Ask every model still to answer its first record's prompt (``preflight``), preparing
    the scenarios meanwhile; then every scenario prepared."""
    config, per_model = st.config, runmanifest.expected_records(st.config, st.n_tasks)
    pending = [  # a model whose records are all done is not asked again
        m for m in config.models
        if sum(k[:2] == config.record_model(m) for k in st.done) < per_model[m]
    ]  # fmt: skip
    if st.run.preflight and pending and config.target is None:  # a target is checked, not asked
        if st.old is not None:  # a resume's folder holds its manifest: a kill during the
            # preflight call leaves it counted (the next resume folds the journal in)
            runmanifest.open_invocation(st.out, st.counters, st.old, st.stands)
        wanted = None if st.work.task_ids is None else set(st.work.task_ids)
        tasks = [t for t in st.corpus.tasks if wanted is None or t.task_id in wanted]
        first = _first_cell(st.corpus, st.scenarios, config, tasks, st.prepared)
        if first is not None:
            routes = routes_for(config, st.run.concurrency, bases)
            _reachable(pending, routes, started)
            # the other scenarios are prepared while the preflight call is out
            calls.run_coroutine(
                _preflight(
                    import_litellm(), config, pending, first, routes, st.cache, st.budget,
                    st.counters, st.rng, beside=st.prepare_all,
                )
            )  # fmt: skip
    st.prepare_all()


def _open_folder(st: _Live, began: float) -> None:
    """The run folder made ready: a new run's empty archive, torn log tails trimmed, the
    progress log rewritten without the lines it dropped."""
    st.out.mkdir(parents=True, exist_ok=True)
    _tidy(st.out, began)
    if st.old is None:  # a new run starts as a valid empty archive; a resumed one keeps its own
        started = runmanifest.Outcome(complete=False, records=0)
        archive.write_run(
            st.out, [], runmanifest.manifest(st.config, st.corpus, st.scenario_hash, st.n_tasks, started)
        )
    trim_torn_tail(st.plog)
    rows = _rows_log(st.config)
    if rows is not None:
        trim_torn_tail(st.out / rows)
        st.alog = ProgressLog(st.out / rows)
    if st.report.dropped:
        rewrite_progress(st.plog, st.done)


def _make(
    st: _Live, target: Any, bases: Mapping[str, list[str]], progress: ProgressHook | None,
    samples: SampleHook | None,
) -> bool:  # fmt: skip
    """Make the cells still to make, in this process or in worker processes; whether they all
    were (a fatal error, a spent budget or Ctrl-C stop it, saying so in ``st``)."""
    config, run, out = st.config, st.run, st.out
    n_workers = run.workers or worker_processes(
        config, bases, st.plan["expected_records"] - len(st.done)
    )
    st.elog = failed.open_log(out, config, st.plan["run_id"])  # a target's tracebacks (private)
    ctx = RunContext(
        st.corpus, st.key, st.work, st.prepared, st.cache, st.plan["run_id"], run.concurrency,
        samples is not None, target, st.elog,
    )  # fmt: skip
    todo, total = todo_cells(st.corpus, st.work, st.done, st.counters)
    runmanifest.open_invocation(out, st.counters, st.old, st.stands)  # each call, as it goes
    writer = RecordWriter(st.plog, st.counters, total, progress, samples, st.written, st.alog)
    try:
        if n_workers > 1 and not bases:
            return run_workers(n_workers, ctx, todo, writer, st.budget, st.rng)
        return calls.run_coroutine(run_in_process(ctx, todo, writer, st.budget, st.rng, bases))
    except LiveRunError as exc:
        st.fatal = exc
    except RetrieverError as exc:  # a team's store that stopped serving a reader's search
        st.fatal = LiveRunError(str(exc))
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: save what was scored, then say so
        st.interrupted = True
    return False


def _finish(
    st: _Live, finished: bool, local_prov: dict[str, Any], server_cpu: dict[str, float],
    began: float,
) -> LiveResult:  # fmt: skip
    """The archive, manifest and results written, complete or not; the run's result, or the
    interruption or fatal error raised once its records are saved."""
    config, out, plan, counters = st.config, st.out, st.plan, st.counters
    # what the log now holds: the usable lines read at the start and those written since
    records = list({**st.done, **st.written}.values())
    complete = finished and len(records) == plan["expected_records"]
    errors = runmanifest.error_summary(records, config.models, config)
    outcome = runmanifest.Outcome(
        complete=complete,
        calls=runmanifest.calls_summary(counters, st.old, server_cpu),
        errors=errors,
        local_models=local_prov,
    )
    if st.alog is not None:
        st.alog.close()
    final = _write(st, records, outcome)
    if records:
        results.write_results(out, records, final)  # per-model rates, next to the archive
    _tidy(out, began)
    notes = [st.report.describe()] if st.report.dropped else []
    if counters.timed_out:
        notes.append(_timeouts_note(config, counters.timed_out))
    if config.agent is not None and records:
        notes += agentlog.tool_use_notes(
            list(agentlog.read_rows(out / agentlog.AGENT_LOG).values())
        )
    if st.interrupted:
        raise RunInterrupted(out, plan["run_id"], len(records), plan["expected_records"])
    if st.fatal is not None:
        raise LiveRunError(
            f"{st.fatal}; {len(records)} records kept as a partial archive: fix the cause and "
            "continue with --resume"
        )
    if complete:
        msg = _complete_line(len(records), errors, counters, config.target is not None)
    else:
        msg = (
            f"budget spent after {final['calls']['made']} calls over the run: {len(records)} of "
            f"{plan['expected_records']} records written (a valid partial archive). Continue with "
            f"the same command plus --resume and a larger --budget (it counts every invocation)."
        )
    over = failed.over_rate(errors, st.run.max_error_rate, config)  # a store's failures, too
    if retrieval.is_external(config.retriever):
        notes.append(retrieval.report(config.retriever))
    notes += passk.deterministic_notes(records, config.epochs, (*archive.LABELS, "diagnostic"))
    said = failed.lines(st.elog, failed.close_log(st.elog, out, config), config)  # log's path last
    msg = "\n".join([*notes, msg, _error_line(errors, config.target is not None), *said])
    return LiveResult(out, final, counters, complete, msg, errors, tuple(over), st.run.cache_folder)


def _write(st: _Live, records: list[Record], outcome: runmanifest.Outcome) -> dict[str, Any]:
    """The archive and its manifest (an agent or target run's step table first: the manifest
    names its checksum); the invocation's own file goes, counted in the manifest now."""
    config, out = st.config, st.out
    m = runmanifest.manifest(config, st.corpus, st.scenario_hash, st.n_tasks, outcome)
    if config.agent is not None:  # the step table first; the manifest names its checksum
        table = agentlog.write_table(out, records)
        m = dataclasses.replace(m, agent={**m.agent, "table_sha256": table})
    if config.target is not None and isinstance(m.target, dict):
        table = agentlog.write_table(out, records, target=True)
        m = dataclasses.replace(m, target={**m.target, "table_sha256": table})
        m = codechange.stamp(m, st.code_history, st.written.values())
    final = archive.write_run(out, records, m)
    if st.counters.journal is not None:
        st.counters.journal.close()
        st.counters.journal = None
    (out / runmanifest.INVOCATION).unlink(missing_ok=True)  # counted in the manifest now
    return final


def _open_target(config: LiveConfig) -> Any:
    """A target run's target, opened (loaded, instantiated, ``setup()``), or None."""
    if config.target is None:
        return None
    from layerlab.harness.targets import TargetError, TargetSpec
    from layerlab.harness.targets.execute import open_target

    assert isinstance(config.target, TargetSpec)
    try:
        return open_target(config.target)
    except TargetError as exc:
        raise LiveRunError(f"{exc} (nothing written)") from None


def _timeouts_note(config: LiveConfig, n: int) -> str:
    from layerlab.harness.targets import TargetSpec
    from layerlab.harness.targets.options import timeout_setting

    assert isinstance(config.target, TargetSpec)
    limit = timeout_setting(config.target, config.settings.timeout_s)
    return (
        f"target: {n} record(s) timed out (no reply within {limit:g} s), counted as provider "
        "errors; --target-setting timeout=S gives each record more time"
    )


def _rows_log(config: LiveConfig) -> str | None:
    """The per-record rows log of an agent or target run (None: a single-call run)."""
    if config.target is not None:
        return agentlog.TARGET_LOG
    return agentlog.AGENT_LOG if config.agent is not None else None


def _tidy(out: Path, began: float) -> None:
    """Finish an interrupted archive write and remove the temporary files a killed writer of
    this folder left (none written since this run ``began`` is touched)."""
    from layerlab._io import stale_temporaries

    archive.finish_write(out)
    stale_temporaries(out, began)


def _complete_line(
    n: int, errors: Mapping[str, Mapping[str, int]], counters: Counters, target: bool
) -> str:
    """What a finished run holds, each count naming what it counts: the records; of those, the
    ones that asked a model (the denominators of :func:`_error_line`) and the ones a contract or
    mitigation ended before the reader; this invocation's provider calls and cache hits. A target
    is asked on every record and makes no provider call of layerlab's, so its line says that."""
    if target:
        return f"complete: {n} records, each one asked of the target"
    asked = sum(e["called"] for e in errors.values())
    return (
        f"complete: {n} records ({asked} asked a model, {n - asked} ended before the reader); "
        f"this invocation: {counters.calls} provider calls (retries included), "
        f"{counters.cache_hits} replies from the cache"
    )


def _error_line(errors: Mapping[str, Mapping[str, int]], target: bool = False) -> str:
    """Per model, its ``provider_error`` records of the records that asked it (a target: of every
    record; its exception or timeout is a provider error)."""
    asked = "" if target else " that asked it"
    parts = []
    for m, e in errors.items():
        rate = e["provider_error"] / e["called"] if e["called"] else 0.0
        parts.append(f"{m} {e['provider_error']} of {e['called']} records{asked} ({rate:.1%})")
    head = "provider errors (the target raised or timed out)" if target else "provider errors"
    return f"{head}: " + ", ".join(parts)


def _reachable(models: Sequence[str], routes: Mapping[str, Route], started: set[str]) -> None:
    """Refuse a run whose ``--api-base`` accepts no connection (servers this run started are
    up; reference agents call none), in seconds and in so many words, before the preflight would
    retry a dead endpoint."""
    from layerlab.models import agents

    seen: set[str] = set()
    for model in models:
        if model in started or split_model(model)[0] == agents.PROVIDER:
            continue  # a reference agent answers in-process: it never calls its endpoint
        for ep in routes[model].endpoints:
            if not ep.api_base or ep.api_base in seen:
                continue
            seen.add(ep.api_base)
            why = calls.unreachable(ep.api_base)
            if why is not None:
                raise LiveRunError(
                    f"{model}: nothing answers at the {endpoint_label(ep.api_base)} --api-base "
                    f"({why}): start the server or correct --api-base; nothing written"
                )


def _first_cell(
    corpus: Corpus,
    scenarios: Mapping[str, Scenario],
    config: LiveConfig,
    tasks: Sequence[Task],
    prepared: dict[str, PreparedScenario] | None = None,
) -> tuple[tuple[str, str, str, int], list[dict[str, str]]] | None:
    """The first cell of the matrix that reaches the reader, as (scenario, mitigation, task id,
    replicate) and its prompt (prompts do not depend on the model), or None. The scenarios it
    prepares are kept in ``prepared``."""
    prepared = {} if prepared is None else prepared
    for name in config.scenarios:
        if name not in prepared:
            prepared[name] = prepare(corpus, scenarios[name], config.retriever)
        prep = prepared[name]
        for t in tasks:
            for mode in config.mitigations:
                g = admit(t, prep, mode)
                if g.inp is not None:
                    return (name, mode, t.task_id, 0), prompt.messages(g.inp)
    return None


async def _preflight(
    litellm: Any,
    config: LiveConfig,
    models: Sequence[str],
    first: tuple[tuple[str, str, str, int], list[dict[str, str]]],
    routes: Mapping[str, Route],
    cache: ResponseCache,
    budget: Budget,
    counters: Counters,
    rng: random.Random,
    beside: Callable[[], None] | None = None,
) -> None:
    """Ask every model its first record's prompt before any record exists. A setup error, or a
    call that fails even after its retries, stops the run with one line (nothing is written).
    The reply is cached under that record's key, so the run does not ask again; a cached reply
    skips the call. ``beside`` (the run's remaining set-up) runs in a thread meanwhile, so
    the call's latency hides it."""
    side = asyncio.ensure_future(asyncio.to_thread(beside)) if beside is not None else None
    ident, msgs = first
    phash = prompt.prompt_hash(msgs)
    try:
        for model in models:
            ckey = reply_key(config, model, phash, ident)
            if cache.get(ckey) is not None:
                continue
            route = routes[model]
            seed = reply_seed(config, route.seed_base, model, phash, ident)
            last: list[str] = []
            try:
                reply, failure = await calls.call(
                    litellm, route, msgs, seed, config.settings, budget, counters, rng, last
                )
            except ServerDied as exc:
                raise LiveRunError(f"{exc}; nothing written") from None
            if reply is not None or failure is not None:
                counters.count("cache_misses")
            if reply is not None:
                cache.put(ckey, reply)
                cache.preflighted.add(ckey)
            elif failure is not None:
                where = sorted({endpoint_label(e.api_base) or "" for e in route.endpoints} - {""})
                raise LiveRunError(
                    f"{model}: preflight call failed after {config.settings.attempts} attempt(s)"
                    + (f" at the {'/'.join(where)} --api-base" if where else "")
                    + f" ({last[0] if last else 'no reply'}); nothing written"
                )
            # failure None and reply None: the budget is spent, so no call will be made at all
    finally:
        cache.close()  # the preflight's replies on disk (and no writer thread) in any case
        if side is not None:
            await side


@contextlib.contextmanager
def _local_servers(
    config: LiveConfig, n: int, say: Callable[[str], None]
) -> Iterator[dict[str, list[models_mod.LocalServer]]]:
    """Fetch and start the servers of the run's ``local/`` models; stop them afterwards."""
    wanted = [m for m in config.models if models_mod.is_local(m)]
    if not wanted:
        yield {}
        return
    with contextlib.ExitStack() as stack:
        running: dict[str, list[models_mod.LocalServer]] = {}
        try:
            for m in wanted:
                spec = models_mod.lookup(m)
                models_mod.runtime_version()
                models_mod.fetch(spec, say=say)
                say(f"starting {n} llama.cpp server(s) for {spec.label}")
                running[m] = stack.enter_context(models_mod.serve(spec, n_servers=n))
        except models_mod.ModelError as exc:
            raise LiveRunError(str(exc)) from None
        yield running
