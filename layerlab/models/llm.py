"""Offline-safe access to litellm, and provider settings with the paper's defaults.

``import litellm`` reaches for the network (a model cost map) and reads ``.env`` from the
working directory unless told not to; :func:`import_litellm` sets the switches first. Keys come
from the environment only and are never written anywhere by layerlab.
"""

from __future__ import annotations

import email.utils
import os
import random
import time
from dataclasses import asdict, dataclass
from typing import Any

_OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_OFFLINE_MODE": "true",
    "LITELLM_MODE": "PRODUCTION",
}


def import_litellm() -> Any:
    """Import litellm with the network cost-map fetch and ``.env`` loading switched off, and its
    per-call bookkeeping trimmed (:func:`_trim_bookkeeping`)."""
    for k, v in _OFFLINE_ENV.items():
        os.environ.setdefault(k, v)
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    _trim_bookkeeping(litellm)
    return litellm


# litellm's per-call hooks that layerlab switches off while nobody listens (module, attribute)
_TRIMMED = (
    ("litellm.litellm_core_utils.litellm_logging", "Logging.response_cost_calculator"),
    ("litellm.utils", "dispatch_success_logging"),
)
_CALLBACK_LISTS = (
    "callbacks",
    "success_callback",
    "_async_success_callback",
    "input_callback",
    "service_callback",
    "audit_log_callbacks",
)


def bookkeeping_needed(litellm: Any) -> bool:
    """Whether anyone reads litellm's per-call cost or success logs in this process: a registered
    callback (a logger, a custom handler, an observability integration) or a litellm budget."""
    if getattr(litellm, "max_budget", 0):
        return True
    return any(getattr(litellm, name, None) for name in _CALLBACK_LISTS)


def _trim_bookkeeping(litellm: Any) -> None:
    """Skip litellm's cost calculation and success logging on each call while nothing uses them.

    Profiled on the live harness (litellm 1.110.2), they are most of litellm's CPU per call:
    pricing an unknown model walks the whole cost map's generalisations, and every success builds
    a standard logging payload for callbacks that are not there. layerlab registers no callback
    and prices calls itself (``harness.live.calls.price``), asking once about a model it cannot
    price. The guard is checked on every call, so a user who registers a callback or sets
    ``litellm.max_budget`` gets litellm's full path back. Idempotent; if a litellm upgrade renames
    a hook, that hook is left alone.
    """
    import importlib

    for module_name, attr in _TRIMMED:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        owner_name, _, name = attr.rpartition(".")
        owner = getattr(module, owner_name, None) if owner_name else module
        original = getattr(owner, name, None) if owner is not None else None
        if original is None or getattr(original, "_layerlab_trimmed", False):
            continue
        setattr(owner, name, _guarded(litellm, original))


def _guarded(litellm: Any, original: Any) -> Any:
    import functools

    @functools.wraps(original)
    def hook(*args: Any, **kwargs: Any) -> Any:
        if bookkeeping_needed(litellm):
            return original(*args, **kwargs)
        return None  # no cost (litellm's "unknown"), no success log

    hook._layerlab_trimmed = True  # type: ignore[attr-defined]
    hook._layerlab_original = original  # type: ignore[attr-defined]
    return hook


@dataclass(frozen=True)
class ProviderSettings:
    """Per-call settings. Defaults are the paper's: 180 s, 600 tokens, 3 attempts, 2 s backoff.

    The paper's backoff was linear (2 s, 4 s); ours doubles from ``backoff_s`` (the same 2 s, 4 s
    for three attempts) with jitter, so concurrent retries do not land together.
    """

    timeout_s: float = 180.0
    max_tokens: int = 600
    attempts: int = 3
    backoff_s: float = 2.0
    temperature: float | None = None
    # Nucleus-sampling cut-off; not sent unless given (a server's own default applies).
    top_p: float | None = None
    # Base URLs of servers that serve the model (several: calls are spread over them). Where a
    # model is served does not change what it answers, so they are in neither the cache key nor
    # the run id.
    api_bases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # each message names the flag (the run-configuration key is the same word)
        if self.attempts < 1:
            raise ValueError(f"--attempts: attempts must be >= 1, got {self.attempts}")
        if not self.timeout_s > 0:
            raise ValueError(f"--timeout: expected seconds > 0, got {self.timeout_s}")
        if self.max_tokens <= 0:
            raise ValueError(
                f"--max-tokens (max_tokens): expected a token cap > 0, got {self.max_tokens}"
            )
        if not self.backoff_s >= 0:
            raise ValueError(f"--backoff: expected seconds >= 0, got {self.backoff_s}")
        if self.temperature is not None and not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"--temperature: expected 0 to 2, got {self.temperature}")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"--top-p (top_p): expected a share in (0, 1], got {self.top_p}")

    def request_params(self) -> dict[str, Any]:
        """What goes into the request (and into the cache key): never a key or header."""
        params: dict[str, Any] = {"max_tokens": self.max_tokens}
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.top_p is not None:
            params["top_p"] = self.top_p
        return params

    @property
    def decoding(self) -> str:
        """``greedy`` (temperature 0), ``sampled`` (a temperature above 0) or ``provider
        default`` (no temperature sent: the server's own, e.g. 0.8 for llama.cpp's server)."""
        if self.temperature is None:
            return "provider default"
        return "greedy" if self.temperature == 0 else "sampled"

    def as_dict(self) -> dict[str, Any]:
        """What determines the records (endpoints excluded: see ``api_bases``). ``top_p`` only
        when it is set, so runs made before it existed keep their ids."""
        d = asdict(self)
        d.pop("api_bases")
        if d["top_p"] is None:
            d.pop("top_p")
        return d

    def delay(self, attempt: int, rng: random.Random, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based).

        Exponential with "equal jitter": uniform in [b/2, b] for b = ``backoff_s`` * 2**(attempt-1),
        capped at :data:`MAX_BACKOFF_S`. A server's ``Retry-After`` is honoured as a lower bound
        (capped too, so a hostile header cannot park the run). ``rng`` is the run's seeded
        generator, so the schedule is reproducible.
        """
        b = min(self.backoff_s * 2 ** (attempt - 1), MAX_BACKOFF_S)
        wait = rng.uniform(b / 2, b)
        if retry_after is not None and retry_after > 0:
            wait = max(wait, min(retry_after, MAX_BACKOFF_S))
        return wait


MAX_BACKOFF_S = 120.0


def retry_after_of(exc: BaseException) -> float | None:
    """Seconds a provider asked us to wait (``Retry-After`` / ``retry-after-ms``), if it said."""
    headers: Any = getattr(exc, "litellm_response_headers", None)
    if not headers:
        resp = getattr(exc, "response", None)
        headers = getattr(resp, "headers", None)
    if not headers:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return float(ms) / 1000.0
        raw = headers.get("retry-after")
    except (AttributeError, TypeError, ValueError):
        return None
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(str(raw))
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
