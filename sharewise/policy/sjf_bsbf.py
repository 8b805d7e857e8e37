"""``sjf-bsbf``: shortest job first, best sharing benefit first (Luo et al. 2024, "Scheduling Deep Learning
Jobs in Multi-Tenant GPU Clusters via Wise Resource Sharing"); non-preemptive."""

from __future__ import annotations

import numpy as np

from sharewise.engine.policy_types import ClusterState, Placement, Queue
from sharewise.engine.table import SlowdownTable
from sharewise.policy.occupancy import SharingState, place_in_order


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
    """Shortest job first; a job shares a GPU only if the pair ends sooner together than one after the other.

    The check is ``t_con < t_seq`` (``sharing_times``). A job takes free GPUs first; if too few, it adds GPUs
    whose single resident passes the check, in ascending ``t_con`` (best sharing benefit first); if still too
    few it waits. Slowdowns are the table's ``quantile``.

    Returns
    -------
    list of Placement, e.g. ``[Placement(job=4, gpus=(17,)), Placement(job=9, gpus=(3,))]``.
    """

    def scorer(workloads: np.ndarray, remaining: np.ndarray, gpus: np.ndarray, state: SharingState):
        a, b = workloads[:, None], state.partner_wl[gpus][None, :]
        usable = table.allowed[a, b]
        s_a = np.where(usable, table.slowdown(a, b, quantile), 1.0)
        s_b = np.where(usable, table.slowdown(b, a, quantile), 1.0)
        t_con, t_seq = sharing_times(remaining[:, None], state.remaining[gpus][None, :], s_a, s_b)
        return usable & (t_con < t_seq), t_con

    return place_in_order(queue, cluster, table, queue.remaining, scorer)
