"""The live engine: turns matrix cells into records.

For each cell :class:`Engine` runs the one record step (:class:`~layerlab.harness.step.RecordStep`:
admit, read, after-reader, evaluate) with a model as the reader: the reply comes from the reply
cache, else from the provider (:func:`~layerlab.harness.live.calls.call`, through the model's
:class:`~layerlab.models.routing.Route`), identical prompts in flight are asked once when replies
are shared. :func:`todo_cells` lists what a run (or resume) still has to make, in a seeded arm
order; :func:`run_in_process` runs them on one event loop. Everything a run reads is one
:class:`RunContext`.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from layerlab import mitigations
from layerlab._io import canonical_json
from layerlab.archive import Record, samplelog
from layerlab.corpus.build import AnswerKey, Corpus, Task
from layerlab.faults.operators import ToolContext
from layerlab.faults.transport import TransportEvent
from layerlab.harness.agent import AgentLoop, conversation_hash
from layerlab.harness.live import calls
from layerlab.harness.live.agentlog import (
    agent_request,
    agent_row,
    call_rows,
    target_row,
    transcript,
)
from layerlab.harness.live.budget import Budget, Counters
from layerlab.harness.live.progress import RecordWriter, progress_line
from layerlab.harness.live.settings import AgentMode, LiveConfig, LiveRunError
from layerlab.harness.prepare import PreparedScenario, session_for
from layerlab.harness.step import Reading, RecordContext, RecordStep
from layerlab.harness.targets import (
    TargetError,
    TargetSpec,
    end_record,
    score_record,
    start_record,
)
from layerlab.harness.targets.execute import Runner, TargetExit, open_target
from layerlab.harness.targets.spans import RecordSpans, record_ident, within
from layerlab.models import llamaserver
from layerlab.models.cache import ResponseCache
from layerlab.models.llm import import_litellm
from layerlab.models.routing import Endpoint, Route, record_seed, response_format_for, split_model
from layerlab.system import prompt
from layerlab.system.retrieval import RetrieverError

Made = tuple[Record, dict[str, Any] | None, dict[str, Any] | None]
"""A made record: the record, its sample-log entry (or None) and its agent row (or None)."""


def routes_for(
    config: LiveConfig, concurrency: int, local: Mapping[str, Sequence[str]] | None = None
) -> dict[str, Route]:
    """A :class:`Route` per model. ``local`` maps a ``local/NAME`` model to its servers' URLs."""
    local = local or {}
    routes: dict[str, Route] = {}
    for m in config.models:
        if config.target is not None:
            continue  # the user's system answers: no provider route
        if m in local:
            routes[m] = local_route(m, local[m], config.response_format,
                                    config.seed if config.seed is not None else 0)  # fmt: skip
        else:
            bases: Sequence[str | None] = config.settings.api_bases or (None,)
            routes[m] = Route(
                model=m,
                endpoints=[Endpoint(b, asyncio.Semaphore(concurrency)) for b in bases],
                response_format=response_format_for(config.response_format, local=False),
                seed_base=config.seed,
            )
    return routes


def local_route(model: str, bases: Sequence[str], response_format: str, seed_base: int,
                schema: dict[str, Any] | None = None) -> Route:  # fmt: skip
    """The :class:`Route` of a ``local/NAME`` model served at ``bases`` (one request at a time
    each), asking for ``response_format`` of the reply contract (``schema``: another contract's
    schema); under llama-server the default runtime's grammar of the schema is sent instead."""
    from layerlab.models import local as models_mod

    spec = models_mod.lookup(model)
    fmt = response_format_for(response_format, local=True, schema=schema)
    extra: dict[str, Any] = {"api_key": models_mod.PLACEHOLDER_KEY}
    if fmt is not None and llamaserver.selected() != llamaserver.DEFAULT:
        extra["extra_body"] = {"grammar": llamaserver.grammar_for(fmt)}  # the default's
        fmt = None
    return Route(
        model=f"openai/{spec.name}",
        endpoints=[Endpoint(b, asyncio.Semaphore(1)) for b in bases],
        extra=extra,
        merge_system=spec.system_prompt == "merge",
        response_format=fmt,
        seed_base=seed_base,
        name=model,
    )


@dataclass(frozen=True)
class RunContext:
    """What every part of a run reads and none changes, passed whole to the engine and to each
    worker process (it pickles: the reply cache travels as its folder and preflight replies)."""

    corpus: Corpus
    key: AnswerKey
    config: LiveConfig
    prepared: Mapping[str, PreparedScenario]
    cache: ResponseCache
    run_id: str
    concurrency: int  # concurrent requests of the run (a worker process gets its share)
    want_samples: bool  # whether records come with their sample-log entries
    target: Any = None  # the opened target (execute.open_target) of a target run, else None
    errors: Any = None  # a target run's error log (targets.failures.ErrorLog), else None


@dataclass(frozen=True)
class Cell:
    """One record to make: model, scenario, arm, task and epoch (``replicate``)."""

    model: str
    scenario: str
    mode: str
    task: Task
    replicate: int = 0


def ident_of(cell: Cell) -> tuple[str, str, str, str, int]:
    """(model, scenario, arm, task id, replicate): what a record's seed is derived from."""
    return (cell.model, cell.scenario, cell.mode, cell.task.task_id, cell.replicate)


def reply_key(config: LiveConfig, model: str, phash: str, ident: Sequence[Any]) -> str:
    """The cache key of one record's reply (shared by identical prompts with ``share_replies``)."""
    params = {
        **config.settings.request_params(),
        "response_format": config.response_format,
        "seed": config.seed,
    }
    if config.response_format != "none":  # a new reply schema asks again
        params["reply_schema"] = prompt.REPLY_SCHEMA_VERSION
    if model.startswith("local/") and (which := llamaserver.selected()) != llamaserver.DEFAULT:
        params["runtime"] = which  # another runtime's replies are its own (the default's keys
        # are unchanged: the committed archives' replies were cached under them)
    return ResponseCache.key(model, params, phash, _shared_by(config, ident))


def _shared_by(config: LiveConfig, ident: Sequence[Any]) -> tuple[Any, ...]:
    """What a reply is keyed by beside its prompt: the record (``ident``), or, with
    ``share_replies``, nothing but the epoch (identical prompts of one epoch share a reply; each
    epoch asks again: epoch 0's key is the one a greedy run has always used)."""
    if not config.share_replies:
        return tuple(ident)
    return () if ident[-1] == 0 else (("epoch", ident[-1]),)


def reply_seed(config: LiveConfig, seed_base: int | None, model: str, phash: str,
               ident: Sequence[Any]) -> int | None:  # fmt: skip
    """The seed sent with a record's request (None: no seed): from the record (model,
    scenario, arm, task, epoch), or, where a sampled reply is shared by identical prompts, from
    the prompt and the epoch, so whichever record asks first the reply is the same."""
    if seed_base is None:
        return None
    if config.share_replies and config.settings.temperature not in (None, 0):
        ident = (f"shared:{phash}", "", "", ident[-1])
    return record_seed(seed_base, model, *ident)


class Engine:
    """Turns cells into records: admit, ask (cache, then the provider), parse, score.

    One per event loop (the run's process, or each worker process). ``emit`` receives each record
    with its progress-log line, already serialised, and the sample-log entry (or None).
    """

    def __init__(
        self,
        ctx: RunContext,
        budget: Budget,
        counters: Counters,
        rng: random.Random,
        routes: Mapping[str, Route],
    ):
        self.corpus, self.key, self.config, self.prepared = (
            ctx.corpus, ctx.key, ctx.config, ctx.prepared
        )  # fmt: skip
        self.cache, self.run_id, self.want_samples = ctx.cache, ctx.run_id, ctx.want_samples
        self.budget, self.counters, self.rng, self.routes = budget, counters, rng, routes
        self.litellm = import_litellm() if ctx.config.target is None else None
        self.runner: Runner | None = None
        if isinstance(ctx.config.target, TargetSpec):  # opened before the run folder exists
            try:
                target = ctx.target or open_target(ctx.config.target)
            except TargetError as exc:
                raise LiveRunError(str(exc)) from None
            self.runner = Runner(target, ctx.config.settings.timeout_s)
            self.runner.errors = ctx.errors
        self.spans: RecordSpans | None = None  # the team's own spans, for the sample log only
        if self.runner is not None and self.want_samples:
            try:
                self.spans = RecordSpans(target.spec.kind, target.spec.options())
            except TargetError as exc:
                self.runner.close()
                raise LiveRunError(str(exc)) from None
        # the arms once, not a spec lookup per record
        book = mitigations.load_run_mitigations()  # mitigations.yaml, then the transport arms
        self.arms = {m: book.arm(m) for m in ctx.config.mitigations}
        self.stopped = False
        self.inflight: dict[str, asyncio.Future[tuple[str | None, str | None]]] = {}

    async def ask(
        self,
        cell: Cell,
        msgs: list[dict[str, Any]],
        phash: str,
        extra: dict[str, Any] | None = None,
        native_tools: bool = False,
        pin: list[int] | None = None,
    ) -> tuple[str | None, str | None, bool]:
        """(reply, failure, from_cache); (None, None, _) when the budget stopped the run.
        ``extra`` and ``native_tools`` are an agent step's (see :func:`calls.call`)."""
        route = self.routes[cell.model]
        ident = (cell.scenario, cell.mode, cell.task.task_id, cell.replicate)
        ckey = reply_key(self.config, cell.model, phash, ident)
        reply = self.cache.get(ckey)
        if reply is not None:
            return reply, None, ckey not in self.cache.preflighted
        if ckey in self.inflight:  # only with share_replies: the same prompt is being asked
            reply, failure = await self.inflight[ckey]
            return reply, failure, False
        if self.stopped:
            return None, None, False
        fut: asyncio.Future[tuple[str | None, str | None]] = (
            asyncio.get_running_loop().create_future()
        )
        self.inflight[ckey] = fut
        reply, failure = None, None
        try:
            seed = reply_seed(self.config, route.seed_base, cell.model, phash, ident)
            reply, failure = await calls.call(
                self.litellm, route, msgs, seed, self.config.settings, self.budget,
                self.counters, self.rng, affinity=None if pin is not None else phash,
                extra=extra, native_tools=native_tools, pin=pin, fault=self.model_fault(cell),
            )  # fmt: skip
            if reply is not None or failure is not None:  # the provider was asked
                self.counters.count("cache_misses")
            if reply is not None:
                self.cache.put(ckey, reply)
        finally:
            fut.set_result((reply, failure)) if not fut.done() else None
            del self.inflight[ckey]
        if reply is None and failure is None:
            self.stopped = True  # budget spent: leave this cell for --resume
        return reply, failure, False

    def model_fault(self, cell: Cell) -> Callable[[int], TransportEvent | None] | None:
        """The transport fault of each attempt of ``cell``'s model call under a transport
        scenario (its ``model`` channel: the tasks its tool calls' faults strike), else None."""
        scenario = self.prepared[cell.scenario].scenario
        if not scenario.has_transport:
            return None
        t = cell.task
        return lambda n: scenario.transport_event(
            ToolContext(t.task_id, t.policy_id, session_for(t.task_id), n), "model"
        )

    async def record(self, cell: Cell) -> Made | None:
        """The cell's record, sample entry and agent row, or None when the budget stopped the
        run."""
        if self.runner is not None:
            return await self.target_record(cell, self.runner)
        if self.config.agent is not None:
            return await self.agent_record(cell, self.config.agent)
        provider, name = split_model(cell.model)
        step = RecordStep(cell.task, self.prepared[cell.scenario], self.arms[cell.mode])
        context = RecordContext(self.corpus, self.key, provider, name, self.run_id)
        reply, reading = None, None
        if step.inp is not None:
            msgs = prompt.messages(step.inp)
            phash = prompt.prompt_hash(msgs)
            reply, failure, cached = await self.ask(cell, msgs, phash)
            if reply is None and failure is None:
                return None
            if cached:
                self.counters.count("cache_hits")
            out = None
            if reply is not None:
                try:
                    out = prompt.parse_reply(reply)
                except prompt.MalformedReply:
                    failure = "malformed_reply"
            if failure:
                self.counters.count("failures")
            reading = Reading(out, phash, failure)
        done = step.finish(context, reading, replicate=cell.replicate)
        if not self.want_samples:
            return done.record, None, None
        answer = self.key[cell.task.task_id]
        return (
            done.record,
            samplelog.entry(done.record, cell.task, answer, done.admission, reply, done.out),
            None,
        )

    async def agent_record(self, cell: Cell, mode: AgentMode) -> Made | None:
        """An agent record: the loop's steps, each asked of the cache, else the provider (one
        cache entry per step, keyed by the whole conversation so far)."""
        provider, name = self.config.record_model(cell.model)
        loop = AgentLoop(cell.task, self.prepared[cell.scenario], self.arms[cell.mode],
                         mode.protocol, mode.max_steps)  # fmt: skip
        local = self.routes[cell.model].name is not None
        native = mode.protocol == "native"
        pin: list[int] = []  # every step on the server of the record's first call
        while not loop.done:
            req = loop.request()
            phash = conversation_hash(req)
            extra = agent_request(req, self.config.response_format, local)
            reply, failure, cached = await self.ask(
                cell, req["messages"], phash, extra, native, pin
            )
            if reply is None and failure is None:
                return None
            if cached:
                self.counters.count("cache_hits")
            if failure:
                self.counters.count("failures")
            loop.advance(reply, failure)
        context = RecordContext(self.corpus, self.key, provider, name, self.run_id)
        done = loop.finish(context, cell.replicate)
        row = agent_row(done.record, loop)
        if not self.want_samples:
            return done.record, None, row
        entry = samplelog.entry(
            done.record, cell.task, self.key[cell.task.task_id], done.admission,
            loop.replies[-1] if loop.replies else None, done.out, row.get("invalid_calls"),
        )  # fmt: skip
        return done.record, samplelog.agent_entry(entry, row, transcript(loop)), row

    async def target_record(self, cell: Cell, runner: Runner) -> Made:
        """A target record: the user's system answers through the record's faulted tools, in
        its own thread (or task), up to ``--concurrency`` records in flight, each within the
        target's timeout (:class:`~layerlab.harness.targets.execute.Runner`)."""
        provider, name = split_model(cell.model)
        context = RecordContext(self.corpus, self.key, provider, name, self.run_id)
        prepared, target = self.prepared[cell.scenario], runner.target
        tools, request = start_record(target, cell.task, prepared, self.arms[cell.mode],
                                      runner.mcp)  # fmt: skip
        where = f"{cell.task.task_id}/{cell.scenario}/{cell.mode}" + (
            f"/{cell.replicate}" if cell.replicate else "")  # fmt: skip
        trace = None if self.spans is None else self.spans.begin(record_ident(
            self.run_id, provider, name, cell.scenario, cell.mode, cell.task.task_id,
            cell.replicate))  # fmt: skip
        try:
            raw, error = await runner.call(within(trace, lambda: target.answer(request)), where)
        except TargetExit as exc:
            raise LiveRunError(
                f"--target {target.spec.spec}: answer() {exc.how} on record {where} "
                "(a target returns or raises; it must not end the process): the run stopped"
            ) from None
        except RetrieverError as exc:  # the team's store stopped serving: the run stops
            raise LiveRunError(str(exc)) from None
        finally:
            end_record(request)
        kept = None if trace is None or self.spans is None else await self.spans.take(trace)
        td = score_record(target.spec, tools, prepared, context, raw, error, cell.replicate)
        if td.reply.failure:
            self.counters.count("failures")
        if error is not None and error.startswith("timeout:"):
            self.counters.timed_out += 1
        rec, row = td.done.record, target_row(td.done.record, td)
        if not self.want_samples:
            return rec, None, row
        entry = samplelog.entry(rec, cell.task, self.key[cell.task.task_id], td.done.admission,
                                td.raw, td.done.out, row.get("invalid_calls"))  # fmt: skip
        entry.update(reply_format=td.reply.format, tool_calls=call_rows(td.tools.calls))
        if td.error:
            entry["target_error"] = td.error
        if kept is not None and self.spans is not None:  # the team's spans (private)
            entry.update(kept, **({"spans_note": self.spans.note} if self.spans.note else {}))
        return rec, entry, row

    def close(self) -> None:
        """Close the target (its ``close()``, an HTTP target's tool server), if there is one."""
        if self.runner is not None:
            self.runner.close()
        if self.spans is not None:
            self.spans.close()

    async def drain(
        self,
        cells: Sequence[Cell],
        concurrency: int,
        emit: Callable[[Record, str, dict[str, Any] | None, dict[str, Any] | None], None],
    ) -> None:
        """Process ``cells`` with ``concurrency`` tasks, emitting each record as it is scored."""
        todo = iter(cells)

        async def worker() -> None:
            for cell in todo:  # a shared iterator: each cell is taken once
                done = await self.record(cell)
                if done is None:
                    continue
                rec, sample, row = done
                emit(rec, progress_line(rec), sample, row)

        await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))


def todo_cells(
    corpus: Corpus, config: LiveConfig, done: Mapping[tuple[Any, ...], Record], counters: Counters
) -> tuple[list[Cell], int]:
    """The cells still to compute and the matrix size; counts those done.

    Cells come in matrix order (model, scenario, task), but the arms and epochs of one
    task come in a seeded random order (:func:`arm_order`): a server that reuses the previous
    prompt's prefix evaluates a repeated prompt differently (llama.cpp re-reads only its last
    token), so a fixed order would give one arm that position every time and make the arms'
    draws not exchangeable."""
    wanted = None if config.task_ids is None else set(config.task_ids)
    tasks = [t for t in corpus.tasks if wanted is None or t.task_id in wanted]
    split = {m: config.record_model(m) for m in config.models}
    total = 0
    todo = []
    for m in config.models:
        provider, name = split[m]
        for s in config.scenarios:
            for t in tasks:
                for mode, r in arm_order(config, m, s, t.task_id):
                    total += 1
                    if (provider, name, s, mode, t.task_id, r) in done:
                        counters.skipped_done += 1
                    else:
                        todo.append(Cell(m, s, mode, t, r))
    counters.records = counters.skipped_done
    return todo, total


def arm_order(config: LiveConfig, model: str, scenario: str, task_id: str) -> list[tuple[str, int]]:
    """The (arm, epoch) pairs of one task in the order they are asked: a permutation seeded by
    (run seed, model, scenario, task), so each arm is as often first as second."""
    pairs = [(mode, r) for mode in config.mitigations for r in range(config.epochs_for(model))]
    if len(pairs) > 1:
        ident = canonical_json(["arm-order", config.seed or 0, model, scenario, task_id])
        random.Random(hashlib.sha256(ident.encode()).digest()).shuffle(pairs)
    return pairs


async def run_in_process(
    ctx: RunContext,
    cells: Sequence[Cell],
    writer: RecordWriter,
    budget: Budget,
    rng: random.Random,
    local: Mapping[str, Sequence[str]],
) -> bool:
    """The run in this process: one event loop, ``ctx.concurrency`` tasks; ``writer`` gets each
    record as it is scored (and is closed at the end). ``local`` maps a ``local/NAME`` model to
    its servers. Returns False when the budget stopped the run."""
    engine = Engine(
        ctx, budget, writer.counters, rng, routes_for(ctx.config, ctx.concurrency, local)
    )

    def emit(
        rec: Record, line: str, sample: dict[str, Any] | None, row: dict[str, Any] | None
    ) -> None:
        writer.add(rec, line, sample, row)
        writer.tick()

    try:
        await engine.drain(cells, ctx.concurrency, emit)
    finally:
        engine.close()
        ctx.cache.close()
        writer.log.close()
        writer.tick(final=True)
    return not engine.stopped
