"""``layerlab spec|corpus|audit|scenario|mitigation list``: the inputs — specs, corpus, scenarios,
mitigations — and the audits that need no model."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from layerlab import paths
from layerlab.corpus.spec import SpecError

if TYPE_CHECKING:  # the CLI imports heavy modules lazily, inside each command
    pass


from layerlab.cli.app import (
    _check_out,
    _fail,
    _load_corpus,
    _load_mitigations,
    _load_scenarios,
    _retriever_flag,
    _spec_fail,
    audit_app,
    corpus_app,
    mitigation_app,
    scenario_app,
    spec_app,
)


@spec_app.command("check")
def spec_check(
    path: Path = typer.Argument(paths.CORPUS_SPEC_DIR, help="A spec folder or one YAML file."),
) -> None:
    """Validate domain specs; print one line per problem and exit 1 if any."""
    from layerlab.corpus.spec import load_domains

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
    from layerlab.corpus.cues import CueMatcher
    from layerlab.corpus.extract import extract
    from layerlab.corpus.spec import lint_questions, load_domains, unused_paraphrases
    from layerlab.corpus.text import normalize_answer

    folder = path if path.is_dir() else path.parent
    try:
        chosen = load_domains(path)  # first: a missing or broken file is named itself
        every = load_domains(folder)
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


def _check_corpus_out(out: Path) -> None:
    """Refuse, before any work, an ``--out`` a corpus command may not write: one line naming
    it (a run folder, a folder of other files, a file); a corpus folder is replaced."""
    from layerlab.corpus.build import corpus_folder_problem

    if out.is_dir() or out.is_symlink():  # before _check_out, whose probe touches the folder
        problem = corpus_folder_problem(out)
        if problem:
            raise _fail(f"{out}: {problem}; nothing changed")
    _check_out(out)


def _write_corpus(c: Any, key: Any, out: Path) -> dict[str, Any]:
    """Write the corpus folder whole (through a sibling temporary); one line if it cannot be."""
    from layerlab._io import FolderRefused
    from layerlab.corpus import build as corpus_mod

    try:
        return corpus_mod.write_folder(c, key, out)
    except FolderRefused as exc:
        raise _fail(str(exc.strerror)) from None
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise _fail(f"--out {out}: {where}{exc.strerror or exc} (nothing changed)") from None


@corpus_app.command("build")
def corpus_build(
    out: Path = typer.Option(
        paths.CORPUS_DIR, help="Output corpus folder (new, empty, or a corpus folder: replaced)."
    ),
    spec: Path = typer.Option(paths.CORPUS_SPEC_DIR, help="Spec folder (one YAML per domain)."),
) -> None:
    """Build documents.jsonl, tasks.jsonl, answer_key.jsonl, domains.json and a manifest."""
    from layerlab.corpus import build as corpus_mod

    _check_corpus_out(out)
    try:
        c, key = corpus_mod.build_from_specs(spec)
    except SpecError as exc:
        raise _spec_fail(exc, "spec problem(s); nothing written") from None
    manifest = _write_corpus(c, key, out)
    counts = manifest["counts"]
    typer.echo(
        f"wrote {out}: {counts['domains']} domains, {counts['policy_units']} policy units, "
        f"{counts['documents']} documents, {counts['tasks']} tasks, "
        f"{counts['foreign_documents']} other-tenant documents (spec {c.spec_hash[:12]})"
    )


@corpus_app.command("import")
def corpus_import(
    src: Path = typer.Argument(..., help="Your corpus: a .jsonl or .yaml file (format below)."),
    out: Path = typer.Option(..., help="Output corpus folder (new, empty, or a corpus folder)."),
) -> None:
    """Validate your own documents and questions and write a corpus folder,
    in the format `corpus build` writes, for any command's --corpus.

    \b
    JSONL, one record per line, four kinds (YAML: `corpus:` and lists
    `domains:`, `documents:`, `questions:` of the same records, no `kind`):
    {"kind": "corpus", "name": "acme", "tenant": "acme"}
    {"kind": "domain", "domain": "fleet", "title": "Vehicle fleet",
     "owner": "Fleet Office", "cue_words": ["vehicle", "mileage"]}
    {"kind": "document", "doc_id": "FL-7", "policy_id": "fleet-01",
     "domain": "fleet", "title": "Mileage rate", "text": "...",
     "status": "current", "effective_year": 2025, "version": 3,
     "access_scope": "all_staff"}
    {"kind": "question", "id": "fleet-01-q1", "question": "...?",
     "answer_kind": "money", "expected_answer": "$0.52",
     "required_doc_ids": ["FL-7"]}

    \b
    policy_id is <domain>-NN, question id <policy_id>-qN (both archived).
    Every policy: one current version, and another tenant's version (a
    document with another "tenant"; wrong_session serves it). A policy a
    question asks about: also a superseded version, same title, lower
    version (stale_index serves it). answer_kind: duration, money,
    percent, count, role, system. The expected answer is stated in a
    required (current) document, in neither the superseded nor the other
    tenant's version. Optional document fields: access_scope (all_staff),
    owner (the domain's), tenant (the corpus's).

    One line per problem (file:line: field: what was expected); nothing is
    written unless the whole file is valid. See README, "Your own documents".
    """
    from layerlab.corpus import userdocs

    _check_corpus_out(out)
    try:
        c, key = userdocs.import_corpus(src)
    except SpecError as exc:
        raise _spec_fail(exc, "problem(s); nothing written") from None
    manifest = _write_corpus(c, key, out)
    counts = manifest["counts"]
    typer.echo(
        f"wrote {out}: {counts['domains']} domains, {counts['policy_units']} policies, "
        f"{counts['documents']} documents, {counts['tasks']} questions, "
        f"{counts['foreign_documents']} other-tenant documents (source {c.spec_hash[:12]})"
    )


@audit_app.command("retriever")
def audit_retriever(
    corpus_dir: Path = typer.Option(paths.CORPUS_DIR, "--corpus", help="Built corpus folder."),
    scenarios_path: Path = typer.Option(
        paths.SCENARIO_SPEC, "--scenarios", help="Scenario DSL file."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    retriever: list[str] = typer.Option(
        None, "--retriever", help="Audit these retrievers instead (repeatable): registered "
        "names or your own, python:MODULE:FACTORY or langchain:MODULE:FACTORY.",
        callback=lambda vs: [_retriever_flag(v) for v in vs or ()],
    ),  # fmt: skip
) -> None:
    """Required-document recall and current-version preference for every retriever, under the
    clean, conflicting-evidence and corrupted-metadata conditions (paper Table 3, with its rows
    beyond the paper: the dense retrievers, when the dense extra is installed); with
    --retriever, for the retrievers given (a team's store asked for every document)."""
    import json

    from layerlab.reporting.format import terminal as report
    from layerlab.scoring import audit

    c, key = _load_corpus(corpus_dir)
    scen = _load_scenarios(scenarios_path)
    conditions = audit.conditions_from(c, scen)
    try:
        beyond = () if retriever else audit.beyond_paper()
        result = audit.audit(c, key, conditions, retriever or None, beyond)
    except ValueError as exc:  # a team's retriever that failed to index: one line
        raise _fail(str(exc)) from None
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

    from layerlab.harness import deterministic as harness
    from layerlab.scoring import audit

    c, key = _load_corpus(corpus_dir)
    scen = _load_scenarios(scenarios_path)
    wrong_session = audit.wrong_session_scenarios(scen)  # run here: the harness is above the audit
    records = harness.run_deterministic(c, key, wrong_session) if wrong_session else []
    result = audit.corpus_tells(c, key, scen, records)
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


@scenario_app.command("check")
def scenario_check(
    path: Path = typer.Argument(paths.SCENARIO_SPEC, help="Scenario DSL file."),
    roles: Path = typer.Option(
        None,
        "--roles",
        help="Also check this roles file against the scenarios (default: the committed "
        "roles.yaml when checking the committed scenarios).",
    ),
) -> None:
    """Validate a scenario file (and the roles that name its scenarios); one line per problem,
    exit 1 if any."""
    from layerlab.faults.roles import load_roles

    scen = _load_scenarios(path)
    if roles is None and Path(path).resolve() == paths.SCENARIO_SPEC.resolve():
        roles = paths.ROLE_SPEC
    if roles is not None:
        try:
            load_roles(roles, path)
        except SpecError as exc:
            raise _spec_fail(exc, "roles problem(s)") from None
    typer.echo(f"ok: {len(scen)} scenario(s) in {path}" + (f"; roles in {roles}" if roles else ""))


@scenario_app.command("list")
def scenario_list(
    path: Path = typer.Argument(paths.SCENARIO_SPEC, help="Scenario DSL file."),
) -> None:
    """Print Table 1: scenario, layer, what is injected, expected safe behaviour."""
    from layerlab.reporting.format import terminal as report
    from layerlab.reporting.paper.tables.benchmark import table1

    report.print_frame(table1(_load_scenarios(path)), "Scenarios (Table 1)")


@scenario_app.command("operators")
def scenario_operators() -> None:
    """List the registered fault operators: stage, layer, parameters, what intensity strikes."""
    from layerlab.faults.operators import OPERATORS
    from layerlab.faults.scenario import STRUCK

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
        typer.echo(f"{'':18} intensity λ: the share of {STRUCK.get(cls.stage, 'tasks')} struck")


@mitigation_app.command("list")
def mitigation_list(
    path: Path = typer.Argument(paths.MITIGATION_SPEC, help="Mitigations spec file."),
    kinds: bool = typer.Option(False, "--kinds", help="List the registered kinds instead."),
) -> None:
    """The mitigations (entries and stacks) of the spec: layers, stage, actions; or the kinds."""
    from layerlab.mitigations import KINDS
    from layerlab.reporting.format import terminal as report

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
    typer.echo(
        f"{len(spec.arms)} arms: {len(spec.contract_arms)} contract entries, {n} other entries, "
        f"{sum(a.is_stack for a in spec.arms.values())} stacks; `--kinds` lists the registered kinds"
    )
