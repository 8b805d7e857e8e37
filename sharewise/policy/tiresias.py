"""``tiresias``: discretized two-dimensional least-attained-service (Gu et al., NSDI'19), preemptive.

Semantics, following the Tiresias simulator's ``dlas`` scheduler with GPU-time (``--schedule dlas-gpu``):

- A job's **attained service** is its GPUs times the time it has run (GPU-seconds), counted across
  preemptions. Tiresias is blind to durations: it never looks at a job's remaining work.
- **Queues**: ``thresholds`` split attained service into ``len(thresholds) + 1`` priority queues; a job
  enters queue 0 and is demoted to queue ``q + 1`` once its attained service reaches ``thresholds[q]``.
  Default: two queues split at 3,600 GPU-seconds, Tiresias' own simulator's setting (the SJF-BSBF authors'
  testbed code uses two queues split at 700 s on its short traces; pass ``thresholds=(700.0,)`` for that).
- **Order**: queue index first; within a queue running jobs keep priority over waiting ones, then arrival
  order (FIFO), as the simulator keeps each queue's list with its running jobs in front.
- **Each decision** walks all jobs, running and waiting, in that order with the cluster's GPUs counted as
  free: a job that fits is (or keeps) running, one that does not is skipped (the walk is work-conserving),
  and a running job that no longer gets GPUs is preempted. Preempted jobs restart anywhere; what a restart
  costs is the cluster's ``preempt_delay_s`` (the Tiresias simulator models no delay: 0 by default).
- A running job's next **demotion** is a wake-up, so the policy runs again when priorities change.
- Exclusive GPUs (no sharing), consolidated on as few nodes as possible.
"""

from __future__ import annotations

import math

import numpy as np

from sharewise.engine.free_gpus import packed_block
from sharewise.engine.policy_types import ClusterState, Decision, Placement, Queue
from sharewise.engine.table import SlowdownTable

#: Tiresias' own simulator: two queues, split at one GPU-hour of attained service.
DEFAULT_THRESHOLDS = (3600.0,)


def tiresias(
    queue: Queue,
    cluster: ClusterState,
    table: SlowdownTable,
    now: float,
    *,
    thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS,
) -> Decision:
    """Jobs that have had the least GPU time run first (2D-LAS); a job demoted past a threshold is preempted.

    The module docstring states the queues, the order and when a job is preempted.

    Returns
    -------
    Decision, e.g. ``Decision(start=[Placement(9, (0,))], preempt=(4,), wake_at=5400.0)``.
    """
    limits = np.asarray(thresholds, dtype=float)
    running = np.unique(cluster.resident[cluster.resident >= 0])
    attained_running = cluster.job_attained[running]
    # Candidates: the running jobs (rank 0 within their queue) and the waiting ones (rank 1).
    jobs = np.concatenate([running, queue.job])
    attained = np.concatenate([attained_running, queue.attained])
    gpus = np.concatenate([cluster.job_ngpus[running], queue.gpus])
    arrival = np.concatenate([cluster.job_arrival[running], queue.arrival])
    waiting = np.concatenate([np.zeros(running.shape[0], bool), np.ones(len(queue), bool)])
    level = np.searchsorted(limits, attained, side="right")
    order = np.lexsort((jobs, arrival, waiting, level))
    n_free = cluster.n_gpus
    keep = np.zeros(jobs.shape[0], dtype=bool)
    for i in order.tolist():
        if gpus[i] <= n_free:
            keep[i] = True
            n_free -= int(gpus[i])
    kept_running = keep[: running.shape[0]]
    stop = running[~kept_running]
    # GPUs free once the stopped jobs are off them (a GPU some other policy left shared keeps its other job).
    free = ~np.isin(cluster.resident, running[kept_running]).any(axis=1) & (
        (cluster.resident < 0) | np.isin(cluster.resident, stop)
    ).all(axis=1)
    start = []
    for i in order.tolist():
        if keep[i] and waiting[i]:
            chosen = packed_block(free, cluster.node, int(gpus[i]))
            if chosen is None:
                continue
            free[chosen] = False
            start.append(Placement(int(jobs[i]), tuple(int(g) for g in np.sort(chosen))))
    wake = _next_demotion(cluster, running[kept_running], limits, now)
    return Decision(start=start, preempt=tuple(int(j) for j in stop), wake_at=wake)


def _next_demotion(cluster: ClusterState, running: np.ndarray, limits: np.ndarray, now: float) -> float:
    """When the first job that keeps running crosses its next threshold (GPU-seconds at its GPU count)."""
    if running.shape[0] == 0 or limits.shape[0] == 0:
        return math.inf
    attained = cluster.job_attained[running]
    nxt = np.searchsorted(limits, attained, side="right")
    has = nxt < limits.shape[0]
    if not has.any():
        return math.inf
    left = (limits[nxt[has]] - attained[has]) / cluster.job_ngpus[running][has]
    # At least a microsecond ahead, so float error at a threshold cannot wake the policy in a loop.
    return now + max(float(left.min()), 1e-6)


tiresias.preemptive = True
