"""The mitigation base: what a mitigation sees (:class:`Call`), decides (:class:`Act`) and is
(:class:`Mitigation`), its stages and actions, and the registry of kinds (:data:`KINDS`).

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

Mitigation *classes* are registered by kind (:data:`KINDS`, :func:`register`; the built-in kinds
are in :mod:`~layerlab.mitigations.builtin`, a plug-in's in its own package); the arms a run
compares are entries of the mitigations YAML (:mod:`~layerlab.mitigations.arms`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from layerlab.registry import Registry
from layerlab.system.contract import ContractResult
from layerlab.system.reader import ReaderInput, ReaderOutput

Stage = Literal["index", "access", "tool", "contract", "reader_input", "after_reader"]
STAGES: tuple[Stage, ...] = ("index", "access", "tool", "contract", "reader_input", "after_reader")
Action = Literal["pass", "repair", "retry", "filter", "refuse"]
MAX_ATTEMPTS = 8  # hard cap on tool calls per record, whatever a stack of retries asks for


class MitigationParams(BaseModel):
    """Base of a kind's parameters (frozen; an unknown key in the YAML is an error)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


P = TypeVar("P", bound=MitigationParams)


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
    Params: ClassVar[type[MitigationParams]] = MitigationParams

    def __init__(self, params: MitigationParams, name: str = ""):
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
