"""A conversational run's lines: S by turn index, the leak with its interval, the break."""

from __future__ import annotations

from layerlab.reporting.format.convtext import by_turn_lines, finding, leak_line, lines

CELL = {
    "epochs": 2, "conversation_success": 0.5, "pass_hat_k": {"1": 0.5, "2": 0.25},
    "by_turn": [{"turn": 0, "S": 1.0}, {"turn": 1, "S": 0.4}],
    "leak_turns": {"k": 3, "n": 10, "rate": 0.3, "interval": [0.0667, 0.6525]},
    "leak_conversations": {"k": 1, "n": 2, "rate": 0.5, "interval": [0.0126, 0.9874]},
    "first_leak_turn": 1,
    "break": {"turn": 1, "S": 0.4, "S_turn0": 1.0, "failed": 3, "n": 5, "kind": "update",
              "kind_failed": 2, "diagnostic": "freshness"},
}  # fmt: skip


def test_the_table_the_leak_and_the_finding() -> None:
    table = by_turn_lines({"layerlab/extractive": {"stale_memory": CELL}})
    assert table[0].startswith("layerlab/extractive: S by turn index") and "pass^2" in table[1]
    assert table[2].split() == ["stale_memory", "1.000", "0.400", "0.500", "0.250"]
    assert leak_line("m", "s", CELL) == (
        "m s: cross-session leak 0.300 [0.067, 0.652] of turns (3/10), 0.500 [0.013, 0.987] of "
        "conversations (1/2; exact 95% intervals)")
    f = finding("m", "s", CELL)
    assert "breaks at turn 1" in f and "2 of its 3 failed turns are update turns" in f
    assert f.endswith("leaks another user's conversation from turn 1")
    calm = {**CELL, "first_leak_turn": None, "break": {**CELL["break"], "failed": 0}}
    assert "no turn index below" in finding("m", "s", calm)
    assert len(lines({"m": {"s": CELL}})) == 3 + 2


def test_the_page_tables_count_the_turns_and_state_the_leak_with_its_counts() -> None:
    from layerlab.reporting.format.convtext import by_turn_table, cells_table

    cell = {**CELL, "by_turn": [{"turn": 0, "S": 1.0, "n": 5}, {"turn": 1, "S": 0.4, "n": 5},
                                {"turn": 2, "S": 0.5, "n": 2}],
            "turns": 12, "S": 0.6, "safe": 0.7, "GF": 0.1, "struck": 4}  # fmt: skip
    other = {**cell, "by_turn": cell["by_turn"][:2], "first_leak_turn": None}
    t = by_turn_table({"stale_memory": cell, "clean": other})
    assert list(t.columns) == ["scenario", "t0 (n=5)", "t1 (n=5)", "t2 (n=2)", "conversation S",
                               "pass^2"]  # fmt: skip
    assert t.iloc[1].tolist() == ["clean", "1.000", "0.400", "-", "0.500", "0.250"]
    c = cells_table({"m": {"stale_memory": cell, "clean": other}})
    assert c.iloc[0]["leak: turns [95% CI]"] == "0.300 [0.067, 0.652] (3/10)"
    assert c["first leak"].tolist() == ["t1", "-"] and c.iloc[0]["S"] == "0.600"
