"""``pm-first``: PAL's variability-aware baseline (Jain et al., SC'24, "A Variability-Aware Policy for
Scheduling ML Workloads in GPU Clusters"): the fastest GPUs go to the jobs most sensitive to variability."""

from __future__ import annotations

import numpy as np

from sharewise.engine import order as orders
from sharewise.engine.policy_types import ClusterState, Placement, Queue
from sharewise.engine.queue_order import in_order, queue_keys
from sharewise.engine.table import SlowdownTable


def select_jobs(queue: Queue, n_free: int, order: str) -> list[int]:
    """Return queue positions of the jobs that start now on ``n_free`` free GPUs (``order``, backfilling)."""
    fits = np.flatnonzero(queue.gpus <= n_free)
    chosen: list[int] = []
    if fits.shape[0] == 0:
        return chosen
    for i in in_order(queue_keys(queue, order)[fits], n_free, fits):
        k = int(queue.gpus[i])
        if k <= n_free:
            chosen.append(i)
            n_free -= k
            if n_free == 0:
                break
    return chosen


def start_on_free(queue: Queue, cluster: ClusterState, order: str) -> tuple[np.ndarray, list[int]]:
    """The PAL family's first step (``pm-first``, ``pal``, ``packed-sticky``): the free GPUs, as a mask the caller
    may change, and the queue positions of the jobs that start on them now (``select_jobs`` in ``order``); no
    job where no GPU is free or none waits."""
    free = cluster.occupancy() == 0
    n_free = int(free.sum())
    if n_free == 0 or len(queue) == 0:
        return free, []
    return free, select_jobs(queue, n_free, order)


def by_sensitivity(queue: Queue, chosen: list[int]) -> list[int]:
    """Order the chosen jobs most variability-sensitive first.

    A job's completion time moves with the speed of its slowest GPU in proportion to its remaining run time,
    so the longest remaining jobs are the most sensitive (ties: more GPUs, then queue order). The order is
    compiled (``engine.order.by_sensitivity``), the one ``sharewise`` starts its jobs in.
    """
    return orders.by_sensitivity(np.asarray(chosen, dtype=np.int64), queue.remaining, queue.gpus).tolist()


def pm_first(
    queue: Queue, cluster: ClusterState, table: SlowdownTable, now: float, *, order: str = "sjf"
) -> list[Placement]:
    """Start jobs exclusively (no sharing); the most sensitive job gets the fastest free GPUs.

    Which jobs start is decided in ``order`` (``sjf`` or ``fifo``) as in ``exclusive``; where they go is
    decided by the GPUs' performance-variability scores (``cluster.speed``, or with PAL's per-class
    variability the speeds for the job's class), ignoring locality. PM-First as PAL's artifact defines it
    (FIFO, rounds, class order, re-placement) is ``pm-first-artifact``.

    Returns
    -------
    list of Placement, e.g. ``[Placement(job=2, gpus=(5,)), Placement(job=8, gpus=(0, 1, 9, 12))]``.
    """
    free, chosen = start_on_free(queue, cluster, order)
    if not chosen:
        return []
    # Free GPUs from fastest to slowest (ties: lower index); each job takes the next best block of GPUs,
    # so a multi-GPU job gets GPUs of similar speed and is not held back by one slow GPU.
    placements = []
    for i in by_sensitivity(queue, chosen):
        k = int(queue.gpus[i])
        idx = np.flatnonzero(free)
        gpus = idx[np.argsort(-cluster.speed_of(int(queue.job[i]))[idx], kind="stable")[:k]]
        free[gpus] = False
        placements.append(Placement(int(queue.job[i]), tuple(sorted(int(g) for g in gpus))))
    return placements

# Exclusive: the simulator need not call it while no queued job fits on the free GPUs.
pm_first.shares_gpus = False
