"""YAML run configurations (``run live --config run.yaml``): the public face, and the copy a run keeps.

A run configuration names the models, each with its own endpoints and settings, the scenarios,
mitigations, tasks, budget and epochs (docs/run-config.md). Example::

    models:
      - model: hosted_vllm/meta-llama/Llama-3.1-8B-Instruct
        api_base: [http://gpu1:8000/v1, http://gpu2:8000/v1]
        response_format: json_schema
      - model: openai/gpt-4o-mini
        temperature: 0.0
      - model: local/smollm2-135m
    defaults: {timeout: 120, max_tokens: 400}
    scenarios: [clean, stale_index, schema_drift]
    mitigations: [strict, repair]
    limit: 24
    epochs: 2                 # every cell asked twice (replicates: the earlier name)
    seed: 11                  # base of the per-record seeds sent to servers (also per model)
    budget: 5000
    max_error_rate: 0.1       # exit 4 when a model's provider-error share is above this
    retry_seed: 3             # seed of the retry jitter
    sample_log: ~/.cache/layerlab/samples/run.jsonl   # private per-sample log (relative: to this file)
    gate: {min: {S:clean: 0.6}, max: {GF:stale_index: 0.1}}   # layerlab gate RUN --config run.yaml
    agent: {protocol: auto, max_steps: 4}   # agent mode: the model calls the faulted tools

Your own system instead of ``models`` (README, "Test your own RAG system")::

    target: {spec: "python:my_rag.app:answer", name: my-rag, version: "1.4", settings: {top_k: 3}}

Your own retriever or vector store as the tool's first stage (docs/retrievers.md)::

    retriever: "python:my_rag.store:MyRetriever"     # or langchain:my_rag.store:make_store

Who owns what: the file's schema and loader are :mod:`layerlab.harness.configfile`'s, the run
configuration it becomes :class:`layerlab.harness.config.RunConfig`'s (``from_yaml``), its
execution :mod:`layerlab.harness.runner`'s, and ``--limit``'s tasks
:mod:`layerlab.harness.selection`'s (the names below are kept for their callers). This module
owns the copy of the file a run folder keeps (:func:`stored_config`). Every ``run live`` setting
a paper reports has a key; the flags it owns are refused next to ``--config`` rather than
silently ignored. Keys never go in the file: they come from the environment only.
"""

from __future__ import annotations

from collections.abc import Sequence

from layerlab._secrets import SECRET_MARK, is_secret, redact, secret_shape
from layerlab.corpus.build import Task
from layerlab.harness.config import SUBRUNS, Group, RunConfig, spec_matrix, spec_system
from layerlab.harness.configfile import (
    AgentSpec,
    ModelEntry,
    RunConfigSpec,
    TargetEntry,
    endpoints,
    load_gate,
    load_run_config,
)
from layerlab.harness.selection import LIMIT_SEED, stratified_order, stratified_tasks
from layerlab.models.routing import redact_urls

__all__ = [
    "CONFIG_COPY", "LIMIT_SEED", "SUBRUNS", "AgentSpec", "Group", "ModelEntry", "RunConfigSpec",
    "TargetEntry", "endpoints", "load_gate", "load_run_config", "plan", "stored_config",
    "stratified_order", "stratified_tasks",
]  # fmt: skip

CONFIG_COPY = "run.yaml"  # the configuration, its endpoints redacted, stored in the run folder


def plan(spec: RunConfigSpec, all_scenarios: Sequence[str], tasks: Sequence[Task]) -> list[Group]:
    """The live runs a loaded configuration makes: one per distinct set of model settings
    (:meth:`RunConfig.groups`)."""
    config = RunConfig(spec_system(spec), spec_matrix(spec, [t.task_id for t in tasks]))
    return config.groups(tasks, all_scenarios)


def stored_config(text: str) -> str:
    """The run configuration as the run folder keeps it: as given, except that every secret is
    replaced by ``'(secret: not stored)'`` (a target setting that is one by its name or value,
    any other value shaped like one: :func:`layerlab._secrets.is_secret`; the
    manifest keeps the settings' hash) and every URL (endpoints, and any in a comment) by
    ``local`` or ``remote``: a shareable folder holds no secret, host or port (credentials in an
    endpoint are refused before, :func:`load_run_config`)."""
    spans, values = _secret_spans(text)
    for start, end in sorted(spans, reverse=True):  # from the end: earlier offsets hold
        keep = "\n" if text[start:end].endswith("\n") else ""  # a block scalar's last newline
        text = f"{text[:start]}'{SECRET_MARK}'{keep}{text[end:]}"
    return redact_urls(redact(text, values))  # and any left in comments


def _secret_spans(text: str) -> tuple[set[tuple[int, int]], list[str]]:
    """The (start, end) character offsets in ``text`` of the YAML values that are secrets: a
    ``target.settings`` value by its name or shape, any other scalar by its shape; and those
    values. Each node is visited once (an alias is its anchor's node)."""
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:  # not reached: the file was loaded before the run
        return set(), []
    spans: set[tuple[int, int]] = set()
    values: list[str] = []
    seen: set[int] = set()

    def mark(n: yaml.Node) -> None:
        spans.add((n.start_mark.index, n.end_mark.index))
        values.append(str(n.value))

    def walk(n: yaml.Node | None, settings: bool, path: tuple[str, ...]) -> None:
        if n is None or id(n) in seen:
            return
        seen.add(id(n))
        if isinstance(n, yaml.ScalarNode):
            if secret_shape(n.value):
                mark(n)
            return
        pairs = n.value if isinstance(n, yaml.MappingNode) else [(None, v) for v in n.value]
        for k, v in pairs:
            name = k.value if isinstance(k, yaml.ScalarNode) else ""
            if settings and isinstance(v, yaml.ScalarNode) and is_secret(name, v.value):
                seen.add(id(v))
                mark(v)
                continue
            walk(v, path + (name,) == ("target", "settings"), (*path, str(name)))

    walk(root, False, ())
    return spans, values
