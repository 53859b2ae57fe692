"""The headline results table in a terminal: it fits the width, never cuts a number, shows every
column present (whatever columns a results table grows), and a pipe gets the whole table."""

from __future__ import annotations

import io
import json
import re
from collections import Counter

import pandas as pd
import pytest
from rich.console import Console

from layerlab import paths
from layerlab.reporting.format import cells, terminal

NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _frame() -> pd.DataFrame:
    res = json.loads(
        (
            paths.ARCHIVES / "local_model_mitigations" / "qwen2.5-coder-1.5b" / "results.json"
        ).read_text()
    )
    df = cells.results_table(res)
    # a second model with a long name, and a cost column as a later results table may carry
    other = df.head(2).assign(model="hosted_vllm/meta-llama/Llama-3.1-8B-Instruct")
    return pd.concat([df, other], ignore_index=True).assign(**{"cost (USD)": "0.0123"})


def _render(df: pd.DataFrame, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None)
    terminal.print_wide(df, "Results by model: rate [95% interval]", console)
    return console.file.getvalue()


@pytest.mark.parametrize("width", [80, 120, 60])
def test_every_number_whole_and_no_line_wider_than_the_terminal(width: int) -> None:
    df = _frame()
    out = _render(df, width)
    assert max(len(line) for line in out.splitlines()) <= width
    assert "…" not in out
    data = Counter(NUMBER.findall(" ".join(map(str, df.drop(columns="model").to_numpy().ravel()))))
    shown = Counter(NUMBER.findall(out))
    assert not data - shown, f"numbers missing or cut at {width} columns: {data - shown}"
    for model in df["model"]:
        assert model in out
    for arm in df["arm"]:
        assert re.search(rf"(?<![\w]){arm}(?![\w])", out), arm
    for col in df.columns[3:]:  # every measure's name, whole, however the layout splits headers
        assert all(word in out for word in str(col).split())
    # every interval is shown whole on one line
    for cell in df["S"]:
        assert cell.split(" ", 1)[1] in out or width < 20


def test_width_picks_the_layout() -> None:
    df = _frame()
    wide = _render(df, 400)
    assert "0.192 [0.149, 0.243]" in wide and "local/qwen2.5-coder-1.5b" in wide
    # today's columns at 120: one table per model, the value above its interval
    mid = _render(df.drop(columns="cost (USD)"), 120)
    assert any(line.strip().startswith("strict") and "0.192" in line for line in mid.splitlines())
    assert any("[0.149, 0.243]" in line and "0.192" not in line for line in mid.splitlines())
    narrow = _render(df, 80)  # one block per model and arm, one measure a line
    assert "strict (360 records)" in narrow
    assert any(re.match(r"\s+S\s+0\.192 \[0\.149, 0\.243\]", line) for line in narrow.splitlines())
    assert any(re.match(r"\s+cost \(USD\)\s+0\.0123", line) for line in narrow.splitlines())


def test_a_pipe_gets_the_whole_table(capsys: pytest.CaptureFixture[str]) -> None:
    df = _frame()
    terminal.print_wide(df, "Results by model")
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "local/qwen2.5-coder-1.5b" in line]
    assert len(rows) == 12  # one line per model and arm, every cell whole
    assert all("[" in r and "]" in r and "0.0123" in r for r in rows)


def test_recompute_headline_fits_80_columns() -> None:
    arms = [f"arm_{i:02d}_with_a_long_name" for i in range(12)]
    head = {
        "n_boot": 10,
        "seed": 0,
        "blocks": {
            "models": {
                "records": 100,
                "units": ["a/b"],
                "success": {s: {a: 0.123456 for a in arms} for s in ("clean", "stale_index")},
                "schema_drift_gain": {"estimate": 0.5, "ci95": [0.4, 0.6]},
                "specificity_margin": {
                    "margin": 0.1,
                    "ci_low": 0.0,
                    "ci_high": 0.2,
                    "largest_off_target_change": 0.01,
                    "largest_off_target": "clean",
                },
                "note": "",
            }
        },
    }
    console = Console(width=80, file=io.StringIO(), color_system=None)
    terminal.print_recompute(head, console)
    out = console.file.getvalue()
    assert max(len(line) for line in out.splitlines()) <= 80 and "…" not in out
    assert out.count("0.123") == 24 and all(a in out for a in arms)
