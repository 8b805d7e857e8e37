"""``sharewise``: ours. Shortest job first on free GPUs placed by effective speed, SLO-safe sharing where
the gain holds at the pessimistic end of the predicted interval, and SLO-guarded preemption of long jobs.

1. **Free GPUs.** Queued jobs start in SJF order while they fit. Among the jobs starting now, the longest
   takes the fastest placement (PAL's effective speed: the slowest of its GPUs, divided by the cross-node
   slowdown when they span nodes; ties: fewer nodes, then the fullest node), so per-GPU speed and locality
   go where a job's completion time depends on them most. On uniform GPUs this is best-fit packing. Where
   the cluster has PAL's per-class variability, a GPU's speed is its speed for the job's class.
2. **Sharing.** The head of the SJF queue that found no free GPU may join a GPU that holds one job. A pair
   may share only if, at the predicted **p90** slowdowns,

   - each job's realized slowdown (its run time over its exclusive run time, counting what either job has
     already run: the resident, and a joiner that was preempted before) stays within the SLO, and
   - sharing pays: the two jobs' summed extra run time (stretch) is less than the time the joiner saves by
     not waiting, which is the earlier of the resident's own end (SJF-BSBF's sequential alternative) and the
     predicted release of the GPU the joiner would get in the waiting line.

   Run times are divided by the speed of the GPU in question, so a slow GPU is a worse host. One assignment
   (Hungarian) over the head of the queue and the GPUs holding one job maximizes the summed saving; a
   multi-GPU job takes its best GPUs greedily when each of them saves and the SLO holds for it and every
   resident at once (``_multi_join_holds``: it runs at the rate of its worst GPU). A GPU whose job shares
   another of its GPUs is not offered: that job runs slowed there, for a time the check cannot see.
3. **Learning.** Once a pair has run together its measured slowdown replaces the prediction (the simulator's
   observation, on by default; a cluster measures its running jobs' throughput), so every later decision
   about that pair is certain: p10 = p50 = p90 = measured.
4. **Preemption** (``preempt``, on by default; ``_preemption`` states the rules): where a shared pair,
   once measured, would break a job's SLO, the side whose pause helps is paused (``rescue``, step 3 acted
   on); a preempted job whose SLO slack runs low restarts before anything else, and after steps 1-2 a job
   still waiting may preempt jobs with several times its remaining run time that hold their GPUs alone,
   where the victims' SLO still holds after the wait (shortest remaining first, as SRPT). Pausing a long
   job costs it little of its SLO, where sharing costs both jobs a slowdown for the whole time they share.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.optimize import linear_sum_assignment

from sharewise.policy import _kernels
from sharewise.policy._preemption import preempt_and_place
from sharewise.policy._replacement import replace_lone_jobs
from sharewise.policy._sharing import SharingState
from sharewise.policy.base import ClusterState, Decision, Placement, Queue, as_decision, pick_free_gpus
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


def release_times(cluster: ClusterState, table: SlowdownTable, m: int | None = None) -> np.ndarray:
    """Predict when GPUs become free (seconds from now, p50 slowdowns), ascending; a free GPU counts as 0.

    With ``m``, only the ``m`` soonest releases are returned (a partial sort: policies need the head only).
    """
    return _kernels.release_times(
        cluster.resident, cluster.job_remaining, cluster.job_workload, cluster.speed, table.allowed, table.p50,
        cluster.n_gpus if m is None else min(m, cluster.n_gpus),
    )


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
    preempt: bool = True,
    rescue: bool = True,
    replace: bool | None = None,
) -> Decision | list[Placement]:
    """Place jobs shortest first on free GPUs by effective speed, then let waiting jobs join where it pays;
    with ``preempt``, restart urgent preempted jobs first and preempt long jobs for short ones (step 4).

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
    preempt
        Step 4: urgent restarts and SLO-guarded preemption of long jobs for short ones. Off, the policy never
        stops a running job and returns plain placements.
    rescue
        With ``preempt``, pause one side of a shared pair whose measured slowdowns would break the SLO
        (``_preemption.slo_rescues``); off for the ablation.
    replace
        Step 5: after the decision, re-place the jobs that run alone on the GPUs fastest for them
        (``_replacement``), as PAL does every round. ``None`` (default): only where migrating costs nothing
        (``cluster.preempt_delay_s == 0``) and GPUs have PAL's per-class speeds (``cluster.class_speed``);
        elsewhere our placements stay as they were before this step existed.

    Returns
    -------
    Decision (with ``preempt``) or list of Placement, e.g. ``Decision(start=[Placement(job=4, gpus=(17,))],
    preempt=(2,), wake_at=7200.0)``.
    """
    if len(queue) == 0 and not preempt:
        return []
    if max_slowdown is None:
        max_slowdown = cluster.slo

    def place(q: Queue, c: ClusterState) -> list[Placement]:
        placements = _sharewise_packed(q, c, table, now, max_slowdown, head, quantile, slo_quantile)
        if placements is not None:
            return placements
        return _sharewise_general(q, c, table, now, max_slowdown, head, quantile, slo_quantile)

    if replace is None:
        replace = cluster.preempt_delay_s == 0 and cluster.class_speed is not None
    if not preempt:
        decision = place(queue, cluster)
    elif not rescue:
        decision = preempt_and_place(queue, cluster, now, max_slowdown, place)
    else:
        decision = preempt_and_place(
            queue, cluster, now, max_slowdown, place, _pair_constants(table, slo_quantile)[1], _unsure(table)
        )
    if replace:
        return replace_lone_jobs(as_decision(decision), queue, cluster)
    return decision


sharewise.preemptive = True  # the simulator calls it whenever jobs wait (it may stop running jobs)


def _sharewise_general(queue, cluster, table, now, max_slowdown, head, quantile, slo_quantile) -> list[Placement]:
    """The policy on any cluster, step by step (``_sharewise_packed`` gives the same placements in one
    kernel where every placement is equally fast)."""
    occupancy = cluster.occupancy()
    *residents, n_free, starting, waiting = _kernels.sharing_prepare(
        occupancy, cluster.resident, cluster.job_workload, cluster.job_remaining, table.allowed, queue.gpus,
        queue.workload, queue.remaining, head,
    )
    if starting.shape[0] == 0 and waiting.shape[0] == 0:
        return []
    state = SharingState(cluster, table, occupancy, tuple(residents))
    placements = _start_on_free_gpus(queue, cluster, state, starting) if starting.shape[0] else []
    if waiting.shape[0] == 0 or state.n_single == 0:
        return placements
    k_a = queue.gpus[waiting]
    single, saving, n_good = _sharing_savings(
        queue, cluster, table, state, waiting, k_a, now, max_slowdown, quantile, slo_quantile
    )
    if not n_good.any():
        return placements
    taken = np.zeros(single.shape[0], dtype=bool)
    # Multi-GPU jobs (rare) first: their best shared GPUs, when every one of them saves (a job with fewer
    # saving GPUs than it needs cannot; GPUs taken by an earlier job only lower that count).
    for r in np.flatnonzero((k_a > 1) & (n_good > 0)).tolist():
        need = int(k_a[r]) - state.n_free
        if need <= 0 or need > n_good[r]:
            continue
        row = np.where(taken, -np.inf, saving[r])
        best = np.argsort(-row, kind="stable")[:need]
        if not np.all(row[best] > 0):
            continue
        free = pick_free_gpus(state.free_mask(), cluster.node, state.n_free) if state.n_free else None
        shared = single[best]
        gpus = shared if free is None else np.concatenate([free, shared])
        i = int(waiting[r])
        if not _multi_join_holds(queue, cluster, table, i, shared, gpus, now, max_slowdown, slo_quantile):
            continue
        taken[best] = True
        state.place(int(queue.job[i]), int(queue.workload[i]), float(queue.remaining[i]), gpus)
        placements.append(Placement(int(queue.job[i]), tuple(sorted(int(g) for g in gpus))))
    # Single-GPU jobs: one assignment to shared GPUs (or to waiting, which saves nothing: the zero columns).
    cost, rows, cols = _kernels.assignment_costs(saving, k_a, taken, _FORBIDDEN)
    return placements + _assign(queue, waiting, single, cost, rows, cols)


def _multi_join_holds(queue, cluster, table, i, shared, gpus, now, max_slowdown, slo_quantile) -> bool:
    """The SLO check of a multi-GPU job joining the residents of ``shared`` (its GPUs ``gpus``), all at once.

    Each GPU's own check (``_kernels.sharing_savings``) pictures the joiner next to that GPU's resident
    alone. Spread over residents of several workloads, the joiner runs at the rate of its worst GPU: its
    slowdown is the largest of theirs while they all stay, so it may end later than any one check assumed,
    and stretch every resident longer. Bounds that hold whatever order they end in: the joiner ends by
    ``t = max q_ab x e_a`` (``e_a`` on its slowest GPU); resident ``b`` then ends by
    ``min(q_ba e_b, e_b + t (1 - 1/q_ba))`` (it shares for ``t`` at most). Both must fit the budget the
    SLO leaves each job, counting what it has already run (a preempted joiner too).
    """
    _, q, _, _, _ = _pair_constants(table, slo_quantile)
    return _kernels.multi_join_holds(
        int(queue.job[i]), int(queue.workload[i]), float(queue.remaining[i]), shared, float(cluster.speed[gpus].min()),
        cluster.resident, cluster.job_workload, cluster.job_remaining, cluster.job_work, cluster.job_start,
        cluster.speed, q, len(table), float(now), float(max_slowdown),
    )


def _assign(queue, waiting, single, cost, rows, cols) -> list[Placement]:
    """Solve the assignment of waiting jobs ``waiting[rows]`` to GPUs ``single[cols]`` (``cost`` from
    ``_kernels.assignment_costs``: one zero column per job for waiting)."""
    if rows.shape[0] == 0:
        return []
    placements = []
    n_cols = cols.shape[0]
    for r, c in zip(*linear_sum_assignment(cost), strict=True):
        if c < n_cols and cost[r, c] < _FORBIDDEN:
            i = int(waiting[rows[r]])
            placements.append(Placement(int(queue.job[i]), (int(single[cols[c]]),)))
    return placements


def _sharewise_packed(queue, cluster, table, now, max_slowdown, head, quantile, slo_quantile):
    """The whole call in one kernel where every placement is equally fast (``_kernels.sharewise_packed``):
    the placements, or ``None`` where the general path must decide (GPUs of different speeds or a cross-node
    slowdown, or a multi-GPU job that could join shared GPUs)."""
    if cluster.class_speed is not None and not bool(np.all(cluster.class_speed == cluster.class_speed[0, 0])):
        return None  # GPUs differ in speed for some class: placements differ
    ok, q, _, extra, _ = _pair_constants(table, slo_quantile)
    _, g, stretch, _, _ = _pair_constants(table, quantile)
    occupancy = cluster.occupied if cluster.occupied is not None else cluster.occupancy()
    stage, started, start_gpus, waiting, single, cost, rows, cols = _kernels.sharewise_packed(
        occupancy, cluster.resident, cluster.node, cluster.job_workload, cluster.job_remaining, cluster.speed,
        float(cluster.cross_node_slowdown), cluster.job_work, cluster.job_start, table.allowed, table.p50,
        queue.job, queue.gpus, queue.workload, queue.remaining, head, float(now), ok, q, extra, g, stretch,
        quantile == slo_quantile, float(max_slowdown), _FORBIDDEN,
    )
    if stage == _kernels.IN_PYTHON:
        return None
    placements = []
    o = 0
    for i in started.tolist():
        k = int(queue.gpus[i])
        placements.append(Placement(int(queue.job[i]), tuple(start_gpus[o : o + k].tolist())))
        o += k
    return placements + _assign(queue, waiting, single, cost, rows, cols)


def _start_on_free_gpus(queue, cluster, state, starting) -> list[Placement]:
    """Step 1: place the jobs of the SJF walk that fit on free GPUs (``starting``, queue positions); the
    longest of them gets the fastest placement, by the GPUs' speeds for its class where the cluster has PAL's
    per-class variability (``ClusterState.speed_of``)."""
    placements = []
    penalty = cluster.cross_node_slowdown
    for i in by_sensitivity(queue, starting.tolist()):
        k = int(queue.gpus[i])
        speed = cluster.speed_of(int(queue.job[i]))
        if penalty == 1.0 and bool(np.all(speed == speed[0])):
            # Every placement is equally fast: pack (best fit), as PAL's rule then does.
            gpus = pick_free_gpus(state.free_mask(), cluster.node, k)
        else:
            gpus = fastest_block(state.free_mask(), speed, cluster.node, k, penalty)
        state.place(int(queue.job[i]), int(queue.workload[i]), float(queue.remaining[i]), gpus)
        placements.append(Placement(int(queue.job[i]), tuple(sorted(int(g) for g in gpus))))
    return placements


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


@functools.lru_cache(maxsize=16)
def _unsure(table: SlowdownTable) -> np.ndarray:
    """Per workload pair, flattened: whether its slowdowns (either way) are predicted, not measured (p10 < p90)."""
    spread = table.allowed & (table.p10 != table.p90)
    return np.ascontiguousarray(spread | spread.T).ravel()


def _sharing_savings(
    queue, cluster, table, state, waits, k_a, now, max_slowdown, quantile, slo_quantile
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(single, saving, n_good)``: the GPUs holding one job; ``saving[i, j]`` the time waiting job
    ``waits[i]`` saves by joining the lone resident of GPU ``single[j]``, at ``quantile`` slowdowns, -inf
    where the pair may not share or where the SLO would not hold at ``slo_quantile`` slowdowns (module
    docstring); ``n_good[i]`` the number of GPUs where job ``i`` saves time (``saving > 0``).

    The joiner's alternative is to wait for this resident, or for its turn in the waiting line, whichever
    is sooner: waiting jobs take the predicted GPU releases (``release_times``) in SJF order, as many GPUs
    as each asks for. Closed forms over per-pair constants (``_pair_constants``), evaluated cell by cell in
    a compiled kernel (``_kernels.sharing_gains``), which skips a GPU whose resident has no SLO budget left.
    """
    ok, q, _, extra, _ = _pair_constants(table, slo_quantile)
    _, g, stretch, _, _ = _pair_constants(table, quantile)
    return _kernels.sharing_gains(
        queue.job[waits], queue.workload[waits], queue.remaining[waits], k_a, state.partner, state.partner_wl,
        state.remaining, cluster.resident, cluster.job_remaining, cluster.job_workload, cluster.speed, cluster.job_work,
        cluster.job_start, table.allowed, table.p50, float(now), len(table), ok, q, extra, g, stretch,
        quantile == slo_quantile, float(max_slowdown),
    )
