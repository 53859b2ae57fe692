"""Which tasks a run asks: ``--limit N``'s stratified, seeded subset, the one owner of it.

A quick look at a model should still cover every domain and as many policy units as it can,
rather than the first N task ids (which are one domain's). :func:`stratified_tasks` interleaves
the domains and, within a domain, takes one question variant of each policy before a second
variant of any; every order is drawn from a seeded generator, so the same ``N`` and seed give the
same tasks (and the run id, which covers the task set, lets ``--resume`` find the run again).
:func:`select_tasks` is what every door of a run (the CLI, a run configuration, the Python API,
the pytest plugin) asks: the tasks named, then the limit drawn from them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from layerlab.corpus.build import Task

LIMIT_SEED = 0  # default seed of the --limit selection


def stratified_order(tasks: Sequence[Task], seed: int = LIMIT_SEED) -> tuple[str, ...]:
    """Every task id of ``tasks`` in one seeded, stratified order whose first ``n`` are the
    ``--limit n`` selection for every ``n`` (so the selections are nested: ``run live
    --until-decided`` grows its task set along it, each look holding the one before).

    Domains take turns (in a seeded order); each domain yields its policies in a seeded order,
    one variant each (a seeded variant per policy), before any policy gives a second variant.
    The generator's draws do not depend on how many tasks are taken, so the same seed gives the
    same order."""
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
        queues[d] = [
            variants[p][r] for r in range(depth) for p in pol_order if r < len(variants[p])
        ]
    domains = sorted(queues)
    domain_order = [domains[i] for i in rng.permutation(len(domains))]
    depth = max((len(q) for q in queues.values()), default=0)
    return tuple(
        queues[d][r].task_id for r in range(depth) for d in domain_order if r < len(queues[d])
    )


def stratified_tasks(tasks: Sequence[Task], n: int, seed: int = LIMIT_SEED) -> tuple[str, ...]:
    """``n`` task ids stratified by domain and policy unit, chosen with a seeded generator: the
    first ``n`` of :func:`stratified_order`, returned in the order of ``tasks``. ``n`` at least
    ``len(tasks)`` returns all."""
    if n < 1:
        raise ValueError(f"--limit: expected a number of tasks >= 1, got {n}")
    if n >= len(tasks):
        return tuple(t.task_id for t in tasks)
    chosen = set(stratified_order(tasks, seed)[:n])
    return tuple(t.task_id for t in tasks if t.task_id in chosen)

def select_tasks(
    tasks: Sequence[Task],
    named: Sequence[str] | None,
    limit: int | None,
    seed: int = LIMIT_SEED,
    field: str = "--limit",
) -> tuple[str, ...] | None:
    """A run's task ids: ``named`` (None: every task) as given, or with a ``limit`` its
    :func:`stratified_tasks` among the named ones (in corpus order); None when neither is given
    (every task). A limit above the tasks to choose from is refused (:class:`ValueError`, one
    line naming ``field``)."""
    if limit is None:
        return None if named is None else tuple(named)
    wanted = None if named is None else set(named)
    pool = [t for t in tasks if wanted is None or t.task_id in wanted]
    if limit > len(pool):
        raise ValueError(
            f"{field} {limit}: only {len(pool)} tasks to choose from (expected 1 to "
            f"{len(pool)}; leave {field} out to ask them all)"
        )
    return stratified_tasks(pool, limit, seed)
