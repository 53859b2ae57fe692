"""The record schema: one Parquet row per scored record, allowlisted columns only.

An archive keeps what aggregate recomputation needs — provider, model, scenario, mitigation
arm, task and policy keys, the replicate index, binary labels, the diagnostic label and the
prompt hash — and nothing else: no prose, no answer text, no document ids, no latency, cost or
credentials. The allowlist is the schema itself; it is checked when an archive is written and
again when it is read (:mod:`layerlab.archive.validate`).

:class:`Record` is the row: the record's identity and where it ended, then the scorer's label
fields (listed once, in :class:`layerlab.scoring.score.Labels`), then the prompt hash. The
Parquet schema, the binary label columns (:data:`LABELS`) and the graded ones (:data:`SCORES`)
are derived from it. The focused study's cells have their own layout (:data:`STUDY_SCHEMA`).

Schema history (record archives):

* version 1 named the arm column ``contract_mode`` and had no ``replicate`` column;
* version 2 renamed it ``mitigation`` (values name registered mitigations or stacks; the strict
  contract is the baseline) and added ``replicate`` (0-based; 0 for single runs) to the record key;
* version 3 adds ``domain`` (the task's domain, the ``<domain>`` of its ``<domain>-NN`` policy id)
  and ``answerable`` (whether the scenario leaves the question answerable, from the scenario DSL),
  and stores a missing ``prompt_hash`` as null instead of ``""``;
* version 4 reads a model more fairly without touching S: ``grounded`` now means the answer is
  stated in a document delivered to the reader, cited or not (``grounded_false_positive``
  follows it), the previous cited-only definition is kept as ``grounded_cited``, and two
  secondary answer measures sit beside ``exact_match``: ``contained`` (the expected answer's
  tokens appear in the answer) and ``token_f1`` (SQuAD's token F1); see :mod:`layerlab.scoring.score`.

The focused study's archive: version 1 called the scenario ``condition`` and the arm ``arm``, and
wrote ``"-"`` and ``""`` placeholders; version 2 uses the record archive's names (``scenario``,
``mitigation``; the arms are stacks of the mitigations spec), adds ``domain`` and writes nulls;
version 3 adds what record schema 4 adds (``grounded`` redefined, ``grounded_cited``,
``exact_match``, ``contained``, ``token_f1``).

Older archives still read, upgraded in memory (:mod:`layerlab.archive.upgrade`);
``layerlab archive migrate`` rewrites them (:mod:`layerlab.archive.migrate`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import get_args, get_type_hints

import pyarrow as pa

from layerlab.scoring.score import Labels

SCHEMA_VERSION = 4
STUDY_SCHEMA_VERSION = 3  # the focused study's cells have their own layout

KEYS = ("provider", "model", "scenario", "mitigation", "task_id", "replicate")
_LABEL_TYPES = get_type_hints(Labels)
# Label columns an archive migrated from schema 3 cannot always know (null = not recorded)
NOT_ALWAYS_RECORDED = ("contained", "token_f1", "grounded", "grounded_false_positive")


@dataclass(frozen=True)
class _RecordHead:
    """The columns before the labels: the record's identity and where it ended."""

    schema_version: int
    run_id: str
    provider: str
    model: str
    scenario: str
    answerable: bool
    mitigation: str
    task_id: str
    replicate: int
    domain: str
    policy_id: str
    variant: int
    stage: str
    reached_reader: bool


@dataclass(frozen=True)
class _RecordTail:
    """The column after the labels."""

    prompt_hash: str | None  # null when the record ended before a prompt was built


@dataclass(frozen=True)
class Record(_RecordTail, Labels, _RecordHead):
    """One scored record, exactly the archive's allowlisted columns: the head's fields, the
    scorer's :class:`~layerlab.scoring.score.Labels` fields in their order, then the prompt hash."""

    # null ("not recorded") only in archives migrated from schema 3 (NOT_ALWAYS_RECORDED); each
    # keeps its place among the label fields
    contained: bool | None  # type: ignore[assignment]
    token_f1: float | None  # type: ignore[assignment]
    grounded: bool | None  # type: ignore[assignment]
    grounded_false_positive: bool | None  # type: ignore[assignment]


# binary label columns (the Labels' flags, and whether the record reached the reader)
LABELS = (*(n for n, t in _LABEL_TYPES.items() if t is bool), "reached_reader")
SCORES = tuple(n for n, t in _LABEL_TYPES.items() if t is float)  # graded measures in [0, 1]

_TYPES: dict[str, pa.DataType] = {
    "schema_version": pa.int16(),
    "variant": pa.int8(),
    "replicate": pa.int16(),
    "answerable": pa.bool_(),
    **{name: pa.bool_() for name in LABELS},
    **{name: pa.float64() for name in SCORES},
}
# null = not applicable (prompt_hash, control, control_layer) or not recorded (migrated labels)
NULLABLE = frozenset({"prompt_hash", "control", "control_layer", *NOT_ALWAYS_RECORDED})
SCHEMA = pa.schema(
    [
        pa.field(f.name, _TYPES.get(f.name, pa.string()), nullable=f.name in NULLABLE)
        for f in fields(Record)
    ],
    metadata={b"layerlab.archive.schema_version": str(SCHEMA_VERSION).encode()},
)
ALLOWLIST = frozenset(SCHEMA.names)

# --- the focused LangChain study's cells ------------------------------------------------------

STUDY_SCHEMA = pa.schema(
    [
        pa.field("schema_version", pa.int16(), nullable=False),
        *[
            pa.field(n, pa.string(), nullable=False)
            for n in ("run_id", "provider", "model", "scenario")
        ],
        pa.field("answerable", pa.bool_(), nullable=False),
        *[
            pa.field(n, pa.string(), nullable=False)
            for n in ("mitigation", "task_id", "domain", "policy_id")
        ],
        *[
            pa.field(n, pa.bool_(), nullable=False)
            for n in ("success", "safe_resolution", "answered", "abstained")
        ],
        # null only in a study archive migrated from version 2 (not recorded; see v4_labels)
        *[pa.field(n, pa.bool_(), nullable=True) for n in ("exact_match", "contained", "grounded")],
        pa.field("token_f1", pa.float64(), nullable=True),
        pa.field("grounded_cited", pa.bool_(), nullable=False),
        pa.field("grounded_false_positive", pa.bool_(), nullable=True),
        pa.field("retry_restored", pa.bool_(), nullable=False),
        pa.field("retries", pa.int8(), nullable=False),
        *[
            pa.field(n, pa.string(), nullable=True)
            for n in ("control", "control_layer", "prompt_hash")
        ],
    ],
    metadata={b"layerlab.archive.schema_version": str(STUDY_SCHEMA_VERSION).encode()},
)
STUDY_KEYS = ("provider", "model", "scenario", "mitigation", "task_id")

# --- the value-level allowlist ----------------------------------------------------------------
# A column allowlist alone lets prose through any string column (answer text in ``diagnostic``
# passed ``check``). Every string column therefore has a closed vocabulary or a pattern that
# admits identifiers and hashes only: no whitespace, bounded length. Checked on write and read.
_IDENT = r"[a-z][a-z0-9_]{0,63}"
_TOKEN = r"[A-Za-z0-9][A-Za-z0-9_.:/@+=-]{0,127}"  # model names: org/name:tag@variant
VALUE_PATTERNS: dict[str, str] = {
    "run_id": r"[a-z][a-z0-9_]{0,31}(-[0-9a-z]{1,64})?",
    "provider": r"[a-z0-9][a-z0-9_.-]{0,63}",
    "model": _TOKEN,
    "scenario": _IDENT + r"(@(0|0\.\d{1,4}))?",  # a variant at intensity λ < 1: name@λ
    "domain": _IDENT,
    "mitigation": r"[a-z][a-z0-9_+]{0,63}",  # a registered mitigation or a stack of them
    "task_id": r"[a-z][a-z0-9_]{0,63}-\d{2}-q\d{1,2}",
    "policy_id": r"[a-z][a-z0-9_]{0,63}-\d{2}",
    "prompt_hash": r"[0-9a-f]{64}",
    # study cells
    "control": _IDENT,  # the study's control that decided the cell (allow, refuse)
    "control_layer": _IDENT,
}


def value_vocabularies() -> dict[str, frozenset[str]]:
    """Closed vocabularies of the string columns that have one (their owners define them)."""
    from layerlab.scoring.score import DIAGNOSTICS
    from layerlab.system.contract import Outcome

    # a record ends at the reader, at a mitigation's refusal, or at the contract's outcome
    # (layerlab.harness.step.evaluate)
    stages = frozenset({"reader", "refused", *get_args(Outcome)})
    return {
        "diagnostic": frozenset(DIAGNOSTICS),
        "stage": stages,
    }


class ArchiveError(ValueError):
    """An archive that is not a valid layerlab archive (message names the file and problem)."""


def sort_key(r: Record) -> tuple[str | int, ...]:
    return (r.provider, r.model, r.scenario, r.mitigation, r.task_id, r.replicate)


def domain_of(policy_id: str) -> str:
    """The domain of a policy unit: the spec requires policy ids ``<domain>-NN``."""
    return policy_id.rsplit("-", 1)[0]
