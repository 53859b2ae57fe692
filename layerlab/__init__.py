"""layerlab: the reference implementation of LayerRAG-Bench.

The Python API, each name the owner's own function or class, imported on first use (so
``import layerlab`` and ``layerlab --help`` stay fast):

===================== ========================================================================
name                  what it is (owner)
===================== ========================================================================
``load_corpus``       the built corpus, public side (:func:`layerlab.corpus.build.load`)
``load_answer_key``   the answer key, evaluator side (:func:`layerlab.corpus.build.load_answer_key`)
``load_scenarios``    the fault scenarios by name (:func:`layerlab.faults.scenario.load_scenarios`)
``load_mitigations``  the mitigation arms (:func:`layerlab.mitigations.load_mitigations`)
``spec_hash``         a spec file's hash, e.g. the ``scenario_hash`` of ``run_live``
                      (:func:`layerlab.corpus.spec.spec_hash`)
``run_deterministic`` the deterministic matrix, no model: records
                      (:func:`layerlab.harness.deterministic.run_deterministic`)
``LiveConfig``        what determines a live run's records (:class:`layerlab.harness.live.LiveConfig`)
``AgentMode``         agent mode for ``LiveConfig(agent=...)``: the model calls the faulted tools
                      (:class:`layerlab.harness.live.AgentMode`)
``run_live``          a live matrix through litellm into a run folder
                      (:func:`layerlab.harness.live.run_live`)
``load_archive``      run folders' or archives' records as a DataFrame, each checked on read
                      (:func:`layerlab.analysis.records.records_frame`)
``results``           a run folder's results: rates with intervals per model, scenario and arm
                      (:func:`layerlab.analysis.results.for_run`)
===================== ========================================================================

For example::

    import layerlab
    from layerlab import paths

    corpus, key = layerlab.load_corpus(), layerlab.load_answer_key()
    records = layerlab.run_deterministic(corpus, key, layerlab.load_scenarios())
    config = layerlab.LiveConfig(models=("layerlab/extractive",), scenarios=("clean",))
    layerlab.run_live(corpus, key, layerlab.load_scenarios(), config, out,
                      scenario_hash=layerlab.spec_hash(paths.SCENARIO_SPEC))
    layerlab.results(out)
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from layerlab.analysis.records import records_frame as load_archive
    from layerlab.analysis.results import for_run as results
    from layerlab.corpus.build import load as load_corpus
    from layerlab.corpus.build import load_answer_key
    from layerlab.corpus.spec import spec_hash
    from layerlab.faults.scenario import load_scenarios
    from layerlab.harness.deterministic import run_deterministic
    from layerlab.harness.live import AgentMode, LiveConfig, run_live
    from layerlab.mitigations import load_mitigations

_API: dict[str, tuple[str, str]] = {
    "load_corpus": ("layerlab.corpus.build", "load"),
    "load_answer_key": ("layerlab.corpus.build", "load_answer_key"),
    "load_scenarios": ("layerlab.faults.scenario", "load_scenarios"),
    "load_mitigations": ("layerlab.mitigations", "load_mitigations"),
    "spec_hash": ("layerlab.corpus.spec", "spec_hash"),
    "run_deterministic": ("layerlab.harness.deterministic", "run_deterministic"),
    "LiveConfig": ("layerlab.harness.live", "LiveConfig"),
    "AgentMode": ("layerlab.harness.live", "AgentMode"),
    "run_live": ("layerlab.harness.live", "run_live"),
    "load_archive": ("layerlab.analysis.records", "records_frame"),
    "results": ("layerlab.analysis.results", "for_run"),
}

__all__ = [
    "LiveConfig",
    "AgentMode",
    "__version__",
    "load_answer_key",
    "load_archive",
    "load_corpus",
    "load_mitigations",
    "load_scenarios",
    "results",
    "run_deterministic",
    "run_live",
    "spec_hash",
]


def __getattr__(name: str) -> Any:
    """PEP 562: import an API name's owner on first use."""
    try:
        module, attr = _API[name]
    except KeyError:
        raise AttributeError(f"module 'layerlab' has no attribute {name!r}") from None
    value = getattr(import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
