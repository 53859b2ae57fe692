"""Inspect AI, both ways (the ``inspect`` extra): the fault matrix as an Inspect task, and a
finished layerlab run as an Inspect log.

* ``task`` — ``inspect eval layerlab/fault_matrix --model ...``: one Inspect sample per (scenario,
  task) of the matrix, the model calling the scenario's faulted ``search`` and ``open_document``
  as Inspect tools, under one arm;
* ``scorer`` — the Inspect scorer over layerlab's one scorer (S = E ∧ R ∧ G ∧ V, safe
  resolution, GF, the diagnosis): the only module here that reads the answer key, and the
  score's shape (:func:`~layerlab.integrations.inspect.scorer.score_of`) that the export shares;
* ``export`` — ``layerlab export inspect RUN``: a run folder's records as an Inspect ``.eval``
  log, written with Inspect's own writer (labels only, as the archive keeps them);
* ``_registry`` — what Inspect's ``inspect_ai`` entry point loads (pyproject.toml).
"""

__all__ = ["_registry", "export", "scorer", "task"]
