"""The conversations section's macros: from the generated table and the committed archives; a
real model's chat chain joins as a generated sentence once its archive is committed."""

from __future__ import annotations

from dataclasses import replace

from layerlab import paths
from layerlab.analysis.conversations import load, summarise
from layerlab.analysis.convmatrix import matrices
from layerlab.mitigations.session import load_session_mitigations
from layerlab.reporting.paper import convvalues, papervalues
from layerlab.reporting.paper.tables import conversations_table

TABLES = paths.COMMITTED_ARTIFACTS / "paper" / "tables"


def test_the_reference_readers_values_are_the_tables_and_the_archives() -> None:
    v = convvalues.values(TABLES)
    assert v["ConvCount"] == "80" and v["ConvTurns"] == "353" and v["ConvDomains"] == "eight"
    runs = load([paths.REFERENCE_CONVERSATIONS])
    cell = summarise(runs["reference"])["layerlab/extractive"]["swapped_session"]
    leak = cell["leak_turns"]
    assert v["ConvExtractiveSwappedSessionLeak"] == (
        f"{leak['rate']:.3f} [{leak['interval'][0]:.3f}, {leak['interval'][1]:.3f}]")
    assert v["ConvExtractiveSwappedSessionLeakK"] == str(leak["k"]) != "0"
    assert v["ConvExtractiveSwappedSessionBreak"] == str(cell["break"]["turn"])
    assert v["ConvCautiousConversationCleanSTurnZero"] == f"{cell['by_turn'][0]['S']:.3f}"
    assert ("not committed yet" in v["ConvModel"]) == (len(paths.conversation_archives()) == 1)
    # Table A9: the verdict and target gain of each reader's arms, and each target cell
    assert v["ConvRefScored"] == "4{,}236" and v["ConvRefArmScored"] == "16{,}944"
    mx = matrices(runs["reference"], load_session_mitigations().book())["layerlab/extractive"]
    row = mx.summary.set_index("mitigation").loc["history_summarisation"]
    assert v["ConvMxExtractiveHistorySummarisationVerdict"] == row["verdict"]
    assert v["ConvMxExtractiveHistorySummarisationGain"].startswith(f"{100 * row['target gain']:+.1f} [")
    assert v["ConvMxExtractiveHistorySummarisationTruncatedHistory"] == v[
        "ConvMxExtractiveHistorySummarisationGain"]
    assert "ConvMxExtractiveHistorySummarisationStaleMemory" not in v  # not a target
    assert set(v) <= set(papervalues.values(TABLES))


def test_a_committed_model_run_becomes_a_sentence_with_its_numbers() -> None:
    ref = load([paths.REFERENCE_CONVERSATIONS])["reference"]
    mine = [replace(r, provider="local", model="local/tiny-model") for r in ref
            if r.model == "layerlab/extractive" and r.mitigation == "none" and r.scenario in ("conversation_clean", "swapped_session")]
    runs = {"reference": ref, "tiny-model": mine}
    table = conversations_table(runs).astype(str)
    summaries = {n: summarise(rs) for n, rs in runs.items()}
    text = convvalues._model_sentence(table, summaries)
    cell = summaries["tiny-model"]["local/tiny-model"]["swapped_session"]
    assert text.startswith("The real model's chat chain (local/tiny-model) over 80 conversations")
    assert "under swapped\\_session" in text and f"({cell['leak_turns']['k']} of 353)" in text
