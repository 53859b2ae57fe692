"""The pytest plugin: layerlab's fault matrix from a team's own test suite (docs/pytest.md).

Installing layerlab registers it (``pytest11`` entry point ``layerlab``; ``-p no:layerlab`` turns
it off, ``-p layerlab.integrations.pytest`` loads it where entry points are not). It costs
nothing until a test asks for a run: this module imports pytest, the standard library and
:mod:`~layerlab.integrations.checks` (the same), never pandas or the harness before then.

* ``layerlab_run`` (session fixture): a factory, ``layerlab_run("python:my_rag:answer",
  mitigations=["freshness_guard"])``, that runs the target under the fault matrix — every
  scenario, the baseline arm and the arms named, on ``tasks`` stratified tasks — with
  :func:`layerlab.harness.live.run_live`, as ``layerlab run live --target`` does (the same
  :class:`~layerlab.harness.config.RunConfig`), once per session and configuration, and
  returns its :class:`~layerlab.integrations.checks.MatrixRun`;
* ``layerlab`` (fixture): the same run for the test's closest ``@pytest.mark.layerlab(...)``;
* options (and ini keys) for what a call leaves out: ``--layerlab-target``, ``--layerlab-tasks``,
  ``--layerlab-seed`` and ``--layerlab-out`` (a folder that keeps the runs across sessions: one
  per configuration and version of the target's code, resumed when it is there);
* a failing ``assert`` over a rate or a verdict says what explains it: the rate's cell and the
  layer's finding (``pytest_assertrepr_compare``), and in full, untruncated, in a report section
  listing every rate and verdict the test read;
* the terminal summary names each run: its size, time and folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

from layerlab.integrations.checks import CheckError, MatrixRun, Rate, Specific, Verdict

DEFAULT_TASKS = 40
"""Tasks per run when neither the call nor an option says: above the 25 at which a guard that
changes nothing off target can be shown ``specific`` (specificity.specific_floor), as the
README's example finds it at 40."""
ARGS = ("target", "mitigations", "tasks", "seed", "retriever", "scenarios", "epochs", "name",
        "version", "settings", "corpus")  # fmt: skip
SECTION = "layerlab: the rates and verdicts this test read"
OPTIONS = {  # option -> (ini key, help)
    "target": ("layerlab_target", "The target a layerlab_run() call or @pytest.mark.layerlab "
               "leaves out: python:MODULE:FUNC, langchain:..., llamaindex:... or an http(s) URL."),
    "tasks": ("layerlab_tasks", f"Tasks per run, stratified (default {DEFAULT_TASKS})."),
    "seed": ("layerlab_seed", "Seed of the stratified task selection (default 0)."),
    "out": ("layerlab_out", "Keep the runs in this folder across sessions (one per "
            "configuration and version of the target's code; resumed when there); default: "
            "pytest's temporary folder."),
}  # fmt: skip


@dataclass(frozen=True)
class Plan:
    """What determines one run of the session (its cache key)."""

    target: str
    mitigations: tuple[str, ...]
    tasks: int
    seed: int
    retriever: str | None = None
    scenarios: tuple[str, ...] | None = None
    epochs: int = 1
    name: str = ""
    version: str = ""
    settings: tuple[tuple[str, Any], ...] = ()
    corpus: str | None = None


@dataclass
class Made:
    """A run of the session, for the terminal summary."""

    plan: Plan
    run: MatrixRun
    records: int
    asked: int
    seconds: float
    notes: list[str] = field(default_factory=list)


class Session:
    """The plugin's state for one pytest session: runs by plan (or the one line a plan failed
    with), the runs made, and the rates and verdicts the current test read."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.runs: dict[Plan, MatrixRun | str] = {}
        self.made: list[Made] = []
        self.read: list[Rate | Verdict | Specific] = []

    # --- what a call leaves out ------------------------------------------------------------

    def option(self, name: str) -> str | None:
        """A command-line option, else its ini key, else None."""
        return self.given(name)[0]

    def given(self, name: str) -> tuple[str | None, str, Path]:
        """An option's value, where it was given (for a message) and the folder a relative
        path in it is relative to: the command line's, else the ini file's."""
        value = self.config.getoption(f"layerlab_{name}")
        if value is not None:
            return str(value), f"--layerlab-{name}", self.config.invocation_params.dir
        ini = self.config.inipath
        value = self.config.getini(OPTIONS[name][0]) or None
        where = f"{ini or 'the ini file'}: {OPTIONS[name][0]}"
        return value, where, ini.parent if ini else self.config.rootpath

    def whole(self, name: str, default: int, least: int) -> int:
        text, where, _ = self.given(name)
        if text is None:
            return default
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least:
            pytest.fail(f"{where}: expected a whole number >= {least}, got {text!r}",
                        pytrace=False)  # fmt: skip
        return value

    def plan(self, kwargs: dict[str, Any]) -> Plan:
        """The call's arguments, completed by the options (an argument given wins)."""
        unknown = sorted(set(kwargs) - set(ARGS))
        if unknown:
            pytest.fail(f"layerlab_run: unexpected argument {unknown[0]!r} (expected "
                        f"{', '.join(ARGS)})", pytrace=False)  # fmt: skip
        target = kwargs.get("target") or self.option("target")
        if not target:
            pytest.fail("layerlab_run: no target: give one (layerlab_run('python:my_rag:answer'"
                        ")), --layerlab-target SPEC or layerlab_target in the ini file",
                        pytrace=False)  # fmt: skip
        tasks = kwargs.get("tasks")
        if tasks is None:
            tasks = self.whole("tasks", DEFAULT_TASKS, 1)
        seed = kwargs.get("seed")
        if seed is None:
            seed = self.whole("seed", 0, 0)
        for what, value, least in (("tasks", tasks, 1), ("seed", seed, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                pytest.fail(f"layerlab_run: {what}={value!r}: expected a whole number >= "
                            f"{least}", pytrace=False)  # fmt: skip
        settings = dict(kwargs.get("settings") or {})
        odd = [k for k, v in settings.items() if not isinstance(v, str | int | float | bool)]
        if odd:
            pytest.fail(f"layerlab_run: settings[{odd[0]!r}]: expected a plain value (text, "
                        "number or true/false), as --target-setting key=value", pytrace=False)  # fmt: skip
        arms = kwargs.get("mitigations") or ()
        scenarios = kwargs.get("scenarios")
        return Plan(
            target=str(target), mitigations=_names(arms), tasks=tasks, seed=seed,
            retriever=kwargs.get("retriever"),
            scenarios=None if scenarios is None else _names(scenarios),
            epochs=kwargs.get("epochs", 1), name=kwargs.get("name") or "",
            version=kwargs.get("version") or "",
            settings=tuple(sorted(settings.items())),
            corpus=None if kwargs.get("corpus") is None else str(kwargs["corpus"]),
        )  # fmt: skip

    # --- the run ---------------------------------------------------------------------------

    def get(self, plan: Plan, scratch: Callable[[], Path]) -> MatrixRun:
        """The plan's run: made once per session, the same object for every test after."""
        if plan not in self.runs:
            try:
                self.runs[plan] = self.make(plan, scratch)
            except _Refused as exc:
                self.runs[plan] = str(exc)
        got = self.runs[plan]
        if isinstance(got, str):
            pytest.fail(got, pytrace=False)
        return got

    def make(self, plan: Plan, scratch: Callable[[], Path]) -> MatrixRun:
        from layerlab import paths
        from layerlab.corpus import build
        from layerlab.corpus.spec import SpecError, spec_hash
        from layerlab.harness import config as run_config
        from layerlab.harness import live
        from layerlab.harness.targets import TargetError, parse_target
        from layerlab.system import retrieval

        where = f"layerlab_run({plan.target!r})"
        notes: list[str] = []
        try:
            spec = parse_target(plan.target, plan.name, plan.version, dict(plan.settings))
            corpus_dir = Path(plan.corpus) if plan.corpus else paths.CORPUS_DIR
            inputs = run_config.Inputs(corpus_dir)
            if plan.tasks > len(inputs.corpus.tasks):
                n = len(inputs.corpus.tasks)
                raise ValueError(f"tasks={plan.tasks}: the corpus has {n} tasks (expected 1 to {n})")
            out, resume = self.folder(plan, spec, scratch)
            config = run_config.RunConfig(  # the baseline arm beside the guards named
                run_config.System((run_config.ModelGroup(),), target=spec),
                run_config.Matrix(
                    scenarios=plan.scenarios, mitigations=plan.mitigations or None, baseline=True,
                    limit=plan.tasks, limit_seed=plan.seed, epochs=plan.epochs,
                    retriever=plan.retriever or retrieval.REPORTED.name, corpus_dir=corpus_dir,
                ),
                live.RunSettings(resume=resume),
                run_config.Outputs(out, progress=False),
                labels={"mitigations": "mitigations", "limit": "tasks"},
            )  # fmt: skip
            (group,) = config.groups(inputs.corpus.tasks, list(inputs.scenarios))
            began = time.perf_counter()
            result = live.run_live(inputs.corpus, inputs.key, inputs.scenarios, group.config, out,
                                   scenario_hash=spec_hash(paths.SCENARIO_SPEC),
                                   say=notes.append, run=config.execution)  # fmt: skip
        except (TargetError, live.LiveRunError, build.CorpusError, SpecError, ValueError,
                OSError) as exc:  # fmt: skip
            raise _Refused(f"{where}: {exc}") from None
        if result.over_error_rate or not result.complete:
            why = result.message.replace("\n", "; ")
            raise _Refused(f"{where}: the run failed ({why}); its records are in {out}")
        try:
            run = MatrixRun(out, observe=self.read.append)
        except CheckError as exc:
            raise _Refused(f"{where}: {exc}") from None
        self.made.append(Made(plan, run, int(result.manifest.get("records", 0)),
                              result.counters.records - result.counters.skipped_done,
                              time.perf_counter() - began, notes))  # fmt: skip
        return run

    def folder(self, plan: Plan, spec: Any, scratch: Callable[[], Path]) -> tuple[Path, bool]:
        """Where the plan's run goes, and whether to resume it: under ``--layerlab-out`` a
        folder named by the plan and the target's code (and the pytest-xdist worker), resumed
        when it is there; else a new folder under pytest's temporary folder."""
        label = f"{spec.name}-{_digest(asdict(plan))}"
        kept, _, here = self.given("out")
        if kept is None:
            return scratch() / label, False
        from layerlab.harness.targets.identity import fingerprint
        from layerlab.system import retrieval

        base = here / kept
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        code: dict[str, Any] = {"target": fingerprint(spec), "worker": worker}
        if plan.retriever and retrieval.is_external(plan.retriever):  # a team's retriever's too
            code["retriever"] = retrieval.code(plan.retriever)
        return base / f"{spec.name}-{_digest({'plan': asdict(plan), **code})}", True


class _Refused(Exception):
    """A plan that cannot be run: one line, the test's error."""


def _names(value: str | Sequence[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# --- hooks and fixtures ----------------------------------------------------------------------

_SESSION = pytest.StashKey[Session]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("layerlab", "layerlab: the fault matrix (docs/pytest.md)")
    for name, (ini, text) in OPTIONS.items():
        group.addoption(f"--layerlab-{name}", dest=f"layerlab_{name}", default=None,
                        metavar=name.upper(), help=text)  # fmt: skip
        parser.addini(ini, text, default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "layerlab(target, mitigations=..., tasks=..., seed=..., ...): the run the `layerlab` "
        "fixture returns (the arguments of layerlab_run)",
    )
    config.stash[_SESSION] = Session(config)


@pytest.fixture(scope="session")
def layerlab_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                 ) -> Callable[..., MatrixRun]:  # fmt: skip
    """``layerlab_run(target=None, *, mitigations=(), tasks=None, seed=None, retriever=None,
    scenarios=None, epochs=1, name="", version="", settings=None, corpus=None)``: the target
    under the fault matrix, run once per session and configuration; a
    :class:`~layerlab.integrations.checks.MatrixRun` (``safe``, ``correct``, ``rate``,
    ``verdict``, ``specific``, ``findings``). ``mitigations``: the guards beside the baseline
    arm (``"all"``: every matrix arm; none: the contract arms strict and repair)."""
    session = request.config.stash[_SESSION]

    def run(target: str | None = None, **kwargs: Any) -> MatrixRun:
        __tracebackhide__ = True
        plan = session.plan({"target": target, **kwargs})
        return session.get(plan, lambda: tmp_path_factory.mktemp("layerlab"))

    return run


@pytest.fixture
def layerlab(request: pytest.FixtureRequest, layerlab_run: Callable[..., MatrixRun]) -> MatrixRun:
    """The run of the test's closest ``@pytest.mark.layerlab(target, ...)`` (the arguments of
    ``layerlab_run``; no mark: the options'), shared with every test of the same configuration."""
    mark = request.node.get_closest_marker("layerlab")
    args, kwargs = (mark.args, dict(mark.kwargs)) if mark else ((), {})
    if len(args) > 1:
        pytest.fail("@pytest.mark.layerlab: one positional argument, the target; the others by "
                    "name", pytrace=False)  # fmt: skip
    return layerlab_run(*args, **kwargs)


def pytest_runtest_setup(item: pytest.Item) -> None:
    session = item.config.stash.get(_SESSION, None)
    if session is not None:
        session.read.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test that read rates or verdicts gets them explained in full (a section)."""
    outcome = yield
    report = outcome.get_result()
    session = item.config.stash.get(_SESSION, None)
    if session is None or call.when != "call" or not report.failed or not session.read:
        return
    texts = list(dict.fromkeys(x.explain() for x in session.read))
    report.sections.append((SECTION, "\n\n".join(texts)))


def pytest_assertrepr_compare(config: pytest.Config, op: str, left: Any, right: Any
                              ) -> list[str] | None:  # fmt: skip
    """``assert run.safe("stale_index") >= 0.9``: the cell, its count and interval, and the
    layer's finding; ``assert run.verdict(x) == "specific"``: the verdict's line."""
    ours = [x for x in (left, right) if isinstance(x, Rate | Verdict)]
    if not ours:
        return None

    def shown(x: Any) -> str:
        if isinstance(x, Rate):
            return x.describe()
        return f"verdict of {x.arm}: {str(x)!r}" if isinstance(x, Verdict) else repr(x)

    why = [line for x in ours for line in (x.finding if isinstance(x, Rate) else [x.line])]
    return [f"{shown(left)} {op} {shown(right)}", *dict.fromkeys(why)]


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    session = config.stash.get(_SESSION, None)
    if session is None or not session.made:
        return
    tr = terminalreporter
    tr.section("layerlab")
    for m in session.made:
        p = m.plan
        arms = ", ".join(m.run.arms)
        asked = (f"{m.asked} asked in {m.seconds:.1f} s" if m.asked
                 else "all already there (resumed: nothing asked)")  # fmt: skip
        tr.write_line(f"{p.target}: {p.tasks} tasks x {len(m.run.scenarios)} scenarios x "
                      f"{len(m.run.arms)} arms ({arms}), {m.records} records, {asked}; "
                      f"{m.run.folder}")  # fmt: skip
        for note in m.notes:
            tr.write_line(f"  {note}")
        if config.getoption("verbose") > 0 and m.run.findings:
            for line in m.run.findings.splitlines():
                tr.write_line(f"  - {line}")
