"""``layerlab recompute|reproduce|explore|report|view|dictionary``: what a reader sees."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from layerlab import paths

if TYPE_CHECKING:  # the CLI imports heavy modules lazily, inside each command
    pass


from layerlab.cli.app import (
    _check_out,
    _check_out_file,
    _fail,
    _load_corpus,
    _retriever_flag,
    _usage,
    app,
)


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
        None,
        "--policy-level/--task-level",
        help="Resample policies (all question variants together) or tasks. Default: policies "
        "when a policy holds several question variants, else tasks. Task level on such a run "
        "ignores that a policy's variants share an effect: a null whose effect three variants "
        "share was then called specific or over-broad in 6.4-6.6% of archives at a nominal 5% "
        "(policy level: 2.5-4.7%; docs/statistics.md).",
    ),
    design: str = typer.Option(
        "auto",
        help="Bootstrap design: auto (crossed; tasks only below 5 units), crossed, nested, tasks.",
    ),
    matrix: list[Path] = typer.Option(
        None,
        "--matrix",
        help="Mitigation archive(s) for Table 10 (repeatable; default: ARCHIVE... when they hold "
        "mitigation arms, else data/archives/mitigations).",
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

    from layerlab.analysis import stats
    from layerlab.archive import ArchiveError
    from layerlab.reporting.paper.recompute import recompute

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
            matrix_archives=None if no_matrix else (matrix or _default_matrix(archives)),
            allow_partial=allow_partial,
            allow_mixed=allow_mixed,
            design=design,  # type: ignore[arg-type]
        )
    except (ArchiveError, ValueError) as exc:
        raise _fail_arms(exc) from None
    if as_json:
        typer.echo(json.dumps(head, indent=2, sort_keys=True))
    else:
        from layerlab.reporting.format import terminal as report

        report.print_recompute(head)
        typer.echo(f"wrote {len(head['written'])} files to {out}")
    if head.get("skipped"):
        typer.echo(f"note: {head['skipped']}")
    for stamp in head["stamps"]:
        typer.echo(f"warning: tables stamped {stamp}", err=True)
    if head["provider_error_records"]:
        typer.echo(
            f"warning: {head['provider_error_records']} of {head['records']} records are "
            "provider_error (counted as failures); see each run's manifest errors",
            err=True,
        )


def _fail_arms(exc: Exception) -> typer.Exit:
    """Exit 1 with the error; exit 2 (bad input) for an arm the archives do not define."""
    from layerlab.mitigations.book import UnknownArmError

    if isinstance(exc, UnknownArmError):
        return _usage(f"{exc} (nothing written)")
    return _fail(f"{exc} (nothing written)")


def _default_matrix(archives: list[Path]) -> list[Path]:
    """Table 10's archives when ``--matrix`` is not given: the given archives themselves when
    they hold a mitigation arm beyond the contract pair (a user's ``run live --mitigation ...``),
    else the committed deterministic matrix."""
    from layerlab.analysis import stats

    arms = set(stats.records_frame(archives)[stats.ARM])
    if arms - set(stats.contract_arms()):
        return list(archives)
    return [paths.ARCHIVES / "mitigations"]


@app.command("compare")
def compare_cmd(
    run: Path = typer.Argument(..., metavar="RUN", help="Your run folder (or archive file)."),
    others: list[Path] = typer.Argument(
        None,
        metavar="[RUN|ARCHIVE...]",
        help="Runs or archives to set it beside (default: the committed archive of the same "
        "local model and the reference agents).",
    ),
    outcome: str = typer.Option(
        None,
        "--outcome",
        help="Binary archive label compared (default success; e.g. safe_resolution). Not with "
        "--matrix, which judges each scenario by its own outcome.",
    ),
    n_boot: int = typer.Option(2_000, "--n-boot", min=100, help="Bootstrap resamples."),
    seed: int = typer.Option(0, help="Seed of the bootstrap's random generator."),
    matrix: bool = typer.Option(
        False, "--matrix", help="Instead: the mitigation matrix (Table 10) of RUN's own arms."
    ),
    no_paper: bool = typer.Option(False, "--no-paper", help="Leave out the paper's figures."),
    json_out: Path = typer.Option(
        None, "--json", help="Also write the comparison as JSON to this file."
    ),
) -> None:
    """Set RUN beside other runs, the committed archives and the paper: one unit beside one unit
    on their common tasks, scenarios and arms (what was dropped is stated), each side's rate and
    the paired difference with its interval; reference agents and models never pooled."""
    import json

    from layerlab._io import atomic_write_text
    from layerlab.analysis import compare
    from layerlab.reporting.format import cells, terminal
    from layerlab.reporting.format.display import margin

    if json_out is not None:
        _check_out_file(json_out, "--json")
    try:
        if matrix:
            if outcome is not None:
                raise _usage(f"--outcome {outcome}: not with --matrix (the matrix judges each "
                             "scenario by its own outcome: S where answerable, safe resolution "
                             "where unsafe)")  # fmt: skip
            doc = {}
            for name, (mx, df) in compare.matrix_blocks(run, n_boot=n_boot, seed=seed).items():
                terminal.print_wide(
                    cells.matrix(mx, df), f"Mitigation matrix of {run} ({name})"
                )
                typer.echo(f"note: {mx.note}")
                outs = compare.matrix_outcomes(mx, df).to_dict(orient="records")
                doc[name] = {"summary": mx.summary.to_dict(orient="records"), "on_target": outs}
                typer.echo(f"verdicts at {margin(mx.delta)}; {mx.methods}")
            typer.echo(f"note: {compare.MATRIX_OUTCOME_NOTE}")
            level = compare.verdict_level(run)[1]
            if level:
                typer.echo(f"note: {level}")
            if json_out is not None:
                atomic_write_text(json_out, json.dumps(doc, indent=2, sort_keys=True, default=str))
            return
        rep = compare.compare(
            run, others or (), outcome=outcome or "success", n_boot=n_boot, seed=seed,
            paper=not no_paper,
        )  # fmt: skip
    except (compare.CompareError, ValueError) as exc:
        raise _fail_arms(exc) from None
    for c in rep.comparisons:
        terminal.print_wide(cells.comparison(c), cells.comparison_title(c))
        for line in c.dropped:
            typer.echo(f"  dropped: {line}")
    if rep.paper is not None:
        terminal.print_wide(cells.paper_beside(rep.paper), "Beside the paper's stated figures")
        typer.echo(compare.PAPER_NOTE)
    for note in rep.notes:
        typer.echo(f"note: {note}")
    if rep.comparisons:
        typer.echo(
            f"{rep.outcome} in %, 95% intervals (rates: Clopper-Pearson clustered by task; differences this run "
            f"minus the other, paired by task: {rep.comparisons[0].note})"
        )
    if json_out is not None:
        atomic_write_text(json_out, json.dumps(rep.as_dict(), indent=2, sort_keys=True) + "\n")
        typer.echo(f"wrote {json_out}")


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
    paths.require_repo("layerlab reproduce")
    from layerlab.reporting.paper import reproduce

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
    for w in written:  # what changed; the unchanged are counted (the list is in git status)
        if w.status != "unchanged":
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

    from layerlab.reporting.paper import reproduce

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
        typer.echo(
            f"quick: {skipped} left out (no table or figure); fewer bootstrap resamples", err=True
        )
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
    model: str = typer.Option(
        None, "--model", help="The record's PROVIDER/MODEL (as the viewer names it): a reference "
        "agent's path is followed; a real model's reply is not in the archive, and the path says so.",
    ),  # fmt: skip
    corpus_dir: Path = typer.Option(paths.CORPUS_DIR, "--corpus", help="Built corpus folder."),
    retriever: str = typer.Option(
        None, "--retriever", help="Registered retriever (default: the reported one; a live "
        "run's manifest records its own, e.g. bm25) or your own: python:MODULE:FACTORY, "
        "langchain:MODULE:FACTORY.", callback=_retriever_flag,
    ),  # fmt: skip
) -> None:
    """Print one record's whole path: fault, retrieval, payloads, contract, reader, scores, diagnosis."""
    from layerlab.mitigations import load_mitigations
    from layerlab.reporting.records import explore
    from layerlab.system.reader import READERS

    try:
        mode = mode or load_mitigations().baseline
        load_mitigations().arm(mode)
    except KeyError as exc:
        raise _fail(f"--mitigation: {exc.args[0]}") from None
    reader, unfollowed = explore.reader_for(model, reader)
    try:
        READERS.lookup(reader)
    except KeyError as exc:
        raise _fail(f"--reader: {exc.args[0]}") from None
    c, key = _load_corpus(corpus_dir)
    try:
        t = explore.trace(task, scenario, mode, reader, corpus=c, key=key, retriever=retriever)
    except KeyError as exc:
        raise _fail(str(exc.args[0])) from None
    except ValueError as exc:  # a team's retriever that failed to index: one line
        raise _fail(str(exc)) from None
    typer.echo(explore.render(t, unfollowed=unfollowed))


@app.command("report")
def report_cmd(
    inputs: list[Path] = typer.Argument(
        ..., metavar="RUN_OR_ARCHIVE...",
        help="Run folders or archive files (records or study), or conversational run folders.",
    ),
    out: Path = typer.Option(Path("report.html"), "--out", help="The HTML file to write."),
    title: str = typer.Option("LayerRAG-Bench report", help="Page title."),
    sample_log: Path = typer.Option(
        None, "--sample-log", help="The run's private sample log: a failing fault-free layer's "
        "finding then says its dominant failure (counts only).",
    ),  # fmt: skip
) -> None:
    """One self-contained HTML page: per-model results with intervals, reference agents as a
    separate baseline, a model x scenario breakdown, diagnostics, figures and provenance; for
    conversational runs, S by turn index, the cross-session leak and where each system breaks."""
    from layerlab.reporting.run import report

    _check_out_file(out)
    try:
        report.write(inputs, out, title, sample_log)
    except (report.ReportError, ValueError) as exc:
        raise _fail(f"{exc} (nothing written)") from None
    typer.echo(
        f"wrote {out} ({out.stat().st_size // 1024} KiB, self-contained: open it in a browser)"
    )


@app.command("view")
def view_cmd(
    inputs: list[Path] = typer.Argument(
        ...,
        metavar="LOG_OR_ARCHIVE...",
        help="Sample logs (--sample-log), run folders or archives.",
    ),
    out: Path = typer.Option(Path("view.html"), "--out", help="The HTML file to write."),
    evidence: bool = typer.Option(
        True,
        "--evidence/--no-evidence",
        help="Archived records: show the evidence path recomputed from the corpus (checked "
        "against each record's prompt hash or tool calls); --no-evidence: labels only.",
    ),
) -> None:
    """A self-contained HTML viewer of records: choose run, model, scenario and mitigation; filter
    by outcome and diagnostic; verdict first, the path below. From a sample log it is private."""
    from layerlab.reporting.records import viewer

    _check_out_file(out)
    try:
        _, address = viewer.write_view(inputs, out, evidence=evidence)
    except viewer.ViewError as exc:
        raise _fail(f"{exc} (nothing written)") from None
    typer.echo(f"wrote {out} ({out.stat().st_size // 1024} KiB)")
    typer.echo(f"open: {address}")


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
    from layerlab._io import atomic_write_text
    from layerlab.reporting.records import dictionary

    if not check:
        _check_out_file(out)
    problems = dictionary.missing_entries()
    for p in problems:
        typer.echo(p, err=True)
    if problems:
        raise _fail(
            f"{len(problems)} schema entries without a description (layerlab/reporting/records/dictionary.py)"
        )
    text = dictionary.render()
    if check:
        current = out.read_text(encoding="utf-8") if out.exists() else None
        if current != text:
            raise _fail(f"{out} is stale: run `layerlab dictionary`")
        typer.echo(f"ok: {out} is current")
        return
    atomic_write_text(out, text)
    typer.echo(f"wrote {out}")
