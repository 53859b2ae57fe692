"""What a target is: :class:`TargetSpec`, parsed from ``--target SPEC`` (or a run config's
``target:`` key, or ``LiveConfig(target=...)``), and what the archive keeps of it.

``SPEC`` is one of::

    python:pkg.module:function      a function (or a class with __call__ or answer) of a request
    langchain:pkg.module:factory    a factory (retriever, tool) -> a langchain_core Runnable
    http://host:port/path           a service answering POSTed questions (https too)

The archive records the target's kind, name, the version string its user gives, the reference
(``module:attr``; a URL only as ``local`` or ``remote``) and the SHA-256 of its settings; a
setting whose name looks like a secret (``*key*``, ``*token*``, ``*secret*``, ``*passw*``,
``*auth*``, ``*credential*``) is never stored, only counted in that hash. Code is never stored.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from layerlab._io import canonical_json

KINDS = ("python", "langchain", "http")
PROVIDER = "target"
"""The provider of a target run's records (their model is the target's name)."""

SECRET = re.compile(r"key|token|secret|passw|auth|credential|cookie|bearer", re.IGNORECASE)
_REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
_NAME = re.compile(r"[A-Za-z0-9][\w.+-]{0,63}")
SHAPES = "python:MODULE:ATTR, langchain:MODULE:FACTORY or an http(s):// URL"


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

    def __post_init__(self) -> None:
        if isinstance(self.settings, Mapping):
            object.__setattr__(self, "settings", tuple(self.settings.items()))
        object.__setattr__(self, "settings", tuple(sorted(self.settings)))
        where = f"--target {self.spec!r}"
        if self.kind not in KINDS:
            raise TargetError(f"--target: unknown kind {self.kind!r} (expected {SHAPES})")
        if self.kind == "http":
            from layerlab.models.routing import credentials_in

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

    def settings_sha256(self) -> str:
        return hashlib.sha256(canonical_json(self.options()).encode()).hexdigest()

    def identity(self) -> dict[str, Any]:
        """What the run id covers: kind, reference, name, version and the settings' hash."""
        return {"kind": self.kind, "ref": self.ref, "name": self.name, "version": self.version,
                "settings_sha256": self.settings_sha256()}  # fmt: skip

    def manifest(self) -> dict[str, Any]:
        """What the archive keeps: never code, a URL (only ``local``/``remote``) or a secret."""
        from layerlab.models.routing import endpoint_label, redact_urls

        shown: dict[str, Any] = {}
        for k, v in self.settings:
            if SECRET.search(k):
                shown[k] = "(secret: not stored)"
            else:
                shown[k] = redact_urls(v) if isinstance(v, str) else v
        ref = endpoint_label(self.ref) if self.kind == "http" else self.ref
        return {"kind": self.kind, "name": self.name, "version": self.version, "ref": ref,
                "settings": shown, "settings_sha256": self.settings_sha256()}  # fmt: skip


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
            raise TargetError(f"--target-setting {p!r}: expected key=value")
        out[k.strip()] = v
    return out
