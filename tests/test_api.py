"""The public Python API (``layerlab.*``): lazy, each name its owner's, and usable end to end on
small inputs: corpus and scenarios, the deterministic matrix, a live run with the reference agent
(no model), and the analysis of its archive."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import layerlab
from layerlab import paths


def test_import_layerlab_is_cheap_and_lists_the_api() -> None:
    code = (
        "import json, sys, layerlab; "
        "print(json.dumps([sorted(m for m in ('pandas', 'pyarrow', 'pydantic', 'litellm', "
        "'numpy', 'layerlab.harness', 'layerlab.mitigations') if m in sys.modules), dir(layerlab)]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    heavy, names = json.loads(proc.stdout)
    assert heavy == []
    assert set(layerlab.__all__) <= set(names)
    assert set(layerlab.__all__) == {"__version__", *layerlab._API}


@pytest.mark.parametrize("name", [n for n in layerlab.__all__ if n != "__version__"])
def test_each_name_is_its_owners_own(name: str) -> None:
    module, attr = layerlab._API[name]
    assert getattr(layerlab, name) is getattr(importlib.import_module(module), attr)
    assert getattr(layerlab, name).__doc__


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'no_such_thing'"):
        layerlab.no_such_thing  # noqa: B018


def test_the_api_end_to_end_on_small_inputs(tmp_path: Path) -> None:
    corpus, key = layerlab.load_corpus(), layerlab.load_answer_key()
    scenarios = layerlab.load_scenarios()
    spec = layerlab.load_mitigations()
    assert len(corpus.tasks) == len(key) and "clean" in scenarios and spec.baseline in spec.arms

    clean = {"clean": scenarios["clean"]}
    records = layerlab.run_deterministic(corpus, key, clean, [spec.baseline])
    assert len(records) == len(corpus.tasks)
    assert {(r.scenario, r.mitigation) for r in records} == {("clean", spec.baseline)}

    tasks = tuple(t.task_id for t in corpus.tasks[:5])
    config = layerlab.LiveConfig(
        models=("layerlab/extractive",), scenarios=("clean",), task_ids=tasks
    )
    out = tmp_path / "run"
    res = layerlab.run_live(
        corpus, key, scenarios, config, out,
        scenario_hash=layerlab.spec_hash(paths.SCENARIO_SPEC), cache_dir=tmp_path / "cache",
    )  # fmt: skip
    assert res.complete, res.message

    frame = layerlab.load_archive(out)
    assert len(frame) == len(tasks) * len(config.mitigations)
    assert set(frame["task_id"]) == set(tasks)
    results = layerlab.results(out)
    assert results["complete"] and results["records"] == len(frame)
    assert results["run_id"] == res.manifest["run_id"]
