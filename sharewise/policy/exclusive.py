"""``exclusive-fifo`` and ``exclusive-sjf``: one job per GPU, no sharing (the baselines)."""

from __future__ import annotations

from functools import partial

import numpy as np

from sharewise.policy.base import ClusterState, Placement, Queue, in_order, pick_free_gpus, queue_keys
from sharewise.policy.table import SlowdownTable


def exclusive(
    queue: Queue, cluster: ClusterState, table: SlowdownTable, now: float, *, order: str = "sjf"
) -> list[Placement]:
    """Start queued jobs on free GPUs only, one job per GPU, in ``order`` (``fifo`` or ``sjf``).

    A job that does not fit on the free GPUs is passed over for later, smaller ones (backfilling), so a big
    job at the head does not idle the cluster. GPUs are chosen on as few nodes as possible.

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
    # Only jobs that fit on the free GPUs now can start; the loop then walks just those.
    fits = np.flatnonzero(gpus <= n_free)
    keys = queue_keys(queue, order)[fits]
    placements: list[Placement] = []
    for i in in_order(keys, n_free, fits):
        k = int(gpus[i])
        if k > n_free:
            continue
        chosen = pick_free_gpus(free, cluster.node, k)
        free[chosen] = False
        n_free -= k
        placements.append(Placement(int(queue.job[i]), tuple(int(g) for g in chosen)))
        if n_free == 0:
            break
    return placements


exclusive_fifo = partial(exclusive, order="fifo")
exclusive_sjf = partial(exclusive, order="sjf")
