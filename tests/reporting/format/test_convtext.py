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


def test_the_findings_words_agree_with_the_records_counts_per_arm() -> None:
    """A run's findings, read back as numbers, are the counts of its turn records: the break's
    turn, failed turns, their commonest kind and diagnosis, and roles.yaml's struck answers; a
    mitigated arm's cells are reported apart, in words that say its guard was on."""
    import re
    from collections import Counter

    from layerlab.analysis.conversations import summarise, system_label
    from layerlab.corpus import conversations as cv
    from layerlab.corpus.build import load
    from layerlab.faults.roles import load_roles
    from layerlab.faults.scenario import conversation_scenarios
    from layerlab.harness import conversation as hc
    from layerlab.mitigations.session import session_arms

    convs, key = cv.build_from_specs()
    sc = conversation_scenarios()
    recs = hc.run([hc.reference("layerlab/extractive")], convs[:32],
                  [sc["truncated_history"], sc["stale_tool_cache"], sc["swapped_session"]],
                  hc.Setting(load(), key),
                  arms=session_arms(["none", "history_summarisation"]))  # fmt: skip
    summary = summarise(recs)
    assert list(summary) == ["layerlab/extractive", "layerlab/extractive [history_summarisation]"]
    roles = load_roles().conversation_findings
    pat = re.compile(r"breaks at turn (\d+) \(S [\d.]+ at turn 0, [\d.]+ there; (\d+) of its "
                     r"(\d+) failed turns are (\w+) turns, (\d+) diagnosed (\w+)\)")  # fmt: skip
    checked = 0
    for label, cells in summary.items():
        for scen, cell in cells.items():
            text = finding(label, scen, cell)
            mine = [r for r in recs if system_label(r.model, r.mitigation) == label
                    and r.scenario == scen]  # fmt: skip
            m = pat.search(text)
            assert m, text
            turn, k_kind, failed, kind, k_diag, diag = m.groups()
            at = [r for r in mine if r.turn == int(turn) and not r.success]
            assert int(failed) == len(at)
            assert Counter(r.kind for r in at)[kind] == int(k_kind) == max(
                Counter(r.kind for r in at).values())
            assert Counter(r.diagnostic for r in at)[diag] == int(k_diag) == max(
                Counter(r.diagnostic for r in at).values())
            by_turn = {t: sum(r.success for r in mine if r.turn == t)
                       / sum(r.turn == t for r in mine) for t in {r.turn for r in mine}}  # fmt: skip
            assert by_turn[int(turn)] == min(by_turn.values())
            f = roles[sc[scen].spec.layer]
            words = re.search(rf"{re.escape(f.did)} in (\d+) of (\d+) struck turns", text)
            bad = [r for r in mine if r.struck and r.answered and not r.safe_resolution
                   and (not f.diagnosed or r.diagnostic in f.diagnosed)]  # fmt: skip
            if bad:
                assert words and int(words.group(1)) == len(bad), text
                assert int(words.group(2)) == sum(r.struck for r in mine)
                guarded = label.endswith(f"[{f.guard}]")
                assert text.endswith(f"with its guard {f.guard} on") == guarded, text
                assert (f"guard: {f.guard})" in text) == (not guarded), text
                checked += 1
            else:
                assert words is None, text
    assert checked >= 4  # truncated_history on both arms, stale_tool_cache, swapped_session
