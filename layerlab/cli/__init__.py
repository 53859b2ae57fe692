"""The ``layerlab`` command line, one module per command group.

``app`` holds the Typer app, the exit codes, the error handling and the groups; ``inputs`` the
specs, corpus, scenarios, mitigations and audits; ``conversations`` the conversations' build and
show; ``run`` the harnesses; ``study`` the LangChain study; ``archives`` archive
check, migrate and merge; ``outputs`` recompute, reproduce, explore, report, view and dictionary;
``models`` the local models; ``cache`` the reply cache; ``gate`` CI gates on a run; ``plan``
the size of a run that decides; ``serve`` the faulted tools over MCP; ``surface`` a swept
run's reliability surface; ``export`` a finished run as another tool's log (Inspect AI).
Importing this package registers every command; each command imports the library lazily, so
``layerlab --help`` stays fast.
"""

from layerlab.cli import (  # noqa: F401  (registers commands)
    archives,
    cache,
    conversations,
    export,
    gate,
    inputs,
    models,
    outputs,
    plan,
    run,
    serve,
    study,
    surface,
)
from layerlab.cli.app import EXIT_ERROR_RATE, EXIT_INCOMPLETE, app, main

__all__ = ["EXIT_ERROR_RATE", "EXIT_INCOMPLETE", "app", "main"]
