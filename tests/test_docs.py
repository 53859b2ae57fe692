"""Every command and snippet of README.md and docs/*.md runs as written, or says why not.

Each fenced ``bash``/``sh``/``shell``/``console``/``python`` block is executed here, offline, in
a scratch folder holding a copy of ``data/`` (a page's blocks run in order in one folder, as a
reader would type them), unless the line before its fence is ``<!-- not run: REASON -->`` or
``<!-- run by: tests/test_x.py -->`` (see ``tests/docfiles.py``). A python block whose first line
is a comment naming a ``.py`` file is that file, written where the reader would save it.
Beside that: every ``layerlab`` command a block names (run or not) exists with every flag it
uses; every relative link resolves; and the README's headline numbers, notebook table and table
numbering are what the generated files and the table registry say."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import docfiles
import pytest
import typer
from docfiles import ROOT, Block

# pages other helpers write; linked from the README before they land (checked once they exist)
PENDING = {"docs/retrievers.md", "docs/mcp.md", "docs/dense.md", "docs/llamaindex.md"}
FILE_BLOCK = re.compile(r"^# ([\w./-]+\.py)\b")
OUTPUT = re.compile(r"^<!-- output of the block above")  # then: the lines it printed, (...) elided


def _all_blocks() -> list[Block]:
    return [b for p in docfiles.pages() for b in docfiles.blocks(p)]


def _to_run(page: Path) -> list[Block]:
    return [b for b in docfiles.blocks(page) if b.runnable and b.kind is None]


def _marker_problems(page: Path) -> list[str]:
    out = []
    for b in docfiles.blocks(page):
        if b.marker is not None and b.kind is None and b.runnable:
            out.append(f"{b.where}: marker {b.marker!r}: expected '<!-- not run: REASON -->' "
                       "or '<!-- run by: tests/test_x.py -->'")  # fmt: skip
        if b.kind == "not run" and len(b.reason.split()) < 2:
            out.append(f"{b.where}: 'not run' needs a reason")
        if b.kind == "run by":
            test = ROOT / b.reason
            if not test.is_file():
                out.append(f"{b.where}: run by {b.reason!r}, which does not exist")
            elif docfiles.rel(page) not in test.read_text(encoding="utf-8"):
                out.append(f"{b.where}: {b.reason} does not read {docfiles.rel(page)}")
    return out


@pytest.mark.parametrize("page", docfiles.pages(), ids=docfiles.rel)
def test_every_block_is_run_or_says_why_not(page: Path) -> None:
    assert not _marker_problems(page), "\n".join(_marker_problems(page))


def test_a_bad_marker_and_a_failing_block_are_caught(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- not run -->\n```bash\ntrue\n```\n\n<!-- not run: x -->\n```sh\ntrue\n"
                    "```\n\n<!-- run by: tests/nope.py -->\n```python\npass\n```\n\n```bash\n"
                    "false\n```\n")  # fmt: skip
    problems = _marker_problems(page)
    assert len(problems) == 3, problems
    with pytest.raises(AssertionError, match="exit 1"):
        _run_block(docfiles.blocks(page)[-1], tmp_path, _env(tmp_path))


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAYERLAB_", "OPENAI_"))}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(ROOT),  # this checkout's layerlab, also behind the `layerlab` command
        HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"),  # reply caches stay in the scratch
        LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_OFFLINE_MODE="true",
        LITELLM_MODE="PRODUCTION", PYTHONHASHSEED="0", MPLBACKEND="Agg", COLUMNS="100",
    )  # fmt: skip
    return env


def _git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT,
                          capture_output=True, text=True, check=False).stdout  # fmt: skip


def _run_block(b: Block, cwd: Path, env: dict[str, str]) -> str:
    """Run one block in ``cwd``; its stdout."""
    if b.lang == "python":
        named = FILE_BLOCK.match(b.body)
        if named:  # a file the reader saves; a later block runs it
            (cwd / named.group(1)).write_text(b.body, encoding="utf-8")
            return ""
        cmd = [sys.executable, "-c", b.body]
    elif b.lang == "console":
        lines = [ln[2:] for ln in b.body.splitlines() if ln.startswith("$ ")]
        cmd = ["bash", "-e", "-o", "pipefail", "-c", "\n".join(lines)]
    else:
        cmd = ["bash", "-e", "-o", "pipefail", "-c", b.body]
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=180,
                       check=False)  # fmt: skip
    assert p.returncode == 0, (
        f"{b.where}: exit {p.returncode}\n--- stdout\n{p.stdout[-3000:]}\n--- stderr\n"
        f"{p.stderr[-3000:]}"
    )
    return p.stdout


def _check_output(b: Block, out: str) -> None:
    """A block shown as the output of the one before: each of its lines, with ``(...)``
    standing for elided text, is a line of what that block printed."""
    printed = [" ".join(ln.split()) for ln in out.splitlines()]
    for line in b.body.splitlines():
        parts = [" ".join(x.split()) for x in line.split("(...)")]
        hit = [ln for ln in printed if ln.startswith(parts[0]) and ln.endswith(parts[-1])
               and _in_order(ln, parts)]  # fmt: skip
        assert hit, f"{b.where}: expected output line not printed by the block above: {line!r}"


def _in_order(line: str, parts: list[str]) -> bool:
    pos = 0
    for x in parts:
        at = line.find(x, pos)
        if at == -1:
            return False
        pos = at + len(x)
    return True


@pytest.mark.parametrize("page", [p for p in docfiles.pages() if _to_run(p)], ids=docfiles.rel)
def test_a_page_runs_as_written(page: Path, tmp_path: Path) -> None:
    before = _git_status()
    cwd = tmp_path / "work"
    cwd.mkdir()
    shutil.copytree(ROOT / "data", cwd / "data")  # read as the reader's checkout has it
    env = _env(tmp_path / "home")
    out = ""
    for b in docfiles.blocks(page):
        if b.runnable and b.kind is None:
            out = _run_block(b, cwd, env)
        elif b.marker and OUTPUT.match(b.marker):
            _check_output(b, out)
    assert _git_status() == before, f"running {docfiles.rel(page)} changed the repository"


# --- commands and flags the blocks name -------------------------------------------------------


def _invocations(body: str) -> list[list[str]]:
    """Every ``layerlab ...`` command of a shell block: continuations joined, comments cut, one
    per command of a ``&&``/``||``/``;``/``|`` chain."""
    out = []
    for line in body.replace("\\\n", " ").splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line)
        for part in re.split(r"&&|\|\||;|\|", line):
            words = part.split()
            if words[:1] == ["layerlab"]:
                out.append(words[1:])
            elif words[:3] == ["python", "-m", "layerlab"]:
                out.append(words[3:])
    return out


def _shell_invocations() -> list[tuple[str, list[str]]]:
    return [(b.where, w) for b in _all_blocks()
            if b.lang in ("bash", "sh", "shell", "console") for w in _invocations(b.body)]  # fmt: skip


def test_the_blocks_name_commands() -> None:
    assert len(_shell_invocations()) >= 15


@pytest.mark.parametrize("where,words", _shell_invocations(),
                         ids=[f"{w}:{' '.join(a[:2])}" for w, a in _shell_invocations()])  # fmt: skip
def test_every_command_and_flag_a_block_names_exists(where: str, words: list[str]) -> None:
    from layerlab.cli import app

    cmd = typer.main.get_command(app)
    path = []
    for w in words:
        sub = getattr(cmd, "commands", {}).get(w)
        if sub is None:
            break
        cmd, path = sub, [*path, w]
    assert not hasattr(cmd, "commands"), f"{where}: `layerlab {' '.join(words)}`: no such command"
    known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
    for w in words[len(path) :]:
        flag = w.split("=", 1)[0]
        if flag.startswith("-") and flag not in ("-", "--") and not re.fullmatch(r"-\d.*", flag):
            assert flag in known, f"{where}: `layerlab {' '.join(path)}` has no flag {flag}"


def test_a_misspelt_flag_would_be_caught() -> None:
    with pytest.raises(AssertionError, match="no flag --no-such-flag"):
        test_every_command_and_flag_a_block_names_exists("x", ["gate", "RUN", "--no-such-flag"])
    with pytest.raises(AssertionError, match="no such command"):
        test_every_command_and_flag_a_block_names_exists("x", ["cache"])


# --- links ------------------------------------------------------------------------------------


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return s.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("page", docfiles.pages(), ids=docfiles.rel)
def test_every_link_resolves(page: Path) -> None:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # an absolute URL
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        name = dest.relative_to(ROOT).as_posix() if dest.is_relative_to(ROOT) else str(dest)
        if name in PENDING and not dest.exists():
            continue
        assert dest.exists(), f"{docfiles.rel(page)}: link to {target!r}: no such file"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{docfiles.rel(page)}: link {target!r}: no heading"


# --- the README's generated facts -------------------------------------------------------------


def _macros() -> dict[str, str]:
    text = (ROOT / "paper" / "generated" / "values.tex").read_text(encoding="utf-8")
    out = {}
    for name, value in re.findall(r"^\\newcommand\{\\(\w+)\}\{(.*)\}$", text, re.M):
        value = value.replace("\\ensuremath{-}", "−").replace("{,}", ",").replace("\\%", "%")
        out[name] = value.replace("\\_", "_")
    return out


NUMBER = re.compile(r"(?<![\w.\-])[+−-]?\d[\d,]*(?:\.\d+)?%?(?![\w.]*\w)")


def test_the_readme_headline_numbers_are_the_generated_values() -> None:
    text = docfiles.README.read_text(encoding="utf-8")
    m = re.search(r"<!-- generated values \(paper/generated/values\.tex[^)]*\): ([\w ]+) -->\n"
                  r"(.*?)\n\n", text, re.S)  # fmt: skip
    assert m, "README: no '<!-- generated values (paper/generated/values.tex...): NAMES -->'"
    names, para = m.group(1).split(), " ".join(m.group(2).split())
    # a table named as `Table N (`id`)` is its source, not a number it states (the registry's
    # number for the id is checked below, with every table the README names)
    para = re.sub(r"Table A?\d+ \(`\w+`\)", "Table", para)
    macros = _macros()
    values = [macros[n] for n in names]
    pos = 0
    for n, v in zip(names, values, strict=True):
        at = para.find(v, pos)
        assert at != -1, f"README's headline lacks \\{n} = {v!r} (in order) from values.tex"
        pos = at + len(v)
    numbers = [x for x in NUMBER.findall(para)]
    generated = [x for v in values for x in NUMBER.findall(v)]
    assert numbers == generated, f"README's headline numbers {numbers} != values.tex {generated}"


def test_the_readme_count_of_grounded_stale_answers_is_the_archives() -> None:
    import pandas as pd

    recs = pd.read_parquet(ROOT / "data/archives/local_models/qwen2.5-coder-1.5b/records.parquet")
    n = int(recs[recs.scenario == "stale_index"].grounded_false_positive.sum())
    assert f"The real model's {n} stale-index records that look grounded" in " ".join(
        docfiles.README.read_text(encoding="utf-8").split()
    )


def test_the_readme_lists_every_notebook_and_every_table_by_its_number() -> None:
    from layerlab.reporting.paper.tables.registry import TABLES

    readme = docfiles.README.read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\d\d_\w+)` \|(.*)$", readme, re.M)
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert sorted(nb for nb, _ in rows) == notebooks, "README's notebook table != notebooks/"
    every = re.findall(r"Table (A?\d+) \(`(\w+)`\)", " ".join(readme.split()))
    named = {tid: num for num, tid in every}
    tables = TABLES.values() if isinstance(TABLES, dict) else TABLES
    number = {t.id: t.number for t in tables}
    wrong = [f"Table {num} (`{tid}`)" for num, tid in every if number.get(tid, num) != num]
    assert not wrong, f"README names a table by another's number: {wrong}"
    for t in tables:
        assert named.get(t.id) == t.number, f"README: Table {t.number} (`{t.id}`) expected"
        nb = [nb for nb, row in rows if f"(`{t.id}`)" in row]
        src = (ROOT / "notebooks" / f"{nb[0]}.ipynb").read_text(encoding="utf-8") if nb else ""
        assert f'publish(\\"{t.id}\\"' in src, f"README: `{t.id}` is not published by {nb}"
    body = [t.number for t in tables if not t.number.startswith("A")]
    appendix = [t.number for t in tables if t.number.startswith("A")]
    flat = " ".join(readme.split())
    assert f"**Tables 11–{body[-1]} go beyond the paper**" in flat and len(body) > 10
    assert f"A1–{appendix[-1]} are supplementary" in flat


def test_the_readme_count_of_reproduced_artifacts_is_what_reproduce_writes() -> None:
    from layerlab import paths

    n = sum(1 for d in paths.ARTIFACT_DIRS for p in (ROOT / d).glob("*") if p.is_file())
    n += sum((ROOT / f).exists() for f in paths.ARTIFACT_FILES)
    assert f"`{n} artifacts: 0 new, 0 changed, {n} unchanged`" in docfiles.README.read_text(
        encoding="utf-8"
    ), f"README: reproduce writes {n} artifacts"


def test_the_tex_install_line_is_the_one_make_paper_suggests() -> None:
    from layerlab.reporting.paper import build

    assert build.INSTALL_HINT in (ROOT / "docs" / "paper.md").read_text(encoding="utf-8")
