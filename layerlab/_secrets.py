"""Secrets: the one judge of what is one, and the one redactor (issue 45).

A *name* is a secret's when it holds one of :data:`SECRET_WORDS` (``*key*``, ``*token*``,
``*secret*``, ``*pass*``, ``*pwd*``, ``*auth*``, ``*credential*``, ``*cookie*``, ``*bearer*``,
``*session*``, ``*private*``, ``*jwt*``, ``*signature*``/``sig``, ``*cert*``, ``*dsn*``): a
target setting, a URL's query parameter, a ``name=value`` pair in a text, an environment
variable. A *value* is one by its shape (:func:`secret_shape`): a known key format
(:data:`SHAPES_OF_SECRETS`: ``sk-...``, ``hf_...``, ``ghp_...``, ``xoxb-...``, ``AKIA...``,
``AIza...``, JWTs, ``Bearer ...``), a secret-named ``name=value`` pair (``password=`` in a
connection string, ``?api_key=`` in a URL, ``OPENAI_API_KEY=...``), a URL's ``user:pass@``, an
``Authorization:`` header's value, or the value of a secret-named environment variable (the
provider's key, whatever its format).

:func:`redact` replaces every one of them in a text by :data:`SECRET_MARK`. Every path that
writes or prints what a user's code, a provider or a setting said goes through it: a target's
settings in ``manifest.json`` and ``run.yaml`` (``harness/runconfig.py``, ``TargetSpec``), a
target's errors (its records, the sample log, the one-line failures), a provider's errors in a
live run (``harness/live/calls.py``, with the endpoint hidden by
:func:`layerlab.models.routing.redact_endpoint`), a retriever's and a user module's failures
(``system/retrieval``, ``_code.py``) and the command line's last-resort error line. An endpoint
URL that carries credentials is refused, never stripped (:func:`credentials_in`).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping

SECRET_WORDS = re.compile(
    r"key|token|secret|pass(?!age)|pwd|auth|credential|cookie|bearer|session|private|jwt|"
    r"signature|sig(?![a-z])|cert|dsn",
    re.IGNORECASE,
)
"""The one list of words that make a name a secret's (a setting, a query parameter, a
``name=value`` pair, an environment variable), whatever its value looks like."""
SECRET_MARK = "(secret: not stored)"
"""What a shareable file or a message says in place of a secret."""

SHAPES_OF_SECRETS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (what, re.compile(pattern))
    for what, pattern in (
        ("an API key (sk-...)", r"\bsk-[A-Za-z0-9_-]{16,}"),
        ("a Hugging Face token", r"\bhf_[A-Za-z0-9]{16,}"),
        ("a GitHub token", r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
        ("a Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{8,}"),
        ("an AWS access key", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
        ("a Google API key", r"\bAIza[A-Za-z0-9_-]{35}"),
        ("a JWT", r"\beyJ[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]*){0,2}"),
        ("a bearer token", r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}"),
    )
)
"""Known formats of keys and tokens: a value holding one is a secret under any name."""

_NAME = r"[\w.-]*(?:" + SECRET_WORDS.pattern + r")[\w.-]*"
# a secret inside a longer text, the part kept before it in group 1: the value of a
# secret-named ``name=value`` pair (a connection string's ``Password=``, a URL's ``?api_key=``,
# ``OPENAI_API_KEY=...``); a URL's ``user:pass@`` (up to its last ``@``); the quoted value of a
# secret-named quoted field (``{"api_key": "..."}``); an Authorization header's value
_IN_TEXT: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "a secret-named name=value pair (password=, ?api_key=, ...)",
        re.compile(r"(?i)((?<![\w.-])" + _NAME + r"\s*=(?!=)\s*)(?:'[^']*'|\"[^\"]*\"|[^&\s'\"]+)"),
    ),
    (
        "credentials in a URL (user:password@)",
        re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#]+@"),
    ),
    (
        "a secret-named field in JSON or a dict",
        re.compile(r"(?i)(([\"'])" + _NAME + r"\2\s*:\s*([\"']))(?:(?!\3).)*"),
    ),
    (
        "an Authorization header",
        re.compile(
            r"(?i)(\b(?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?)"
            r"(?:(?:basic|bearer|token|digest)\s+)?[^\s'\",;]+"
        ),
    ),
)
MIN_LITERAL = 4
"""A literal secret (a target's secret setting) shorter than this is not searched for in text."""
MIN_ENVIRONMENT = 8
"""A secret-named environment variable's value shorter than this (``true``, ``1``) is not one."""


def environment_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the secret-named environment variables (``OPENAI_API_KEY``, ``HF_TOKEN``,
    ...): at least :data:`MIN_ENVIRONMENT` characters, no whitespace, and not a path (``PWD``,
    ``SSH_AUTH_SOCK`` and the like name files, not secrets). Read when asked, never cached."""
    env = os.environ if environ is None else environ
    return [
        v
        for k, v in env.items()
        if SECRET_WORDS.search(k)
        and len(v) >= MIN_ENVIRONMENT
        and not v.startswith(("/", "~", "."))
        and not any(c.isspace() for c in v)
    ]


def secret_shape(value: object) -> str | None:
    """What secret ``value`` holds by its shape (a known key format, a secret-named
    ``name=value`` pair, credentials in a URL, an Authorization header, a secret environment
    variable's value), or None."""
    if not isinstance(value, str):
        return None
    for what, pattern in (*SHAPES_OF_SECRETS, *_IN_TEXT):
        if pattern.search(value):
            return what
    if any(s in value for s in environment_secrets()):
        return "the value of a secret environment variable"
    return None


def is_secret_name(name: object) -> bool:
    """Whether ``name`` (a setting, a query parameter, a variable) names a secret."""
    return bool(SECRET_WORDS.search(str(name)))


def is_secret(name: object, value: object) -> bool:
    """Whether the setting ``name: value`` is a secret: by its name or its value's shape."""
    return is_secret_name(name) or secret_shape(value) is not None


def _mark(m: re.Match[str]) -> str:
    if m.string.startswith(SECRET_MARK, m.end(1)):  # already redacted
        return m.group(0)
    return m.group(1) + SECRET_MARK + ("@" if "://" in m.group(1) else "")


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret in it replaced by :data:`SECRET_MARK`: each of ``secrets``
    (literal values, e.g. a target's secret settings, when at least :data:`MIN_LITERAL`
    characters) and every secret environment variable's value (:func:`environment_secrets`),
    longest first; then every known key format; then a secret-named pair's value, a URL's
    ``user:pass@`` and an Authorization header's value. Redacting twice changes nothing."""
    literal = {s for s in secrets if len(s) >= MIN_LITERAL} | set(environment_secrets())
    for s in sorted(literal, key=lambda s: (-len(s), s)):
        text = text.replace(s, SECRET_MARK)
    for _what, pattern in SHAPES_OF_SECRETS:
        text = pattern.sub(SECRET_MARK, text)
    for _what, pattern in _IN_TEXT:
        text = pattern.sub(_mark, text)
    return text


def credentials_in(url: str) -> str | None:
    """What credential ``url`` carries (``user:password@``, a secret-named query parameter or
    fragment key), or None. An endpoint carrying one is refused, never stripped: a key belongs in
    the environment's key variable, and a URL that needs its credentials would fail later
    without them."""
    try:
        u = urllib.parse.urlsplit(url.strip())
    except ValueError:  # e.g. an unclosed [ipv6]: not a usable URL anyway
        return "user or password (user:password@)" if "@" in url else None
    if u.username is not None or u.password is not None or "@" in u.netloc:
        return "user or password (user:password@)"
    names = [n for n, _v in urllib.parse.parse_qsl(u.query, keep_blank_values=True)]
    names += [n for n, _v in urllib.parse.parse_qsl(u.fragment, keep_blank_values=True)]
    secret = [n for n in names if is_secret_name(n)]
    if secret:
        return f"a secret query parameter ({secret[0]}=)"
    return None
