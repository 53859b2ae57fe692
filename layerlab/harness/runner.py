"""A run configuration carried out: :func:`execute`, the one way every door runs one.

:func:`execute` takes a :class:`~layerlab.harness.config.RunConfig` (the CLI's, a run
configuration file's, a Python user's, the pytest plugin's), checks it against the corpus and
scenarios (:meth:`~layerlab.harness.config.RunConfig.groups`), opens the private sample log and
makes its live runs: one :func:`~layerlab.harness.live.run.run_live` per group of model settings
(the budget shared: each run gets what the runs before it left; several groups run into
``out/runs/NN-<model>/`` and are merged into the run folder: archive, manifest, results.json),
or the looks of an until-decided run (:mod:`layerlab.harness.live.looks`). A run configured by a
file keeps it as ``run.yaml`` (:func:`~layerlab.harness.runconfig.stored_config`: every endpoint
recorded as ``local`` or ``remote``, every secret replaced).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerlab.corpus.build import AnswerKey, Corpus
from layerlab.harness.config import ConfigError, Group, Inputs, Outputs, RunConfig
from layerlab.harness.live.looks import Decided
from layerlab.harness.live.run import LiveResult
from layerlab.harness.live.settings import LiveRunError
from layerlab.models.llm import ProviderSettings


@dataclass(frozen=True)
class Outcome:
    """What :func:`execute` did: whether every run finished, the message for the user, the
    models whose provider-error share exceeded ``max_error_rate``, the last live run's result
    (None: an until-decided run that had already stopped), the looks of an until-decided run and
    the sample log written (closed), if any."""

    complete: bool
    message: str
    over_error_rate: tuple[str, ...] = ()
    result: LiveResult | None = None
    decided: Decided | None = None
    sample_log: Any = None


@dataclass(frozen=True)
class _Run:
    """What every live run of one :func:`execute` shares."""

    config: RunConfig
    corpus: Corpus
    key: AnswerKey
    scenarios: dict[str, Any]
    scenario_hash: str
    progress: Callable[[], Any] | None
    say: Callable[[str], None]
    samples: Any


def execute(
    config: RunConfig,
    inputs: Inputs | None = None,
    *,
    progress: Callable[[], Any] | None = None,
    say: Callable[[str], None] = lambda _m: None,
) -> Outcome:
    """Run ``config`` into its run folder (module docstring). ``inputs``: the corpus and
    scenarios already loaded (default: those the configuration names); ``progress`` makes a
    progress bar (``update``, ``close``) for each live run. A bad configuration is a
    :class:`~layerlab.harness.config.ConfigError` before anything is written."""

    out = config.outputs.out
    if out is None:
        raise ConfigError("out: expected a run folder")
    inputs = inputs or Inputs(config.matrix.corpus_dir, config.matrix.scenarios_path,
                              *config.matrix.more_scenarios)  # fmt: skip
    corpus, scenarios = inputs.corpus, inputs.scenarios
    groups = config.groups(corpus.tasks, list(scenarios), scenarios)
    log = open_sample_log(config.outputs)
    r = _Run(config, corpus, inputs.key, scenarios, inputs.scenario_hash,
             progress if config.outputs.progress else None, say, log)  # fmt: skip
    try:
        if config.matrix.until_decided is not None:
            return _until_decided(r, groups[0], Path(out))
        return _groups(r, groups, Path(out))
    finally:
        if log:
            log.close()


def open_sample_log(outputs: Outputs) -> Any:
    """The ``--sample-log`` writer (``None`` when off); refused inside the run folder."""
    if outputs.sample_log is None:
        return None
    from layerlab.archive import samplelog

    path = outputs.sample_log
    try:
        log = samplelog.SampleLog(samplelog.check_path(path, Path(outputs.out or ".")))
    except samplelog.SampleLogError as exc:
        raise ConfigError(str(exc)) from None
    except OSError as exc:
        raise ConfigError(f"--sample-log {path}: cannot write ({exc.strerror or exc})") from None
    return log


def _until_decided(r: _Run, group: Group, out: Path) -> Outcome:
    from layerlab.harness.live.looks import run_until_decided

    looked = run_until_decided(
        r.corpus, r.key, r.scenarios, group.config, out, r.config.execution,
        scenario_hash=r.scenario_hash, progress=r.progress, say=r.say, samples=r.samples,
    )  # fmt: skip
    res = looked.result
    if res is None:  # the run had already stopped: nothing asked
        return Outcome(True, "", (), None, looked, r.samples)
    return Outcome(res.complete, res.message, res.over_error_rate, res, looked, r.samples)


def _groups(r: _Run, groups: Sequence[Group], out: Path) -> Outcome:
    """Run the groups in turn; a configuration file is stored with the run, several groups'
    folders merged (or, stopped early, merged under a manifest that says so)."""
    from layerlab import archive
    from layerlab._io import atomic_write_text
    from layerlab.analysis import results
    from layerlab.harness.runconfig import CONFIG_COPY, stored_config

    messages: list[str] = []
    finished: list[Group] = []
    over: list[str] = []
    try:
        last = _run_groups(r, groups, out, messages, finished, over)
    except LiveRunError:
        _stopped(groups, finished, out, "a run failed")
        raise
    complete = len(finished) == len(groups)
    if r.config.outputs.config_file is not None:
        atomic_write_text(out / CONFIG_COPY, stored_config(r.config.outputs.config_text or ""))
    if len(groups) > 1 and complete:
        archive.merge([out / g.folder for g in groups], out, in_place=True)
        results.write_results(out)
    elif len(groups) > 1:
        _stopped(groups, finished, out, "a run did not finish")
    return Outcome(complete, "\n".join(messages), tuple(over), last, None, r.samples)


def _run_groups(r: _Run, groups: Sequence[Group], out: Path, messages: list[str],
                finished: list[Group], over: list[str]) -> LiveResult | None:  # fmt: skip
    """Run the groups in turn, sharing the budget; stop after the first incomplete one. A
    configuration file's messages name each run's models."""
    from layerlab.harness.live.run import run_live

    run = r.config.execution
    left, res = run.budget, None
    named = r.config.outputs.config_file is not None
    for g in groups:
        bar = r.progress() if r.progress else None  # one progress bar per run
        mine = dataclasses.replace(run, budget=left, local_servers=g.local_servers or run.local_servers)
        try:
            res = run_live(
                r.corpus, r.key, r.scenarios, g.config, out / g.folder if g.folder else out,
                scenario_hash=r.scenario_hash, progress=bar.update if bar else None, say=r.say,
                samples=r.samples, run=mine,
            )  # fmt: skip
        finally:
            if bar:
                bar.close()
        if left is not None:  # the group's calls over the run (its earlier invocations too)
            left = max(0, left - int((res.manifest.get("calls") or {}).get("made", 0)))
        messages.append(f"{', '.join(g.models)}: {res.message}" if named else res.message)
        over += res.over_error_rate
        if not res.complete:
            break
        finished.append(g)
    return res


def _stopped(groups: Sequence[Group], finished: Sequence[Group], out: Path, why: str) -> None:
    """A configuration of several runs that stopped early: the runs made so far (finished or
    partial) are merged into ``out`` under a manifest that says which models finished."""
    from layerlab import archive

    if len(groups) < 2:
        return
    made = [out / g.folder for g in groups if (out / g.folder / archive.MANIFEST).exists()]
    if not made:
        return
    done = [m for g in finished for m in g.models]
    rest = [m for g in groups if g not in finished for m in g.models]
    note = (
        f"stopped early ({why}): finished {', '.join(done) or 'none'}; "
        f"not finished {', '.join(rest)}; continue with --resume"
    )
    archive.merge(made, out, note=note, complete=False, in_place=True)


def run_matrix(
    models: Sequence[str],
    out: Path | str | None = None,
    scenarios: Sequence[str] | None = None,
    budget: int | None = None,
    concurrency: int = 16,
    resume: bool = False,
    settings: ProviderSettings | None = None,
) -> LiveResult:
    """Convenience for notebooks: run ``models`` over the committed corpus and scenarios.

    ``out=None`` runs into a fresh temporary folder (kept until the process exits).
    """
    import sys
    import tempfile

    from layerlab.harness.config import Matrix, ModelGroup, System
    from layerlab.harness.live.settings import RunSettings

    cache_dir = None
    if out is None:  # a throwaway run gets a throwaway cache, so its counts do not depend on history
        _TMP.append(tempfile.TemporaryDirectory(prefix="layerlab-live-"))
        out = Path(_TMP[-1].name) / "run"
        cache_dir = Path(_TMP[-1].name) / "cache"
    config = RunConfig(
        System((ModelGroup(tuple(models), settings or ProviderSettings()),)),
        Matrix(scenarios=tuple(scenarios) if scenarios else None),
        RunSettings(budget=budget, concurrency=concurrency, resume=resume, cache_dir=cache_dir),
        Outputs(Path(out), progress=False),
    )
    # a degraded reply cache, a server starting: said on stderr
    done = execute(config, say=lambda m: print(m, file=sys.stderr))
    assert done.result is not None
    return done.result


_TMP: list[Any] = []
