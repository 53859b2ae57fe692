"""What a target's failure says, so a team can fix it (issue 42, item 1), and the run's private
error log.

A target that raises ends its record as ``provider_error``; :func:`of_exception` says why in a
way that points at the team's code: the exception's type, its message (one line) and the
innermost frame of the team's own code (``my_rag.py:12 in answer``: not layerlab's, the standard
library's or an installed package's, :func:`layerlab._code.user_frame`). An HTTP service's
failure is its status and an excerpt of its body (:class:`ServiceError`); a reply that does not
come in time is :class:`ReplyTimeout` (the documented ``timeout: no reply within S s``).

:class:`ErrorLog` is the run's error log, ``errors.log`` in the run folder: each failed record's
full traceback (or the service's status and body excerpt), appended across ``--resume``. It is
private (created ``0600``, like the sample log: a traceback quotes the team's code and what it
was handling) and never part of an archive (the archive tools read only their own files, and
``archive merge`` copies none of it). Everything written or printed goes through the one
redactor (:mod:`layerlab._secrets`, with the target's secret settings).
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from layerlab._code import user_frame
from layerlab._secrets import redact as _redact

ERROR_LOG = "errors.log"
"""The run folder's private error log (full tracebacks), named in the run's last line."""
MESSAGE_CHARS = 400
"""A failure's message is cut to this many characters (after redaction) in the record's line."""
EXAMPLES_SHOWN = 5
"""At most this many error kinds are printed, each with a count and an example."""


class ServiceError(RuntimeError):
    """An HTTP target's service answered with an error status: ``kind`` is ``HTTP <status>``,
    the message its status and an excerpt of its body."""

    def __init__(self, status: int, excerpt: str) -> None:
        body = " ".join(excerpt.split())
        super().__init__(f"the service answered HTTP {status}" + (f": {body}" if body else ""))
        self.kind = f"HTTP {status}"


class ReplyTimeout(Exception):
    """The target did not reply within its timeout (raised by an adapter whose own request timed
    out first: said as the runner's ``timeout: no reply within S s``)."""


@dataclass(frozen=True)
class Failure:
    """One failed record's error: ``kind`` (the exception's type, ``HTTP 500``, ``timeout``),
    ``message`` (one redacted line), ``frame`` (the team's innermost frame, or None) and
    ``trace`` (the full redacted traceback, for the error log only)."""

    kind: str
    message: str
    frame: str | None = None
    trace: str = ""

    @property
    def line(self) -> str:
        """The record's one line (the sample log's ``target_error``): message and frame."""
        return self.message + (f" at {self.frame}" if self.frame else "")


def of_exception(exc: BaseException, redact: Callable[[str], str] = _redact) -> Failure:
    """``exc`` as a :class:`Failure`; ``redact`` is the one redactor (a target adds its secret
    settings): the whole text is redacted before it is cut, so no secret is cut in half."""
    kind = getattr(exc, "kind", None) or type(exc).__name__
    text = " ".join(str(exc).split())
    if isinstance(exc, ServiceError):  # its status says it all
        message = redact(text)[:MESSAGE_CHARS]
    else:
        head = type(exc).__name__
        message = redact(f"{head}: {text}" if text else head)[:MESSAGE_CHARS]
    try:
        trace = "".join(traceback.format_exception(exc))
    except Exception:  # noqa: BLE001 - an exception whose str() fails: its type is enough
        trace = f"{type(exc).__name__}\n"
    return Failure(str(kind), message, user_frame(exc), redact(trace))


def timeout(seconds: float | None, why: str = "") -> Failure:
    """A reply that did not come within ``seconds`` (the documented line)."""
    return Failure("timeout", f"timeout: no reply within {seconds:g} s{why}")


class ErrorLog:
    """The run's private error log (see the module docstring) and this invocation's count of
    failures per kind and frame, each with its first example."""

    def __init__(self, path: Path, run_id: str, redact: Callable[[str], str] = _redact) -> None:
        self.path, self.run_id, self.redact = Path(path), run_id, redact
        self._fh: IO[str] | None = None
        self.written = False  # whether this invocation wrote to the log
        self.counts: dict[tuple[str, str | None], int] = {}
        self.examples: dict[tuple[str, str | None], tuple[str, Failure]] = {}

    def _open(self) -> IO[str]:
        if self._fh is None:
            from layerlab._io import private_file

            private_file(self.path, "tracebacks of the system under test")  # 0600
            self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            self._fh.write(f"# {f'run {self.run_id}: ' if self.run_id else ''}invocation of {stamp}\n")
            self.written = True
        return self._fh

    def add(self, where: str, failure: Failure) -> None:
        """Count ``failure`` of the record ``where`` and append its traceback to the log."""
        key = (failure.kind, failure.frame)
        self.counts[key] = self.counts.get(key, 0) + 1
        self.examples.setdefault(key, (where, failure))
        self.append(where, failure.line, failure.trace)

    def append(self, where: str, line: str, trace: str = "") -> None:
        """Append one failure's line and traceback (redacted) to the log, uncounted."""
        fh = self._open()
        fh.write(f"\n== {where}: {self.redact(line)}\n")
        if trace:
            fh.write(self.redact(trace).rstrip("\n") + "\n")
        fh.flush()

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def lines(self, who: str = "the target") -> list[str]:
        """Per kind (and frame), the count and one example, most frequent first; then the log."""
        if not self.counts:
            return []
        ranked = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1] or ""))
        out = [f"errors of {who} in this invocation, by kind ({self.total} records):"]
        for key, n in ranked[:EXAMPLES_SHOWN]:
            where, failure = self.examples[key]
            out.append(f"  - {failure.kind}: {n} record(s), e.g. {where}: {failure.line}")
        if len(ranked) > EXAMPLES_SHOWN:
            out.append(f"  - and {len(ranked) - EXAMPLES_SHOWN} more kind(s)")
        return out

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
            os.chmod(self.path, 0o600)
