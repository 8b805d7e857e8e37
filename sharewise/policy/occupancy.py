"""Bookkeeping the sharing policies have in common: which GPUs are free, which hold one job, and whose."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sharewise.engine.free_gpus import packed_block
from sharewise.engine.gpus import lone_residents
from sharewise.engine.policy_types import ClusterState, Placement, Queue
from sharewise.engine.queue_order import rest_in_order, smallest_first
from sharewise.engine.table import SlowdownTable


class SharingState:
    """A policy-local, mutable copy of the GPU slots, updated as a policy call places jobs.

    ``partner[g]`` is the job alone on GPU ``g`` (``-1`` if the GPU is free or full); ``partner_wl`` its
    workload id. ``remaining[g]`` is that job's remaining exclusive time. ``alone[w]`` counts the GPUs that
    a job of workload ``w`` holds alone.
    """

    def __init__(
        self,
        cluster: ClusterState,
        table: SlowdownTable,
        occupancy: np.ndarray | None = None,
        residents: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """``occupancy`` (a copy this state may change) and ``residents`` (``_gpus.lone_residents`` of
        it) when the caller has computed them already."""
        self.cluster = cluster
        self.table = table
        self.occupancy = cluster.occupancy() if occupancy is None else occupancy
        if residents is None:
            residents = lone_residents(
                self.occupancy, cluster.resident, cluster.job_workload, cluster.job_remaining, len(table)
            )
        self.partner, self.partner_wl, self.remaining, self.alone = residents
        self.n_free = int(np.count_nonzero(self.occupancy == 0))
        self.n_single = int(self.alone.sum())
        self._single: np.ndarray | None = None

    def free_mask(self) -> np.ndarray:
        return self.occupancy == 0

    def single_gpus(self) -> np.ndarray:
        """Return the indices of GPUs holding exactly one job (kept until the next ``place``)."""
        if self._single is None:
            self._single = np.flatnonzero(self.partner >= 0)
        return self._single

    def shareable_counts(self, workloads: np.ndarray) -> np.ndarray:
        """For each workload id in ``workloads``, count the GPUs it could use now (free or allowed)."""
        if self.n_single == 0:
            return np.full(workloads.shape[0], self.n_free)
        # Per workload of the table (few), then looked up per job: no sort of a long queue. ``alone`` counts
        # the GPUs each workload holds alone; the allowed matrix times those counts is what each may join.
        per_workload = self.n_free + self.table.allowed @ self.alone
        return per_workload[workloads]

    def place(self, job: int, workload: int, remaining: float, gpus: np.ndarray) -> None:
        """Record ``job`` on ``gpus``: a free GPU now holds it alone, a shared one becomes full."""
        self._single = None
        for g in gpus.tolist():
            if self.occupancy[g] == 0:
                self.n_free -= 1
                self.n_single += 1
                self.partner[g] = job
                self.partner_wl[g] = workload
                self.remaining[g] = remaining
                self.alone[workload] += 1
            else:
                self.n_single -= 1
                self.alone[self.partner_wl[g]] -= 1
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


# Scorer: (job workloads, job remaining, candidate GPUs, state) -> (usable mask, preference key), both
# shaped (jobs, GPUs); a lower key is preferred.
Scorer = Callable[[np.ndarray, np.ndarray, np.ndarray, SharingState], tuple[np.ndarray, np.ndarray]]
_CHUNK = 512


def place_in_order(
    queue: Queue,
    cluster: ClusterState,
    table: SlowdownTable,
    keys: np.ndarray,
    scorer: Scorer,
) -> list[Placement]:
    """Greedy placement in ascending ``keys``: free GPUs first, then the preferred usable shared GPUs.

    A job of ``k`` GPUs takes ``k`` free GPUs if there are enough (on as few nodes as possible); otherwise all
    free GPUs plus the ``k - free`` GPUs holding one job that ``scorer`` marks usable, lowest key first; if
    there are not enough, it is skipped. ``scorer`` is evaluated for a chunk of jobs against all shareable
    GPUs at once, and again only when a job placed on a free GPU makes that GPU shareable.
    """
    state = SharingState(cluster, table)
    cand = candidates(queue, state)
    if cand.shape[0] == 0:
        return []
    placements: list[Placement] = []
    keys_c = keys[cand]
    prefix = smallest_first(keys_c, _CHUNK)
    pending = [cand[prefix]]
    rest_done = False
    while state.has_room():
        if not pending:
            if rest_done:
                break
            rest = rest_in_order(keys_c, prefix)
            rest_done = True
            pending = [rest[j : j + _CHUNK] for j in range(0, rest.shape[0], _CHUNK)]
            pending = [cand[p] for p in pending]
            continue
        chunk_arr = pending.pop(0)
        if chunk_arr.shape[0] == 0:
            continue
        chunk = chunk_arr.tolist()
        k_arr = queue.gpus[chunk_arr]
        usable = None
        r = 0
        while r < len(chunk) and state.has_room():
            if state.n_free == 0:
                # Only shared GPUs are left: jump to the next job with enough usable GPUs.
                if usable is None:
                    usable, key, cols, taken, base, viable = _score(scorer, queue, chunk_arr, r, state)
                nxt = np.searchsorted(viable, r - base)
                if nxt >= viable.shape[0]:
                    break
                r = int(viable[nxt]) + base
            i = chunk[r]
            k = int(k_arr[r])
            if k <= state.n_free:
                chosen = packed_block(state.free_mask(), cluster.node, k)
                usable = None  # the GPUs just filled can now be shared: rescore
            else:
                need = k - state.n_free
                if state.n_single < need:
                    r += 1
                    continue
                if usable is None:
                    usable, key, cols, taken, base, viable = _score(scorer, queue, chunk_arr, r, state)
                row_ok = usable[r - base] & ~taken
                options = np.flatnonzero(row_ok)
                if options.shape[0] < need:
                    if state.n_free == 0:
                        # GPUs taken since scoring: drop the jobs that lost their options, all at once.
                        left = (usable[r - base + 1 :] & ~taken).sum(axis=1)
                        viable = np.flatnonzero(left >= k_arr[r + 1 :]) + (r + 1 - base)
                    r += 1
                    continue
                best = options[np.argsort(key[r - base][options], kind="stable")[:need]]
                taken[best] = True
                shared = cols[best]
                if state.n_free:
                    free = packed_block(state.free_mask(), cluster.node, state.n_free)
                    chosen = np.concatenate([free, shared])
                    usable = None
                else:
                    chosen = shared
            state.place(int(queue.job[i]), int(queue.workload[i]), float(queue.remaining[i]), chosen)
            placements.append(Placement(int(queue.job[i]), tuple(sorted(int(g) for g in chosen))))
            r += 1
    return placements


def _score(scorer: Scorer, queue: Queue, chunk: np.ndarray, r: int, state: SharingState):
    """Score chunk rows ``r:`` against the GPUs holding one job; ``viable`` lists rows with enough usable."""
    cols = state.single_gpus()
    rows = chunk[r:]
    usable, key = scorer(queue.workload[rows], queue.remaining[rows], cols, state)
    viable = np.flatnonzero(usable.sum(axis=1) >= queue.gpus[rows])
    return usable, key, cols, np.zeros(cols.shape[0], dtype=bool), r, viable
