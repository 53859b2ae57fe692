"""Targets: the user's own RAG system as the system under test (``run live --target SPEC``).

A target replaces the model of a live run. Per record it gets the question, its answer kind,
the session id and the record's *faulted* tools (:class:`TargetRequest`), and returns the reply
contract (status, answer, citations) or free text (:func:`read_reply`). Kinds:

* :mod:`~layerlab.harness.targets.python` — ``python:pkg.module:function`` (or a class);
* :mod:`~layerlab.harness.targets.langchain` — ``langchain:pkg.module:factory``: the factory gets
  a faulted ``BaseRetriever`` (raising ``ToolException`` on a tool error) and the ``search`` and
  ``open_document`` tools, and returns a Runnable;
* :mod:`~layerlab.harness.targets.llamaindex` — ``llamaindex:pkg.module:factory``: the factory
  gets a faulted LlamaIndex ``BaseRetriever`` (raising a ``ToolError`` on a tool error) and
  returns a query engine (or a response synthesizer); the response's source nodes are its
  citations;
* :mod:`~layerlab.harness.targets.http` — ``http://host:port/path``: a service answering through
  layerlab's tool server (:mod:`~layerlab.harness.targets.toolserver`).

With a private sample log, the spans the target's own instrumented pipeline emits are kept per
record (:mod:`~layerlab.harness.targets.spans`; an HTTP service's through W3C ``traceparent`` and
:mod:`~layerlab.harness.targets.otlp`'s receiver).

A run opens its target once (:mod:`~layerlab.harness.targets.execute`: loaded, instantiated,
settings checked (:mod:`~layerlab.harness.targets.options`) and ``setup()`` called before the run
folder exists) and answers up to ``--concurrency`` records at once, each in a thread of its own
(or awaited, for an async target), within a per-record timeout; ``close()`` once at the end.

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
    end_record,
    read_reply,
    run_record,
    score_record,
    start_record,
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
    """The loaded target (imports the module, instantiates the class or calls the factory,
    starts the tool server; settings checked); :class:`TargetError` in one line when it cannot
    be used. A run opens it with :func:`~layerlab.harness.targets.execute.open_target` (which
    calls its ``setup()``); close it after."""
    from layerlab.harness.targets.execute import load

    target: Target = load(spec)
    return target


def check_target(spec: TargetSpec) -> None:
    """Refuse a target that cannot be used, before a run writes anything: its settings (typed
    and ranged), a URL that something answers at, the module and its attribute imported and
    instantiated (a class's ``__init__``, a LangChain factory), its ``answer`` callable. What it
    loaded is kept for the run that follows (one instance per run)."""
    if spec.kind == "http":
        from layerlab.harness.targets.http import reachable
        from layerlab.harness.targets.options import check_settings

        check_settings(spec)
        reachable(spec)
    load_target(spec)


__all__ = [
    "KINDS", "PROVIDER", "REPLY_FORMATS", "Document", "ReadReply", "Target", "TargetDone",
    "TargetError", "TargetReply", "TargetRequest", "TargetSpec", "ToolError", "check_target", "end_record",
    "load_target", "parse_settings", "parse_target", "read_reply", "run_record", "score_record",
    "start_record",
]  # fmt: skip
