"""A live run's identity and record of itself: the run id (a hash of everything that determines
the records) and the manifest, assembled in one place (:func:`manifest`), with what goes into
it as the run goes (call and usage counts, the invocation file, the errors per model).

The manifest carries the provenance hashes, the sampling settings and, once the run has
stopped, whether it is complete, the cumulative call counts and the errors per model; it names
an endpoint only as local or remote (never credentials or a host name).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from layerlab import __version__, archive
from layerlab._io import canonical_json
from layerlab.archive import Record
from layerlab.corpus.build import Corpus
from layerlab.harness.live import shards
from layerlab.harness.live.budget import Counters, Journal, replay
from layerlab.harness.live.settings import (
    LiveConfig,
    LiveRunError,
    epochs_entry,
    max_epochs,
    sampling,
)
from layerlab.harness.targets.spec import TargetSpec
from layerlab.mitigations import book, load_run_mitigations
from layerlab.models.routing import endpoint_label, split_model
from layerlab.system import prompt


@dataclass(frozen=True)
class Outcome:
    """What the manifest says about how far a run got. ``records`` only before the archive is
    written (:func:`layerlab.archive.write_run` counts the records it writes)."""

    complete: bool = False
    records: int | None = None
    calls: Mapping[str, Any] | None = None
    errors: Mapping[str, Mapping[str, int]] | None = None
    local_models: Mapping[str, Any] = field(default_factory=dict)


def agent_versions() -> dict[str, str]:
    """The versions an agent run's records depend on: the tools and the agent prompt."""
    from layerlab.harness.tools import TOOLS_VERSION
    from layerlab.system.agentprompt import AGENT_PROMPT_VERSION

    return {"tools": TOOLS_VERSION, "agent_prompt": AGENT_PROMPT_VERSION}


def target_of(config: LiveConfig) -> TargetSpec:
    assert isinstance(config.target, TargetSpec)
    return config.target


def run_id_for(config: LiveConfig, corpus: Corpus, scenario_hash: str) -> str:
    """``live-`` and a hash of everything that determines the records: merged archives never
    count a run twice, and a resume with other settings is refused."""
    ident = {
        "v": __version__,
        "corpus": corpus.spec_hash,
        "scenarios_spec": scenario_hash,
        "config": {**asdict(config), "settings": config.settings.as_dict()},
    }
    if config.agent is None:  # single-call runs keep the ids they had before agent mode
        del ident["config"]["agent"]
    else:
        ident["agent"] = agent_versions()
    cfg: dict[str, Any] = ident["config"]  # type: ignore[assignment]
    _epochs_ident(config, cfg)
    del cfg["shard"]  # a shard is a slice of the run: its records are the run's (shards.py)
    if config.until_decided is None:  # runs of a fixed size keep the ids they had
        del cfg["until_decided"]
    else:  # the plan, not the look: every look of an until-decided run is the same run
        cfg["until_decided"] = config.until_decided.identity()
    if not config.retriever_code:  # runs of a registered retriever keep the ids they had
        del cfg["retriever_code"]
    if config.target is None:  # model runs keep the ids they had before targets
        del cfg["target"]
    else:  # the target's identity: its settings only as their hash, its code's fingerprint
        cfg["target"] = target_of(config).run_identity()
        ident["tools"] = agent_versions()["tools"]
    later = load_run_mitigations().later_specs(config.mitigations)
    if later:  # an arm of mitigations_transport.yaml: its spec, so an edited arm is another run
        ident["mitigation_specs"] = later
    ident = {
        **ident,
        "prompt": prompt.PROMPT_VERSION,
    }
    if config.response_format != "none":
        ident["reply_schema"] = prompt.REPLY_SCHEMA_VERSION
    return "live-" + hashlib.sha256(canonical_json(ident).encode()).hexdigest()[:16]


def _epochs_ident(config: LiveConfig, cfg: dict[str, Any]) -> None:
    """The epochs in the run id under their earlier name, ``replicates`` (ids stay as they
    were): the epochs run, so a greedy model asked for 3 is the run of 1 it makes; where the
    models run different numbers (a reference agent beside a sampled model), each one's."""
    del cfg["epochs"]
    run = {m: config.epochs_for(m) for m in config.models}
    cfg["replicates"] = max_epochs(config)
    if len(set(run.values())) > 1:
        cfg["epochs_run"] = run


def expected_records(config: LiveConfig, n_tasks: int) -> dict[str, int]:
    """Records a complete run holds, per ``-m`` model (each asked :meth:`LiveConfig.epochs_for`
    epochs of every scenario, arm and task)."""
    cells = len(config.scenarios) * len(config.mitigations) * n_tasks
    return {m: cells * config.epochs_for(m) for m in config.models}


def manifest(
    config: LiveConfig,
    corpus: Corpus,
    scenario_hash: str,
    n_tasks: int,
    outcome: Outcome | None = None,
) -> archive.Manifest:
    """The run's manifest: what determines it (``outcome=None``: the plan a resume is checked
    against), and with an ``outcome`` how far it got."""
    settings = {
        **config.settings.as_dict(),
        # where the model was served, only as local or remote: never a host, user or key
        "endpoints": [endpoint_label(b) for b in config.settings.api_bases],
    }
    task_ids = config.task_ids if config.task_ids is not None else [t.task_id for t in corpus.tasks]
    if isinstance(config.shard, tuple):  # the shard's own records; the run's provenance
        n_tasks = len(config.this_shard(corpus).task_ids or ())
    if config.until_decided is not None:  # the look's tasks: what the archive holds
        task_ids = config.this_shard(corpus).task_ids or ()
        n_tasks = len(task_ids)
    plan = archive.Manifest(
        run_id=run_id_for(config, corpus, scenario_hash),
        kind="live",
        layerlab_version=__version__,
        corpus=corpus.name,
        provenance={**archive.provenance_for(corpus, scenario_hash, task_ids),
                    **later_provenance(config)},  # fmt: skip
        models=list(config.models),
        scenarios=list(config.scenarios),
        mitigations=list(config.mitigations),
        mitigation_arms=book.manifest_entry(load_run_mitigations(), config.mitigations),
        n_tasks=n_tasks,
        retriever=config.retriever,
        retriever_code=dict(config.retriever_code) if config.retriever_code else archive.UNSET,
        settings=settings,
        prompt_version=prompt.PROMPT_VERSION,
        replicates=max_epochs(config),
        epochs=epochs_entry(config) if config.epochs > 1 else archive.UNSET,
        share_replies=config.share_replies,
        sampling=sampling(config),
        response_format=config.response_format,
        reply_schema=(
            prompt.REPLY_SCHEMA_VERSION if config.response_format != "none" else archive.UNSET
        ),
        seed=config.seed,
        seeds="per record, derived from (seed, model, scenario, mode, task, replicate); "
        "sent to local models always (seed 0 unless given), to other providers only when given",
        agent=(
            archive.UNSET if config.agent is None else {**asdict(config.agent), **agent_versions()}
        ),
        target=(
            archive.UNSET
            if config.target is None
            else {**target_of(config).manifest(), "tools": agent_versions()["tools"]}
        ),
        shard=shards.label(config.shard) if isinstance(config.shard, tuple) else archive.UNSET,
        until_decided=archive.UNSET if config.until_decided is None else until_decided(config),
        expected_records=sum(expected_records(config, n_tasks).values()),
    )
    if outcome is None:
        return plan
    done: dict[str, Any] = {"complete": outcome.complete}
    for name in ("records", "calls", "errors"):
        if getattr(outcome, name) is not None:
            done[name] = getattr(outcome, name)
    if outcome.local_models:
        done["local_models"] = dict(outcome.local_models)
    return replace(plan, **done)


def recorded_runtime(entry: Mapping[str, Any]) -> str | None:
    """The local runtime a manifest's ``local_models`` entry says served the model
    (``llama-cpp-python`` or ``llama-server``: its ``server.runtime``, else the name of its
    ``runtime``); None when it does not say."""
    from layerlab.models import llamaserver

    server = entry.get("server")
    if isinstance(server, Mapping) and isinstance(server.get("runtime"), str):
        return str(server["runtime"])
    name = str(entry.get("runtime") or "")
    return next((r for r in sorted(llamaserver.RUNTIMES, key=len, reverse=True)
                 if name.startswith(r)), None)  # fmt: skip


def runtime_refusal(
    out: Path, old: Mapping[str, Any] | None, models: Sequence[str], selected: str
) -> str | None:
    """Why a resume of ``out`` (its manifest ``old``) must not go on under the local runtime
    ``selected`` (``$LAYERLAB_LOCAL_RUNTIME``): one line naming the model and both runtimes, or
    None. Its records' replies came from the runtime the manifest records: another would mix two
    runtimes' replies in one archive (and the manifest would name only the last)."""
    from layerlab.models import llamaserver

    served = (old or {}).get("local_models") or {}
    for m in models:
        entry = served.get(m) if isinstance(served, Mapping) else None
        was = recorded_runtime(entry) if isinstance(entry, Mapping) else None
        if was is not None and was != selected:
            return (
                f"{out} holds replies of {m} served by {was}; this invocation would serve it "
                f"with {selected} ({llamaserver.ENV}): one archive would mix two runtimes' "
                f"replies. Resume with {llamaserver.ENV}={was}, or choose another --out"
            )
    return None


def check_runtime(out: Path, old: Mapping[str, Any] | None, local: Sequence[str]) -> None:
    """Refuse (:class:`LiveRunError`, one line: :func:`runtime_refusal`) a resume of a run whose
    ``local`` models were served by another runtime than ``$LAYERLAB_LOCAL_RUNTIME`` says."""
    from layerlab.models import llamaserver

    if old is None or not local:
        return
    try:
        which = llamaserver.selected()
    except llamaserver.ServerRuntimeError as exc:
        raise LiveRunError(str(exc)) from None
    refusal = runtime_refusal(out, old, local, which)
    if refusal is not None:
        raise LiveRunError(refusal)


def later_provenance(config: LiveConfig) -> dict[str, str]:
    """``mitigations:<file>``: the hash of each further spec an arm of the run came from (the
    transport arms'; the committed spec's hash is ``mitigations``), as the mitigation matrix's
    archive names it."""
    from layerlab.corpus.spec import spec_hash

    book = load_run_mitigations()
    files = dict.fromkeys(book.later[n] for n in config.mitigations if n in book.later)
    return {f"mitigations:{Path(f).name}": spec_hash(Path(f)) for f in files}


def until_decided(config: LiveConfig) -> dict[str, Any]:
    """The manifest's ``until_decided`` block: the plan (sizes, each look's level), the order
    the looks take the tasks in, the look the folder holds and every look judged so far."""
    from layerlab.analysis.sequential import Plan

    u = config.until_decided
    assert u is not None
    plan = Plan(u.max_tasks, u.batch, u.alpha, u.delta)
    return {
        **plan.as_dict(), "specific": list(u.specific), "no_over_broad": u.no_over_broad,
        "limit_seed": u.limit_seed, "order": list(config.task_ids or ()), "tasks": u.tasks,
        "looks": [dict(lk) for lk in u.looks],
    }  # fmt: skip


def calls_summary(
    counters: Counters,
    before: Mapping[str, Any] | None,
    server_cpu_s: Mapping[str, float | None] | None = None,
) -> dict[str, Any]:
    """Provider calls over every invocation of the run (``before``: the previous manifest's
    counts), this invocation's latencies and tokens, and per model the usage summed over every
    invocation (:func:`accumulate_usage`): a resume that asks nothing keeps the earlier totals."""
    made = (before or {}).get("calls") or {}
    return {
        "made": counters.calls + int(made.get("made", 0)),
        "cache_hits": counters.cache_hits + int(made.get("cache_hits", 0)),
        # replies the cache did not hold (a cache that stopped working shows as misses)
        "cache_misses": counters.cache_misses + int(made.get("cache_misses", 0)),
        "retries": counters.retries + int(made.get("retries", 0)),
        "failures": counters.failures + int(made.get("failures", 0)),
        "this_invocation": counters.usage(),
        **accumulate_usage(counters, made, server_cpu_s),
    }


def accumulate_usage(
    counters: Counters,
    made: Mapping[str, Any],
    server_cpu_s: Mapping[str, float | None] | None = None,
) -> dict[str, Any]:
    """``usage`` (per model: answered calls, summed call latency, tokens, cost in US dollars by
    litellm's price table or null where no price is known, and for a local model the CPU-seconds
    of its server processes or null where unmeasurable) over every invocation, and
    ``invocations`` (each invocation that asked or reused anything: its calls, latency quantiles
    and token means). ``made`` is the previous manifest's ``calls`` block."""
    usage: dict[str, dict[str, Any]] = {
        m: dict(u) for m, u in (made.get("usage") or {}).items() if isinstance(u, Mapping)
    }
    models = set(counters.by_model) | set(server_cpu_s or {})
    for m in sorted(models):
        now = counters.by_model.get(m, {})
        u = usage.setdefault(m, {})
        for k in ("calls", "prompt_tokens", "completion_tokens", "priced_calls"):
            u[k] = int(u.get(k) or 0) + int(now.get(k, 0))
        u["latency_s"] = round(float(u.get("latency_s") or 0.0) + float(now.get("latency_s", 0)), 3)
        cost = [
            c
            for c in (u.get("cost_usd"), now.get("cost_usd") if now.get("priced_calls") else None)
            if c is not None
        ]
        u["cost_usd"] = round(sum(cost), 6) if cost else None
        if server_cpu_s and m in server_cpu_s:
            cpu = [c for c in (u.get("server_cpu_s"), server_cpu_s[m]) if c is not None]
            u["server_cpu_s"] = round(sum(cpu), 2) if cpu else None
    history = list(made.get("invocations") or [])
    if counters.calls or counters.cache_hits:
        history.append(
            {
                **counters.usage(),
                "calls": counters.calls,
                "cache_hits": counters.cache_hits,
                "cache_misses": counters.cache_misses,
            }
        )
    return {"usage": usage, "invocations": history}


INVOCATION = ".invocation.jsonl"
"""This invocation's calls as they happen: a first line naming the manifest it extends and the
calls block of the earlier invocations, then one line per counted event (:class:`Journal`,
appended when a call is sent, answered, retried, or a reply comes from the cache): a killed
invocation never writes its manifest, so the next one folds this in (:func:`before_resume`)."""


def _base(old: Mapping[str, Any] | None) -> str:
    return canonical_json((old or {}).get("calls"))


def open_invocation(
    out: Path,
    counters: Counters,
    before: Mapping[str, Any] | None,
    stands: Mapping[str, Any] | None,
) -> Journal:
    """Start :data:`INVOCATION` (replacing a killed invocation's, which ``before`` folds in, as
    :func:`before_resume` gave it) and journal ``counters`` into it from now on, what they
    counted so far first; ``stands`` is the manifest on disk, which the file extends (the next
    invocation checks it is still so). Once started (a resume's, before its preflight call) it
    is kept: the same journal goes on."""
    from layerlab._io import atomic_write_text

    if counters.journal is not None:
        return counters.journal
    head = {"base": _base(stands), "calls": (before or {}).get("calls")}
    atomic_write_text(out / INVOCATION, canonical_json(head) + "\n", durable=False)
    journal = Journal(out / INVOCATION)
    counters.start_journal(journal)
    return journal


def before_resume(out: Path, old: dict[str, Any] | None) -> dict[str, Any] | None:
    """The manifest a resumed invocation counts on from: ``old``, with the calls of a killed
    invocation since (its :data:`INVOCATION` file, when it started from this same manifest)
    folded in and that invocation's history entry marked ``killed``."""
    import json

    try:
        first, *lines = (out / INVOCATION).read_text(encoding="utf-8").splitlines()
        head = json.loads(first)
    except (OSError, ValueError):
        return old  # none (the last invocation ended normally), or unreadable: nothing to add
    if not isinstance(head, dict) or head.get("base") != _base(old):
        return old  # written before the manifest that now stands: already counted there
    calls = calls_summary(replay(lines), {"calls": head.get("calls")})
    history = list(calls.get("invocations") or [])
    if len(history) > len(((old or {}).get("calls") or {}).get("invocations") or []):
        history[-1] = {**history[-1], "killed": True}
    return {**(old or {}), "calls": {**calls, "invocations": history}}


def error_summary(
    records: Sequence[Record], models: Sequence[str], config: LiveConfig | None = None
) -> dict[str, dict[str, int]]:
    """Per model: records that asked it (``called``), and how many ended in ``provider_error``
    or ``malformed_reply``. A target is asked on every record, a refused one included (a
    refusal ends the record before a model's reader, never before the target)."""
    out: dict[str, dict[str, int]] = {}
    every = config is not None and config.target is not None
    for m in models:
        provider, name = config.record_model(m) if config is not None else split_model(m)
        mine = [r for r in records if (r.provider, r.model) == (provider, name)
                and (every or r.prompt_hash)]  # fmt: skip
        out[m] = {
            "called": len(mine),
            "provider_error": sum(r.diagnostic == "provider_error" for r in mine),
            "malformed_reply": sum(r.diagnostic == "malformed_reply" for r in mine),
        }
    return out


def resumed(out: Path, plan: Mapping[str, Any], resume: bool) -> dict[str, Any] | None:
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
            f"{out} holds {shard_text(old)} of run {old['run_id']}, not {shard_text(plan)}: "
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


def shard_text(m: Mapping[str, Any]) -> str:
    s = m.get("shard")
    return f"shard {s['index']}/{s['count']}" if s else "all tasks"
