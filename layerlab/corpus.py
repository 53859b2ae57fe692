"""The corpus builder: policy specs -> documents, public tasks and a separate answer key.

The answer key (expected answers, required document ids) is a different type from the public
task and is written to its own file, so nothing that carries a task into a reader can carry
the answer with it. Document ids are opaque (``<policy>-a`` / ``<policy>-b``, which of the two
is current is fixed by a hash of the policy id), so an id never reveals validity.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from layerlab import __version__
from layerlab._io import atomic_write_text, canonical_json, read_jsonl, sha256_file, write_jsonl
from layerlab.spec import DomainSpec, load_domains, spec_hash

if TYPE_CHECKING:
    import pandas as pd

Status = Literal["current", "superseded"]
TENANT = "northwind"
CORPUS_NAME = "enterprise_v2"
FILES = ("documents.jsonl", "tasks.jsonl", "answer_key.jsonl", "domains.json")


@dataclass(frozen=True)
class Document:
    """A policy document: prose plus the operational metadata a retriever or reader sees."""

    doc_id: str
    policy_id: str
    domain: str
    title: str
    text: str
    status: str
    effective_year: int
    version: int
    owner: str
    access_scope: str
    tenant: str = TENANT
    session_id: str | None = None


@dataclass(frozen=True)
class Task:
    """A public task: what a reader may see. It holds no answer and no document ids."""

    task_id: str
    policy_id: str
    domain: str
    variant: int
    question: str
    answer_kind: str


@dataclass(frozen=True)
class AnswerKeyEntry:
    """Evaluator-only truth for one task."""

    task_id: str
    policy_id: str
    domain: str
    expected_answer: str
    required_doc_ids: tuple[str, ...]


@dataclass(frozen=True)
class DomainInfo:
    domain: str
    title: str
    owner: str
    cue_words: tuple[str, ...]


@dataclass(frozen=True)
class Corpus:
    """The public side of a built corpus: documents, tasks and domain cue words."""

    name: str
    spec_hash: str
    documents: tuple[Document, ...]
    tasks: tuple[Task, ...]
    domains: tuple[DomainInfo, ...]
    _by_id: Mapping[str, Document] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {d.doc_id: d for d in self.documents})

    def document(self, doc_id: str) -> Document:
        return self._by_id[doc_id]

    @property
    def cue_words(self) -> dict[str, tuple[str, ...]]:
        return {d.domain: d.cue_words for d in self.domains}


class AnswerKey(Mapping[str, AnswerKeyEntry]):
    """Evaluator-only mapping ``task_id -> AnswerKeyEntry``. Never passed to a reader."""

    def __init__(self, entries: Mapping[str, AnswerKeyEntry]):
        self._entries = dict(entries)

    def __getitem__(self, task_id: str) -> AnswerKeyEntry:
        return self._entries[task_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def _current_suffix(policy_id: str) -> str:
    return "a" if hashlib.sha256(policy_id.encode()).digest()[0] % 2 == 0 else "b"


def doc_ids(policy_id: str) -> tuple[str, str]:
    """(current id, superseded id) of a policy."""
    cur = _current_suffix(policy_id)
    sup = "b" if cur == "a" else "a"
    return f"{policy_id}-{cur}", f"{policy_id}-{sup}"


def build(
    domains: list[DomainSpec], name: str = CORPUS_NAME, hash_: str = ""
) -> tuple[Corpus, AnswerKey]:
    """Build a corpus and its answer key from validated domain specs (deterministic)."""
    documents: list[Document] = []
    tasks: list[Task] = []
    key: dict[str, AnswerKeyEntry] = {}
    for d in sorted(domains, key=lambda d: d.domain):
        for p in d.policies:
            cur_id, sup_id = doc_ids(p.id)
            for doc_id, ver, status, version in (
                (cur_id, p.current, "current", 2),
                (sup_id, p.superseded, "superseded", 1),
            ):
                documents.append(
                    Document(
                        doc_id=doc_id,
                        policy_id=p.id,
                        domain=d.domain,
                        title=p.topic,
                        text=" ".join(ver.prose.split()),
                        status=status,
                        effective_year=ver.effective_year,
                        version=version,
                        owner=d.owner,
                        access_scope=p.access_scope,
                    )
                )
            for i, q in enumerate(p.questions, start=1):
                tid = f"{p.id}-q{i}"
                tasks.append(Task(tid, p.id, d.domain, i, " ".join(q.split()), p.answer_kind))
                key[tid] = AnswerKeyEntry(tid, p.id, d.domain, p.current.value, (cur_id,))
    documents.sort(key=lambda x: x.doc_id)
    infos = tuple(
        DomainInfo(d.domain, d.title, d.owner, tuple(d.cue_words))
        for d in sorted(domains, key=lambda d: d.domain)
    )
    return Corpus(name, hash_, tuple(documents), tuple(tasks), infos), AnswerKey(key)


def build_from_specs(spec_dir: Path, name: str = CORPUS_NAME) -> tuple[Corpus, AnswerKey]:
    """Load, validate and build (raises :class:`layerlab.spec.SpecError` on bad specs)."""
    return build(load_domains(spec_dir), name, spec_hash(spec_dir))


def _row(obj: Any) -> dict[str, Any]:
    row = asdict(obj)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in row.items()}


def write(corpus: Corpus, key: AnswerKey, out: Path) -> dict[str, Any]:
    """Write the corpus files and a manifest into ``out``; return the manifest.

    Same corpus -> byte-identical files (sorted rows, canonical JSON, no timestamps).
    """
    out = Path(out)
    write_jsonl(out / "documents.jsonl", (_row(d) for d in corpus.documents))
    write_jsonl(out / "tasks.jsonl", (_row(t) for t in corpus.tasks))
    write_jsonl(out / "answer_key.jsonl", (_row(key[t.task_id]) for t in corpus.tasks))
    atomic_write_text(
        out / "domains.json", canonical_json([_row(d) for d in corpus.domains]) + "\n"
    )
    manifest = {
        "corpus": corpus.name,
        "spec_hash": corpus.spec_hash,
        "layerlab_version": __version__,
        "counts": {
            "domains": len(corpus.domains),
            "policy_units": len({d.policy_id for d in corpus.documents}),
            "documents": len(corpus.documents),
            "tasks": len(corpus.tasks),
        },
        "files": {name: sha256_file(out / name) for name in FILES},
    }
    atomic_write_text(out / "manifest.json", canonical_json(manifest) + "\n")
    return manifest


class CorpusError(ValueError):
    """A corpus folder that is missing files or fails its manifest checksums."""


def _check_manifest(folder: Path, names: tuple[str, ...]) -> dict[str, Any]:
    import json

    mpath = folder / "manifest.json"
    if not mpath.exists():
        raise CorpusError(f"{mpath}: missing (build the corpus with `layerlab corpus build`)")
    manifest: dict[str, Any] = json.loads(mpath.read_text(encoding="utf-8"))
    for name in names:
        p = folder / name
        if not p.exists():
            raise CorpusError(f"{p}: missing")
        want = manifest.get("files", {}).get(name)
        if want != sha256_file(p):
            raise CorpusError(
                f"{p}: checksum differs from manifest.json (edited by hand? rebuild it)"
            )
    return manifest


def load(folder: Path | str | None = None) -> Corpus:
    """Load the public side of a built corpus (default: the committed enterprise_v2)."""
    import json

    from layerlab import paths

    folder = Path(folder or paths.CORPUS_DIR)
    manifest = _check_manifest(folder, ("documents.jsonl", "tasks.jsonl", "domains.json"))
    docs = tuple(Document(**r) for r in read_jsonl(folder / "documents.jsonl"))
    tasks = tuple(Task(**r) for r in read_jsonl(folder / "tasks.jsonl"))
    domains = tuple(
        DomainInfo(r["domain"], r["title"], r["owner"], tuple(r["cue_words"]))
        for r in json.loads((folder / "domains.json").read_text(encoding="utf-8"))
    )
    return Corpus(manifest["corpus"], manifest["spec_hash"], docs, tasks, domains)


def load_answer_key(folder: Path | str | None = None) -> AnswerKey:
    """Load the evaluator-only answer key of a built corpus (default: the committed one)."""
    from layerlab import paths

    folder = Path(folder or paths.CORPUS_DIR)
    _check_manifest(folder, ("answer_key.jsonl",))
    rows = read_jsonl(folder / "answer_key.jsonl")
    return AnswerKey(
        {
            r["task_id"]: AnswerKeyEntry(
                r["task_id"],
                r["policy_id"],
                r["domain"],
                r["expected_answer"],
                tuple(r["required_doc_ids"]),
            )
            for r in rows
        }
    )


def summary(corpus: Corpus) -> pd.DataFrame:
    """Per-domain counts: policy units, documents, tasks, cue words, restricted policies."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for d in corpus.domains:
        docs = [x for x in corpus.documents if x.domain == d.domain]
        rows.append(
            {
                "domain": d.domain,
                "title": d.title,
                "policy units": len({x.policy_id for x in docs}),
                "documents": len(docs),
                "tasks": sum(t.domain == d.domain for t in corpus.tasks),
                "cue words": len(d.cue_words),
                "restricted policies": len(
                    {x.policy_id for x in docs if x.access_scope != "all_staff"}
                ),
            }
        )
    total = {
        "domain": "all",
        "title": corpus.name,
        **{
            k: sum(int(r[k]) for r in rows)
            for k in ("policy units", "documents", "tasks", "cue words", "restricted policies")
        },
    }
    return pd.DataFrame([*rows, total])
