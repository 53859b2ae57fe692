"""The live harness: the deterministic pipeline with a model (through litellm) as the reader.

Same tasks, scenarios, mitigation arms, retriever and scorer as :mod:`layerlab.harness`. What it
adds is what a provider run needs to be trustworthy:

* a hard **budget** on provider calls (retries included), checked before every attempt;
* a **response cache** keyed by model, request parameters and prompt hash, so a rerun or a
  rescoring makes no new calls (it holds model replies: keep it private, it is not an archive);
* **retries** of 429s, 5xx and timeouts with linear backoff, then a labelled failure record;
* an append-only progress log and **atomic** final writes, so a run killed at any moment
  (SIGKILL included) resumes with ``resume=True`` to exactly one record per cell and task;
* a **run manifest** whose ``run_id`` is a hash of everything that determines the records, so
  merged archives never count a run twice and a resume with different settings is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from layerlab import __version__, archive, harness, prompt, results, retrieval, samplelog
from layerlab import models as models_mod
from layerlab._io import atomic_write_text, canonical_json
from layerlab.archive import Record
from layerlab.corpus import AnswerKey, Corpus, Task
from layerlab.llm import ProviderSettings, import_litellm
from layerlab.scenario import Scenario

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
FATAL_STATUS = frozenset({401, 403, 404})


class LiveRunError(RuntimeError):
    """A run that cannot go on (bad settings, fatal provider error, resume mismatch)."""


@dataclass(frozen=True)
class LiveConfig:
    """Everything that determines a live run's records (budget and concurrency do not)."""

    models: tuple[str, ...]
    scenarios: tuple[str, ...]
    mitigations: tuple[str, ...] = harness.MODES
    task_ids: tuple[str, ...] | None = None
    settings: ProviderSettings = field(default_factory=ProviderSettings)
    retriever: str = retrieval.REPORTED.name
    # Each cell is an independent draw: one call per record, ``replicates`` records per cell.
    replicates: int = 1
    # Share one reply between records whose prompts are identical (the pre-v2 behaviour; it
    # forces every strict-vs-repair difference on an unchanged prompt to zero). Off by default.
    share_replies: bool = False
    # "json_schema": ask the server to constrain decoding to the reply contract (REPLY_SCHEMA).
    response_format: Literal["none", "json_schema"] = "none"
    # Base of the per-record seeds sent to servers that honour one (local models always get
    # one, base 0 unless given; other providers only when it is given).
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.replicates < 1:
            raise ValueError("replicates must be >= 1")
        if self.response_format not in ("none", "json_schema"):
            raise ValueError("response_format must be 'none' or 'json_schema'")


@dataclass
class Counters:
    records: int = 0
    calls: int = 0
    cache_hits: int = 0
    retries: int = 0
    failures: int = 0
    skipped_done: int = 0
    # successful calls of this invocation: seconds from request sent to reply (queue time not
    # included) and the token counts the server reported; summarised in the manifest only
    latencies: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def usage(self) -> dict[str, Any]:
        """Latency quantiles and token totals of this invocation's answered calls."""
        if not self.latencies:
            return {"answered_calls": 0}
        q = pd.Series(self.latencies).quantile([0.5, 0.9])
        n = len(self.latencies)
        return {
            "answered_calls": n,
            "latency_s_median": round(float(q[0.5]), 3),
            "latency_s_p90": round(float(q[0.9]), 3),
            "prompt_tokens_mean": round(self.prompt_tokens / n, 1),
            "completion_tokens_mean": round(self.completion_tokens / n, 1),
        }


@dataclass(frozen=True)
class LiveResult:
    out: Path
    manifest: dict[str, Any]
    counters: Counters
    complete: bool
    message: str


def split_model(model: str) -> tuple[str, str]:
    """(provider, model name) of a litellm model string like ``openai/gpt-4o-mini``."""
    if "/" in model:
        provider, name = model.split("/", 1)
        return provider, name
    return "unknown", model


class ResponseCache:
    """One JSON file per (model, params, prompt hash); written atomically."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    @staticmethod
    def key(
        model: str, params: Mapping[str, Any], phash: str, record: Sequence[Any] = ()
    ) -> str:
        """Key of one reply: model, request parameters, prompt hash and the record's identity
        (scenario, mode, task, replicate), so that each record is its own draw; ``record=()``
        shares one reply between identical prompts (``share_replies``)."""
        ident: dict[str, Any] = {"m": model, "p": dict(params), "h": phash}
        if record:
            ident["r"] = list(record)
        return hashlib.sha256(canonical_json(ident).encode()).hexdigest()

    def get(self, key: str) -> str | None:
        p = self.folder / key[:2] / f"{key}.json"
        try:
            return str(json.loads(p.read_text(encoding="utf-8"))["reply"])
        except (OSError, ValueError, KeyError):
            return None

    def put(self, key: str, reply: str) -> None:
        # a lost cache entry only costs a repeated call, so no fsync on the hot path
        atomic_write_text(
            self.folder / key[:2] / f"{key}.json", json.dumps({"reply": reply}), durable=False
        )


class Budget:
    """Hard cap on provider calls; ``None`` means unlimited."""

    def __init__(self, limit: int | None):
        self.limit = limit
        self.used = 0

    def take(self) -> bool:
        if self.limit is not None and self.used >= self.limit:
            return False
        self.used += 1
        return True

    @property
    def spent(self) -> bool:
        return self.limit is not None and self.used >= self.limit


@dataclass
class _Endpoint:
    """One server of a model; ``slots`` bounds the requests it is sent at once."""

    api_base: str | None
    slots: asyncio.Semaphore
    busy: int = 0


@dataclass
class Route:
    """How the calls of one ``-m`` model are made: litellm model, endpoints, request shape."""

    model: str  # litellm model string
    endpoints: list[_Endpoint]
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. a local server's placeholder key
    merge_system: bool = False
    response_format: dict[str, Any] | None = None
    seed_base: int | None = None

    def request(self, msgs: list[dict[str, str]], seed: int | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = dict(self.extra)
        kwargs["messages"] = prompt.merge_system(msgs) if self.merge_system else msgs
        if self.response_format is not None:
            kwargs["response_format"] = self.response_format
        if seed is not None:
            kwargs["seed"] = seed
        return kwargs

    @contextlib.asynccontextmanager
    async def endpoint(self, affinity: str | None = None) -> AsyncIterator[_Endpoint]:
        """An endpoint, once it has a free slot (time queued there is not request time).

        With an ``affinity`` key (the prompt hash), the same prompt always goes to the same
        server, so a server that caches the previous prompt's prefix (llama.cpp, vLLM) reads
        the repeated prompt of a record's strict and repair arms once; otherwise the least busy.
        """
        if affinity is not None and len(self.endpoints) > 1:
            ep = self.endpoints[int(affinity[:8], 16) % len(self.endpoints)]
        else:
            ep = min(self.endpoints, key=lambda e: e.busy)
        ep.busy += 1
        try:
            async with ep.slots:
                yield ep
        finally:
            ep.busy -= 1


def response_format_for(kind: str, local: bool) -> dict[str, Any] | None:
    """The ``response_format`` that asks a server to follow the reply contract.

    llama-cpp-python's server takes ``{"type": "json_object", "schema": ...}`` (a grammar);
    OpenAI-style structured outputs, vLLM and litellm's Ollama/Gemini mappings take
    ``{"type": "json_schema", ...}``.
    """
    if kind == "none":
        return None
    if local:
        return {"type": "json_object", "schema": prompt.REPLY_SCHEMA}
    return {
        "type": "json_schema",
        "json_schema": {"name": "layerlab_reply", "schema": prompt.REPLY_SCHEMA, "strict": True},
    }


def record_seed(base: int, model: str, scenario: str, mode: str, task_id: str, rep: int) -> int:
    """A per-record seed (stable across runs), so a rerun without the cache can reproduce replies."""
    ident = canonical_json([base, model, scenario, mode, task_id, rep])
    return int(hashlib.sha256(ident.encode()).hexdigest()[:8], 16) & 0x7FFFFFFF


def routes_for(
    config: LiveConfig, concurrency: int, local: Mapping[str, Sequence[str]] | None = None
) -> dict[str, Route]:
    """A :class:`Route` per model. ``local`` maps a ``local/NAME`` model to its servers' URLs."""
    from layerlab import models as models_mod

    local = local or {}
    routes: dict[str, Route] = {}
    for m in config.models:
        if m in local:
            spec = models_mod.lookup(m)
            routes[m] = Route(
                model=f"openai/{spec.name}",
                endpoints=[_Endpoint(b, asyncio.Semaphore(1)) for b in local[m]],
                extra={"api_key": models_mod.PLACEHOLDER_KEY},
                merge_system=spec.system_prompt == "merge",
                response_format=response_format_for(config.response_format, local=True),
                seed_base=config.seed if config.seed is not None else 0,
            )
        else:
            bases: Sequence[str | None] = config.settings.api_bases or (None,)
            routes[m] = Route(
                model=m,
                endpoints=[_Endpoint(b, asyncio.Semaphore(concurrency)) for b in bases],
                response_format=response_format_for(config.response_format, local=False),
                seed_base=config.seed,
            )
    return routes


def _status_of(exc: BaseException) -> int | None:
    code = getattr(exc, "status_code", None)
    return int(code) if isinstance(code, int) else None


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return True
    name = type(exc).__name__
    if name in {
        "Timeout",
        "APIConnectionError",
        "RateLimitError",
        "InternalServerError",
        "ServiceUnavailableError",
        "BadGatewayError",
    }:
        return True
    code = _status_of(exc)
    return code in RETRYABLE_STATUS if code is not None else False


def run_id_for(config: LiveConfig, corpus: Corpus, scenario_hash: str) -> str:
    ident = {
        "v": __version__,
        "corpus": corpus.spec_hash,
        "scenarios_spec": scenario_hash,
        "config": {**asdict(config), "settings": config.settings.as_dict()},
        "prompt": prompt.PROMPT_VERSION,
    }
    return "live-" + hashlib.sha256(canonical_json(ident).encode()).hexdigest()[:16]


def _manifest(
    config: LiveConfig, corpus: Corpus, scenario_hash: str, n_tasks: int
) -> dict[str, Any]:
    settings = config.settings.as_dict()
    return {
        "run_id": run_id_for(config, corpus, scenario_hash),
        "kind": "live",
        "layerlab_version": __version__,
        "corpus": corpus.name,
        "spec_hashes": {"corpus": corpus.spec_hash, "scenarios": scenario_hash},
        "models": list(config.models),
        "scenarios": list(config.scenarios),
        "mitigations": list(config.mitigations),
        "n_tasks": n_tasks,
        "retriever": config.retriever,
        "settings": settings,
        "prompt_version": prompt.PROMPT_VERSION,
        "replicates": config.replicates,
        "share_replies": config.share_replies,
        "response_format": config.response_format,
        "seed": config.seed,
        "seeds": "per record, derived from (seed, model, scenario, mode, task, replicate); "
        "sent to local models always (seed 0 unless given), to other providers only when given",
        "expected_records": len(config.models)
        * len(config.scenarios)
        * len(config.mitigations)
        * n_tasks
        * config.replicates,
    }


def _read_progress(path: Path) -> dict[tuple[str | int, ...], Record]:
    """Records already written; a torn last line (killed mid-write) is ignored."""
    done: dict[tuple[str | int, ...], Record] = {}
    if not path.exists():
        return done
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break
            try:
                rec = Record(**json.loads(line))
            except (ValueError, TypeError):
                continue
            done.setdefault(archive.sort_key(rec), rec)
    return done


def _trim_torn_tail(path: Path) -> None:
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with open(path, "r+b") as fh:
            fh.truncate(cut)


@dataclass(frozen=True)
class _Cell:
    model: str
    scenario: str
    mode: str
    task: Task
    replicate: int = 0


def ident_of(cell: _Cell) -> tuple[str, str, str, str, int]:
    return (cell.model, cell.scenario, cell.mode, cell.task.task_id, cell.replicate)


ProgressHook = Callable[[Counters, int], None]
SampleHook = Callable[[dict[str, Any]], None]  # receives samplelog.entry(...) per record


async def _call(
    litellm: Any,
    route: Route,
    msgs: list[dict[str, str]],
    seed: int | None,
    settings: ProviderSettings,
    budget: Budget,
    counters: Counters,
) -> tuple[str | None, str | None]:
    """(reply text, None) or (None, failure label) or (None, None) when the budget ran out."""
    request = route.request(msgs, seed)
    affinity = prompt.prompt_hash(msgs)
    for attempt in range(1, settings.attempts + 1):
        if not budget.take():
            return None, None
        counters.calls += 1
        try:
            async with route.endpoint(affinity if attempt == 1 else None) as ep:
                kwargs: dict[str, Any] = dict(
                    model=route.model,
                    timeout=settings.timeout_s,
                    num_retries=0,
                    max_retries=0,
                    **settings.request_params(),
                    **request,
                )
                if ep.api_base:
                    kwargs["api_base"] = ep.api_base
                t0 = time.perf_counter()
                resp = await asyncio.wait_for(
                    litellm.acompletion(**kwargs), timeout=settings.timeout_s + 5
                )
                counters.latencies.append(time.perf_counter() - t0)
            usage = getattr(resp, "usage", None)
            counters.prompt_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
            counters.completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)
            return str(resp.choices[0].message.content or ""), None
        except Exception as exc:  # provider errors are data here, not crashes
            code = _status_of(exc)
            if code in FATAL_STATUS or type(exc).__name__ in {
                "AuthenticationError",
                "NotFoundError",
                "PermissionDeniedError",
            }:
                raise LiveRunError(
                    f"{route.model}: provider refused the request ({type(exc).__name__}, "
                    f"status {code}); check the model name and that its API key is set in the "
                    "environment"
                ) from None
            if not _retryable(exc) or attempt == settings.attempts:
                break
            counters.retries += 1
            await asyncio.sleep(settings.delay(attempt))
    return None, "provider_error"


async def _run(
    corpus: Corpus,
    key: AnswerKey,
    scenarios: Mapping[str, Scenario],
    config: LiveConfig,
    out: Path,
    cache: ResponseCache,
    budget: Budget,
    concurrency: int,
    run_id: str,
    done: dict[tuple[str | int, ...], Record],
    progress: ProgressHook | None,
    counters: Counters,
    local: Mapping[str, Sequence[str]],
    samples: SampleHook | None = None,
) -> bool:
    litellm = import_litellm()
    from layerlab import agents

    routes = routes_for(config, concurrency, local)

    agents.register()
    wanted = None if config.task_ids is None else set(config.task_ids)
    tasks = [t for t in corpus.tasks if wanted is None or t.task_id in wanted]
    prepared = {
        n: harness.prepare(corpus, scenarios[n], config.retriever) for n in config.scenarios
    }
    cells = [
        _Cell(m, s, mode, t, r)
        for m in config.models
        for s in config.scenarios
        for t in tasks
        for mode in config.mitigations
        for r in range(config.replicates)
    ]
    total = len(cells)
    todo = []
    for c in cells:
        provider, name = split_model(c.model)
        if (provider, name, c.scenario, c.mode, c.task.task_id, c.replicate) in done:
            counters.skipped_done += 1
        else:
            todo.append(c)
    counters.records = counters.skipped_done
    stopped = False
    queue: asyncio.Queue[_Cell] = asyncio.Queue()
    for c in todo:
        queue.put_nowait(c)
    params = {
        **config.settings.request_params(),
        "response_format": config.response_format,
        "seed": config.seed,
    }
    inflight: dict[str, asyncio.Future[tuple[str | None, str | None]]] = {}
    log = open(out / archive.PROGRESS, "a", encoding="utf-8")

    def emit(rec: Record) -> None:
        log.write(json.dumps(asdict(rec), sort_keys=True) + "\n")
        log.flush()
        counters.records += 1
        if progress:
            progress(counters, total)

    async def ask(cell: _Cell, msgs: list[dict[str, str]], phash: str) -> tuple[str | None, str | None, bool]:
        """(reply, failure, from_cache); (None, None, _) when the budget stopped the run."""
        nonlocal stopped
        route = routes[cell.model]
        ident = (cell.scenario, cell.mode, cell.task.task_id, cell.replicate)
        ckey = ResponseCache.key(cell.model, params, phash, () if config.share_replies else ident)
        reply = cache.get(ckey)
        if reply is not None:
            return reply, None, True
        if ckey in inflight:  # only with share_replies: the same prompt is being asked
            reply, failure = await inflight[ckey]
            return reply, failure, False
        if stopped:
            return None, None, False
        fut: asyncio.Future[tuple[str | None, str | None]] = (
            asyncio.get_running_loop().create_future()
        )
        inflight[ckey] = fut
        reply, failure = None, None
        try:
            seed = None if route.seed_base is None else record_seed(route.seed_base, *ident_of(cell))
            reply, failure = await _call(
                litellm, route, msgs, seed, config.settings, budget, counters
            )
            if reply is not None:
                cache.put(ckey, reply)
        finally:
            fut.set_result((reply, failure)) if not fut.done() else None
            del inflight[ckey]
        if reply is None and failure is None:
            stopped = True  # budget spent: leave this cell for --resume
        return reply, failure, False

    async def worker() -> None:
        while True:
            try:
                cell = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            provider, name = split_model(cell.model)
            prep = prepared[cell.scenario]
            g = harness.gate(cell.task, prep, cell.mode)
            common = dict(provider=provider, model=name, run_id=run_id, replicate=cell.replicate)
            if g.inp is None:
                rec, _ = harness.evaluate(
                    cell.task, key, corpus, prep, cell.mode, g, None, prompt_hash="", **common
                )
                if samples:  # the private per-sample log (opt-in, never in the run folder)
                    samples(samplelog.entry(rec, cell.task, key[cell.task.task_id], g, None, None))
                emit(rec)
                continue
            msgs = prompt.messages(g.inp)
            phash = prompt.prompt_hash(msgs)
            reply, failure, cached = await ask(cell, msgs, phash)
            if reply is None and failure is None:
                continue
            if cached:
                counters.cache_hits += 1
            out_ = None
            if reply is not None:
                try:
                    out_ = prompt.parse_reply(reply)
                except prompt.MalformedReply:
                    failure = "malformed_reply"
            if out_ is not None:
                g, out_ = harness.after_reader(cell.task, prep, cell.mode, g, out_)
            if failure:
                counters.failures += 1
            rec, _ = harness.evaluate(
                cell.task,
                key,
                corpus,
                prep,
                cell.mode,
                g,
                out_,
                prompt_hash=phash,
                failure=failure,
                **common,
            )
            if samples:
                samples(samplelog.entry(rec, cell.task, key[cell.task.task_id], g, reply, out_))
            emit(rec)

    try:
        await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
    finally:
        log.flush()
        os.fsync(log.fileno())
        log.close()
    return not stopped


def _run_coroutine(coro: Any) -> Any:
    """``asyncio.run`` that also works where a loop is already running (Jupyter, papermill)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


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
    cache_dir: Path | None = None,
    progress: ProgressHook | None = None,
    local_servers: int = 1,
    say: Callable[[str], None] = lambda _m: None,
    samples: SampleHook | None = None,
) -> LiveResult:
    """Run (or resume) a live matrix into ``out``; see the module docstring.

    ``local/NAME`` models are fetched if needed and served by ``local_servers`` llama.cpp
    servers each for the duration of the run.
    """
    out = Path(out)
    unknown = [s for s in config.scenarios if s not in scenarios]
    if unknown:
        raise LiveRunError(f"unknown scenario(s) {unknown}; known: {sorted(scenarios)}")
    if config.task_ids is not None:
        known = {t.task_id for t in corpus.tasks}
        bad = [t for t in config.task_ids if t not in known]
        if bad:
            raise LiveRunError(f"unknown task id(s) {bad[:5]}")
    n_tasks = len(config.task_ids) if config.task_ids is not None else len(corpus.tasks)
    manifest = _manifest(config, corpus, scenario_hash, n_tasks)
    mpath = out / archive.MANIFEST
    if mpath.exists() or (out / archive.PROGRESS).exists():
        if not resume:
            raise LiveRunError(
                f"{out} already holds a run; pass --resume to continue it or choose another --out"
            )
        old = archive.read_manifest(out) if mpath.exists() else None
        if old is not None and old["run_id"] != manifest["run_id"]:
            raise LiveRunError(
                f"{out} holds run {old['run_id']} with other settings than this command "
                f"(would be {manifest['run_id']}); resume with the original models, filters and settings"
            )
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(
        mpath,
        json.dumps({**manifest, "complete": False, "records": 0}, indent=2, sort_keys=True) + "\n",
    )
    _trim_torn_tail(out / archive.PROGRESS)
    done = _read_progress(out / archive.PROGRESS)
    counters = Counters()
    b = Budget(budget)
    cache = ResponseCache(cache_dir or out / ".cache")
    with _local_servers(config, local_servers, say) as local:
        coro = _run(
            corpus,
            key,
            scenarios,
            config,
            out,
            cache,
            b,
            concurrency,
            manifest["run_id"],
            done,
            progress,
            counters,
            {m: [s.api_base for s in servers] for m, servers in local.items()},
            samples,
        )
        finished = _run_coroutine(coro)
        local_prov = {
            m: models_mod.provenance(models_mod.lookup(m), servers) for m, servers in local.items()
        }
    if local_prov:
        manifest["local_models"] = local_prov
    records = list(_read_progress(out / archive.PROGRESS).values())
    complete = finished and len(records) == manifest["expected_records"]
    calls = {
        "made": counters.calls,
        "cache_hits": counters.cache_hits,
        "retries": counters.retries,
        "failures": counters.failures,
        "this_invocation": counters.usage(),
    }
    final = archive.write_run(out, records, {**manifest, "complete": complete, "calls": calls})
    if records:
        results.write_results(out)  # per-model rates with intervals, next to the archive
    if complete:
        msg = f"complete: {len(records)} records, {counters.calls} provider calls, {counters.cache_hits} cache hits"
    else:
        msg = (
            f"budget spent after {counters.calls} calls: {len(records)} of {manifest['expected_records']} "
            f"records written (a valid partial archive). Continue with the same command plus --resume "
            f"and a new --budget."
        )
    return LiveResult(out, final, counters, complete, msg)


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

    from layerlab import corpus as corpus_mod
    from layerlab import paths
    from layerlab.scenario import load_scenarios
    from layerlab.spec import spec_hash

    c, key = corpus_mod.load(), corpus_mod.load_answer_key()
    scen = load_scenarios()
    if out is None:
        _TMP.append(tempfile.TemporaryDirectory(prefix="layerlab-live-"))
        out = Path(_TMP[-1].name) / "run"
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
    )


_TMP: list[Any] = []


def run_overview(result: LiveResult) -> pd.DataFrame:
    """Success by model × scenario × mitigation arm of a finished run (what a notebook shows)."""
    df = pd.DataFrame([r.__dict__ for r in archive.read_records(result.out / archive.ARCHIVE)])
    g = df.groupby(["provider", "model", "scenario", "mitigation"], sort=False)["success"].mean()
    wide = g.unstack("mitigation").reset_index()
    arms = [m for m in config_arms(df) if m in wide]
    return wide[["provider", "model", "scenario", *arms]]


def config_arms(df: pd.DataFrame) -> list[str]:
    """The arms of a records frame, in the order they first appear."""
    return list(dict.fromkeys(df["mitigation"]))


def same_records(a: Path | str, b: Path | str) -> bool:
    """Whether two run folders (or archives) hold the same records, label for label.

    Run ids are ignored: they name the run, not its content.
    """

    def load(p: Path | str) -> list[tuple[Any, ...]]:
        p = Path(p)
        recs = archive.read_records(p / archive.ARCHIVE if p.is_dir() else p)
        return sorted(tuple(v for k, v in r.__dict__.items() if k != "run_id") for r in recs)

    return load(a) == load(b)
