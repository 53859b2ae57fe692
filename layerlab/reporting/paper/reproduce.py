"""`layerlab reproduce`: execute every notebook with papermill, in order, and report what it wrote.

Executed copies go to a git-ignored folder (``out/notebooks``); the notebooks write the paper's
tables and figures through the library, and then the prose's macros are written from those tables
(:mod:`layerlab.reporting.paper.papervalues`). ``quick`` shrinks costly parameters and writes its
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

# --quick's settings, each passed to the notebooks whose parameters cell declares it
QUICK_PARAMETERS: dict[str, Any] = {"n_boot": 1000}
# Notebooks --quick leaves out: they write no table or figure (the live matrix re-runs the
# reference agents to check they reproduce the committed archive, which `make test` also checks).
QUICK_SKIP = frozenset({"04_live_matrix.ipynb"})
TIMINGS = "timings.json"  # seconds per notebook of the last run, kept next to the executed copies


def _load_timings(folder: Path) -> dict[str, float]:
    import json

    try:
        data = json.loads((folder / TIMINGS).read_text(encoding="utf-8"))
        return {str(k): float(v) for k, v in data.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def eta(done: dict[str, float], remaining: list[str], last: dict[str, float]) -> float | None:
    """Seconds left: each remaining notebook takes what it took last time, else the mean of the
    notebooks done so far; ``None`` before anything is known."""
    if not remaining:
        return 0.0
    mean = sum(done.values()) / len(done) if done else None
    total = 0.0
    for name in remaining:
        if name in last:
            total += last[name]
        elif mean is not None:
            total += mean
        else:
            return None
    return total


def _kernel_manager() -> Any:
    """A kernel manager on IPC sockets in a private temporary folder: kernels over local TCP
    print an "unencrypted" warning for every notebook, and IPC needs no port either."""
    import atexit
    import shutil

    from jupyter_client.manager import AsyncKernelManager

    folder = tempfile.mkdtemp(prefix="layerlab-kernels-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)

    class IPCKernelManager(AsyncKernelManager):
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            self.transport = "ipc"
            # one folder per kernel: concurrent kernels never race for the same socket names
            self.ip = os.path.join(tempfile.mkdtemp(dir=folder), "kernel")

        async def _async_interrupt_kernel(self) -> None:
            # jupyter_client interrupts a kernel before it asks it to shut down, and ipykernel
            # then logs "KeyboardInterrupt caught in kernel" (a different notebook each run).
            # papermill shuts a kernel down once its cells are done, so there is nothing to
            # interrupt; a kernel that does not stop is killed after the shutdown request.
            if not self.shutting_down:
                await super()._async_interrupt_kernel()

    return IPCKernelManager


def quick_parameters(nb: Path) -> dict[str, Any]:
    """The :data:`QUICK_PARAMETERS` that notebook ``nb`` declares (papermill warns about any
    other, and a notebook that declares one must get it)."""
    import papermill as pm

    declared = pm.inspect_notebook(str(nb))
    return {k: v for k, v in QUICK_PARAMETERS.items() if k in declared}


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
    on_done: Callable[[Path, int, int, float, float | None], None] | None = None,
    jobs: int = 1,
) -> list[Written]:
    """Execute every notebook; return the artifacts written, each new, changed or unchanged.

    ``on_start(nb, i, n)`` is called before notebook ``i`` of ``n``; ``on_done(nb, i, n,
    seconds, eta_seconds)`` after it, with an estimate of the time left (from the last run's
    timings, kept in ``out/timings.json``). ``quick`` leaves out :data:`QUICK_SKIP`. ``jobs``
    notebooks run at once (each in its own kernel; they write disjoint artifacts and read none).
    """
    import json
    import threading
    import time
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    from layerlab._io import atomic_write_text

    if jobs < 1:
        raise ValueError(f"--jobs: expected at least 1, got {jobs}")
    out = Path(out or paths.ROOT / "out" / "notebooks")
    out.mkdir(parents=True, exist_ok=True)
    if quick and artifacts is None:
        artifacts = paths.ROOT / "out" / "quick"
    root = Path(artifacts) if artifacts else paths.ARTIFACTS
    before = _snapshot(root)
    env_before = os.environ.get("LAYERLAB_ARTIFACTS")
    if artifacts:
        os.environ["LAYERLAB_ARTIFACTS"] = str(root)
    manager = _kernel_manager()
    last = _load_timings(out)
    took: dict[str, float] = {}
    lock = threading.Lock()
    nbs = [nb for nb in notebooks() if not (quick and nb.name in QUICK_SKIP)]

    def execute(i: int, nb: Path) -> None:
        if on_start:
            with lock:
                on_start(nb, i, len(nbs))
        t0 = time.monotonic()
        params = quick_parameters(nb) if quick else {}
        try:
            pm.execute_notebook(
                str(nb),
                str(out / nb.name),
                parameters=params,
                kernel_name="python3",
                cwd=str(paths.ROOT),
                progress_bar=False,
                log_output=False,
                kernel_manager_class=manager,
            )
        except PapermillExecutionError as exc:
            raise ReproduceError(
                f"{nb.relative_to(paths.ROOT)} failed in cell {exc.exec_count} "
                f"({exc.ename}: {exc.evalue}); the executed copy is {out / nb.name}"
            ) from None
        with lock:
            took[nb.name] = time.monotonic() - t0
            if on_done:
                pending = [n.name for n in nbs if n.name not in took]
                left = eta(took, pending, last)
                on_done(nb, len(took) - 1, len(nbs), took[nb.name], None if left is None else left / jobs)

    try:
        if jobs == 1:
            for i, nb in enumerate(nbs):
                execute(i, nb)
        else:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                futures = [pool.submit(execute, i, nb) for i, nb in enumerate(nbs)]
                try:
                    done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                except KeyboardInterrupt:  # Ctrl-C or SIGTERM: start no further notebook
                    for f in futures:
                        f.cancel()
                    raise
                failed = [f for f in done if f.exception() is not None]
                if failed:
                    for f in futures:
                        f.cancel()
                    raise failed[0].exception()  # type: ignore[misc]
        _write_values(root)
        timings = {**last, **{k: round(v, 1) for k, v in took.items()}}
        atomic_write_text(out / TIMINGS, json.dumps(timings, indent=2, sort_keys=True) + "\n")
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


def _write_values(root: Path) -> None:
    """The prose's macros (``paper/generated/values.tex``) from the tables just written."""
    from layerlab.reporting.paper import papervalues

    try:
        papervalues.write(root / "paper" / "tables", root / "paper" / papervalues.VALUES_FILE)
    except papervalues.ValuesError as exc:
        raise ReproduceError(f"paper/{papervalues.VALUES_FILE}: {exc}") from None


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


def kernelspec(name: str = "python3") -> dict[str, str]:
    """The notebook metadata JupyterLab writes for the installed kernel ``name`` (its display
    name, language and name): committed notebooks carry exactly this, so opening and saving one
    changes nothing."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec(name)
    return {"display_name": spec.display_name, "language": spec.language, "name": name}


def strip_volatile(nb_path: Path) -> None:
    """Drop papermill's timing metadata and widget state (random ids) so a committed notebook
    changes only with its outputs."""
    import nbformat

    nb = nbformat.read(nb_path, as_version=4)
    nb.metadata["kernelspec"] = kernelspec()  # what JupyterLab writes when it opens the notebook
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
    manager = _kernel_manager()
    for nb in notebooks():
        pm.execute_notebook(
            str(nb),
            str(nb),
            kernel_name="python3",
            cwd=str(paths.ROOT),
            progress_bar=False,
            kernel_manager_class=manager,
        )
        strip_volatile(nb)
        done.append(nb)
    return done
