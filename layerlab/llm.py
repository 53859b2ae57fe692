"""Offline-safe access to litellm, and provider settings with the paper's defaults.

``import litellm`` reaches for the network (a model cost map) and reads ``.env`` from the
working directory unless told not to; :func:`import_litellm` sets the switches first. Keys come
from the environment only and are never written anywhere by layerlab.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

_OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_OFFLINE_MODE": "true",
    "LITELLM_MODE": "PRODUCTION",
}


def import_litellm() -> Any:
    """Import litellm with the network cost-map fetch and ``.env`` loading switched off."""
    for k, v in _OFFLINE_ENV.items():
        os.environ.setdefault(k, v)
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    return litellm


@dataclass(frozen=True)
class ProviderSettings:
    """Per-call settings. Defaults are the paper's: 180 s, 600 tokens, 3 attempts, 2 s linear."""

    timeout_s: float = 180.0
    max_tokens: int = 600
    attempts: int = 3
    backoff_s: float = 2.0
    temperature: float | None = None
    # Base URLs of servers that serve the model (several: calls are spread over them). Where a
    # model is served does not change what it answers, so they are in neither the cache key nor
    # the run id.
    api_bases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be >= 1")
        if self.timeout_s <= 0 or self.max_tokens <= 0 or self.backoff_s < 0:
            raise ValueError("timeout, max_tokens must be > 0 and backoff >= 0")

    def request_params(self) -> dict[str, Any]:
        """What goes into the request (and into the cache key): never a key or header."""
        params: dict[str, Any] = {"max_tokens": self.max_tokens}
        if self.temperature is not None:
            params["temperature"] = self.temperature
        return params

    def as_dict(self) -> dict[str, Any]:
        """What determines the records (endpoints excluded: see ``api_bases``)."""
        d = asdict(self)
        d.pop("api_bases")
        return d

    def delay(self, attempt: int) -> float:
        """Linear backoff before retry number ``attempt`` (1-based)."""
        return self.backoff_s * attempt
