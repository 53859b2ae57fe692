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
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Required-document recall and current-version preference for every retriever."""
    import json

    from layerlab import audit, report

    c, key = _load_corpus(corpus_dir)
    result = audit.audit(c, key)  # type: ignore[arg-type]
    if as_json:
        typer.echo(json.dumps(result, indent=2, sort_keys=True))
    else:
        report.print_audit(result)
