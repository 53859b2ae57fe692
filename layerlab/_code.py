"""A user's code by reference: import ``module:attr`` (the current folder on the path) and
fingerprint the module's file and its top-level package. One owner for targets
(:mod:`layerlab.harness.targets.identity`) and external retrievers
(:mod:`layerlab.system.retrieval.external`): what answered, or what retrieved, is in a run's
identity as hashes, never as code.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from layerlab import _secrets

NOT_RECORDED = "not recorded"


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_sha256(folders: list[Path]) -> str:
    """One hash over every ``.py`` file under ``folders``: its relative path and its hash."""
    lines = []
    for folder in folders:
        for f in sorted(folder.rglob("*.py")):
            if "__pycache__" not in f.parts:
                lines.append(f"{f.relative_to(folder).as_posix()} {sha256_file(f)}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def module_code(module: str) -> dict[str, str]:
    """``module``, ``module_sha256`` and (in a package) ``package``, ``package_sha256`` of an
    imported module."""
    out = {"module": module}
    file = getattr(sys.modules[module], "__file__", None)
    out["module_sha256"] = sha256_file(Path(file)) if file else NOT_RECORDED
    top = sys.modules[module.partition(".")[0]]
    folders = [Path(p) for p in getattr(top, "__path__", [])]
    if folders:
        out["package"] = top.__name__
        out["package_sha256"] = tree_sha256(folders)
    return out


def import_attr(
    ref: str,
    where: str,
    error: Callable[[str], Exception],
    redact: Callable[[str], str] = _secrets.redact,
) -> Any:
    """The object ``module:attr`` names (``attr`` may be dotted), the current folder on the
    path; ``error(one line)`` is raised when it cannot be, the line starting with ``where``;
    what the module raised while importing is said through ``redact`` (default: the one
    redactor of secrets, :func:`layerlab._secrets.redact`; a target adds its secret values)."""
    module, _, attr = ref.partition(":")
    here = os.getcwd()
    if here not in sys.path:
        sys.path.append(here)  # a user's module next to where the command runs
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or module
        from layerlab import extras

        if missing.partition(".")[0] in extras.EXTRAS and missing != module:
            raise error(
                f"{where}: {module!r} needs {missing} ({extras.install_hint(missing)})"
            ) from None
        raise error(
            f"{where}: no module named {missing!r} (is its folder on PYTHONPATH or the current folder?)"
        ) from None
    except (Exception, SystemExit) as exc:  # the user's module failed (or exited) while importing
        if isinstance(exc, SystemExit):
            raise error(
                f"{where}: importing {module!r} called sys.exit({exc.code!r}) (SystemExit): a "
                "user's module must not exit when imported"
            ) from None
        raise error(
            redact(f"{where}: importing {module!r} failed ({type(exc).__name__}: {exc})")
        ) from None
    obj: Any = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise error(f"{where}: module {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _not_users(filename: str) -> bool:
    """Whether ``filename`` is layerlab's, the standard library's or an installed package's (or
    not a file at all: ``<frozen ...>``, ``<string>``)."""
    import sysconfig

    if filename.startswith("<"):
        return True
    path = os.path.realpath(filename)
    if any(part in ("site-packages", "dist-packages") for part in Path(path).parts):
        return True
    roots = {os.path.realpath(os.path.dirname(__file__))}
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        where = sysconfig.get_paths().get(name)
        if where:
            roots.add(os.path.realpath(where))
    return any(path == r or path.startswith(r + os.sep) for r in roots)


def user_frame(exc: BaseException) -> str | None:
    """Where the user's own code raised ``exc``: its traceback's innermost frame that is not
    layerlab's, the standard library's or an installed package's, as ``my_rag.py:12 in answer``
    (the file relative to the current folder when it is under it), or None (no such frame: the
    error came from a library, or from a service over HTTP)."""
    import traceback

    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if not _not_users(frame.filename):
            shown = os.path.realpath(frame.filename)
            here = os.path.realpath(os.getcwd())
            if shown.startswith(here + os.sep):
                shown = os.path.relpath(shown, here)
            return f"{shown}:{frame.lineno} in {frame.name}"
    return None
