"""Python targets: ``--target python:pkg.module:function``.

The attribute is a function of one :class:`~layerlab.harness.targets.base.TargetRequest`, or a
class: it is instantiated once per run (with no arguments, or with ``settings=`` when its
``__init__`` takes that keyword) and its ``answer`` method (else ``__call__``) answers each
request. The module is imported from ``sys.path`` plus the current folder. Example::

    def answer(req):
        docs = req.retriever(req.question)            # raises ToolError on a tool error
        best = docs[0] if docs else None
        return {"status": "answered", "answer": best.page_content[:40],
                "citations": [best.doc_id]} if best else {"status": "abstained"}
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from layerlab._code import import_attr
from layerlab.harness.targets.base import TargetRequest, call_hook
from layerlab.harness.targets.spec import TargetError, TargetSpec


def load_attr(spec: TargetSpec) -> Any:
    """The object ``module:attr`` names; :class:`TargetError` (one line) when it cannot be."""
    obj = import_attr(spec.ref, f"--target {spec.spec}", TargetError, spec.redact)
    if not callable(obj):
        raise TargetError(
            f"--target {spec.spec}: {spec.ref.partition(':')[2]!r} is not callable (a "
            f"{type(obj).__name__}; expected a function or a class)"
        )
    return obj


def _takes(fn: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def build(spec: TargetSpec, factory: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """What a framework target's factory returns, called once per run; its failure is one line
    (:class:`TargetError`, redacted)."""
    try:
        return factory(*args, **kw)
    except (Exception, SystemExit) as exc:
        raise TargetError(
            spec.redact(f"--target {spec.spec}: the factory failed ({type(exc).__name__}: {exc})")
        ) from None


def instantiate(obj: Any, spec: TargetSpec) -> Any:  # obj: the user's function or class
    """A class is instantiated (with ``settings=`` when it takes it); a function is itself."""
    if not inspect.isclass(obj):
        return obj
    try:
        make: Callable[..., Any] = obj
        return make(settings=spec.options()) if _takes(obj, "settings") else make()
    except (Exception, SystemExit) as exc:
        raise TargetError(
            spec.redact(
                f"--target {spec.spec}: creating {spec.ref.partition(':')[2]}() failed "
                f"({type(exc).__name__}: {exc})"
            )
        ) from None


class PythonTarget:
    """A Python function or object answering :class:`TargetRequest` objects."""

    def __init__(self, spec: TargetSpec) -> None:
        self.spec = spec
        obj = instantiate(load_attr(spec), spec)
        fn = getattr(obj, "answer", None) if not inspect.isfunction(obj) else None
        self._fn: Callable[[TargetRequest], Any] = obj if fn is None else fn
        if fn is not None and not callable(fn):
            raise TargetError(
                f"--target {spec.spec}: answer is not callable (a {type(fn).__name__}; "
                "expected a method answer(self, request))"
            )
        if not callable(self._fn):
            raise TargetError(
                f"--target {spec.spec}: the object has no answer() and is not callable"
            )
        self._obj = obj
        self.concurrent = bool(getattr(obj, "concurrent", True))
        call = getattr(self._fn, "__call__", None)  # noqa: B004 - a callable object's method
        self.is_async = inspect.iscoroutinefunction(self._fn) or (
            not inspect.isroutine(self._fn) and inspect.iscoroutinefunction(call)
        )

    def answer(self, request: TargetRequest) -> Any:
        return self._fn(request)

    def setup(self) -> None:
        call_hook(self._obj, "setup")

    def close(self) -> None:
        call_hook(self._obj, "close")
