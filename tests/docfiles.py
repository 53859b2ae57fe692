"""The user-facing documentation as tests read it: README.md and every ``docs/*.md`` page, their
sections and their fenced code blocks with the marker on the line before each fence.

A block in one of :data:`RUN_LANGS` is executed by ``tests/test_docs.py`` unless the line right
before its fence is ``<!-- not run: REASON -->`` (needs a provider, a model, a long run) or
``<!-- run by: tests/test_x.py -->`` (another test executes it; that file names the page). A
block after ``<!-- output of the block above ... -->`` is checked against what the block before
it printed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
RUN_LANGS = ("bash", "sh", "shell", "console", "python")
MARKER = re.compile(r"^<!--\s*(not run|run by)\s*:\s*(.*?)\s*-->$")
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)


def pages() -> list[Path]:
    """README.md, then every docs page (other helpers' pages join by being there)."""
    return [README, *sorted(DOCS.glob("*.md"))]


def rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else str(page)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # the fence's line, 1-based
    lang: str
    body: str
    marker: str | None  # the comment line before the fence, if it is one
    kind: str | None  # "not run" / "run by" when the marker parses
    reason: str

    @property
    def where(self) -> str:
        return f"{rel(self.page)}:{self.line}"

    @property
    def runnable(self) -> bool:
        return self.lang in RUN_LANGS


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        marker = before if before.startswith("<!--") else None
        mk = MARKER.match(before) if marker else None
        out.append(Block(page, line, m.group(1), m.group(2), marker,
                         mk.group(1) if mk else None, mk.group(2) if mk else ""))  # fmt: skip
    return out


def text_of(*names: str) -> str:
    """The pages' text, concatenated (a section may live in any of them)."""
    return "\n".join((ROOT / n).read_text(encoding="utf-8") for n in names)


def section(title: str) -> str:
    """The ``## title`` section (or the page whose ``# title`` it is), from whichever page holds
    it (README or docs/), up to the next ``##`` heading."""
    for page in pages():
        text = page.read_text(encoding="utf-8")
        m = re.search(rf"^##? {re.escape(title)}\n", text, re.M)
        if m:
            end = text.find("\n## ", m.start() + 1)
            return text[m.start() : end if end != -1 else None]
    raise AssertionError(f"no page of README.md or docs/ has a section '## {title}'")
