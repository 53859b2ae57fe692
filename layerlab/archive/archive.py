"""Privacy-safe record archives: one Parquet row per scored record, allowlisted columns only.

An archive keeps what aggregate recomputation needs — provider, model, scenario, mitigation
arm, task and policy keys, the replicate index, binary labels, the diagnostic label and the prompt hash — and nothing
else: no prose, no answer text, no document ids, no latency, cost or credentials. The allowlist
is the schema itself; it is checked when an archive is written and again when it is read.

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

Older archives still read (upgraded in memory, see :func:`upgrade`); :func:`migrate` rewrites an
archive or run folder in the current schema and records the migration in its manifest
(``layerlab archive migrate``). Every added column is a pure function of columns the archive
already holds plus the specs, so a migration never re-runs a model; the scenario spec's
``answerable`` is checked against the archive's own ``safe_resolution`` labels first. Schema 4's
measures need the reply text, which no archive holds: a migration derives what the old labels
determine (:func:`v4_labels`: ``grounded_cited`` is the old ``grounded``; nothing is grounded or
contained without an answer; an exact match is contained with F1 1) and writes null, "not
recorded", for the rest. Only a rerun, or a rescore from the private sample log, fills them.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, get_args

import pyarrow as pa
import pyarrow.parquet as pq

from layerlab._io import atomic_write_bytes

SCHEMA_VERSION = 4
STUDY_SCHEMA_VERSION = 3  # the focused study's cells have their own layout

LABELS = (
    "success",
    "exact_match",
    "contained",
    "retrieval_ok",
    "citation_ok",
    "schema_ok",
    "grounded",
    "grounded_cited",
    "grounded_false_positive",
    "abstained",
    "answered",
    "safe_resolution",
    "reached_reader",
)
SCORES = ("token_f1",)  # graded answer measures in [0, 1] (LABELS are binary)
# Label columns an archive migrated from schema 3 cannot always know (null = not recorded)
NOT_ALWAYS_RECORDED = ("contained", "token_f1", "grounded", "grounded_false_positive")
KEYS = ("provider", "model", "scenario", "mitigation", "task_id", "replicate")


@dataclass(frozen=True)
class Record:
    """One scored record, exactly the archive's allowlisted columns."""

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
    success: bool
    exact_match: bool
    # the four below are null ("not recorded") only in archives migrated from schema 3
    contained: bool | None
    token_f1: float | None
    retrieval_ok: bool
    citation_ok: bool
    schema_ok: bool
    grounded: bool | None
    grounded_cited: bool
    grounded_false_positive: bool | None
    abstained: bool
    answered: bool
    safe_resolution: bool
    diagnostic: str
    prompt_hash: str | None  # null when the record ended before a prompt was built


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
    "scenario": _IDENT,
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


def _check_values(table: pa.Table, source: str) -> None:
    vocab = value_vocabularies()
    for f in table.schema:
        if not pa.types.is_string(f.type) and not pa.types.is_large_string(f.type):
            continue
        values = set(table.column(f.name).to_pylist()) - {None}
        if f.name in vocab:
            bad = sorted(v for v in values if v not in vocab[f.name])
            expected = f"one of {sorted(vocab[f.name])}"
        elif f.name in VALUE_PATTERNS:
            rx = re.compile(VALUE_PATTERNS[f.name])
            bad = sorted(v for v in values if not rx.fullmatch(v))
            expected = f"values matching {VALUE_PATTERNS[f.name]}"
        else:
            raise ArchiveError(f"{source}: string column {f.name!r} has no value allowlist")
        if bad:
            shown = bad[0] if len(bad[0]) <= 40 else bad[0][:37] + "..."
            raise ArchiveError(
                f"{source}: column {f.name!r} holds {len(bad)} value(s) outside its allowlist "
                f"(e.g. {shown!r}); expected {expected}"
            )


def _check_derived(table: pa.Table, source: str) -> None:
    """Columns that follow from others must agree with them: ``domain`` with ``policy_id``, and
    a null ``prompt_hash`` exactly on the records that ended before a prompt was built."""
    names = table.column_names
    if "domain" in names and "policy_id" in names:
        for d, p in zip(table.column("domain").to_pylist(), table.column("policy_id").to_pylist(), strict=True):
            if d != domain_of(p):
                raise ArchiveError(
                    f"{source}: column 'domain' holds {d!r} for policy {p!r}; expected {domain_of(p)!r}"
                )
    if "reached_reader" in names and "prompt_hash" in names:
        for reached, h in zip(
            table.column("reached_reader").to_pylist(), table.column("prompt_hash").to_pylist(), strict=True
        ):
            if reached != (h is not None):
                raise ArchiveError(
                    f"{source}: column 'prompt_hash' must be null exactly where reached_reader is "
                    f"false (found reached_reader={reached} with prompt_hash={h!r})"
                )
    _check_labels(table, source)


def _check_labels(table: pa.Table, source: str) -> None:
    """The answer measures and groundedness labels agree with one another: ``token_f1`` lies in
    [0, 1], ``grounded_cited`` implies ``grounded``, and ``grounded_false_positive`` is
    ``grounded ∧ ¬success`` (null only where ``grounded`` is null and ``success`` is false)."""
    names = table.column_names
    if "token_f1" in names:
        bad = [v for v in table.column("token_f1").to_pylist() if v is not None and not 0.0 <= v <= 1.0]
        if bad:
            raise ArchiveError(f"{source}: column 'token_f1' holds {bad[0]!r}; expected a value in [0, 1]")
    if not {"grounded", "grounded_false_positive", "success"} <= set(names):
        return
    cited = table.column("grounded_cited").to_pylist() if "grounded_cited" in names else None
    cols = zip(
        table.column("grounded").to_pylist(),
        table.column("grounded_false_positive").to_pylist(),
        table.column("success").to_pylist(),
        strict=True,
    )
    for i, (g, gf, s) in enumerate(cols):
        if cited is not None and cited[i] and g is False:
            raise ArchiveError(f"{source}: a record is grounded_cited but not grounded")
        want = (g and not s) if g is not None else (False if s else None)
        if gf != want:
            raise ArchiveError(
                f"{source}: column 'grounded_false_positive' holds {gf!r} where grounded={g!r} and "
                f"success={s!r}; expected {want!r} (GF = grounded and not S)"
            )


class ArchiveError(ValueError):
    """An archive that is not a valid layerlab archive (message names the file and problem)."""


def sort_key(r: Record) -> tuple[str | int, ...]:
    return (r.provider, r.model, r.scenario, r.mitigation, r.task_id, r.replicate)


def to_table(records: Iterable[Record]) -> pa.Table:
    """Records -> Arrow table in the archive schema, rows sorted by the record key."""
    rows = sorted(records, key=sort_key)
    cols: dict[str, list[Any]] = {}
    # column by column with getattr: every field is a scalar, and dataclasses.asdict's recursive
    # copy was most of a live run's serial tail
    for name in SCHEMA.names:
        vals = [getattr(r, name) for r in rows]
        if name in NULLABLE:  # a record that went through pandas carries NaN for a null string
            vals = [None if isinstance(v, float) and v != v else v for v in vals]
        cols[name] = vals
    return pa.Table.from_pydict(cols, schema=SCHEMA)


def validate_table(
    table: pa.Table,
    source: str,
    schema: pa.Schema | None = None,
    keys: Sequence[str] = KEYS,
    version: int = SCHEMA_VERSION,
) -> None:
    """Raise :class:`ArchiveError` unless ``table`` is an allowlisted, key-unique archive."""
    schema = schema or SCHEMA
    allow = frozenset(schema.names)
    extra = sorted(set(table.column_names) - allow)
    if extra:
        raise ArchiveError(f"{source}: columns outside the archive allowlist: {extra}")
    missing = [n for n in schema.names if n not in table.column_names]
    if missing:
        raise ArchiveError(f"{source}: missing columns {missing}")
    for f in schema:
        got = table.schema.field(f.name).type
        if got != f.type:
            raise ArchiveError(f"{source}: column {f.name!r} has type {got}, expected {f.type}")
        if table.column(f.name).null_count and not f.nullable:
            raise ArchiveError(f"{source}: column {f.name!r} has null values")
    versions = set(table.column("schema_version").to_pylist())
    if versions - {version}:
        raise ArchiveError(
            f"{source}: schema_version {sorted(versions)} found, this layerlab reads {version}"
        )
    _check_values(table, source)
    _check_derived(table, source)
    rows = list(zip(*(table.column(k).to_pylist() for k in keys), strict=True))
    if len(set(rows)) != len(rows):
        seen: set[tuple[Any, ...]] = set()
        dup = next(k for k in rows if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ArchiveError(f"{source}: duplicate record key {dict(zip(keys, dup, strict=True))}")


def write_records(path: Path, records: Sequence[Record]) -> None:
    """Validate and atomically write ``records`` as a Parquet archive (deterministic bytes)."""
    table = to_table(records)
    validate_table(table, str(path))
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", write_statistics=False)
    atomic_write_bytes(Path(path), buf.getvalue())


def _version_of(table: pa.Table) -> int | None:
    if "schema_version" not in table.column_names or table.num_rows == 0:
        return None
    versions = set(table.column("schema_version").to_pylist())
    return next(iter(versions)) if len(versions) == 1 else None


def _set_version(table: pa.Table, version: int) -> pa.Table:
    return table.set_column(
        table.column_names.index("schema_version"),
        "schema_version",
        pa.array([version] * table.num_rows, pa.int16()),
    )


def _nulls_for(table: pa.Table, name: str, placeholders: frozenset[str]) -> pa.Table:
    """Column ``name`` with its placeholder strings (``""``, ``"-"``, ...) replaced by null."""
    vals = [None if v in placeholders else v for v in table.column(name).to_pylist()]
    return table.set_column(
        table.column_names.index(name), name, pa.array(vals, pa.string())
    )


def domain_of(policy_id: str) -> str:
    """The domain of a policy unit: the spec requires policy ids ``<domain>-NN``."""
    return policy_id.rsplit("-", 1)[0]


def answerable_by_scenario(
    table: pa.Table, source: str, scenarios: Any = None
) -> dict[str, bool]:
    """Each scenario's ``answerable`` from the scenario spec, checked against the archive's own
    labels: safe resolution is S on an answerable scenario and a structured non-answer elsewhere,
    so a spec that says otherwise than the records were scored by is refused (naming the
    scenario) rather than written into the archive."""
    if scenarios is None:
        from layerlab.faults.scenario import load_scenarios

        scenarios = load_scenarios()
    cols = {n: table.column(n).to_pylist() for n in ("safe_resolution", "success", "abstained")}
    scen = table.column("scenario" if "scenario" in table.column_names else "condition").to_pylist()
    out: dict[str, bool] = {}
    for name in dict.fromkeys(scen):
        if name not in scenarios:
            raise ArchiveError(
                f"{source}: scenario {name!r} is not in the scenario spec (known: "
                f"{', '.join(scenarios)}); pass the spec the archive was run with (--scenarios)"
            )
        ans = bool(scenarios[name].spec.answerable)
        judged = cols["success"] if ans else cols["abstained"]
        rows = [i for i, s in enumerate(scen) if s == name]
        if any(cols["safe_resolution"][i] != judged[i] for i in rows):
            raise ArchiveError(
                f"{source}: scenario {name!r}: the scenario spec says "
                f"{'answerable' if ans else 'unsafe'}, but the archive's safe_resolution labels "
                "were scored otherwise; pass the spec the archive was run with (--scenarios)"
            )
        out[name] = ans
    return out


V4_DERIVED = ("grounded_cited", "grounded", "grounded_false_positive", "contained", "token_f1")
_V3_INPUTS = ("answered", "success", "exact_match", "grounded")  # what v4_labels reads


def v4_labels(row: Any) -> dict[str, Any]:
    """Schema 4's label fields of a schema-3 record (a mapping with its labels), as far as the
    old labels determine them; ``None`` = not recorded (it needs the reply text).

    ``grounded_cited`` is the old ``grounded``. The new ``grounded`` (in a delivered document,
    cited or not) is true where the old one was, false where nothing was answered, else
    unknown; GF follows (false on a success whatever ``grounded`` is). ``contained`` and
    ``token_f1`` are true and 1.0 on an exact match (equal normalised tokens), false and 0.0
    without an answer, else unknown."""
    answered, success, em, old = row["answered"], row["success"], row["exact_match"], row["grounded"]
    grounded = True if old else (False if not answered else None)
    return {
        "grounded_cited": bool(old),
        "grounded": grounded,
        "grounded_false_positive": (grounded and not success)
        if grounded is not None
        else (False if success else None),
        "contained": True if em else (False if not answered else None),
        "token_f1": 1.0 if em else (0.0 if not answered else None),
    }


def _with_v4_labels(table: pa.Table, with_exact_match: bool = True) -> pa.Table:
    """``table`` (schema-3 labels) with schema 4's label columns set by :func:`v4_labels`.
    A study table has no ``exact_match`` (``with_exact_match=False``): it is true on a
    success, false without an answer, else not recorded, and is added too."""
    rows = table.select([n for n in _V3_INPUTS if n in table.column_names]).to_pylist()
    if not with_exact_match:
        for r in rows:
            r["exact_match"] = True if r["success"] else (False if not r["answered"] else None)
    derived = [v4_labels(r) for r in rows]
    cols = {k: [d[k] for d in derived] for k in V4_DERIVED}
    if not with_exact_match:
        cols["exact_match"] = [r["exact_match"] for r in rows]
    for name, vals in cols.items():
        typ = pa.float64() if name in SCORES else pa.bool_()
        arr = pa.array(vals, typ)
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, arr)
        else:
            table = table.append_column(name, arr)
    return table


def _upgrade_records(table: pa.Table, source: str, scenarios: Any) -> pa.Table:
    version = _version_of(table)
    names = table.column_names
    if version == 1 and "contract_mode" in names and "mitigation" not in names:
        table = table.rename_columns(["mitigation" if n == "contract_mode" else n for n in names])
        table = table.append_column("replicate", pa.array([0] * table.num_rows, pa.int16()))
        table = _set_version(table, 2)
        version = 2
    if version == 2 and "domain" not in table.column_names and "answerable" not in table.column_names:
        ans = answerable_by_scenario(table, source, scenarios)
        table = table.append_column(
            "answerable", pa.array([ans[s] for s in table.column("scenario").to_pylist()])
        )
        table = table.append_column(
            "domain", pa.array([domain_of(p) for p in table.column("policy_id").to_pylist()])
        )
        table = _nulls_for(table, "prompt_hash", frozenset({""}))
        table = _set_version(table, 3)
        version = 3
    names = set(table.column_names)
    if version == 3 and "grounded_cited" not in names and set(_V3_INPUTS) <= names:
        table = _set_version(_with_v4_labels(table), 4)
    if set(SCHEMA.names) <= set(table.column_names):
        table = table.select(SCHEMA.names)
    return table


def _upgrade_study(table: pa.Table, source: str, scenarios: Any) -> pa.Table:
    names = table.column_names
    if _version_of(table) == 1 and "condition" in names and "scenario" not in names:
        ren = {"condition": "scenario", "arm": "mitigation"}
        table = table.rename_columns([ren.get(n, n) for n in names])
        table = table.append_column(
            "domain", pa.array([domain_of(p) for p in table.column("policy_id").to_pylist()])
        )
        table = _nulls_for(table, "control_layer", frozenset({"-", ""}))
        table = _nulls_for(table, "control", frozenset({"none", ""}))
        table = _nulls_for(table, "prompt_hash", frozenset({""}))
        table = _set_version(table, 2)
    names = set(table.column_names)
    if _version_of(table) == 2 and "grounded_cited" not in names and set(_V3_INPUTS) - {"exact_match"} <= names:
        table = _set_version(_with_v4_labels(table, with_exact_match=False), 3)
    if set(STUDY_SCHEMA.names) <= set(table.column_names):
        table = table.select(STUDY_SCHEMA.names)
    return table


def upgrade(table: pa.Table, source: str = "archive", scenarios: Any = None) -> pa.Table:
    """An older record or study table in the current layout (see the module docstring); a table
    already current, or not a layerlab archive, is returned for validation to judge.
    ``scenarios`` (name -> :class:`~layerlab.faults.scenario.Scenario`; default the committed spec)
    gives ``answerable``, checked against the archive's labels."""
    study = "condition" in table.column_names or "control" in table.column_names
    return (_upgrade_study if study else _upgrade_records)(table, source, scenarios)


def read_table(
    path: Path,
    schema: pa.Schema | None = None,
    keys: Sequence[str] = KEYS,
    version: int = SCHEMA_VERSION,
) -> pa.Table:
    """Read and validate an archive; raise :class:`ArchiveError` on any problem.

    Archives of an older schema version are upgraded in memory (see the module docstring);
    ``layerlab archive migrate`` rewrites them.
    """
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise ArchiveError(f"{path}: not a readable Parquet archive ({exc})") from exc
    if _version_of(table) not in (None, version):
        table = upgrade(table, str(path))
    validate_table(table, str(path), schema, keys, version)
    return table.cast(schema or SCHEMA)


# --- the focused LangChain study's cells ------------------------------------------------------

STUDY_SCHEMA = pa.schema(
    [
        pa.field("schema_version", pa.int16(), nullable=False),
        *[pa.field(n, pa.string(), nullable=False) for n in ("run_id", "provider", "model", "scenario")],
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
        *[
            pa.field(n, pa.bool_(), nullable=True)
            for n in ("exact_match", "contained", "grounded")
        ],
        pa.field("token_f1", pa.float64(), nullable=True),
        pa.field("grounded_cited", pa.bool_(), nullable=False),
        pa.field("grounded_false_positive", pa.bool_(), nullable=True),
        pa.field("retry_restored", pa.bool_(), nullable=False),
        pa.field("retries", pa.int8(), nullable=False),
        *[pa.field(n, pa.string(), nullable=True) for n in ("control", "control_layer", "prompt_hash")],
    ],
    metadata={b"layerlab.archive.schema_version": str(STUDY_SCHEMA_VERSION).encode()},
)
STUDY_KEYS = ("provider", "model", "scenario", "mitigation", "task_id")
STUDY_ARCHIVE = "study.parquet"


def write_study(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Validate and atomically write study cells (sorted by key; allowlisted columns only)."""
    rows = sorted(rows, key=lambda r: tuple(r[k] for k in STUDY_KEYS))
    extra = {k for r in rows for k in r} - set(STUDY_SCHEMA.names)
    if extra:
        raise ArchiveError(f"{path}: columns outside the study allowlist: {sorted(extra)}")
    table = pa.Table.from_pydict(
        {n: [r[n] for r in rows] for n in STUDY_SCHEMA.names}, schema=STUDY_SCHEMA
    )
    validate_table(table, str(path), STUDY_SCHEMA, STUDY_KEYS, STUDY_SCHEMA_VERSION)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", write_statistics=False)
    atomic_write_bytes(Path(path), buf.getvalue())


def read_study(path: Path) -> list[dict[str, Any]]:
    """Read and validate a study archive (a file or a study run folder)."""
    path = Path(path)
    return read_table(
        path / STUDY_ARCHIVE if path.is_dir() else path,
        STUDY_SCHEMA,
        STUDY_KEYS,
        STUDY_SCHEMA_VERSION,
    ).to_pylist()


def read_records(path: Path) -> list[Record]:
    table = read_table(path)
    return [Record(**row) for row in table.to_pylist()]


# --- run folders: manifest + archive ---------------------------------------------------------

MANIFEST = "manifest.json"
ARCHIVE = "records.parquet"
PROGRESS = "records.jsonl"
MANIFEST_KEYS = frozenset(
    {
        "archive_schema_version",
        "run_id",
        "kind",
        "layerlab_version",
        "corpus",
        "spec_hashes",
        "provenance",
        "models",
        "scenarios",
        "modes",
        "mitigations",
        "prompt_version",
        "replicates",
        "share_replies",
        "sampling",
        "response_format",
        "reply_schema",
        "seeds",
        "local_models",
        "n_tasks",
        "retriever",
        "settings",
        "expected_records",
        "records",
        "complete",
        "calls",
        "errors",
        "files",
        "sources",
        "note",
        "arms",
        "conditions",
        "tasks",
        "seed",
        "controls",
        "migrations",
        "manifest_sha256",
    }
)

# --- provenance: what a record's numbers depend on besides the model --------------------------
PROVENANCE_FIELDS = ("corpus_spec", "corpus", "scenarios", "mitigations", "prompt", "tasks")
MIXED = "mixed"


def _sha(obj: Any) -> str:
    import hashlib

    from layerlab._io import canonical_json

    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


def provenance_for(corpus: Any, scenario_hash: str, task_ids: Iterable[str]) -> dict[str, str]:
    """The provenance hashes of a run: corpus spec, built corpus (documents and public tasks),
    scenario spec, mitigation spec, prompt template and the task set. Runs whose hashes differ
    measure different things and are not pooled without saying so (:func:`merge`, :func:`vet`)."""
    from layerlab import paths
    from layerlab.corpus.spec import spec_hash
    from layerlab.system import prompt

    return {
        "corpus_spec": corpus.spec_hash,
        "corpus": _sha(
            {
                "documents": [asdict(d) for d in corpus.documents],
                "tasks": [asdict(t) for t in corpus.tasks],
            }
        ),
        "scenarios": scenario_hash,
        "mitigations": spec_hash(paths.MITIGATION_SPEC),
        "prompt": _sha({"v": prompt.PROMPT_VERSION, "system": prompt.SYSTEM}),
        "tasks": _sha(sorted(task_ids)),
    }


def provenance_of(manifest: dict[str, Any]) -> dict[str, str]:
    """A manifest's provenance (older manifests: what their ``spec_hashes`` recorded)."""
    if isinstance(manifest.get("provenance"), dict):
        return dict(manifest["provenance"])
    legacy = manifest.get("spec_hashes") or {}
    return {
        k: v
        for k, v in (("corpus_spec", legacy.get("corpus")), ("scenarios", legacy.get("scenarios")))
        if v
    }


def combine_provenance(
    named: Sequence[tuple[str, dict[str, str]]], allow_mixed: bool = False
) -> dict[str, str]:
    """One provenance for several sources; a field on which they differ refuses the combination
    (naming both sources and hashes) unless ``allow_mixed``, and is then recorded as ``mixed``."""
    out: dict[str, str] = {}
    for f in PROVENANCE_FIELDS:
        seen: dict[str, str] = {}
        for name, prov in named:
            seen.setdefault(prov.get(f, "unknown"), name)
        if MIXED in seen and not allow_mixed:
            raise ArchiveError(
                f"mixed provenance: {seen[MIXED]} was merged from runs with different {f} "
                "hashes; pass --allow-mixed to use it anyway (the output is then labelled mixed)"
            )
        if len(seen) > 1 and not allow_mixed:
            (h1, a), (h2, b) = list(seen.items())[:2]
            raise ArchiveError(
                f"mixed provenance: {a} has {f} hash {h1[:12]}, {b} has {h2[:12]}; "
                "these runs measure different things. Pass --allow-mixed to combine them anyway "
                "(the output is then labelled mixed)"
            )
        out[f] = next(iter(seen)) if len(seen) == 1 else MIXED
    return out


def manifest_checksum(manifest: dict[str, Any]) -> str:
    """SHA-256 over the manifest's canonical JSON, its own checksum field left out."""
    return _sha({k: v for k, v in manifest.items() if k != "manifest_sha256"})


def write_manifest(folder: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Check the manifest's keys, add its checksum and write it atomically; return it."""
    import json

    from layerlab._io import atomic_write_text

    folder = Path(folder)
    extra = set(manifest) - MANIFEST_KEYS
    if extra:
        raise ArchiveError(
            f"{folder / MANIFEST}: keys outside the manifest allowlist: {sorted(extra)}"
        )
    manifest = {**manifest, "manifest_sha256": manifest_checksum(manifest)}
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def write_run(folder: Path, records: Sequence[Record], manifest: dict[str, Any]) -> dict[str, Any]:
    """Write ``records.parquet`` then ``manifest.json`` (with the archive's checksum) atomically."""
    from layerlab._io import sha256_file

    folder = Path(folder)
    extra = set(manifest) - MANIFEST_KEYS
    if extra:
        raise ArchiveError(
            f"{folder / MANIFEST}: keys outside the manifest allowlist: {sorted(extra)}"
        )
    write_records(folder / ARCHIVE, records)
    manifest = {
        **manifest,
        "archive_schema_version": SCHEMA_VERSION,
        "records": len(records),
        "files": {ARCHIVE: sha256_file(folder / ARCHIVE)},
    }
    return write_manifest(folder, manifest)


def read_manifest(folder: Path) -> dict[str, Any]:
    """Read a run folder's manifest; a manifest edited after it was written is refused."""
    import json

    p = Path(folder) / MANIFEST
    if not p.exists():
        raise ArchiveError(f"{p}: missing (not a layerlab run folder)")
    try:
        m = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArchiveError(f"{p}: not valid JSON ({exc})") from exc
    except OSError as exc:
        raise ArchiveError(f"{p}: cannot be read ({exc.strerror})") from exc
    if not isinstance(m, dict) or "run_id" not in m:
        raise ArchiveError(f"{p}: not a layerlab manifest (no run_id)")
    extra = set(m) - MANIFEST_KEYS
    if extra:
        raise ArchiveError(f"{p}: keys outside the manifest allowlist: {sorted(extra)}")
    if "manifest_sha256" in m and m["manifest_sha256"] != manifest_checksum(m):
        raise ArchiveError(
            f"{p}: manifest checksum does not match its content (edited after it was written)"
        )
    return m


def check_path(path: Path) -> dict[str, Any]:
    """Validate an archive file or a run folder; return a short report or raise ArchiveError.

    The report's ``partial`` is true for a run folder whose run did not finish (a valid archive
    of fewer records than the run expects) and for a bare archive file (no manifest says it is
    complete)."""
    from layerlab._io import sha256_file

    path = Path(path)
    if not path.exists():
        raise ArchiveError(f"{path}: does not exist")
    if path.is_file():
        table = read_table(path)
        return {
            "path": str(path),
            "records": table.num_rows,
            "runs": sorted(set(table.column("run_id").to_pylist())),
            "complete": None,
            "partial": True,
            "provenance": {},
        }
    m = read_manifest(path)
    if "manifest_sha256" not in m:
        raise ArchiveError(
            f"{path / MANIFEST}: has no manifest_sha256 (written by an older layerlab, or the "
            "checksum was removed); rerun it, or use its records.parquet as a bare archive file "
            "(recompute --allow-partial)"
        )
    study = m.get("kind") == "langchain_study"
    arch = path / (STUDY_ARCHIVE if study else ARCHIVE)
    if not arch.exists():
        hint = (
            " (an interrupted run: continue it with --resume)" if (path / PROGRESS).exists() else ""
        )
        raise ArchiveError(f"{arch}: missing{hint}")
    want = m.get("files", {}).get(arch.name)
    got = sha256_file(arch)
    if want != got:
        raise ArchiveError(
            f"{arch}: checksum {got[:12]}… differs from manifest {str(want)[:12]}… (modified or truncated)"
        )
    table = (
        read_table(arch, STUDY_SCHEMA, STUDY_KEYS, STUDY_SCHEMA_VERSION)
        if study
        else read_table(arch)
    )
    if table.num_rows != m.get("records"):
        raise ArchiveError(f"{arch}: {table.num_rows} records, manifest says {m.get('records')}")
    run_ids = set(table.column("run_id").to_pylist())
    allowed = {m["run_id"], *[s["run_id"] for s in m.get("sources", [])]}
    if run_ids - allowed:
        raise ArchiveError(
            f"{arch}: records from runs {sorted(run_ids - allowed)} not named by the manifest"
        )
    expected = m.get("expected_records")
    complete = m.get("complete") is True and (expected is None or expected == table.num_rows)
    return {
        "path": str(path),
        "run_id": m["run_id"],
        "records": table.num_rows,
        "expected_records": expected,
        "complete": m.get("complete"),
        "partial": not complete,
        "provenance": provenance_of(m),
        "models": list(m.get("models", [])),
    }


# Provenance fields that may differ between real models and reference agents (not within either).
BLOCK_FIELDS = ("tasks",)


def _reference_only(report: dict[str, Any]) -> bool | None:
    """Whether a checked archive holds only reference agents (None: its manifest names no models)."""
    from layerlab.models.agents import is_reference

    models = report.get("models") or []
    if not models:
        return None
    return all(is_reference(str(m).split("/", 1)[0]) for m in models)


def vet(
    paths_: Sequence[Path], allow_mixed: bool = False, allow_partial: bool = False
) -> list[str]:
    """Check archives before they feed tables: refuse partial ones unless ``allow_partial`` and
    mixed provenance unless ``allow_mixed``. Return the stamps the outputs must then carry."""
    reports = [check_path(Path(p)) for p in paths_]
    stamps: list[str] = []
    partial = [r for r in reports if r["partial"]]
    if partial:
        r = partial[0]
        what = (
            f"a partial run ({r['records']} of {r['expected_records'] or '?'} records)"
            if "run_id" in r
            else "a bare archive file (no manifest says the run is complete)"
        )
        if not allow_partial:
            raise ArchiveError(
                f"{r['path']}: {what}; finish it with --resume or pass --allow-partial "
                "(the tables are then stamped PARTIAL)"
            )
        stamps.append(
            "PARTIAL: "
            + "; ".join(f"{Path(r['path']).name} {r['records']} records" for r in partial)
        )
    # Real models and reference agents are analysed apart (never pooled), so their task sets may
    # differ; everything else they are scored on must match, and so must tasks within a kind.
    prov = combine_provenance(
        [(r["path"], {k: v for k, v in r["provenance"].items() if k not in BLOCK_FIELDS}) for r in reports],
        allow_mixed,
    )
    for kind in (True, False, None):
        same = [r for r in reports if _reference_only(r) is kind]
        if not same:
            continue
        block = combine_provenance(
            [(r["path"], {f: r["provenance"].get(f, "unknown") for f in BLOCK_FIELDS}) for r in same],
            allow_mixed,
        )
        for f in BLOCK_FIELDS:
            if block[f] == MIXED:
                prov[f] = MIXED
    mixed = [f for f, v in prov.items() if v == MIXED]
    if mixed:
        stamps.append("MIXED PROVENANCE: " + ", ".join(mixed) + " differ")
    return stamps


def load_records(paths_: Sequence[Path]) -> list[Record]:
    """Records from archive files or run folders, each checked; a run given twice counts once."""
    seen_runs: set[str] = set()
    out: list[Record] = []
    for p in paths_:
        p = Path(p)
        check_path(p)
        arch = p / ARCHIVE if p.is_dir() else p
        recs = read_records(arch)
        runs = {r.run_id for r in recs}
        if runs <= seen_runs:
            continue
        out.extend(r for r in recs if r.run_id not in seen_runs)
        seen_runs |= runs
    keys = [sort_key(r) for r in out]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ArchiveError(
            f"record {dict(zip(KEYS, dup, strict=True))} appears in more than one run"
        )
    return out


def merge(sources: Sequence[Path], out: Path, allow_mixed: bool = False) -> dict[str, Any]:
    """Combine run folders through their manifests into ``out``; a run given twice counts once,
    a record key present in two different runs is refused, and so are runs of different
    provenance unless ``allow_mixed`` (the merged provenance then says ``mixed``). Nothing is
    written when the merge is refused."""
    manifests = []
    seen: set[str] = set()
    for s in sources:
        m = read_manifest(Path(s))
        check_path(Path(s))
        if m["run_id"] in seen:
            continue
        seen.add(m["run_id"])
        manifests.append((str(s), m))
    prov = combine_provenance([(name, provenance_of(m)) for name, m in manifests], allow_mixed)
    records = load_records([Path(s) for s in sources])
    import hashlib

    run_id = "merge-" + hashlib.sha256("\x1f".join(sorted(seen)).encode()).hexdigest()[:12]
    mixed = [f for f, v in prov.items() if v == MIXED]
    manifest = {
        "run_id": run_id,
        "kind": "merged",
        "provenance": prov,
        "sources": [
            {
                "run_id": m["run_id"],
                "kind": m.get("kind"),
                "models": m.get("models"),
                "records": m.get("records"),
                "complete": m.get("complete"),
                "provenance": provenance_of(m),
            }
            for _, m in sorted(manifests, key=lambda nm: nm[1]["run_id"])
        ],
        "models": sorted({mm for _, m in manifests for mm in m.get("models", [])}),
        "complete": all(m.get("complete") for _, m in manifests),
    }
    if mixed:
        manifest["note"] = f"mixed provenance ({', '.join(mixed)} differ), merged with --allow-mixed"
    return write_run(Path(out), records, manifest)


# --- migration: rewrite an older archive in the current schema --------------------------------

MIGRATION_CHANGES = {
    ("records", 1, 2): "contract_mode renamed mitigation; replicate added (0)",
    ("records", 2, 3): "domain added (from policy_id); answerable added (from the scenario spec, "
    "checked against the archive's safe_resolution labels); prompt_hash '' -> null",
    ("records", 3, 4): "grounded redefined (stated in a delivered document, cited or not); "
    "grounded_cited added (the old grounded); contained and token_f1 added; values the old labels "
    "do not determine are null (not recorded: archives hold no reply text)",
    ("study", 1, 2): "condition renamed scenario, arm renamed mitigation; domain added (from "
    "policy_id); control 'none' -> null, control_layer '-' -> null, prompt_hash '' -> null",
    ("study", 2, 3): "grounded redefined (stated in a delivered document, cited or not); "
    "grounded_cited added (the old grounded); exact_match, contained and token_f1 added; values "
    "the old labels do not determine are null (not recorded: archives hold no reply text)",
}
_STUDY_MANIFEST_RENAMES = {"arms": "mitigations", "conditions": "scenarios"}


def _write_table(path: Path, table: pa.Table) -> None:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", write_statistics=False)
    atomic_write_bytes(Path(path), buf.getvalue())


def migrate(path: Path, scenarios_path: Path | None = None) -> dict[str, Any]:
    """Rewrite an archive file or run folder in the current schema, in place; no model is run.

    The added columns are pure functions of the archive's columns and the specs (see the module
    docstring). A run folder's manifest keeps its provenance and gains a ``migrations`` entry
    (versions, the archive's previous checksum, the scenario spec hash used, what changed); its
    file checksums and schema version are updated. The result is byte-identical to what the
    current layerlab writes for the same records. An archive already current is left untouched.
    Returns a short report (``path``, ``from``, ``to``, ``records``, ``changed``).
    """
    import hashlib

    from layerlab import __version__, paths
    from layerlab._io import sha256_file
    from layerlab.corpus.spec import SpecError, spec_hash
    from layerlab.faults.scenario import load_scenarios

    path = Path(path)
    if not path.exists():
        raise ArchiveError(f"{path}: does not exist (expected an archive file or run folder)")
    manifest = read_manifest(path) if path.is_dir() else None
    if manifest is not None and "manifest_sha256" not in manifest:
        raise ArchiveError(f"{path / MANIFEST}: has no manifest_sha256; cannot vouch for it")
    study = (manifest or {}).get("kind") == "langchain_study" or path.name == STUDY_ARCHIVE
    arch = path / (STUDY_ARCHIVE if study else ARCHIVE) if path.is_dir() else path
    if not arch.exists():
        raise ArchiveError(f"{arch}: missing")
    before = sha256_file(arch)
    if manifest is not None and manifest.get("files", {}).get(arch.name) != before:
        raise ArchiveError(f"{arch}: checksum differs from its manifest (modified or truncated)")
    try:
        table = pq.read_table(arch)
    except (OSError, pa.ArrowException) as exc:
        raise ArchiveError(f"{arch}: not a readable Parquet archive ({exc})") from exc
    schema, keys, version = (
        (STUDY_SCHEMA, STUDY_KEYS, STUDY_SCHEMA_VERSION) if study else (SCHEMA, KEYS, SCHEMA_VERSION)
    )
    old = _version_of(table)
    report = {"path": str(path), "from": old, "to": version, "records": table.num_rows}
    if old == version:
        validate_table(table, str(arch), schema, keys, version)
        return {**report, "changed": False}
    spec_file = Path(scenarios_path or paths.SCENARIO_SPEC)
    try:
        scen = load_scenarios(scenarios_path)
    except SpecError as exc:
        raise ArchiveError(f"{spec_file}: {exc}") from None
    new = upgrade(table, str(arch), scen)
    validate_table(new, str(arch), schema, keys, version)
    new = new.cast(schema)
    # rows in the order the writer sorts them, so a migrated archive equals a fresh write
    order = sorted(range(new.num_rows), key=lambda i: tuple(new.column(k)[i].as_py() for k in keys))
    new = new.take(pa.array(order, pa.int64()))
    if not study:
        new = to_table(Record(**row) for row in new.to_pylist())
    if manifest is None:
        _write_table(arch, new)
        return {**report, "changed": True}
    buf = io.BytesIO()
    pq.write_table(new, buf, compression="zstd", write_statistics=False)
    kind = "study" if study else "records"
    steps = [
        MIGRATION_CHANGES[(kind, v, v + 1)]
        for v in range(int(old or version), version)
        if (kind, v, v + 1) in MIGRATION_CHANGES
    ]
    m = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    if study:
        m = {_STUDY_MANIFEST_RENAMES.get(k, k): v for k, v in m.items()}
    m["migrations"] = [
        *m.get("migrations", []),
        {
            "from_schema_version": old,
            "to_schema_version": version,
            "previous_sha256": before,
            "layerlab_version": __version__,
            "scenario_spec": spec_hash(spec_file),
            "changes": "; ".join(steps),
        },
    ]
    m["archive_schema_version"] = version
    m["files"] = {**m.get("files", {}), arch.name: hashlib.sha256(buf.getvalue()).hexdigest()}
    atomic_write_bytes(arch, buf.getvalue())
    write_manifest(path, m)
    return {**report, "changed": True}
