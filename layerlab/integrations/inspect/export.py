"""A finished layerlab run as an Inspect AI log: ``layerlab export inspect RUN [-o FILE]``.

The run folder is checked as every reader of runs checks it (:func:`layerlab.archive.check_path`:
manifest, checksums, record count; a partial run is refused), and its records become one Inspect
``EvalLog`` written with Inspect's own writer (``write_eval_log``), so ``inspect view`` and
``read_eval_log`` open it:

* the eval spec: task ``layerlab/fault_matrix`` (displayed as the run), the model the run's
  records name (``provider/model``: a model, a reference agent, ``target/<name>`` for a team's
  system, ``deterministic/extractive``; a run of several models exports one, ``--model``), the
  dataset (the corpus's name and the samples' ids), epochs (the run's replicates), and the
  manifest's run id, kind, provenance and arms, agent or target settings in its metadata;
* one sample per (scenario, arm, task) and epoch per replicate: id ``scenario:arm:task_id`` (as
  the Inspect task's), input the task's public question (from the corpus the run was made on:
  its hash is checked against the manifest's provenance), metadata the scenario, arm and the
  task's public fields, and the scorer's Score
  (:func:`~layerlab.integrations.inspect.scorer.score_of`) from the record's labels;
* results computed by Inspect from those Scores with the task's own metrics.

What the archive does not keep, the log does not have: an archive keeps labels, never a reply,
an answer or a document id (its allowlist), so a sample's output is empty and its Score carries
no answer. The answer key is not read.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from layerlab import archive
from layerlab.archive.schema import Record
from layerlab.corpus.build import Corpus
from layerlab.integrations.inspect import matrix
from layerlab.integrations.inspect.scorer import SCORER, metric_definitions, score_of

TASK = "layerlab/fault_matrix"
EXPECTED = "a layerlab run folder (manifest.json and records.parquet, as `layerlab run` writes)"


class ExportError(ValueError):
    """A run that cannot be exported (one line: the path, and what was expected)."""


def default_out(run: Path) -> Path:
    """Where the log goes without ``-o``: Inspect's log folder (``$INSPECT_LOG_DIR``, else
    ``./logs``, where ``inspect view`` looks), named after the run folder."""
    return Path(os.environ.get("INSPECT_LOG_DIR") or "logs") / f"{Path(run).resolve().name}.eval"


def load_run(run: Path) -> tuple[dict[str, Any], list[Record]]:
    """A finished run folder's manifest and records, checked; :class:`ExportError` otherwise."""
    run = Path(run)
    if not run.is_dir():
        what = "does not exist" if not run.exists() else "is a file, not a folder"
        raise ExportError(f"{run}: {what}; expected {EXPECTED}")
    if not (run / archive.MANIFEST).is_file():
        raise ExportError(f"{run}: no {archive.MANIFEST}; expected {EXPECTED}")
    try:
        report = archive.check_path(run)
        manifest = archive.read_manifest(run)
    except archive.ArchiveError as exc:
        raise ExportError(f"{exc}; expected {EXPECTED}") from None
    if manifest.get("kind") == "langchain_study":
        raise ExportError(f"{run}: a LangChain study run ({archive.STUDY_ARCHIVE}); expected a "
                          f"record run: {EXPECTED}")  # fmt: skip
    if report.get("archive") is None:
        raise ExportError(f"{run}: no records yet ({report.get('note')}); expected {EXPECTED}")
    if report["partial"]:
        raise ExportError(
            f"{run}: a partial run ({report['records']} of {report['expected_records'] or '?'} "
            "records); finish it with --resume first (an Inspect log reads as a finished eval)"
        )
    return manifest, archive.read_records(Path(report["archive"]))


def _model(run: Path, records: Sequence[Record], model: str | None) -> str:
    names = sorted({f"{r.provider}/{r.model}" for r in records})
    if model is not None:
        if model not in names:
            raise ExportError(f"--model {model!r}: not a model of {run} (it holds: "
                              f"{', '.join(names)})")  # fmt: skip
        return model
    if len(names) != 1:
        raise ExportError(f"{run}: holds {len(names)} models ({', '.join(names)}); an Inspect log "
                          "is one model's: pick one with --model")  # fmt: skip
    return names[0]


def _corpus(run: Path, manifest: dict[str, Any], folder: Path | None) -> Corpus:
    """The corpus the run was made on: the given (or committed) one, its hash checked."""
    from layerlab.archive.provenance import provenance_for

    try:
        corpus = matrix.corpus(matrix.corpus_folder(folder))
    except (OSError, ValueError) as exc:
        raise ExportError(f"--corpus {folder or 'the committed corpus'}: {exc}") from None
    want = archive.provenance_of(manifest).get("corpus")
    got = provenance_for(corpus, "", ())["corpus"]
    if want is not None and want != got:
        raise ExportError(
            f"{run}: made on another corpus (hash {want[:12]}) than "
            f"{folder or 'the committed one'} ({got[:12]}); expected --corpus with the built "
            "corpus the run used"
        )
    return corpus


def eval_log(run: Path, corpus: Path | None = None, model: str | None = None) -> Any:
    """The Inspect ``EvalLog`` of a finished run (one model's records; see the module)."""
    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalPlan,
        EvalPlanStep,
        EvalSample,
        EvalSpec,
        recompute_metrics,
    )
    from inspect_ai.model import ChatMessageUser, ModelOutput

    run = Path(run)
    manifest, records = load_run(run)
    label = _model(run, records, model)
    recs = [r for r in records if f"{r.provider}/{r.model}" == label]
    tasks = {t.task_id: t for t in _corpus(run, manifest, corpus).tasks}
    missing = sorted({r.task_id for r in recs} - set(tasks))
    if missing:
        raise ExportError(f"{run}: task {missing[0]!r} is not in the corpus; expected --corpus "
                          "with the built corpus the run used")  # fmt: skip
    samples = []
    for r in sorted(recs, key=lambda r: (r.scenario, r.mitigation, r.task_id, r.replicate)):
        t = tasks[r.task_id]
        cell = matrix.Cell(r.scenario, r.mitigation, r.task_id)
        samples.append(EvalSample(
            id=matrix.sample_id(r.scenario, r.mitigation, r.task_id),
            epoch=r.replicate + 1,
            input=t.question,
            target="",
            messages=[ChatMessageUser(content=t.question)],
            output=ModelOutput(model=label),  # an archive keeps no reply
            metadata=matrix.metadata(cell, t, r.answerable),
            scores={SCORER: score_of(r.__dict__)},
        ))  # fmt: skip
    ids = list(dict.fromkeys(s.id for s in samples))
    run_id = str(manifest["run_id"])
    kept = ("kind", "corpus", "provenance", "mitigations", "scenarios", "agent", "target",
            "retriever", "n_tasks", "replicates", "epochs", "prompt_version", "layerlab_version")
    now = datetime.now(UTC).isoformat()
    spec = EvalSpec(
        eval_id=_short(run_id, label, "eval"),
        run_id=run_id,
        created=now,
        task=TASK,
        task_id=_short(run_id, label, "task"),
        task_display_name=f"layerlab run {run.resolve().name}",
        task_registry_name=None,
        dataset=EvalDataset(name=f"layerlab {manifest.get('corpus', 'corpus')}", samples=len(ids),
                            sample_ids=ids),  # fmt: skip
        model=label,
        config=EvalConfig(epochs=max(r.replicate for r in recs) + 1),
        scorers=[{"name": SCORER, "metrics": metric_definitions()}],  # type: ignore[list-item]
        metadata={"source": "layerlab export inspect", "run_folder": run.resolve().name,
                  "run_id": run_id,
                  **{k: manifest[k] for k in kept if k in manifest}},  # fmt: skip
    )
    plan = EvalPlan(name="layerlab run", steps=[EvalPlanStep(
        solver=f"layerlab/{manifest.get('kind', 'run')}",
        params={k: manifest[k] for k in ("agent", "target") if k in manifest})])  # fmt: skip
    log = EvalLog(status="success", eval=spec, plan=plan, samples=samples)
    log.stats.started_at = log.stats.completed_at = now
    recompute_metrics(log)
    return log


def _short(*parts: str) -> str:
    """A stable id for the log's eval and task ids (22 characters, as Inspect's)."""
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:22]


def write(run: Path, out: Path, corpus: Path | None = None, model: str | None = None) -> Any:
    """Write the run's Inspect log to ``out`` and return the log. Inspect's writer writes it in
    a temporary folder; its bytes then replace ``out`` atomically (nothing half-written)."""
    from inspect_ai.log import write_eval_log

    from layerlab._io import atomic_write_bytes

    log = eval_log(run, corpus, model)
    with tempfile.TemporaryDirectory(prefix="layerlab-export-") as tmp:
        staged = Path(tmp) / "log.eval"
        write_eval_log(log, str(staged), format="eval")
        atomic_write_bytes(Path(out), staged.read_bytes())
    return log
