"""``packed-sticky``: PAL's baseline (Jain et al., SC'24): packed placement, and a job keeps its GPUs.

PAL compares its variability-aware placement against Gavel's default, *Packed-Sticky*: each job's GPUs are
packed onto as few nodes as possible, blind to the GPUs' speed differences, and a placed job keeps them
(sticky: never migrated). Jobs are chosen in the same order as ``pm-first`` and ``pal`` (``select_jobs``),
so comparing the three isolates placement: the only thing that differs is which free GPUs a job gets.
"""

from __future__ import annotations

import numpy as np

from sharewise.engine.free_gpus import packed_block
from sharewise.engine.policy_types import ClusterState, Placement, Queue
from sharewise.engine.table import SlowdownTable
from sharewise.policy.pm_first import start_on_free


def packed_sticky(
    queue: Queue, cluster: ClusterState, table: SlowdownTable, now: float, *, order: str = "sjf"
) -> list[Placement]:
    """One job per GPU, shortest first, packed on as few nodes as possible; blind to GPU speed (PAL's baseline).

    Jobs start in ``order`` (``sjf`` or ``fifo``) and keep their GPUs.

    Returns
    -------
    list of Placement, e.g. ``[Placement(job=2, gpus=(5,)), Placement(job=8, gpus=(8, 9, 10, 11))]``.
    """
    free, chosen = start_on_free(queue, cluster, order)
    placements = []
    for i in chosen:
        chosen = packed_block(free, cluster.node, int(queue.gpus[i]))
        free[chosen] = False
        placements.append(Placement(int(queue.job[i]), tuple(int(g) for g in np.sort(chosen))))
    return placements

# Exclusive: the simulator need not call it while no queued job fits on the free GPUs.
packed_sticky.shares_gpus = False
