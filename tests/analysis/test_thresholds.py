"""The gate's threshold syntax (layerlab.analysis.thresholds): a scenario at an intensity is the
variant its records carry, however the dose is written; an ``@`` before a number is the
scenario's, any other the arm's; pass^k measures canonical whatever alias names them."""

from __future__ import annotations

import pytest

from layerlab.analysis.thresholds import GateError, parse_key, parse_threshold, pass_hat


@pytest.mark.parametrize(
    ("key", "parsed"),
    [
        ("S:clean@repair", ("S", "clean", "repair", None)),
        ("safe:stale_index@0.25", ("SR", "stale_index@0.25", None, None)),
        ("safe:stale_index@λ=0.250", ("SR", "stale_index@0.25", None, None)),
        ("SR:stale_index@.5@repair/m", ("SR", "stale_index@0.5", "repair", "m")),
        ("S:stale_index@1", ("S", "stale_index", None, None)),
        ("S:stale_index@0", ("S", "stale_index@0", None, None)),
        ("pass^4:wrong_session@0.1@strict", ("pass^4", "wrong_session@0.1", "strict", None)),
        ("S^2", ("pass^2", None, None, None)),
        ("SR^8:*", ("safe^8", "*", None, None)),
    ],
)
def test_keys_parse_to_the_names_the_records_carry(key, parsed) -> None:
    assert parse_key(key, key) == parsed


def test_pass_hat_measures_name_their_label_and_k() -> None:
    assert pass_hat("pass^4") == ("success", 4)
    assert pass_hat("safe^2") == ("safe_resolution", 2)
    assert pass_hat("SR") is None
    t = parse_threshold("pass^4:stale_index@0.25=80%", "min")
    assert (t.measure, t.scenario, t.value) == ("pass^4", "stale_index@0.25", 0.8)


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("pass^0:clean", "pass^k is pass^K (on S) or safe^K"),
        ("GF^2", "unknown measure 'GF^2'"),
        ("S:stale_index@1.5", "scenario 'stale_index@1.5': expected <scenario>@<intensity"),
        ("S:stale_index@0.12345", "expected <scenario>@<intensity in [0, 1]>"),
    ],
)
def test_a_bad_key_is_one_line_naming_it(key, message) -> None:
    with pytest.raises(GateError) as exc:
        parse_key(key, "--min x")
    assert str(exc.value).startswith("--min x: ") and message in str(exc.value)
