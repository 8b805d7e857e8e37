"""Bookkeeping the sharing policies have in common: which GPUs are free, which hold one job, and who that is."""

from __future__ import annotations

import numpy as np

from sharewise.policy.base import ClusterState, Queue
from sharewise.policy.table import SlowdownTable


class SharingState:
    """A policy-local, mutable copy of the GPU slots, updated as a policy call places jobs.

    ``partner[g]`` is the job alone on GPU ``g`` (``-1`` if the GPU is free or full); ``partner_wl`` its workload
    id. ``remaining[g]`` is that job's remaining exclusive time.
    """

    def __init__(self, cluster: ClusterState, table: SlowdownTable) -> None:
        self.cluster = cluster
        self.table = table
        self.occupancy = cluster.occupancy().copy()
        one = self.occupancy == 1
        self.partner = np.where(one, cluster.resident[:, 0], -1)
        self.partner_wl = np.full(cluster.n_gpus, -1, dtype=np.int64)
        self.partner_wl[one] = cluster.job_workload[self.partner[one]]
        self.remaining = np.zeros(cluster.n_gpus)
        self.remaining[one] = cluster.job_remaining[self.partner[one]]
        self.n_free = int((self.occupancy == 0).sum())
        self.n_single = int(one.sum())

    def free_mask(self) -> np.ndarray:
        return self.occupancy == 0

    def single_gpus(self) -> np.ndarray:
        """Return the indices of GPUs holding exactly one job."""
        return np.flatnonzero(self.occupancy == 1)

    def shareable_counts(self, workloads: np.ndarray) -> np.ndarray:
        """For each workload id in ``workloads``, count the GPUs it could join now (free or allowed partner)."""
        single = self.single_gpus()
        if single.shape[0] == 0:
            return np.full(workloads.shape[0], self.n_free)
        uniq, inverse = np.unique(workloads, return_inverse=True)
        allowed = self.table.allowed[np.ix_(uniq, self.partner_wl[single])].sum(axis=1)
        return self.n_free + allowed[inverse]

    def place(self, job: int, workload: int, remaining: float, gpus: np.ndarray) -> None:
        """Record ``job`` on ``gpus``: a free GPU now holds it alone, a shared one becomes full."""
        for g in gpus.tolist():
            if self.occupancy[g] == 0:
                self.n_free -= 1
                self.n_single += 1
                self.partner[g] = job
                self.partner_wl[g] = workload
                self.remaining[g] = remaining
            else:
                self.n_single -= 1
                self.partner[g] = -1
                self.partner_wl[g] = -1
            self.occupancy[g] += 1

    def has_room(self) -> bool:
        return self.n_free > 0 or self.n_single > 0


def candidates(queue: Queue, state: SharingState) -> np.ndarray:
    """Queue positions of jobs that could start now: enough free or shareable GPUs for their workload."""
    if len(queue) == 0 or not state.has_room():
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero(queue.gpus <= state.shareable_counts(queue.workload))
