"""The pytest plugin (docs/pytest.md): a team's own suite, as the page shows it, run by pytest in a
scratch project (``pytester``, in process) against the page's targets.

The documented ``tests/test_rag.py`` (and the mark's ``tests/test_guard.py``) pass against the
page's fixed ``my_rag.py`` with one run of the matrix for every test, and fail against the
README's ``my_rag.py`` with the freshness layer's finding, as the page's output block shows;
a verdict too small to decide fails with its reason; ``--layerlab-out`` resumes a run of the same
code and configuration and makes a new one for edited code; bad input is one line; the plugin is
declared as the ``pytest11`` entry point and imports nothing heavy. The entry point is not
installed in the development environment, so the inner sessions load the plugin with ``-p`` (and
with entry points off, so an installed one could not load it twice)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import docfiles
import pytest
from docfiles import ROOT

# imported here so that every inner session finds them loaded (pytester restores sys.modules
# after each, and would otherwise import the harness and the analysis again each time)
from layerlab.analysis import compare, gate, planning  # noqa: F401
from layerlab.harness import live
from layerlab.integrations.checks import CheckError, MatrixRun
from layerlab.reporting.format import gatetext

pytest_plugins = ["pytester"]

PAGE = ROOT / "docs" / "pytest.md"  # docs/pytest.md: its blocks are run here
PLUGIN = "layerlab.integrations.pytest"
FILE = re.compile(r"^# ([\w./-]+\.py)\b")


def _files(page: Path) -> dict[str, str]:
    """The page's python blocks that are files (first line ``# path.py``), by path."""
    out = {}
    for b in docfiles.blocks(page):
        m = FILE.match(b.body) if b.lang == "python" else None
        if m:
            out[m.group(1)] = b.body
    return out


def _command_and_output() -> tuple[list[str], str]:
    """The page's ``pytest ...`` command (its arguments) and the output block after it."""
    blocks = docfiles.blocks(PAGE)
    i = next(i for i, b in enumerate(blocks) if b.lang == "bash" and b.body.startswith("pytest"))
    assert blocks[i + 1].marker and blocks[i + 1].marker.startswith("<!-- output of the block")
    return shlex.split(blocks[i].body)[1:], blocks[i + 1].body


def _not_printed(shown: str, out: str) -> list[str]:
    """The lines of a documented output block that ``out`` lacks (``(...)`` elides text)."""
    printed = [" ".join(ln.split()) for ln in out.splitlines()]

    def match(line: str, parts: list[str]) -> bool:
        if not (line.startswith(parts[0]) and line.endswith(parts[-1])):
            return False
        at = 0
        for p in parts:
            at = line.find(p, at)
            if at == -1:
                return False
            at += len(p)
        return True

    missing = []
    for line in shown.splitlines():
        parts = [" ".join(x.split()) for x in line.split("(...)")]
        if not any(match(p, parts) for p in printed):
            missing.append(line)
    return missing


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A scratch project holding the page's test files; entry-point plugins off."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    # the inner sessions run in this process: a ``my_rag`` another test imported (the README's,
    # from its own folder) must not stand in for this project's
    monkeypatch.delitem(sys.modules, "my_rag", raising=False)
    for path in ("tests/test_rag.py", "tests/test_guard.py"):
        (pytester.path / "tests").mkdir(exist_ok=True)
        (pytester.path / path).write_text(_files(PAGE)[path], encoding="utf-8")
    return pytester


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every run_live call the inner sessions make: (folder, its LiveResult or None)."""
    made: list[Any] = []
    real = live.run_live

    def counting(*args: Any, **kwargs: Any) -> Any:
        made.append([args[4], None])
        made[-1][1] = real(*args, **kwargs)
        return made[-1][1]

    monkeypatch.setattr(live, "run_live", counting)
    return made


def test_the_documented_suite_passes_for_the_fixed_target_with_one_run(project, runs) -> None:
    (project.path / "my_rag.py").write_text(_files(PAGE)["my_rag.py"], encoding="utf-8")
    args, _ = _command_and_output()
    res = project.runpytest("-p", PLUGIN, *args, "tests/test_guard.py")
    res.assert_outcomes(passed=7)
    assert len(runs) == 1, "one run of the matrix for the session's seven tests"
    recs = runs[0][1].manifest["records"]
    assert recs == 40 * 9 * 2
    res.stdout.fnmatch_lines([
        "*= layerlab =*",
        f"python:my_rag:answer: 40 tasks x 9 scenarios x 2 arms (strict, session_isolation), "
        f"{recs} records, {recs} asked in *",
    ])  # fmt: skip


def test_the_documented_suite_fails_for_the_readme_target_with_the_finding(project, runs) -> None:
    (project.path / "my_rag.py").write_text(_files(docfiles.README)["my_rag.py"], encoding="utf-8")
    args, shown = _command_and_output()
    res = project.runpytest("-p", PLUGIN, *args)
    res.assert_outcomes(passed=4, failed=1)
    out = res.stdout.str()
    assert not _not_printed(shown, out), _not_printed(shown, out)
    assert "FAILED tests/test_rag.py::test_resolves_faults_safely[stale_index]" in out
    # the section says in full what the test read: the cell, the finding and the guard's line
    section = out.split("layerlab: the rates and verdicts this test read")[1]
    assert "Its guard `freshness_guard`" in section.split("= layerlab =")[0]
    assert len(runs) == 1


def _asked(result: live.LiveResult) -> int:
    """The records a run asked of the target in this invocation (the others were there)."""
    return result.counters.records - result.counters.skipped_done


SMALL = """
import pytest


@pytest.fixture(scope="session")
def rag(layerlab_run):
    return layerlab_run("python:my_rag:answer", mitigations=["session_isolation"], tasks=6,
                        scenarios=["clean", "stale_index", "wrong_session"])


def test_stale(rag):
    assert rag.safe("stale_index") >= 0.9


def test_specific(rag):
    assert rag.specific("session_isolation")


def test_misspelt(rag):
    rag.safe("stale_idx")
"""


def test_a_kept_run_resumes_and_a_small_one_cannot_decide(project, runs) -> None:
    fixed = _files(PAGE)["my_rag.py"]
    (project.path / "my_rag.py").write_text(fixed, encoding="utf-8")
    project.makepyfile(test_small=SMALL)
    first = project.runpytest("-p", PLUGIN, "--layerlab-out", "out", "test_small.py")
    first.assert_outcomes(passed=1, failed=2)
    out = first.stdout.str()
    # too few tasks for a verdict: the gate's line, its reason, the plan command
    assert "assert session_isolation: inconclusive — " in out
    assert "specific needs at least 25 tasks with unchanged off-target outcomes (this run: 6)" in (
        out
    )
    assert "`layerlab plan " in out and "inconclusive is not a pass" in out
    assert "scenario 'stale_idx': not in this run (did you mean 'stale_index'?)" in out
    (folder,) = (project.path / "out").iterdir()
    assert runs[-1][0] == folder and _asked(runs[-1][1]) == 6 * 3 * 2

    # the run's answers are the gate's: the same verdict line, the same rate
    run = MatrixRun(folder)
    v = run.verdict("session_isolation")
    assert v == "inconclusive" and v.reason.startswith("off-target clean, stale_index not shown within ±10 pp")
    with pytest.raises(CheckError, match=r"no mitigation 'strict' judged in this run.*\(the baseline strict"):
        run.verdict("strict")
    # the target abstains on one fault-free question: that finding leads, then the layers
    clean, first = run.findings.splitlines()[:2]
    assert clean.startswith("Without faults (clean): correct in 5 of 6 questions; not resolved in 1 "
                            "— the system fails without any fault: most of these abstained. How "
                            "they failed: abstained in 1")  # fmt: skip
    assert first.startswith("session_state (wrong_session): not resolved in ")
    assert (" of 6 questions — drop results from another session. How they failed: answered "
            "from another session's documents in 5") in first  # fmt: skip
    asked = gate.evaluate(folder, specific=["session_isolation"]).checks[0]
    assert run.specific("session_isolation").explain() == gatetext.line(asked)
    assert not asked.passed
    threshold = gate.parse_threshold("SR:stale_index@strict=1", "min")
    line = gatetext.line(gate.evaluate(folder, [threshold]).checks[0])
    assert f"{run.safe('stale_index'):.3f} >= 1.000" in line

    again = project.runpytest("-p", PLUGIN, "--layerlab-out", "out", "test_small.py", "-k", "stale")
    again.assert_outcomes(passed=1, deselected=2)
    assert runs[-1][0] == folder and _asked(runs[-1][1]) == 0
    again.stdout.fnmatch_lines(["*all already there (resumed: nothing asked)*"])

    (project.path / "my_rag.py").write_text(fixed + "# edited\n", encoding="utf-8")
    edited = project.runpytest("-p", PLUGIN, "--layerlab-out", "out", "test_small.py", "-k", "stale")
    edited.assert_outcomes(passed=1, deselected=2)
    assert len(list((project.path / "out").iterdir())) == 2, "edited code: a run of its own"
    assert len(runs) == 3


BAD = """
import pytest


@pytest.fixture(scope="session")
def missing(layerlab_run):
    return layerlab_run("python:no_such_rag:answer")


def test_one(missing):
    pass


def test_two(missing):
    pass


def test_misspelt_guard(layerlab_run):
    layerlab_run("python:my_rag:answer", mitigations=["freshnes_guard"])


def test_no_target(layerlab_run):
    layerlab_run()


def test_bad_tasks(layerlab_run):
    layerlab_run("python:my_rag:answer", tasks=0)
"""


def test_bad_input_is_one_line_and_tried_once(project, runs) -> None:
    (project.path / "my_rag.py").write_text(_files(PAGE)["my_rag.py"], encoding="utf-8")
    project.makepyfile(test_bad=BAD)
    res = project.runpytest("-p", PLUGIN, "test_bad.py")
    res.assert_outcomes(errors=2, failed=3)
    # each one line, without a traceback: the setup error of both tests of the missing module
    res.stdout.fnmatch_lines([
        "*ERROR at setup of test_one*",
        "layerlab_run('python:no_such_rag:answer'): --target python:no_such_rag:answer: no module "
        "named 'no_such_rag' (is its folder on PYTHONPATH or the current folder?)",
        "*ERROR at setup of test_two*",
        "layerlab_run('python:no_such_rag:answer'): --target python:no_such_rag:answer: no *",
        "*test_misspelt_guard*",
        "layerlab_run('python:my_rag:answer'): mitigations: unknown mitigation 'freshnes_guard' "
        "(did you mean 'freshness_guard'?)*",
        "*test_no_target*",
        "layerlab_run: no target: give one (layerlab_run('python:my_rag:answer')), "
        "--layerlab-target SPEC or layerlab_target in the ini file",
        "*test_bad_tasks*",
        "layerlab_run: tasks=0: expected a whole number >= 1",
    ])  # fmt: skip
    assert len(runs) == 1, "the missing module was tried once, for both tests"
    assert "Traceback" not in res.stdout.str()

    # the ini file fills in what a call leaves out; what the call gives wins
    project.makeini("[pytest]\nlayerlab_target = python:no_such_rag:answer\nlayerlab_seed = -1\n")
    project.makepyfile(test_ini=INI)
    res = project.runpytest("-p", PLUGIN, "test_ini.py")
    res.assert_outcomes(errors=1, failed=1)
    res.stdout.fnmatch_lines([
        "*ERROR at setup of test_from_the_ini*",
        f"{project.path / 'tox.ini'}: layerlab_seed: expected a whole number >= 0, got '-1'",
        "*test_seed_given*",
        "layerlab_run('python:no_such_rag:answer'): --target python:no_such_rag:answer: no *",
    ])  # fmt: skip


INI = """
def test_from_the_ini(layerlab):
    pass


def test_seed_given(layerlab_run):
    layerlab_run(seed=3)
"""


def test_the_entry_point_is_declared_and_imports_nothing_heavy() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert meta["project"]["entry-points"]["pytest11"] == {"layerlab": PLUGIN}
    code = (f"import sys, {PLUGIN} as p\n"
            "assert callable(p.pytest_addoption) and callable(p.pytest_assertrepr_compare)\n"
            "heavy = ('pandas', 'numpy', 'sklearn', 'litellm', 'layerlab.harness', "
            "'layerlab.analysis', 'layerlab.corpus')\n"
            "print(sorted(m for m in sys.modules if m.startswith(heavy)))")  # fmt: skip
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                       env={"PYTHONPATH": str(ROOT), "PATH": ""})  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]", p.stdout
