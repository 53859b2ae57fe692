"""The optional extras (pyproject.toml): which one provides a module, and the one line a command
prints when it is missing. The core install runs every command that needs no notebook."""

from __future__ import annotations

# top-level module -> the extra that installs it
EXTRAS = {
    "papermill": "notebooks",
    "nbformat": "notebooks",
    "nbval": "notebooks",
    "jupyter_client": "notebooks",
    "matplotlib": "notebooks",
    "seaborn": "notebooks",
    "ipywidgets": "notebooks",
    "IPython": "notebooks",
    "langchain_core": "langchain",
    "bm25s": "langchain",
    "wordllama": "dense",
    "qdrant_client": "dense",
    "mcp": "mcp",
    "agents": "agents",
    "llama_index": "llamaindex",
    "langgraph": "langgraph",
    "inspect_ai": "inspect",
    "opentelemetry": "otel",
    "openinference": "otel",
    "llama_cpp": "local",
}


def install_hint(module: str) -> str:
    """How to get ``module``: the extra's pip line (the local runtime: `make local`)."""
    extra = EXTRAS[module.partition(".")[0]]
    if extra == "local":
        return "the local model runtime: `make local` in the repository, or pip install 'layerlab[local]'"
    return f"pip install 'layerlab[{extra}]'"


def missing_module(exc: BaseException | None) -> str | None:
    """The optional module whose absence caused ``exc`` (its chain searched), else None."""
    seen = 0
    while exc is not None and seen < 10:
        name = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
        if name and name.partition(".")[0] in EXTRAS:
            return str(name.partition(".")[0])
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def missing_line(exc: BaseException, what: str) -> str | None:
    """``what needs MODULE (pip install 'layerlab[EXTRA]')`` for a missing optional module."""
    module = missing_module(exc)
    return None if module is None else f"{what} needs {module} ({install_hint(module)})"
