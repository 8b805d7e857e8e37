"""SLO-guarded SRPT, the last thing ``sharewise`` places: a job still waiting may preempt long jobs that hold
their GPUs alone, where the victims' SLO still holds after the wait.

Sharing is one way a short job gets in early; preempting a long job is the other, and under a realized-slowdown
SLO it is often the cheaper one: a 100-hour job paused for a 1-hour job ends 1% later, while two jobs sharing a
GPU on Gavel's measurements run about 1.9x slower each. SRPT (shortest remaining processing time first)
minimizes the mean completion time on one machine; it applies here only where every job involved keeps its SLO.

Each job still waiting after the other steps, shortest remaining first (the first ``Params.srpt_head``), may
take the GPUs (``victims.take``) of victims whose remaining run time exceeds ``Params.preempt_ratio`` times its
own plus the restart cost (swapping the two then pays: the waiter saves the victim's remaining time, the victim
loses the waiter's plus the restart) and that ``may_wait`` for it, at most ``Params.max_preemptions`` victims per
call.
"""

from __future__ import annotations

import numpy as np

from sharewise.engine.compiled import kernel
from sharewise.engine.gpus import effective_speed
from sharewise.engine.order import smallest
from sharewise.engine.policy_types import Placement, Queue
from sharewise.policy.ours.arrays import Gpus, Jobs, Knobs, Waiting, waiting_of
from sharewise.policy.ours.reservation import NONE, Reservation, preemption_change
from sharewise.policy.ours.slo import slack, urgency_limit
from sharewise.policy.ours.stage import Stage
from sharewise.policy.ours.victims import may_wait, stop, take, victims_of


def preemptions(queue: Queue, start: list[Placement], stopped: list[int], stage: Stage, jobs: Jobs, knobs: Knobs,
                reserved: Reservation = NONE) -> tuple[list[Placement], list[int]]:
    """The jobs of ``queue`` that ``start`` leaves waiting and that start on victims' GPUs, and the victims, on
    the cluster of ``stage`` with the occupancy this call left (jobs started or ``stopped`` in this call are no
    victims), where the reservation ``reserved`` (as the placements left it) keeps its GPUs, e.g.
    ``([Placement(7, (3,))], [2])``."""
    if len(start) == len(queue):
        return [], []
    started = np.array([p.job for p in start], dtype=np.int64)
    stopped_ = np.array(stopped, dtype=np.int64)
    if reserved.job in started:
        reserved = NONE  # it starts in this call: nothing left to reserve
    rows, gpus, victims = srpt_kernel(stage.occupancy, started, stopped_, tuple(stage.gpus), tuple(jobs),
                                      tuple(waiting_of(queue)), tuple(knobs), tuple(reserved))
    taken = [Placement(int(queue.job[i]), tuple(row[: int(queue.gpus[i])]))
             for i, row in zip(rows.tolist(), gpus.tolist(), strict=True)]
    return taken, victims.tolist()


@kernel
def srpt_kernel(occupancy, started, stopped, gpus, jobs, waiting, knobs, reserved):  # pragma: no cover - compiled
    """``preemptions`` on arrays: ``started`` and ``stopped`` the job ids this call placed and stopped, and
    ``Gpus``, ``Jobs``, ``Waiting``, ``Knobs``, ``reservation.Reservation`` as plain tuples (``gpus.occupancy``
    is not read, ``occupancy`` is). Return ``(starts, gpus, stops)``: queue position ``starts[i]`` on
    ``gpus[i, :k]``. A job other than the reserved one takes victims' GPUs only where the reservation keeps its
    GPUs (``reservation.preemption_change``); the reserved job starting ends the reservation."""
    gpus, jobs, waiting, knobs = Gpus(*gpus), Jobs(*jobs), Waiting(*waiting), Knobs(*knobs)
    reserved_job, shadow, spare_gpus = reserved
    done = np.zeros(waiting.job.shape[0], dtype=np.bool_)
    for c in range(started.shape[0]):
        done[np.searchsorted(waiting.job, started[c])] = True  # waiting.job is ascending
    excluded = np.concatenate((stopped, started))
    now, slo, delay = knobs.now, knobs.slo, knobs.delay
    ratio, share, max_stops = knobs.preempt_ratio, knobs.slack_share, knobs.max_preemptions
    resident, speed = gpus.resident, gpus.speed
    starts = np.empty(0, dtype=np.int64)
    max_k = 1
    shortest = np.inf
    for i in range(waiting.gpus.shape[0]):
        max_k = max(max_k, waiting.gpus[i])
        if not done[i]:
            shortest = min(shortest, waiting.remaining[i])
    out_gpus = np.full((0, max_k), -1, dtype=np.int64)
    # A quick bound first (most calls end here): is any lone GPU's job long enough, with slack enough, to make
    # way for the shortest waiting job? Bounds over every GPU speed, so no job is grouped yet.
    slowest_gpu, fastest_gpu = np.inf, 0.0
    for g in range(resident.shape[0]):
        slowest_gpu = min(slowest_gpu, speed[g])
        fastest_gpu = max(fastest_gpu, speed[g])
    least_cost = (shortest + delay) / share / fastest_gpu
    any_victim = False
    for g in range(resident.shape[0]):
        j = resident[g, 0]
        if j < 0 or resident[g, 1] >= 0 or occupancy[g] != 1:
            continue
        if jobs.remaining[j] / slowest_gpu <= ratio * shortest + delay:
            continue
        spare = slack(slo, jobs.work[j], jobs.remaining[j], delay, 1.0, 0.0) - urgency_limit(slo, knobs.urgency,
                                                                                          jobs.work[j])
        spare = max(spare / slowest_gpu, spare / fastest_gpu) - (now - jobs.start[j])
        if spare > least_cost:
            any_victim = True
            break
    if not any_victim:
        return starts, out_gpus, starts
    victims = victims_of(occupancy, resident, speed, jobs, excluded, knobs)
    n_v = victims.job.shape[0]
    if n_v == 0:
        return starts, out_gpus, starts
    keys = np.empty(waiting.gpus.shape[0], dtype=np.float64)
    for i in range(waiting.gpus.shape[0]):
        keys[i] = np.inf if done[i] else waiting.remaining[i]
    head = smallest(keys, knobs.srpt_head)
    occ = occupancy.copy()
    n_free = 0
    for g in range(occ.shape[0]):
        if occ[g] == 0:
            n_free += 1
    taken = np.zeros(n_v, dtype=np.bool_)
    start_list = np.empty(head.shape[0], dtype=np.int64)
    gpu_rows = np.full((head.shape[0], max_k), -1, dtype=np.int64)
    stop_list = np.empty(max_stops + max_k, dtype=np.int64)
    # The victims still eligible, ascending. Waiting jobs come shortest first, and a victim eligible for a job
    # is eligible for every shorter one (both bounds grow with ``r``), so one that drops out stays out.
    cand = np.arange(n_v)
    n_cand = n_v
    eligible = np.zeros(n_v, dtype=np.bool_)
    n_start, n_stop = 0, 0
    failed_k = max_k + 1  # victims only get fewer for longer jobs: a size that failed fails again
    for w in range(head.shape[0]):
        i = head[w]
        if done[i] or n_stop >= max_stops:
            break
        r = waiting.remaining[i]
        cost = (r + delay) / share
        kept, eligible_gpus = 0, 0
        for c in range(n_cand):
            v = cand[c]
            eligible[v] = False
            if taken[v] or victims.remaining[v] <= ratio * r + delay or not may_wait(victims, v, cost):
                continue
            eligible[v] = True
            cand[kept] = v
            kept += 1
            eligible_gpus += victims.first[v + 1] - victims.first[v]
        n_cand = kept
        if n_cand == 0:
            break  # no victim for this job, so none for the longer ones after it
        k = waiting.gpus[i]
        need = k - n_free
        if k >= failed_k or need <= 0:
            continue  # need <= 0: free GPUs are enough, step 2 left the job waiting for a reason of its own
        if eligible_gpus < need:
            failed_k = min(failed_k, k)
            continue
        picked, used = take(victims, eligible, taken, occ, gpus.node, k)
        if picked.shape[0] < k:
            continue
        if waiting.job[i] == reserved_job:
            shadow = np.inf
        elif shadow < np.inf:
            end = r / effective_speed(picked, speed, gpus.node, gpus.cross)[0]
            delta = preemption_change(picked, end, used, victims, occ, shadow)
            if spare_gpus + delta < 0:
                continue
            spare_gpus += delta
        n_free += stop(victims, used, taken, occ)
        for u in range(used.shape[0]):
            stop_list[n_stop] = victims.job[used[u]]
            n_stop += 1
        for p in range(k):
            occ[picked[p]] = 1
            gpu_rows[n_start, p] = picked[p]
        n_free -= k
        start_list[n_start] = i
        n_start += 1
    return start_list[:n_start], gpu_rows[:n_start], stop_list[:n_stop]
