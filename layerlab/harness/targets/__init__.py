"""Targets: the user's own RAG system as the system under test (``run live --target SPEC``).

A target replaces the model of a live run. Per record it gets the question, its answer kind,
the session id and the record's *faulted* tools (:class:`TargetRequest`), and returns the reply
contract (status, answer, citations) or free text (:func:`read_reply`). Kinds:

* :mod:`~layerlab.harness.targets.python` — ``python:pkg.module:function`` (or a class);
* :mod:`~layerlab.harness.targets.langchain` — ``langchain:pkg.module:factory``: the factory gets
  a faulted ``BaseRetriever`` (raising ``ToolException`` on a tool error) and the ``search`` and
  ``open_document`` tools, and returns a Runnable;
* :mod:`~layerlab.harness.targets.http` — ``http://host:port/path``: a service answering through
  layerlab's tool server (:mod:`~layerlab.harness.targets.toolserver`).

Faults act where they claim: the scenario's index in what ``search`` can return; its access,
availability and payload faults in the tool's answer (the arm's contract, strict or repair, and
its mitigations apply inside the tools); its session faults in the evidence's sessions. Each
record is scored by the one scorer over what the target's calls delivered
(:func:`layerlab.harness.tools.finish`). Left for later: a target that asks for the raw faulted
payload and brings its own contract (``contract: own``).
"""

from __future__ import annotations

from layerlab.harness.targets.base import (
    REPLY_FORMATS,
    Document,
    ReadReply,
    Target,
    TargetDone,
    TargetReply,
    TargetRequest,
    ToolError,
    read_reply,
    run_record,
)
from layerlab.harness.targets.spec import (
    KINDS,
    PROVIDER,
    TargetError,
    TargetSpec,
    parse_settings,
    parse_target,
)


def load_target(spec: TargetSpec) -> Target:
    """The loaded target (imports the module, calls the factory, starts the tool server);
    :class:`TargetError` in one line when it cannot be used. Close it after the run."""
    if spec.kind == "python":
        from layerlab.harness.targets.python import PythonTarget

        return PythonTarget(spec)
    if spec.kind == "langchain":
        from layerlab.harness.targets.langchain import LangChainTarget

        return LangChainTarget(spec)
    from layerlab.harness.targets.http import HttpTarget

    return HttpTarget(spec)


def check_target(spec: TargetSpec) -> None:
    """Refuse a target that cannot be used, before a run writes anything: the module and its
    attribute (imported, callable), or a URL that something answers at."""
    if spec.kind == "http":
        from layerlab.harness.targets.http import reachable

        reachable(spec)
        return
    from layerlab.harness.targets.python import load_attr

    load_attr(spec)


__all__ = [
    "KINDS", "PROVIDER", "REPLY_FORMATS", "Document", "ReadReply", "Target", "TargetDone",
    "TargetError", "TargetReply", "TargetRequest", "TargetSpec", "ToolError", "check_target",
    "load_target", "parse_settings", "parse_target", "read_reply", "run_record",
]  # fmt: skip
