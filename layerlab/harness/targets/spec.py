"""What a target is: :class:`TargetSpec`, parsed from ``--target SPEC`` (or a run config's
``target:`` key, or ``LiveConfig(target=...)``), and what the archive keeps of it.

``SPEC`` is one of::

    python:pkg.module:function      a function (or a class with __call__ or answer) of a request
    langchain:pkg.module:factory    a factory (retriever, tool) -> a langchain_core Runnable
    llamaindex:pkg.module:factory   a factory (retriever) -> a LlamaIndex query engine
    langgraph:pkg.module:factory    a factory (retriever, tool) -> a LangGraph graph
                                    (conversations only: layerlab.harness.convlanggraph)
    http://host:port/path           a service answering POSTed questions (https too)

The archive records the target's kind, name, the version string its user gives, the reference
(``module:attr``; a URL only as ``local`` or ``remote``) and the SHA-256 of its settings. Code
is never stored, and neither is a secret: a setting that is one by its name or its value's shape
(the one judge, :func:`layerlab._secrets.is_secret`) is stored as
:data:`~layerlab._secrets.SECRET_MARK` and counted only in the settings' hash (so changing it
changes the run id), and every message about a target goes through :meth:`TargetSpec.redact`
(the one redactor, :func:`layerlab._secrets.redact`, with the target's secret values).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from layerlab import _secrets
from layerlab._io import canonical_json
from layerlab._secrets import SECRET_MARK, credentials_in, is_secret

KINDS = ("python", "langchain", "llamaindex", "langgraph", "http")
PROVIDER = "target"
"""The provider of a target run's records (their model is the target's name)."""

_REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
_NAME = re.compile(r"[A-Za-z0-9][\w.+-]{0,63}")
SHAPES = (
    "python:MODULE:ATTR, langchain:MODULE:FACTORY, llamaindex:MODULE:FACTORY, "
    "langgraph:MODULE:FACTORY (conversations) or an http(s):// URL"
)


class TargetError(ValueError):
    """A target that cannot be used (bad spec, module, attribute, URL): one line."""


Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class TargetSpec:
    """The system under test: its kind, reference, name, version and settings."""

    kind: str
    ref: str  # module:attr, or the URL
    name: str = ""
    version: str = ""
    settings: tuple[tuple[str, Scalar], ...] = ()
    # the fingerprint of its code (targets/identity.py: module and package hashes, or the
    # version an HTTP service reports), set when a run starts; in the run id and the manifest
    code: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.code, Mapping):
            object.__setattr__(self, "code", tuple(sorted(self.code.items())))
        if isinstance(self.settings, Mapping):
            object.__setattr__(self, "settings", tuple(self.settings.items()))
        object.__setattr__(self, "settings", tuple(sorted(self.settings)))
        where = f"--target {self.spec!r}"
        if self.kind not in KINDS:
            raise TargetError(f"--target: unknown kind {self.kind!r} (expected {SHAPES})")
        if self.kind == "http":
            cred = credentials_in(self.ref)
            if cred:  # never echoed: the message names what, not the value
                raise TargetError(
                    f"--target: the URL carries credentials ({cred}); pass them as a "
                    "--target-setting (hashed, never stored) or in the service's environment"
                )
            if not re.fullmatch(r"https?://[^/\s:]+(:\d{1,5})?(/\S*)?", self.ref):
                raise TargetError(
                    f"{where}: expected an http(s) URL like http://localhost:8000/answer"
                )
        elif not _REF.fullmatch(self.ref):
            raise TargetError(
                f"{where}: expected {self.kind}:MODULE:ATTR, e.g. {self.kind}:my_rag.app:answer"
            )
        if not self.name:
            default = self.ref.rsplit(":", 1)[-1] if self.kind != "http" else "http-service"
            object.__setattr__(self, "name", default)
        if not _NAME.fullmatch(self.name):
            raise TargetError(
                f"--target-name {self.name!r}: expected 1-64 letters, digits, '.', '_', '+' or '-'"
            )
        for k, v in self.settings:
            if not isinstance(k, str) or not k or not isinstance(v, Scalar):
                raise TargetError(f"--target-setting {k!r}: expected key=value with a plain value")

    @property
    def spec(self) -> str:
        return self.ref if self.kind == "http" else f"{self.kind}:{self.ref}"

    @property
    def model(self) -> str:
        """The run's model string: ``target/NAME`` (records: provider ``target``, model NAME)."""
        return f"{PROVIDER}/{self.name}"

    def options(self) -> dict[str, Scalar]:
        return dict(self.settings)

    def secret_values(self) -> list[str]:
        """The values of the settings that are secrets (:func:`is_secret`), as text."""
        return [str(v) for k, v in self.settings if is_secret(k, v) and v is not None]

    def redact(self, text: str) -> str:
        """``text`` (e.g. a message about this target) with this target's secret values and
        every other secret replaced by :data:`~layerlab._secrets.SECRET_MARK`
        (:func:`layerlab._secrets.redact`)."""
        return _secrets.redact(text, self.secret_values())

    def settings_sha256(self) -> str:
        return hashlib.sha256(canonical_json(self.options()).encode()).hexdigest()

    def identity(self) -> dict[str, Any]:
        """What the run id covers: kind, reference, name, version and the settings' hash."""
        return {"kind": self.kind, "ref": self.ref, "name": self.name, "version": self.version,
                "settings_sha256": self.settings_sha256()}  # fmt: skip

    def run_identity(self) -> dict[str, Any]:
        """What the run id covers: :meth:`identity` and, once known, the code's fingerprint."""
        return {**self.identity(), "code": dict(self.code)} if self.code else self.identity()

    def manifest(self) -> dict[str, Any]:
        """What the archive keeps: never code, a URL (only ``local``/``remote``) or a secret."""
        from layerlab.models.routing import endpoint_label, redact_urls

        shown: dict[str, Any] = {}
        for k, v in self.settings:
            if is_secret(k, v):
                shown[k] = SECRET_MARK
            else:
                shown[k] = redact_urls(v) if isinstance(v, str) else v
        ref = endpoint_label(self.ref) if self.kind == "http" else self.ref
        out = {"kind": self.kind, "name": self.name, "version": self.version, "ref": ref,
               "settings": shown, "settings_sha256": self.settings_sha256()}  # fmt: skip
        if self.code:
            out["code"] = dict(self.code)
        return out


def parse_target(
    spec: str,
    name: str = "",
    version: str = "",
    settings: Mapping[str, Scalar] | None = None,
) -> TargetSpec:
    """``--target SPEC`` as a :class:`TargetSpec`; :class:`TargetError` says what is wrong."""
    spec = (spec or "").strip()
    if spec.startswith(("http://", "https://")):
        return TargetSpec("http", spec, name, version, tuple((settings or {}).items()))
    kind, sep, ref = spec.partition(":")
    if not sep or kind not in KINDS:
        shown = kind if sep else spec
        raise TargetError(f"--target: unknown kind {shown!r} (expected {SHAPES})")
    return TargetSpec(kind, ref, name, version, tuple((settings or {}).items()))


def parse_settings(pairs: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``--target-setting k=v`` (repeatable) as a dict; :class:`TargetError` on a bad pair."""
    out: dict[str, str] = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep or not k.strip():
            raise TargetError(f"--target-setting {_secrets.redact(p)!r}: expected key=value")
        out[k.strip()] = v
    return out
