"""The ``layerlab`` command line."""

from __future__ import annotations

from pathlib import Path

import typer

from layerlab import paths

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
spec_app = typer.Typer(no_args_is_help=True, help="Validate specification DSL files.")
app.add_typer(spec_app, name="spec")


@spec_app.command("check")
def spec_check(
    path: Path = typer.Argument(paths.CORPUS_SPEC_DIR, help="A spec folder or one YAML file."),
) -> None:
    """Validate domain specs; print one line per problem and exit 1 if any."""
    from layerlab.spec import SpecError, load_domains

    try:
        domains = load_domains(path)
    except SpecError as exc:
        for p in exc.problems:
            typer.echo(str(p), err=True)
        typer.echo(f"{len(exc.problems)} problem(s) found", err=True)
        raise typer.Exit(1) from None
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
    from layerlab.spec import SpecError, load_domains
    from layerlab.text import normalize_answer

    folder = path if path.is_dir() else path.parent
    try:
        every = load_domains(folder)
        chosen = load_domains(path)
    except SpecError as exc:
        for problem in exc.problems:
            typer.echo(str(problem), err=True)
        raise typer.Exit(1) from None
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


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


@corpus_app.command("build")
def corpus_build(
    out: Path = typer.Option(paths.CORPUS_DIR, help="Output folder."),
    spec: Path = typer.Option(paths.CORPUS_SPEC_DIR, help="Spec folder (one YAML per domain)."),
) -> None:
    """Build documents.jsonl, tasks.jsonl, answer_key.jsonl, domains.json and a manifest."""
    from layerlab import corpus as corpus_mod
    from layerlab.spec import SpecError

    try:
        c, key = corpus_mod.build_from_specs(spec)
    except SpecError as exc:
        for p in exc.problems:
            typer.echo(str(p), err=True)
        raise _fail(f"{len(exc.problems)} spec problem(s); nothing written") from None
    manifest = corpus_mod.write(c, key, out)
    counts = manifest["counts"]
    typer.echo(
        f"wrote {out}: {counts['domains']} domains, {counts['policy_units']} policy units, "
        f"{counts['documents']} documents, {counts['tasks']} tasks (spec {c.spec_hash[:12]})"
    )


def _load_corpus(folder: Path) -> tuple[object, object]:
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
    conditions = audit.conditions_from(c, scen)  # type: ignore[arg-type]
    result = audit.audit(c, key, conditions)  # type: ignore[arg-type]
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
    records = harness.run_deterministic(c, key, scen, retriever=retriever)  # type: ignore[arg-type]
    summary = harness.summarize(records)
    write_records(out / "records.parquet", records)
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    report.print_table2(summary)
    typer.echo(
        f"wrote {out / 'records.parquet'} ({len(records)} records) and {out / 'summary.json'}"
    )


def _load_scenarios(path: Path) -> dict[str, object]:
    from layerlab.scenario import load_scenarios
    from layerlab.spec import SpecError

    try:
        return dict(load_scenarios(path))
    except SpecError as exc:
        for p in exc.problems:
            typer.echo(str(p), err=True)
        raise _fail(f"{len(exc.problems)} scenario spec problem(s)") from None


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

    report.print_frame(tables.table1(_load_scenarios(path)), "Scenarios (Table 1)")  # type: ignore[arg-type]


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


export_app = typer.Typer(no_args_is_help=True, help="Regenerate generated artifacts.")
app.add_typer(export_app, name="export")


@export_app.command("tables")
def export_tables(
    out: Path = typer.Option(paths.TABLES, help="Output folder (default paper/tables)."),
) -> None:
    """Regenerate Tables 1-3 (CSV, Markdown, LaTeX) from the committed corpus and specs."""
    from layerlab import tables

    tables.export_deterministic(out)
    typer.echo(f"wrote table1-3 (.csv .md .tex) to {out}")
