"""The gate's threshold syntax: ``MEASURE[:SCENARIO][@ARM][/MODEL]=VALUE`` parsed into a typed
:class:`Threshold` (:mod:`layerlab.analysis.gate` judges it against a run).

A measure is a rate's short name (:data:`MEASURES`: ``S``, ``SR`` or ``safe``, ``GF``, ...) or a
pass^k over the run's epochs (:data:`PASS_HAT`): ``pass^K`` on strict success S (``S^K`` too),
``safe^K`` on safe resolution (``SR^K`` too), K a positive whole number. A scenario may name an
intensity variant: ``stale_index@0.25`` (or ``stale_index@λ=0.25``), read as the variant the
records carry (:func:`layerlab.faults.scenario.variant_name`: ``@1`` is the scenario itself,
``@0.250`` is ``@0.25``); an ``@`` followed by a number belongs to the scenario, any other to the
arm (``S:stale_index@0.25@repair``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from layerlab.faults.scenario import variant_name
from layerlab.registry import did_you_mean

# short name (as the tables and results.json name it) -> archive label
MEASURES = {
    "S": "success",
    "SR": "safe_resolution",
    "GF": "grounded_false_positive",
    "GF_cited": "grounded_cited_false_positive",
    "E": "exact_match",
    "R": "retrieval_ok",
    "G": "citation_ok",
    "V": "schema_ok",
    "malformed": "malformed_reply",
    "provider_error": "provider_error",
}
ALIASES = {"safe": "SR"}  # results.json's name for safe resolution
PASS_HAT = {"pass": "success", "safe": "safe_resolution"}
"""pass^k measures: ``<name>^K`` -> the archive label it is computed on (``S^K``, ``SR^K`` alias)."""
_PASS_ALIASES = {"S": "pass", "SR": "safe"}
EACH = "*"  # ``S:*``: every scenario on its own
SYNTAX = "MEASURE[:SCENARIO][@ARM][/MODEL]=VALUE"
_DOSE = r"@(?:λ=|lambda=)?[0-9]*\.?[0-9]+"  # a scenario's intensity: @0.25, @λ=0.25
_PATTERN = re.compile(
    r"(?P<measure>[A-Za-z_]+(?:\^[0-9]+)?)"
    rf"(?::(?P<scenario>[^:@/=]+(?:{_DOSE})?))?(?:@(?P<arm>[^:@/=]+))?(?:/(?P<model>.+))?"
)
Bound = Literal["min", "max"]


class GateError(ValueError):
    """A gate that cannot be checked: a bad threshold, an unknown name, a missing archive. The
    message is one line naming the flag (or file and key) and what was expected."""


@dataclass(frozen=True)
class Threshold:
    """One bound on a measure over the cells it names (``None``: every value of that dimension;
    ``scenario`` ``None``: over every scenario, :data:`EACH`: each on its own)."""

    source: str  # how the user wrote it: ``--min S:clean=0.6`` or ``run.yaml: gate.min: S:clean``
    bound: Bound
    measure: str
    scenario: str | None
    arm: str | None
    model: str | None
    value: float


def pass_hat(measure: str) -> tuple[str, int] | None:
    """``(archive label, k)`` of a pass^k measure (``pass^4``, ``safe^2``); None for a rate."""
    name, caret, k = measure.partition("^")
    return (PASS_HAT[name], int(k)) if caret else None


def parse_value(text: str | float, where: str) -> float:
    """A share in [0, 1] from ``0.6``, ``60%`` or a number; :class:`GateError` otherwise."""
    if isinstance(text, bool):
        raise GateError(f"{where}: expected a share in [0, 1] or a percentage, got {text!r}")
    s = str(text).strip()
    scale = 100.0 if s.endswith("%") else 1.0
    try:
        v = float(s[:-1] if scale != 1.0 else s) / scale
    except ValueError:
        raise GateError(
            f"{where}: expected a share in [0, 1] (e.g. 0.6) or a percentage (60%), got {s!r}"
        ) from None
    if not 0.0 <= v <= 1.0:
        raise GateError(f"{where}: expected a share in [0, 1] or a percentage, got {s!r}")
    return v


def _measure(given: str, where: str) -> str:
    """The canonical measure of ``given``: a rate's short name or ``pass^K`` / ``safe^K``."""
    name, caret, k = given.partition("^")
    if caret:
        name = _PASS_ALIASES.get(name, name)
        if name not in PASS_HAT or int(k) < 1:
            raise GateError(
                f"{where}: unknown measure {given!r}; pass^k is pass^K (on S) or safe^K (on "
                "safe resolution), K a whole number >= 1 (e.g. pass^4)"
            )
        return f"{name}^{int(k)}"
    measure = ALIASES.get(name, name)
    if measure not in MEASURES:
        raise GateError(
            f"{where}: unknown measure {name!r}{did_you_mean(name, MEASURES)}; "
            f"known: {', '.join(MEASURES)}, pass^K, safe^K"
        )
    return measure


def _scenario(given: str | None, where: str) -> str | None:
    """``given`` with its intensity written as the records name the variant."""
    if given is None or "@" not in given:
        return given
    base, _, dose = given.partition("@")
    dose = dose.removeprefix("λ=").removeprefix("lambda=")
    try:
        return variant_name(base, float(dose))
    except ValueError:
        raise GateError(
            f"{where}: scenario {given!r}: expected <scenario>@<intensity in [0, 1]>"
        ) from None


def parse_key(key: str, where: str) -> tuple[str, str | None, str | None, str | None]:
    """``(measure, scenario, arm, model)`` of ``MEASURE[:SCENARIO][@ARM][/MODEL]``; the measure
    is checked here (its short name, :data:`MEASURES`, or a pass^k), the names against the run
    later."""
    m = _PATTERN.fullmatch(key.strip())
    if m is None:
        raise GateError(f"{where}: expected {SYNTAX}, e.g. S:clean@repair=0.6")
    return _measure(m["measure"], where), _scenario(m["scenario"], where), m["arm"], m["model"]


def parse_threshold(text: str, bound: Bound) -> Threshold:
    """A ``--min``/``--max`` flag's ``MEASURE[:SCENARIO][@ARM][/MODEL]=VALUE``."""
    where = f"--{bound} {text}"
    key, eq, value = text.rpartition("=")
    if not eq or not key.strip() or not value.strip():
        raise GateError(f"{where}: expected {SYNTAX}, e.g. S:clean@repair=0.6")
    return Threshold(where, bound, *parse_key(key, where), parse_value(value, where))


__all__ = ["MEASURES", "ALIASES", "PASS_HAT", "EACH", "SYNTAX", "Bound", "GateError", "Threshold",
           "pass_hat", "parse_value", "parse_key", "parse_threshold"]  # fmt: skip
