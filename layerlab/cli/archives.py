"""``layerlab archive check|migrate|merge``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from layerlab import paths

if TYPE_CHECKING:  # the CLI imports heavy modules lazily, inside each command
    pass


from layerlab.cli.app import (
    EXIT_INCOMPLETE,
    _check_out,
    _fail,
    archive_app,
)


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
            how = rep.get("note") or "continue it with --resume"
            typer.echo(
                f"PARTIAL {p}: {rep['records']} of {rep['expected_records'] or '?'} records, "
                f"run {rep['run_id']} did not finish ({how})"
            )
        else:
            typer.echo(f"ok   {p}: {rep['records']} records, run {rep['run_id']}{_agent(rep)}")
    if bad:
        raise typer.Exit(1)
    if partial:
        raise typer.Exit(EXIT_INCOMPLETE)


def _agent(rep: dict) -> str:
    """An agent run's mode and step table, as ``archive check`` states it (else nothing)."""
    a = rep.get("agent")
    if not a:
        return ""
    return (
        f"; agent mode ({a['protocol']}, up to {a['max_steps']} tool-calling turns), "
        f"agent.parquet {a['rows']} rows"
    )


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
    """Combine runs through their manifests (a run given twice counts once).

    --out must be new, empty or an earlier merge of the same runs (replaced whole); shards merge
    only with their own run's shards. A refused, failed or killed merge changes nothing.
    """
    from layerlab._io import FolderRefused
    from layerlab.archive import ArchiveError, merge

    _check_out(out)
    try:
        m = merge(sources, out, allow_mixed=allow_mixed)
    except ArchiveError as exc:
        raise _fail(f"{exc} (nothing written)") from None
    except FolderRefused as exc:
        raise _fail(f"--out {exc.strerror}") from None
    typer.echo(f"merged {len(m['sources'])} run(s), {m['records']} records -> {out}")
    if "note" in m:
        typer.echo(f"note: {m['note']}")
