"""``sjf-bsbf``: shortest job first, best sharing benefit first (Luo et al. 2024, "Scheduling Deep Learning
Jobs in Multi-Tenant GPU Clusters via Wise Resource Sharing"); non-preemptive."""

from __future__ import annotations

import numpy as np

from sharewise.policy._sharing import SharingState, candidates
from sharewise.policy.base import ClusterState, Placement, Queue, in_order, pick_free_gpus
from sharewise.policy.table import SlowdownTable


def sharing_times(
    e_a: np.ndarray, e_b: np.ndarray, s_a: np.ndarray, s_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(t_con, t_seq)``: the pair's mean completion time shared, and run one after the other.

    ``e_a``, ``e_b`` are the remaining exclusive times of the new job ``a`` and the resident ``b``; ``s_a``,
    ``s_b`` their slowdowns next to each other. With ``f = s * e``: if ``f_a >= f_b``, b ends first and a then
    runs alone, ``t_con = e_a/2 + (1 - 1/(2 s_a)) f_b``; otherwise ``t_con = e_b/2 + (1 - 1/(2 s_b)) f_a``.
    Running b first and a after gives ``t_seq = e_b + e_a/2``.

    Example: ``sharing_times(np.array([2.]), np.array([4.]), np.array([1.5]), np.array([1.5]))`` gives
    ``t_con = 4/2 + (1 - 1/3) * 3 = 4.0`` and ``t_seq = 4 + 1 = 5.0``.
    """
    f_a = s_a * e_a
    f_b = s_b * e_b
    t_con = np.where(
        f_a >= f_b,
        e_a / 2 + (1 - 1 / (2 * s_a)) * f_b,
        e_b / 2 + (1 - 1 / (2 * s_b)) * f_a,
    )
    t_seq = e_b + e_a / 2
    return t_con, t_seq


def sjf_bsbf(
    queue: Queue, cluster: ClusterState, table: SlowdownTable, now: float, *, quantile: str = "p50"
) -> list[Placement]:
    """Place jobs shortest first; share a GPU with its resident only if ``t_con < t_seq``.

    A job takes free GPUs first; if too few, it adds GPUs whose single resident passes the check, in ascending
    ``t_con`` (best sharing benefit first); if still too few it waits. Slowdowns are the table's ``quantile``.

    Returns
    -------
    list of Placement, e.g. ``[Placement(job=4, gpus=(17,)), Placement(job=9, gpus=(3,))]``.
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
        e_a = float(queue.remaining[i])
        take = min(k, state.n_free)
        chosen = pick_free_gpus(state.free_mask(), cluster.node, take) if take else np.empty(0, dtype=np.int64)
        if take < k:
            single = state.single_gpus()
            single = single[table.allowed[w, state.partner_wl[single]]]
            if single.shape[0] < k - take:
                continue
            wb = state.partner_wl[single]
            s_a = table.slowdown(np.full(wb.shape[0], w), wb, quantile)
            s_b = table.slowdown(wb, np.full(wb.shape[0], w), quantile)
            t_con, t_seq = sharing_times(np.full(wb.shape[0], e_a), state.remaining[single], s_a, s_b)
            good = t_con < t_seq
            if int(good.sum()) < k - take:
                continue
            single, t_con = single[good], t_con[good]
            best = single[np.argsort(t_con, kind="stable")[: k - take]]
            chosen = np.concatenate([chosen, best])
        state.place(int(queue.job[i]), w, e_a, chosen)
        placements.append(Placement(int(queue.job[i]), tuple(sorted(int(g) for g in chosen))))
    return placements
