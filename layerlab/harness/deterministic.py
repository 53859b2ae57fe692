"""The deterministic harness: every task under every scenario and mitigation arm, no model.

For each scenario the index view is built once, the retriever is fitted on it and all questions
are searched in one batch (:mod:`layerlab.harness.prepare`); each record then goes through the one
record step (:mod:`layerlab.harness.step`) with the extractive reader (or another registered
reader) as its reader.
"""

from __future__ import annotations

import gc
import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from layerlab import mitigations
from layerlab.archive import Record
from layerlab.corpus.build import AnswerKey, Corpus
from layerlab.faults.scenario import Scenario
from layerlab.harness.prepare import RankingCache, input_hash, prepare
from layerlab.harness.step import Reading, RecordContext, RecordStep, as_arm
from layerlab.mitigations import Arm
from layerlab.scoring.score import table_diagnostic
from layerlab.system import retrieval
from layerlab.system.reader import (
    ExtractiveReader,
    Reader,
    ReaderInput,
)


def contract_arms() -> tuple[str, ...]:
    """The contract arms of the committed mitigations spec, baseline first (Tables 2, 4, 5)."""
    return mitigations.load_mitigations().contract_arms



def run_deterministic(
    corpus: Corpus,
    key: AnswerKey,
    scenarios: Mapping[str, Scenario],
    modes: Sequence[str | Arm] | None = None,
    retriever: str = retrieval.REPORTED.name,
    reader: Reader | None = None,
    run_id: str = "deterministic",
) -> list[Record]:
    """All tasks x scenarios x mitigation arms (default: the contract arms) through the
    extractive reader (or ``reader``). Arms are names in the committed mitigations spec or
    :class:`~layerlab.mitigations.Arm` values (e.g. from another spec file)."""
    reader = reader or ExtractiveReader()
    arms = [as_arm(m) for m in (modes if modes is not None else contract_arms())]
    with _gc_paused():
        return _run_deterministic(corpus, key, scenarios, arms, retriever, reader, run_id)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: a run allocates hundreds of thousands of small
    acyclic values (payload dicts, frozen records) that keep triggering collections that find
    nothing (about a fifth of the run's time). Reference counting still frees them."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _run_deterministic(
    corpus: Corpus,
    key: AnswerKey,
    scenarios: Mapping[str, Scenario],
    arms: Sequence[Arm],
    retriever: str,
    reader: Reader,
    run_id: str,
) -> list[Record]:
    records: list[Record] = []
    rankings: RankingCache = {}
    hashes: dict[ReaderInput, str] = {}  # arms that deliver the same input share its hash
    ctx = RecordContext(corpus, key, "deterministic", reader.name, run_id)
    for scenario in scenarios.values():
        prepared = prepare(corpus, scenario, retriever, rankings)
        for task in corpus.tasks:
            for a in arms:
                step = RecordStep(task, prepared, a)
                inp, reading = step.inp, None
                if inp is not None:
                    ph = hashes.get(inp) or hashes.setdefault(inp, input_hash(inp))
                    reading = Reading(reader.read(inp), ph)
                records.append(step.finish(ctx, reading).record)
    return records


def run_mitigation_archive(
    out: Path,
    arms: Sequence[str] | None = None,
    reader: str = "extractive",
    mitigations_path: Path | None = None,
    corpus_dir: Path | None = None,
    scenario_paths: Sequence[Path] = (),
) -> dict[str, Any]:
    """Run the deterministic harness over the baseline and every matrix arm (or ``arms``) on
    the committed corpus (or the corpus folder ``corpus_dir``) and scenarios (or those of
    ``scenario_paths``' files, in order: the transport matrix runs the nine and
    ``scenarios_transport.yaml``), and write a run folder (``records.parquet`` + manifest): the
    archive Table 10 is computed from (:mod:`layerlab.analysis.specificity`), ``layerlab
    mitigation run``."""
    from layerlab import __version__, archive, paths
    from layerlab.corpus import build as corpus_mod
    from layerlab.corpus.spec import spec_hash
    from layerlab.faults.scenario import load_scenarios
    from layerlab.mitigations import ARM_FILES, book, load_mitigations
    from layerlab.system.reader import READERS

    spec = load_mitigations(mitigations_path)
    names = [spec.baseline, *[a for a in (arms or spec.matrix_arms) if a != spec.baseline]]
    c, key = corpus_mod.load(corpus_dir), corpus_mod.load_answer_key(corpus_dir)
    spaths = [Path(p) for p in scenario_paths] or [paths.SCENARIO_SPEC]
    scen: dict[str, Scenario] = {}
    for p in spaths:
        scen.update(load_scenarios(p))
    mpath = Path(mitigations_path or paths.MITIGATION_SPEC)
    hashes = {
        "corpus": c.spec_hash,
        "scenarios": spec_hash(spaths[0]),
        # each further scenario file's hash (a transport matrix's scenarios_transport.yaml)
        **{f"scenarios:{p.name}": spec_hash(p) for p in spaths[1:]},
        "mitigations": spec_hash(mpath),
        # a plug-in's arms are part of what determines the records: each arms file's hash
        **{f"mitigations:{n}": spec_hash(Path(ARM_FILES[n])) for n in sorted(ARM_FILES)},
    }
    ident = {"v": __version__, **hashes, "arms": names, "reader": reader}
    run_id = "mitig-" + hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    recs = run_deterministic(
        c,
        key,
        scen,
        [spec.arm(n) for n in names],
        reader=READERS.lookup(reader)(),
        run_id=run_id,
    )
    manifest = archive.Manifest(
        run_id=run_id,
        kind="deterministic",
        layerlab_version=__version__,
        corpus=c.name,
        spec_hashes=hashes,
        models=[f"deterministic/{reader}"],
        scenarios=list(scen),
        mitigations=names,
        mitigation_arms=book.manifest_entry(spec, names),
        n_tasks=len(c.tasks),
        expected_records=len(names) * len(scen) * len(c.tasks),
        complete=True,
    )
    return archive.write_run(Path(out), recs, manifest)


def clear_caches() -> None:
    """Forget the memoised pure-function results (span extraction, answer normalisation) that
    the harness shares across runs in one process; benchmarks call it to time a cold run."""
    from layerlab.corpus import extract, text

    extract.extract.cache_clear()
    text.clear_caches()


def _rate(xs: list[bool]) -> float:
    return round(sum(xs) / len(xs), 4) if xs else 0.0


def summarize(records: Iterable[Record]) -> dict[str, Any]:
    """Per scenario x mode rates (success, groundedness false positives, safe resolution)."""
    records = list(records)
    cells: dict[tuple[str, str], list[Record]] = defaultdict(list)
    order: list[str] = []
    for r in records:
        if r.scenario not in order:
            order.append(r.scenario)
        cells[(r.scenario, r.mitigation)].append(r)
    baseline = mitigations.load_mitigations().baseline
    modes = sorted({r.mitigation for r in records}, key=lambda m: (m != baseline, m))

    def table(attr: str) -> dict[str, dict[str, float]]:
        return {
            s: {
                m: _rate([getattr(r, attr) for r in cells[(s, m)]])
                for m in modes
                if (s, m) in cells
            }
            for s in order
        }

    def counts(rs: list[Record]) -> dict[str, int]:  # a correct abstention counts as resolved
        c = Counter(table_diagnostic(r.diagnostic, r.success, r.safe_resolution) for r in rs)
        return dict(sorted(c.items()))

    diagnostics = {s: {m: counts(cells[(s, m)]) for m in modes} for s in order}
    return {
        "records": len(records),
        "success": table("success"),
        "grounded_false_positive": table("grounded_false_positive"),
        "safe_resolution": table("safe_resolution"),
        "reached_reader": sum(r.reached_reader for r in records),
        "diagnostics": diagnostics,
    }
