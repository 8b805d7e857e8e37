"""The one cluster transition: jobs leave their GPUs (stops, completions), then jobs take GPUs (starts).

Shared by the scheduling loop (``loop``), which applies a policy's decision, and by a policy that pictures
the cluster after its own stops (``policy.ours.stage``), so the two can never disagree on who sits where: a job
leaving a GPU moves its partner, if any, to slot 0; a job placed on a GPU takes its first empty slot.
``resident[g]`` holds up to two job ids (``-1`` marks an empty slot), ``occupancy[g]`` their number.
"""

from __future__ import annotations

import numpy as np

from sharewise.engine.policy_types import MAX_JOBS_PER_GPU


def vacate(resident: np.ndarray, occupancy: np.ndarray, job: int, gpus) -> list[int]:
    """Take ``job`` off ``gpus`` (in place); return the jobs left alone on a GPU by it, one per such GPU.

    >>> r = np.array([[4, 7], [4, -1]]); o = np.array([2, 1])
    >>> vacate(r, o, 4, [0, 1]), r.tolist(), o.tolist()
    ([7], [[7, -1], [-1, -1]], [1, 0])
    """
    alone = []
    for g in gpus:
        if resident[g, 0] == job:
            resident[g, 0] = resident[g, 1]
        resident[g, 1] = -1
        occupancy[g] -= 1
        if occupancy[g]:
            alone.append(int(resident[g, 0]))
    return alone


def place(resident: np.ndarray, occupancy: np.ndarray, job: int, gpu: int) -> int:
    """Put ``job`` in the first empty slot of ``gpu`` (in place); return the job already there, or -1."""
    slot = occupancy[gpu]
    resident[gpu, slot] = job
    occupancy[gpu] = slot + 1
    return int(resident[gpu, 0]) if slot else -1


def gpus_of(resident: np.ndarray, job: int) -> list[int]:
    """The GPUs ``job`` sits on, found in ``resident`` (for a caller that keeps no job-to-GPU map)."""
    return np.flatnonzero((resident == job).any(axis=1)).tolist()


class Slots:
    """The GPU slots of a cluster as the scheduling loop keeps them, with counts of free slots and busy GPUs."""

    def __init__(self, n_gpus: int) -> None:
        self.resident = np.full((n_gpus, MAX_JOBS_PER_GPU), -1, dtype=np.int64)
        self.occupancy = np.zeros(n_gpus, dtype=np.int64)
        self.free_slots = MAX_JOBS_PER_GPU * n_gpus
        self.busy = 0  # GPUs holding at least one job

    def vacate(self, job: int, gpus: list[int]) -> list[int]:
        """Take ``job`` off ``gpus``; return the partners it leaves alone (their rates change)."""
        alone = vacate(self.resident, self.occupancy, job, gpus)
        self.free_slots += len(gpus)
        self.busy -= len(gpus) - len(alone)
        return alone

    def place(self, job: int, gpu: int) -> int:
        """Put ``job`` on ``gpu``; return the partner it joins, or -1 on a free GPU."""
        partner = place(self.resident, self.occupancy, job, gpu)
        self.free_slots -= 1
        if partner < 0:
            self.busy += 1
        return partner
