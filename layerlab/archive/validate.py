"""Validation of an archive table against its schema: the column allowlist, types and nulls, the
value allowlist of every string column, the columns derived from others, the agreement of the
labels, and a unique record key. Run on every write and every read."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from layerlab.archive.schema import (
    KEYS,
    SCHEMA,
    SCHEMA_VERSION,
    VALUE_PATTERNS,
    ArchiveError,
    domain_of,
    value_vocabularies,
)


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
        for d, p in zip(
            table.column("domain").to_pylist(), table.column("policy_id").to_pylist(), strict=True
        ):
            if d != domain_of(p):
                raise ArchiveError(
                    f"{source}: column 'domain' holds {d!r} for policy {p!r}; expected {domain_of(p)!r}"
                )
    if "reached_reader" in names and "prompt_hash" in names:
        for reached, h in zip(
            table.column("reached_reader").to_pylist(),
            table.column("prompt_hash").to_pylist(),
            strict=True,
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
        bad = [
            v for v in table.column("token_f1").to_pylist() if v is not None and not 0.0 <= v <= 1.0
        ]
        if bad:
            raise ArchiveError(
                f"{source}: column 'token_f1' holds {bad[0]!r}; expected a value in [0, 1]"
            )
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
