"""``layerlab conversations``: build the conversations from their specs into a chosen folder;
show one as the scripted user plays it (its public side only: the key is never printed).
``layerlab run conversations``: play them against reference readers, local models
(:mod:`~layerlab.harness.convmodel`) and a team's conversational targets."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import typer

from layerlab import paths
from layerlab.cli.app import _check_out, _fail, _spec_fail, _usage, conversations_app, run_app
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


@run_app.command("conversations")
def run_conversations(
    out: Path = typer.Option(
        ..., help="Output folder (new, empty, or a conversational run's: replaced)."
    ),
    model: list[str] = typer.Option(
        [], "-m", "--model",
        help="A conversational reader (repeatable): layerlab/extractive or layerlab/cautious "
        "(deterministic baselines, not models), or a local model local/NAME of "
        "data/specs/models.yaml (a chat chain over it; greedy; replies cached).",
    ),
    target: list[str] = typer.Option(
        [], "--target", metavar="MODULE:FN|URL",
        help="Your conversational system (repeatable): a Python function of a "
        "ConversationRequest, or a class with answer(request) (python:MODULE:FN too), or "
        "langchain:MODULE:FACTORY (a chat chain with message history), "
        "llamaindex:MODULE:FACTORY (a chat engine), langgraph:MODULE:FACTORY (a LangGraph "
        "graph over layerlab's SQLite checkpointer and store), or an http(s):// URL (a service "
        "POSTed each turn).",
    ),
    target_setting: list[str] = typer.Option(
        [], "--target-setting", metavar="KEY=VALUE", help="A setting the targets get (repeatable)."
    ),
    scenario: list[str] = typer.Option(
        [], "--scenario",
        help="A conversational scenario (repeatable; default: all of scenarios_conversation.yaml).",
    ),
    intensity: str = typer.Option(
        None, "--intensity", metavar="L,L,...",
        help="Fault intensities, e.g. 0.25,1: each faulted scenario at each (the share of "
        "conversations it strikes); default 1.",
    ),
    epochs: int = typer.Option(1, min=1, max=20, help="Times each conversation is played."),
    turn_timeout: float = typer.Option(
        60.0, "--turn-timeout", metavar="SECONDS",
        help="Seconds a system has for one turn; a turn not answered by then fails as "
        "'timeout' and the conversation goes on.",
    ),
    folder: Path | None = typer.Option(
        None, "--from", help="A conversations folder (default: built from the specs)."
    ),
    per_domain: int = typer.Option(
        None, "--per-domain", min=1,
        help="Only the first K conversations of each domain (in the folder's order).",
    ),
    cache_dir: Path | None = typer.Option(
        None, "--cache-dir", help="A local model's reply cache (default: the user cache's)."
    ),
    timeout: float = typer.Option(
        180.0, "--timeout", min=1.0, help="Seconds a local model's call may take."
    ),
    mitigation: list[str] = typer.Option(
        [], "--mitigation",
        help="A session mitigation's arm (repeatable) of data/specs/mitigations_conversation.yaml:"
        " none (the baseline), session_scoped_memory, update_invalidation, history_summarisation;"
        " default none alone. With the baseline and another arm, the specificity matrix is "
        "printed.",
    ),
    matrix_outcome: str = typer.Option(
        "safe_resolution", "--matrix-outcome",
        help="The matrix's outcome: safe_resolution (the judged outcome, as Table 10's) or "
        "success (S).",
    ),
    matrix_unit: str = typer.Option(
        "turn", "--matrix-unit",
        help="The matrix's unit: turn (each turn, paired by conversation and turn index, "
        "clustered by conversation) or conversation (every turn of it).",
    ),
) -> None:
    """Play the conversations turn by turn against each system under each scenario; write
    turns.jsonl (a row per scored turn), summary.json and a manifest; print S by turn index,
    the cross-session leak with exact intervals, and where each system breaks."""
    from layerlab._io import FolderRefused
    from layerlab.corpus import conversations as cv
    from layerlab.corpus.build import load
    from layerlab.faults.scenario import conversation_scenarios, parse_intensities
    from layerlab.harness import conversation as hc
    from layerlab.harness.targets.spec import TargetError, parse_settings
    from layerlab.reporting.format.convtext import lines

    if not model and not target:
        raise _usage("name a system: -m layerlab/extractive, or --target MODULE:FN")
    if not 0 < turn_timeout < float("inf"):
        raise _usage(f"--turn-timeout {turn_timeout:g}: expected seconds, a number greater than 0")
    if out.is_dir() or out.is_symlink():
        problem = hc.folder_problem(out)
        if problem:
            raise _fail(f"{out}: {problem}; nothing changed")
    _check_out(out)
    known = conversation_scenarios()
    names = list(dict.fromkeys(scenario)) or list(known)
    bad = [n for n in names if n not in known]
    if bad:
        raise _usage(f"--scenario {bad[0]!r}: not a conversational scenario (expected one of "
                     f"{', '.join(known)})")  # fmt: skip
    try:
        doses = parse_intensities(intensity) if intensity else (1.0,)
    except ValueError as exc:
        raise _usage(f"--intensity: {exc}") from None
    from layerlab.analysis.convmatrix import OUTCOMES, UNITS
    from layerlab.mitigations.session import load_session_mitigations, session_arms

    if matrix_outcome not in OUTCOMES:
        raise _usage(f"--matrix-outcome {matrix_outcome!r}: expected one of {', '.join(OUTCOMES)}")
    if matrix_unit not in UNITS:
        raise _usage(f"--matrix-unit {matrix_unit!r}: expected one of {', '.join(UNITS)}")

    try:
        arms = session_arms(mitigation)
    except KeyError as exc:
        raise _usage(f"--mitigation: {exc.args[0]}") from None
    except SpecError as exc:
        raise _spec_fail(exc, "spec problem(s); nothing run") from None
    chosen = list({sc.name: sc for n in names for sc in (
        [known[n]] if not known[n].operators else [known[n].at(d) for d in doses])}.values())  # fmt: skip
    from layerlab.harness.live.settings import LiveRunError
    from layerlab.models.local import is_local

    local = [m for m in dict.fromkeys(model) if is_local(m)]
    try:
        convs = cv.load(folder) if folder else cv.build_from_specs()[0]
        key = cv.load_key(folder) if folder else cv.build_from_specs()[1]
        corpus = load()
    except (OSError, ValueError, SpecError) as exc:
        raise _fail(str(exc)) from None
    if per_domain:
        convs = _per_domain(convs, per_domain)
    systems: list[hc.System] = []
    try:
        settings = parse_settings(target_setting)
        systems += [hc.reference(m) for m in model if m not in local]
        for t in target:
            systems.append(hc.target(t, settings))
    except (ValueError, TargetError) as exc:
        hc.close_all(systems)
        raise _usage(str(exc)) from None
    models: dict[str, Any] = {}
    try:
        with contextlib.ExitStack() as stack:
            readers = _model_readers(stack, local, cache_dir, timeout)
            systems = [*(hc.System("local", m, r.answer, timed=False)
                         for m, (r, _) in readers.items()), *systems]  # fmt: skip
            try:
                records = hc.run(systems, convs, chosen, hc.Setting(corpus, key), epochs,
                                 turn_timeout, progress=lambda ln: typer.echo(ln, err=True),
                                 arms=arms)  # fmt: skip
            except LiveRunError as exc:
                raise _fail(f"{exc}; nothing written (a rerun asks only what is not cached)") from None
            models = {m: {**prov, "calls": r.facts(), "temperature": 0.0,
                          "prompt": r.params["prompt"]} for m, (r, prov) in readers.items()}  # fmt: skip
    finally:
        hc.close_all(systems)
    manifest = {"systems": [s.model for s in systems], "scenarios": [s.name for s in chosen],
                "epochs": epochs, "turn_timeout_s": turn_timeout, "conversations": len(convs),
                "per_domain": per_domain, "mitigations": [a.name for a in arms],
                **cv.spec_hashes(),
                **({"local_models": models} if models else {})}  # fmt: skip
    try:
        summary = hc.write_run(out, records, manifest)
    except FolderRefused as exc:
        raise _fail(str(exc.strerror)) from None
    for line in lines(summary):
        typer.echo(line)
    names = [a.name for a in arms]
    spec = load_session_mitigations()
    if spec.baseline in names and len(names) > 1:
        from layerlab.analysis.convmatrix import matrices
        from layerlab.reporting.format.convtext import matrix_lines

        try:
            mxs = matrices(records, spec.book(), matrix_outcome, unit=matrix_unit)
        except ValueError as exc:
            raise _fail(f"the specificity matrix: {exc} (the run is written)") from None
        for line in matrix_lines(mxs, matrix_outcome, matrix_unit):
            typer.echo(line)
    typer.echo(f"wrote {out}: {len(records)} turns of {len(convs)} conversations "
               f"({len(systems)} system(s) x {len(arms)} arm(s) x {len(chosen)} scenario(s) x "
               f"{epochs} epoch(s))")  # fmt: skip


def _model_readers(stack: contextlib.ExitStack, local: list[str], cache_dir: Path | None,
                   timeout: float) -> dict[str, Any]:  # fmt: skip
    """The chat chain of each ``local/NAME`` model, its server started in ``stack``."""
    from layerlab.harness import convmodel
    from layerlab.harness.live.settings import LiveRunError

    readers: dict[str, Any] = {}
    for m in local:
        try:
            readers[m] = stack.enter_context(convmodel.served(
                m, cache_dir, timeout, say=lambda line: typer.echo(line, err=True)))  # fmt: skip
        except LiveRunError as exc:
            raise _fail(str(exc)) from None
    return readers


def _per_domain(convs: list[Any], k: int) -> list[Any]:
    """The first ``k`` conversations of each domain, in their order."""
    seen: dict[str, int] = {}
    out = []
    for c in convs:
        seen[c.domain] = seen.get(c.domain, 0) + 1
        if seen[c.domain] <= k:
            out.append(c)
    return out
