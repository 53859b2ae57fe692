"""Routing of model calls: which server a request goes to and how it is shaped, and what may be
said about an endpoint.

A :class:`Route` holds one model's litellm name, its servers (:class:`Endpoint`, each with a bound
on concurrent requests) and the request shape (placeholder key, merged system prompt,
``response_format``, per-record seeds: :func:`record_seed`). Endpoints are never recorded as
such: :func:`endpoint_label` says only ``local`` or ``remote`` (:func:`redact_urls` writes a
run configuration so), :func:`redact_endpoint` hides the raw URL in a message and passes it
through the one redactor of secrets (:func:`layerlab._secrets.redact`), and an endpoint carrying
credentials (:func:`layerlab._secrets.credentials_in`), given or in the environment, is refused
(:func:`api_base_problem`, :func:`environment_endpoint_problem`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import re
import urllib.parse
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from layerlab import _secrets
from layerlab._io import canonical_json
from layerlab._secrets import credentials_in
from layerlab.system import prompt


def split_model(model: str) -> tuple[str, str]:
    """(provider, model name) of a litellm model string like ``openai/gpt-4o-mini``."""
    if "/" in model:
        provider, name = model.split("/", 1)
        return provider, name
    return "unknown", model


# --- redaction: what a manifest may say about an endpoint ------------------------------------


def endpoint_for_hashing(api_base: str | None) -> str | None:
    """``api_base`` without ``user:password@``, query or fragment (what
    :func:`redact_endpoint` also hides in messages)."""
    if not api_base:
        return None
    u = urllib.parse.urlsplit(api_base)
    try:
        port = u.port
    except ValueError:
        port = None
    netloc = (u.hostname or "") + (f":{port}" if port else "")
    return urllib.parse.urlunsplit((u.scheme, netloc, u.path, "", ""))


def endpoint_label(api_base: str | None) -> str | None:
    """``local`` (loopback) or ``remote``: all a manifest records about an endpoint."""
    if not api_base:
        return None
    host = (urllib.parse.urlsplit(api_base).hostname or "").strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return "local"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return "remote"
    return "local" if ip.is_loopback or ip.is_unspecified else "remote"


def redact_endpoint(text: str, api_base: str | None = None) -> str:
    """``text`` as a message may say it: the raw endpoint ``api_base`` (as given, and without
    credentials, query or fragment) as ``<api-base>``, then every secret replaced by the one
    redactor (:func:`layerlab._secrets.redact`: credentials in any URL, keys, tokens, the
    environment's secret values)."""
    if api_base:
        text = text.replace(api_base, "<api-base>")
        bare = endpoint_for_hashing(api_base)
        if bare:
            text = text.replace(bare, "<api-base>")
    return _secrets.redact(text)


def api_base_problem(api_base: str) -> str | None:
    """Why ``api_base`` is not a usable endpoint URL, or None. Credentials in it are refused
    (:func:`credentials_in`) before anything is written, so none can reach a file."""
    cred = credentials_in(api_base)
    if cred:
        return (
            f"the URL carries credentials: {cred}; layerlab never stores them. Drop them from "
            "the URL and set the provider's key in the environment (e.g. OPENAI_API_KEY)"
        )
    try:
        u = urllib.parse.urlsplit(api_base)
    except ValueError:
        u = urllib.parse.urlsplit("")
    if u.scheme not in ("http", "https") or not u.hostname:
        return "expected an http(s) URL such as http://127.0.0.1:8080/v1"
    try:
        u.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        return "the port is not a number in 1-65535"
    return None


ENDPOINT_VARIABLES = ("{P}_API_BASE", "{P}_BASE_URL", "{P}_API_URL")
"""Environment variables through which litellm (or its clients) take a provider's endpoint,
``{P}`` the provider in capitals (``OPENAI_API_BASE``, ``OPENAI_BASE_URL``, ``OLLAMA_API_BASE``)."""


def environment_endpoint_problem(
    models: Sequence[str], environ: Mapping[str, str] | None = None
) -> str | None:
    """A one-line setup error when an endpoint variable of a provider among ``models`` carries
    credentials (:func:`credentials_in`), or None. Only the variable's name is said."""
    import os

    env = os.environ if environ is None else environ
    providers = sorted({split_model(m)[0].upper().replace("-", "_") for m in models})
    for p in providers:
        for pattern in ENDPOINT_VARIABLES:
            name = pattern.format(P=p)
            value = env.get(name)
            cred = value and credentials_in(value)
            if cred:
                return (
                    f"environment variable {name}: the endpoint URL carries credentials: {cred}; "
                    "layerlab never stores them. Drop them from the URL and set the provider's "
                    "key in its key variable (e.g. OPENAI_API_KEY)"
                )
    return None


_URL = re.compile(r"""[A-Za-z][A-Za-z0-9+.-]*://(?:[^\s\[/]*\[[^\]\s]*\])?[^\s,\]\}'"]*""")


def redact_urls(text: str) -> str:
    """``text`` with every URL in it replaced by its :func:`endpoint_label` (``local`` or
    ``remote``): how a stored run configuration records its endpoints, as the manifest does."""

    def label(m: re.Match[str]) -> str:
        try:
            return endpoint_label(m.group(0)) or "remote"
        except ValueError:
            return "remote"

    return _URL.sub(label, text)


# --- routes: the servers of a model and the shape of its requests ----------------------------


@dataclass
class Endpoint:
    """One server of a model; ``slots`` bounds the requests it is sent at once."""

    api_base: str | None
    slots: asyncio.Semaphore
    busy: int = 0


@dataclass
class Route:
    """How the calls of one ``-m`` model are made: litellm model, endpoints, request shape."""

    model: str  # litellm model string
    endpoints: list[Endpoint]
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. a local server's placeholder key
    merge_system: bool = False
    response_format: dict[str, Any] | None = None
    seed_base: int | None = None
    name: str = ""  # the ``-m`` model it serves (its calls' usage is counted under it)

    def request(self, msgs: list[dict[str, str]], seed: int | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = dict(self.extra)
        kwargs["messages"] = prompt.merge_system(msgs) if self.merge_system else msgs
        if self.response_format is not None:
            kwargs["response_format"] = self.response_format
        if seed is not None:
            kwargs["seed"] = seed
        return kwargs

    @contextlib.asynccontextmanager
    async def endpoint(
        self, affinity: str | None = None, pin: list[int] | None = None
    ) -> AsyncIterator[Endpoint]:
        """An endpoint, once it has a free slot (time queued there is not request time).

        With an ``affinity`` key (the prompt hash), the same prompt always goes to the same
        server, so a server that caches the previous prompt's prefix (llama.cpp, vLLM) reads
        the repeated prompt of a record's strict and repair arms once; otherwise the least busy.
        ``pin`` (an agent record's steps) holds the endpoint the record's first call went to,
        and sends its later calls there: each step's prompt extends the previous one, so that
        server reads only the new turns.
        """
        if pin:
            ep = self.endpoints[pin[0] % len(self.endpoints)]
        elif affinity is not None and len(self.endpoints) > 1:
            ep = self.endpoints[int(affinity[:8], 16) % len(self.endpoints)]
        else:
            ep = min(self.endpoints, key=lambda e: e.busy)
        if pin is not None and not pin:
            pin.append(self.endpoints.index(ep))
        ep.busy += 1
        try:
            async with ep.slots:
                yield ep
        finally:
            ep.busy -= 1


def response_format_for(
    kind: str, local: bool, schema: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The ``response_format`` that asks a server to follow the reply contract.

    llama-cpp-python's server takes ``{"type": "json_object", "schema": ...}`` (a grammar);
    OpenAI-style structured outputs, vLLM and litellm's Ollama/Gemini mappings take
    ``{"type": "json_schema", ...}``.
    """
    if kind == "none":
        return None
    name = "layerlab_reply" if schema is None else "layerlab_action"
    schema = prompt.REPLY_SCHEMA if schema is None else schema
    if local:
        return {"type": "json_object", "schema": schema}
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def record_seed(base: int, model: str, scenario: str, mode: str, task_id: str, rep: int) -> int:
    """A per-record seed (stable across runs), so a rerun without the cache can reproduce replies."""
    ident = canonical_json([base, model, scenario, mode, task_id, rep])
    return int(hashlib.sha256(ident.encode()).hexdigest()[:8], 16) & 0x7FFFFFFF
