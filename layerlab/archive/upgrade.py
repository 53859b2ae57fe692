"""Older archives in the current layout, in memory: a record or study table of an earlier schema
version upgraded column by column (the schema history is in :mod:`layerlab.archive.schema`).

Every added column is a pure function of columns the archive already holds plus the specs, so an
upgrade never re-runs a model; the scenario spec's ``answerable`` is checked against the
archive's own ``safe_resolution`` labels first. Schema 4's measures need the reply text, which no
archive holds: an upgrade derives what the old labels determine (:func:`v4_labels`:
``grounded_cited`` is the old ``grounded``; nothing is grounded or contained without an answer;
an exact match is contained with F1 1) and writes null, "not recorded", for the rest. Only a
rerun, or a rescore from the private sample log, fills them. ``layerlab archive migrate``
(:mod:`layerlab.archive.migrate`) writes the upgraded table back.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from layerlab.archive.schema import SCHEMA, SCORES, STUDY_SCHEMA, ArchiveError, domain_of


def version_of(table: pa.Table) -> int | None:
    """The one schema version of a table's rows (None: empty, mixed or not an archive)."""
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
    return table.set_column(table.column_names.index(name), name, pa.array(vals, pa.string()))


def answerable_by_scenario(table: pa.Table, source: str, scenarios: Any = None) -> dict[str, bool]:
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
    answered, success, em, old = (
        row["answered"],
        row["success"],
        row["exact_match"],
        row["grounded"],
    )
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
    version = version_of(table)
    names = table.column_names
    if version == 1 and "contract_mode" in names and "mitigation" not in names:
        table = table.rename_columns(["mitigation" if n == "contract_mode" else n for n in names])
        table = table.append_column("replicate", pa.array([0] * table.num_rows, pa.int16()))
        table = _set_version(table, 2)
        version = 2
    if (
        version == 2
        and "domain" not in table.column_names
        and "answerable" not in table.column_names
    ):
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
    if version_of(table) == 1 and "condition" in names and "scenario" not in names:
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
    if (
        version_of(table) == 2
        and "grounded_cited" not in names
        and set(_V3_INPUTS) - {"exact_match"} <= names
    ):
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
