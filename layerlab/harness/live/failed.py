"""What failed in a live run, said so that the team can fix it, and whether the run measured
enough to count (issues 42 and 46).

* **the error log** (:func:`open_log`): a target run's private ``errors.log`` in the run folder
  (:class:`~layerlab.harness.targets.failures.ErrorLog`: each failed record's full traceback);
  a team's store's failed searches are added to it at the end (:func:`close_log`);
* **the lines** (:func:`lines`): per error kind, the count and one example with the team's
  frame (``KeyError: 'results' at my_rag.py:6 in answer``), the store's failures, and last the
  log's path;
* **the error rate** (:func:`over_rate`): which of the run's systems failed on more than
  ``--max-error-rate`` of what they were asked, so a run that measured nothing exits 4: a
  model's ``provider_error`` records; a target's ``provider_error`` *and* ``malformed_reply``
  records (its reply is the team's code: a malformed one measured nothing of the faults; a
  model's malformed reply is a measured outcome, V, and is not counted); a team's store's
  failed searches (each one a tool error the system was then judged on).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from layerlab.harness.live.settings import LiveConfig
from layerlab.harness.targets import TargetSpec
from layerlab.harness.targets.failures import ERROR_LOG, ErrorLog
from layerlab.system import retrieval


def open_log(out: Path, config: LiveConfig, run_id: str) -> ErrorLog | None:
    """A target run's error log (written from its first failure on), else None."""
    if not isinstance(config.target, TargetSpec):
        return None
    return ErrorLog(Path(out) / ERROR_LOG, run_id, config.target.redact)


def close_log(log: ErrorLog | None, out: Path, config: LiveConfig) -> Path | None:
    """Close the run's error log, a team's store's failed searches appended to it (made for any
    run with such a store); the log's path when this invocation wrote to it, else None."""
    store = _store(config)
    if store is not None and store.traces:
        log = log or ErrorLog(Path(out) / ERROR_LOG, "")
        for line, trace in store.traces:
            log.append(f"the store --retriever {config.retriever}", line, trace)
    if log is None:
        return None
    log.close()
    return log.path if log.written else None


def _store(config: LiveConfig) -> retrieval.external.Stats | None:
    if not retrieval.is_external(config.retriever):
        return None
    return retrieval.external.stats(config.retriever)


def lines(log: ErrorLog | None, path: Path | None, config: LiveConfig) -> list[str]:
    """The failures' lines for the end of the run: per kind a count and an example, and (last)
    where the full tracebacks are (a store's failed searches are said by its own note,
    :func:`layerlab.system.retrieval.report`)."""
    out = [] if log is None else log.lines(f"--target {config.target.spec}"
                                           if isinstance(config.target, TargetSpec) else "")
    if path is not None:
        out.append(f"full tracebacks: {path} (private: never archived)")
    return out


def over_rate(
    errors: Mapping[str, Mapping[str, int]], max_rate: float, config: LiveConfig
) -> list[str]:
    """The models (or the target) and the store (``store --retriever SPEC``) whose failures
    exceed ``max_rate`` of what they were asked (see the module docstring)."""
    target = config.target is not None
    over = []
    for m, e in errors.items():
        failed = e["provider_error"] + (e.get("malformed_reply", 0) if target else 0)
        if e["called"] and failed / e["called"] > max_rate:
            over.append(m)
    store = _store(config)
    if store is not None and store.searches and store.failed / store.searches > max_rate:
        over.append(f"store --retriever {config.retriever}")
    return over


def rate_line(
    errors: Mapping[str, Mapping[str, int]], over: list[str], retriever: str, target: bool,
    max_rate: float,
) -> str:  # fmt: skip
    """Why each of ``over`` failed the run, in numbers (``retriever``: the run's search tool,
    whose store's failures count; ``target``: a target run, whose malformed replies count)."""
    parts = []
    for m in over:
        e = errors.get(m)
        if e is None:
            store = retrieval.external.stats(retriever) if retrieval.is_external(retriever) else None
            n = (store.failed, store.searches) if store is not None else (0, 0)
            parts.append(f"{m}: {n[0]} of {n[1]} searches failed")
            continue
        what = f"provider_error {e['provider_error']}"
        if target:
            what += f", malformed_reply {e.get('malformed_reply', 0)}"
        parts.append(f"{m}: {what} of {e['called']} records")
    return f"error rate above --max-error-rate {max_rate:g}: " + "; ".join(parts)


def fix_hint(out: Path, target: bool = False) -> str:
    """What to do about a failed run: where the tracebacks are, and how to go on after a fix
    (a ``target`` run's code is in its id: after an edit, with ``--accept-code-change``)."""
    log = Path(out) / ERROR_LOG
    where = f"full tracebacks: {log}; " if log.exists() else ""
    then = ", adding --accept-code-change once the target's code has changed" if target else ""
    return f"{where}fix the cause, then --resume --retry-errors{then}"
