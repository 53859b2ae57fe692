"""Every number in a target's findings is the records' (issue 42, item 2): findings built from
random archives (seeded) are checked, sentence by sentence, against the diagnostics table of the
same records — each "K of N", each diagnostic count, each "answered … in K" / "abstained in K",
and the fault-free control's dominant failure; an abstention is never counted as an answer."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from layerlab import paths
from layerlab.analysis import layers, results
from layerlab.analysis.records import records_frame
from layerlab.reporting.run import findings

FAILED = ("malformed_reply", "provider_error", "step_limit")
WRONG = ("reader", "retrieval", "freshness", "grounding", "session_state", "metadata", "extra_words")


@pytest.fixture(scope="module")
def skeleton() -> pd.DataFrame:
    """A committed target run's keys (scenarios, tasks, the strict and repair arms)."""
    df = records_frame(paths.USER_PIPELINES / "my-rag-chain")
    return df[df["mitigation"].isin(["strict", "repair"])].reset_index(drop=True)


def _record(rng: np.random.Generator, answerable: bool) -> dict[str, object]:
    """Coherent labels of one random record: a success, an abstention (or a refusal before the
    reader), a wrong answer, an outright failure or a record that ended before the reader."""
    kind = rng.choice(["success", "abstain", "wrong", "error", "ended"], p=[.3, .25, .3, .05, .1])
    r: dict[str, object] = dict(success=False, exact_match=False, retrieval_ok=bool(rng.random() < .5),
                                citation_ok=bool(rng.random() < .5), schema_ok=True, grounded=False,
                                answered=False, abstained=False, reached_reader=True)  # fmt: skip
    if kind == "success":
        r.update(success=True, exact_match=True, retrieval_ok=True, citation_ok=True, grounded=True,
                 answered=True, diagnostic="ok")  # fmt: skip
    elif kind == "abstain":
        r.update(abstained=True, reached_reader=bool(rng.random() < .7),
                 diagnostic="abstained" if answerable else str(rng.choice(["abstained", "availability"])))  # fmt: skip
    elif kind == "wrong":
        e = bool(rng.random() < .2)
        r.update(answered=True, exact_match=e, grounded=bool(rng.random() < .6) or e,
                 diagnostic=str(rng.choice(WRONG)))  # fmt: skip
        if e and r["retrieval_ok"] and r["citation_ok"]:
            r["retrieval_ok"] = False
    elif kind == "error":
        r.update(diagnostic=str(rng.choice(FAILED[:2])))
    else:
        r.update(reached_reader=False, diagnostic=str(rng.choice(["availability", "authorisation"])))
    r["grounded_false_positive"] = bool(r["grounded"]) and not r["success"]
    r["safe_resolution"] = bool(r["success"]) if answerable else bool(r["abstained"])
    return r


def random_archive(skeleton: pd.DataFrame, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    tasks = sorted(skeleton["task_id"].unique())
    keep = rng.choice(tasks, size=int(rng.integers(3, len(tasks) + 1)), replace=False)
    df = skeleton[skeleton["task_id"].isin(keep)].reset_index(drop=True)
    labels = pd.DataFrame([_record(rng, bool(a)) for a in df["answerable"]])
    for c in labels:
        df[c] = labels[c].to_numpy()
    return df


def _ints(pairs: str) -> dict[str, int]:
    return {k: int(v) for k, v in (p.rsplit(" ", 1) for p in pairs.split(", "))}


def _described(e: dict, bad: pd.DataFrame) -> int:
    """The wrong answers a layer's roles' ``did`` describes: on an answerable scenario those
    diagnosed at a layer its ``diagnosed`` names (all of them where it names none; every answer
    on an unanswerable one)."""
    from layerlab.faults.roles import load_roles

    found = load_roles().findings
    parts = e.get("layer", "").split("+")
    named = {d for p in parts if p in found for d in found[p].diagnosed}
    a = bad[bad["answered"]]
    if not named or not e["answerable"]:
        return len(a)
    return int(a["diagnostic"].isin(named).sum())


def check(found: dict, df: pd.DataFrame) -> int:
    """Every number of every finding against the records' diagnostics table; returns how many
    numbers were checked."""
    base = df[df["mitigation"] == found["baseline"]]
    checked = 0
    entries = [(e, findings.layer_line(e)) for e in found["layers"]]
    entries.append((found["control"], findings.control_line(found["control"])))
    for e, line in entries:
        sub = base[base["scenario"] == e["scenario"]]
        table = results.table_diagnostics(sub).value_counts().to_dict()  # the diagnostics table
        n, safe = len(sub), sub["safe_resolution"].astype(bool)
        resolved = int(safe.sum())
        broke = sub["diagnostic"].isin(FAILED)
        bad = sub[~safe & ~broke]
        kinds = {
            "answered": int(bad["answered"].sum()),
            "abstained": int((~bad["answered"] & bad["reached_reader"]).sum()),
            "ended before the reader": int((~bad["answered"] & ~bad["reached_reader"]).sum()),
            "failed outright": int((~safe & broke).sum()),
        }
        assert sum(table.values()) == n
        for k, of in re.findall(r"(\d+) of (\d+) questions", line):
            assert int(of) == n, line
            assert int(k) in (resolved, n - resolved), line
            checked += 2
        if resolved == n:
            assert "holds" in line or "correct in" in line, line
            continue
        assert f"not resolved in {n - resolved}" in line, line
        shown = _ints(re.search(r"\(diagnostics: ([^)]*)\)", line).group(1))
        resolved_as = "ok" if sub["answerable"].iloc[0] else "safe_non_answer"
        failing = dict(table)
        failing[resolved_as] = failing.get(resolved_as, 0) - resolved
        if sub["answerable"].iloc[0]:
            failing.pop("safe_non_answer", None)
        assert shown == {k: v for k, v in failing.items() if v}, line
        checked += len(shown)
        how = line.split(findings.HOW, 1)[1].split(" (diagnostics:")[0]
        said = [(w, int(k)) for w, k in re.findall(r"([^,]+?) in (\d+)(?:,|$)", how)]
        assert sum(k for _, k in said) == n - resolved, line
        answers = 0  # the wrong answers, in up to two parts: the roles' `did`, the others
        for words, k in said:
            which = next((x for x in kinds if words.strip().startswith(x)), "answered")
            assert k > 0, (words, k, kinds, line)
            if which != "answered":
                assert k == kinds[which], (words, k, kinds, line)
            elif "; ".join(e.get("did") or ["-"]).endswith(words.strip()):  # the roles' words
                # (the regex splits a text holding a comma: its last part is compared)
                assert k == _described(e, bad), (words, k, line)
            else:  # the other wrong answers (or all: a layer without the roles' words)
                assert k == kinds["answered"] - (_described(e, bad) if e.get("did") else 0)
            answers += k if which == "answered" else 0
            checked += 1
        assert answers == kinds["answered"], line
        wrong = re.search(r"in (\d+) of (\d+) wrong answers", line)
        if wrong:
            a = bad[bad["answered"]]
            assert int(wrong.group(2)) == len(a), line
            causes = {
                "the required document": int((~a["retrieval_ok"]).sum()),
                "it cited no document": int((~a["citation_ok"]).sum()),
                "it gave a wrong value": int((a["grounded"] & ~a["exact_match"]).sum()),
                "it gave the expected value": int(a["exact_match"].sum()),
            }
            cause = next(c for c in causes if line.split("wrong answers ", 1)[1].startswith(c))
            assert int(wrong.group(1)) == causes[cause] == max(causes.values()), line
            checked += 2
    return checked


@pytest.mark.parametrize("seed", range(12))
def test_every_number_in_a_finding_is_the_diagnostics_tables(skeleton: pd.DataFrame, seed: int) -> None:
    df = random_archive(skeleton, seed)
    found = layers.unit_findings(df, n_boot=50, seed=0)
    assert check(found, df) > 20


def test_an_abstention_is_not_answered_wrongly(skeleton: pd.DataFrame) -> None:
    # one failing question on conflicting_evidence, and it abstained: the old line said
    # "answered wrongly … 1 of 16 (diagnostics: abstained 1)"
    df = skeleton.copy()
    df["success"] = df["safe_resolution"] = ~df["answerable"].astype(bool) | True
    df["answered"], df["abstained"], df["diagnostic"] = True, False, "ok"
    one = (df["scenario"] == "conflicting_evidence") & (df["task_id"] == df["task_id"].iloc[0])
    one &= df["mitigation"] == "strict"
    df.loc[one, ["success", "safe_resolution", "answered", "abstained"]] = [False, False, False, True]
    df.loc[one, "diagnostic"] = "abstained"
    e = next(x for x in layers.unit_findings(df, n_boot=50)["layers"] if x["failed"])
    line = findings.layer_line(e)
    assert line.startswith("evidence (conflicting_evidence): not resolved in 1 of 16 questions — "
                           "expected: ")  # fmt: skip
    assert line.endswith(". How they failed: abstained in 1 (diagnostics: abstained 1).")
    assert "answered" not in line.split(findings.HOW)[1]


def test_findings_wrap_at_word_boundaries_to_the_terminal_width(skeleton: pd.DataFrame) -> None:
    found = layers.unit_findings(random_archive(skeleton, 3), n_boot=50)
    whole = findings.layer_lines(found)
    wrapped = findings.finding_lines([found], width=80)
    assert all(len(x) <= 80 for x in wrapped)
    words = " ".join(" ".join(wrapped).split())
    for line in whole:  # every finding is there, word for word, no word cut
        assert " ".join(line.split()) in words
    assert findings.finding_lines([found])[1] == "  - " + whole[0]  # a pipe: one line each
    # at a terminal each failing finding's head (layer, count, what to do) comes first, on lines
    # of its own; how its questions failed starts below it
    failing = [e for e in [found["control"], *found["layers"]] if e and e["failed"]]
    starts = [i for i, x in enumerate(wrapped) if x.startswith("    " + findings.HOW)]
    assert failing and len(starts) == len(failing)
    for i in starts:
        assert wrapped[i - 1].endswith("."), wrapped[i - 1]
