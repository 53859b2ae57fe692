"""Output folders are never destroyed (issue 34, item 1): `corpus import` and `corpus build`
replace only a corpus folder, refuse anything else by name with nothing changed, and write
through a sibling temporary that is removed on every exit path and swept by the next run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from layerlab import paths
from layerlab._io import sweep_leftovers
from layerlab.cli import main
from layerlab.corpus import build as corpus_mod

FIXTURE = Path(__file__).parents[1] / "fixtures" / "user_corpus.jsonl"
ROOT = Path(__file__).resolve().parents[2]


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for a folder)."""
    return {
        str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes())
        for p in sorted(root.rglob("*"))
    }


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_the_issue_repros_refuse_and_change_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r1 = tmp_path / "r1"
    run = ["run", "live", "-m", "layerlab/extractive", "--tasks", "finance-01-q1", "--scenario",
           "clean", "--no-progress", "--out", str(r1), "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    assert main(run) == 0
    webapp = tmp_path / "webapp"
    (webapp / "src").mkdir(parents=True)
    (webapp / "manifest.json").write_text("{}\n")
    (webapp / "src" / "app.js").write_text("x\n")
    capsys.readouterr()
    # the run folder and the web app, not the reply cache (its database settles on its own)
    before = {f: _snapshot(f) for f in (r1, webapp)}
    for args, folder in [
        (["corpus", "import", str(FIXTURE), "--out", str(r1)], r1),
        (["corpus", "build", "--out", str(r1)], r1),
        (["corpus", "import", str(FIXTURE), "--out", str(webapp)], webapp),
        (["corpus", "build", "--out", str(webapp)], webapp),
    ]:
        assert main(args) == 1, args
        line = _one_error(capsys)
        assert line.startswith(f"error: {folder}: not empty and not a corpus folder"), line
        assert line.endswith("; nothing changed"), line
    assert {f: _snapshot(f) for f in (r1, webapp)} == before  # records, results, webapp/src


def test_new_empty_and_corpus_folders_are_written(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for out in (tmp_path / "new" / "deep", empty):
        assert main(["corpus", "import", str(FIXTURE), "--out", str(out)]) == 0
        assert corpus_mod.load(out).name == "bayside_water"
    # a corpus folder is replaced: by another corpus, byte for byte what a fresh build writes
    assert main(["corpus", "build", "--out", str(empty)]) == 0
    for name in (*corpus_mod.FILES, "manifest.json"):
        assert (empty / name).read_bytes() == (paths.CORPUS_DIR / name).read_bytes(), name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "new"]  # no temporary left


@pytest.mark.parametrize("when", ["while writing", "while renaming"])
def test_an_interrupted_write_leaves_the_folder_as_it_was(
    when: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "c"
    assert main(["corpus", "import", str(FIXTURE), "--out", str(out)]) == 0
    before = _snapshot(tmp_path)
    if when == "while writing":
        real = corpus_mod.write

        def write(*a: object) -> object:
            real(*a)  # type: ignore[arg-type]
            raise KeyboardInterrupt  # Ctrl-C (and SIGTERM, delivered as Ctrl-C) mid-write

        monkeypatch.setattr(corpus_mod, "write", write)
    else:  # the old folder is moved aside, then renaming the new one into place fails
        rename = Path.rename

        def fail(self: Path, target: object) -> Path:
            if Path(str(target)) == out and ".old." not in str(self):
                raise OSError(5, "Input/output error")
            return rename(self, target)  # type: ignore[arg-type]

        monkeypatch.setattr(Path, "rename", fail)
    rc = main(["corpus", "build", "--out", str(out)])
    assert rc != 0
    assert _snapshot(tmp_path) == before  # the previous corpus, and no temporary beside it


def _leftover(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    p = tmp_path / name
    for rel, text in files.items():
        (p / rel).parent.mkdir(parents=True, exist_ok=True)
        (p / rel).write_text(text)
    return p


def test_a_killed_import_s_temporary_is_swept_by_the_next(tmp_path: Path) -> None:
    """SIGKILL while the corpus is being written leaves `.c.xxxxxxxx/` (a copy with the answer
    key); the next import removes it."""
    out = tmp_path / "c"
    code = (
        "import sys, time; sys.path.insert(0, sys.argv[1]); from layerlab.corpus import build; "
        "real = build.write\n"
        "def slow(*a):\n    real(*a); time.sleep(60)\n"
        "build.write = slow\nfrom layerlab.cli import main\nsys.exit(main(sys.argv[2:]))"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            code,
            str(ROOT),
            "corpus",
            "import",
            str(FIXTURE),
            "--out",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not any(tmp_path.glob(".c.*/manifest.json")) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    (temp,) = tmp_path.glob(".c.*")
    assert (temp / "answer_key.jsonl").exists() and not out.exists()
    assert main(["corpus", "import", str(FIXTURE), "--out", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def test_a_kill_between_the_renames_puts_the_old_folder_back(tmp_path: Path) -> None:
    out = tmp_path / "c"
    assert main(["corpus", "import", str(FIXTURE), "--out", str(out)]) == 0
    kept = _snapshot(out)
    old = tmp_path / ".c.old.ab12cd34"
    old.mkdir()
    out.rename(old / "x")  # moved aside, the new one not yet renamed into place
    fresh = _leftover(tmp_path, ".c.zz99yy88", {"documents.jsonl": "{}\n"})
    assert sorted(sweep_leftovers(out)) == sorted([old, fresh])
    assert _snapshot(out) == kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def test_the_sweep_removes_only_its_own_temporaries(tmp_path: Path) -> None:
    out = tmp_path / "c"
    mine = [
        _leftover(tmp_path, ".c.nested01", {"sub/file.txt": "x"}),  # a subfolder: not ours
        _leftover(tmp_path, ".c.old.ab12cd34", {"y": "x"}),  # not the moved-aside `x`
        _leftover(tmp_path, ".c.toolongname", {"a.txt": "x"}),  # not 8 characters
        _leftover(tmp_path, ".d.ab12cd34", {"a.txt": "x"}),  # another folder's
    ]
    before = _snapshot(tmp_path)
    assert sweep_leftovers(out) == []
    assert main(["corpus", "import", str(FIXTURE), "--out", str(out)]) == 0
    after = _snapshot(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("c")} == before
    assert all(p.exists() for p in mine)
