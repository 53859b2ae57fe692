"""``layerlab run deterministic|live``, ``mitigation run`` and ``study langchain``: the harnesses."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from layerlab import paths

if TYPE_CHECKING:  # the CLI imports heavy modules lazily, inside each command
    from layerlab.harness.config import RunConfig
    from layerlab.harness.runner import Outcome


from layerlab.cli import decided
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
    _usage,
    mitigation_app,
    run_app,
)
from layerlab.cli.decided import HELP as _UNTIL
from layerlab.cli.export import OTEL_HELP, otel_url, send_otel
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
    scenarios_paths: list[Path] = typer.Option(
        None, "--scenarios", help="Scenario DSL file (repeatable; default the paper's nine), e.g. "
        "scenarios.yaml and scenarios_transport.yaml for the transport matrix."
    ),
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
    seen: set[str] = set()
    for p in scenarios_paths or ():
        names = set(_load_scenarios(p))  # a bad file: one line per problem, before any work
        if names & seen:
            raise _fail(f"--scenarios {p}: scenario(s) {', '.join(sorted(names & seen))} "
                        "already in an earlier file")  # fmt: skip
        seen |= names
    man = deterministic.run_mitigation_archive(
        out, mitigation or None, reader, spec_path, corpus_dir, scenarios_paths or ()
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
    "The matrix": ("scenario", "mode", "tasks", "limit", "limit_seed", "shard", "epochs", "intensity",
                   "retriever", "corpus_dir", "scenarios_path"),
    "Output and resume": ("out", "resume", "retry_errors", "accept_code_change", "cache_dir",
                          "sample_log", "progress", "otel_endpoint"),
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
        help="Mitigation arm (repeatable): an entry or stack of data/specs/mitigations.yaml, "
        "else of data/specs/mitigations_transport.yaml (transport_retry, circuit_breaker); "
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
        help="Ask identical prompts once per epoch and share the reply between their records (recorded "
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
        None,
        "--budget",
        help="Hard cap on provider calls over the whole run, retries included (>= 0); a "
        "--resume gets what is left.",
    ),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="Concurrent requests."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run already in --out."),
    retry_errors: bool = typer.Option(
        False, "--retry-errors", help="With --resume: ask the provider_error cells again."
    ),
    accept_code_change: bool = typer.Option(
        False, "--accept-code-change", help="With --resume: go on although the target's code "
        "changed; the manifest says which records ran under which code."),  # fmt: skip
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
    scenarios_path: list[Path] = typer.Option(
        None, "--scenarios", help="Scenario DSL file (repeatable: their scenarios together, e.g. "
        "scenarios.yaml and scenarios_transport.yaml); default the paper's nine."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
    limit: int = typer.Option(None, "--limit", min=1, help="Ask only N tasks, stratified by domain "
                              "and policy unit (seeded: --limit-seed)."),  # fmt: skip
    shard: str = typer.Option(None, "--shard", help="I/N: run shard I of N of the tasks (CI jobs; "
                              "`archive merge` of the N folders is the whole run).", callback=_shard_flag),  # fmt: skip
    limit_seed: int = typer.Option(0, "--limit-seed", help="Seed of the --limit selection."),
    intensity: str = typer.Option(
        None, "--intensity", metavar="L,L,...",
        help="Fault intensities to sweep, e.g. 0,0.1,0.25,0.5,1: each faulted scenario runs at "
        "each λ as <scenario>@<λ> (the share of policies or calls its fault strikes; 1: as "
        "written, the default). `layerlab report` draws the reliability surface."),
    sample_log: Path = typer.Option(
        None,
        "--sample-log",
        help="Append a private per-sample log here (question, evidence ids, reply, verdict with "
        "reasons; outside --out, never archived). Off by default. `layerlab view` renders it.",
    ),
    otel_endpoint: str = typer.Option(None, "--otel-endpoint", metavar="URL", callback=otel_url,
                                      help=OTEL_HELP),  # fmt: skip
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
    from layerlab.harness import config as run_config
    from layerlab.harness import runner
    from layerlab.harness.live.settings import LiveRunError
    from layerlab.reporting.format.terminal import ProgressBar
    from layerlab.system.retrieval import RetrieverError

    given = {n for n in ctx.params if decided.given(ctx, n)}
    try:
        inputs = run_config.Inputs(corpus_dir, *(scenarios_path or [paths.SCENARIO_SPEC]))
        config = run_config.RunConfig.from_cli(ctx.params, given, inputs)
        target = config.system.target is not None
        done = runner.execute(config, inputs, progress=lambda: ProgressBar(target=target),
                              say=lambda m: typer.echo(m, err=True))  # fmt: skip
    except run_config.ConfigProblems as exc:
        raise _spec_fail(exc.spec, exc.what) from None
    except run_config.ConfigError as exc:
        raise (_usage if exc.usage else _fail)(str(exc)) from None
    except (LiveRunError, RetrieverError) as exc:  # RetrieverError: a store that cannot index
        raise _fail(str(exc)) from None
    except ValueError as exc:  # a run configuration's runs: a merge refused
        if config_path is None:
            raise
        raise _fail(str(exc)) from None
    _report(config, done, otel_endpoint)


def _report(config: RunConfig, done: Outcome, otel_endpoint: str | None = None) -> None:
    """What ``run live`` prints after its run (flags or ``--config``) and the exit it ends with:
    the results, the sample log, the outcome, where the archive is; an error-rate failure (4),
    an incomplete run (3). ``otel_endpoint``: where the records go as traces (labels and keys,
    as ``layerlab export otel`` sends them)."""
    from layerlab.harness.live.failed import fix_hint
    from layerlab.harness.runconfig import CONFIG_COPY

    out, by_file = config.outputs.out, config.outputs.config_file is not None
    assert out is not None
    if done.result is None and done.decided is not None:  # an until-decided run already stopped
        return decided.report(done.decided, typer.echo)
    _report_run(out, done.sample_log, done.message, config.matrix.corpus_dir)
    if otel_endpoint:  # the records as traces (labels and keys: layerlab export otel)
        typer.echo(send_otel(out, otel_endpoint))
    if by_file:
        typer.echo(f"archive: {out / 'records.parquet'}  configuration: {out / CONFIG_COPY}")
    else:
        if done.decided is not None:
            decided.report(done.decided, typer.echo)
        typer.echo(f"archive: {out / 'records.parquet'}  manifest: {out / 'manifest.json'}")
    if not by_file and config.system.target is None:  # a target's replies: layerlab caches none
        typer.echo(f"reply cache: {config.execution.cache_folder} (private: holds model replies, "
                   "never archived)")  # fmt: skip
    if done.over_error_rate:
        typer.echo(f"error: {_rate_line(config, done)}; the records are written but the run "
                   f"failed ({fix_hint(out, config.system.target is not None)})", err=True)  # fmt: skip
        raise typer.Exit(EXIT_ERROR_RATE)
    if not done.complete:
        raise typer.Exit(EXIT_INCOMPLETE)


def _rate_line(config: RunConfig, done: Outcome) -> str:
    """Why the run failed its error rate: in numbers for a run of flags (each model's, the
    target's or the store's failures), by name for a run configuration's groups."""
    from layerlab.harness.live.failed import rate_line

    max_rate = config.execution.max_error_rate
    if config.outputs.config_file is not None or done.result is None:
        return f"error rate above max_error_rate {max_rate:g} for {', '.join(done.over_error_rate)}"
    return rate_line(done.result.errors, list(done.over_error_rate), config.matrix.retriever,
                     config.system.target is not None, max_rate)  # fmt: skip


def _report_run(out: Path, log: Any, message: str, corpus_dir: Path | None = None) -> None:
    """After a live run (flags or --config): its results (with the sample log's dominant failure
    of a failing fault-free layer), the private sample log, its outcome."""
    _print_results(out, log.path if log else None, corpus_dir)
    if log:
        typer.echo(
            f"sample log: {log.path} ({log.count} entries; private: replies and expected answers)"
        )
        if getattr(log, "note", None):
            typer.echo(f"note: {log.note}")
    typer.echo(message)


def _print_results(out: Path, sample_log: Path | None = None, corpus_dir: Path | None = None) -> None:
    """The run's results from its results.json (a target run's findings per layer first;
    ``sample_log``: the private log whose dominant failure joins the fault-free layer's)."""
    from layerlab.reporting.run import overview

    overview.print_run_results(out, typer.echo, sample_log, corpus_dir)
