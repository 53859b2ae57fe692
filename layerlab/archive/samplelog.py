"""A private, opt-in per-sample log: what each record asked, saw, replied and why it was scored so.

Archives rightly strip prose, answers and document ids. A researcher still needs to *see* what a
model answered. ``run live --sample-log PATH`` appends one JSON line per record to ``PATH``: the
question, the evidence the reader received (ids and metadata, not the text), the raw reply, the
parsed reply and the verdict with a reason for each of E, R, G, V and S (and for groundedness and
the secondary answer measures), next to the expected answer.
It is evaluator-side and private: it is never written inside a run folder, never read by
the archive tools, and is created readable by its owner only. ``layerlab view`` renders it.

Entries are keyed like archive records ``(provider, model, scenario, mitigation, task_id,
replicate)``; a resumed run appends, and readers keep the last entry per key; another run's entries go
to a log of their own beside it (:meth:`SampleLog._separate`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from layerlab.archive.schema import KEYS, LABELS, SCORES, Record
from layerlab.corpus.build import AnswerKeyEntry, Task
from layerlab.scoring.score import v_reason
from layerlab.system.reader import ReaderOutput

SAMPLE_LOG_VERSION = 2  # 2: verdicts carry grounded_cited, contained, token_f1 (archive schema 4)
AGENT_ENTRY_VERSION = 3
"""An agent-mode record's entry (``run live --agent``): a version-2 entry whose ``reply`` is the
agent's last reply, plus ``agent`` (its step fields and per-call log, as ``agent.parquet`` holds
them) and ``transcript`` (the whole conversation: instructions, question, every action and tool
result, evidence text included). Single-call entries stay version 2; a log may hold both."""
VERSIONS = (SAMPLE_LOG_VERSION, AGENT_ENTRY_VERSION)


class SampleLogError(ValueError):
    """A sample-log path that cannot be used (message names the path and the problem)."""


# The one-word outcome of a record (what the viewer and explorer filter by), each with the one
# definition the glossary (data/DATA_DICTIONARY.md), the viewer and docs/viewer.md show; checked
# where applied over every committed archive (tests/test_committed_archives.py).
OUTCOME_MEANINGS: dict[str, str] = {
    "success": "strict success: S = E ∧ R ∧ G ∧ V holds",
    "safe_non_answer": "a structured non-answer on a scenario where no answer was safe to give "
    "(its safe resolution)",
    "grounded_wrong": "answered a wrong value (E ✗) that a delivered document states, with valid "
    "citations (G ✓): what a groundedness check would pass, yet wrong",
    "unsupported": "answered the expected value (E ✓) but not S: a required document was not "
    "delivered (R ✗), a citation is missing or undelivered (G ✗) or the payload broke its "
    "schema (V ✗)",
    "wrong": "answered a wrong value (E ✗) that is not grounded_wrong: no delivered document "
    "states it, or its citations are not valid (G ✗)",
    "abstained": "a structured non-answer where an answer was expected (the record reached the "
    "reader)",
    "failed": "a malformed reply, a provider or target error, or an agent stopped by its step "
    "limit",
    "ended_early": "the record ended before the reader (no usable tool output, access denied, "
    "or the contract rejected the payload) and was not a safe resolution",
}
OUTCOMES = tuple(OUTCOME_MEANINGS)


def outcome(rec: Record | dict[str, Any]) -> str:
    """A one-word outcome of a record (:data:`OUTCOME_MEANINGS`), from its labels: the first of
    ``success``, ``failed``, then, for an answer, ``unsupported`` (E ✓), ``grounded_wrong``
    (E ✗, grounded, G ✓) or ``wrong``; for a non-answer ``safe_non_answer``, ``ended_early`` or
    ``abstained``."""
    r = rec if isinstance(rec, dict) else rec.__dict__
    if r["success"]:
        return "success"
    if r["diagnostic"] in ("malformed_reply", "provider_error", "step_limit"):
        return "failed"
    if r["answered"]:
        if r["exact_match"]:
            return "unsupported"
        if r["grounded_false_positive"] and r["citation_ok"]:
            return "grounded_wrong"
        return "wrong"
    if r["safe_resolution"]:
        return "safe_non_answer"
    if not r["reached_reader"]:
        return "ended_early"
    return "abstained"


def reasons(
    rec: Record,
    entry: AnswerKeyEntry,
    delivered: list[str],
    out: ReaderOutput | None,
    contract: Any,
    invalid_calls: int | None = None,
) -> dict[str, str]:
    """One-line reason for each of E, R, G, V and S, groundedness and the answer measures
    (``invalid_calls``: an agent's or target's tool calls that broke the schema, if known)."""
    ans = out.answer if out is not None else None
    return {
        "E": f"{rec.exact_match}: answer {ans!r} vs expected {entry.expected_answer!r}",
        "R": f"{rec.retrieval_ok}: required {list(entry.required_doc_ids)} among delivered {delivered}",
        "G": f"{rec.citation_ok}: citations {list(out.citations) if out else []} "
        "(need at least one, all delivered)",
        "V": v_reason(rec.schema_ok, contract.valid, contract.outcome, len(contract.edits),
                      contract.problems[0] if contract.problems else None, invalid_calls),
        "S": f"{rec.success}: E and R and G and V",
        "grounded": f"{rec.grounded}: the answer is stated in a delivered document, cited or not "
        f"(in a cited one: {rec.grounded_cited}); GF {rec.grounded_false_positive}",
        "answer": f"contained {rec.contained}, token F1 "
        + ("-" if rec.token_f1 is None else f"{rec.token_f1:.2f}")
        + " (secondary measures beside E, never part of S)",
    }


def entry(
    rec: Record,
    task: Task,
    key_entry: AnswerKeyEntry,
    admission: Any,
    reply: str | None,
    out: ReaderOutput | None,
    invalid_calls: int | None = None,
) -> dict[str, Any]:
    """The log entry of one scored record (``admission``: the harness's
    :class:`~layerlab.harness.step.Admission`: the contract's result, the reader's input, the
    mitigations' actions; ``invalid_calls``: an agent's or target's schema-breaking calls)."""
    inp = admission.inp
    delivered = [e.doc_id for e in inp.evidence] if inp is not None else []
    return {
        "v": SAMPLE_LOG_VERSION,
        **{k: getattr(rec, k) for k in KEYS},
        "run_id": rec.run_id,
        "domain": task.domain,
        "policy_id": task.policy_id,
        "answerable": rec.answerable,
        "question": task.question,
        "outcome": outcome(rec),
        "diagnostic": rec.diagnostic,
        "verdict": {k: getattr(rec, k) for k in (*LABELS, *SCORES)},
        "reasons": reasons(rec, key_entry, delivered, out, admission.contract, invalid_calls),
        "expected": key_entry.expected_answer,
        "stage": rec.stage,
        "contract": {
            "outcome": admission.contract.outcome,
            "edits": list(admission.contract.edits)[:12],
            "problems": list(admission.contract.problems)[:6],
        },
        "mitigation_actions": [str(a) for a in getattr(admission, "actions", ())],
        "tool_status": inp.tool_status if inp is not None else None,
        "evidence": [
            {
                "rank": e.rank,
                "doc_id": e.doc_id,
                "domain": e.domain,
                "status": e.status,
                "effective_year": e.effective_year,
                "version": e.version,
                "session_id": e.session_id,
                "truncated": bool(getattr(e, "truncated", False)),
            }
            for e in (inp.evidence if inp is not None else ())
        ],
        "reply": reply,
        "parsed": None
        if out is None
        else {
            "status": out.status,
            "answer": out.answer,
            "citations": list(out.citations),
            "reason": out.reason,
        },
    }


def agent_entry(
    e: dict[str, Any], row: dict[str, Any], transcript: list[dict[str, Any]]
) -> dict[str, Any]:
    """An agent record's entry: ``e`` (:func:`entry` with the agent's last reply) with its step
    fields and per-call log (``row``: its ``agent.parquet`` row) and the whole conversation."""
    from layerlab.archive.agenttable import SUMMARY

    return {
        **e,
        "v": AGENT_ENTRY_VERSION,
        "agent": {**{k: row[k] for k in SUMMARY}, "calls": list(row["calls"])},
        "transcript": transcript,
    }


def check_path(path: Path, run_folder: Path) -> Path:
    """Refuse a sample-log path inside the run folder (the run folder is shareable; the log
    holds replies and expected answers). Return the resolved path."""
    p = Path(path).expanduser().resolve()
    run = Path(run_folder).expanduser().resolve()
    if p == run or run in p.parents:
        raise SampleLogError(
            f"--sample-log {path}: inside the run folder {run_folder}; the log holds model replies "
            "and expected answers, so it must live outside it (e.g. ~/.cache/layerlab/samples/)"
        )
    if p.exists() and p.is_dir():
        raise SampleLogError(f"--sample-log {path}: is a folder, expected a file path")
    if p.exists():
        problem = not_a_sample_log(p)
        if problem:
            raise SampleLogError(
                f"--sample-log {path}: an existing file that is not a layerlab sample log "
                f"(version {' or '.join(map(str, VERSIONS))}): {problem}; it is left unchanged: give a new path"
            )
    return p


def not_a_sample_log(path: Path) -> str | None:
    """Why the existing file ``path`` is not a sample log this version appends to (judged by
    its first line), or None. An empty regular file is one (nothing in it to change)."""
    if not path.is_file():
        return "not a regular file"
    try:
        with open(path, "rb") as fh:
            first = fh.readline(1 << 20)
    except OSError as exc:
        return f"cannot read it ({exc.strerror or exc})"
    if not first:
        return None
    try:
        e = json.loads(first.decode("utf-8"))
    except ValueError:
        return "its first line is not a JSON sample-log entry"
    if not isinstance(e, dict) or any(k not in e for k in (*KEYS, "verdict", "v")):
        return "its first line is not a sample-log entry (no record key, verdict or version)"
    if e["v"] not in VERSIONS:
        return f"its entries are version {e['v']!r}"
    return None


class SampleLog:
    """Append-only JSONL writer, created readable and writable by its owner only."""

    def __init__(self, path: Path):
        from layerlab._io import private_dir

        self.path = Path(path)
        what = "model replies and expected answers"
        self._dirs = _missing_folders(self.path.parent)  # removed again if the log stays empty
        private_dir(self.path.parent, what, tighten=False)  # folders it makes: 0o700
        self._made = not self.path.exists()
        self._theirs = None if self._made else _run_of(self.path)  # whose entries it holds
        self.note: str | None = None  # set when this run's entries go to a log of their own
        self._open()

    def _open(self) -> None:
        from layerlab._io import private_file

        private_file(self.path, "model replies and expected answers")  # 0o600, or tightened
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._fh = os.fdopen(fd, "a", encoding="utf-8")
        self.count = 0

    def __call__(self, e: dict[str, Any]) -> None:
        if self.count == 0 and self._theirs is not None and e.get("run_id") != self._theirs:
            self._separate(str(e.get("run_id")))
        self._fh.write(json.dumps(e, sort_keys=True, ensure_ascii=False) + "\n")
        self.count += 1

    def _separate(self, run_id: str) -> None:
        """The log holds another run's entries: this run's go to a log of its own beside it,
        named by its run id (never mixed in, which a reader would take for one run's)."""
        given = self.path
        self._fh.close()
        self.path = given.with_name(f"{given.stem}.{run_id}{given.suffix}")
        problem = not_a_sample_log(self.path) if self.path.exists() else None
        if problem is None and self.path.exists() and _run_of(self.path) not in (None, run_id):
            problem = "it holds another run's entries"
        if problem:
            raise SampleLogError(f"--sample-log {self.path}: {problem}; it is left unchanged")
        self._made = not self.path.exists()
        self._open()
        self.note = (
            f"--sample-log {given} holds run {self._theirs}'s entries, not this run's "
            f"({run_id}): this run's are in {self.path}"
        )

    def close(self) -> None:
        """Close the log; a log left empty (a run that failed before any record) is removed,
        with the folders made for it."""
        self._fh.flush()
        self._fh.close()
        if self._made and self.path.stat().st_size == 0:
            self.path.unlink()
            for d in self._dirs:  # innermost first; one another process filled stays
                try:
                    d.rmdir()
                except OSError:
                    break


def _run_of(path: Path) -> str | None:
    """The run whose entries a sample log holds (its first entry's ``run_id``; None: empty)."""
    with open(path, "rb") as fh:
        first = fh.readline(1 << 20)
    try:
        e = json.loads(first.decode("utf-8")) if first.strip() else None
    except ValueError:
        return None
    return str(e.get("run_id")) if isinstance(e, dict) and e.get("run_id") else None


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and its ancestors that do not exist yet, innermost first."""
    out: list[Path] = []
    p = Path(folder).absolute()
    while not p.exists() and p.parent != p:
        out.append(p)
        p = p.parent
    return out


def read(path: Path) -> list[dict[str, Any]]:
    """Entries of a sample log, the last per record key; a torn last line is ignored."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SampleLogError(
            f"{path}: cannot read the sample log ({exc.strerror or exc})"
        ) from None
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for i, raw in _lines(data):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SampleLogError(
                f"{path}:{i}: not UTF-8 (byte {raw[exc.start]:#04x} at column {exc.start + 1}; "
                "expected a sample log as layerlab writes it)"
            ) from None
        try:
            e = json.loads(line)
        except ValueError:
            raise SampleLogError(
                f"{path}:{i}: not a JSON line (expected a sample-log entry)"
            ) from None
        if not isinstance(e, dict) or any(k not in e for k in (*KEYS, "verdict")):
            raise SampleLogError(
                f"{path}:{i}: not a sample-log entry (missing record key or verdict)"
            )
        latest[tuple(e[k] for k in KEYS)] = e
    return [latest[k] for k in sorted(latest)]


def _lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """Numbered non-blank lines; a final line without its newline was torn by a kill mid-write."""
    for i, p in enumerate(data.split(b"\n")[:-1], 1):
        if p.strip():
            yield i, p
