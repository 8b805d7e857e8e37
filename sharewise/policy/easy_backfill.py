"""``easy-backfill``: EASY backfilling (Lifka 1995; Mu'alem and Feitelson 2001), exclusive, in arrival order.

Jobs start in arrival (FIFO) order while they fit on the free GPUs. The first job that does not fit, the head,
gets a reservation at its *shadow time*: when enough GPUs will be free for it, from the running jobs' predicted
ends (their remaining exclusive run time at the speed they run at; the durations are known, as the SJF baselines
assume, where EASY takes users' estimates). The GPUs free then beyond those the head needs are the *extra* GPUs.
A later job, in arrival order, starts now only where it fits on the free GPUs and either ends by the shadow time
(at the speed of the GPUs it gets) or asks for no more than the extra GPUs, which it then takes. So no job that
starts after the head delays it, and no job waits for a GPU that idles meanwhile unless starting it would. GPUs
are chosen on as few nodes as possible, as the exclusive baselines choose them.
"""

from __future__ import annotations

import numpy as np

from sharewise.engine.free_gpus import packed_block
from sharewise.engine.policy_types import ClusterState, Placement, Queue
from sharewise.engine.table import SlowdownTable
from sharewise.policy.exclusive import start_in_order


def easy_backfill(queue: Queue, cluster: ClusterState, table: SlowdownTable, now: float) -> list[Placement]:
    """EASY backfilling: FIFO, one job per GPU, and a reservation for the first job that does not fit; later jobs
    start only where they do not delay it (they end by its shadow time, or fit on the extra GPUs).

    Returns
    -------
    list of Placement, e.g. ``[Placement(job=3, gpus=(0,)), Placement(job=5, gpus=(8, 9))]``.
    """
    free = cluster.occupancy() == 0
    n_free = int(free.sum())
    if n_free == 0 or len(queue) == 0:
        return []
    free = free.copy()
    # FIFO until a job does not fit: that job (the earliest arrival not started; ties: the lower position, as the
    # FIFO walk takes them) is the head to reserve for.
    placements = start_in_order(queue, cluster, free, n_free, "fifo")
    n_free -= sum(len(p.gpus) for p in placements)
    rest = np.flatnonzero(~np.isin(queue.job, [p.job for p in placements]))
    head = int(rest[np.argmin(queue.arrival[rest])]) if rest.size else -1
    need = int(queue.gpus[head]) if head >= 0 else 0
    if head < 0 or n_free == 0 or need > cluster.n_gpus:  # nothing left to start, or a head that never fits
        return placements
    release = _releases(cluster, placements, queue)
    shadow = float(np.partition(release, need - 1)[need - 1])
    extra = int((release <= shadow).sum()) - need
    # Later jobs that may start: they fit, and end by the shadow time even on the fastest free GPU or fit on the
    # extra GPUs (a bound: each is checked again on the GPUs it gets).
    later = np.arange(head + 1, len(queue))
    speeds = cluster.speed if cluster.class_speed is None else cluster.class_speed
    fastest = float(speeds[..., free].max())
    may = (queue.gpus[later] <= n_free) & ((queue.remaining[later] / fastest <= shadow) | (queue.gpus[later] <= extra))
    for i in later[may].tolist():
        k = int(queue.gpus[i])
        if k > n_free:
            continue
        chosen = packed_block(free, cluster.node, k)
        ends_by_shadow = float(queue.remaining[i]) / _speed(cluster, int(queue.job[i]), chosen) <= shadow
        if not ends_by_shadow:
            if k > extra:
                continue
            extra -= k
        n_free -= k
        free[chosen] = False
        placements.append(Placement(int(queue.job[i]), tuple(int(g) for g in chosen)))
        if n_free == 0:
            break
    return placements


def _speed(cluster: ClusterState, job: int, gpus: np.ndarray) -> float:
    """The rate job ``job`` runs at on ``gpus``: its slowest GPU's speed (for its class), over the cross-node
    slowdown where they span nodes."""
    spans = np.unique(cluster.node[gpus]).shape[0] > 1
    return float(cluster.speed_of(job)[gpus].min()) / (cluster.cross_node_slowdown if spans else 1.0)


def _releases(cluster: ClusterState, placements: list[Placement], queue: Queue) -> np.ndarray:
    """Each GPU's predicted release, seconds from now: 0 where free, the end of the job on it (its remaining
    exclusive time at its rate: its slowest GPU, over the cross-node slowdown where its GPUs span nodes), and
    for the GPUs of the jobs just placed, those jobs' ends."""
    release = np.zeros(cluster.n_gpus)
    gpu, slot = np.nonzero(cluster.resident >= 0)
    if gpu.shape[0]:
        job = cluster.resident[gpu, slot]
        ids, at = np.unique(job, return_inverse=True)
        speed = cluster.speed[gpu] if cluster.class_speed is None or cluster.job_class is None else (
            cluster.class_speed[cluster.job_class[job], gpu])
        slowest = np.full(ids.shape[0], np.inf)
        np.minimum.at(slowest, at, speed)
        low, high = np.full(ids.shape[0], np.iinfo(np.int64).max), np.full(ids.shape[0], -1)
        np.minimum.at(low, at, cluster.node[gpu])
        np.maximum.at(high, at, cluster.node[gpu])
        rate = slowest / np.where(high > low, cluster.cross_node_slowdown, 1.0)
        np.maximum.at(release, gpu, (cluster.job_remaining[ids] / rate)[at])
    for p in placements:
        i = int(np.searchsorted(queue.job, p.job))
        gpus = np.array(p.gpus)
        release[gpus] = float(queue.remaining[i]) / _speed(cluster, p.job, gpus)
    return release


easy_backfill.shares_gpus = False  # exclusive: called only when a queued job fits on the free GPUs
