"""The ``layerlab`` command line."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from layerlab import paths
from layerlab.spec import SpecError

if TYPE_CHECKING:  # the CLI imports heavy modules lazily, inside each command
    from layerlab.corpus import AnswerKey, Corpus
    from layerlab.scenario import Scenario

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def _spec_fail(exc: SpecError, what: str) -> typer.Exit:
    """Print one line per spec problem; return the exit to raise."""
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
    """Authoring report: can the extractive reader find each value; which questions carry cues.

    Cue words of every domain in the folder of ``path`` are used, so linting one file still
    sees the other domains' cues.
    """
    from layerlab.cues import CueMatcher
    from layerlab.extract import extract
    from layerlab.spec import load_domains
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
    if bad:
        typer.echo(f"{bad} extraction failure(s)")
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
        f"{counts['documents']} documents, {counts['tasks']} tasks (spec {c.spec_hash[:12]})"
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
) -> None:
    """240 tasks x 9 scenarios x 2 contract modes with the extractive reader (no model)."""
    import json

    from layerlab import harness, report
    from layerlab._io import atomic_write_text
    from layerlab.archive import write_records

    c, key = _load_corpus(corpus_dir)
    scen = _load_scenarios(scenarios_path)
    records = harness.run_deterministic(c, key, scen, retriever=retriever)
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


@run_app.command("live")
def run_live(
    model: list[str] = typer.Option(
        ...,
        "--model",
        "-m",
        help="litellm model string (repeatable), e.g. openai/gpt-4o-mini, ollama/llama3, layerlab/extractive.",
    ),
    out: Path = typer.Option(
        ..., help="Run folder (records.parquet, manifest.json, progress log, cache)."
    ),
    scenario: list[str] = typer.Option(
        None, "--scenario", help="Scenario filter (repeatable); default all."
    ),
    mode: list[str] = typer.Option(
        None, "--mode", help="Contract mode filter (repeatable); default strict and repair."
    ),
    tasks: str = typer.Option(
        None, "--tasks", help="Comma-separated task ids, or a file with one id per line."
    ),
    api_base: str = typer.Option(
        None, "--api-base", help="Base URL of an OpenAI-compatible server (vLLM, Ollama, ...)."
    ),
    budget: int = typer.Option(
        None, "--budget", help="Hard cap on provider calls, retries included."
    ),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="Concurrent requests."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run already in --out."),
    timeout: float = typer.Option(180.0, help="Per-request timeout in seconds (paper: 180)."),
    max_tokens: int = typer.Option(600, help="Output token cap (paper: 600)."),
    attempts: int = typer.Option(3, help="Total attempts per call (paper: 3)."),
    backoff: float = typer.Option(2.0, help="Linear backoff step in seconds (paper: 2)."),
    temperature: float = typer.Option(
        None, help="Sampling temperature; not sent unless given (paper: not set)."
    ),
    cache_dir: Path = typer.Option(
        None, help="Response cache folder (default OUT/.cache). Holds model replies: keep private."
    ),
    corpus_dir: Path = typer.Option(paths.CORPUS_DIR, "--corpus", help="Built corpus folder."),
    scenarios_path: Path = typer.Option(
        paths.SCENARIO_SPEC, "--scenarios", help="Scenario DSL file."
    ),
    progress: bool = typer.Option(True, help="Show a progress bar."),
) -> None:
    """Run the matrix through litellm: any model, budgets, cache, retries, resume.

    Keys come from the environment only (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY, ...).
    Offline, the `layerlab/` models are local reference agents: deterministic baselines, not models.
    """
    from layerlab import live
    from layerlab.harness import MODES
    from layerlab.llm import ProviderSettings
    from layerlab.spec import spec_hash

    c, key = _load_corpus(corpus_dir)
    scen = _load_scenarios(scenarios_path)
    task_ids: tuple[str, ...] | None = None
    if tasks:
        p = Path(tasks)
        raw = p.read_text().split() if p.exists() else tasks.split(",")
        task_ids = tuple(t.strip() for t in raw if t.strip())
    try:
        settings = ProviderSettings(timeout, max_tokens, attempts, backoff, temperature, api_base)
        config = live.LiveConfig(
            models=tuple(model),
            scenarios=tuple(scenario or scen),
            modes=tuple(mode or MODES),
            task_ids=task_ids,
            settings=settings,
        )
        for m in config.modes:
            from layerlab.contract import get_mode

            get_mode(m)
    except (ValueError, KeyError) as exc:
        raise _fail(str(exc)) from None
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
            cache_dir=cache_dir,
            progress=bar.update if bar else None,
        )
    except live.LiveRunError as exc:
        raise _fail(str(exc)) from None
    finally:
        if bar:
            bar.close()
    typer.echo(result.message)
    typer.echo(f"archive: {out / 'records.parquet'}  manifest: {out / 'manifest.json'}")
    if not result.complete:
        raise typer.Exit(3)


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


archive_app = typer.Typer(no_args_is_help=True, help="Check and merge record archives.")
app.add_typer(archive_app, name="archive")


@archive_app.command("check")
def archive_check(
    paths_: list[Path] = typer.Argument(
        ..., metavar="PATH...", help="Archive files or run folders."
    ),
) -> None:
    """Validate schema, allowlist, key uniqueness and manifests; exit 1 on the first bad one."""
    from layerlab.archive import ArchiveError, check_path

    bad = 0
    for p in paths_:
        try:
            rep = check_path(p)
        except ArchiveError as exc:
            typer.echo(f"FAIL {exc}", err=True)
            bad += 1
            continue
        typer.echo(
            f"ok   {p}: {rep['records']} records"
            + (f", run {rep['run_id']}" if "run_id" in rep else "")
        )
    if bad:
        raise typer.Exit(1)


@archive_app.command("merge")
def archive_merge(
    sources: list[Path] = typer.Argument(..., metavar="RUN...", help="Run folders to combine."),
    out: Path = typer.Option(..., help="Output folder for the merged archive and manifest."),
) -> None:
    """Combine runs through their manifests (a run given twice counts once)."""
    from layerlab.archive import ArchiveError, merge

    try:
        m = merge(sources, out)
    except ArchiveError as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"merged {len(m['sources'])} run(s), {m['records']} records -> {out}")


if __name__ == "__main__":
    app()


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
    as_json: bool = typer.Option(False, "--json", help="Print the headline figures as JSON."),
) -> None:
    """Recompute Tables 4, 5, 8, 9 and the specificity margin from archives alone."""
    import json

    from layerlab import stats
    from layerlab.archive import ArchiveError
    from layerlab.recompute import recompute

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
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
    ) as bar:
        task = bar.add_task("notebooks", total=len(reproduce.notebooks()))

        def started(nb: Path, i: int, n: int) -> None:
            bar.update(task, completed=i, description=nb.name)

        try:
            written = reproduce.run(quick=quick, on_start=started)
        except reproduce.ReproduceError as exc:
            raise _fail(str(exc)) from None
        bar.update(task, completed=len(reproduce.notebooks()), description="done")
    for w in written:
        typer.echo(f"{w.status:9} {w.path}")
    counts = {s: sum(w.status == s for w in written) for s in ("new", "changed", "unchanged")}
    typer.echo(
        f"{len(written)} artifacts: {counts['new']} new, {counts['changed']} changed, "
        f"{counts['unchanged']} unchanged"
    )


@app.command("explore")
def explore_cmd(
    task: str = typer.Option(..., "--task", help="Task id, e.g. finance-05-q1."),
    scenario: str = typer.Option(..., "--scenario", help="Scenario name."),
    mode: str = typer.Option("strict", "--mode", help="Contract mode."),
    reader: str = typer.Option(
        "extractive", "--reader", help="Deterministic reader: extractive or cautious."
    ),
) -> None:
    """Print one record's whole path: fault, retrieval, payloads, contract, reader, scores, diagnosis."""
    from layerlab import explore
    from layerlab.contract import get_mode

    try:
        get_mode(mode)
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
    max_retries: int = typer.Option(2, help="Bounded retries of the completeness control."),
) -> None:
    """Table 7: 8 tasks x 9 conditions x 2 arms (uncontrolled vs LayerRAG controls) through LangChain."""
    try:
        from layerlab import report, study
    except ImportError as exc:
        raise _fail(str(exc)) from None
    try:
        m = study.run_to(out, model=model, seed=seed, max_retries=max_retries)
    except ImportError as exc:
        raise _fail(str(exc)) from None
    from layerlab.archive import read_study

    report.print_frame(
        study.table7(read_study(out)), f"Focused LangChain study ({m['records']} cells, {model})"
    )
    typer.echo(f"wrote {out / 'study.parquet'} and {out / 'manifest.json'}")
