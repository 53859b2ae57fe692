"""The corpus builder: policy specs -> documents, public tasks and a separate answer key.

The answer key (expected answers, required document ids) is a different type from the public
task and is written to its own file, so nothing that carries a task into a reader can carry
the answer with it. Document ids are opaque (``<policy>-a`` / ``<policy>-b``): within each
domain a seeded rule gives the current version the ``-a`` suffix for half of the policies and
``-b`` for the other half, so an id suffix carries no version signal.

Each policy also has *another tenant's* version (:attr:`Corpus.foreign`, ``foreign.jsonl``):
the current prose restating a different value of the same answer kind, derived
deterministically from the spec (:func:`foreign_value`). The wrong-session fault serves it, so
an answer grounded in wrong-session evidence is wrong, not a right answer under a wrong id.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from layerlab import __version__
from layerlab._io import (
    atomic_write_text,
    canonical_json,
    folder_names,
    read_jsonl,
    sha256_file,
    write_jsonl,
)
from layerlab.corpus.spec import (
    DomainSpec,
    PolicySpec,
    SpecError,
    SpecProblem,
    load_domains,
    spec_hash,
    value_pattern,
)
from layerlab.corpus.text import normalize_answer, states_value

if TYPE_CHECKING:
    import pandas as pd

Status = Literal["current", "superseded"]
TENANT = "northwind"
FOREIGN_TENANT = "fabrikam"  # the other tenant whose context a wrong session serves
CORPUS_NAME = "enterprise_v2"
FILES = ("documents.jsonl", "tasks.jsonl", "answer_key.jsonl", "domains.json", "foreign.jsonl")


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
    foreign: tuple[Document, ...] = ()  # another tenant's version of each policy
    _by_id: Mapping[str, Document] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {d.doc_id: d for d in self.documents})

    def document(self, doc_id: str) -> Document:
        return self._by_id[doc_id]

    def policy_by_doc(self) -> Mapping[str, str]:
        """doc id -> policy id of our documents (an imported corpus's ids are the user's own)."""
        return {k: d.policy_id for k, d in self._by_id.items()}

    def foreign_by_policy(self) -> dict[str, Document]:
        """policy id -> the other tenant's version of that policy."""
        return {d.policy_id: d for d in self.foreign}

    @property
    def tenant(self) -> str:
        """Whose documents these are (the requesting principal's tenant): its documents' one
        tenant, :data:`TENANT` for an empty corpus."""
        return self.documents[0].tenant if self.documents else TENANT

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


def _draw(*parts: str) -> int:
    """A stable integer from ``parts`` (the corpus's seeded rules; no global RNG)."""
    return int.from_bytes(hashlib.sha256("\x1f".join(parts).encode()).digest()[:8], "big")


def current_suffixes(policy_ids: Sequence[str]) -> dict[str, str]:
    """Which id suffix (``a`` or ``b``) the current version of each policy gets.

    Policies are ordered by a seeded hash of their id and the first half get ``a``; with an odd
    count the middle one is decided by the hash's parity. Applied per domain, the current version
    holds each suffix for half of the policies, so a suffix says nothing about validity.
    """
    order = sorted(policy_ids, key=lambda p: (_draw("suffix", p), p))
    half, odd = divmod(len(order), 2)
    out = {p: "a" if i < half else "b" for i, p in enumerate(order)}
    if odd:
        mid = order[half]
        out[mid] = "a" if _draw("suffix-odd", mid) % 2 == 0 else "b"
    return out


def doc_ids(policy_id: str, current_suffix: str) -> tuple[str, str]:
    """(current id, superseded id) of a policy whose current version has ``current_suffix``."""
    sup = "b" if current_suffix == "a" else "a"
    return f"{policy_id}-{current_suffix}", f"{policy_id}-{sup}"


def policy_of(doc_id: str) -> str:
    """The policy id inside a document id built by this module (``<policy>-<suffix>``)."""
    return doc_id.split("~", 1)[0].rsplit("-", 1)[0]


# --- another tenant's version of a policy --------------------------------------------------------

_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
_FACTORS = tuple(Decimal(f) for f in ("0.5", "0.75", "1.5", "2", "3"))


def _numeric_alternatives(value: str, kind: str) -> list[str]:
    """Values of the same shape as ``value`` with its number scaled (unit and format kept).

    A number with decimals moves in steps of its last digit instead (99.9% -> 99.8%), so the
    alternative stays in the range such figures take.
    """
    m = _NUMBER.search(value)
    if m is None:
        return []
    raw = m.group(0)
    n = Decimal(raw.replace(",", ""))
    places = len(raw.split(".", 1)[1]) if "." in raw else 0
    quantum = Decimal(1).scaleb(-places)
    if places:
        xs = [n + k * quantum for k in (-1, -2, -3, 1, 2, 3)]
    else:
        xs = [(n * f).quantize(quantum, rounding=ROUND_HALF_UP) for f in _FACTORS]
    out: list[str] = []
    for x in xs:
        if x <= 1:  # keep the unit's plural form valid
            continue
        if kind == "percent" and n <= 100 < x:
            continue
        num = f"{x:,.{places}f}" if x >= 1000 else f"{x:.{places}f}"
        out.append(value[: m.start()] + num + value[m.end() :])
    return out


def _restate(prose: str, old: str, new: str) -> str:
    return value_pattern(old).sub(new, prose)


def foreign_value(
    policy: PolicySpec,
    pools: Sequence[Sequence[str]] = (),
    salt: str = "foreign",
    exclude: Sequence[str] = (),
    pools_too: bool = False,
) -> tuple[str, str]:
    """Another tenant's value for ``policy`` and its prose: (value, text).

    The value has the policy's answer kind and differs from both of our versions (and from
    ``exclude``): numeric kinds scale the current number by a seeded factor; roles and systems
    take a seeded pick from ``pools`` (the corpus's other values of that kind, in tiers of
    preference: the policy's own domain first). The text is the current prose with the value
    replaced, and it states neither of our values. ``salt`` seeds the pick (``"foreign"``: the
    other tenant's; a conversation's in-conversation replacement uses its own); ``pools_too``
    lets a numeric kind fall back on ``pools`` when no scaled number qualifies. Raises
    :class:`ValueError` when the current prose does not state its value as written, or when no
    candidate qualifies.
    """
    cur, sup = policy.current, policy.superseded
    if not value_pattern(cur.value).search(cur.prose):
        raise ValueError(
            f"current.prose must state {cur.value!r} as written (case aside) so that another "
            "tenant's version can be derived from it"
        )
    ours = {normalize_answer(v) for v in (cur.value, sup.value, *exclude)}
    if policy.answer_kind in {"role", "system"}:
        tiers = [sorted({v for v in pool}, key=normalize_answer) for pool in pools]
    else:
        tiers = [_numeric_alternatives(cur.value, policy.answer_kind)]
        if pools_too:
            tiers += [sorted(set(pool), key=normalize_answer) for pool in pools]
    seen: set[str] = set()
    for tier in tiers:
        cands = [v for v in tier if normalize_answer(v) not in ours | seen]
        seen |= {normalize_answer(v) for v in cands}
        start = _draw(salt, policy.id) % len(cands) if cands else 0
        for v in cands[start:] + cands[:start]:
            if states_value(cur.prose, v):
                continue
            text = " ".join(_restate(cur.prose, cur.value, v).split())
            mine = (cur.value, sup.value, *exclude)
            if states_value(text, v) and not any(states_value(text, x) for x in mine):
                return v, text
    raise ValueError(f"no value of kind {policy.answer_kind!r} qualifies as another tenant's")


def value_pools(domains: Sequence[DomainSpec]) -> dict[tuple[str, str], list[str]]:
    """The corpus's values by (domain, answer kind) and by ("", answer kind): the candidates
    :func:`foreign_value` picks a role or system from."""
    pools: dict[tuple[str, str], list[str]] = {}
    for d in domains:
        for p in d.policies:
            for key in ((d.domain, p.answer_kind), ("", p.answer_kind)):
                pools.setdefault(key, []).extend((p.current.value, p.superseded.value))
    return pools


def _foreign_documents(domains: Sequence[DomainSpec]) -> list[Document]:
    pools = value_pools(domains)
    out: list[Document] = []
    problems: list[SpecProblem] = []
    for d in domains:
        for i, p in enumerate(d.policies):
            try:
                tiers = (pools[(d.domain, p.answer_kind)], pools[("", p.answer_kind)])
                _, text = foreign_value(p, tiers)
            except ValueError as exc:
                problems.append(SpecProblem(f"{d.domain}.yaml", None, f"policies[{i}]", str(exc)))
                continue
            text = re.sub(rf"\b{TENANT}\b", FOREIGN_TENANT.capitalize(), text, flags=re.I)
            out.append(
                Document(
                    doc_id=f"{p.id}~{FOREIGN_TENANT}",
                    policy_id=p.id,
                    domain=d.domain,
                    title=p.topic,
                    text=text,
                    status="current",
                    effective_year=p.current.effective_year,
                    version=2,
                    owner=d.owner,
                    access_scope=p.access_scope,
                    tenant=FOREIGN_TENANT,
                )
            )
    if problems:
        raise SpecError(problems)
    return sorted(out, key=lambda x: x.doc_id)


def build(
    domains: list[DomainSpec], name: str = CORPUS_NAME, hash_: str = ""
) -> tuple[Corpus, AnswerKey]:
    """Build a corpus and its answer key from validated domain specs (deterministic)."""
    documents: list[Document] = []
    tasks: list[Task] = []
    key: dict[str, AnswerKeyEntry] = {}
    domains = sorted(domains, key=lambda d: d.domain)
    for d in domains:
        suffix = current_suffixes([p.id for p in d.policies])
        for p in d.policies:
            cur_id, sup_id = doc_ids(p.id, suffix[p.id])
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
    foreign = tuple(_foreign_documents(domains))
    corpus = Corpus(name, hash_, tuple(documents), tuple(tasks), infos, foreign)
    return corpus, AnswerKey(key)


def build_from_specs(spec_dir: Path, name: str = CORPUS_NAME) -> tuple[Corpus, AnswerKey]:
    """Load, validate and build (raises :class:`layerlab.corpus.spec.SpecError` on bad specs)."""
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
    write_jsonl(out / "foreign.jsonl", (_row(d) for d in corpus.foreign))
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
            "foreign_documents": len(corpus.foreign),
        },
        "files": {name: sha256_file(out / name) for name in FILES},
    }
    atomic_write_text(out / "manifest.json", canonical_json(manifest) + "\n")
    return manifest


def write_folder(corpus: Corpus, key: AnswerKey, out: Path | str) -> dict[str, Any]:
    """Write the corpus folder (:func:`write`) all at once: into a temporary sibling folder
    first, then renamed into place (:func:`layerlab._io.replace_folder`), so an error, Ctrl-C
    or a kill leaves ``out`` as it was. ``out`` must be missing, empty or a corpus folder
    (:func:`corpus_folder_problem`; it is replaced); anything else raises
    :class:`~layerlab._io.FolderRefused` and nothing changes."""
    from layerlab._io import replace_folder

    return replace_folder(Path(out), lambda tmp: write(corpus, key, tmp), corpus_folder_problem)


def _not_a_corpus(manifest: Any) -> str | None:
    """What a ``manifest.json`` is when it is not a corpus manifest, or None. A corpus manifest
    (what :func:`write` writes) holds ``corpus``, ``spec_hash``, ``counts`` and the checksums of
    corpus files only, and no ``kind`` (run, study and other archives' manifests have one)."""
    if not isinstance(manifest, dict):
        return "its manifest.json is not a corpus manifest"
    if "kind" in manifest or "run_id" in manifest:
        return f"its manifest.json is an archive's, kind {manifest.get('kind') or 'run'!r}"
    files = manifest.get("files")
    ok = (
        isinstance(manifest.get("corpus"), str)
        and isinstance(manifest.get("spec_hash"), str)
        and isinstance(manifest.get("counts"), dict)
        and isinstance(files, dict)
        and {"documents.jsonl", "tasks.jsonl"} <= set(files) <= set(FILES)
    )
    return None if ok else "its manifest.json is not a corpus manifest"


def corpus_folder_problem(out: Path | str) -> str | None:
    """Why a corpus command may not write the folder ``out``, or None: it must be missing,
    empty, or a corpus folder (its manifest says so, :func:`_not_a_corpus`) holding only the
    corpus files, which it replaces. Nothing is read but the folder's names and manifest."""
    import json

    out = Path(out)
    bad, names = folder_names(out)
    if bad is not None or not names:
        return bad
    expected = "expected a new or empty folder, or a corpus folder (which is replaced)"
    if "manifest.json" not in names:
        return (
            f"not empty and not a corpus folder (no manifest.json; holds {names[0]!r}); {expected}"
        )
    try:
        what = _not_a_corpus(json.loads((out / "manifest.json").read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        what = "its manifest.json is not valid JSON"
    if what:
        return f"not empty and not a corpus folder ({what}); {expected}"
    extra = [n for n in names if n not in (*FILES, "manifest.json")]
    if extra:
        return (
            f"a corpus folder that also holds {extra[0]!r}, which replacing it would delete; "
            "move that out, or choose a new or empty folder"
        )
    return None


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
    manifest = _check_manifest(
        folder, ("documents.jsonl", "tasks.jsonl", "domains.json", "foreign.jsonl")
    )
    docs = tuple(Document(**r) for r in read_jsonl(folder / "documents.jsonl"))
    foreign = tuple(Document(**r) for r in read_jsonl(folder / "foreign.jsonl"))
    tasks = tuple(Task(**r) for r in read_jsonl(folder / "tasks.jsonl"))
    domains = tuple(
        DomainInfo(r["domain"], r["title"], r["owner"], tuple(r["cue_words"]))
        for r in json.loads((folder / "domains.json").read_text(encoding="utf-8"))
    )
    return Corpus(manifest["corpus"], manifest["spec_hash"], docs, tasks, domains, foreign)


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
