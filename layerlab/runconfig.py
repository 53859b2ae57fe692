"""Which tasks a run asks: a stratified, seeded subset (``run live --limit N``).

A quick look at a model should still cover every domain and as many policy units as it can,
rather than the first N task ids (which are one domain's). :func:`stratified_tasks` interleaves
the domains and, within a domain, takes one question variant of each policy before a second
variant of any; every order is drawn from a seeded generator, so the same ``N`` and seed give the
same tasks (and the run id, which covers the task set, lets ``--resume`` find the run again).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from layerlab.corpus import Task

LIMIT_SEED = 0  # default seed of the --limit selection


def stratified_tasks(tasks: Sequence[Task], n: int, seed: int = LIMIT_SEED) -> tuple[str, ...]:
    """``n`` task ids stratified by domain and policy unit, chosen with a seeded generator.

    Domains take turns (in a seeded order); each domain yields its policies in a seeded order,
    one variant each (a seeded variant per policy), before any policy gives a second variant.
    The ids are returned in the order of ``tasks``. ``n`` at least ``len(tasks)`` returns all.
    """
    if n < 1:
        raise ValueError(f"--limit: expected a number of tasks >= 1, got {n}")
    if n >= len(tasks):
        return tuple(t.task_id for t in tasks)
    rng = np.random.default_rng(seed)
    by_domain: dict[str, dict[str, list[Task]]] = defaultdict(lambda: defaultdict(list))
    for t in tasks:
        by_domain[t.domain][t.policy_id].append(t)
    queues: dict[str, list[Task]] = {}
    for d in sorted(by_domain):
        pols = sorted(by_domain[d])
        pol_order = [pols[i] for i in rng.permutation(len(pols))]
        variants = {}
        for p in pol_order:
            vs = sorted(by_domain[d][p], key=lambda t: t.task_id)
            variants[p] = [vs[i] for i in rng.permutation(len(vs))]
        depth = max(len(v) for v in variants.values())
        queues[d] = [variants[p][r] for r in range(depth) for p in pol_order if r < len(variants[p])]
    domains = sorted(queues)
    domain_order = [domains[i] for i in rng.permutation(len(domains))]
    chosen: set[str] = set()
    r = 0
    while len(chosen) < n:
        for d in domain_order:
            if r < len(queues[d]) and len(chosen) < n:
                chosen.add(queues[d][r].task_id)
        r += 1
    return tuple(t.task_id for t in tasks if t.task_id in chosen)
