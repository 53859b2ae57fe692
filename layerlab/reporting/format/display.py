"""How results look in a notebook: the one place for display formatting.

:func:`table` turns a library table into what a reader should see — rates as percentages, a rate
and its 95% interval in one cell, effects and gains in signed percentage points, p-values as
bounds (``< 1e-10``), counts with thousands separators, yes/no for booleans, and the table's label
columns as its index instead of pandas' 0, 1, 2, ... The values written to ``paper/tables`` are
untouched: :func:`layerlab.reporting.paper.tables.publish` writes the library's frame, a notebook shows
``display.table(frame)``.

:func:`unit_kind` is the one wording of what a unit is: a real model, or a reference agent (a
deterministic baseline), so that figures, tables and notebooks never present a baseline as a model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Literal

import pandas as pd

from layerlab.analysis.results import is_reference
from layerlab.models.agents import is_target

REAL_MODEL = "real model"
REFERENCE_AGENT = "reference agent (deterministic baseline)"
TARGET = "target (your system under test)"
MISSING = "–"  # an empty cell (NaN / None)
P_FLOOR = 1e-10  # p-values below this are printed as "< 1e-10"

_P_COLUMN = re.compile(r"(^|[\s_])p([\s_-]?value)?$", re.IGNORECASE)
# a difference of two rates (a fraction): shown in signed percentage points, not as a percentage
_DIFFERENCE = re.compile(r"\b(gain|difference|change|effect)\b", re.IGNORECASE)
_LOW = re.compile(r"^(?P<pre>.*?)95% low(?P<post>.*)$")


def unit_kind(provider: str) -> str:
    """``"real model"``, ``"reference agent (deterministic baseline)"`` or ``"target (your
    system under test)"`` for a unit's provider."""
    if is_target(provider):
        return TARGET
    return REFERENCE_AGENT if is_reference(provider) else REAL_MODEL


def unit_label(unit: str) -> str:
    """``provider/model — what it is`` (``unit`` is ``provider/model``)."""
    return f"{unit} — {unit_kind(unit.split('/', 1)[0])}"


def interval_methods(methods: Sequence[str]) -> str:
    """The interval method of each cell (:func:`layerlab.analysis.exact.cell_methods`) in words,
    for a figure's title or a caption: ``"Tango's score interval in every cell"``, or each method
    with its cells (``"Tango's score interval (7 cells), the calibrated bootstrap (2 cells)"``)."""
    from layerlab.analysis import exact

    names = {
        exact.SCORE: "Tango's score interval",
        exact.SCORE_CLUSTERED: "Tango's score interval at the policies' design effect",
        exact.SCORE_CONSTANT: "Tango's score interval at the pooled pairs (constant cells)",
        exact.BOOTSTRAP: "the calibrated bootstrap",
    }
    counts = {m: list(methods).count(m) for m in dict.fromkeys(methods)}
    if len(counts) == 1:
        return f"{names[next(iter(counts))]} in every cell"
    return ", ".join(f"{names[m]} ({n} cell{'s' * (n != 1)})" for m, n in counts.items())


# --- scalar formatters -----------------------------------------------------------------------


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def rate(
    v: Any,
    interval: Sequence[Any] | None = None,
    *,
    percent: bool = False,
    digits: int | None = None,
    suffix: str = "",
    missing: str = MISSING,
) -> str:
    """A rate (a share in [0, 1]) and, given ``interval`` ``(low, high)``, its interval in
    brackets: the one rate formatter. The rules a caller chooses, each explicit:

    - ``percent``: shown ×100 (``0.812 -> "81.2"``) or as the share (``"0.812"``);
    - ``digits``: decimals (default 1 for a percentage, 3 for a share);
    - ``suffix``: after each number (``"%"``: ``"81.2%"``; ``""`` where the header says %);
    - ``missing``: the text of an absent value (None, NaN): :data:`MISSING` in notebooks, ``"-"``
      in the terminal tables of a run and of ``layerlab compare``.

    The interval is left out when its low end is missing. ``rate(0.812, (0.771, 0.847))`` is
    ``"0.812 [0.771, 0.847]"``; with ``percent=True`` ``"81.2 [77.1, 84.7]"``."""
    if _missing(v):
        return missing
    d = (1 if percent else 3) if digits is None else digits

    def one(x: Any) -> str:
        return missing if _missing(x) else f"{(100 if percent else 1) * float(x):.{d}f}{suffix}"

    if interval is None or _missing(interval[0]):
        return one(v)
    return f"{one(v)} [{one(interval[0])}, {one(interval[1])}]"


def percent(v: Any, digits: int = 1) -> str:
    """A share in [0, 1] as a percentage: ``0.975 -> "97.5%"`` (:func:`rate`'s percent rule)."""
    return rate(v, percent=True, digits=digits, suffix="%")


Sign = Literal["nonzero", "always", "minus"]


def points(
    v: Any,
    digits: int = 1,
    *,
    interval: Sequence[Any] | None = None,
    share: bool = False,
    sign: Sign = "nonzero",
    missing: str = MISSING,
) -> str:
    """Percentage points: the one percentage-point formatter. ``97.5 -> "+97.5"``; with
    ``share=True`` the value is a difference of two shares (``0.125 -> "+12.5"``). Given
    ``interval`` ``(low, high)`` the interval follows in brackets, each end by the same rule
    (``"+12.5 [+3.0, +22.0]"``). The rules a caller chooses, each explicit:

    - ``sign``: ``"nonzero"`` (notebooks, findings): ``+`` or ``-``, and a value that rounds to
      zero is ``"0.0"``, never ``"+0.0"`` or ``"-0.0"``; ``"always"`` (the terminal tables of
      ``layerlab compare`` and the paper's Table 10 cells): the sign as written, ``"+0.0"``, and
      ``"-0.0"`` for a small negative value, so identical runs read ``+0.0 [+0.0, +0.0]`` as
      they always have; ``"minus"`` (the recompute headline, the paper's effect captions): a
      sign only on a negative value (``"12.5"``);
    - ``missing``: the text of an absent value (None, NaN), :data:`MISSING` unless given (the
      terminal's ``"-"``)."""
    if _missing(v):
        return missing

    def one(y: Any) -> str:
        if _missing(y):
            return missing
        x = 100 * float(y) if share else float(y)
        if sign == "minus":
            return f"{x:.{digits}f}"
        if sign == "nonzero":
            x = round(x, digits)
            return f"{0.0:.{digits}f}" if x == 0 else f"{x:+.{digits}f}"
        return f"{x:+.{digits}f}"

    if interval is None:
        return one(v)
    return f"{one(v)} [{one(interval[0])}, {one(interval[1])}]"


def margin(delta: float) -> str:
    """The equivalence margin δ (a share) as the paper's captions, ``layerlab compare --matrix``
    and the gate state it: ``0.1 -> "δ = 10 pp"`` — points by its own rule (``:g``, no sign, no
    fixed decimals: a margin is a setting, not an estimate)."""
    return f"δ = {100 * delta:g} pp"


def p_value(v: Any, floor: float = P_FLOOR) -> str:
    """A p-value for reading: 3 significant digits from 0.001 up, else a bound (``< 1e-4``,
    never below ``< 1e-10``). Strings the library already wrote (``"< 1e-300"``, ``"1.05e-140"``)
    are read back first; text that is not a number (``"0 (no residual variation)"``) is kept."""
    if _missing(v) or v == "":
        return MISSING
    if isinstance(v, str):
        s = v.strip()
        if s.startswith("<"):
            return f"< {_bound(floor)}" if _as_float(s[1:]) is not None else s
        x = _as_float(s)
        if x is None:
            return s
        v = x
    x = float(v)
    if x >= 1e-3:
        return f"{x:.3g}"
    if x < floor:
        return f"< {_bound(floor)}"
    return f"< {_bound(10 ** math.ceil(math.log10(x)) if x > 0 else floor)}"


def _bound(x: float) -> str:
    return f"1e{round(math.log10(x))}"


def _as_float(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def count(v: Any) -> str:
    return MISSING if _missing(v) else f"{int(v):,}"


def number(v: Any) -> str:
    """Other numbers: integers as counts, floats to 3 significant digits (at least 2 decimals
    below 1000)."""
    if _missing(v):
        return MISSING
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) >= 1000):
        return f"{int(v):,}"
    x = float(v)
    return f"{x:,.1f}" if abs(x) >= 100 else f"{x:.3g}" if abs(x) < 0.01 and x != 0 else f"{x:.2f}"


# --- tables -----------------------------------------------------------------------------------


def _kind(name: str, col: pd.Series) -> str:
    """How a column is shown: bool, count, p, pp, percent, number or text."""
    if pd.api.types.is_bool_dtype(col):
        return "bool"
    if _P_COLUMN.search(name) and "log" not in name:
        return "p"
    if "(pp)" in name:
        return "pp"
    if pd.api.types.is_integer_dtype(col):
        return "count"
    if pd.api.types.is_float_dtype(col) and _DIFFERENCE.search(name):
        return "difference"
    if pd.api.types.is_float_dtype(col):
        vals = col.dropna()
        if len(vals) and vals.between(0.0, 1.0).all():
            return "percent"
        return "number"
    return "text"


_FORMAT = {
    "bool": lambda v: MISSING if _missing(v) else ("yes" if v else "no"),
    "count": count,
    "p": p_value,
    "pp": points,
    "difference": lambda v: MISSING if _missing(v) else f"{points(v, share=True)} pp",
    "percent": percent,
    "number": number,
    "text": lambda v: MISSING if _missing(v) else number(v) if isinstance(v, float) else str(v),
}


def _intervals(df: pd.DataFrame, kinds: dict[str, str]) -> list[tuple[str, str, str]]:
    """(estimate, low, high) column triples. ``X 95% low`` / ``X 95% high`` belong to ``X``. An
    unnamed ``95% low`` / ``95% high`` pair belongs to the column right before it only when that
    is the one column of its kind there (after ``margin (pp)``, ``plug-in margin (pp)`` it could
    be either: left as separate columns rather than guessed)."""
    cols = [str(c) for c in df.columns]
    out: list[tuple[str, str, str]] = []
    used: set[str] = set()
    for i, c in enumerate(cols):
        m = _LOW.match(c)
        if not m or i == 0:
            continue
        high = f"{m['pre']}95% high{m['post']}"
        if high not in cols:
            continue
        named = m["pre"].strip()
        if named:
            if named in cols and pd.api.types.is_numeric_dtype(df[named]):
                out.append((named, c, high))
                used |= {named, c, high}
            continue
        est = cols[i - 1]
        before = i - 2
        if est in used or not pd.api.types.is_numeric_dtype(df[est]):
            continue
        if before >= 0 and cols[before] not in used and kinds[cols[before]] == kinds[est]:
            continue  # ambiguous: two candidate estimates
        out.append((est, c, high))
        used |= {est, c, high}
    return out


def _index_columns(df: pd.DataFrame, limit: int = 3) -> list[str]:
    """The leading text columns that identify a row (fewest that are unique together)."""
    lead: list[str] = []
    for c in df.columns[:limit]:
        if pd.api.types.is_numeric_dtype(df[c]) or pd.api.types.is_bool_dtype(df[c]):
            break
        lead.append(str(c))
        if not df.duplicated(subset=lead).any():
            return lead
    return lead[:1] if lead else []


def _labelled_index(df: pd.DataFrame) -> bool:
    """Whether ``df``'s index carries row labels (a named index, as ``groupby`` and ``unstack``
    leave): :func:`table` keeps them as its index instead of numbering the rows."""
    return all(n is not None for n in df.index.names) and not any(
        str(n) in {str(c) for c in df.columns} for n in df.index.names
    )


def table(
    df: pd.DataFrame, index: Sequence[str] | str | None = None, lead: Sequence[str] | str = ()
) -> pd.DataFrame:
    """``df`` formatted for reading (see the module docstring); a new frame of strings whose
    index is ``index`` (default: the leading label columns, e.g. ``scenario``) and whose first
    columns are ``lead`` (what a reader looks for first, e.g. Table 10's ``verdict``, shown
    without scrolling sideways; the table's own file keeps its order)."""
    if _labelled_index(df):  # a groupby/unstack result: its index holds the row labels
        labels = [str(n) for n in df.index.names]
        df = df.reset_index()
        df.columns = [str(c) for c in df.columns]
        if index is None:
            index = labels
    cols = [str(c) for c in df.columns]
    frame = df.copy()
    frame.columns = cols
    kinds = {c: _kind(c, frame[c]) for c in cols}
    shown: dict[str, list[str]] = {c: [_FORMAT[kinds[c]](v) for v in frame[c]] for c in cols}
    names = {c: c for c in cols}
    for est, low, high in _intervals(frame, kinds):
        k = kinds[est] if kinds[est] in ("percent", "pp", "difference") else "number"
        if k == "percent" and not (kinds[low] == kinds[high] == "percent"):
            k = "number"
        fmt = _FORMAT[k]
        shown[est] = [
            e if _missing(lo) else f"{e} [{fmt(lo)}, {fmt(hi)}]"
            for e, lo, hi in zip(shown[est], frame[low], frame[high], strict=True)
        ]
        names[est] = f"{est} [95% CI]"
        shown.pop(low)
        shown.pop(high)
    first = [lead] if isinstance(lead, str) else list(lead)
    unknown = [c for c in first if c not in shown]
    if unknown:
        raise KeyError(f"lead: no column {unknown[0]!r} (columns: {', '.join(shown)})")
    order = first + [c for c in shown if c not in first]
    out = pd.DataFrame({names[c]: shown[c] for c in order})
    idx = (
        [index]
        if isinstance(index, str)
        else list(index)
        if index is not None
        else _index_columns(frame)
    )
    idx = [names.get(c, c) for c in idx]
    if idx:
        out = out.set_index(idx)
    else:
        out.index = pd.RangeIndex(1, len(out) + 1, name="#")
    return out
