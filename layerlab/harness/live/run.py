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
import sys
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
from layerlab.models.llm import ProviderSettings, import_litellm
from layerlab.models.routing import Route, endpoint_label, record_seed, split_model
from layerlab.system import prompt, retrieval


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
    accept_code_change: bool = False,
) -> LiveResult:
    """Run (or resume) a live matrix into ``out``; see the package docstring.

    ``local/NAME`` models are fetched if needed and served by ``local_servers`` llama.cpp
    servers each for the duration of the run. Everything that can be checked is checked before
    the run folder is touched: settings, the folder, the cache location and (``preflight``) one
    call per model. ``seed`` seeds the retry jitter; ``retry_errors`` (with ``resume``) asks
    ``provider_error`` cells again. ``workers`` worker processes share the cells (default:
    :func:`worker_processes`, one per core where the run allows it); this process stays the
    only writer of the run folder. The keyword settings are those of :class:`RunSettings`;
    ``accept_code_change`` resumes a run whose target's code changed (:mod:`.codechange`).
    """
    from layerlab.models import agents

    out = Path(out)
    began = time.time()
    run = RunSettings(
        budget=budget, concurrency=concurrency, resume=resume, retry_errors=retry_errors,
        cache_dir=cache_dir, local_servers=local_servers, max_error_rate=max_error_rate,
        seed=seed, preflight=preflight, workers=workers,
    )  # fmt: skip
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
    config, code_history = codechange.reconcile(
        out, config, lambda c: runmanifest.run_id_for(c, corpus, scenario_hash), resume,
        accept_code_change,
    )  # fmt: skip
    work = config.this_shard(corpus)  # what this process runs: the shard's tasks (shards.py)
    n_tasks = len(work.task_ids) if work.task_ids is not None else len(corpus.tasks)
    plan = runmanifest.manifest(config, corpus, scenario_hash, n_tasks).to_dict()
    old = stands = _resumed(out, plan, resume)  # ``stands``: the manifest as it is on disk
    if old is not None:  # a killed invocation's calls, kept since in its own file
        old = runmanifest.before_resume(out, old)
    plog = out / archive.PROGRESS
    answerable = {n: s.spec.answerable for n, s in scenarios.items()}  # lines from schema 2
    done, report = read_progress(
        plog, plan["run_id"], drop_errors=retry_errors, answerable=answerable
    )
    if old is not None or done:
        say(f"resuming {plan['run_id']}: {len(done)} of {plan['expected_records']} records done")
    counters = Counters()
    b = Budget(budget)
    rng = random.Random(seed)
    try:  # a damaged, locked or misplaced cache is said in one line, before any call
        cache = open_cache(run.cache_folder, say, flag_for(cache_dir))
    except CacheError as exc:
        raise LiveRunError(f"{exc} (nothing written)") from None
    if config.target is None:  # a target run asks no provider: litellm is not imported
        agents.register()
    per_model = runmanifest.expected_records(config, n_tasks)
    pending = [  # a model whose records are all done is not asked again
        m for m in config.models if sum(k[:2] == config.record_model(m) for k in done) < per_model[m]
    ]
    fatal: LiveRunError | None = None
    interrupted = False
    prepared: dict[str, PreparedScenario] = {}

    def prepare_all() -> None:
        for n in config.scenarios:
            if n not in prepared:
                prepared[n] = prepare(corpus, scenarios[n], config.retriever)

    with _local_servers(config, local_servers, say) as local:
        bases = {m: [s.api_base for s in servers] for m, servers in local.items()}
        if preflight and pending and config.target is None:  # a target is checked, not asked
            wanted = None if work.task_ids is None else set(work.task_ids)
            tasks = [t for t in corpus.tasks if wanted is None or t.task_id in wanted]
            first = _first_cell(corpus, scenarios, config, tasks, prepared)
            if first is not None:
                routes = routes_for(config, concurrency, bases)
                _reachable(pending, routes, set(local))
                # the other scenarios are prepared while the preflight call is out
                calls.run_coroutine(
                    _preflight(
                        import_litellm(), config, pending, first, routes, cache, b, counters,
                        rng, beside=prepare_all,
                    )
                )  # fmt: skip
        prepare_all()
        target = _open_target(config)  # set up (its setup()) before anything is written
        # from here on the run folder is written
        out.mkdir(parents=True, exist_ok=True)
        _tidy(out, began)
        if old is None:  # a new run starts as a valid empty archive; a resumed one keeps its own
            started = runmanifest.Outcome(complete=False, records=0)
            archive.write_run(
                out, [], runmanifest.manifest(config, corpus, scenario_hash, n_tasks, started)
            )
        trim_torn_tail(plog)
        rows = _rows_log(config)
        if rows is not None:
            trim_torn_tail(out / rows)
        if report.dropped:
            rewrite_progress(plog, done)
        written: dict[tuple[Any, ...], Record] = {}
        n_workers = workers or worker_processes(config, bases, plan["expected_records"] - len(done))
        elog = failed.open_log(out, config, plan["run_id"])  # a target's tracebacks (private)
        ctx = RunContext(
            corpus, key, work, prepared, cache, plan["run_id"], concurrency, samples is not None,
            target, elog,
        )
        todo, total = todo_cells(corpus, work, done, counters)
        alog = ProgressLog(out / rows) if rows is not None else None
        snap = (
            runmanifest.INVOCATION_EVERY_S,
            lambda: runmanifest.save_invocation(out, counters, old, stands),
        )
        writer = RecordWriter(plog, counters, total, progress, samples, written, alog, snap)
        try:
            if n_workers > 1 and not bases:
                finished = run_workers(n_workers, ctx, todo, writer, b, rng)
            else:
                finished = calls.run_coroutine(run_in_process(ctx, todo, writer, b, rng, bases))
        except LiveRunError as exc:
            fatal, finished = exc, False
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: save what was scored, then say so
            interrupted, finished = True, False
        local_prov = {
            m: models_mod.provenance(models_mod.lookup(m), servers) for m, servers in local.items()
        }
        server_cpu = {m: models_mod.cpu_seconds(servers) for m, servers in local.items()}
    # what the log now holds: the usable lines read at the start and those written since
    records = list({**done, **written}.values())
    complete = finished and len(records) == plan["expected_records"]
    errors = runmanifest.error_summary(records, config.models, config)
    outcome = runmanifest.Outcome(
        complete=complete,
        calls=runmanifest.calls_summary(counters, old, server_cpu),
        errors=errors,
        local_models=local_prov,
    )
    if alog is not None:
        alog.close()
    m = runmanifest.manifest(config, corpus, scenario_hash, n_tasks, outcome)
    if config.agent is not None:  # the step table first; the manifest names its checksum
        table = agentlog.write_table(out, records)
        m = dataclasses.replace(m, agent={**m.agent, "table_sha256": table})
    if config.target is not None and isinstance(m.target, dict):
        table = agentlog.write_table(out, records, target=True)
        m = dataclasses.replace(m, target={**m.target, "table_sha256": table})
        m = codechange.stamp(m, code_history, written.values())
    final = archive.write_run(out, records, m)
    (out / runmanifest.INVOCATION).unlink(missing_ok=True)  # counted in the manifest now
    if records:
        results.write_results(out, records, final)  # per-model rates, next to the archive
    _tidy(out, began)
    notes = [report.describe()] if report.dropped else []
    if counters.timed_out:
        notes.append(_timeouts_note(config, counters.timed_out))
    if config.agent is not None and records:
        notes += agentlog.tool_use_notes(
            list(agentlog.read_rows(out / agentlog.AGENT_LOG).values())
        )
    if interrupted:
        raise RunInterrupted(out, plan["run_id"], len(records), plan["expected_records"])
    if fatal is not None:
        raise LiveRunError(
            f"{fatal}; {len(records)} records kept as a partial archive: fix the cause and "
            "continue with --resume"
        )
    if complete:
        msg = _complete_line(len(records), errors, counters, config.target is not None)
    else:
        msg = (
            f"budget spent after {counters.calls} calls: {len(records)} of {plan['expected_records']} "
            f"records written (a valid partial archive). Continue with the same command plus --resume "
            f"and a new --budget."
        )
    over = failed.over_rate(errors, max_error_rate, config)  # a store's failures, too
    if retrieval.is_external(config.retriever):
        notes.append(retrieval.report(config.retriever))
    notes += passk.deterministic_notes(records, config.epochs, (*archive.LABELS, "diagnostic"))
    said = failed.lines(elog, failed.close_log(elog, out, config), config)  # log's path last
    msg = "\n".join([*notes, msg, _error_line(errors, config.target is not None), *said])
    return LiveResult(out, final, counters, complete, msg, errors, tuple(over), run.cache_folder)


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


def _resumed(out: Path, plan: Mapping[str, Any], resume: bool) -> dict[str, Any] | None:
    """The manifest of the run ``out`` already holds (None if there is none yet), once it is
    known to be this run: refused without ``resume``, or when made with other settings."""
    mpath = out / archive.MANIFEST
    if not (mpath.exists() or (out / archive.PROGRESS).exists()):
        return None
    if not resume:
        raise LiveRunError(
            f"{out} already holds a run; pass --resume to continue it or choose another --out"
        )
    try:
        old = archive.read_manifest(out) if mpath.exists() else None
    except archive.ArchiveError as exc:
        raise LiveRunError(str(exc)) from None
    if (
        old is not None
        and old.get("response_format", "none") == plan["response_format"] != "none"
        and old.get("reply_schema") != plan.get("reply_schema")
    ):
        raise LiveRunError(
            f"{out} holds a run made under reply schema "
            f"{old.get('reply_schema') or 'layerlab.reply-schema/1'}; this layerlab asks "
            f"with {plan.get('reply_schema')}, so its replies would "
            "differ: choose another --out (the old archive stays valid as it is)"
        )
    if old is not None and old["run_id"] == plan["run_id"] and old.get("shard") != plan.get("shard"):
        raise LiveRunError(
            f"{out} holds {_shard_text(old)} of run {old['run_id']}, not {_shard_text(plan)}: "
            "resume with the same --shard"
        )
    if old is not None and old["run_id"] != plan["run_id"]:
        ud = old.get("until_decided") or plan.get("until_decided")
        hint = (" (an until-decided run: the same --until-decided, --specific, --no-over-broad, "
                "--max-tasks, --batch, --delta and --limit-seed too)") if ud else ""  # fmt: skip
        raise LiveRunError(
            f"{out} holds run {old['run_id']} with other settings than this command "
            f"(would be {plan['run_id']}); resume with the original models, filters and "
            f"settings{hint}"
        )
    return old


def _shard_text(m: Mapping[str, Any]) -> str:
    s = m.get("shard")
    return f"shard {s['index']}/{s['count']}" if s else "all tasks"


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
            seed = None if route.seed_base is None else record_seed(route.seed_base, model, *ident)
            last: list[str] = []
            try:
                reply, failure = await calls.call(
                    litellm, route, msgs, seed, config.settings, budget, counters, rng, last
                )
            except ServerDied as exc:
                raise LiveRunError(f"{exc}; nothing written") from None
            if reply is not None or failure is not None:
                counters.cache_misses += 1
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


def run_matrix(
    models: Sequence[str],
    out: Path | str | None = None,
    scenarios: Sequence[str] | None = None,
    budget: int | None = None,
    concurrency: int = 16,
    resume: bool = False,
    settings: ProviderSettings | None = None,
) -> LiveResult:
    """Convenience for notebooks: run ``models`` over the committed corpus and scenarios.

    ``out=None`` runs into a fresh temporary folder (kept until the process exits).
    """
    import tempfile

    from layerlab import paths
    from layerlab.corpus import build as corpus_mod
    from layerlab.corpus.spec import spec_hash
    from layerlab.faults.scenario import load_scenarios

    c, key = corpus_mod.load(), corpus_mod.load_answer_key()
    scen = load_scenarios()
    cache_dir = None
    if (
        out is None
    ):  # a throwaway run gets a throwaway cache, so its counts do not depend on history
        _TMP.append(tempfile.TemporaryDirectory(prefix="layerlab-live-"))
        out = Path(_TMP[-1].name) / "run"
        cache_dir = Path(_TMP[-1].name) / "cache"
    cfg = LiveConfig(
        models=tuple(models),
        scenarios=tuple(scenarios or scen),
        settings=settings or ProviderSettings(),
    )
    return run_live(
        c,
        key,
        scen,
        cfg,
        Path(out),
        scenario_hash=spec_hash(paths.SCENARIO_SPEC),
        budget=budget,
        concurrency=concurrency,
        resume=resume,
        cache_dir=cache_dir,
        say=lambda m: print(m, file=sys.stderr),  # a degraded reply cache, a server starting
    )


_TMP: list[Any] = []
