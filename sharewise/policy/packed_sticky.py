"""``packed-sticky``: PAL's baseline (Jain et al., SC'24): packed placement, and a job keeps its GPUs.

PAL compares its variability-aware placement against Gavel's default, *Packed-Sticky*: each job's GPUs are
packed onto as few nodes as possible, blind to the GPUs' speed differences, and a placed job keeps them
(sticky: never migrated). Jobs are chosen in the same order as ``pm-first`` and ``pal`` (``select_jobs``),
so comparing the three isolates placement: the only thing that differs is which free GPUs a job gets.
"""

from __future__ import annotations

import numpy as np

from sharewise.engine.interface import ClusterState, Placement, Queue, pick_free_gpus
from sharewise.engine.table import SlowdownTable
from sharewise.policy.pm_first import select_jobs


def packed_sticky(
    queue: Queue, cluster: ClusterState, table: SlowdownTable, now: float, *, order: str = "sjf"
) -> list[Placement]:
    """One job per GPU, shortest first, packed on as few nodes as possible; blind to GPU speed (PAL's baseline).

    Jobs start in ``order`` (``sjf`` or ``fifo``) and keep their GPUs.

    Returns
    -------
    list of Placement, e.g. ``[Placement(job=2, gpus=(5,)), Placement(job=8, gpus=(8, 9, 10, 11))]``.
    """
    free = cluster.occupancy() == 0
    n_free = int(free.sum())
    if n_free == 0 or len(queue) == 0:
        return []
    free = free.copy()
    placements = []
    for i in select_jobs(queue, n_free, order):
        chosen = pick_free_gpus(free, cluster.node, int(queue.gpus[i]))
        free[chosen] = False
        placements.append(Placement(int(queue.job[i]), tuple(int(g) for g in np.sort(chosen))))
    return placements

# Exclusive: the simulator need not call it while no queued job fits on the free GPUs.
packed_sticky.shares_gpus = False
