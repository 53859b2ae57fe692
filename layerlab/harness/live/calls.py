"""One provider call: retries of 429s, 5xx and timeouts with seeded, jittered exponential backoff
honouring ``Retry-After``, setup errors (bad key, unknown model, 404) raised as one line, and the
event loop that runs litellm's request building inline (:class:`_Loop`, :func:`arun`). Under a
transport scenario each attempt first meets its transport fault (``fault``): a slow call waits
its delay (bounded), a failed one raises the provider-like error
(:func:`layerlab.faults.transport.exception_for`: a 429 carries its ``retry-after`` header)
before the model is reached, and is retried or fails like a provider's own."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import random
import time
from collections.abc import Callable
from typing import Any

from layerlab.faults.transport import CLOCK, TransportEvent, exception_for
from layerlab.harness.live.budget import Budget, Counters
from layerlab.harness.live.settings import LiveRunError, ServerDied
from layerlab.models.llm import ProviderSettings, retry_after_of
from layerlab.models.routing import Route, endpoint_label, redact_endpoint, split_model
from layerlab.system import prompt

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
FATAL_STATUS = frozenset({401, 403, 404})


def _status_of(exc: BaseException) -> int | None:
    code = getattr(exc, "status_code", None)
    return int(code) if isinstance(code, int) else None


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return True
    name = type(exc).__name__
    if name in {
        "Timeout",
        "APIConnectionError",
        "RateLimitError",
        "InternalServerError",
        "ServiceUnavailableError",
        "BadGatewayError",
    }:
        return True
    code = _status_of(exc)
    return code in RETRYABLE_STATUS if code is not None else False


def setup_problem(exc: BaseException) -> str | None:
    """Why ``exc`` says the run is set up wrong (no retry can help), or None for errors that
    may be transient. A missing key is one even where litellm reports it as a 500."""
    code = _status_of(exc)
    name = type(exc).__name__
    text = str(exc)
    if code in (401, 403) or name in {"AuthenticationError", "PermissionDeniedError"}:
        return "authentication failed: check that the provider's API key is set in the environment"
    if "missing credentials" in text.lower() or "api_key client option must be set" in text:
        return (
            "no API key: set the provider's key in the environment (a local OpenAI-compatible "
            "server needs a placeholder, e.g. OPENAI_API_KEY=sk-local)"
        )
    if "credentials encoded in URL" in text:
        return (
            "--api-base carries credentials (user:password@) that clash with the API key "
            "header; drop them from the URL and pass the key through the environment"
        )
    if code == 404 or name == "NotFoundError":
        return "not found (404): check the model name and --api-base"
    if "LLM Provider NOT provided" in text:
        return "unknown provider: write the model as provider/name, e.g. openai/gpt-4o-mini"
    if name == "BadRequestError" and "model" in text.lower():
        return "the server refused the request (400) naming the model: check the model name"
    return None


def _describe_error(exc: BaseException, api_base: str | None) -> str:
    """One line about a provider's error, as a message may say it: its secrets redacted (the
    whole first line, before it is cut, so no key is cut into an unrecognisable half) and the
    endpoint hidden (:func:`~layerlab.models.routing.redact_endpoint`)."""
    first = redact_endpoint((str(exc).strip().splitlines() or [""])[0], api_base)
    code = _status_of(exc)
    what = f"{type(exc).__name__}" + (f", status {code}" if code is not None else "")
    return f"{what}: {first[:160]}"


INLINE_DISPATCH_PROVIDERS = frozenset({"openai", "layerlab"})
"""litellm providers whose ``completion()``, called by ``acompletion``, only builds the request
coroutine (no I/O). litellm hands that call to the event loop's default executor: a thread
hand-off per call, after which the call waits behind every other ready task. For these providers
the live harness's loop (:class:`_Loop`) runs it at once on the loop thread: +9% calls/s
without latency, +0.05 of the ideal wall time at 200 ms. Other providers (some fetch credentials
there) keep the thread."""

_INLINE_DISPATCH: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "layerlab_inline_dispatch", default=False
)


class _Loop(asyncio.SelectorEventLoop):
    """The live harness's event loop: ``run_in_executor(None, f)`` from a call marked by
    :data:`_INLINE_DISPATCH` runs ``f`` at once and returns a finished future."""

    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Callable[..., Any], *args: Any
    ) -> Any:
        if executor is not None or not _INLINE_DISPATCH.get():
            return super().run_in_executor(executor, func, *args)
        fut = self.create_future()
        try:
            fut.set_result(func(*args))
        except Exception as exc:  # delivered to the awaiting caller, as from a thread
            fut.set_exception(exc)
        return fut


def arun(coro: Any) -> Any:
    """``asyncio.run`` on a :class:`_Loop`."""
    with asyncio.Runner(loop_factory=_Loop) as runner:
        return runner.run(coro)


async def call(
    litellm: Any,
    route: Route,
    msgs: list[dict[str, str]],
    seed: int | None,
    settings: ProviderSettings,
    budget: Budget,
    counters: Counters,
    rng: random.Random | None = None,
    last_error: list[str] | None = None,
    affinity: str | None = None,
    extra: dict[str, Any] | None = None,
    native_tools: bool = False,
    pin: list[int] | None = None,
    fault: Callable[[int], TransportEvent | None] | None = None,
) -> tuple[str | None, str | None]:
    """(reply text, None) or (None, failure label) or (None, None) when the budget ran out.

    A setup error (bad key, unknown model, 404) raises :class:`LiveRunError`: it is no data.
    ``last_error`` (if given) receives a redacted description of the last failure.
    ``affinity`` is the prompt hash when the caller has it (see :meth:`Route.endpoint`).
    ``extra`` adds request keys (an agent step's ``tools`` or ``response_format``); with
    ``native_tools`` the reply is the message's text and tool calls as one JSON string
    (:func:`~layerlab.system.agentprompt.native_reply`); ``pin`` keeps an agent record's
    calls on one endpoint (:meth:`Route.endpoint`). ``fault(n)``: attempt ``n``'s (0-based)
    transport fault, met before the model is reached (the module docstring).
    """
    rng = rng or random.Random(0)
    request = route.request(msgs, seed)
    if extra:
        request.update(extra)
    if affinity is None and len(route.endpoints) > 1:
        affinity = prompt.prompt_hash(msgs)
    for attempt in range(1, settings.attempts + 1):
        if not budget.take():
            return None, None
        counters.count("calls")  # when it is sent: a call the provider may see is counted
        base: str | None = None
        try:
            event = fault(attempt - 1) if fault is not None else None
            if event is not None:
                await asyncio.to_thread(CLOCK.wait, event.delay_s)  # bounded
                if event.fails:
                    raise exception_for(event)
            async with route.endpoint(affinity if attempt == 1 else None, pin) as ep:
                base = ep.api_base
                kwargs: dict[str, Any] = dict(
                    model=route.model,
                    timeout=settings.timeout_s,
                    num_retries=0,
                    max_retries=0,
                    **settings.request_params(),
                    **request,
                )
                if ep.api_base:
                    kwargs["api_base"] = ep.api_base
                t0 = time.perf_counter()
                inline = _INLINE_DISPATCH.set(
                    split_model(route.model)[0] in INLINE_DISPATCH_PROVIDERS
                )
                try:
                    resp = await asyncio.wait_for(
                        litellm.acompletion(**kwargs), timeout=settings.timeout_s + 5
                    )
                finally:
                    _INLINE_DISPATCH.reset(inline)
                latency = time.perf_counter() - t0
            usage = getattr(resp, "usage", None)
            counters.add_call(
                route.name or route.model,
                latency,
                int(getattr(usage, "prompt_tokens", 0) or 0),
                int(getattr(usage, "completion_tokens", 0) or 0),
                price(litellm, route.model, resp, base),
            )
            message = resp.choices[0].message
            if native_tools:
                from layerlab.system.agentprompt import native_reply

                return native_reply(message), None
            return str(message.content or ""), None
        except Exception as exc:  # provider errors are data here, not crashes
            problem = setup_problem(exc)
            if problem is not None:
                raise LiveRunError(
                    f"{route.model}: {problem} ({_describe_error(exc, base)})"
                ) from None
            died = await server_death(base, exc)
            if died is not None:  # no retry can help, and no record should say provider_error
                raise ServerDied(died) from None
            if last_error is not None:
                last_error[:] = [_describe_error(exc, base)]
            if not _retryable(exc) or attempt == settings.attempts:
                break
            counters.count("retries")
            await asyncio.sleep(settings.delay(attempt, rng, retry_after_of(exc)))
    return None, "provider_error"


DEATH_WAIT_S = 30.0
"""How long a refused or reset connection to a local server waits to tell a dying server from a
live one: the socket closes a moment (under load, or while a core is written, seconds) before
the dying process can be reaped; a server that answers its model list is alive."""


async def server_death(api_base: str | None, exc: BaseException) -> str | None:
    """The one line saying that the local server at ``api_base`` (one this process started)
    has died, or None: it runs, or ``api_base`` is not such a server."""
    from layerlab.models import local as models

    if not models.started_here(api_base):
        return None
    text = f"{type(exc).__name__} {exc}".lower()
    wait = DEATH_WAIT_S if isinstance(exc, ConnectionError) or "connect" in text else 0.0
    deadline = time.monotonic() + wait
    while True:
        why = models.death_at(api_base)
        if why is not None or time.monotonic() >= deadline:
            return why
        if await asyncio.to_thread(models.answers, api_base):
            return None  # alive: the failure was the request's, not the server's
        await asyncio.sleep(0.05)


# litellm models whose price litellm does not know (asked once per process: pricing an unknown
# model walks the whole cost map)
_UNPRICED: set[str] = set()


def price(litellm: Any, model: str, resp: Any, api_base: str | None) -> float | None:
    """The call's cost in US dollars by litellm's price table (``response_cost`` when litellm
    computed it, else ``completion_cost``), or None: a model served locally (a local server, a
    reference agent) or one whose price litellm does not know."""
    if api_base and endpoint_label(api_base) == "local":
        return None
    if split_model(model)[0] == "layerlab" or model in _UNPRICED:
        return None
    hidden = getattr(resp, "_hidden_params", None) or {}
    known = hidden.get("response_cost") if isinstance(hidden, dict) else None
    if isinstance(known, (int, float)):
        return float(known)
    try:
        cost = litellm.completion_cost(completion_response=resp, model=model)
    except Exception:  # noqa: BLE001 - litellm raises for a model it cannot price
        cost = None
    if not isinstance(cost, (int, float)):
        _UNPRICED.add(model)
        return None
    return float(cost)


def run_coroutine(coro: Any) -> Any:
    """``asyncio.run`` that also works where a loop is already running (Jupyter, papermill)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return arun(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(arun, coro).result()


CONNECT_TIMEOUT_S = 3.0
"""How long :func:`unreachable` waits for a server to accept a connection."""


def unreachable(api_base: str, timeout: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why nothing accepts a connection at ``api_base`` (within ``timeout`` seconds), or None
    when something does, or when a proxy stands between (the proxy is what we would reach).

    A run asks this of every ``--api-base`` before its preflight call: a dead endpoint is then
    reported as such within seconds, not after the call's retries as a server error (litellm
    says "status 500" for a refused connection), nor as a missing key."""
    import socket
    import urllib.parse
    import urllib.request

    u = urllib.parse.urlsplit(api_base)
    host = u.hostname or ""
    if urllib.request.getproxies().get(u.scheme) and not urllib.request.proxy_bypass(host):
        return None
    try:
        port = u.port or (443 if u.scheme == "https" else 80)
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except ValueError:
        return "the port is not a number in 1-65535"
    except OSError as exc:
        return (exc.strerror or type(exc).__name__).lower()
