"""The installable package (issue 31, item 1): a wheel built from the repository carries the data
the library reads (a copy equal to the repository's) and, installed into a fresh environment
outside the repository with only the core dependencies, runs a deterministic run, a Python target,
``gate`` and ``report``; commands that need an extra or the repository say so in one line.

Offline: the wheel is built without build isolation, and the fresh environment gets the core
dependencies as links to this environment's installed distributions (their closure only, so the
notebook stack and LangChain are absent there, as after ``pip install layerlab``)."""

from __future__ import annotations

import email
import os
import subprocess
import sys
import textwrap
import time
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

from layerlab import paths

pytestmark = pytest.mark.wheel  # its own make target (make test-wheel), run by CI after make test
ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("layerlab", "pyproject.toml", "setup.py", "MANIFEST.in", "README.md")

MY_RAG = textwrap.dedent(
    '''
    """A team's target, as the README's "Test your own RAG system" writes one (its "LLM" reads
    the answer span off the top result)."""

    from layerlab.corpus.extract import extract


    def answer(req):
        obs = req.search(req.question, top_k=3)
        if obs["status"] not in ("ok", "partial"):
            return {"status": "abstained", "reason": str(obs.get("error"))}
        for top in obs["results"]:
            span = extract(req.question, req.answer_kind, top["text"])
            if span is not None:
                return {"status": "answered", "answer": span, "citations": [top["doc_id"]]}
        return {"status": "abstained", "reason": "no answer in the evidence"}
    '''
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of what the build reads (so the checkout stays clean)."""
    work = tmp_path_factory.mktemp("build")
    src = work / "src"
    src.mkdir()
    for name in SOURCES:
        p = ROOT / name
        if p.is_dir():
            subprocess.run(["cp", "-r", str(p), str(src / name)], check=True)
        else:
            (src / name).write_bytes(p.read_bytes())
    for rel in paths.PACKAGE_DATA:
        (src / "data" / rel).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-r", str(ROOT / "data" / rel), str(src / "data" / rel)], check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--disable-pip-version-check", str(src), "-w", str(work / "dist")],
        check=True, cwd=src, timeout=120,
    )  # fmt: skip
    (found,) = (work / "dist").glob("layerlab-*.whl")
    return found


def test_the_wheel_carries_a_copy_equal_to_the_repository_data(wheel: Path) -> None:
    expected = {}
    for rel in paths.PACKAGE_DATA:
        for f in sorted((ROOT / "data" / rel).rglob("*")):
            if f.is_file():
                expected[f"layerlab/_data/{f.relative_to(ROOT / 'data').as_posix()}"] = f.read_bytes()
    assert expected, "nothing to ship?"
    with zipfile.ZipFile(wheel) as z:
        shipped = {n: z.read(n) for n in z.namelist() if n.startswith("layerlab/_data/")}
        meta = email.message_from_bytes(z.read("layerlab-0.1.0.dist-info/METADATA"))
        entry = z.read("layerlab-0.1.0.dist-info/entry_points.txt").decode()
    assert shipped.keys() == expected.keys()
    assert [n for n in shipped if shipped[n] != expected[n]] == []
    # the notebook stack and LangChain are extras, not core dependencies
    core = {Requirement(r).name for r in meta.get_all("Requires-Dist") or [] if "extra" not in r}
    assert not core & {"jupyterlab", "papermill", "nbval", "seaborn", "ipywidgets", "langchain-core",
                       "bm25s"}, core  # fmt: skip
    assert {"pandas", "litellm", "pydantic", "pyarrow", "typer"} <= core
    assert {"notebooks", "langchain", "study", "local"} <= set(meta.get_all("Provides-Extra") or [])
    # installing the wheel registers the pytest plugin (docs/pytest.md)
    assert "[pytest11]\nlayerlab = layerlab.integrations.pytest\n" in entry, entry


def _core_closure(wheel: Path) -> list[metadata.Distribution]:
    """The installed distributions the wheel's core requirements need, transitively (with the
    extras each requirement names)."""
    with zipfile.ZipFile(wheel) as z:
        meta = email.message_from_bytes(z.read("layerlab-0.1.0.dist-info/METADATA"))
    todo = [(Requirement(r), "") for r in meta.get_all("Requires-Dist") or []]
    seen: dict[str, metadata.Distribution] = {}
    done: set[tuple[str, str]] = set()
    while todo:
        req, extra = todo.pop()
        env = {**default_environment(), "extra": extra}
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        key = req.name.lower().replace("_", "-")
        dist = seen.setdefault(key, metadata.distribution(req.name))
        for want in ("", *sorted(req.extras)):
            if (key, want) not in done:
                done.add((key, want))
                todo.extend((Requirement(r), want) for r in dist.requires or [])
    return list(seen.values())


def _link_site(dists: list[metadata.Distribution], site: Path) -> None:
    """One folder holding links to each distribution's top-level files (and its dist-info)."""
    site.mkdir()
    for dist in dists:
        base = Path(str(dist.locate_file("")))
        for top in sorted({f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}):
            if top != "__pycache__" and not (site / top).exists() and (base / top).exists():
                (site / top).symlink_to(base / top)


@pytest.fixture(scope="module")
def fresh(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv in a temporary folder with the wheel installed and the core dependencies."""
    work = tmp_path_factory.mktemp("fresh")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    py = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--quiet", "--no-deps",
         "--no-index", "--disable-pip-version-check", str(wheel)],
        check=True, timeout=120,
    )  # fmt: skip
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())  # fmt: skip
    _link_site(_core_closure(wheel), work / "core")
    (site / "layerlab-core-deps.pth").write_text(f"{work / 'core'}\n")
    return venv


def _env(cwd: Path) -> dict[str, str]:
    """This environment without its Python paths: the team's folder is the only PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(PYTHONHASHSEED="0", PYTHONPATH=str(cwd), MPLBACKEND="Agg",
               LAYERLAB_CACHE=str(cwd / "cache"))  # fmt: skip
    return env


def _run(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    began = time.monotonic()
    r = subprocess.run([str(venv / "bin" / "layerlab"), *args], cwd=cwd, env=_env(cwd),
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    print(f"{time.monotonic() - began:6.1f} s  layerlab {' '.join(args)}")
    return r


def test_installed_outside_the_repository_it_runs_a_target_gate_and_report(
    fresh: Path, tmp_path: Path
) -> None:
    team = tmp_path / "team"
    team.mkdir()
    (team / "my_rag.py").write_text(MY_RAG)
    py = fresh / "bin" / "python"
    where = subprocess.run(
        [str(py), "-c", "import layerlab, layerlab.paths as p; import importlib.util as u; "
         "print(layerlab.__file__, p.IN_REPO, p.CORPUS_DIR, u.find_spec('seaborn'), "
         "u.find_spec('langchain_core'), u.find_spec('papermill'))"],
        cwd=team, env=_env(team), capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()  # fmt: skip
    assert where[0].startswith(str(fresh)) and where[1] == "False"
    assert where[2].startswith(str(fresh)) and where[2].endswith("layerlab/_data/corpus/enterprise_v2")
    assert where[3:] == ["None", "None", "None"]  # only the core dependencies are there

    r = _run(fresh, team, "run", "deterministic", "--out", "det")
    assert r.returncode == 0, r.stderr
    assert (team / "det" / "records.parquet").is_file()
    r = _run(fresh, team, "run", "live", "--target", "python:my_rag:answer", "--target-name", "my-rag",
             "--limit", "8", "--out", "run", "--no-progress")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "my-rag" in r.stdout
    r = _run(fresh, team, "gate", "run", "--min", "S:clean=0.01")
    assert r.returncode == 0, r.stdout + r.stderr
    r = _run(fresh, team, "gate", "run", "--max", "S:clean=0")
    assert r.returncode == 1 and "FAIL S clean strict target/my-rag" in r.stdout, r.stdout + r.stderr
    r = _run(fresh, team, "report", "run", "--out", "report.html")
    assert r.returncode == 0, r.stderr
    page = (team / "report.html").read_text(encoding="utf-8")
    assert "my-rag" in page and "Findings" in page

    # a command that needs a missing extra, or the repository, says so in one line (exit 2)
    r = _run(fresh, team, "study", "langchain", "--out", "study")
    assert r.returncode != 0 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "needs langchain-core: pip install 'layerlab[langchain]'" in r.stderr
    assert not (team / "study").exists()
    r = _run(fresh, team, "reproduce")
    assert r.returncode == 2 and "needs a checkout of the layerlab repository" in r.stderr, r.stderr
    left = sorted(p.name for p in team.iterdir() if p.name != "__pycache__")
    assert left == ["cache", "det", "my_rag.py", "report.html", "run"]
