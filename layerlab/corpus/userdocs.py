"""A user's own documents: the JSONL/YAML import format, its validation and its export.

A source file holds four kinds of record. JSONL: one JSON object per line with a ``kind``;
YAML: one mapping with a ``corpus`` mapping and ``domains``, ``documents`` and ``questions``
lists (the same fields, without ``kind``).

* ``corpus``   — ``name``; ``tenant`` (whose documents these are; default ``northwind``);
* ``domain``   — ``domain``, ``title``, ``owner`` (who publishes it), ``cue_words``;
* ``document`` — ``doc_id``, ``policy_id`` (the versions of one policy share it), ``domain``,
  ``title``, ``text``, ``status`` (``current``/``superseded``), ``effective_year``,
  ``version``; optional ``access_scope`` (default ``all_staff``), ``owner`` (default the
  domain's) and ``tenant`` (default the corpus's; another tenant's document is the version
  the wrong-session fault serves);
* ``question`` — ``id``, ``question``, ``answer_kind``, ``expected_answer``,
  ``required_doc_ids``.

:func:`import_corpus` validates every record and the corpus as a whole (what each fault
scenario needs of it) and returns the :class:`~layerlab.corpus.build.Corpus` and
:class:`~layerlab.corpus.build.AnswerKey` that :func:`layerlab.corpus.build.write_folder` writes, in
the format ``layerlab corpus build`` writes. Problems are :class:`SpecProblem` values
(``file:line: field: message``), like the spec DSL's. :func:`export_records` writes a built
corpus in this format (the enterprise_v2 corpus re-imports to byte-identical files).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from layerlab._io import (
    MAX_IMPORT_BYTES,
    BoundedReadError,
    load_yaml_bounded,
    loads_json_bounded,
    read_text_bounded,
)
from layerlab.corpus.build import (
    TENANT,
    AnswerKey,
    AnswerKeyEntry,
    Corpus,
    Document,
    DomainInfo,
    Task,
)
from layerlab.corpus.spec import (
    ANSWER_KINDS,
    SpecError,
    SpecProblem,
    _describe,
    _duplicate_keys,
    _fmt_loc,
    _line_of,
    spec_hash,
)
from layerlab.corpus.text import states_value

_ID = r"^[a-z][a-z0-9_]*$"
_KEY = r"^[A-Za-z0-9][A-Za-z0-9_.:/~-]*$"  # document ids: the user's own
# policy and question ids are archived with every record: the archive's id shapes (no prose)
_POLICY = r"^[a-z][a-z0-9_]{0,63}-\d{2}$"
_QUESTION = r"^[a-z][a-z0-9_]{0,63}-\d{2}-q\d{1,2}$"
NonEmpty = Annotated[str, Field(min_length=1)]
KINDS = ("corpus", "domain", "document", "question")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class CorpusRecord(_Strict):
    name: Annotated[str, Field(pattern=_ID)]
    tenant: Annotated[str, Field(pattern=_ID)] = TENANT


class DomainRecord(_Strict):
    domain: Annotated[str, Field(pattern=_ID)]
    title: NonEmpty
    owner: NonEmpty
    cue_words: Annotated[list[Annotated[str, Field(pattern=r"^[a-z0-9]+$")]], Field(min_length=1)]


class DocumentRecord(_Strict):
    doc_id: Annotated[str, Field(pattern=_KEY)]
    policy_id: Annotated[str, Field(pattern=_POLICY)]
    domain: Annotated[str, Field(pattern=_ID)]
    title: NonEmpty
    text: NonEmpty
    status: Literal["current", "superseded"]
    effective_year: Annotated[int, Field(ge=1900, le=2100)]
    version: Annotated[int, Field(ge=0)]
    access_scope: Annotated[str, Field(pattern=_ID)] = "all_staff"
    owner: NonEmpty | None = None
    tenant: Annotated[str, Field(pattern=_ID)] | None = None


class QuestionRecord(_Strict):
    id: Annotated[str, Field(pattern=_QUESTION)]
    question: NonEmpty
    answer_kind: Literal["duration", "money", "percent", "count", "role", "system"]
    expected_answer: NonEmpty
    required_doc_ids: Annotated[list[Annotated[str, Field(pattern=_KEY)]], Field(min_length=1)]


MODELS: dict[str, type[_Strict]] = {
    "corpus": CorpusRecord,
    "domain": DomainRecord,
    "document": DocumentRecord,
    "question": QuestionRecord,
}
_YAML_LISTS = {"domains": "domain", "documents": "document", "questions": "question"}


@dataclass(frozen=True)
class Rec:
    """One validated record and where it is (for problems found across records)."""

    obj: Any
    where: Any  # JSONL: the line number; YAML: the path (``documents``, 3)

    @property
    def kind(self) -> str:
        return next(k for k, m in MODELS.items() if isinstance(self.obj, m))


def _describe_err(err: Any) -> str:
    if err["type"] == "literal_error" and err["loc"] == ("answer_kind",):
        return f"unknown answer kind {err['input']!r}; expected one of {list(ANSWER_KINDS)}"
    if err["type"] == "literal_error" and err["loc"] == ("status",):
        return f"expected 'current' or 'superseded', got {err['input']!r}"
    if err["type"] == "extra_forbidden":
        return "unknown field (check the spelling against 'Your own documents' in docs/corpus.md)"
    if err["type"] == "missing":
        return "required field is missing"
    if err["type"] == "string_pattern_mismatch":
        pattern = err.get("ctx", {}).get("pattern")
        if pattern == _KEY:
            return f"expected an id of letters, digits and . _ : / ~ - (no spaces), got {err['input']!r}"
        if pattern == _POLICY:
            return f"expected <domain>-NN, e.g. 'fleet-01' (archived with every record), got {err['input']!r}"
        if pattern == _QUESTION:
            return (
                f"expected <policy_id>-qN, e.g. 'fleet-01-q1' (archived with every record), "
                f"got {err['input']!r}"
            )
        if pattern == _ID:
            return f"expected a lower-case name (a-z, 0-9, _; a letter first), got {err['input']!r}"
        return f"expected one lower-case word (a-z, 0-9), got {err['input']!r}"
    return _describe(err, _Strict)


class _Source:
    """A source file read into records, with the one-line location of any field."""

    def __init__(self, path: Path):
        self.path, self.shown = Path(path), str(path)
        self.node: yaml.Node | None = None
        self.records: list[Rec] = []
        self.problems: list[SpecProblem] = []

    def where(self, rec_where: Any, field: Any = "") -> tuple[int | None, str]:
        """(line, field path) of ``field`` (a name or a path) of the record at ``rec_where``."""
        if isinstance(rec_where, int):
            return rec_where, field if isinstance(field, str) else _fmt_loc(field)
        parts = (field,) if isinstance(field, str) else tuple(field)
        loc = (*rec_where, *parts) if field else tuple(rec_where)
        return _line_of(self.node, loc), _fmt_loc(loc)

    def problem(self, rec_where: Any, field: Any, message: str) -> None:
        line, f = self.where(rec_where, field)
        self.problems.append(SpecProblem(self.shown, line, f, message))

    def validate(self, kind: str, data: Any, where: Any) -> None:
        if not isinstance(data, dict):
            self.problem(
                where, "", f"expected a mapping (a {kind} record), got {type(data).__name__}"
            )
            return
        try:
            self.records.append(Rec(MODELS[kind].model_validate(data), where))
        except ValidationError as exc:
            for err in exc.errors():
                loc = tuple(err["loc"])
                if isinstance(where, int):
                    self.problems.append(
                        SpecProblem(self.shown, where, _fmt_loc(loc), _describe_err(err))
                    )
                else:
                    line = _line_of(self.node, (*where, *loc))
                    self.problems.append(
                        SpecProblem(self.shown, line, _fmt_loc((*where, *loc)), _describe_err(err))
                    )


def _read(path: Path) -> _Source:
    src = _Source(path)
    try:  # bounded: a regular file, at most MAX_IMPORT_BYTES, UTF-8 (a BOM is fine)
        text = read_text_bounded(src.path, MAX_IMPORT_BYTES)
    except BoundedReadError as exc:
        raise SpecError.of(exc, src.shown) from None
    if src.path.suffix in {".yaml", ".yml"}:
        _read_yaml(src, text)
    elif src.path.suffix == ".jsonl":
        _read_jsonl(src, text)
    else:
        raise SpecError([SpecProblem(src.shown, None, "", "expected a .jsonl, .yaml or .yml file")])
    if src.problems:
        raise SpecError(src.problems)
    return src


class _Repeated(ValueError):
    """A key given twice in one JSON object (``json`` would silently keep the last)."""


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _Repeated(k)
        out[k] = v
    return out


def _read_jsonl(src: _Source, text: str) -> None:
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = loads_json_bounded(line, src.shown, n, _no_repeats)
        except BoundedReadError as exc:
            src.problem(n, "", exc.message)
            continue
        except json.JSONDecodeError as exc:
            src.problem(n, "", f"not valid JSON: {exc.msg} (column {exc.colno})")
            continue
        except _Repeated as exc:
            src.problem(n, exc.args[0], "duplicate key; each key may appear once in a record")
            continue
        if not isinstance(data, dict):
            src.problem(n, "", f"expected a JSON object, got {type(data).__name__}")
            continue
        kind = data.pop("kind", None)
        if kind not in MODELS:
            what = "required field is missing" if kind is None else f"unknown kind {kind!r}"
            src.problem(n, "kind", f"{what}; expected one of {list(KINDS)}")
            continue
        src.validate(kind, data, n)


def _read_yaml(src: _Source, text: str) -> None:
    try:
        src.node, data = load_yaml_bounded(text, src.shown)
    except (BoundedReadError, yaml.YAMLError) as exc:
        raise SpecError.of(exc, src.shown) from None
    dups = _duplicate_keys(src.node)
    if dups:
        raise SpecError([SpecProblem(src.shown, line, f, msg) for line, f, msg in dups])
    if not isinstance(data, dict):
        got = type(data).__name__
        raise SpecError([SpecProblem(src.shown, 1, "", f"expected a mapping, got {got}")])
    for key in data:
        if key != "corpus" and key not in _YAML_LISTS:
            src.problem((key,), "", f"unknown key; expected corpus, {', '.join(_YAML_LISTS)}")
    if "corpus" in data:
        src.validate("corpus", data["corpus"], ("corpus",))
    for key, kind in _YAML_LISTS.items():
        items = data.get(key) or []
        if not isinstance(items, list):
            src.problem((key,), "", f"expected a list of {kind} records")
            continue
        for i, item in enumerate(items):
            src.validate(kind, item, (key, i))


def _at(where: Any) -> str:
    return f"line {where}" if isinstance(where, int) else _fmt_loc(where)


def _check(src: _Source) -> tuple[Corpus, AnswerKey]:
    """Cross-record checks: what every fault scenario and the scorer need of the corpus."""
    by: dict[str, list[Rec]] = {k: [] for k in KINDS}
    for r in src.records:
        by[r.kind].append(r)
    p = src.problem
    if len(by["corpus"]) != 1:
        where = by["corpus"][1].where if by["corpus"] else 1
        p(where, "", f"expected exactly one corpus record (name, tenant), got {len(by['corpus'])}")
        raise SpecError(src.problems)
    head: CorpusRecord = by["corpus"][0].obj
    first: dict[tuple[str, str], Any] = {}

    def unique(kind: str, value: str, where: Any, field: str) -> bool:
        if (kind, value) in first:
            p(where, field, f"duplicate {kind} {value!r} (first at {_at(first[(kind, value)])})")
            return False
        first[(kind, value)] = where
        return True

    domains: dict[str, DomainRecord] = {}
    cue_of: dict[str, str] = {}
    for r in by["domain"]:
        d: DomainRecord = r.obj
        if unique("domain", d.domain, r.where, "domain"):
            domains[d.domain] = d
        for w in d.cue_words:
            if w in cue_of:
                p(r.where, "cue_words", f"cue word {w!r} is also a cue of domain {cue_of[w]!r}")
            cue_of.setdefault(w, d.domain)
    if not domains:
        p(1, "", "no domain record; expected at least one (domain, title, owner, cue_words)")
    docs: dict[str, tuple[Rec, Document]] = {}
    for r in by["document"]:
        x: DocumentRecord = r.obj
        if not unique("doc_id", x.doc_id, r.where, "doc_id"):
            continue
        dom = domains.get(x.domain)
        if dom is None:
            p(r.where, "domain", f"unknown domain {x.domain!r}; expected one of {sorted(domains)}")
            continue
        if not x.policy_id.startswith(x.domain + "-"):
            p(r.where, "policy_id", f"{x.policy_id!r} must start with its domain '{x.domain}-'")
            continue
        if x.owner is not None and x.owner != dom.owner:
            p(
                r.where,
                "owner",
                f"{x.owner!r} is not the owner of domain {x.domain!r} ({dom.owner!r}); the "
                "metadata-integrity check reads a different owner as a corrupted label",
            )
        doc = Document(
            doc_id=x.doc_id,
            policy_id=x.policy_id,
            domain=x.domain,
            title=x.title,
            text=" ".join(x.text.split()),
            status=x.status,
            effective_year=x.effective_year,
            version=x.version,
            owner=dom.owner,
            access_scope=x.access_scope,
            tenant=x.tenant or head.tenant,
        )
        docs[x.doc_id] = (r, doc)
    ours = {k: v for k, v in docs.items() if v[1].tenant == head.tenant}
    policies: dict[str, dict[str, tuple[Rec, Document]]] = {}
    for r, doc in ours.values():
        versions = policies.setdefault(doc.policy_id, {})
        if doc.status in versions:
            other = versions[doc.status][1].doc_id
            p(
                r.where,
                "status",
                f"policy {doc.policy_id!r} already has a {doc.status} version "
                f"({other!r}); expected one current and at most one superseded",
            )
            continue
        versions[doc.status] = (r, doc)
    for pid, versions in policies.items():
        cur, sup = versions.get("current"), versions.get("superseded")
        r0 = (cur or sup)[0]  # type: ignore[index]
        if cur is None:
            p(r0.where, "policy_id", f"policy {pid!r} has no current version")
            continue
        if f"{pid}-n" in docs:
            p(
                docs[f"{pid}-n"][0].where,
                "doc_id",
                f"{pid + '-n'!r} is reserved for the "
                "conflicting_evidence fault's note on policy {pid!r}; rename the document",
            )
        if sup is None:
            continue
        c, s = cur[1], sup[1]
        for field, ok, want in (
            ("domain", s.domain == c.domain, f"the current version's domain {c.domain!r}"),
            (
                "title",
                s.title == c.title,
                f"the current version's title {c.title!r} (versions "
                "of one policy share a title; validity resolution matches them by it)",
            ),
            ("version", s.version < c.version, f"less than the current version's ({c.version})"),
            (
                "effective_year",
                s.effective_year <= c.effective_year,
                f"not later than the current version's ({c.effective_year})",
            ),
        ):
            if not ok:
                p(sup[0].where, field, f"superseded version of {pid!r}: expected {want}")
    foreign: dict[str, Document] = {}
    for k, (r, doc) in docs.items():
        if k in ours:
            continue
        if doc.policy_id not in policies:
            p(
                r.where,
                "policy_id",
                f"another tenant's document of unknown policy {doc.policy_id!r}",
            )
        elif doc.status != "current":
            p(
                r.where,
                "status",
                "another tenant's document must be 'current' (the version a wrong session serves)",
            )
        elif doc.policy_id in foreign:
            p(
                r.where,
                "policy_id",
                f"policy {doc.policy_id!r} already has another tenant's "
                f"version ({foreign[doc.policy_id].doc_id!r})",
            )
        else:
            foreign[doc.policy_id] = doc
    for pid, versions in policies.items():
        if pid not in foreign:
            r0 = next(iter(versions.values()))[0]
            p(
                r0.where,
                "policy_id",
                f"policy {pid!r} has no other tenant's version: add a "
                f"document with policy_id {pid!r} and a tenant other than {head.tenant!r} (the "
                "wrong_session fault serves it in place of ours; it states a different value)",
            )
    tasks: list[Task] = []
    key: dict[str, AnswerKeyEntry] = {}
    for r in by["question"]:
        q: QuestionRecord = r.obj
        if not unique("question id", q.id, r.where, "id"):
            continue
        req: list[Document] = []
        for i, did in enumerate(q.required_doc_ids):
            fld: Any = (
                f"required_doc_ids[{i}]" if isinstance(r.where, int) else ("required_doc_ids", i)
            )
            if did not in docs:
                p(r.where, fld, f"unknown document {did!r} (no document record has this doc_id)")
            elif did not in ours:
                p(r.where, fld, f"{did!r} is another tenant's document; expected one of ours")
            elif ours[did][1].status != "current":
                p(r.where, fld, f"{did!r} is a superseded version; expected the current one")
            else:
                req.append(ours[did][1])
        if len(req) != len(q.required_doc_ids):
            continue
        if not any(states_value(d.text, q.expected_answer) for d in req):
            p(
                r.where,
                "expected_answer",
                f"{q.expected_answer!r} is not stated in the required "
                f"document{'s' if len(req) > 1 else ''} {', '.join(repr(d.doc_id) for d in req)}",
            )
        for d in req:
            sup = policies[d.policy_id].get("superseded")
            if sup is None:
                p(
                    r.where,
                    "required_doc_ids",
                    f"policy {d.policy_id!r} has no superseded "
                    "version; expected one (the stale_index fault serves it in place of the current)",
                )
            elif states_value(sup[1].text, q.expected_answer):
                p(
                    r.where,
                    "expected_answer",
                    f"{q.expected_answer!r} is also stated in the "
                    f"superseded version {sup[1].doc_id!r}; a stale answer would score as correct",
                )
            their = foreign.get(d.policy_id)
            if their is not None and states_value(their.text, q.expected_answer):
                p(
                    r.where,
                    "expected_answer",
                    f"{q.expected_answer!r} is also stated in another "
                    f"tenant's version {their.doc_id!r}; a wrong-session answer would be correct",
                )
        pid, dom = req[0].policy_id, req[0].domain
        head_id, _, variant = q.id.rpartition("-q")
        if head_id != pid:
            p(
                r.where,
                "id",
                f"{q.id!r} must start with '{pid}-q', the policy of its first "
                f"required document {req[0].doc_id!r}",
            )
            continue
        text = " ".join(q.question.split())
        tasks.append(Task(q.id, pid, dom, int(variant), text, q.answer_kind))
        key[q.id] = AnswerKeyEntry(q.id, pid, dom, q.expected_answer, tuple(q.required_doc_ids))
    if not by["question"]:
        p(1, "", "no question record; expected at least one")
    if src.problems:
        raise SpecError(src.problems)
    infos = tuple(
        DomainInfo(d.domain, d.title, d.owner, tuple(d.cue_words))
        for d in sorted(domains.values(), key=lambda d: d.domain)
    )
    corpus = Corpus(
        head.name,
        spec_hash(src.path),
        tuple(sorted((d for _, d in ours.values()), key=lambda d: d.doc_id)),
        tuple(tasks),
        infos,
        tuple(sorted(foreign.values(), key=lambda d: d.doc_id)),
    )
    return corpus, AnswerKey(key)


def import_corpus(path: Path | str) -> tuple[Corpus, AnswerKey]:
    """Read and validate a user's JSONL or YAML corpus; raise :class:`SpecError` listing every
    problem (``file:line: field: message``)."""
    return _check(_read(Path(path)))


def export_records(corpus: Corpus, key: AnswerKey) -> Iterator[dict[str, Any]]:
    """A built corpus as import records (JSONL rows with ``kind``), in the order the import
    keeps: re-importing them gives the same documents, tasks, answer key and domains."""
    tenants = {d.tenant for d in corpus.documents}
    tenant = tenants.pop() if len(tenants) == 1 else TENANT
    yield {"kind": "corpus", "name": corpus.name, "tenant": tenant}
    for d in corpus.domains:
        yield {
            "kind": "domain",
            "domain": d.domain,
            "title": d.title,
            "owner": d.owner,
            "cue_words": list(d.cue_words),
        }
    for doc in (*corpus.documents, *corpus.foreign):
        row = {
            "kind": "document",
            "doc_id": doc.doc_id,
            "policy_id": doc.policy_id,
            "domain": doc.domain,
            "title": doc.title,
            "text": doc.text,
            "status": doc.status,
            "effective_year": doc.effective_year,
            "version": doc.version,
            "access_scope": doc.access_scope,
        }
        if doc.tenant != tenant:
            row["tenant"] = doc.tenant
        yield row
    for t in corpus.tasks:
        e = key[t.task_id]
        yield {
            "kind": "question",
            "id": t.task_id,
            "question": t.question,
            "answer_kind": t.answer_kind,
            "expected_answer": e.expected_answer,
            "required_doc_ids": list(e.required_doc_ids),
        }


__all__ = ["MODELS", "export_records", "import_corpus"]
