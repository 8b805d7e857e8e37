"""``sharewise``: our policy. Shortest job first on free GPUs, then SLO-bounded, benefit-maximizing sharing.

Jobs that find no free GPU either join a GPU that holds one job or wait. Joining is allowed only if, at the
predicted p90 slowdowns, each job's realized slowdown (its run time over its exclusive run time, counting what
the resident has already run) stays within the SLO. Among allowed choices, one assignment over the head of the
SJF queue and every shareable GPU minimizes the expected summed delay: a job that shares costs both jobs'
stretch (the extra run time at p50 slowdowns); a job that waits costs the time until a GPU is released for it
(the waiting jobs take the predicted GPU release times in order, whoever they are, so the assignment decides
how many jobs share and which by what sharing costs). A multi-GPU job takes its cheapest GPUs greedily.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.optimize import linear_sum_assignment

from sharewise.policy._sharing import SharingState, candidates
from sharewise.policy.base import ClusterState, Placement, Queue, in_order, pick_free_gpus, smallest_first
from sharewise.policy.table import SlowdownTable

# Cost that marks a forbidden (job, GPU) cell in the assignment; finite, as linear_sum_assignment requires.
_FORBIDDEN = 1e18


def shared_completion(
    e_a: np.ndarray, e_b: np.ndarray, s_a: np.ndarray, s_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(C_a, C_b)``: when each of two jobs ends if they share from now until the first one ends.

    ``e`` are remaining exclusive times, ``s`` slowdowns next to each other. The job that ends first does so
    at ``s * e``; the other then runs alone for the work it has left.

    Example: ``e_a=2, e_b=4, s_a=s_b=1.5`` gives ``C_a = 3.0`` and ``C_b = 3 + 4 - 3/1.5 = 5.0``.
    """
    f_a = s_a * e_a
    f_b = s_b * e_b
    a_first = f_a <= f_b
    c_a = np.where(a_first, f_a, f_b + e_a - f_b / s_a)
    c_b = np.where(a_first, f_a + e_b - f_a / s_b, f_b)
    return c_a, c_b


@functools.lru_cache(maxsize=8)
def _coefficients(table: SlowdownTable) -> tuple[np.ndarray, ...]:
    """Per workload pair, flattened (``i * n + j``): the constants of ``sharing_costs``' closed forms."""
    ok = table.allowed
    s50 = np.where(ok, table.p50, 1.0)
    s90 = np.where(ok, table.p90, 1.0)
    # If a ends first, the pair's stretch is e_a * (2 s_ab - 1 - s_ab / s_ba) (see shared_completion).
    stretch = 2 * s50 - 1 - s50 / s50.T
    # If a ends first, b ends at e_b + e_a * s_ab (1 - 1 / s_ba) (p90 slowdowns).
    extra90 = s90 * (1 - 1 / s90.T)
    # Per resident workload: may any workload join it at all?
    joinable = ok.any(axis=0)
    return tuple(np.ascontiguousarray(x).ravel() for x in (ok, s50, s90, stretch, extra90, joinable))


def sharing_costs(
    wl_a: np.ndarray,
    e_a: np.ndarray,
    wl_b: np.ndarray,
    e_b: np.ndarray,
    elapsed_b: np.ndarray,
    work_b: np.ndarray,
    table: SlowdownTable,
    max_slowdown: float,
) -> np.ndarray:
    """Return the (jobs x GPUs) cost of each waiting job ``a`` joining each lone resident ``b``.

    The cost is the pair's stretch (extra run time of both jobs at p50 slowdowns, ``shared_completion``);
    ``_FORBIDDEN`` where the pair may not share or where, at p90, ``a``'s slowdown or ``b``'s realized
    slowdown (``elapsed_b`` run so far, ``work_b`` its whole exclusive time) would exceed ``max_slowdown``.
    Closed forms over per-pair constants keep this a few vector operations per call.
    """
    ok, s50, s90, stretch, extra90, joinable = _coefficients(table)
    n = len(table)
    cost = np.full((wl_a.shape[0], wl_b.shape[0]), _FORBIDDEN)
    # A resident already at its budget cannot slow down any further.
    budget_b = max_slowdown * work_b - elapsed_b
    cols = np.flatnonzero((e_b <= budget_b) & joinable[wl_b])
    if cols.shape[0] == 0 or wl_a.shape[0] == 0:
        return cost
    ab = wl_a[:, None] * n + wl_b[cols][None, :]
    ba = wl_b[cols][None, :] * n + wl_a[:, None]
    ea, eb, budget = e_a[:, None], e_b[cols][None, :], budget_b[cols][None, :]
    s90_ab, s90_ba = s90.take(ab), s90.take(ba)
    a_first = s90_ab * ea <= s90_ba * eb
    slo = np.where(
        a_first,
        (s90_ab <= max_slowdown) & (eb + ea * extra90.take(ab) <= budget),
        (s90_ba * eb <= budget) & (ea + eb * extra90.take(ba) <= max_slowdown * ea),
    )
    slo &= ok.take(ab)
    if not slo.any():
        return cost
    a_first = s50.take(ab) * ea <= s50.take(ba) * eb
    value = np.where(a_first, ea * stretch.take(ab), eb * stretch.take(ba))
    cost[:, cols] = np.where(slo, value, _FORBIDDEN)
    return cost


def release_times(cluster: ClusterState, table: SlowdownTable, m: int | None = None) -> np.ndarray:
    """Predict when GPUs become free (seconds from now, p50 slowdowns), ascending; a free GPU counts as 0.

    With ``m``, only the ``m`` soonest releases are returned (a partial sort: policies need the head only).
    """
    res = cluster.resident
    speed = cluster.speed
    out = np.zeros(cluster.n_gpus)
    one = (res[:, 0] >= 0) & (res[:, 1] < 0)
    two = res[:, 1] >= 0
    out[one] = cluster.job_remaining[res[one, 0]] / speed[one]
    if two.any():
        a, b = res[two, 0], res[two, 1]
        wa, wb = cluster.job_workload[a], cluster.job_workload[b]
        # A running pair the table knows nothing about counts as not slowed down.
        s_ab = np.where(table.allowed[wa, wb], table.p50[wa, wb], 1.0)
        s_ba = np.where(table.allowed[wb, wa], table.p50[wb, wa], 1.0)
        c_a, c_b = shared_completion(cluster.job_remaining[a], cluster.job_remaining[b], s_ab, s_ba)
        out[two] = np.maximum(c_a, c_b) / speed[two]
    if m is not None and m < out.shape[0]:
        out = np.partition(out, m - 1)[:m]
    return np.sort(out)


def sharewise(
    queue: Queue,
    cluster: ClusterState,
    table: SlowdownTable,
    now: float,
    *,
    max_slowdown: float | None = None,
    head: int = 24,
) -> list[Placement]:
    """Place jobs shortest first on free GPUs, then let waiting jobs join resident jobs where it pays off.

    Parameters
    ----------
    max_slowdown
        SLO on each job's realized slowdown, checked at the predicted p90 (default: ``cluster.slo``).
    head
        How many waiting jobs at the head of the SJF queue compete for shared GPUs in one call (24: as good
        as 32 or 64 on the Gavel trace, within noise, and keeps the full Philly trace under a minute).

    Returns
    -------
    list of Placement, e.g. ``[Placement(job=4, gpus=(17,)), Placement(job=9, gpus=(3, 4))]``.
    """
    if len(queue) == 0:
        return []
    if max_slowdown is None:
        max_slowdown = cluster.slo
    state = SharingState(cluster, table)
    cand = candidates(queue, state)
    if cand.shape[0] == 0:
        return []
    placements: list[Placement] = []
    waiting: list[int] = []
    # 1. Free GPUs, shortest job first, on as few nodes as possible. With none free (the common case in a busy
    # cluster) the head of the SJF queue simply waits: one partial sort, no loop.
    if state.n_free == 0:
        waiting = cand[smallest_first(queue.remaining[cand], head)[:head]].tolist()
    else:
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
    # 2. Costs of sharing (stretch of both jobs) and of waiting (time to the r-th GPU release).
    single = state.single_gpus()
    resident = state.partner[single]
    waits = np.array(waiting, dtype=np.int64)
    k_a = queue.gpus[waits]
    share_cost = sharing_costs(
        queue.workload[waits],
        queue.remaining[waits],
        state.partner_wl[single],
        state.remaining[single] / cluster.speed[single],
        now - cluster.job_start[resident],
        cluster.job_work[resident],
        table,
        max_slowdown,
    )
    usable_count = (share_cost < _FORBIDDEN).sum(axis=1)
    if not usable_count.any():
        return placements
    release = release_times(cluster, table, m=int(k_a.sum()) + 1)
    # Waiting jobs take releases in SJF order; a k-GPU job needs the k-th release after those ahead of it.
    rank = np.cumsum(k_a) - 1
    wait_cost = release[np.minimum(rank, release.shape[0] - 1)]
    taken = np.zeros(single.shape[0], dtype=bool)
    # 3. Multi-GPU jobs (rare): their cheapest GPUs, if that costs less than waiting.
    for r in np.flatnonzero((k_a > 1) & (usable_count >= k_a - state.n_free)):
        need = int(k_a[r]) - state.n_free
        row = np.where(taken, _FORBIDDEN, share_cost[r])
        if need > row.shape[0]:
            continue
        # The need cheapest costs (a partition, no sort) decide; most such jobs keep waiting.
        cheapest = np.partition(row, need - 1)[:need]
        if cheapest.max() >= _FORBIDDEN or cheapest.sum() >= wait_cost[r]:
            continue
        best = np.argsort(row, kind="stable")[:need]
        free = pick_free_gpus(state.free_mask(), cluster.node, state.n_free) if state.n_free else None
        gpus = single[best] if free is None else np.concatenate([free, single[best]])
        taken[best] = True
        i = int(waits[r])
        state.place(int(queue.job[i]), int(queue.workload[i]), float(queue.remaining[i]), gpus)
        placements.append(Placement(int(queue.job[i]), tuple(sorted(int(g) for g in gpus))))
    # 4. Single-GPU jobs: one assignment of jobs to shared GPUs or to the waiting line.
    rows = np.flatnonzero(k_a == 1)
    cols = np.flatnonzero(~taken)
    if rows.shape[0] == 0 or cols.shape[0] == 0:
        return placements
    cost = share_cost[np.ix_(rows, cols)]
    usable_rows = (cost < _FORBIDDEN).any(axis=1)
    usable_cols = (cost < _FORBIDDEN).any(axis=0)
    if not usable_rows.any():
        return placements
    n_wait = rows.shape[0]
    ranks = np.minimum(np.arange(n_wait), release.shape[0] - 1)
    # Only jobs and GPUs with an allowed pair enter the assignment; the others wait anyway. Whoever waits
    # takes the soonest releases, so j jobs sharing saves the j latest of the n_wait releases: the m usable
    # jobs are offered the m latest slots.
    rows, cols = rows[usable_rows], cols[usable_cols]
    m = rows.shape[0]
    cost = share_cost[np.ix_(rows, cols)]
    line = np.broadcast_to(release[ranks[n_wait - m :]], (m, m))
    r_idx, c_idx = linear_sum_assignment(np.concatenate([cost, line], axis=1))
    for r, c in zip(r_idx.tolist(), c_idx.tolist(), strict=True):
        if c < cols.shape[0] and cost[r, c] < _FORBIDDEN:
            i = int(waits[rows[r]])
            placements.append(Placement(int(queue.job[i]), (int(single[cols[c]]),)))
    return placements
