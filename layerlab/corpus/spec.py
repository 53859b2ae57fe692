"""The specification DSL: typed models for policy specs and a YAML loader with precise errors.

A domain spec is one YAML file under ``data/specs/<corpus>/``. It names a domain, its cue
words and its policy units; a unit has a topic, an answer kind, the current and superseded
versions (value, effective year, prose) and three question variants. Validation problems are
reported as :class:`SpecProblem` values naming the file, line, field path and what was
expected, so the CLI can print one line per problem instead of a traceback.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from layerlab.corpus.text import normalize_answer, states_value, words

AnswerKind = Literal["duration", "money", "percent", "count", "role", "system"]
ANSWER_KINDS: tuple[str, ...] = ("duration", "money", "percent", "count", "role", "system")

_ID = r"^[a-z][a-z0-9_]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


NonEmpty = Annotated[str, Field(min_length=1)]


def value_pattern(value: str) -> re.Pattern[str]:
    """``value`` as written (case and spacing aside), not inside a longer number or word."""
    body = r"\s+".join(re.escape(w) for w in value.split())
    return re.compile(rf"(?<![\w.$]){body}(?![\w%]|[.,]\d)", re.IGNORECASE)


class VersionSpec(_Strict):
    """One version of a policy: the answer value, when it took effect, and its prose."""

    value: NonEmpty
    effective_year: Annotated[int, Field(ge=1990, le=2100)]
    prose: Annotated[str, Field(min_length=60)]

    @model_validator(mode="after")
    def _prose_states_value(self) -> VersionSpec:
        if not states_value(self.prose, self.value):
            raise ValueError(
                f"the prose must state the value {self.value!r} verbatim "
                "(case and punctuation aside)"
            )
        return self


class PolicySpec(_Strict):
    """A policy unit: two versions with different answers and three question variants."""

    id: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*-\d{2}$")]
    topic: NonEmpty
    answer_kind: AnswerKind
    access_scope: Annotated[str, Field(pattern=_ID)] = "all_staff"
    current: VersionSpec
    superseded: VersionSpec
    questions: Annotated[list[NonEmpty], Field(min_length=3, max_length=3)]
    # words the questions use that the current document does not: reviewed paraphrases
    # ("vendor" for the document's "supplier"); `layerlab spec lint` flags any other
    paraphrases: list[Annotated[str, Field(pattern=r"^[a-z0-9]+$")]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _versions_differ(self) -> PolicySpec:
        cur, sup = self.current, self.superseded
        if normalize_answer(cur.value) == normalize_answer(sup.value):
            raise ValueError("current.value and superseded.value must differ")
        if cur.effective_year <= sup.effective_year:
            raise ValueError(
                f"current.effective_year ({cur.effective_year}) must be later than "
                f"superseded.effective_year ({sup.effective_year})"
            )
        if not value_pattern(cur.value).search(cur.prose):
            raise ValueError(
                f"current.prose must state {cur.value!r} as written (case aside), so that another "
                "tenant's version of the policy can be derived by replacing it"
            )
        if states_value(cur.prose, sup.value):
            raise ValueError(
                f"current.prose also states the superseded value {sup.value!r}; "
                "each version's prose must state only its own value"
            )
        if states_value(sup.prose, cur.value):
            raise ValueError(
                f"superseded.prose also states the current value {cur.value!r}; "
                "each version's prose must state only its own value"
            )
        if len({normalize_answer(q) for q in self.questions}) != len(self.questions):
            raise ValueError("the three questions must be distinct")
        for q in self.questions:
            if not q.rstrip().endswith("?"):
                raise ValueError(f"question {q!r} must end with '?'")
        if len(set(self.paraphrases)) != len(self.paraphrases):
            raise ValueError("paraphrases must not repeat")
        return self


class DomainSpec(_Strict):
    """One domain of the corpus: cue words and policy units."""

    domain: Annotated[str, Field(pattern=_ID)]
    title: NonEmpty
    owner: NonEmpty
    cue_words: Annotated[list[NonEmpty], Field(min_length=1)]
    policies: Annotated[list[PolicySpec], Field(min_length=1)]

    def located_problems(self) -> list[tuple[tuple[Any, ...], str]]:
        """Problems tied to one policy, located at it (so a file loader can give their line)."""
        found: list[tuple[tuple[Any, ...], str]] = []
        first: dict[str, int] = {}
        for i, p in enumerate(self.policies):
            if not p.id.startswith(self.domain + "-"):
                found.append(
                    (
                        ("policies", i, "id"),
                        f"{p.id!r} must start with the domain name '{self.domain}-'",
                    )
                )
            if p.id in first:
                found.append(
                    (
                        ("policies", i, "id"),
                        f"duplicate policy id {p.id!r} (first used by policies[{first[p.id]}])",
                    )
                )
            first.setdefault(p.id, i)
        return found

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> DomainSpec:
        # a file loader asks for located problems itself (``deferred``), to report their lines
        if not (info.context or {}).get("deferred"):
            for loc, msg in self.located_problems():
                raise ValueError(f"{_fmt_loc(loc)}: {msg}")
        for w in self.cue_words:
            if w != w.lower() or not re.fullmatch(r"[a-z0-9]+", w):
                raise ValueError(f"cue word {w!r} must be one lower-case word")
        if len(set(self.cue_words)) != len(self.cue_words):
            raise ValueError("cue_words must not repeat")
        return self


@dataclass(frozen=True)
class SpecProblem:
    """One validation problem, printable as ``file:line: field: message``."""

    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        field = f" {self.field}:" if self.field else ""
        return f"{where}:{field} {self.message}"


class SpecError(Exception):
    """Raised with every problem found; ``str()`` gives one line per problem, at most
    :data:`~layerlab._io.MAX_PROBLEM_LINES` of them and then a count of the rest."""

    def __init__(self, problems: Sequence[SpecProblem]):
        from layerlab._io import capped_lines

        self.problems = list(problems)
        super().__init__("\n".join(capped_lines([str(p) for p in self.problems], "problem(s)")))

    @classmethod
    def of(cls, exc: Exception, shown: str) -> SpecError:
        """A read failure (:class:`~layerlab._io.BoundedReadError`, :class:`yaml.YAMLError`) as
        one problem ``file:line: ...``."""
        from layerlab._io import BoundedReadError

        if isinstance(exc, BoundedReadError):
            return cls([SpecProblem(shown, exc.line, "", exc.message)])
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        return cls([SpecProblem(shown, line, "", f"not valid YAML: {problem}")])


def read_yaml(path: Path, max_bytes: int | None = None) -> tuple[yaml.Node | None, Any]:
    """(node, data) of a YAML file read within the bounds of :mod:`layerlab._io` (size, regular
    file, UTF-8 with or without BOM, nesting depth, expanded nodes); :class:`SpecError` with one
    ``file:line`` problem otherwise."""
    from layerlab._io import MAX_FILE_BYTES, BoundedReadError, load_yaml_bounded, read_text_bounded

    shown = str(path)
    try:
        text = read_text_bounded(path, max_bytes or MAX_FILE_BYTES)
        return load_yaml_bounded(text, shown)
    except (BoundedReadError, yaml.YAMLError) as exc:
        raise SpecError.of(exc, shown) from None


M = TypeVar("M", bound=BaseModel)


def _fmt_loc(loc: Iterable[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _line_of(node: yaml.Node | None, loc: Sequence[Any]) -> int | None:
    """Line (1-based) of the deepest YAML node reached along ``loc``."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value == part:
                    nxt = v
                    line = k.start_mark.line + 1
                    break
            if nxt is None:
                return line
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return line
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _describe(err: Any, model: type[BaseModel]) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key (check the spelling against the DSL reference in docs/corpus.md)"
    if kind == "missing":
        return "required field is missing"
    if kind.endswith("_type") or kind in {"int_parsing", "string_type"}:
        got = type(err.get("input")).__name__
        return f"expected {kind.removesuffix('_type').replace('_', ' ')}, got {got}"
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ")


Check = Callable[[Any], list[tuple[tuple[Any, ...], str]]]


def _duplicate_keys(node: yaml.Node | None) -> list[tuple[int, str, str]]:
    """(line, field path, message) for every key repeated within one YAML mapping. A YAML
    loader silently keeps the last value; in a spec that hides an edit, so it is an error."""
    found: list[tuple[int, str, str]] = []
    seen: set[int] = set()  # an alias is its anchor's node: each node is walked once

    def walk(n: yaml.Node | None, loc: tuple[Any, ...]) -> None:
        if n is None or id(n) in seen:
            return
        seen.add(id(n))
        if isinstance(n, yaml.MappingNode):
            first: dict[str, int] = {}
            for k, v in n.value:
                if isinstance(k, yaml.ScalarNode):
                    line = k.start_mark.line + 1
                    if k.value in first:
                        found.append(
                            (
                                line,
                                _fmt_loc((*loc, k.value)),
                                f"duplicate key {k.value!r} (first at line {first[k.value]}); "
                                "each key may appear once in a mapping",
                            )
                        )
                    first.setdefault(k.value, line)
                    walk(v, (*loc, k.value))
        elif isinstance(n, yaml.SequenceNode):
            for i, item in enumerate(n.value):
                walk(item, (*loc, i))

    walk(node, ())
    return found


def load_yaml_as(path: Path, model: type[M], check: Check | None = None) -> M:
    """Load ``path`` and validate it as ``model``; raise :class:`SpecError` on any problem.

    ``check`` may inspect the validated object further and return ``(loc, message)`` pairs;
    they are reported like model errors, with the line of ``loc`` in the file.
    """
    path = Path(path)
    shown = str(path)
    node, data = read_yaml(path)
    dups = _duplicate_keys(node)
    if dups:
        raise SpecError([SpecProblem(shown, line, f, msg) for line, f, msg in dups])
    if not isinstance(data, dict):
        raise SpecError(
            [
                SpecProblem(
                    shown, 1, "", f"expected a mapping at the top level, got {type(data).__name__}"
                )
            ]
        )
    try:
        obj = model.model_validate(data, context={"deferred": True})
    except ValidationError as exc:
        problems = [
            SpecProblem(
                shown, _line_of(node, err["loc"]), _fmt_loc(err["loc"]), _describe(err, model)
            )
            for err in exc.errors()
        ]
        raise SpecError(problems) from exc
    located = getattr(obj, "located_problems", None)
    extra = (located() if callable(located) else []) + (check(obj) if check else [])
    if extra:
        raise SpecError(
            [SpecProblem(shown, _line_of(node, loc), _fmt_loc(loc), msg) for loc, msg in extra]
        )
    return obj


def _line_in_file(path: Path, loc: Sequence[Any]) -> int | None:
    """Line of ``loc`` in an already validated YAML file (for problems found across files)."""
    try:
        return _line_of(read_yaml(path)[0], loc)
    except SpecError:
        return None


def spec_files(path: Path) -> list[Path]:
    """The YAML files a spec path names: the file itself, or a folder's ``*.yaml``, sorted."""
    path = Path(path)
    if path.is_dir():
        return sorted(p for p in path.glob("*.yaml") if not p.name.startswith("_"))
    return [path]


def _domain_mismatch(f: Path) -> SpecProblem | None:
    """The problem of a file whose ``domain`` is a name other than its file name, or None."""
    try:
        node, data = read_yaml(f)
    except SpecError:
        return None  # load_yaml_as reports these
    domain = data.get("domain") if isinstance(data, dict) else None
    if not isinstance(domain, str) or domain == f.stem:
        return None
    return SpecProblem(
        str(f),
        _line_of(node, ("domain",)),
        "domain",
        f"domain {domain!r} must match the file name {f.stem!r} (rename the file or the domain; "
        f"policy ids start with the domain name)",
    )


def _follows_from(mismatch: SpecProblem | None, p: SpecProblem) -> bool:
    """Whether ``p`` is an id-prefix error that only restates a domain/file-name mismatch."""
    return mismatch is not None and "must start with the domain name" in p.message


def load_domains(path: Path) -> list[DomainSpec]:
    """Load and cross-check every domain spec under ``path`` (a folder or one file).

    Raises :class:`SpecError` listing every problem in every file, so one run shows all.
    """
    files = spec_files(path)
    if not files:
        raise SpecError([SpecProblem(str(path), None, "", "no *.yaml spec files found")])
    problems: list[SpecProblem] = []
    domains: list[tuple[Path, DomainSpec]] = []
    for f in files:
        mismatch = _domain_mismatch(f)
        if mismatch is not None:  # the real problem first, not one id error per policy
            problems.append(mismatch)
        try:
            domains.append((f, load_yaml_as(f, DomainSpec)))
        except SpecError as exc:
            problems.extend(p for p in exc.problems if not _follows_from(mismatch, p))
    seen_domain: dict[str, Path] = {}
    seen_policy: dict[str, Path] = {}
    cue_owner: dict[str, str] = {}
    for f, d in domains:
        if d.domain in seen_domain:
            problems.append(
                SpecProblem(
                    str(f),
                    1,
                    "domain",
                    f"duplicate domain {d.domain!r} (also in {seen_domain[d.domain]})",
                )
            )
        seen_domain[d.domain] = f
        for i, p in enumerate(d.policies):
            if p.id in seen_policy and seen_policy[p.id] != f:
                problems.append(
                    SpecProblem(
                        str(f),
                        _line_in_file(f, ("policies", i, "id")),
                        f"policies[{i}].id",
                        f"duplicate policy id {p.id!r} (also in {seen_policy[p.id]})",
                    )
                )
            seen_policy[p.id] = f
        for w in d.cue_words:
            if w in cue_owner and cue_owner[w] != d.domain:
                problems.append(
                    SpecProblem(
                        str(f),
                        None,
                        "cue_words",
                        f"cue word {w!r} is also a cue of domain {cue_owner[w]!r}; cue words must be unique to one domain",
                    )
                )
            cue_owner.setdefault(w, d.domain)
    if problems:
        raise SpecError(problems)
    return sorted((d for _, d in domains), key=lambda d: d.domain)


# --- question lint ------------------------------------------------------------------------------

# Function words and the scaffolding every question uses ("what", "how long", "which tool",
# "the amount"): they say what is asked, not which situation it is asked about.
LINT_STOP_WORDS = frozenset(
    """
    a an the of to in on at by for from with without into over under about after before during
    until within per and or but not no so than then if when once while unless as like whether
    is are was were be been being has have had do does did done get gets can could may might must
    should will would need needs what which who whom whose how why where many much long soon
    often quickly far i me my we us our you your they them their it its this that these those
    there someone anyone each every any some all own one s re up out off through go goes back
    needed
    amount number percentage share level limit maximum minimum deadline time period role tool
    system platform apply applies applied handle handles use used using sign signs set give
    gives given take takes keep kept new large big
    """.split()
)


def _stem(word: str) -> str:
    for suffix in ("ies", "es", "s", "ed", "ing", "ly", "e"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> list[str]:
    """The words of ``text`` that carry content: no stop word, no bare number."""
    return [w for w in words(text) if w not in LINT_STOP_WORDS and not w.isdigit()]


@dataclass(frozen=True)
class LintFinding:
    """A question variant with content words that its current document does not contain."""

    domain: str
    policy_id: str
    question: int  # index into the policy's questions
    words: tuple[str, ...]
    text: str

    def __str__(self) -> str:
        missing = ", ".join(self.words)
        return (
            f"{self.domain}: {self.policy_id} questions[{self.question}] uses words its current "
            f"document does not contain ({missing}): {self.text}"
        )


def unsupported_words(policy: PolicySpec) -> list[tuple[int, tuple[str, ...]]]:
    """Per question variant, the content words that neither the current document (its title
    and prose) nor the policy's declared ``paraphrases`` contain (light stemming on both sides).

    A variant that asks about a situation its document never mentions ("when hiring a
    contractor") cannot be answered from it; a reviewed paraphrase ("vendor" for "supplier") is
    declared once in the spec.
    """
    known = {_stem(w) for w in words(f"{policy.topic} {policy.current.prose}")}
    known |= {_stem(w) for w in policy.paraphrases}
    out = []
    for i, q in enumerate(policy.questions):
        miss = tuple(dict.fromkeys(w for w in content_words(q) if _stem(w) not in known))
        if miss:
            out.append((i, miss))
    return out


def lint_questions(domains: Iterable[DomainSpec]) -> list[LintFinding]:
    """Every question variant whose content words its current document does not contain."""
    return [
        LintFinding(d.domain, p.id, i, miss, p.questions[i])
        for d in domains
        for p in d.policies
        for i, miss in unsupported_words(p)
    ]


def unused_paraphrases(policy: PolicySpec) -> list[str]:
    """Declared paraphrases that no question needs (stale entries to remove)."""
    doc = {_stem(w) for w in words(f"{policy.topic} {policy.current.prose}")}
    asked = {_stem(w) for q in policy.questions for w in content_words(q)} - doc
    return [w for w in policy.paraphrases if _stem(w) not in asked]


def spec_hash(path: Path) -> str:
    """SHA-256 over the spec files' names and bytes, in sorted order."""
    h = hashlib.sha256()
    for f in spec_files(path):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()
