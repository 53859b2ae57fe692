"""`layerlab reproduce`: execute every notebook with papermill, in order, and report what it wrote.

Executed copies go to a git-ignored folder (``out/notebooks``); the notebooks write the paper's
tables and figures through the library. ``quick`` shrinks costly parameters and writes its
artifacts to a scratch folder instead of the repo. :func:`compare` checks a regenerated artifact
tree against the committed one (the freshness check of ``make test``).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerlab import paths

QUICK_PARAMETERS: dict[str, dict[str, Any]] = {
    "06_bootstrap_intervals.ipynb": {"n_boot": 1000},
    "09_specificity_matrix.ipynb": {"n_boot": 1000},
}


class ReproduceError(RuntimeError):
    """A notebook failed: the message names it and the cell."""


def notebooks() -> list[Path]:
    """The paper notebooks, in execution order (``NN_name.ipynb``)."""
    return sorted(paths.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def _snapshot(root: Path) -> dict[str, str]:
    out = {}
    for d in paths.ARTIFACT_DIRS:
        for p in sorted((root / d).glob("*")):
            if p.is_file():
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    for f in paths.ARTIFACT_FILES:
        p = root / f
        if p.exists():
            out[f] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@dataclass(frozen=True)
class Written:
    path: str
    status: str  # new | changed | unchanged


def run(
    quick: bool = False,
    out: Path | None = None,
    artifacts: Path | None = None,
    on_start: Callable[[Path, int, int], None] | None = None,
) -> list[Written]:
    """Execute every notebook; return the artifacts written, each new, changed or unchanged."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    out = Path(out or paths.ROOT / "out" / "notebooks")
    out.mkdir(parents=True, exist_ok=True)
    if quick and artifacts is None:
        artifacts = paths.ROOT / "out" / "quick"
    root = Path(artifacts) if artifacts else paths.ARTIFACTS
    before = _snapshot(root)
    env_before = os.environ.get("LAYERLAB_ARTIFACTS")
    if artifacts:
        os.environ["LAYERLAB_ARTIFACTS"] = str(root)
    try:
        nbs = notebooks()
        for i, nb in enumerate(nbs):
            if on_start:
                on_start(nb, i, len(nbs))
            params = QUICK_PARAMETERS.get(nb.name, {}) if quick else {}
            try:
                pm.execute_notebook(
                    str(nb),
                    str(out / nb.name),
                    parameters=params,
                    kernel_name="python3",
                    cwd=str(paths.ROOT),
                    progress_bar=False,
                    log_output=False,
                )
            except PapermillExecutionError as exc:
                raise ReproduceError(
                    f"{nb.relative_to(paths.ROOT)} failed in cell {exc.exec_count} "
                    f"({exc.ename}: {exc.evalue}); the executed copy is {out / nb.name}"
                ) from None
    finally:
        if artifacts:
            if env_before is None:
                os.environ.pop("LAYERLAB_ARTIFACTS", None)
            else:
                os.environ["LAYERLAB_ARTIFACTS"] = env_before
    after = _snapshot(root)
    return [
        Written(p, "new" if p not in before else "changed" if before[p] != h else "unchanged")
        for p, h in sorted(after.items())
    ]


def compare(regenerated: Path, committed: Path = paths.COMMITTED_ARTIFACTS) -> list[str]:
    """Differences between a regenerated artifact tree and the committed one (empty = fresh)."""
    new, old = _snapshot(Path(regenerated)), _snapshot(Path(committed))
    problems = []
    for p in sorted(set(new) | set(old)):
        if p not in old:
            problems.append(f"{p}: generated but not committed")
        elif p not in new:
            problems.append(f"{p}: committed but no notebook generates it")
        elif new[p] != old[p]:
            problems.append(
                f"{p}: differs from the committed file (a library change moved it; run `make reproduce`)"
            )
    return problems


def check(quick: bool = False) -> list[str]:
    """Regenerate everything into a scratch folder and compare it with the committed artifacts."""
    with tempfile.TemporaryDirectory(prefix="layerlab-check-") as tmp:
        run(quick=quick, out=Path(tmp) / "notebooks", artifacts=Path(tmp) / "artifacts")
        return compare(Path(tmp) / "artifacts")


def strip_volatile(nb_path: Path) -> None:
    """Drop papermill's timing metadata and widget state (random ids) so a committed notebook
    changes only with its outputs."""
    import nbformat

    nb = nbformat.read(nb_path, as_version=4)
    nb.metadata.pop("papermill", None)
    nb.metadata.pop("widgets", None)  # widget state carries random model ids
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            out.get("data", {}).pop("application/vnd.jupyter.widget-view+json", None)
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if cell.metadata.get("tags") == []:
            del cell.metadata["tags"]
    nbformat.write(nb, nb_path)


def update_committed() -> list[Path]:
    """Re-execute the committed notebooks in place (outputs refreshed, timings stripped)."""
    import papermill as pm

    done = []
    for nb in notebooks():
        pm.execute_notebook(
            str(nb), str(nb), kernel_name="python3", cwd=str(paths.ROOT), progress_bar=False
        )
        strip_volatile(nb)
        done.append(nb)
    return done
