"""SLO rescue, ``sharewise``'s step 0: where jobs that share GPUs would break the SLO by sharing on, pause the side
whose pause leaves fewer jobs over it.

Jobs share GPUs where their predicted p90 slowdowns allowed it; once the cluster has seen a pair run (the
simulator's observation), the table holds the measured slowdowns. Only groups with a GPU whose pair formed in
the last ``Params.recheck_s`` are checked (``ClusterState.placed_at``): a pair's slowdowns change only when it is
first measured, right after it forms, and a pair of measured partners passed the join's SLO check at the
measured values; rates only rise when a partner leaves. So the policy asks to be woken ``Params.tolerance_s``
after a job joins a partner it never ran with (``recheck``), and the check comes before the pair has run long.
On Gavel's V100 pairs, where the model's p90 misses ResNet-50's slowdown, this took the heavy cell's SLO
violations from 7 to 3 and Philly's from 14 to 1.
"""

from __future__ import annotations

import numpy as np

from sharewise.engine.compiled import kernel
from sharewise.engine.policy_types import Placement, Queue, readonly
from sharewise.policy.ours.arrays import Gpus, Jobs, Knobs, Pairs
from sharewise.policy.ours.slo import calm, end_bound, shared_ends
from sharewise.policy.ours.stage import Stage

_NEVER = readonly(np.empty(0, dtype=np.float64))  # no GPU says when its pair formed: check every shared GPU


def pauses(stage: Stage, jobs: Jobs, pairs: Pairs, knobs: Knobs) -> list[int]:
    """The jobs of ``stage``'s cluster to pause (``rescue_kernel`` states the rule), e.g. ``[7]``."""
    placed_at = stage.cluster.placed_at if stage.cluster.placed_at is not None else _NEVER
    out = rescue_kernel(placed_at, pairs.q, pairs.n, tuple(stage.gpus), tuple(jobs), tuple(knobs))
    return out.tolist() if out.shape[0] else []


def recheck(placed: list[Placement], stage: Stage, queue: Queue, unsure: np.ndarray, n: int) -> bool:
    """Whether one of ``placed`` (in order, on ``stage`` as it was before them; ``queue`` holds them) joins a
    resident with whom its slowdowns are predicted, not measured (``unsure``, flattened per pair of ``n``
    workloads): then the policy asks to be woken to check the pair once the cluster has seen it run."""
    occupancy, cluster = stage.occupancy, stage.cluster
    earlier: set[int] = set()  # GPUs that jobs placed before this one took
    for p in placed:
        shared = [g for g in p.gpus if occupancy[g] or g in earlier]
        if shared:
            wl = int(queue.workload[np.searchsorted(queue.job, p.job)])
            if any(unsure[wl * n + int(cluster.job_workload[cluster.resident[g, 0]])] for g in shared):
                return True
        earlier.update(p.gpus)
    return False


@kernel
def rescue_kernel(placed_at, q, n, gpus, jobs, knobs):  # pragma: no cover - compiled; hand-checked cases
    """The jobs to pause where jobs sharing GPUs, at ``q`` (flattened slowdowns, ``n`` workloads), would not all
    end within the SLO and pausing some of them leaves fewer over it.

    Jobs that share GPUs form groups: two jobs sharing only with each other (on one GPU or several), or a hub
    sharing with several jobs that share with it alone; other groups are left as they are. A job runs at the
    rate of its worst GPU (``_effective``: slowdown ``s``), and times are seconds at its effective speed: ``e``
    remaining alone, ``w`` its exclusive run time; its realized slowdown on a way on is (time since its first
    start + time to its end) / ``w``. Three ways on are compared: share on; pause one side, which restarts
    (with the restart cost) once the other side ends; pause the other side. A pause is taken only where it
    leaves fewer jobs over the SLO than sharing on (``_pause_choice``), so GPUs are never churned for nothing.
    A multi-GPU job is paused only where it keeps within ``slo.calm``: it may wait long to get all its GPUs
    back, which the restart-when-the-other-ends picture does not see.

    - Two jobs: sharing on ends them as ``slo.shared_ends`` does (exact).
    - A hub ``j`` and partners ``p``: ``j`` ends by ``t = s_j e_j``, and ``p`` by ``slo.end_bound`` (the bounds
      of the multi-GPU join); paused, the partners restart when ``j`` ends.

    Only groups with a GPU whose pair formed at or after ``now - recheck_s`` (``placed_at``; empty: every
    shared GPU) are checked. Two single-GPU jobs on a GPU are checked in the first pass over the GPUs; groups
    with a multi-GPU job, rarer, are then gathered from the GPUs that hold one.
    """
    gpus, jobs, knobs = Gpus(*gpus), Jobs(*jobs), Knobs(*knobs)
    occupancy, resident, speed, node, cross = gpus.occupancy, gpus.resident, gpus.speed, gpus.node, gpus.cross
    job_workload, job_remaining, job_work, job_start, job_ngpus = (jobs.workload, jobs.remaining, jobs.work,
                                                                   jobs.start, jobs.ngpus)
    now, slo, delay = knobs.now, knobs.slo, knobs.delay
    n_gpus = resident.shape[0]
    out = np.empty(n_gpus, dtype=np.int64)
    fresh = np.zeros(n_gpus, dtype=np.bool_)
    since = now - knobs.recheck_s
    any_fresh = False
    for g in range(n_gpus):
        fresh[g] = occupancy[g] == 2 and (placed_at.shape[0] == 0 or placed_at[g] >= since)
        any_fresh = any_fresh or fresh[g]
    if not any_fresh:
        return out[:0]
    m = 0
    limit = slo * (1.0 + 1e-9)
    paused_limit = calm(slo, knobs.urgency)
    multi = np.empty(2 * n_gpus, dtype=np.int64)  # jobs of shared GPUs with a multi-GPU job, with repeats
    n_multi = 0
    for g in range(n_gpus):
        if occupancy[g] != 2:
            continue
        a, b = resident[g, 0], resident[g, 1]
        if job_ngpus[a] != 1 or job_ngpus[b] != 1:
            multi[n_multi] = a
            multi[n_multi + 1] = b
            n_multi += 2
            continue
        if not fresh[g]:
            continue
        sp = speed[g]
        way = _two_jobs(
            job_remaining[a] / sp, job_work[a] / sp, now - job_start[a], q[job_workload[a] * n + job_workload[b]],
            delay / sp, limit,
            job_remaining[b] / sp, job_work[b] / sp, now - job_start[b], q[job_workload[b] * n + job_workload[a]],
            delay / sp, limit, limit,
        )
        if way >= 0:
            out[m] = b if way == 0 else a
            m += 1
    if n_multi == 0:
        return out[:m]
    members = np.unique(multi[:n_multi])
    k = members.shape[0]
    # Each job's GPUs (``on[first[i]:first[i + 1]]``) and its distinct partners.
    count = np.zeros(k + 1, dtype=np.int64)
    slot_job = np.full((n_gpus, 2), -1, dtype=np.int64)
    for g in range(n_gpus):
        for slot in range(2):
            r = resident[g, slot]
            if r >= 0:
                i = np.searchsorted(members, r)
                if i < k and members[i] == r:
                    slot_job[g, slot] = i
                    count[i + 1] += 1
    first = np.cumsum(count)
    on = np.empty(first[k], dtype=np.int64)
    fill = first[:k].copy()
    for g in range(n_gpus):
        for slot in range(2):
            i = slot_job[g, slot]
            if i >= 0:
                on[fill[i]] = g
                fill[i] += 1
    partner = np.full(k, -1, dtype=np.int64)  # the one partner, -2 with several
    for i in range(k):
        for c in range(first[i], first[i + 1]):
            g = on[c]
            o = resident[g, 1] if resident[g, 0] == members[i] else resident[g, 0]
            if o < 0 or o == partner[i]:
                continue
            partner[i] = o if partner[i] == -1 else -2
    for i in range(k):
        x = members[i]
        new = False
        for c in range(first[i], first[i + 1]):
            new = new or fresh[on[c]]
        if not new:  # every GPU the group shares is on x's: none of them formed its pair just now
            continue
        if partner[i] >= 0:  # two jobs sharing only with each other: from the lower id
            y = partner[i]
            iy = np.searchsorted(members, y)
            if y < x or partner[iy] != x:
                continue
            s_x, sp_x = _effective(x, on[first[i]:first[i + 1]], resident, speed, node, cross, job_workload, q, n)
            s_y, sp_y = _effective(y, on[first[iy]:first[iy + 1]], resident, speed, node, cross, job_workload, q, n)
            way = _two_jobs(
                job_remaining[x] / sp_x, job_work[x] / sp_x, now - job_start[x], s_x, delay / sp_x,
                limit if job_ngpus[x] == 1 else paused_limit,
                job_remaining[y] / sp_y, job_work[y] / sp_y, now - job_start[y], s_y, delay / sp_y,
                limit if job_ngpus[y] == 1 else paused_limit, limit,
            )
            if way >= 0:
                out[m] = y if way == 0 else x
                m += 1
            continue
        # A hub: every partner must share with it alone.
        star = True
        for c in range(first[i], first[i + 1]):
            g = on[c]
            o = resident[g, 1] if resident[g, 0] == x else resident[g, 0]
            star = star and (o < 0 or partner[np.searchsorted(members, o)] == x)
        if not star:
            continue
        s_j, sp_j = _effective(x, on[first[i]:first[i + 1]], resident, speed, node, cross, job_workload, q, n)
        e_j, w_j, ran_j = job_remaining[x] / sp_j, job_work[x] / sp_j, now - job_start[x]
        t = s_j * e_j
        bad = int((ran_j + t) / w_j > limit)
        share_sum = t
        bad_0 = int((ran_j + e_j) / w_j > limit)  # way 0: the partners pause, the hub runs on alone
        sum_0 = e_j
        bad_1 = 0  # way 1: the hub pauses until its last partner ends
        sum_1 = 0.0
        last = 0.0
        m0 = m
        for c in range(first[i], first[i + 1]):
            g = on[c]
            p = resident[g, 1] if resident[g, 0] == x else resident[g, 0]
            if p < 0:
                continue
            ip = np.searchsorted(members, p)
            if on[first[ip]] != g:  # a multi-GPU partner: once, on its first GPU
                continue
            s_p, sp_p = _effective(p, on[first[ip]:first[ip + 1]], resident, speed, node, cross, job_workload, q, n)
            e_p, w_p, ran_p = job_remaining[p] / sp_p, job_work[p] / sp_p, now - job_start[p]
            end_p = end_bound(s_p, e_p, t)
            bad += int((ran_p + end_p) / w_p > limit)
            share_sum += end_p
            d_p = delay / sp_p
            bad_0 += int((ran_p + e_j + e_p + d_p) / w_p > (limit if job_ngpus[p] == 1 else paused_limit))
            sum_0 += e_j + e_p + d_p
            bad_1 += int((ran_p + e_p) / w_p > limit)
            sum_1 += e_p
            last = max(last, e_p)
            out[m] = p
            m += 1
        bad_1 += int((ran_j + last + e_j + delay / sp_j) / w_j > paused_limit)
        sum_1 += last + e_j + delay / sp_j
        way = _pause_choice(bad, share_sum, bad_0, sum_0, bad_1, sum_1) if bad else -1
        if way != 0:
            m = m0
        if way == 1:
            out[m] = x
            m += 1
    return out[:m]


@kernel
def _effective(x, on, resident, speed, node, cross, job_workload, q, n):  # pragma: no cover - compiled
    """Job ``x`` on its GPUs ``on``: ``(slowdown, speed)``, its slowdown next to the jobs sharing its GPUs now (it
    runs at the rate of its worst GPU) and its effective speed alone (slowest GPU over the cross-node slowdown
    when it spans nodes)."""
    slowest = np.inf
    worst = np.inf
    spans = False
    for c in range(on.shape[0]):
        g = on[c]
        spans = spans or node[g] != node[on[0]]
        slowest = min(slowest, speed[g])
        o = resident[g, 1] if resident[g, 0] == x else resident[g, 0]
        s_g = q[job_workload[x] * n + job_workload[o]] if o >= 0 else 1.0
        worst = min(worst, speed[g] / s_g)
    return slowest / worst, slowest / (cross if spans else 1.0)


@kernel
def _pause_choice(share_bad, share_sum, bad_0, sum_0, bad_1, sum_1):  # pragma: no cover - compiled
    """Which way on wins (-1 share on, 0 or 1 a pause): a pause only where it leaves fewer jobs over the
    SLO, the one with the fewest, then the smallest summed end time."""
    best, best_bad, best_sum = -1, share_bad, share_sum
    if bad_0 < share_bad:
        best, best_bad, best_sum = 0, bad_0, sum_0
    if bad_1 < share_bad and (bad_1 < best_bad or (bad_1 == best_bad and sum_1 < best_sum)):
        best = 1
    return best


@kernel
def _two_jobs(e_a, w_a, ran_a, s_a, d_a, lim_a, e_b, w_b, ran_b, s_b, d_b, lim_b, limit):  # pragma: no cover
    """The way on for two jobs sharing only with each other: -1 share on, 0 pause b, 1 pause a; ``lim_*`` the
    realized slowdown that job must keep when it is the one paused."""
    c_a, c_b = shared_ends(e_a, e_b, s_a, s_b)
    bad = int((ran_a + c_a) / w_a > limit) + int((ran_b + c_b) / w_b > limit)
    if bad == 0:
        return -1
    bad_0 = int((ran_a + e_a) / w_a > limit) + int((ran_b + e_a + e_b + d_b) / w_b > lim_b)
    bad_1 = int((ran_b + e_b) / w_b > limit) + int((ran_a + e_b + e_a + d_a) / w_a > lim_a)
    return _pause_choice(bad, c_a + c_b, bad_0, 2 * e_a + e_b + d_b, bad_1, 2 * e_b + e_a + d_a)
