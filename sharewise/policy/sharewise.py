"""``sharewise``: our policy. Shortest job first on free GPUs, then SLO-bounded, benefit-maximizing sharing.

Queued jobs that find no free GPU may join a GPU holding one job if the predicted p90 slowdown of both stays
within the SLO and sharing now is expected to finish the pair sooner than waiting: the benefit of placing job
``a`` next to resident ``b`` is ``(W_a + e_a - C_a) - (C_b - e_b)``, where ``W_a`` is ``a``'s expected wait for
a GPU of its own (from the predicted release times of the busy GPUs and ``a``'s place in the SJF queue),
``e`` are remaining exclusive times and ``C`` the completion times when shared (p50 slowdowns). Single-GPU jobs
are matched to GPUs by a maximum-weight assignment over the head of the queue and all shareable GPUs; a
multi-GPU job takes its best GPUs greedily.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from sharewise.policy._sharing import SharingState, candidates
from sharewise.policy.base import ClusterState, Placement, Queue, in_order, pick_free_gpus
from sharewise.policy.table import SlowdownTable


def shared_completion(
    e_a: np.ndarray, e_b: np.ndarray, s_a: np.ndarray, s_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(C_a, C_b)``: when each of two jobs ends if they share from now until the first one ends.

    The job that ends first does so at ``s * e``; the other then runs alone for the work it has left.

    Example: ``e_a=2, e_b=4, s_a=s_b=1.5`` gives ``C_a = 3.0`` and ``C_b = 3 + 4 - 3/1.5 = 5.0``.
    """
    f_a = s_a * e_a
    f_b = s_b * e_b
    a_first = f_a <= f_b
    c_a = np.where(a_first, f_a, f_b + e_a - f_b / s_a)
    c_b = np.where(a_first, f_a + e_b - f_a / s_b, f_b)
    return c_a, c_b


def release_times(cluster: ClusterState, table: SlowdownTable) -> np.ndarray:
    """Predict when each GPU becomes free (seconds from now), sorted ascending; free GPUs count as 0."""
    res = cluster.resident
    speed = cluster.speed
    out = np.zeros(cluster.n_gpus)
    one = (res[:, 0] >= 0) & (res[:, 1] < 0)
    two = res[:, 1] >= 0
    out[one] = cluster.job_remaining[res[one, 0]] / speed[one]
    if two.any():
        a, b = res[two, 0], res[two, 1]
        wa, wb = cluster.job_workload[a], cluster.job_workload[b]
        c_a, c_b = shared_completion(
            cluster.job_remaining[a], cluster.job_remaining[b], table.p50[wa, wb], table.p50[wb, wa]
        )
        out[two] = np.maximum(c_a, c_b) / speed[two]
    return np.sort(out)


def sharewise(
    queue: Queue,
    cluster: ClusterState,
    table: SlowdownTable,
    now: float,
    *,
    max_slowdown: float = 2.0,
    min_benefit: float = 0.0,
    head: int = 64,
    wait_weight: float = 1.0,
    min_gain: float = 0.0,
    mode: str = "benefit",
    release_weight: float = 0.0,
) -> list[Placement]:
    """Place jobs shortest first on free GPUs, then pair the rest with resident jobs where it pays off.

    Parameters
    ----------
    max_slowdown
        SLO: a pair is allowed only if both jobs' predicted p90 slowdown is at most this.
    min_benefit
        Share only if the expected gain in summed completion time (seconds) exceeds this.
    head
        How many jobs at the head of the SJF queue compete for shared GPUs in one call.

    Returns
    -------
    list of Placement, e.g. ``[Placement(job=4, gpus=(17,)), Placement(job=9, gpus=(3, 4))]``.
    """
    state = SharingState(cluster, table)
    cand = candidates(queue, state)
    if cand.shape[0] == 0:
        return []
    placements: list[Placement] = []
    waiting: list[int] = []
    # 1. Free GPUs, shortest job first (as exclusive-sjf), fastest GPUs first.
    for i in in_order(queue.remaining[cand], state.n_free + head, cand):
        k = int(queue.gpus[i])
        if k <= state.n_free:
            chosen = pick_free_gpus(state.free_mask(), cluster.node, k)
            state.place(int(queue.job[i]), int(queue.workload[i]), float(queue.remaining[i]), chosen)
            placements.append(Placement(int(queue.job[i]), tuple(int(g) for g in chosen)))
        else:
            waiting.append(i)
            if len(waiting) >= head:
                break
    if not waiting or state.n_single == 0:
        return placements
    # 2. Sharing: expected waits from predicted GPU release times.
    release = release_times(cluster, table)
    single = state.single_gpus()
    wl_b = state.partner_wl[single]
    e_b = state.remaining[single] / cluster.speed[single]
    waits = np.array(waiting, dtype=np.int64)
    wl_a = queue.workload[waits]
    e_a = queue.remaining[waits]
    k_a = queue.gpus[waits]
    # The r-th waiting job (SJF order) gets, in expectation, the (r + k)-th GPU to be released.
    rank = np.cumsum(k_a) - 1
    wait = release[np.minimum(rank, release.shape[0] - 1)]
    A, B = wl_a[:, None], wl_b[None, :]
    ok = table.allowed[A, B]
    p90_ok = (table.p90[A, B] <= max_slowdown) & (table.p90[B, A] <= max_slowdown)
    s_a = np.where(ok, table.p50[A, B], 1.0)
    s_b = np.where(ok, table.p50[B, A], 1.0)
    c_a, c_b = shared_completion(e_a[:, None], e_b[None, :], s_a, s_b)
    benefit = (wait_weight * wait[:, None] + e_a[:, None] - c_a) - (c_b - e_b[None, :])
    gain_ok = 1 / s_a + 1 / s_b >= 1 + min_gain
    benefit = np.where(ok & p90_ok & gain_ok, benefit, -np.inf)
    singles = k_a == 1
    taken = np.zeros(single.shape[0], dtype=bool)
    # 3. Multi-GPU jobs first among the waiting (they are rarer and need several GPUs at once): greedy.
    for r in np.flatnonzero(~singles):
        need = int(k_a[r]) - state.n_free
        row = np.where(taken, -np.inf, benefit[r])
        best = np.argsort(-row, kind="stable")[:need]
        if best.shape[0] < need or not np.all(row[best] > min_benefit):
            continue
        free = pick_free_gpus(state.free_mask(), cluster.node, state.n_free) if state.n_free else None
        gpus = single[best] if free is None else np.concatenate([free, single[best]])
        taken[best] = True
        i = int(waits[r])
        state.place(int(queue.job[i]), int(queue.workload[i]), float(queue.remaining[i]), gpus)
        placements.append(Placement(int(queue.job[i]), tuple(sorted(int(g) for g in gpus))))
    rows = np.flatnonzero(singles)
    cols = np.flatnonzero(~taken)
    if rows.shape[0] == 0 or cols.shape[0] == 0:
        return placements
    if mode == "slots":
        # Each single-GPU job either joins a resident (cost: both jobs' stretch) or waits for a released GPU
        # (cost: the wait of the r-th release). Waiting jobs take the soonest releases whoever they are, so
        # the assignment decides how many share, and which, by the stretch it costs.
        stretch = (c_a - e_a[:, None]) + (c_b - e_b[None, :])
        stretch = stretch + release_weight * (np.maximum(c_a, c_b) - e_b[None, :])
        allowed = ok & p90_ok & gain_ok
        cost_share = np.where(allowed, stretch, np.inf)[np.ix_(rows, cols)]
        n = rows.shape[0]
        slot_rank = np.minimum(np.arange(n), release.shape[0] - 1)
        cost_wait = np.broadcast_to(wait_weight * release[slot_rank], (n, n))
        big = 1e18
        cost = np.concatenate([np.where(np.isfinite(cost_share), cost_share, big), cost_wait], axis=1)
        r_idx, c_idx = linear_sum_assignment(cost)
        for r, c in zip(r_idx.tolist(), c_idx.tolist()):
            if c >= cols.shape[0] or cost[r, c] >= big:
                continue
            i = int(waits[rows[r]])
            placements.append(Placement(int(queue.job[i]), (int(single[cols[c]]),)))
        return placements
    weights = benefit[np.ix_(rows, cols)]
    useful = weights > min_benefit
    if not useful.any():
        return placements
    rows, cols = rows[useful.any(axis=1)], cols[useful.any(axis=0)]
    weights = benefit[np.ix_(rows, cols)]
    # Maximum-weight assignment; pairs below the threshold get weight 0 and are dropped after.
    score = np.where(weights > min_benefit, weights, 0.0)
    r_idx, c_idx = linear_sum_assignment(score, maximize=True)
    for r, c in zip(r_idx.tolist(), c_idx.tolist()):
        if weights[r, c] <= min_benefit:
            continue
        i = int(waits[rows[r]])
        g = single[cols[c]]
        placements.append(Placement(int(queue.job[i]), (int(g),)))
    return placements
