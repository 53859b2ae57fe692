"""``layerlab conversations``: build the conversations from their specs into a chosen folder;
show one as the scripted user plays it (its public side only: the key is never printed)."""

from __future__ import annotations

from pathlib import Path

import typer

from layerlab import paths
from layerlab.cli.app import _check_out, _fail, _spec_fail, _usage, conversations_app
from layerlab.corpus.spec import SpecError


@conversations_app.command("build")
def conversations_build(
    out: Path = typer.Option(
        ..., help="Output folder (new, empty, or a conversations folder: replaced)."
    ),
    spec: Path = typer.Option(paths.CONVERSATION_SPEC, help="The conversation DSL (YAML)."),
    corpus_spec: Path = typer.Option(
        paths.CORPUS_SPEC_DIR, help="The corpus's spec folder (one YAML per domain)."
    ),
) -> None:
    """Write conversations.jsonl (what a system sees), conversation_key.jsonl (each turn's
    answer key, evaluator-only) and a manifest (counts, the clustering by policy, the specs'
    hashes). Same specs, same bytes."""
    from layerlab._io import FolderRefused
    from layerlab.corpus import conversations as cv

    if out.is_dir() or out.is_symlink():
        problem = cv.folder_problem(out)
        if problem:
            raise _fail(f"{out}: {problem}; nothing changed")
    _check_out(out)
    try:
        convs, key = cv.build_from_specs(corpus_spec, spec)
        hashes = cv.spec_hashes(corpus_spec, spec)
    except SpecError as exc:
        raise _spec_fail(exc, "spec problem(s); nothing written") from None
    except ValueError as exc:
        raise _fail(f"{spec}: {exc}; nothing written") from None
    try:
        m = cv.write_folder(convs, key, out, hashes)
    except FolderRefused as exc:
        raise _fail(str(exc.strerror)) from None
    n, cl = m["counts"], m["clusters"]
    lengths = sorted(int(k) for k in n["by_length"])
    typer.echo(
        f"wrote {out}: {n['conversations']} conversations of {lengths[0]}-{lengths[-1]} turns "
        f"({n['turns']} turns) over {n['domains']} domains; clustered by policy: "
        f"{cl['policies']} policies, {cl['with_second_policy']} conversations with a second one"
    )


@conversations_app.command("show")
def conversations_show(
    conversation: str = typer.Argument(..., help="A conversation id, e.g. returns-01-c1."),
    folder: Path | None = typer.Option(
        None, "--from", help="A conversations folder (default: built from the specs)."
    ),
    replies: str = typer.Option(
        "",
        help="The system's reply categories, comma-separated (answered, abstained, "
        "clarification): the user's turns for them. Default: every branch shown.",
    ),
) -> None:
    """Print a conversation's turns as the scripted user says them, with the documents a turn
    publishes. Never its answer key."""
    from layerlab.corpus import conversations as cv
    from layerlab.corpus.script import script

    try:
        convs = cv.load(folder) if folder else cv.build_from_specs()[0]
    except (OSError, ValueError, SpecError) as exc:
        raise _fail(str(exc)) from None
    found = {c.conversation_id: c for c in convs}
    if conversation not in found:
        near = sorted(found)[:3]
        raise _usage(f"conversation {conversation!r}: not found (ids look like {', '.join(near)})")
    c = found[conversation]
    cats = [x.strip() for x in replies.split(",") if x.strip()]
    said = None
    if cats:
        bad = [x for x in cats if x not in cv.REPLY_CATEGORIES]
        if bad:
            raise _usage(f"--replies {bad[0]!r}: expected {', '.join(cv.REPLY_CATEGORIES)}")
        try:
            said = script(c, cats)  # type: ignore[arg-type]
        except ValueError as exc:
            raise _usage(f"--replies: {exc}") from None
    typer.echo(f"{c.conversation_id} ({c.domain}; policies {', '.join(c.policy_ids)})")
    for t in c.turns:
        for d in t.publishes:
            typer.echo(f"  published before turn {t.index}: {d.doc_id} (retires "
                       f"{', '.join(t.retires)}, effective {d.effective_year})")  # fmt: skip
        if said is not None:
            typer.echo(f"turn {t.index}: {said[t.index]}")
        elif t.branches:
            for cat, text in sorted(t.branches.items()):
                typer.echo(f"turn {t.index} [after {cat}]: {text}")
        else:
            typer.echo(f"turn {t.index}: {t.text}")
