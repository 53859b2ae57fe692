"""``layerlab cache check|repair|clear``: the reply cache's health, repair and removal."""

from __future__ import annotations

from pathlib import Path

import typer

from layerlab.cli.app import _fail, cache_app

_DIR_HELP = (
    "Reply cache folder (default: $LAYERLAB_CACHE_DIR, else $XDG_CACHE_HOME/layerlab/replies)."
)


def _folder(cache_dir: Path | None) -> Path:
    from layerlab.models.cache import default_cache_dir

    return Path(cache_dir) if cache_dir is not None else default_cache_dir()


def _flag(cache_dir: Path | None) -> str:
    from layerlab.models.cachecheck import flag_for

    return flag_for(cache_dir)


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"


@cache_app.command("check")
def cache_check(
    cache_dir: Path = typer.Option(None, "--cache-dir", help=_DIR_HELP),
) -> None:
    """Report the cache's location, entries, size and integrity (a full check).

    Exit 1 on a problem (corrupt, unreadable, read-only, locked, or --cache-dir a file).
    """
    from layerlab.models.cachecheck import inspect

    folder = _folder(cache_dir)
    rep = inspect(folder)
    state = rep["state"]
    if state == "misplaced":
        raise _fail(f"{_flag(cache_dir)} {folder}: {rep['detail']}; expected a reply cache folder")
    if state == "missing" and not rep["legacy_entries"]:
        typer.echo(f"ok   no reply cache at {folder} (a run creates it)")
        return
    entries = rep["entries"]
    counted = f"{entries} entries" if entries is not None else "entries unknown"
    if rep["legacy_entries"]:
        counted += f" + {rep['legacy_entries']} in the older one-file-per-reply layout"
    line = f"{folder}: {counted}, {_size(rep['bytes'])}"
    for p in rep["set_aside"]:
        typer.echo(f"note: a damaged copy set aside earlier: {p.name} (delete it when done)")
    if state in ("ok", "missing"):
        typer.echo(f"ok   {line}, integrity ok")
        return
    fix = {
        "corrupt": "run `layerlab cache repair` to salvage its readable entries",
        "unreadable": "fix its permissions",
        "readonly": "runs use it for cached replies only",
        "locked": "another process holds it; runs wait for it",
    }[state]
    typer.echo(f"FAIL {line}: {state} ({rep['detail']}); {fix}", err=True)
    raise typer.Exit(1)


@cache_app.command("repair")
def cache_repair(
    cache_dir: Path = typer.Option(None, "--cache-dir", help=_DIR_HELP),
) -> None:
    """Salvage a damaged cache's readable entries into a fresh cache.

    The damaged database is kept beside it as replies.sqlite3.corrupt-<UTC time>; a healthy
    cache is left as it is.
    """
    from layerlab.models.cachecheck import CacheError, repair

    folder = _folder(cache_dir)
    if folder.exists() and not folder.is_dir():
        raise _fail(
            f"{_flag(cache_dir)} {folder}: a file, not a folder; expected a reply cache folder"
        )
    try:
        rep = repair(folder)
    except CacheError as exc:
        raise _fail(str(exc)) from None
    if not rep["repaired"]:
        what = "no reply cache" if rep["state"] != "ok" else "intact"
        typer.echo(f"ok   {folder}: {what}; nothing to repair")
        return
    typer.echo(
        f"repaired {folder}: {rep['detail']}; {rep['saved']} readable entries kept in a fresh "
        f"cache, the damaged one set aside as {rep['aside'].name}"
    )


@cache_app.command("clear")
def cache_clear(
    cache_dir: Path = typer.Option(None, "--cache-dir", help=_DIR_HELP),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
) -> None:
    """Delete the cache after confirmation (--yes: without asking).

    Deletes its database, older-layout entries and damaged copies set aside: the next run asks
    every call again.
    """
    from layerlab.models.cachecheck import CacheError, clear, inspect

    folder = _folder(cache_dir)
    rep = inspect(folder, write_probe=False)  # read only: a "no" leaves every byte as it was
    if rep["state"] == "misplaced":
        raise _fail(f"{_flag(cache_dir)} {folder}: {rep['detail']}; expected a reply cache folder")
    held = (rep["entries"] or 0) + rep["legacy_entries"]
    if rep["state"] == "missing" and not (
        rep["legacy_entries"] or rep["set_aside"] or rep["leftovers"]
    ):
        typer.echo(f"ok   no reply cache at {folder}; nothing to delete")
        return
    if not yes:
        try:
            sure = typer.confirm(
                f"delete the reply cache {folder} ({held} entries, {_size(rep['bytes'])})?"
            )
        except typer.Abort:  # no answer (stdin closed)
            sure = False
        if not sure:
            raise _fail("cache clear: not confirmed, nothing deleted (--yes skips the question)")
    try:
        n = clear(folder)
    except CacheError as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"deleted {n} file(s) of the reply cache {folder}")
