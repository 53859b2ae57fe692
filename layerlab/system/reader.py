"""Readers: what turns delivered evidence into an answer.

A reader gets a :class:`ReaderInput` — the question, its answer kind, the request's session id
and the evidence the contract let through, with operational metadata — and nothing else. The
type has no field for an expected answer or required documents, and the tests build every
reader input of every cell to prove no answer-key value hides in its metadata.

:class:`ExtractiveReader` is the deterministic harness's reader: it takes the evidence in rank
order and answers with the first span of the question's answer kind that it finds, citing that
document. It checks nothing about validity, session or completeness — that is what the
benchmark's layers are there to expose.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Literal, Protocol

from layerlab.corpus.build import Task
from layerlab.corpus.extract import extract
from layerlab.registry import Registry
from layerlab.system.contract import Hit, HitMetadata, SearchPayload


@dataclass(frozen=True)
class Evidence(HitMetadata, Hit):
    """One delivered search result, as the reader sees it: a
    :class:`~layerlab.system.contract.SearchResult`'s fields without the retriever's score."""


@dataclass(frozen=True)
class ReaderInput:
    """Everything a reader may see for one record. Built only by :func:`reader_input`."""

    question: str
    answer_kind: str
    session_id: str
    tool_status: str
    tool_error: str | None
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class ReaderOutput:
    """The reader's reply: an answer with citations, or an abstention with a reason."""

    status: Literal["answered", "abstained"]
    answer: str | None
    citations: tuple[str, ...]
    reason: str | None = None


def reader_input(task: Task, payload: SearchPayload) -> ReaderInput:
    """The reader's view of a task and an accepted tool payload (public fields only)."""
    evidence = tuple(
        Evidence(**{f: getattr(r, f) for f in _EVIDENCE_FIELDS}) for r in payload.results
    )
    return ReaderInput(
        question=task.question,
        answer_kind=task.answer_kind,
        session_id=payload.session_id,
        tool_status=payload.status,
        tool_error=payload.error.message if payload.error else None,
        evidence=evidence,
    )


_EVIDENCE_FIELDS = tuple(f.name for f in fields(Evidence))


class Reader(Protocol):
    name: str

    def read(self, inp: ReaderInput) -> ReaderOutput: ...


class ExtractiveReader:
    """Deterministic extractive reader: first typed span in rank order, cited."""

    name = "extractive"

    def read(self, inp: ReaderInput) -> ReaderOutput:
        for ev in inp.evidence:
            span = extract(inp.question, inp.answer_kind, ev.text)
            if span is not None:
                return ReaderOutput("answered", span, (ev.doc_id,))
        reason = "no evidence delivered" if not inp.evidence else "no answer span in evidence"
        return ReaderOutput("abstained", None, (), reason)


READERS: Registry[Callable[[], Reader]] = Registry("reader")
READERS.register(ExtractiveReader, "extractive")


class CautiousReader:
    """Deterministic baseline that refuses evidence flagged as unsafe, else reads extractively.

    It abstains when the tool reports partial output or any result is truncated, when any
    result carries another session's id, and when no result has status ``current`` (stale or
    unofficial evidence only). It does not check metadata integrity.
    """

    name = "cautious"

    def read(self, inp: ReaderInput) -> ReaderOutput:
        if inp.tool_status != "ok" or any(e.truncated for e in inp.evidence):
            return ReaderOutput("abstained", None, (), "partial tool output")
        if any(e.session_id not in (None, inp.session_id) for e in inp.evidence):
            return ReaderOutput("abstained", None, (), "evidence from another session")
        current = tuple(e for e in inp.evidence if e.status == "current")
        if not current:
            return ReaderOutput("abstained", None, (), "no current evidence")
        return ExtractiveReader().read(replace(inp, evidence=current))


READERS.register(CautiousReader, "cautious")
