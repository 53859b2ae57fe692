"""Shards for CI (issue 31, item 6): ``run live --shard I/N`` runs a deterministic, balanced
slice of the run's tasks, every scenario, arm and replicate of a task in the same shard (so the
pairs the paired effects need stay together); ``archive merge`` of the N shard folders gives the
unsharded run's archive files byte for byte (:mod:`layerlab.archive.merge`).

Shard I (from 1) of N holds the tasks at positions I-1, I-1+N, I-1+2N, ... of the run's task
list in corpus order (the ``--tasks``/``--limit`` selection or every task): the shards' sizes
differ by at most one task, and domains, which the corpus orders task by task, spread over the
shards. Every shard has the unsharded run's id (its records are the unsharded run's records);
the manifest's ``shard`` key says which slice a folder holds.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

Shard = tuple[int, int]  # (index from 1, count)


def parse_shard(text: str) -> Shard:
    """``I/N`` (1 <= I <= N) as ``(I, N)``; a ValueError in one line otherwise."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise ValueError(f"--shard {text!r}: expected I/N with 1 <= I <= N, e.g. 2/4")
    return int(m.group(1)), int(m.group(2))


def check_shard(shard: Shard, n_tasks: int) -> None:
    """Refuse a shard of nothing: more shards than tasks."""
    index, count = shard
    if not 1 <= index <= count:
        raise ValueError(f"--shard {index}/{count}: expected 1 <= I <= N")
    if count > n_tasks:
        raise ValueError(
            f"--shard {index}/{count}: {count} shards of {n_tasks} task(s) leave a shard empty "
            f"(expected N <= {n_tasks})"
        )


def shard_tasks(task_ids: Sequence[str], shard: Shard | None) -> list[str]:
    """The tasks of ``shard`` among ``task_ids`` (in corpus order); all of them for None."""
    if shard is None:
        return list(task_ids)
    index, count = shard
    return [t for i, t in enumerate(task_ids) if i % count == index - 1]


def label(shard: Shard) -> dict[str, int]:
    """The manifest's ``shard`` key."""
    return {"index": shard[0], "count": shard[1]}
