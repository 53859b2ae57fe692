"""Running a target: its records concurrently, each contained, the target opened once per run.

:func:`open_target` loads and instantiates the target and checks its settings (before a run
folder exists: :func:`~layerlab.harness.targets.check_target` keeps what it opened for the run),
then calls its ``setup()``; :class:`Runner` answers each record's request:

* **concurrency** — a synchronous ``answer`` (a Python function or object, a LangChain
  ``invoke``, a LlamaIndex ``query``, an HTTP request) runs in a daemon thread of its own, so as
  many records are in flight as the run's ``--concurrency``; an ``async def answer`` (or a
  chain that only runs with ``ainvoke``, an engine awaited with ``aquery``) is awaited on the
  targets' own event loop (a daemon thread), never on the run's. A target that is not safe to
  call concurrently declares ``concurrent = False`` (an attribute of the function, class,
  object or LangChain/LlamaIndex factory, or ``--target-setting concurrent=false``): its
  records are then answered one at a time. Records do not depend on the order they finish
  in: the archive is the serial run's, byte for byte.
* **timeouts** — each record's call has ``timeout`` seconds (``--target-setting timeout=S``,
  else the run's ``--timeout``); one that does not answer in time ends as ``provider_error``
  (its sample-log entry says ``timeout: no reply within S s``) and the run goes on. Its thread
  is left behind (a thread cannot be stopped): being a daemon it never holds the process, and
  a Ctrl-C or SIGTERM ends the run at once whatever the target does.
* **exits** — ``sys.exit()``, ``KeyboardInterrupt`` or ``os._exit()`` inside a target stop the
  run with one line (:class:`TargetExit`; the records so far are kept, ``--resume``
  continues); ``os._exit`` is caught while a run is answering (layerlab's own
  ``os._exit`` is patched for the run's duration). A target that ends the process by other
  means (``ctypes``' ``_exit``, a signal) cannot be caught in-process: its run folder then
  reads as PARTIAL (``archive check`` exits 3) and ``--resume`` continues it.
* **leftovers** — a non-daemon thread a target leaves does not keep the command running:
  :func:`exit_past_leftovers` ends the process with the command's exit code once it is done.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from layerlab.harness.targets import failures
from layerlab.harness.targets.mcp import McpService
from layerlab.harness.targets.options import bool_setting, check_settings, timeout_setting
from layerlab.harness.targets.spec import TargetError, TargetSpec
from layerlab.system.retrieval import RetrieverError

CLOSE_WAIT_S = 3.0
"""How long the end of a run waits for a target's ``close()`` (it may hang, too)."""

_local = threading.local()  # .target: set in the threads that run a target's code
_OPENED: dict[TargetSpec, Any] = {}  # opened by check_target, taken by the run
_leftovers: set[threading.Thread] = set()


def _store_stopped(exc: BaseException) -> RetrieverError | None:
    """The :class:`~layerlab.system.retrieval.RetrieverError` a search raised under the target's
    call (a store that ended its process or cannot serve), however the target wrapped it."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, RetrieverError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


class TargetExit(BaseException):
    """A target ended its own process (``sys.exit``, ``os._exit``, ``KeyboardInterrupt``)."""

    def __init__(self, how: str) -> None:
        super().__init__(how)
        self.how = how


def _exit_words(exc: BaseException) -> str:
    """What the target did, as words: ``called sys.exit(0) (SystemExit)``, ``called
    os._exit(1)``, ``raised KeyboardInterrupt``."""
    if isinstance(exc, TargetExit):
        return exc.how
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r}) (SystemExit)"
    return f"raised {type(exc).__name__}"


# --- opening and closing ----------------------------------------------------------------------


def _load(spec: TargetSpec) -> Any:
    if spec.kind == "python":
        from layerlab.harness.targets.python import PythonTarget

        return PythonTarget(spec)
    if spec.kind == "langchain":
        from layerlab.harness.targets.langchain import LangChainTarget

        return LangChainTarget(spec)
    if spec.kind == "llamaindex":
        from layerlab.harness.targets.llamaindex import LlamaIndexTarget

        return LlamaIndexTarget(spec)
    if spec.kind == "langgraph":
        raise TargetError(f"--target {spec.spec}: a LangGraph graph runs through the "
                          "conversations (layerlab run conversations --target "
                          "langgraph:MODULE:FACTORY), not as a single-question target")  # fmt: skip
    from layerlab.harness.targets.http import HttpTarget

    return HttpTarget(spec)


def load(spec: TargetSpec) -> Any:
    """The target loaded and instantiated (not set up); kept for the run that follows."""
    check_settings(spec)
    if spec not in _OPENED:
        _OPENED[spec] = guarded(lambda: _load(spec), spec, "loading")
    return _OPENED[spec]


def open_target(spec: TargetSpec) -> Any:
    """The run's target: loaded (or taken from :func:`load`) and its ``setup()`` called;
    :class:`TargetError` in one line when it cannot be used. :func:`close_target` it after."""
    target = load(spec)
    del _OPENED[spec]  # this run's own: a later run opens its own
    hook = getattr(target, "setup", None)
    if callable(hook):
        try:
            guarded(hook, spec, "setup()")
        except TargetError:
            close_target(target)
            raise
    return target


def guarded(fn: Callable[[], Any], spec: TargetSpec, what: str) -> Any:
    """``fn()`` of the user's code outside a record: an exception, or an exit, is one line."""
    try:
        return fn()
    except TargetError:
        raise
    except (SystemExit, TargetExit) as exc:
        raise TargetError(
            spec.redact(f"--target {spec.spec}: {what} {_exit_words(exc)}")
        ) from None
    except Exception as exc:
        raise TargetError(
            spec.redact(f"--target {spec.spec}: {what} failed ({type(exc).__name__}: {exc})")
        ) from None


def close_target(target: Any, wait: float = CLOSE_WAIT_S) -> None:
    """Call the target's ``close()`` in a daemon thread, waiting at most ``wait`` seconds."""
    done = threading.Event()

    def work() -> None:
        _local.target = True
        try:
            target.close()
        except BaseException:  # noqa: S110 - a failing close() loses nothing of the run
            pass
        finally:
            done.set()

    threading.Thread(target=work, daemon=True, name="layerlab-target-close").start()
    done.wait(wait)


# --- the runner -------------------------------------------------------------------------------


class _Loop:
    """The targets' own event loop, in a daemon thread (an async target never blocks the run's)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            _local.target = True
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(ready.set)
            self.loop.run_forever()

        threading.Thread(target=run, daemon=True, name="layerlab-target-loop").start()
        ready.wait()

    def submit(self, fn: Callable[[], Any]) -> Any:
        async def guard() -> tuple[bool, Any]:
            try:
                result = fn()
                while inspect.isawaitable(result):
                    result = await result
                return True, result
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # SystemExit must not stop this loop
                return False, exc

        return asyncio.run_coroutine_threadsafe(guard(), self.loop)


class Runner:
    """Answers the records of one run (see the module docstring); :meth:`close` at the end."""

    def __init__(self, target: Any, timeout: float | None) -> None:
        self.target = target
        spec: TargetSpec = target.spec
        self.timeout = timeout_setting(spec, timeout)
        declared = bool_setting(spec, "concurrent")
        if declared is None:
            declared = bool(getattr(target, "concurrent", True))
        self.concurrent = declared
        if hasattr(target, "timeout"):  # an HTTP target's request ends with its record
            target.timeout = self.timeout
        self.is_async = bool(getattr(target, "is_async", False))
        self._serial: asyncio.Semaphore | None = None if declared else asyncio.Semaphore(1)
        self._aloop: _Loop | None = None
        self.errors: failures.ErrorLog | None = None  # the run's error log (engine sets it)
        self.mcp = McpService()  # the records' MCP addresses (a server started on first use)
        if spec.kind == "http":  # every request body carries one: started before the records
            self.mcp.start()
        self._threads_before = set(threading.enumerate())
        self._real_exit = os._exit
        os._exit = self._exit  # type: ignore[assignment]  # caught while the run answers

    def _exit(self, code: int) -> None:
        if getattr(_local, "target", False):
            raise TargetExit(f"called os._exit({code})")
        self._real_exit(code)

    def _started(self, fn: Callable[[], Any]) -> asyncio.Future[tuple[bool, Any]]:
        """``fn()`` in a daemon thread (or on the targets' loop); the run's future of it."""
        loop = asyncio.get_running_loop()
        if self.is_async:
            if self._aloop is None:
                self._aloop = _Loop()
            return asyncio.wrap_future(self._aloop.submit(fn), loop=loop)
        fut: asyncio.Future[tuple[bool, Any]] = loop.create_future()

        def settle(value: tuple[bool, Any]) -> None:
            if not fut.done():
                fut.set_result(value)

        def work() -> None:
            _local.target = True
            try:
                result = fn()
                if inspect.isawaitable(result):  # a sync call that hands back a coroutine
                    result = asyncio.run(_awaited(result))
                value: tuple[bool, Any] = (True, result)
            except BaseException as exc:  # noqa: BLE001 - everything the target raised
                value = (False, exc)
            try:
                loop.call_soon_threadsafe(settle, value)
            except RuntimeError:
                pass  # the run's loop is gone: the record was given up long ago

        threading.Thread(target=work, daemon=True, name="layerlab-target").start()
        return fut

    async def call(self, fn: Callable[[], Any], where: str = "") -> tuple[Any, str | None]:
        """(the raw reply, None) or (None, the error's one line: type, message and the team's
        frame, :mod:`~layerlab.harness.targets.failures`); :class:`TargetExit` when the target
        ended its process. ``fn`` makes the call (the target's answer of a request); a failure
        goes to the run's error log (:attr:`errors`) as record ``where``."""
        failure = await self._call(fn)
        if not isinstance(failure, failures.Failure):
            return failure, None
        if self.errors is not None:
            self.errors.add(where, failure)
        return None, failure.line

    async def _call(self, fn: Callable[[], Any]) -> Any:
        """The raw reply, or a :class:`~layerlab.harness.targets.failures.Failure`."""
        spec: TargetSpec = self.target.spec
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        if self._serial is not None:
            try:
                await asyncio.wait_for(self._serial.acquire(), _left(deadline))
            except TimeoutError:
                return failures.timeout(self.timeout, " (the target, not safe to call "
                                        "concurrently, was still answering an earlier record)")
        fut = self._started(fn)
        if self._serial is not None:
            sem = self._serial
            fut.add_done_callback(lambda _f: sem.release())
        try:
            ok, value = await asyncio.wait_for(asyncio.shield(fut), _left(deadline))
        except TimeoutError:
            return failures.timeout(self.timeout)
        if ok:
            return value
        if isinstance(value, (SystemExit, KeyboardInterrupt, TargetExit)):
            raise TargetExit(_exit_words(value))
        stopped = _store_stopped(value)
        if stopped is not None:  # the team's store ended the run, not the target: its line
            raise stopped
        if isinstance(value, failures.ReplyTimeout):  # the adapter's own request timed out
            return failures.timeout(self.timeout)
        return failures.of_exception(value, spec.redact)  # never a secret

    def close(self) -> None:
        """Close the target (bounded), stop the targets' loop, note leftover threads."""
        try:
            close_target(self.target)
            self.mcp.close()
            if self._aloop is not None:
                self._aloop.loop.call_soon_threadsafe(self._aloop.loop.stop)
        finally:
            os._exit = self._real_exit
            _leftovers.update(
                t for t in threading.enumerate()
                if t not in self._threads_before and not t.daemon and t.is_alive()
            )  # fmt: skip


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def exit_past_leftovers(code: int) -> int:
    """``code``, or — when a target left a non-daemon thread running, which would keep the
    process alive after the command — the process ended with ``code`` now (output flushed)."""
    if any(t.is_alive() for t in _leftovers):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    return code
