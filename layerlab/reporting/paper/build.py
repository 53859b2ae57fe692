"""Build the manuscript ``paper/main.tex`` into a PDF, and check that it fits.

``python -m layerlab.reporting.paper.build`` (``make paper``) runs latexmk, or pdflatex twice where latexmk is
missing, with the build files in ``out/paper`` and the PDF copied to ``paper/main.pdf``. Without
TeX it prints one line saying how to install it and exits 1. The build fails on any overfull
``\\hbox``, a float taller than the page or a duplicate link destination (two tables with one
anchor, so a link lands on the wrong one), each named with the generated file it comes from, so a
table that runs into the margin is an error, not a warning nobody reads.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from layerlab import paths

MAIN = "main.tex"
PDF = "main.pdf"
# the apt-get line docs/paper.md gives (Debian/Ubuntu); texlive-latex-recommended brings booktabs
# and ragged2e, texlive-latex-base array, longtable and graphicx
INSTALL_HINT = (
    "apt-get install -y --no-install-recommends texlive-latex-base texlive-latex-recommended "
    "texlive-fonts-recommended latexmk"
)


class PaperError(RuntimeError):
    """TeX is missing or the build failed: the message is one line (or one line per problem)."""


@dataclass(frozen=True)
class Problem:
    """A layout problem in the log: what it is and the input file it comes from."""

    file: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.message}"


@dataclass(frozen=True)
class Build:
    pdf: Path
    log: Path
    problems: list[Problem] = field(default_factory=list)


def engine() -> list[str] | None:
    """The TeX command to run: latexmk (reruns until references settle) or pdflatex."""
    if shutil.which("latexmk"):
        return ["latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error"]
    if shutil.which("pdflatex"):
        return ["pdflatex", "-interaction=nonstopmode", "-halt-on-error"]
    return None


_PROBLEM = re.compile(
    r"^(Overfull \\hbox .*|.*Float too large for page.*"
    r"|pdfTeX warning \(ext4\): destination with the same identifier.*)$"
)
_FILE = re.compile(r"\(([^()\s]+\.(?:tex|sty|cls|def|cfg|clo|fd|aux|out|toc))")


def problems(log_text: str) -> list[Problem]:
    """Overfull boxes, oversized floats and duplicate destinations in a LaTeX log, each with the
    file TeX was reading.

    TeX opens a file with ``(name`` and closes it with ``)``; the innermost open file at a warning
    is where it came from (log lines are wrapped at 79 characters; parentheses inside warnings
    are balanced, so the stack stays right for the files the manuscript inputs).
    """
    stack: list[str] = []
    found: list[Problem] = []
    in_box = False  # the box's contents follow a warning, up to a blank line: not file events
    for line in log_text.splitlines():
        m = _PROBLEM.match(line)
        if m:
            here = next((f for f in reversed(stack) if f.endswith(".tex")), MAIN)
            found.append(Problem(here.removeprefix("./"), m.group(1)))
            in_box = line.startswith("Overfull")
            continue
        if in_box:
            in_box = bool(line.strip())
            continue
        i = 0
        while i < len(line):
            ch = line[i]
            if ch == "(":
                fm = _FILE.match(line, i)
                if fm:
                    stack.append(fm.group(1))
                    i = fm.end()
                    continue
                stack.append("")  # an ordinary parenthesis: balanced by its ")"
            elif ch == ")" and stack:
                stack.pop()
            i += 1
    return found


def build(
    source: Path | None = None, out_dir: Path | None = None, pdf: Path | None = None
) -> Build:
    """Compile ``source`` (default ``paper/main.tex``) with its build files in ``out_dir`` (default
    ``out/paper``) and copy the PDF to ``pdf`` (default next to the source). Raises
    :class:`PaperError` without TeX or when TeX stops with an error."""
    source = Path(source or paths.PAPER / MAIN)
    out_dir = Path(out_dir or paths.ROOT / "out" / "paper")
    pdf = Path(pdf or source.with_suffix(".pdf"))
    cmd = engine()
    if cmd is None:
        raise PaperError(
            f"make paper needs TeX (latexmk or pdflatex); on Debian/Ubuntu: {INSTALL_HINT}"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    flag = "-outdir=" if cmd[0] == "latexmk" else "-output-directory="
    runs = 1 if cmd[0] == "latexmk" else 2  # pdflatex: a second pass resolves the references
    for _ in range(runs):
        done = subprocess.run(
            [*cmd, f"{flag}{out_dir.resolve()}", source.name],
            cwd=source.parent,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            log = out_dir / source.with_suffix(".log").name
            err = _first_error(log) or (done.stdout + done.stderr).strip().splitlines()[-1:]
            raise PaperError(f"{source.name}: TeX stopped: {' '.join(err)} (log: {log})")
    log = out_dir / source.with_suffix(".log").name
    shutil.copyfile(out_dir / source.with_suffix(".pdf").name, pdf)
    return Build(pdf, log, problems(log.read_text(encoding="utf-8", errors="replace")))


def _first_error(log: Path) -> list[str]:
    if not log.exists():
        return []
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    for i, line in enumerate(lines):
        if line.startswith("!"):
            return [line.strip(), *(s.strip() for s in lines[i + 1 : i + 2] if s.strip())]
    return []


def main(argv: list[str] | None = None) -> int:
    """``python -m layerlab.reporting.paper.build``: build ``paper/main.pdf``; exit 1 on a missing TeX, a TeX
    error or any overfull box (each printed on one line)."""
    del argv
    try:
        b = build()
    except PaperError as exc:
        print(exc, file=sys.stderr)
        return 1
    for p in b.problems:
        print(f"paper/{p}", file=sys.stderr)
    if b.problems:
        print(
            f"{len(b.problems)} layout problem(s); the PDF is {b.pdf} (log: {b.log})",
            file=sys.stderr,
        )
        return 1
    print(f"wrote {b.pdf.relative_to(paths.ROOT) if b.pdf.is_relative_to(paths.ROOT) else b.pdf}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
