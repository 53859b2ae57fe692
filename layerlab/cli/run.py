"""``layerlab run deterministic|live``, ``mitigation run`` and ``study langchain``: the harnesses."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from layerlab import paths
from layerlab.corpus.spec import SpecError

if TYPE_CHECKING:  # the CLI imports heavy modules lazily, inside each command
    from layerlab.harness.live import RunSettings


from layerlab.cli.app import (
    EXIT_ERROR_RATE,
    EXIT_INCOMPLETE,
    _check_out,
    _fail,
    _load_corpus,
    _load_mitigations,
    _load_scenarios,
    _retriever_flag,
    _shard_flag,
    _spec_fail,
    _target_spec,
    _usage,
    mitigation_app,
    run_app,
)
from layerlab.cli.decided import HELP as _UNTIL
from layerlab.cli.help import panelled

_RETRIEVER_HELP = ("The tool's first stage: a registered retriever (e.g. bm25) or your own, "
                   "python:MODULE:FACTORY or langchain:MODULE:FACTORY (docs/retrievers.md).")


@run_app.command("deterministic")
def run_deterministic(
    out: Path = typer.Option(..., help="Output folder for records.parquet and summary.json."),
    corpus_dir: Path = typer.Option(paths.CORPUS_DIR, "--corpus", help="Built corpus folder."),
    scenarios_path: Path = typer.Option(
        paths.SCENARIO_SPEC, "--scenarios", help="Scenario DSL file."
    ),
    retriever: str = typer.Option("tfidf_domain_validity", help=_RETRIEVER_HELP, callback=_retriever_flag),
    mitigation: list[str] = typer.Option(
        None,
        "--mitigation",
        help="Mitigation arm (repeatable): an entry or stack of the mitigations spec; "
        "default the contract arms; 'all': the baseline and every matrix arm.",
    ),
    spec_path: Path = typer.Option(
        paths.MITIGATION_SPEC, "--mitigations", help="Mitigations spec file."
    ),
) -> None:
    """240 tasks x 9 scenarios x the contract arms (or any mitigation arms), extractive reader."""
    import json

    from layerlab._io import atomic_write_text
    from layerlab.archive import write_records
    from layerlab.harness import deterministic as harness
    from layerlab.reporting.format import terminal as report
    from layerlab.system import retrieval
    from layerlab.system.retrieval import RetrieverError

    _check_out(out)
    c, key = _load_corpus(corpus_dir)
    scen = _load_scenarios(scenarios_path)
    spec = _load_mitigations(spec_path)
    try:
        arms = [spec.arm(m) for m in (spec.expand(mitigation) or spec.contract_arms)]
    except KeyError as exc:
        raise _fail(f"--mitigation: {exc.args[0]}") from None
    try:
        records = harness.run_deterministic(c, key, scen, arms, retriever=retriever)
    except (KeyError, RetrieverError) as exc:  # a team's store that failed to index: one line
        raise _fail(str(exc) if isinstance(exc, RetrieverError) else f"--retriever: {exc.args[0]}") from None
    if retrieval.report(retriever):
        typer.echo(retrieval.report(retriever), err=True)
    summary = harness.summarize(records)
    write_records(out / "records.parquet", records)
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    report.print_table2(summary)
    typer.echo(
        f"wrote {out / 'records.parquet'} ({len(records)} records) and {out / 'summary.json'}"
    )


@mitigation_app.command("run")
def mitigation_run(
    out: Path = typer.Option(..., help="Run folder (records.parquet + manifest.json)."),
    mitigation: list[str] = typer.Option(
        None, "--mitigation", help="Arm (repeatable); default (or 'all') every matrix arm."
    ),
    reader: str = typer.Option("extractive", help="Deterministic reader (registered name)."),
    spec_path: Path = typer.Option(paths.MITIGATION_SPEC, "--spec", help="Mitigations spec file."),
    corpus_dir: Path = typer.Option(paths.CORPUS_DIR, "--corpus", help="Built corpus folder."),
) -> None:
    """The deterministic harness over the baseline and the mitigation arms (Table 10's archive)."""
    from layerlab.harness import deterministic
    from layerlab.system.reader import READERS

    _check_out(out)
    spec = _load_mitigations(spec_path)
    try:
        READERS.lookup(reader)
    except KeyError as exc:
        raise _fail(f"--reader: {exc.args[0]}") from None
    try:
        mitigation = list(spec.expand(mitigation))
        for m in mitigation:
            spec.arm(m)
    except KeyError as exc:
        raise _fail(f"--mitigation: {exc.args[0]}") from None
    _load_corpus(corpus_dir)  # a missing or edited corpus folder: one line, before any work
    man = deterministic.run_mitigation_archive(
        out, mitigation or None, reader, spec_path, corpus_dir
    )
    typer.echo(
        f"wrote {out / 'records.parquet'} ({man['records']} records, arms: {', '.join(man['mitigations'])})"
    )


_AGENT_HELP = {
    "agent": "Agent mode: the model calls the faulted search and open_document tools itself, "
    "step by step, then replies (default: single-call mode, the harness searches once).",
    "steps": "Agent mode: tool-calling turns before the final reply (1-16).",
    "protocol": "Agent mode: native (provider tool calls), json_action (a JSON action per reply) "
    "or auto (json_action for local models, native otherwise).",
    "target": "Your own RAG system instead of -m: python:MODULE:FUNC, langchain:MODULE:FACTORY, "
    "llamaindex:MODULE:FACTORY or an http(s):// URL; it answers through the faulted tools (README: Test your own RAG system).",
    "name": "The target's name in the archive (its records' model).",
    "version": "The target's version string, kept in the manifest.",
    "setting": "A target setting key=value (repeatable); secret-looking keys are hashed, never stored.",
}


# ``run live --help``: its 40 flags under headings by topic (parameter names, in order)
_LIVE_PANELS = {
    "What to test": ("model", "target", "target_name", "target_version", "target_setting", "config_path"),
    "The matrix": ("scenario", "mode", "tasks", "limit", "limit_seed", "shard", "epochs",
                   "retriever", "corpus_dir", "scenarios_path"),
    "Output and resume": ("out", "resume", "retry_errors", "cache_dir", "sample_log", "progress"),
    "Agent mode": ("agent", "max_steps", "tool_protocol"),
    "Calls and failures": ("api_base", "local_servers", "concurrency", "budget", "timeout",
                           "attempts", "backoff", "retry_seed", "max_error_rate"),
    "Decoding": ("temperature", "top_p", "max_tokens", "seed", "response_format", "share_replies"),
    "Until decided": ("until_decided", "specific", "no_over_broad", "max_tasks", "batch", "delta"),
}  # fmt: skip


@run_app.command("live", cls=panelled(_LIVE_PANELS))
def run_live(
    ctx: typer.Context,
    model: list[str] = typer.Option(
        None,
        "--model",
        "-m",
        help="litellm model string (repeatable), e.g. openai/gpt-4o-mini, ollama_chat/llama3.1, "
        "local/smollm2-135m (a registered local model, served for the run), layerlab/extractive.",
    ),
    out: Path = typer.Option(
        ...,
        help="Run folder (records.parquet, manifest.json, progress log). Shareable: no replies.",
    ),
    scenario: list[str] = typer.Option(
        None, "--scenario", help="Scenario filter (repeatable); default all."
    ),
    mode: list[str] = typer.Option(
        None,
        "--mitigation",
        "--mode",
        help="Mitigation arm (repeatable): an entry or stack of data/specs/mitigations.yaml; "
        "default the contract arms; 'all': the baseline and every matrix arm.",
    ),
    tasks: str = typer.Option(
        None, "--tasks", help="Comma-separated task ids, or a file with one id per line."
    ),
    api_base: list[str] = typer.Option(
        None,
        "--api-base",
        help="Base URL of a server of the model (vLLM, Ollama, llama.cpp, ...); repeat it to "
        "spread calls over several servers of the same model.",
    ),
    epochs: int = typer.Option(
        1,
        "--epochs",
        min=1,
        help="Ask every cell K times, each its own call and seed (records: replicate = the "
        "epoch); pass@k and pass^k by scenario beside S. A greedy model or a reference agent, "
        "whose epochs would be identical, runs 1.",
    ),
    replicates: int = typer.Option(
        None, "--replicates", min=1, hidden=True, help="The earlier name of --epochs."
    ),
    share_replies: bool = typer.Option(
        None,
        "--share-replies/--no-share-replies",
        help="Ask identical prompts once and share the reply between their records (recorded "
        "in the manifest; forces arms to agree wherever their prompts coincide). Default: "
        "shared exactly when decoding is greedy (temperature 0).",
        show_default=False,
    ),
    response_format: str = typer.Option(
        "none",
        "--response-format",
        help="'json_schema': ask the server to constrain decoding to the reply contract.",
    ),
    seed: int = typer.Option(
        None,
        "--seed",
        help="Base of per-record seeds sent to the server (local models: 0 unless given).",
    ),
    agent: bool = typer.Option(False, "--agent", help=_AGENT_HELP["agent"]),
    max_steps: int = typer.Option(4, "--max-steps", help=_AGENT_HELP["steps"]),
    tool_protocol: str = typer.Option("auto", "--tool-protocol", help=_AGENT_HELP["protocol"]),
    retriever: str = typer.Option("tfidf_domain_validity", help=_RETRIEVER_HELP, callback=_retriever_flag),
    target: str = typer.Option(None, "--target", help=_AGENT_HELP["target"]),
    target_name: str = typer.Option("", "--target-name", help=_AGENT_HELP["name"]),
    target_version: str = typer.Option("", "--target-version", help=_AGENT_HELP["version"]),
    target_setting: list[str] = typer.Option(None, "--target-setting", help=_AGENT_HELP["setting"]),
    local_servers: int = typer.Option(
        None,
        "--local-servers",
        min=1,
        help="llama.cpp servers started per local/ model, one thread each (default: one per core).",
    ),
    budget: int = typer.Option(
        None, "--budget", help="Hard cap on provider calls, retries included (>= 0)."
    ),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="Concurrent requests."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run already in --out."),
    retry_errors: bool = typer.Option(
        False, "--retry-errors", help="With --resume: ask the provider_error cells again."
    ),
    max_error_rate: float = typer.Option(
        0.2,
        "--max-error-rate",
        help="Exit 4 when a model's share of provider_error records exceeds this (0-1).",
    ),
    retry_seed: int = typer.Option(0, "--retry-seed", help="Seed of the retry jitter."),
    timeout: float = typer.Option(180.0, help="Per-request timeout in seconds (paper: 180)."),
    max_tokens: int = typer.Option(600, help="Output token cap (paper: 600)."),
    attempts: int = typer.Option(3, help="Total attempts per call (paper: 3)."),
    backoff: float = typer.Option(
        2.0, help="First retry delay in seconds, doubling, jittered (paper: 2 s, linear)."
    ),
    temperature: float = typer.Option(
        None,
        help="Sampling temperature. Default: 0 (greedy) for local/ models; not sent to other "
        "providers unless given (paper: not set).",
    ),
    top_p: float = typer.Option(
        None, "--top-p", help="Nucleus-sampling cut-off in (0, 1]; not sent unless given."
    ),
    cache_dir: Path = typer.Option(
        None,
        help="Reply cache folder, outside --out (default $XDG_CACHE_HOME/layerlab/replies). "
        "Holds model replies: keep private.",
    ),
    corpus_dir: Path = typer.Option(paths.CORPUS_DIR, "--corpus", help="Built corpus folder."),
    scenarios_path: Path = typer.Option(paths.SCENARIO_SPEC, "--scenarios", help="Scenario DSL file."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
    limit: int = typer.Option(None, "--limit", min=1, help="Ask only N tasks, stratified by domain "
                              "and policy unit (seeded: --limit-seed)."),  # fmt: skip
    shard: str = typer.Option(None, "--shard", help="I/N: run shard I of N of the tasks (CI jobs; "
                              "`archive merge` of the N folders is the whole run).", callback=_shard_flag),  # fmt: skip
    limit_seed: int = typer.Option(0, "--limit-seed", help="Seed of the --limit selection."),
    sample_log: Path = typer.Option(
        None,
        "--sample-log",
        help="Append a private per-sample log here (question, evidence ids, reply, verdict with "
        "reasons; outside --out, never archived). Off by default. `layerlab view` renders it.",
    ),
    config_path: Path = typer.Option(
        None,
        "--config",
        help="A YAML run configuration (models with their own endpoints and settings, scenarios, "
        "mitigations, tasks or limit, budget, epochs); stored in --out as run.yaml.",
    ),
    until_decided: bool = typer.Option(False, "--until-decided", help=_UNTIL["until_decided"]),
    specific: list[str] = typer.Option(None, "--specific", metavar="MITIGATION", help=_UNTIL["specific"]),
    no_over_broad: bool = typer.Option(False, "--no-over-broad", help=_UNTIL["no_over_broad"]),
    max_tasks: int = typer.Option(None, "--max-tasks", min=1, help=_UNTIL["max_tasks"]),
    batch: int = typer.Option(None, "--batch", min=1, help=_UNTIL["batch"]),
    delta: float = typer.Option(None, "--delta", min=0.0, max=1.0, help=_UNTIL["delta"]),
) -> None:
    """Run the matrix through litellm: any model, budgets, cache, retries, resume.

    Keys come from the environment only (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY, ...).
    Offline, the `layerlab/` models are local reference agents: deterministic baselines, not models.
    """
    from layerlab.cli import decided
    from layerlab.corpus.spec import spec_hash
    from layerlab.harness import live
    from layerlab.harness.deterministic import contract_arms
    from layerlab.models.llm import ProviderSettings

    if not until_decided:
        decided.refuse_without(ctx)
    if config_path is not None:
        for flag, on in (("--shard", shard is not None), ("--until-decided", until_decided)):
            if on:
                raise _fail(f"{flag}: not with --config yet (give the run's flags instead)")
        given = live.RunSettings(
            resume=resume,
            retry_errors=retry_errors,
            cache_dir=cache_dir,
            local_servers=os.cpu_count() or 1,
        )
        _check_run(given, out)
        _run_config(ctx, config_path, out, given, corpus_dir, scenarios_path, progress)
        return
    if not agent:  # agent-mode flags do nothing in single-call mode: refused, not ignored
        for name, flag in (("max_steps", "--max-steps"), ("tool_protocol", "--tool-protocol")):
            source = ctx.get_parameter_source(name)
            if source is not None and source.name == "COMMANDLINE":
                raise _usage(f"{flag}: an agent-mode setting; give --agent too (it does nothing "
                             "in single-call mode)")  # fmt: skip
    spec = _target_spec(target, target_name, target_version, target_setting, model)
    if not model and spec is None:
        raise _fail("-m/--model: give at least one model (or a run configuration with --config)")
    run = live.RunSettings(
        budget=budget,
        concurrency=concurrency,
        resume=resume,
        retry_errors=retry_errors,
        cache_dir=cache_dir,
        local_servers=local_servers or (os.cpu_count() or 1),
        max_error_rate=max_error_rate,
        seed=retry_seed,
    )
    _check_run(run, out, api_base or (), model or ())
    task_ids = _task_ids(tasks) if tasks is not None else None
    c, key = _load_corpus(corpus_dir)
    scen = _load_scenarios(scenarios_path)
    try:
        settings = ProviderSettings(
            timeout_s=timeout,
            max_tokens=max_tokens,
            attempts=attempts,
            backoff_s=backoff,
            temperature=temperature,
            top_p=top_p,
            api_bases=tuple(api_base or ()),
        )
        config = live.LiveConfig(
            models=tuple(model or ()),
            scenarios=tuple(scenario or scen),
            mitigations=_load_mitigations(paths.MITIGATION_SPEC).expand(mode) or contract_arms(),
            task_ids=task_ids,
            settings=settings,
            epochs=epochs,
            replicates=replicates,  # the earlier name: the same setting (both: must agree)
            share_replies=share_replies,
            response_format=response_format,  # checked by LiveConfig
            seed=seed,
            agent=live.AgentMode.auto(model, tool_protocol, max_steps) if agent else None,
            target=spec,
            retriever=retriever,
            shard=shard,
        )
    except ValueError as exc:
        raise _fail(str(exc)) from None
    from layerlab.mitigations import load_mitigations

    for m in config.mitigations:
        try:
            load_mitigations().arm(m)
        except KeyError as exc:
            raise _fail(f"--mitigation: {exc.args[0]}") from None
    if until_decided:
        config = decided.plan_config(config, c, limit, limit_seed, specific or (), no_over_broad,
                                     max_tasks, batch, delta)  # fmt: skip
    elif limit is not None:
        from layerlab.harness.runconfig import stratified_tasks

        pool = [t for t in c.tasks if task_ids is None or t.task_id in set(task_ids)]
        if limit > len(pool):
            raise _fail(
                f"--limit {limit}: only {len(pool)} tasks to choose from (expected 1 to "
                f"{len(pool)}; leave --limit out to ask them all)"
            )
        config = dataclasses.replace(config, task_ids=stratified_tasks(pool, limit, limit_seed))
    log = _open_sample_log(sample_log, out)
    from layerlab.reporting.format.terminal import ProgressBar

    bar = ProgressBar(target=spec is not None) if progress and not until_decided else None
    looked = None
    try:
        if until_decided:
            from layerlab.harness.live.looks import run_until_decided

            looked = run_until_decided(
                c, key, scen, config, out, run, scenario_hash=spec_hash(scenarios_path),
                progress=(lambda: ProgressBar(target=spec is not None)) if progress else None,
                say=lambda m: typer.echo(m, err=True), samples=log,
            )  # fmt: skip
            result = looked.result
        else:
            result = live.run_live(
                c, key, scen, config, out, scenario_hash=spec_hash(scenarios_path),
                progress=bar.update if bar else None, say=lambda m: typer.echo(m, err=True),
                samples=log, **run.kwargs(),
            )  # fmt: skip
    except live.LiveRunError as exc:
        raise _fail(str(exc)) from None
    finally:
        if bar:
            bar.close()
        if log:
            log.close()
    if result is None:  # an until-decided run that had already stopped
        assert looked is not None
        return decided.report(looked, typer.echo)
    _report_run(out, log, result.message)
    if looked is not None:
        decided.report(looked, typer.echo)
    typer.echo(f"archive: {out / 'records.parquet'}  manifest: {out / 'manifest.json'}")
    if spec is None:  # a target's replies are its own: layerlab caches none
        typer.echo(f"reply cache: {run.cache_folder} (private: holds model replies, never archived)")
    if result.over_error_rate:
        typer.echo(
            f"error: provider-error rate above --max-error-rate {max_error_rate:g} for "
            f"{', '.join(result.over_error_rate)}; the records are written but the run failed "
            "(fix the cause, then --resume --retry-errors)",
            err=True,
        )
        raise typer.Exit(EXIT_ERROR_RATE)
    if not result.complete:
        raise typer.Exit(EXIT_INCOMPLETE)


def _check_run(
    run: RunSettings, out: Path, api_bases: Sequence[str] = (), models: Sequence[str] = ()
) -> None:
    """The run settings' one validation (:meth:`RunSettings.check`), as a one-line error."""
    from layerlab.harness import live

    try:
        run.check(out, api_bases, models)
    except live.LiveRunError as exc:
        raise _fail(str(exc)) from None


def _task_ids(tasks: str) -> tuple[str, ...]:
    """``--tasks``: a file with one id per line, or comma-separated ids."""
    import re

    p = Path(tasks)
    if p.exists() or "/" in tasks or tasks.endswith((".txt", ".lst")):
        try:
            raw = p.read_text(encoding="utf-8").split()
        except FileNotFoundError:
            raise _fail(
                f"--tasks {tasks}: no such file (expected a file or comma-separated ids)"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise _fail(f"--tasks {tasks}: cannot read the file as UTF-8 text ({exc})") from None
        where = f"--tasks {tasks}"
    else:
        raw = tasks.split(",")
        where = "--tasks"
    ids = tuple(t.strip() for t in raw if t.strip())
    if not ids:
        raise _fail(
            f"{where}: no task ids given (expected ids like hr-01-q1, one per line or comma-separated)"
        )
    odd = [t for t in ids if not re.fullmatch(r"[a-z][a-z0-9_]*-\d{2}-q\d+", t)]
    if odd:
        raise _fail(f"{where}: {odd[0]!r} is not a task id (expected ids like hr-01-q1)")
    return ids


# flags a run configuration sets itself: refused next to --config rather than silently ignored
_CONFIG_OWNS = (
    "model", "scenario", "mode", "tasks", "api_base", "epochs", "replicates", "share_replies",
    "response_format", "seed", "local_servers", "budget", "concurrency", "timeout", "max_tokens",
    "attempts", "backoff", "temperature", "top_p", "limit", "limit_seed", "max_error_rate", "retry_seed",
    "sample_log", "agent", "max_steps", "tool_protocol", "target", "target_name", "target_version",
    "target_setting", "retriever",
)  # fmt: skip


def _run_config(
    ctx: typer.Context,
    config_path: Path,
    out: Path,
    run: RunSettings,
    corpus_dir: Path,
    scenarios_path: Path,
    progress: bool,
) -> None:
    """``run live --config run.yaml``: validate, run every model group, merge, print results.
    ``run`` holds what the flags set (resume, retry errors, cache folder)."""
    from layerlab.corpus.spec import spec_hash
    from layerlab.harness import live, runconfig
    from layerlab.mitigations import load_mitigations
    from layerlab.reporting.format.terminal import ProgressBar

    for name in _CONFIG_OWNS:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name == "COMMANDLINE":
            flag = "--" + name.replace("_", "-")
            raise _fail(
                f"{flag}: set it in the run configuration {config_path}, not next to --config"
            )
    c, key = _load_corpus(corpus_dir)
    scen = _load_scenarios(scenarios_path)
    try:
        spec = runconfig.load_run_config(
            config_path, list(scen), list(load_mitigations().arms), [t.task_id for t in c.tasks]
        )
        text = config_path.read_text(encoding="utf-8")
    except SpecError as exc:
        raise _spec_fail(exc, "problem(s) in the run configuration; nothing run") from None
    _check_run(run, out, *runconfig.endpoints(spec))  # every model's, before anything is written
    log = _open_sample_log(spec.sample_log_path(config_path), out)
    try:
        complete, message, over = runconfig.execute(
            spec,
            text,
            out,
            c,
            key,
            scen,
            run,
            scenario_hash=spec_hash(scenarios_path),
            progress=(lambda: ProgressBar(target=spec.target is not None)) if progress else None,
            samples=log,
            say=lambda m: typer.echo(m, err=True),
        )
    except (live.LiveRunError, ValueError) as exc:
        raise _fail(str(exc)) from None
    finally:
        if log:
            log.close()
    _report_run(out, log, message)
    typer.echo(f"archive: {out / 'records.parquet'}  configuration: {out / runconfig.CONFIG_COPY}")
    if over:
        typer.echo(
            f"error: provider-error rate above max_error_rate {spec.max_error_rate:g} for "
            f"{', '.join(over)}; the records are written but the run failed "
            "(fix the cause, then --resume --retry-errors)",
            err=True,
        )
        raise typer.Exit(EXIT_ERROR_RATE)
    if not complete:
        raise typer.Exit(3)


def _open_sample_log(path: Path | None, out: Path) -> Any:
    """The ``--sample-log`` writer (``None`` when off); refused inside the run folder."""
    if path is None:
        return None
    from layerlab.archive import samplelog

    try:
        return samplelog.SampleLog(samplelog.check_path(path, out))
    except samplelog.SampleLogError as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"--sample-log {path}: cannot write ({exc.strerror or exc})") from None


def _report_run(out: Path, log: Any, message: str) -> None:
    """After a live run (flags or --config): its results, the private sample log, its outcome."""
    _print_results(out)
    if log:
        typer.echo(
            f"sample log: {log.path} ({log.count} entries; private: replies and expected answers)"
        )
        if getattr(log, "note", None):
            typer.echo(f"note: {log.note}")
    typer.echo(message)


def _print_results(out: Path) -> None:
    """The run's results from its results.json (a target run's findings per layer first)."""
    from layerlab.reporting.run import overview

    overview.print_run_results(out, typer.echo)
