"""Urgent restarts, the first thing ``sharewise`` places: a preempted job whose slack runs low restarts before
anything else, on free GPUs or on the GPUs of victims that can wait for it.

A preempted job waiting in the queue is **urgent** once its slack (``slo.slack`` on a speed-1.0 GPU: its GPUs
are not chosen yet) is down to its urgency limit (``slo.urgency_limit``, plus ``Params.tolerance_s`` so that
float error cannot call the policy again at the same instant). Urgent jobs go least slack first; each takes
free GPUs, or victims' GPUs (``victims.take``, victims that ``may_wait`` its run time plus the restart cost
over ``Params.slack_share``); one that gets none waits for the next call. The policy asks to be woken when the
next preempted job becomes urgent.
"""

from __future__ import annotations

import numpy as np

from sharewise.engine.compiled import kernel
from sharewise.engine.order import stable_order
from sharewise.engine.policy_types import Placement
from sharewise.policy.ours.arrays import Gpus, Jobs, Knobs, Waiting, waiting_of
from sharewise.policy.ours.slo import slack, urgency_limit
from sharewise.policy.ours.stage import Stage
from sharewise.policy.ours.victims import may_wait, stop, take, victims_of


def restarts(stage: Stage, jobs: Jobs, knobs: Knobs) -> tuple[list[Placement], list[int], float]:
    """The urgent jobs of ``stage.queue`` that restart now, the victims they stop, and when to wake for the next
    (``inf``: no other preempted job waits), e.g. ``([Placement(4, (2,))], [9], 7200.0)``."""
    queue = stage.queue
    urgent, wake = urgent_jobs(queue.job, queue.remaining, jobs.start, jobs.work, tuple(knobs))
    if urgent.shape[0] == 0:  # most calls: the victims are not even looked at
        return [], [], float(wake)
    started, rows, stopped = restarts_kernel(urgent, tuple(stage.gpus), tuple(jobs), tuple(waiting_of(queue)),
                                             tuple(knobs))
    start = [Placement(int(queue.job[i]), tuple(row[: int(queue.gpus[i])]))
             for i, row in zip(started.tolist(), rows.tolist(), strict=True)]
    return start, stopped.tolist(), float(wake)


@kernel
def urgent_jobs(job, remaining, start, work, knobs):  # pragma: no cover - compiled
    """The queue positions of preempted jobs (queued ``job`` ids, their ``remaining`` exclusive seconds; per job
    id its first ``start`` and ``work``) whose slack is down to their urgency limit, least slack first, and the
    time the next other one gets there (inf if none)."""
    knobs = Knobs(*knobs)
    n = job.shape[0]
    left = np.empty(n, dtype=np.float64)
    picked = np.empty(n, dtype=np.int64)
    m = 0
    wake = np.inf
    for i in range(n):
        j = job[i]
        if not np.isfinite(start[j]):
            continue
        s = slack(knobs.slo, work[j], remaining[i], knobs.delay, 1.0, knobs.now - start[j])
        limit = urgency_limit(knobs.slo, knobs.urgency, work[j]) + knobs.tolerance_s
        if s <= limit:
            left[m] = s
            picked[m] = i
            m += 1
        else:
            wake = min(wake, knobs.now + s - limit)
    return picked[:m][stable_order(left[:m])], wake


@kernel
def restarts_kernel(urgent, gpus, jobs, waiting, knobs):  # pragma: no cover - compiled; tested against the oracle
    """The urgent jobs at queue positions ``urgent`` (least slack first) take free GPUs or victims' (``Gpus``,
    ``Jobs``, ``Waiting`` and ``Knobs`` as plain tuples): ``(started, gpus, stopped)``, queue position
    ``started[i]`` on ``gpus[i, :k]``."""
    gpus, jobs, waiting, knobs = Gpus(*gpus), Jobs(*jobs), Waiting(*waiting), Knobs(*knobs)
    max_k = 1
    for c in range(urgent.shape[0]):
        max_k = max(max_k, waiting.gpus[urgent[c]])
    rows = np.full((urgent.shape[0], max_k), -1, dtype=np.int64)
    occ = gpus.occupancy.copy()
    victims = victims_of(occ, gpus.resident, gpus.speed, jobs, np.empty(0, dtype=np.int64), knobs)
    taken = np.zeros(victims.job.shape[0], dtype=np.bool_)
    eligible = np.empty(victims.job.shape[0], dtype=np.bool_)
    started = np.empty(urgent.shape[0], dtype=np.int64)
    stopped = np.empty(victims.job.shape[0], dtype=np.int64)
    n_started, n_stopped = 0, 0
    for c in range(urgent.shape[0]):
        i = urgent[c]
        cost = (waiting.remaining[i] + knobs.delay) / knobs.slack_share
        for v in range(victims.job.shape[0]):
            eligible[v] = may_wait(victims, v, cost)
        picked, used = take(victims, eligible, taken, occ, gpus.node, waiting.gpus[i])
        if picked.shape[0] == 0:
            continue
        stop(victims, used, taken, occ)
        for u in range(used.shape[0]):
            stopped[n_stopped] = victims.job[used[u]]
            n_stopped += 1
        for p in range(picked.shape[0]):
            occ[picked[p]] = 1
            rows[n_started, p] = picked[p]
        started[n_started] = i
        n_started += 1
    return started[:n_started], rows[:n_started], stopped[:n_stopped]
