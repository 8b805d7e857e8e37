"""Exclusive baselines, one job per GPU and no sharing: ``exclusive-fifo-strict`` (Gavel's ``fifo``),
``exclusive-fifo-backfill`` and ``exclusive-sjf``.

The two FIFOs differ where a job at the head of the queue does not fit on the free GPUs. Strict FIFO, the
semantics of Gavel's ``FIFOPolicy`` (``scheduler/policies/fifo.py``: the allocation loop ``break``s at the
first queued job no worker type has room for), stops there: no later job starts before it, so a big job at
the head can leave GPUs idle. The backfilling FIFO passes over it and starts later jobs that fit.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from sharewise.engine.free_gpus import packed_block
from sharewise.engine.policy_types import ClusterState, Placement, Queue
from sharewise.engine.queue_order import in_order, queue_keys
from sharewise.engine.table import SlowdownTable


def exclusive(
    queue: Queue,
    cluster: ClusterState,
    table: SlowdownTable,
    now: float,
    *,
    order: str = "sjf",
    backfill: bool = True,
) -> list[Placement]:
    """Start queued jobs on free GPUs only, one job per GPU, in ``order`` (``fifo`` or ``sjf``).

    With ``backfill`` a job that does not fit on the free GPUs is passed over for later, smaller ones, so a
    big job at the head does not idle the cluster; without it the queue stops at that job (head-of-line
    blocking, Gavel's FIFO). GPUs are chosen on as few nodes as possible.

    Returns
    -------
    list of Placement, e.g. ``[Placement(job=3, gpus=(0,)), Placement(job=5, gpus=(8, 9))]``.
    """
    free = cluster.occupancy() == 0
    n_free = int(free.sum())
    if n_free == 0 or len(queue) == 0:
        return []
    free = free.copy()
    gpus = queue.gpus
    if not backfill:
        return start_in_order(queue, cluster, free, n_free, order)
    # Only jobs that fit on the free GPUs now can start; the loop then walks just those.
    fits = np.flatnonzero(gpus <= n_free)
    keys = queue_keys(queue, order)[fits]
    placements: list[Placement] = []
    for i in in_order(keys, n_free, fits):
        k = int(gpus[i])
        if k > n_free:
            continue
        chosen = packed_block(free, cluster.node, k)
        free[chosen] = False
        n_free -= k
        placements.append(Placement(int(queue.job[i]), tuple(int(g) for g in chosen)))
        if n_free == 0:
            break
    return placements


def start_in_order(queue: Queue, cluster: ClusterState, free: np.ndarray, n_free: int, order: str) -> list[Placement]:
    """Start queued jobs in ``order`` on the free GPUs (``free``, updated in place) until one does not fit: the
    queue stops there (head-of-line blocking). ``exclusive`` without backfilling, and EASY backfilling's first
    pass, which then reserves for the job it stopped at."""
    placements: list[Placement] = []
    for i in in_order(queue_keys(queue, order), n_free):
        k = int(queue.gpus[i])
        if k > n_free:
            break  # the head does not fit: nobody behind it starts
        chosen = packed_block(free, cluster.node, k)
        free[chosen] = False
        n_free -= k
        placements.append(Placement(int(queue.job[i]), tuple(int(g) for g in chosen)))
        if n_free == 0:
            break
    return placements


exclusive_fifo_strict = partial(exclusive, order="fifo", backfill=False)
exclusive_fifo_backfill = partial(exclusive, order="fifo", backfill=True)
exclusive_sjf = partial(exclusive, order="sjf")

# What each variant does, for ``sharewise policies`` (``sharewise.policy.describe``).
exclusive_fifo_strict.summary = (
    "One job per GPU, in arrival order; the queue stops at the first job that does not fit on the free GPUs "
    "(Gavel's FIFO)."
)
exclusive_fifo_backfill.summary = (
    "One job per GPU, in arrival order; a job that does not fit on the free GPUs is passed over for later ones "
    "that do."
)
exclusive_sjf.summary = "One job per GPU, shortest job first; a job that does not fit is passed over for smaller ones."

# Exclusive: the simulator need not call it while no queued job fits on the free GPUs.
exclusive.shares_gpus = False
exclusive_fifo_strict.shares_gpus = False
exclusive_fifo_backfill.shares_gpus = False
exclusive_sjf.shares_gpus = False
