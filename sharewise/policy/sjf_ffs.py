"""``sjf-ffs``: shortest job first with first-fit sharing and no interference check (at most two jobs per GPU)."""

from __future__ import annotations

import numpy as np

from sharewise.policy._sharing import SharingState, candidates
from sharewise.policy.base import ClusterState, Placement, Queue, in_order, pick_free_gpus
from sharewise.policy.table import SlowdownTable


def sjf_ffs(queue: Queue, cluster: ClusterState, table: SlowdownTable, now: float) -> list[Placement]:
    """Place jobs shortest first: on free GPUs if enough, else also on the first GPUs holding one job.

    The only check is whether the pair may share at all (memory); the predicted slowdown is ignored. Free GPUs
    are taken first (on as few nodes as possible), then shared GPUs in index order (first fit).

    Returns
    -------
    list of Placement, e.g. ``[Placement(job=4, gpus=(17,))]``.
    """
    state = SharingState(cluster, table)
    cand = candidates(queue, state)
    if cand.shape[0] == 0:
        return []
    placements: list[Placement] = []
    for i in in_order(queue.remaining[cand], state.n_free + state.n_single, cand):
        if not state.has_room():
            break
        k = int(queue.gpus[i])
        w = int(queue.workload[i])
        free = state.free_mask()
        take = min(k, state.n_free)
        chosen = pick_free_gpus(free, cluster.node, take) if take else np.empty(0, dtype=np.int64)
        if take < k:
            single = state.single_gpus()
            ok = single[table.allowed[w, state.partner_wl[single]]]
            if ok.shape[0] < k - take:
                continue
            chosen = np.concatenate([chosen, ok[: k - take]])
        state.place(int(queue.job[i]), w, float(queue.remaining[i]), chosen)
        placements.append(Placement(int(queue.job[i]), tuple(sorted(int(g) for g in chosen))))
    return placements
