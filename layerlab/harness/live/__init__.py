"""The live harness: the deterministic pipeline with a model (through litellm) as the reader.

Same tasks, scenarios, mitigation arms, retriever and scorer as
:mod:`layerlab.harness.deterministic`. What it adds is what a provider run needs to be
trustworthy:

* a hard **budget** on provider calls (retries included), checked before every attempt
  (:mod:`.budget`);
* a **preflight**: the first call of every model/endpoint must succeed before any record is
  written, so a misspelt model, a missing key or a dead endpoint is a one-line setup error,
  not a run of ``provider_error`` records (:mod:`.run`);
* a **reply cache** keyed by model, request parameters and prompt hash, so a rerun or a
  rescoring makes no new calls. It holds model replies, so it lives outside the run folder
  (:mod:`layerlab.models.cache`) and never reaches an archive;
* **retries** of 429s, 5xx and timeouts with seeded, jittered exponential backoff honouring
  ``Retry-After``, then a labelled failure record (:mod:`.calls`); the error rate per model is
  reported and a run above ``max_error_rate`` is flagged (the CLI exits non-zero); what failed
  is said with the team's own frame, tracebacks in the run's private ``errors.log``
  (:mod:`.failed`), and a resume after the team's code changed is refused or, accepted,
  recorded (:mod:`.codechange`);
* an append-only progress log with a **checksum per line** and **atomic** final writes, so a
  run killed at any moment (SIGKILL included) resumes with ``resume=True`` to exactly one
  record per cell and task; damaged or tampered lines are dropped, reported and recomputed
  (:mod:`.progress`);
* a **run manifest** whose ``run_id`` is a hash of everything that determines the records, so
  merged archives never count a run twice and a resume with different settings is refused
  (:mod:`.runmanifest`). It names the endpoint only as local or remote
  (:mod:`layerlab.models.routing`).

The records are made by :mod:`.engine` (the one record step with a model as reader), in this
process or in :mod:`.workers` processes; :mod:`.settings` holds what determines a run's records
(``LiveConfig``) and how it is carried out (``RunSettings``), the parts of the one run
configuration (:mod:`layerlab.harness.config`). This module is the public face: the names below.
"""

from layerlab.harness.live.budget import Counters
from layerlab.harness.live.engine import arm_order, routes_for
from layerlab.harness.live.progress import parse_progress_line, read_progress
from layerlab.harness.live.run import LiveResult, run_live
from layerlab.harness.live.runmanifest import run_id_for
from layerlab.harness.live.settings import (
    DEFAULT_MAX_ERROR_RATE,
    AgentMode,
    LiveConfig,
    LiveRunError,
    RunInterrupted,
    RunSettings,
)
from layerlab.harness.live.workers import worker_processes
from layerlab.models.cache import CACHE_DB, ResponseCache, default_cache_dir
from layerlab.models.routing import api_base_problem, endpoint_label, record_seed

__all__ = [
    "CACHE_DB",
    "DEFAULT_MAX_ERROR_RATE",
    "Counters",
    "AgentMode",
    "LiveConfig",
    "LiveResult",
    "LiveRunError",
    "ResponseCache",
    "RunInterrupted",
    "RunSettings",
    "api_base_problem",
    "arm_order",
    "default_cache_dir",
    "endpoint_label",
    "parse_progress_line",
    "read_progress",
    "record_seed",
    "routes_for",
    "run_id_for",
    "run_live",
    "run_matrix",
    "worker_processes",
]


def __getattr__(name: str) -> object:
    """``run_matrix`` (notebooks) is the run configuration's (:mod:`layerlab.harness.runner`),
    which builds on this package: imported when first asked."""
    if name == "run_matrix":
        from layerlab.harness.runner import run_matrix

        return run_matrix
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
