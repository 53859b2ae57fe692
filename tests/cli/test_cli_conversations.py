"""`layerlab conversations build|show`: a chosen folder, the same bytes twice, never the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerlab.cli import main
from layerlab.corpus import conversations as cv
from layerlab.corpus.text import states_value


def _bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_build_writes_the_same_bytes_twice_and_refuses_a_foreign_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["conversations", "build", "--out", str(tmp_path / "a")]) == 0
    assert "80 conversations of 3-6 turns" in capsys.readouterr().out
    assert main(["conversations", "build", "--out", str(tmp_path / "b")]) == 0
    assert _bytes(tmp_path / "a") == _bytes(tmp_path / "b")
    assert main(["conversations", "build", "--out", str(tmp_path / "a")]) == 0  # replaced
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    assert main(["conversations", "build", "--out", str(tmp_path / "mine")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not a conversations folder" in err and "nothing changed" in err
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


def test_show_plays_the_script_and_never_prints_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    convs, key = cv.build_from_specs()
    c = next(
        x for x in convs if any(t.branches for t in x.turns) and any(t.publishes for t in x.turns)
    )
    cats = ["clarification"] * (len(c.turns) - 1)
    assert main(["conversations", "build", "--out", str(tmp_path / "c")]) == 0
    capsys.readouterr()
    assert main(["conversations", "show", c.conversation_id, "--from", str(tmp_path / "c"),
                 "--replies", ",".join(cats)]) == 0  # fmt: skip
    out = capsys.readouterr().out
    from layerlab.corpus.script import script

    for text in script(c, cats):  # type: ignore[arg-type]
        assert text in out
    assert "published before turn" in out
    shown = "\n".join(ln for ln in out.splitlines() if ln.startswith("turn"))
    answers = {a for t in c.turns for a in key[(c.conversation_id, t.index)].expected_answers}
    assert not [a for a in answers if states_value(shown, a)]
    assert main(["conversations", "show", "nope-01-c1"]) == 2
    assert main(["conversations", "show", c.conversation_id, "--replies", "maybe"]) == 2
    assert main(["conversations", "show", c.conversation_id, "--replies", "answered"]) == 2


def test_bad_inputs_are_one_line_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from layerlab import paths

    bad = tmp_path / "bad.yaml"
    bad.write_text(paths.CONVERSATION_SPEC.read_text().replace("{other}? Give", "{nope}? Give"))
    assert main(["conversations", "build", "--out", str(tmp_path / "o"), "--spec", str(bad)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "bad.yaml:" in err and "nope" in err
    assert not (tmp_path / "o").exists()
    assert main(["conversations", "show", "x", "--from", str(tmp_path / "none")]) == 1
    assert "manifest.json" in capsys.readouterr().err


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_run_conversations_prints_s_by_turn_and_the_leak_and_writes_the_same_bytes_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    args = ["run", "conversations", "-m", "layerlab/extractive", "--target",
            "conversation_targets:naive_memory", "--scenario", "conversation_clean",
            "--scenario", "foreign_memory", "--intensity", "0.5,1"]  # fmt: skip
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "layerlab/extractive: S by turn index" in out and "foreign_memory@0.5" in out
    assert "target/naive_memory foreign_memory: cross-session leak 0.773" in out
    assert "target/naive_memory under foreign_memory: breaks at turn 1" in out
    assert "wrote " in out and "2 system(s) x 1 arm(s) x 3 scenario(s)" in out
    assert main([*args, "--out", str(tmp_path / "b")]) == 0
    assert _bytes(tmp_path / "a") == _bytes(tmp_path / "b")
    assert sorted(_bytes(tmp_path / "a")) == ["manifest.json", "summary.json", "turns.jsonl"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0  # its own folder: replaced
    _, key = cv.build_from_specs()
    text = (tmp_path / "a" / "turns.jsonl").read_text()
    assert '"answer"' not in text and not any(f'"{a}"' in text for k in key.values()
                                              for a in k.expected_answers)  # fmt: skip


@pytest.mark.parametrize("args, code, says", [
    (["--scenario", "conversation_clean"], 2, "name a system"),
    (["-m", "layerlab/extractive", "--scenario", "stale_index"], 2, "not a conversational scenario"),
    (["-m", "layerlab/nope"], 2, "layerlab/extractive"),
    (["--target", "no_such_module_here:fn"], 2, "no_such_module_here"),
    (["--target", "llamaindex:no_such_engine_here:factory"], 2, "no_such_engine_here"),
    (["--target", "http://127.0.0.1:9/turn"], 2, "nothing answers there"),
    (["-m", "layerlab/extractive", "--turn-timeout", "0"], 2, "--turn-timeout"),
    (["-m", "layerlab/extractive", "--intensity", "2"], 2, "--intensity"),
])  # fmt: skip
def test_run_conversations_bad_inputs_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], code: int, says: str
) -> None:
    assert main(["run", "conversations", *args, "--out", str(tmp_path / "o")]) == code
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and says in err
    assert not (tmp_path / "o").exists()


def test_run_conversations_refuses_a_foreign_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    assert main(["run", "conversations", "-m", "layerlab/extractive", "--scenario",
                 "conversation_clean", "--out", str(tmp_path / "mine")]) == 1  # fmt: skip
    assert "not a conversational run folder" in capsys.readouterr().err
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


def test_run_conversations_runs_a_langchain_chat_chain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("langchain_core")
    monkeypatch.syspath_prepend(str(FIXTURES))
    assert main(["run", "conversations", "--target", "langchain:conversation_targets:chat_factory",
                 "--scenario", "truncated_history", "--out", str(tmp_path / "lc")]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "target/chat_factory: S by turn index" in out and "truncated_history" in out


def test_run_conversations_with_arms_prints_the_matrix_and_refuses_an_unknown_arm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    monkeypatch.syspath_prepend(str(FIXTURES))
    args = ["run", "conversations", "--target", "conversation_targets:naive_memory",
            "--scenario", "conversation_clean", "--scenario", "foreign_memory",
            "--mitigation", "none", "--mitigation", "session_scoped_memory"]  # fmt: skip
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "target/naive_memory [session_scoped_memory] under foreign_memory" in out
    assert "target/naive_memory [session_scoped_memory] foreign_memory: cross-session leak 0.000" in out
    assert "target/naive_memory: specificity of the session mitigations" in out
    assert "session_scoped_memory [session_state]: specific; target gain +" in out
    assert "1 system(s) x 2 arm(s) x 2 scenario(s)" in out
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["mitigations"] == ["none", "session_scoped_memory"]
    assert main([*args[:-1], "session_scope", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "did you mean 'session_scoped_memory'" in err
    assert not (tmp_path / "b").exists()
