"""``sharewise``: ours. Shortest job first on free GPUs placed by effective speed, then SLO-safe sharing
where the gain holds at the pessimistic end of the predicted interval.

1. **Free GPUs.** Queued jobs start in SJF order while they fit. Among the jobs starting now, the longest
   takes the fastest placement (PAL's effective speed: the slowest of its GPUs, divided by the cross-node
   slowdown when they span nodes; ties: fewer nodes, then the fullest node), so per-GPU speed and locality
   go where a job's completion time depends on them most. On uniform GPUs this is best-fit packing.
2. **Sharing.** The head of the SJF queue that found no free GPU may join a GPU that holds one job. A pair
   may share only if, at the predicted **p90** slowdowns,

   - each job's realized slowdown (its run time over its exclusive run time, counting what the resident has
     already run) stays within the SLO, and
   - sharing pays: the two jobs' summed extra run time (stretch) is less than the time the joiner saves by
     not waiting, which is the earlier of the resident's own end (SJF-BSBF's sequential alternative) and the
     predicted release of the GPU the joiner would get in the waiting line.

   Run times are divided by the speed of the GPU in question, so a slow GPU is a worse host. One assignment
   (Hungarian) over the head of the queue and the GPUs holding one job maximizes the summed saving; a
   multi-GPU job takes its best GPUs greedily when each of them saves.
3. **Learning.** Once a pair has run together its measured slowdown replaces the prediction (the simulator's
   observation, on by default; a cluster measures its running jobs' throughput), so every later decision
   about that pair is certain: p10 = p50 = p90 = measured.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.optimize import linear_sum_assignment

from sharewise.policy._sharing import SharingState, candidates
from sharewise.policy.base import ClusterState, Placement, Queue, in_order, pick_free_gpus, smallest_first
from sharewise.policy.pal import fastest_block
from sharewise.policy.pm_first import by_sensitivity
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
    quantile: str = "p90",
    slo_quantile: str = "p90",
) -> list[Placement]:
    """Place jobs shortest first on free GPUs by effective speed, then let waiting jobs join where it pays.

    Parameters
    ----------
    max_slowdown
        SLO on each job's realized slowdown, checked at the predicted p90 (default: ``cluster.slo``).
    head
        How many waiting jobs at the head of the SJF queue compete for shared GPUs in one call.
    quantile
        Slowdown quantile the benefit of sharing is judged at (``p90``: the pessimistic end).
    slo_quantile
        Slowdown quantile the SLO is checked at.

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
    placements, waiting = _start_on_free_gpus(queue, cluster, state, cand, head)
    if not waiting or state.n_single == 0:
        return placements
    waits = np.array(waiting, dtype=np.int64)
    single = state.single_gpus()
    rows, cols, saving = _sharing_savings(
        queue, cluster, table, state, waits, single, now, max_slowdown, quantile, slo_quantile
    )
    good = saving > 0
    if not good.any():
        return placements
    k_a = queue.gpus[waits[rows]]
    taken = np.zeros(cols.shape[0], dtype=bool)
    # Multi-GPU jobs (rare) first: their best shared GPUs, when every one of them saves.
    for r in np.flatnonzero(k_a > 1):
        need = int(k_a[r]) - state.n_free
        if need <= 0 or need > cols.shape[0]:
            continue
        row = np.where(taken, -np.inf, saving[r])
        best = np.argsort(-row, kind="stable")[:need]
        if not np.all(row[best] > 0):
            continue
        free = pick_free_gpus(state.free_mask(), cluster.node, state.n_free) if state.n_free else None
        shared = single[cols[best]]
        gpus = shared if free is None else np.concatenate([free, shared])
        taken[best] = True
        i = int(waits[rows[r]])
        state.place(int(queue.job[i]), int(queue.workload[i]), float(queue.remaining[i]), gpus)
        placements.append(Placement(int(queue.job[i]), tuple(sorted(int(g) for g in gpus))))
    # Single-GPU jobs: one assignment to shared GPUs (or to waiting, which saves nothing).
    good &= (k_a == 1)[:, None] & ~taken[None, :]
    use_r, use_c = good.any(axis=1), good.any(axis=0)
    if not use_r.any():
        return placements
    gain = saving[np.ix_(use_r, use_c)]
    cost = np.where(gain > 0, -gain, _FORBIDDEN)
    m = cost.shape[0]
    r_idx, c_idx = linear_sum_assignment(np.concatenate([cost, np.zeros((m, m))], axis=1))
    row_of, col_of = rows[use_r], cols[use_c]
    for r, c in zip(r_idx.tolist(), c_idx.tolist(), strict=True):
        if c < col_of.shape[0] and cost[r, c] < _FORBIDDEN:
            i = int(waits[row_of[r]])
            placements.append(Placement(int(queue.job[i]), (int(single[col_of[c]]),)))
    return placements


def _start_on_free_gpus(queue, cluster, state, cand, head) -> tuple[list[Placement], list[int]]:
    """Step 1: SJF order while jobs fit on free GPUs; the longest of them gets the fastest placement.

    Returns the placements and the queue positions of the first ``head`` jobs that must wait.
    """
    waiting: list[int] = []
    starting: list[int] = []
    if state.n_free == 0:
        return [], cand[smallest_first(queue.remaining[cand], head)[:head]].tolist()
    n_free = state.n_free
    for i in in_order(queue.remaining[cand], n_free + head, cand):
        k = int(queue.gpus[i])
        if k <= n_free:
            starting.append(i)
            n_free -= k
        else:
            waiting.append(i)
            if len(waiting) >= head:
                break
    placements = []
    penalty = cluster.cross_node_slowdown
    uniform = penalty == 1.0 and bool(np.all(cluster.speed == cluster.speed[0]))
    for i in by_sensitivity(queue, starting):
        k = int(queue.gpus[i])
        if uniform:  # every placement is equally fast: pack (best fit), as PAL's rule then does
            gpus = pick_free_gpus(state.free_mask(), cluster.node, k)
        else:
            gpus = fastest_block(state.free_mask(), cluster.speed, cluster.node, k, penalty)
        state.place(int(queue.job[i]), int(queue.workload[i]), float(queue.remaining[i]), gpus)
        placements.append(Placement(int(queue.job[i]), tuple(sorted(int(g) for g in gpus))))
    return placements, waiting


@functools.lru_cache(maxsize=16)
def _pair_constants(table: SlowdownTable, quantile: str) -> tuple[np.ndarray, ...]:
    """Per workload pair, flattened (``i * n + j``), at ``quantile`` slowdowns: may share, slowdown, and the
    closed-form constants of ``shared_completion`` (stretch and the partner's extension when ``i`` ends first)."""
    ok = table.allowed
    q = np.where(ok, getattr(table, quantile), 1.0)
    # If i ends first, the pair's stretch is e_i (2 q_ij - 1 - q_ij / q_ji) and j ends at e_j + e_i q_ij (1 - 1/q_ji).
    stretch = 2 * q - 1 - q / q.T
    extra = q * (1 - 1 / q.T)
    joinable = ok.any(axis=0)
    return tuple(np.ascontiguousarray(x).ravel() for x in (ok, q, stretch, extra, joinable))


def _sharing_savings(
    queue, cluster, table, state, waits, single, now, max_slowdown, quantile, slo_quantile
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(rows, cols, saving)``: ``saving[i, j]`` is the time waiting job ``waits[rows[i]]`` saves by
    joining the lone resident of GPU ``single[cols[j]]``, at ``quantile`` slowdowns; -inf where the pair may
    not share or where the SLO would not hold at ``slo_quantile`` slowdowns (module docstring).

    Only GPUs whose resident still has SLO budget, and jobs that may join one of them, are scored; closed
    forms over per-pair constants (``_pair_constants``) keep this a few vector operations per call.
    """
    empty = np.empty(0, dtype=np.int64)
    ok, q, _, extra, joinable = _pair_constants(table, slo_quantile)
    _, g, stretch, _, _ = _pair_constants(table, quantile)
    n = len(table)
    resident = state.partner[single]
    speed = cluster.speed[single]
    e_b = state.remaining[single] / speed
    wl_b = state.partner_wl[single]
    # Wall seconds the resident may still run within its SLO (its realized slowdown counts from its start).
    budget = max_slowdown * cluster.job_work[resident] / speed - (now - cluster.job_start[resident])
    cols = np.flatnonzero((e_b <= budget) & joinable[wl_b])
    if cols.shape[0] == 0:
        return empty, empty, np.empty((0, 0))
    wl_a = queue.workload[waits]
    types_b = np.zeros(n, dtype=bool)
    types_b[wl_b[cols]] = True
    rows = np.flatnonzero(ok.reshape(n, n)[wl_a][:, types_b].any(axis=1))
    if rows.shape[0] == 0:
        return empty, empty, np.empty((0, 0))
    ab = wl_a[rows][:, None] * n + wl_b[cols][None, :]
    ba = wl_b[cols][None, :] * n + wl_a[rows][:, None]
    sp = speed[cols][None, :]
    ea = queue.remaining[waits[rows]][:, None] / sp
    eb, bud = e_b[cols][None, :], budget[cols][None, :]
    q_ab, q_ba = q.take(ab), q.take(ba)
    a_first = q_ab * ea <= q_ba * eb
    slo = np.where(
        a_first,
        (q_ab <= max_slowdown) & (eb + ea * extra.take(ab) <= bud),
        (q_ba * eb <= bud) & (ea + eb * extra.take(ba) <= max_slowdown * ea),
    )
    slo &= ok.take(ab)
    gain_a_first = g.take(ab) * ea <= g.take(ba) * eb if quantile != slo_quantile else a_first
    pair_stretch = np.where(gain_a_first, ea * stretch.take(ab), eb * stretch.take(ba))
    # The joiner's alternative: wait for this resident, or for its turn in the waiting line, whichever is
    # sooner (waiting jobs take the predicted GPU releases in SJF order, as many GPUs as each asks for).
    release = release_times(cluster, table, m=int(queue.gpus[waits].sum()) + 1)
    rank = np.minimum(np.cumsum(queue.gpus[waits]) - 1, release.shape[0] - 1)
    wait = np.minimum(eb, release[rank][rows][:, None])
    return rows, cols, np.where(slo, wait - pair_stretch, -np.inf)
