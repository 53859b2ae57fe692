"""Conversations: multi-turn sessions over the corpus's policies, and each turn's answer key.

A conversation (:class:`Conversation`) is an ordered list of turns about one policy (its
cluster) and, for a multi-hop turn, a second policy of the same domain. It opens with one of the
policy's question variants; every later turn only makes sense with the earlier ones: an ellipsis
("and under the previous version?"), a pronoun ("when did that take effect?"), a turn that needs
both policies, an ambiguous "it" after the two (the safe reply asks which one), the scripted
user's answer to that (its text chosen by the category of the system's reply:
:mod:`layerlab.corpus.script`), a replacement published today (the turn :attr:`Turn.publishes` a
new version and :attr:`Turn.retires` the old one) and a question about the first answer. The
kinds, their templates and the seed are the DSL's (``data/specs/conversations.yaml``).

Generation is seeded (a hash of the seed, the conversation and what is drawn; no global RNG)
and byte-for-byte reproducible. As for tasks (:mod:`layerlab.corpus.build`), what a system sees
(:class:`Conversation`: turn texts, the published documents) and the answer key
(:class:`TurnKey`: the turn's kind, expected answers, required documents) are separate types and
files; the builder refuses a turn text that states an answer of its conversation.
"""

from __future__ import annotations

import hashlib
import string
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from layerlab import __version__
from layerlab._io import (
    atomic_write_text,
    canonical_json,
    folder_names,
    read_jsonl,
    sha256_file,
    write_jsonl,
)
from layerlab.corpus.build import (
    CORPUS_NAME,
    Document,
    current_suffixes,
    doc_ids,
    foreign_value,
    value_pools,
)
from layerlab.corpus.spec import DomainSpec, PolicySpec, load_domains, load_yaml_as, spec_hash
from layerlab.corpus.text import states_value

ReplyCategory = Literal["answered", "abstained", "clarification"]
REPLY_CATEGORIES: tuple[ReplyCategory, ...] = ("answered", "abstained", "clarification")
"""What the scripted user tells apart in a system's reply: an answer, a non-answer, a question
back (a clarification request)."""

KINDS = ("opening", "previous_version", "since_when", "multi_hop", "clarify", "clarified",
         "update", "recall_first")  # fmt: skip
FOLLOW_UPS = ("previous_version", "since_when", "multi_hop", "update", "recall_first")
"""The follow-ups a conversation draws from (``multi_hop`` brings ``clarify`` and ``clarified``
with it when three turns are left, else ends the conversation)."""

FILES = ("conversations.jsonl", "conversation_key.jsonl")
NonEmpty = Annotated[str, Field(min_length=1)]
Templates = Annotated[list[NonEmpty], Field(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _fields(template: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}


class TurnTemplates(_Strict):
    """The texts of each follow-up kind (one drawn per turn); ``clarified``: per reply category."""

    previous_version: Templates
    since_when: Templates
    multi_hop: Templates
    clarify: Templates
    clarified: dict[ReplyCategory, Templates]
    update: Templates
    recall_first: Templates

    @model_validator(mode="after")
    def _placeholders(self) -> TurnTemplates:
        allowed = {"multi_hop": {"topic", "other"}}
        for kind in type(self).model_fields:
            value = getattr(self, kind)
            texts = [t for ts in value.values() for t in ts] if isinstance(value, dict) else value
            ok = allowed.get(kind, {"topic"})
            for t in texts:
                bad = _fields(t) - ok
                if bad:
                    raise ValueError(
                        f"{kind}: template {t!r} names {sorted(bad)}; expected only "
                        f"{sorted('{' + f + '}' for f in ok)}"
                    )
        missing = [c for c in REPLY_CATEGORIES if c not in self.clarified]
        if missing:
            raise ValueError(
                f"clarified: expected texts for every reply category, {missing} missing"
            )
        return self


class ConversationSpec(_Strict):
    """The conversation DSL (``data/specs/conversations.yaml``)."""

    seed: int
    per_policy: Annotated[int, Field(ge=1, le=5)] = 1
    min_turns: Annotated[int, Field(ge=3, le=8)] = 3
    max_turns: Annotated[int, Field(ge=3, le=8)] = 6
    update_year: Annotated[int, Field(ge=1990, le=2100)]
    templates: TurnTemplates

    @model_validator(mode="after")
    def _range(self) -> ConversationSpec:
        if self.min_turns > self.max_turns:
            raise ValueError(f"min_turns ({self.min_turns}) must not exceed max_turns "
                             f"({self.max_turns})")  # fmt: skip
        return self


def load_spec(path: Path | str | None = None) -> ConversationSpec:
    """Load and validate the conversation DSL (default: the committed one); :class:`SpecError`
    with ``file:line: field: problem`` lines otherwise."""
    from layerlab import paths

    return load_yaml_as(Path(path or paths.CONVERSATION_SPEC), ConversationSpec)


# --- the public side and the key ----------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One user turn as a system meets it: its text, or (``branches``) one text per category of
    the system's previous reply; the documents published (a replacement) and retired (now
    superseded) just before it."""

    index: int
    text: str = ""
    branches: Mapping[str, str] = field(default_factory=dict)
    publishes: tuple[Document, ...] = ()
    retires: tuple[str, ...] = ()

    def say(self, previous: ReplyCategory | None) -> str:
        """The turn's text after a reply of category ``previous`` (a fixed turn ignores it)."""
        if not self.branches:
            return self.text
        if previous is None or previous not in self.branches:
            raise ValueError(
                f"turn {self.index}: the previous reply's category must be one of "
                f"{sorted(self.branches)}, got {previous!r}"
            )
        return self.branches[previous]

    def texts(self) -> tuple[str, ...]:
        """Every text the turn may take."""
        return (
            (self.text,)
            if not self.branches
            else tuple(self.branches[c] for c in sorted(self.branches))
        )


@dataclass(frozen=True)
class Conversation:
    """A conversation's public side: its policies (the first is its cluster), the opening's
    question variant and the turns. No answer, no turn kind."""

    conversation_id: str
    domain: str
    policy_ids: tuple[str, ...]
    variant: int
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class TurnKey:
    """Evaluator-only truth for one turn: its kind, the behaviour a safe system shows (``answer``
    or ``clarify``: ask which one), the answers expected (all of them, for a multi-hop turn) and
    the documents that ground them."""

    conversation_id: str
    turn: int
    kind: str
    behaviour: Literal["answer", "clarify"]
    policy_ids: tuple[str, ...]
    expected_answers: tuple[str, ...]
    required_doc_ids: tuple[str, ...]


class ConversationKey(Mapping[tuple[str, int], TurnKey]):
    """Evaluator-only mapping ``(conversation_id, turn) -> TurnKey``. Never passed to a system."""

    def __init__(self, entries: Mapping[tuple[str, int], TurnKey]):
        self._entries = dict(entries)

    def __getitem__(self, key: tuple[str, int]) -> TurnKey:
        return self._entries[key]

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


# --- generation -----------------------------------------------------------------------------------


def _draw(seed: int, *parts: object) -> int:
    """A stable integer from the seed and ``parts`` (no global RNG)."""
    text = "\x1f".join(map(str, (seed, *parts)))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _pick(seq: Sequence[str], seed: int, *parts: object) -> str:
    return seq[_draw(seed, *parts) % len(seq)]


def _topic(p: PolicySpec) -> str:
    """The topic as it reads inside a sentence (an acronym's capital kept)."""
    t = p.topic
    return t[0].lower() + t[1:] if len(t) > 1 and t[1].islower() else t


@dataclass
class _Version:
    value: str
    doc_id: str
    year: int


def _kinds(spec: ConversationSpec, cid: str, n_turns: int) -> list[str]:
    """The follow-up kinds of a conversation of ``n_turns``: a seeded order of
    :data:`FOLLOW_UPS`, each once; a multi-hop turn takes its clarify pair when three turns are
    left, is the last turn when one is, and is skipped otherwise."""
    order = sorted(FOLLOW_UPS, key=lambda k: (_draw(spec.seed, cid, "order", k), k))
    out: list[str] = []
    room = n_turns - 1
    for kind in order:
        left = room - len(out)
        if left <= 0:
            break
        if kind == "previous_version" and "clarified" in out:
            continue  # the clarified turn asked for the version before already
        if kind != "multi_hop":
            out.append(kind)
        elif left >= 3:
            out += ["multi_hop", "clarify", "clarified"]
        elif left == 1:
            out.append("multi_hop")
    return out


def _partner(domain: DomainSpec, p: PolicySpec, seed: int, cid: str) -> PolicySpec:
    """The multi-hop turn's second policy: of the same domain, the same answer kind if any."""
    others = [q for q in domain.policies if q.id != p.id]
    same = [q for q in others if q.answer_kind == p.answer_kind] or others
    return same[_draw(seed, cid, "partner") % len(same)]


def _conversation(
    spec: ConversationSpec,
    domain: DomainSpec,
    p: PolicySpec,
    k: int,
    ids: Mapping[str, tuple[str, str]],
    pools: Mapping[tuple[str, str], list[str]],
) -> tuple[Conversation, list[TurnKey]]:
    seed, tpl = spec.seed, spec.templates
    cid = f"{p.id}-c{k}"
    span = spec.max_turns - spec.min_turns + 1
    kinds = ["opening", *_kinds(spec, cid, spec.min_turns + _draw(seed, cid, "turns") % span)]
    q = _partner(domain, p, seed, cid) if "multi_hop" in kinds else None
    versions = {x.id: [_Version(x.superseded.value, ids[x.id][1], x.superseded.effective_year),
                       _Version(x.current.value, ids[x.id][0], x.current.effective_year)]
                for x in ([p, q] if q else [p])}  # fmt: skip
    first = versions[p.id][-1]
    focus = 1  # which version of the first policy "it" and "that" refer to
    variant = 1 + _draw(seed, cid, "variant") % len(p.questions)
    turns: list[Turn] = []
    keys: list[TurnKey] = []
    for i, kind in enumerate(kinds):
        fill = {"topic": _topic(p), "other": _topic(q) if q else ""}
        text, branches = "", dict[str, str]()
        answers: tuple[str, ...]
        docs: tuple[str, ...]
        publishes: tuple[Document, ...] = ()
        retires: tuple[str, ...] = ()
        pids: tuple[str, ...] = (p.id,)
        behaviour: Literal["answer", "clarify"] = "answer"
        now = versions[p.id][-1]
        if kind == "opening":
            text = " ".join(p.questions[variant - 1].split())
            answers, docs = (now.value,), (now.doc_id,)
        elif kind in ("previous_version", "clarified"):
            focus -= 1  # the version before the one in focus (never before the first: _kinds)
            answers, docs = (versions[p.id][focus].value,), (versions[p.id][focus].doc_id,)
        elif kind == "since_when":
            answers, docs = (str(versions[p.id][focus].year),), (versions[p.id][focus].doc_id,)
        elif kind == "multi_hop":
            assert q is not None
            theirs, focus = versions[q.id][-1], len(versions[p.id]) - 1
            pids, answers, docs = (
                (p.id, q.id),
                (now.value, theirs.value),
                (now.doc_id, theirs.doc_id),
            )
        elif kind == "clarify":
            assert q is not None
            pids, behaviour, answers, docs = (p.id, q.id), "clarify", (), ()
        elif kind == "update":
            new, value = _replacement(spec, domain, p, cid, pools)
            publishes, retires = (new,), (now.doc_id,)
            versions[p.id].append(_Version(value, new.doc_id, new.effective_year))
            answers, docs, focus = (value,), (new.doc_id,), len(versions[p.id]) - 1
        else:  # recall_first
            answers, docs, focus = (first.value,), (first.doc_id,), 1
        if kind == "clarified":
            branches = {c: _pick(tpl.clarified[c], seed, cid, i, c).format(**fill)
                        for c in REPLY_CATEGORIES}  # fmt: skip
        elif kind != "opening":
            text = _pick(getattr(tpl, kind), seed, cid, i, kind).format(**fill)
        turns.append(Turn(i, text, branches, publishes, retires))
        keys.append(TurnKey(cid, i, kind, behaviour, pids, answers, docs))
    conv = Conversation(cid, domain.domain, (p.id, q.id) if q else (p.id,), variant, tuple(turns))
    _refuse_leaks(conv, keys)
    return conv, keys


def _replacement(spec: ConversationSpec, domain: DomainSpec, p: PolicySpec, cid: str,
                 pools: Mapping[tuple[str, str], list[str]]) -> tuple[Document, str]:  # fmt: skip
    """The version published today and its value: a value of the policy's kind that is neither of
    ours nor the other tenant's (:func:`~layerlab.corpus.build.foreign_value`, salted by the
    conversation), in the current prose, under an opaque id (``<policy>-<4 hex>``: no version
    signal)."""
    tiers = (pools[(domain.domain, p.answer_kind)], pools[("", p.answer_kind)])
    theirs, _ = foreign_value(p, tiers)
    salt = f"update:{spec.seed}:{cid}"
    value, text = foreign_value(p, tiers, salt=salt, exclude=(theirs,), pools_too=True)
    return Document(
        doc_id=f"{p.id}-{_draw(spec.seed, cid, 'doc') % 16**4:04x}",
        policy_id=p.id,
        domain=domain.domain,
        title=p.topic,
        text=" ".join(text.split()),
        status="current",
        effective_year=spec.update_year,
        version=3,
        owner=domain.owner,
        access_scope=p.access_scope,
    ), value


def _refuse_leaks(conv: Conversation, keys: Sequence[TurnKey]) -> None:
    """ValueError when a turn text states an answer of its conversation (the key never reaches
    what a system is told)."""
    answers = {a for k in keys for a in k.expected_answers}
    for t in conv.turns:
        for text in t.texts():
            hit = [a for a in answers if states_value(text, a)]
            if hit:
                raise ValueError(
                    f"{conv.conversation_id} turn {t.index}: the text {text!r} states the answer "
                    f"{hit[0]!r}; change the template or the policy's question"
                )


def build(domains: Sequence[DomainSpec], spec: ConversationSpec) -> tuple[
        tuple[Conversation, ...], ConversationKey]:  # fmt: skip
    """Every conversation and its key, from validated domain specs and the DSL (deterministic)."""
    if any(p.current.effective_year >= spec.update_year for d in domains for p in d.policies):
        raise ValueError("update_year must be later than every current version's effective_year")
    pools = value_pools(domains)
    convs: list[Conversation] = []
    key: dict[tuple[str, int], TurnKey] = {}
    for d in sorted(domains, key=lambda x: x.domain):
        suffix = current_suffixes([p.id for p in d.policies])
        ids = {p.id: doc_ids(p.id, suffix[p.id]) for p in d.policies}
        for p in d.policies:
            for k in range(1, spec.per_policy + 1):
                conv, keys = _conversation(spec, d, p, k, ids, pools)
                convs.append(conv)
                key.update({(x.conversation_id, x.turn): x for x in keys})
    convs.sort(key=lambda c: c.conversation_id)
    return tuple(convs), ConversationKey(key)


def build_from_specs(
    corpus_spec: Path | str | None = None, spec_path: Path | str | None = None
) -> tuple[tuple[Conversation, ...], ConversationKey]:
    """Load both DSLs (default: the committed ones) and :func:`build`."""
    from layerlab import paths

    return build(load_domains(Path(corpus_spec or paths.CORPUS_SPEC_DIR)), load_spec(spec_path))


# --- files --------------------------------------------------------------------------------------


def _conversation_row(c: Conversation) -> dict[str, Any]:
    return {
        "conversation_id": c.conversation_id,
        "domain": c.domain,
        "policy_ids": list(c.policy_ids),
        "variant": c.variant,
        "turns": [
            {"turn": t.index, "text": t.text, "branches": dict(sorted(t.branches.items())),
             "publishes": [asdict(d) for d in t.publishes], "retires": list(t.retires)}
            for t in c.turns
        ],
    }  # fmt: skip


def _key_row(k: TurnKey) -> dict[str, Any]:
    return {name: list(v) if isinstance(v, tuple) else v for name, v in asdict(k).items()}


def clusters(convs: Sequence[Conversation]) -> dict[str, Any]:
    """How the conversations cluster: by policy (the unit whose turns are correlated, as the
    three question variants of a task are), with the opening variants each policy got."""
    per = Counter(c.policy_ids[0] for c in convs)
    return {
        "unit": "policy",
        "policies": len(per),
        "conversations_per_policy": {str(n): m for n, m in sorted(Counter(per.values()).items())},
        "variants": {str(v): n for v, n in sorted(Counter(c.variant for c in convs).items())},
        "with_second_policy": sum(len(c.policy_ids) > 1 for c in convs),
    }


def write(convs: Sequence[Conversation], key: ConversationKey, out: Path,
          hashes: Mapping[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """Write the conversations, their key and a manifest into ``out``; return the manifest.
    Same input, byte-identical files (sorted rows, canonical JSON, no timestamps)."""
    out = Path(out)
    write_jsonl(out / "conversations.jsonl", (_conversation_row(c) for c in convs))
    write_jsonl(out / "conversation_key.jsonl",
                (_key_row(key[(c.conversation_id, t.index)]) for c in convs for t in c.turns))  # fmt: skip
    kinds = Counter(key[(c.conversation_id, t.index)].kind for c in convs for t in c.turns)
    manifest = {
        "conversations": "conversations",
        "corpus": CORPUS_NAME,
        **dict(sorted((hashes or {}).items())),
        "layerlab_version": __version__,
        "counts": {
            "conversations": len(convs),
            "turns": sum(len(c.turns) for c in convs),
            "domains": len({c.domain for c in convs}),
            "by_length": {
                str(n): m for n, m in sorted(Counter(len(c.turns) for c in convs).items())
            },
            "by_kind": {k: kinds[k] for k in KINDS},
        },
        "clusters": clusters(convs),
        "files": {name: sha256_file(out / name) for name in FILES},
    }
    atomic_write_text(out / "manifest.json", canonical_json(manifest) + "\n")
    return manifest


def spec_hashes(corpus_spec: Path | str | None = None,
                spec_path: Path | str | None = None) -> dict[str, str]:  # fmt: skip
    """The hashes a conversation folder names: the corpus spec's and the conversation DSL's."""
    from layerlab import paths

    conv = Path(spec_path or paths.CONVERSATION_SPEC)
    return {"spec_hash": spec_hash(Path(corpus_spec or paths.CORPUS_SPEC_DIR)),
            "conversation_spec_hash": hashlib.sha256(conv.read_bytes()).hexdigest()}  # fmt: skip


def folder_problem(out: Path | str) -> str | None:
    """Why ``out`` may not be written, or None: it must be missing, empty, or a conversations
    folder (its manifest says so) holding only the conversation files, which it replaces."""
    import json

    out = Path(out)
    bad, names = folder_names(out)
    if bad is not None or not names:
        return bad
    expected = "expected a new or empty folder, or a conversations folder (which is replaced)"
    try:
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("conversations") != "conversations":
        return f"not empty and not a conversations folder (holds {names[0]!r}); {expected}"
    extra = [n for n in names if n not in (*FILES, "manifest.json")]
    if extra:
        return f"a conversations folder that also holds {extra[0]!r}; move it out or choose another folder"
    return None


def write_folder(convs: Sequence[Conversation], key: ConversationKey, out: Path | str,
                 hashes: Mapping[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """:func:`write` all at once (a temporary sibling renamed into place; ``out`` as it was on
    any error); :class:`~layerlab._io.FolderRefused` when :func:`folder_problem` objects."""
    from layerlab._io import replace_folder

    return replace_folder(Path(out), lambda tmp: write(convs, key, tmp, hashes), folder_problem)


def _checked(folder: Path, name: str) -> Path:
    import json

    path, mpath = folder / name, folder / "manifest.json"
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ValueError(
            f"{mpath}: missing or not JSON (build it: layerlab conversations build)"
        ) from None
    if not path.is_file() or manifest.get("files", {}).get(name) != sha256_file(path):
        raise ValueError(f"{path}: missing or its checksum differs from manifest.json (rebuild it)")
    return path


def load(folder: Path | str) -> tuple[Conversation, ...]:
    """The public side of a conversations folder (checked against its manifest)."""
    out = []
    for r in read_jsonl(_checked(Path(folder), "conversations.jsonl")):
        turns = tuple(
            Turn(t["turn"], t["text"], dict(t["branches"]),
                 tuple(Document(**d) for d in t["publishes"]), tuple(t["retires"]))
            for t in r["turns"]
        )  # fmt: skip
        out.append(Conversation(r["conversation_id"], r["domain"], tuple(r["policy_ids"]),
                                r["variant"], turns))  # fmt: skip
    return tuple(out)


def load_key(folder: Path | str) -> ConversationKey:
    """The evaluator-only key of a conversations folder (checked against its manifest)."""
    rows = read_jsonl(_checked(Path(folder), "conversation_key.jsonl"))
    return ConversationKey({
        (r["conversation_id"], r["turn"]): TurnKey(
            r["conversation_id"], r["turn"], r["kind"], r["behaviour"], tuple(r["policy_ids"]),
            tuple(r["expected_answers"]), tuple(r["required_doc_ids"]))
        for r in rows
    })  # fmt: skip


__all__ = [
    "Conversation", "ConversationKey", "ConversationSpec", "Turn", "TurnKey", "REPLY_CATEGORIES",
    "KINDS", "build", "build_from_specs", "clusters", "load", "load_key", "load_spec", "write",
    "write_folder", "folder_problem", "spec_hashes",
]  # fmt: skip
