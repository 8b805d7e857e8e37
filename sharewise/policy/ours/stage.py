"""The queue and cluster as each step of ``sharewise`` sees them, once the steps before it stopped and started jobs."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from sharewise.engine import transition
from sharewise.engine.policy_types import ClusterState, Placement, Queue, readonly
from sharewise.policy.ours.arrays import Gpus, gpus_of


class Stage(NamedTuple):
    """The queue, the cluster (and its GPUs as the kernels take them), and a copy of its occupancy the call may
    change (jobs placed in this call)."""

    queue: Queue
    cluster: ClusterState
    gpus: Gpus
    occupancy: np.ndarray

    @classmethod
    def of(cls, queue: Queue, cluster: ClusterState) -> Stage:
        return cls(queue, cluster, gpus_of(cluster), cluster.occupancy())


def after(stage: Stage, start: list[Placement], stopped: list[int]) -> Stage:
    """``stage`` once ``stopped`` left their GPUs and ``start`` took theirs (the loop's own ``transition``: stops,
    then starts), the started jobs out of the queue; ``stage`` itself where nothing changes."""
    if not start and not stopped:
        return stage
    cluster, queue = stage.cluster, stage.queue
    resident = np.array(cluster.resident, copy=True)
    occ = stage.occupancy.copy()
    for j in stopped:
        transition.vacate(resident, occ, j, transition.gpus_of(resident, j))
    for p in start:
        for g in p.gpus:
            transition.place(resident, occ, p.job, g)
    keep = ~np.isin(queue.job, [p.job for p in start])
    fields = {f.name: getattr(queue, f.name) for f in dataclasses.fields(queue)}
    queue = Queue(**{k: (readonly(np.asarray(v)[keep]) if v is not None else None) for k, v in fields.items()})
    cluster = dataclasses.replace(cluster, resident=readonly(resident), occupied=readonly(occ))
    return Stage(queue, cluster, gpus_of(cluster), occ)


def occupy(occupancy: np.ndarray, placed: list[Placement]) -> None:
    """Count the jobs ``placed`` on their GPUs in ``occupancy`` (in place)."""
    for p in placed:
        occupancy[list(p.gpus)] += 1
