"""Mitigations: named, registered steps that each repair one reliability layer.

A mitigation has a name, the layer(s) it targets, the pipeline stage it acts at and a bounded set
of actions — ``pass``, ``repair``, ``retry``, ``filter`` or ``refuse`` (a structured non-answer
with a reason). It sees only what the pipeline sees at run time (the tool reply, the reader's
input and output, public corpus metadata such as which owner publishes which domain); it never
reads the answer key. Stages, in pipeline order:

==============  =====================================================  =========================
stage           what the mitigation sees / changes                     hook
==============  =====================================================  =========================
index           which registered retriever is fitted on the index      :meth:`Mitigation.retriever`
contract        how the tool payload is checked (strict / repair)      :attr:`ContractCheck.mode`
access, tool    the tool reply as the contract classified it           :meth:`Mitigation.on_tool`
reader_input    the evidence the reader would get                      :meth:`Mitigation.on_input`
after_reader    the reader's reply                                     :meth:`Mitigation.on_output`
==============  =====================================================  =========================

Mitigation *classes* are registered by kind (:data:`KINDS`, :func:`register`); the arms a run
compares are *entries* of ``data/specs/mitigations.yaml``: a named kind with parameters, or a
named stack of entries. The strict contract is the baseline arm (no mitigation); schema repair
is a contract entry; every other entry runs on top of the baseline's contract. A retry calls the
(faulted) tool again with the next attempt number; whether that can recover is a property of the
fault, declared in the scenario DSL (``lasts``), never of the mitigation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from layerlab import paths
from layerlab.corpus.spec import SpecError, load_yaml_as
from layerlab.faults.scenario import stable_int
from layerlab.registry import Registry
from layerlab.system.contract import ContractMode, ContractResult
from layerlab.system.reader import ReaderInput, ReaderOutput

Stage = Literal["index", "access", "tool", "contract", "reader_input", "after_reader"]
STAGES: tuple[Stage, ...] = ("index", "access", "tool", "contract", "reader_input", "after_reader")
Action = Literal["pass", "repair", "retry", "filter", "refuse"]
MAX_ATTEMPTS = 8  # hard cap on tool calls per record, whatever a stack of retries asks for


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


P = TypeVar("P", bound=_Params)


@dataclass(frozen=True)
class Call:
    """What a mitigation may know about the request (public fields only, no answer key)."""

    task_id: str
    question: str
    session_id: str
    attempt: int  # 0 for the first tool call, 1, 2, ... for retries
    retriever: str
    domain_owners: Mapping[
        str, frozenset[str]
    ]  # owner -> the domains it publishes (corpus metadata)


@dataclass(frozen=True)
class Act:
    """A mitigation's decision. ``inp`` carries a filtered input; ``retriever`` a re-query's
    retriever; ``delay_s`` the (simulated) backoff before a retry."""

    action: Action
    reason: str = ""
    inp: ReaderInput | None = None
    retriever: str | None = None
    delay_s: float = 0.0


PASS = Act("pass")


class Mitigation:
    """Base class. Subclasses set ``kind``, ``layers``, ``stage``, ``actions``, ``Params`` and
    override the hook of their stage; every hook defaults to ``pass``."""

    kind: ClassVar[str]
    layers: ClassVar[tuple[str, ...]]
    stage: ClassVar[Stage]
    actions: ClassVar[tuple[Action, ...]]
    Params: ClassVar[type[_Params]] = _Params

    def __init__(self, params: _Params, name: str = ""):
        self.params = params
        self.name = name or self.kind

    def typed(self, cls: type[P]) -> P:
        """The parameters as their declared type (no ``type: ignore`` in the hooks)."""
        assert isinstance(self.params, cls), (self.name, type(self.params))
        return self.params

    def retriever(self, name: str) -> str:
        """Index stage: the registered retriever to use instead of ``name``."""
        return name

    def on_tool(self, result: ContractResult, call: Call) -> Act:
        """Access/tool stage: react to the tool reply (unavailable, denied, rejected, accepted)."""
        return PASS

    def on_input(self, inp: ReaderInput, call: Call) -> Act:
        """Reader-input stage: filter the evidence, ask for a re-query, or refuse."""
        return PASS

    def on_output(self, inp: ReaderInput, out: ReaderOutput, call: Call) -> Act:
        """After the reader: pass the reply or refuse it."""
        return PASS


KINDS: Registry[type[Mitigation]] = Registry("mitigation kind", lambda c: c.kind)


def register(cls: type[Mitigation]) -> type[Mitigation]:
    """Class decorator: make a mitigation kind available to ``mitigations.yaml``."""
    return KINDS.register(cls)


def _refuse(reason: str) -> Act:
    return Act("refuse", reason)


# --- the contract layer --------------------------------------------------------------------------


class _ContractParams(_Params):
    repair: bool = False
    max_edits: int = Field(default=48, ge=0, le=10_000)


@register
class ContractCheck(Mitigation):
    """The tool contract: reject a payload that fails the schema, or repair it first (bounded
    normalisation). Rejection is the contract failing, not a refusal."""

    kind = "contract"
    layers = ("tool_contract",)
    stage = "contract"
    actions = ("pass", "repair")
    Params = _ContractParams

    @property
    def mode(self) -> ContractMode:
        p = self.typed(_ContractParams)
        return ContractMode(self.name, repair=p.repair, max_edits=p.max_edits)


# --- layer mitigations ---------------------------------------------------------------------------


class _RetryParams(_Params):
    max_retries: int = Field(default=2, ge=0, le=MAX_ATTEMPTS - 1)
    backoff_s: float = Field(default=2.0, ge=0.0)
    jitter: float = Field(default=0.5, ge=0.0, le=1.0)


@register
class AvailabilityRetry(Mitigation):
    """No usable tool output: call again (bounded, linear backoff with seeded jitter), then refuse."""

    kind = "availability_retry"
    layers = ("availability",)
    stage = "tool"
    actions = ("pass", "retry", "refuse")
    Params = _RetryParams

    def on_tool(self, result: ContractResult, call: Call) -> Act:
        if result.outcome != "unavailable":
            return PASS
        p = self.typed(_RetryParams)
        if call.attempt >= p.max_retries:
            return _refuse(f"no tool output after {call.attempt} bounded retries")
        u = float(np.random.default_rng(stable_int(self.name, call.task_id, call.attempt)).random())
        return Act(
            "retry", "no tool output", delay_s=p.backoff_s * (call.attempt + 1) * (1 + p.jitter * u)
        )


@register
class AccessAbstention(Mitigation):
    """Evidence withheld by access control (a denial, or some hits withheld): refuse."""

    kind = "access_abstention"
    layers = ("authorisation",)
    stage = "access"
    actions = ("pass", "refuse")

    def on_tool(self, result: ContractResult, call: Call) -> Act:
        if result.outcome == "denied":
            return _refuse("access to the evidence was denied")
        if result.payload is not None and result.payload.withheld > 0:
            return _refuse(f"{result.payload.withheld} result(s) withheld by access control")
        return PASS


class _CompletenessParams(_Params):
    max_retries: int = Field(default=2, ge=0, le=MAX_ATTEMPTS - 1)


@register
class CompletenessGuard(Mitigation):
    """Partial or truncated tool output: re-fetch with a longer deadline (bounded), else refuse."""

    kind = "completeness_guard"
    layers = ("completeness",)
    stage = "reader_input"
    actions = ("pass", "retry", "refuse")
    Params = _CompletenessParams

    def on_input(self, inp: ReaderInput, call: Call) -> Act:
        if inp.tool_status == "ok" and not any(e.truncated for e in inp.evidence):
            return PASS
        p = self.typed(_CompletenessParams)
        if call.attempt >= p.max_retries:
            return _refuse(f"partial tool output after {call.attempt} bounded retries")
        return Act("retry", "partial tool output: re-fetch with a longer deadline")


class _RequeryParams(_Params):
    requeries: int = Field(default=1, ge=0, le=MAX_ATTEMPTS - 1)


@register
class FreshnessGuard(Mitigation):
    """Drop evidence that is not the current, valid version (superseded, unverified); when none
    is left, re-query (bounded) and then refuse."""

    kind = "freshness_guard"
    layers = ("freshness",)
    stage = "reader_input"
    actions = ("pass", "filter", "retry", "refuse")
    Params = _RequeryParams

    def on_input(self, inp: ReaderInput, call: Call) -> Act:
        keep = tuple(e for e in inp.evidence if e.status == "current")
        if len(keep) == len(inp.evidence) and keep:
            return PASS
        if keep:
            return Act("filter", "non-current evidence dropped", inp=replace(inp, evidence=keep))
        p = self.typed(_RequeryParams)
        if call.attempt < p.requeries:
            return Act("retry", "no current evidence: re-query")
        return _refuse("no current evidence")


@register
class SessionIsolation(Mitigation):
    """Drop evidence carrying another session's id; when none is left, re-query in the request's
    session (bounded) and then refuse."""

    kind = "session_isolation"
    layers = ("session_state",)
    stage = "reader_input"
    actions = ("pass", "filter", "retry", "refuse")
    Params = _RequeryParams

    def on_input(self, inp: ReaderInput, call: Call) -> Act:
        keep = tuple(e for e in inp.evidence if e.session_id in (None, inp.session_id))
        if len(keep) == len(inp.evidence) and keep:
            return PASS
        if keep:
            return Act(
                "filter", "foreign-session evidence dropped", inp=replace(inp, evidence=keep)
            )
        p = self.typed(_RequeryParams)
        if call.attempt < p.requeries:
            return Act("retry", "only foreign-session evidence: re-query in the request's session")
        return _refuse("evidence belongs to another session")


class _MetadataParams(_Params):
    fallback_retriever: str = "tfidf_validity"
    scope: Literal["all", "current"] = "all"


@register
class MetadataIntegrity(Mitigation):
    """Check each result's domain label against its owner (which owner publishes which domain is
    public corpus metadata). Inconsistent labels: fall back to a retriever without the domain
    signal and drop inconsistent results; if nothing consistent remains, refuse.
    ``scope: current`` checks only results labelled current (the study's control)."""

    kind = "metadata_integrity"
    layers = ("metadata",)
    stage = "reader_input"
    actions = ("pass", "retry", "filter", "refuse")
    Params = _MetadataParams

    def on_input(self, inp: ReaderInput, call: Call) -> Act:
        p = self.typed(_MetadataParams)
        checked = [e for e in inp.evidence if p.scope == "all" or e.status == "current"]
        bad = {
            e.doc_id
            for e in checked
            if e.domain not in call.domain_owners.get(e.owner, frozenset())
        }
        if not bad:
            return PASS
        if call.retriever != p.fallback_retriever:
            return Act(
                "retry",
                "domain labels inconsistent with owners: no domain signal",
                retriever=p.fallback_retriever,
            )
        keep = tuple(e for e in inp.evidence if e.doc_id not in bad)
        if keep and p.scope == "all":
            return Act("filter", "inconsistent results dropped", inp=replace(inp, evidence=keep))
        return _refuse("domain label inconsistent with the document owner")


@register
class ValidityResolution(Mitigation):
    """Conflicting versions of one document (same title): keep the current one with the latest
    effective year and drop the others; without a current version, pass (freshness is not its job)."""

    kind = "validity_resolution"
    layers = ("evidence",)
    stage = "reader_input"
    actions = ("pass", "filter")

    def on_input(self, inp: ReaderInput, call: Call) -> Act:
        best: dict[str, tuple[int, int]] = {}
        for e in inp.evidence:
            if e.status == "current":
                best[e.title] = max(best.get(e.title, (-1, -1)), (e.effective_year, e.version))
        keep = tuple(
            e
            for e in inp.evidence
            if e.title not in best
            or (e.status == "current" and (e.effective_year, e.version) == best[e.title])
        )
        if len(keep) == len(inp.evidence):
            return PASS
        return Act(
            "filter", "conflicting versions resolved by validity", inp=replace(inp, evidence=keep)
        )


# --- deliberately over-broad controls (the matrix must flag them) --------------------------------


@register
class AlwaysAbstain(Mitigation):
    """Over-broad on purpose: refuse every reply. Safe on every unsafe scenario, useless elsewhere."""

    kind = "always_abstain"
    layers = (
        "freshness",
        "availability",
        "completeness",
        "authorisation",
        "metadata",
        "session_state",
    )
    stage = "after_reader"
    actions = ("refuse",)

    def on_output(self, inp: ReaderInput, out: ReaderOutput, call: Call) -> Act:
        return _refuse("always abstain")


class _IgnoreParams(_Params):
    retriever: str = "tfidf"


@register
class IgnoreMetadata(Mitigation):
    """Over-broad on purpose: distrust all metadata by retrieving on text alone (no domain cues,
    no validity), which also throws away the signal that picks the current version."""

    kind = "ignore_metadata"
    layers = ("metadata",)
    stage = "index"
    actions = ("repair",)
    Params = _IgnoreParams

    def retriever(self, name: str) -> str:
        return self.typed(_IgnoreParams).retriever


@register
class EmptyContext(Mitigation):
    """Not a mitigation: what an uncontrolled pipeline does with a tool failure — hand the reader
    an empty context (the LangChain study's uncontrolled arm)."""

    kind = "empty_context"
    layers = ()
    stage = "tool"
    actions = ("pass",)


# --- the YAML: entries and stacks -----------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class EntrySpec(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    kind: str
    params: dict[str, Any] = Field(default_factory=dict)
    description: str = ""
    matrix: bool = True  # a row of the specificity matrix


class StackSpec(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    members: list[str] = Field(min_length=1)
    description: str = ""
    matrix: bool = True


class MitigationFile(_Strict):
    baseline: str
    mitigations: list[EntrySpec] = Field(min_length=1)
    stacks: list[StackSpec] = Field(default_factory=list)


@dataclass(frozen=True)
class Arm:
    """One arm of a run: a contract plus mitigation steps in stage order."""

    name: str
    contract: ContractMode
    steps: tuple[Mitigation, ...]
    layers: tuple[str, ...]
    stages: tuple[str, ...]
    actions: tuple[str, ...]
    kinds: tuple[str, ...]
    description: str
    is_stack: bool
    matrix: bool

    def at(self, *stages: Stage) -> tuple[Mitigation, ...]:
        return tuple(m for m in self.steps if m.stage in stages)

    def retriever(self, name: str) -> str:
        for m in self.at("index"):
            name = m.retriever(name)
        return name

    @property
    def empty_context_on_failure(self) -> bool:
        return any(isinstance(m, EmptyContext) for m in self.steps)


@dataclass(frozen=True)
class MitigationSet:
    """The arms named by a mitigations file, in file order (entries, then stacks)."""

    baseline: str
    arms: Mapping[str, Arm]
    source: str

    def arm(self, name: str) -> Arm:
        try:
            return self.arms[name]
        except KeyError:
            raise KeyError(
                f"unknown mitigation {name!r}; known: {sorted(self.arms)} (from {self.source})"
            ) from None

    @property
    def contract_arms(self) -> tuple[str, ...]:
        """Arms that are a contract entry alone (the baseline first)."""
        names = [n for n, a in self.arms.items() if not a.is_stack and a.kinds == ("contract",)]
        return tuple(sorted(names, key=lambda n: n != self.baseline))

    @property
    def matrix_arms(self) -> tuple[str, ...]:
        return tuple(n for n, a in self.arms.items() if a.matrix and n != self.baseline)

    def frame(self) -> Any:
        """One row per arm: name, composition, layers, stages, actions, matrix row, description."""
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "mitigation": n + (" (baseline)" if n == self.baseline else ""),
                    "kind": ("stack: " + " + ".join(a.kinds)) if a.is_stack else a.kinds[0],
                    "layers": "+".join(a.layers) or "-",
                    "stage": "+".join(a.stages),
                    "actions": "/".join(a.actions),
                    "matrix": "yes" if a.matrix and n != self.baseline else "no",
                    "description": a.description,
                }
                for n, a in self.arms.items()
            ]
        )


def _check(f: MitigationFile) -> list[tuple[tuple[Any, ...], str]]:
    problems: list[tuple[tuple[Any, ...], str]] = []
    seen: dict[str, str] = {}
    for i, e in enumerate(f.mitigations):
        if e.name in seen:
            problems.append((("mitigations", i, "name"), f"duplicate name {e.name!r}"))
        seen[e.name] = e.kind
        cls = KINDS.get(e.kind)
        if cls is None:
            problems.append(
                (
                    ("mitigations", i, "kind"),
                    f"unknown mitigation kind {e.kind!r}; expected one of {sorted(KINDS)}",
                )
            )
            continue
        try:
            cls.Params.model_validate(e.params)
        except ValidationError as exc:
            for err in exc.errors():
                what = "unknown parameter" if err["type"] == "extra_forbidden" else err["msg"]
                problems.append(
                    ((("mitigations", i, "params", *err["loc"])), f"{what} (kind {e.kind!r})")
                )
    for i, st in enumerate(f.stacks):
        if st.name in seen:
            problems.append((("stacks", i, "name"), f"duplicate name {st.name!r}"))
        for j, m in enumerate(st.members):
            if m not in seen or seen[m] == "":
                problems.append(
                    (
                        ("stacks", i, "members", j),
                        f"unknown mitigation {m!r}; stacks list entries of 'mitigations'",
                    )
                )
        if sum(seen.get(m) == "contract" for m in st.members) > 1:
            problems.append((("stacks", i, "members"), "at most one contract entry per stack"))
        seen[st.name] = ""
    if seen.get(f.baseline) != "contract":
        problems.append((("baseline",), f"baseline {f.baseline!r} must name a contract entry"))
    return problems


def _build(f: MitigationFile, source: str) -> MitigationSet:
    entries = {e.name: e for e in f.mitigations}

    def make(e: EntrySpec) -> Mitigation:
        cls = KINDS[e.kind]
        return cls(cls.Params.model_validate(e.params), e.name)

    made = {n: make(e) for n, e in entries.items()}
    base = made[f.baseline]
    assert isinstance(base, ContractCheck)

    def arm(name: str, members: Sequence[str], description: str, stack: bool, matrix: bool) -> Arm:
        ms = [made[m] for m in members]
        contracts = [m for m in ms if isinstance(m, ContractCheck)]
        contract = contracts[0].mode if contracts else base.mode
        steps = tuple(
            sorted(
                (m for m in ms if not isinstance(m, ContractCheck)),
                key=lambda m: STAGES.index(m.stage),
            )
        )
        layers = tuple(dict.fromkeys(layer for m in ms for layer in m.layers))
        return Arm(
            name=name,
            contract=contract,
            steps=steps,
            layers=layers,
            stages=tuple(dict.fromkeys(m.stage for m in ms)),
            actions=tuple(dict.fromkeys(a for m in ms for a in m.actions)),
            kinds=tuple(m.kind for m in ms),
            description=description,
            is_stack=stack,
            matrix=matrix,
        )

    arms: dict[str, Arm] = {}
    for e in f.mitigations:
        doc = e.description or " ".join(
            (KINDS[e.kind].__doc__ or "").strip().split("\n\n")[0].split()
        )
        arms[e.name] = arm(e.name, [e.name], doc, False, e.matrix)
    for st in f.stacks:
        arms[st.name] = arm(
            st.name, st.members, st.description or " + ".join(st.members), True, st.matrix
        )
    return MitigationSet(f.baseline, arms, source)


_CACHE: dict[Path, tuple[float, MitigationSet]] = {}


def load_mitigations(path: Path | str | None = None) -> MitigationSet:
    """Load and validate ``mitigations.yaml`` (default: the committed spec); :class:`SpecError`
    lists every problem as ``file:line: field: expectation``."""
    p = Path(path or paths.MITIGATION_SPEC)
    mtime = p.stat().st_mtime if p.exists() else -1.0
    hit = _CACHE.get(p)
    if hit is not None and hit[0] == mtime:
        return hit[1]
    spec = load_yaml_as(p, MitigationFile, check=_check)
    out = _build(spec, str(p))
    _CACHE[p] = (mtime, out)
    return out


def arm(name: str, path: Path | str | None = None) -> Arm:
    """The arm ``name`` of the committed (or given) mitigations file."""
    return load_mitigations(path).arm(name)


def contract_mode(name: str, path: Path | str | None = None) -> ContractMode:
    """The contract of the contract entry ``name`` (e.g. the baseline); ``KeyError`` otherwise."""
    a = arm(name, path)
    if a.is_stack or a.kinds != ("contract",):
        raise KeyError(
            f"{name!r} is not a contract entry; contract entries: {load_mitigations(path).contract_arms}"
        )
    return a.contract


def contract_pair(path: Path | str | None = None) -> tuple[str, str]:
    """(baseline, schema-repair treatment): the two contract arms the paper's Tables 2, 4, 5, 8
    and 9 compare, named by the spec rather than by literals in every module."""
    arms = load_mitigations(path).contract_arms
    if len(arms) < 2:
        raise KeyError(f"the mitigations spec needs two contract entries, has {list(arms)}")
    return arms[0], arms[1]


def targets(a: Arm, scenario_layers: Mapping[str, str]) -> tuple[str, ...]:
    """Scenarios whose layer (``a+b`` for compound ones) the arm targets."""
    return tuple(s for s, layer in scenario_layers.items() if set(layer.split("+")) & set(a.layers))


__all__ = [
    "KINDS",
    "STAGES",
    "Act",
    "Arm",
    "Call",
    "Mitigation",
    "MitigationSet",
    "SpecError",
    "arm",
    "contract_mode",
    "contract_pair",
    "load_mitigations",
    "register",
    "targets",
]
