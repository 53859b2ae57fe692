"""``layerlab report`` on conversational runs: one self-contained HTML page.

A conversational run folder (``layerlab run conversations --out ...``: ``turns.jsonl``,
``summary.json``, a manifest whose ``run`` is ``conversations``) or a committed conversational
archive (the same rows as ``turns.parquet``) is its own kind of input: the record report
(:mod:`layerlab.reporting.run.report`) hands such inputs here. The page holds, per run: where each
system breaks (:func:`~layerlab.reporting.format.convtext.finding`), S by turn index (the
figure, one panel per system, and a table per system), the cross-session leak over turns and over
conversations with exact intervals beside S, safe resolution and GF, the session mitigations'
specificity matrix when the run played them beside the baseline (Table A9's table for the run),
and the run's provenance
(systems, scenarios, epochs, the specs' hashes, the files' checksums, a local model's file,
runtime and calls). The rows are checked against the manifest's checksums before anything is
shown. Archives hold no prose or answers, so neither does the page; the same inputs give the same
bytes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from layerlab import __version__
from layerlab._io import sha256_file
from layerlab.analysis.conversations import summarise, turn_rates
from layerlab.archive import turnrecords
from layerlab.archive.turnrecords import NONE
from layerlab.reporting.format import convtext, page
from layerlab.reporting.format.display import REFERENCE_AGENT, unit_kind

LEAD = (
    "Every turn is scored against its own key: S = E ∧ R ∧ G ∧ V (strict success), safe "
    "resolution = S except on a turn an unanswerable scenario's fault struck (there an abstention "
    "or a clarification request is safe), GF = grounded ∧ ¬S. A conversation succeeds when every "
    "turn does. The cross-session leak (a reply that carries another user's conversation: a "
    "document or a value that reached it only from another user's session) is reported apart, "
    "over turns and over conversations, with exact (Clopper–Pearson) 95% intervals."
)
REFERENCE_NOTE = (
    "layerlab/extractive and layerlab/cautious are the conversational reference readers: "
    "deterministic baselines keyed on the conversations' wording, not models; never pooled with "
    "models."
)
MATRIX_NOTE = (
    "Per system and arm, the change in the share of turns safely resolved against the baseline "
    "arm (none) under each scenario, pp with its 95% interval (turns paired by conversation and "
    "turn index, resampled by conversation; * the arm's targets), the smallest target gain and "
    "the verdict by Table 10's rule; a system's verdicts are never pooled with another's."
)


def _manifest(folder: Path) -> dict[str, Any] | None:
    try:
        m = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return m if isinstance(m, dict) else None


def is_conversational(path: Path | str) -> bool:
    """A conversational run folder or archive: its manifest says ``run: conversations``."""
    p = Path(path)
    m = _manifest(p) if p.is_dir() else None
    return m is not None and m.get("run") == "conversations"


def conversational(paths_: Sequence[Path | str]) -> bool:
    """Whether the report's inputs are conversational runs (all of them); ValueError when they
    mix conversational runs with record archives (each kind has its own page)."""
    kinds = {is_conversational(p) for p in paths_}
    if len(kinds) > 1:
        raise ValueError("conversational runs and record archives given together: report each "
                         "kind on its own page (two layerlab report commands)")  # fmt: skip
    return kinds == {True}


def read(folder: Path) -> tuple[list[Any], dict[str, Any]]:
    """A conversational run's turn records and manifest, its rows checked against the
    manifest's checksums (a packed archive: :func:`~layerlab.archive.turnrecords.check_packed`)."""
    m = _manifest(folder)
    if m is None:
        raise ValueError(f"{folder / 'manifest.json'}: missing or not JSON")
    if (folder / turnrecords.PARQUET).is_file():
        return turnrecords.check_packed(folder), m
    recs = turnrecords.read(folder)
    want = (m.get("files") or {}).get(turnrecords.FILE)
    if sha256_file(folder / turnrecords.FILE) != want:
        raise ValueError(f"{folder / turnrecords.FILE}: not the file the manifest lists (checksum "
                         "differs); rerun layerlab run conversations")  # fmt: skip
    return recs, m


def _provenance(folder: Path, m: dict[str, Any]) -> str:
    keys = ("systems", "scenarios", "epochs", "conversations", "per_domain", "spec_hash",
            "conversation_spec_hash", "turn_schema_version", "layerlab_version")  # fmt: skip
    items = [(k, ", ".join(map(str, m[k])) if isinstance(m[k], list) else m[k])
             for k in keys if m.get(k) is not None]  # fmt: skip
    items += [(f"sha256 {name}", digest) for name, digest in sorted((m.get("files") or {}).items())]
    if (folder / turnrecords.PARQUET).is_file():
        items.append((f"sha256 {turnrecords.PARQUET}", sha256_file(folder / turnrecords.PARQUET)))
    parts = [page.kv_table(items)]
    for model, prov in sorted((m.get("local_models") or {}).items()):
        shown = [(k, json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else v)
                 for k, v in sorted(prov.items()) if k not in ("packages", "runtime_build")]  # fmt: skip
        parts.append(page.details(f"{model}: the local model", page.kv_table(shown)))
    return "\n".join(parts)


def _run_parts(folder: Path, recs: list[Any], m: dict[str, Any]) -> dict[str, list[str]]:
    """The parts of each section for one run."""
    summary = summarise(recs)
    head = f"<h3>{page.esc(folder.name)}</h3>"
    finds = [convtext.finding(mo, s, c) for mo, cells in summary.items() for s, c in cells.items()]
    parts: dict[str, list[str]] = {
        "findings": [head, "<ul>" + "".join(f"<li>{page.esc(x)}</li>" for x in finds) + "</ul>"],
        "by_turn": [head],
        "leak": [head, page.table(convtext.cells_table(summary), nowrap=True)],
        "provenance": [page.details(str(folder), _provenance(folder, m), open_=True)],
    }
    try:
        from layerlab.reporting.paper import figures
    except ModuleNotFoundError:  # installed without the figure stack: the tables alone
        figures = None  # type: ignore[assignment]
    if figures is not None:
        fig = figures.conversations_by_turn(turn_rates(recs), f"S by turn index: {folder.name}")
        parts["by_turn"].append(page.figure(
            fig, "One panel per system, a line per scenario; bars are exact 95% intervals over "
            "the conversations with a turn at that index (n under the axis).", "S by turn index"))  # fmt: skip
    for model, cells in summary.items():
        parts["by_turn"].append(f"<h4>{page.esc(model)}</h4>")
        parts["by_turn"].append(page.table(convtext.by_turn_table(cells), nowrap=True))
    parts["mitigations"] = [head, *_matrix(recs)]
    return parts


def _matrix(recs: list[Any]) -> list[str]:
    """The session mitigations' specificity matrix of a run that played them (Table A9's table
    for this run), else a line saying it played none."""
    if len({r.mitigation for r in recs}) < 2 or NONE not in {r.mitigation for r in recs}:
        return [page.para("This run played no session mitigation beside the baseline "
                          "(`layerlab run conversations --mitigation none --mitigation ...`).",
                          "muted")]  # fmt: skip
    from layerlab.reporting.paper.tables.conversations import conversations_matrix

    table = conversations_matrix({"run": recs}).drop(columns=["block"])
    return [page.para(MATRIX_NOTE, "muted"), page.table(table, nowrap=True)]


SECTIONS = (  # in page order
    ("findings", "Where each system breaks"),
    ("by_turn", "S by turn index"),
    ("leak", "The cross-session leak, S, safe resolution and GF"),
    ("mitigations", "Session mitigations: the specificity matrix"),
    ("provenance", "Provenance and metadata"),
)


def build(paths_: Sequence[Path | str], title: str = "LayerRAG-Bench report") -> str:
    """The conversational report as one HTML string (see the module docstring)."""
    gathered: dict[str, list[str]] = {sid: [] for sid, _ in SECTIONS}
    reference = False
    for p in map(Path, paths_):
        recs, m = read(p)
        if not recs:
            raise ValueError(f"{p}: no scored turns")
        reference |= any(unit_kind(r.provider) == REFERENCE_AGENT for r in recs)
        for sid, parts in _run_parts(p, recs, m).items():
            gathered[sid] += parts
    if reference:
        gathered["findings"].insert(0, page.para(REFERENCE_NOTE, "muted"))
    gathered["provenance"].insert(0, page.para(
        f"generated by layerlab {__version__} from {len(paths_)} conversational run(s)", "muted"))  # fmt: skip
    body = [
        f"<h1>{page.esc(title)}</h1>",
        page.para(LEAD, "lead"),
        page.toc([(sid, t) for sid, t in SECTIONS]),
        *(page.section(sid, t, *gathered[sid]) for sid, t in SECTIONS),
    ]
    return page.document(title, "\n".join(body))


__all__ = ["SECTIONS", "build", "conversational", "is_conversational", "read"]
