"""What a policy's placements must satisfy, checked by the scheduling loop at every call (``check_placements``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from sharewise.engine.policy_types import MAX_JOBS_PER_GPU, ClusterState, Placement, Queue
from sharewise.errors import InvalidPlacementError

if TYPE_CHECKING:
    from sharewise.engine.table import SlowdownTable

def check_placements(
    placements: Sequence[Placement], queue: Queue, cluster: ClusterState, table: SlowdownTable, policy: str
) -> None:
    """Raise ``InvalidPlacementError`` unless ``placements`` can all start together on ``cluster``.

    Checks: each job is queued and placed once, gets exactly the GPUs it asked for, no GPU ends with more
    than two jobs, and every pair that would share a GPU may share according to ``table``. A fast
    check runs first (the simulator validates every call); only a failing call walks the placements one by
    one to name the first problem.
    """
    if _all_valid(placements, queue, cluster, table):
        return
    _walk_placements(placements, queue, cluster, table, policy)


def _walk_placements(
    placements: Sequence[Placement], queue: Queue, cluster: ClusterState, table: SlowdownTable, policy: str
) -> None:
    """Check placements one by one, in order, raising ``InvalidPlacementError`` for the first problem."""
    occupancy = cluster.occupancy().copy()
    partner = np.where(cluster.resident[:, 0] >= 0, cluster.resident[:, 0], -1)
    partner_workload = np.full(cluster.n_gpus, -1)
    has = partner >= 0
    partner_workload[has] = cluster.job_workload[partner[has]]
    seen: set[int] = set()
    for p in placements:
        job = int(p.job)
        i = int(np.searchsorted(queue.job, job))
        if i >= len(queue) or int(queue.job[i]) != job:
            raise InvalidPlacementError(f"policy {policy!r} placed job {job}, which is not in the queue")
        if job in seen:
            raise InvalidPlacementError(f"policy {policy!r} placed job {job} twice")
        seen.add(job)
        gpus = np.asarray(p.gpus, dtype=np.int64)
        if gpus.shape[0] != int(queue.gpus[i]) or np.unique(gpus).shape[0] != gpus.shape[0]:
            raise InvalidPlacementError(
                f"policy {policy!r} gave job {job} GPUs {list(map(int, gpus))}; it asked for "
                f"{int(queue.gpus[i])} distinct GPUs"
            )
        if (gpus < 0).any() or (gpus >= cluster.n_gpus).any():
            raise InvalidPlacementError(
                f"policy {policy!r} gave job {job} GPUs {list(map(int, gpus))}; the cluster has GPUs "
                f"0..{cluster.n_gpus - 1}"
            )
        for g in gpus:
            if occupancy[g] >= MAX_JOBS_PER_GPU:
                raise InvalidPlacementError(
                    f"policy {policy!r} put job {job} on GPU {int(g)}, which already holds "
                    f"{MAX_JOBS_PER_GPU} jobs"
                )
            if (
                occupancy[g] == 1
                and not table.may_share(np.array([queue.workload[i]]), np.array([partner_workload[g]]))[0]
            ):
                raise InvalidPlacementError(
                    f"policy {policy!r} paired job {job} ({table.workloads[queue.workload[i]]}) with "
                    f"{table.workloads[partner_workload[g]]} on GPU {int(g)}; that pair may not share "
                    "(out of memory or never measured)"
                )
            occupancy[g] += 1
            partner_workload[g] = queue.workload[i]


def _all_valid(placements: Sequence[Placement], queue: Queue, cluster: ClusterState, table: SlowdownTable) -> bool:
    """Whether every check of ``check_placements`` passes: one pass over the placed GPUs.

    A call places a few jobs on a few GPUs each, so plain Python over them beats array set-up.
    """
    if not placements:
        return True
    n = cluster.n_gpus
    occupancy = cluster.occupancy()
    resident = cluster.resident
    allowed = table.allowed
    jobs = [int(p.job) for p in placements]
    if len(set(jobs)) != len(jobs):
        return False
    positions = np.searchsorted(queue.job, jobs).tolist()
    n_queued = len(queue)
    newcomer: dict[int, int] = {}  # GPU -> workload of the one job this call put on a free GPU
    for p, job, i in zip(placements, jobs, positions, strict=True):
        if i >= n_queued or int(queue.job[i]) != job:
            return False
        gpus = p.gpus
        if len(gpus) != int(queue.gpus[i]) or len(set(gpus)) != len(gpus):
            return False
        wl = int(queue.workload[i])
        for g in gpus:
            g = int(g)
            if g < 0 or g >= n:
                return False
            held = int(occupancy[g])
            if held >= MAX_JOBS_PER_GPU:
                return False
            if held == 1:
                if g in newcomer or not allowed[wl, cluster.job_workload[resident[g, 0]]]:
                    return False
                newcomer[g] = -1  # full now
            elif g in newcomer:
                other = newcomer[g]
                if other < 0 or not allowed[other, wl]:
                    return False
                newcomer[g] = -1
            else:
                newcomer[g] = wl
    return True
