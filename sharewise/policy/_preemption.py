"""SLO-guarded preemption for ``sharewise``: SLO rescue of sharing jobs, urgent restarts, and SRPT preemption.

Sharing is one way a short job gets in early; preempting a long job is the other, and under a realized-
slowdown SLO it is often the cheaper one: a 100-hour job paused for a 1-hour job ends 1% later, while two
jobs sharing a GPU on Gavel's measurements run about 1.9x slower each. SRPT (shortest remaining processing
time first) minimizes the mean completion time on one machine; the rules below apply it only where the SLO
of every job involved still holds.

Definitions, all in seconds (run times on a GPU of speed 1 unless said otherwise):

- **Slack** of a job ``j``: how long it may still wait and then run alone to its end within the SLO,
  ``slack = (slo * work - remaining - delay) / speed - (now - first_start)``, with ``delay`` the cluster's
  restart cost (``ClusterState.preempt_delay_s``; paid by a preempted job when it restarts), ``speed`` that of
  the job's GPUs (the slowest) for a running job and 1.0 for a waiting one (its GPUs are not chosen yet).
  The realized slowdown (``simulator``) counts from the first start, so waiting after a preemption spends
  slack one second per second.
- **Urgent**: a preempted job waiting with ``slack <= urgency * (slo - 1) * work`` (plus one second, so
  that float error cannot call the policy again at the same instant).
- **Victim**: a running job that holds each of its GPUs alone, was not placed in this call, and after
  waiting ``(waiter's remaining + delay) / slack_share`` still has more slack than its own urgency limit
  (so a victim is never preempted into urgency; ``slack_share`` < 1 leaves room for the queue ahead of it).

One call (``preempt_and_place``):

0. **SLO rescue** (``slo_rescues``): jobs that share GPUs were allowed to at their predicted p90; once the
   cluster has seen a pair run (the simulator's observation), its table holds the measured slowdowns. Where
   sharing on would now leave a job over the SLO, the group pauses the side whose pause leaves fewer jobs
   over it (``_kernels.slo_rescues`` states the rule; a multi-GPU job is paused only where it keeps its
   urgency slack, since getting all its GPUs back may take long). The policy asks to be woken one
   ``TOLERANCE_S`` after a job joins a partner it never ran with, so the check comes before the pair has
   run long. On Gavel's V100 pairs, where the model's p90 misses ResNet-50's slowdown, this took the heavy
   cell's SLO violations from 7 to 3 and Philly's from 14 to 1.
1. **Urgent restarts**, least slack first: each takes free GPUs (``pick_free_gpus``), or victims' GPUs,
   victims chosen longest remaining first until enough GPUs are free. An urgent job that cannot get GPUs
   waits for the next call.
2. **The placements of ``sharewise``** (free GPUs shortest job first, then sharing) on the cluster as it is
   after step 1: the urgent jobs hold their GPUs, the victims' GPUs are free.
3. **SRPT preemption** (``_kernels.srpt_preemptions``): each job still waiting, shortest remaining first
   (the first ``HEAD``), may take the GPUs of victims whose remaining run time exceeds ``PREEMPT_RATIO``
   times its own plus the restart cost (swapping the two then pays: the waiter saves the victim's remaining
   time, the victim loses the waiter's plus the restart), longest first (ties: the lower first GPU), at
   most ``MAX_PREEMPTIONS`` victims per call. Jobs on a shared GPU are never preempted: their partner's
   rate depends on them.
4. A **wake-up** at the moment the next waiting preempted job becomes urgent.

The constants were chosen on the policy suite (``benchmarks/bench_policy_suite.py``): ratios 2, 4 and 8,
a slack share of 0.25 and an urgency of 0.3 each won fewer cells than these, with restarts free and at
60 s; letting a job be preempted only once won 14 of 26 cells instead of 21.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import numpy as np

from sharewise.policy import _kernels, transition
from sharewise.policy.base import ClusterState, Decision, Placement, Queue, pick_free_gpus, readonly

#: A waiting job may preempt jobs with more than this many times its remaining run time.
PREEMPT_RATIO = 4.0
#: A victim must keep its urgency limit after waiting its preemptor's run time over this share of its slack.
SLACK_SHARE = 0.5
#: A preempted job restarts first once its slack is down to this fraction of its SLO allowance.
URGENCY = 0.5
#: Victims per call at most (the longest jobs are the ones preempted; a few per call keep the churn low).
MAX_PREEMPTIONS = 8
#: Waiting jobs considered for SRPT preemption per call, shortest remaining first.
HEAD = 32
#: Seconds of tolerance on urgency, so a wake-up never lands at the instant of the call that asked for it.
TOLERANCE_S = 1.0
#: Step 0 checks the groups of GPUs whose pair formed this long ago at most (the wake-up after a join comes
#: ``TOLERANCE_S`` after it; twice that absorbs float error at large times).
RECHECK_S = 2 * TOLERANCE_S

Placer = Callable[[Queue, ClusterState], list[Placement]]


@dataclasses.dataclass
class _Victims:
    """Running jobs that could be preempted: ids, GPU speed, remaining time and slack, longest first."""

    job: np.ndarray
    speed: np.ndarray
    remaining: np.ndarray
    slack: np.ndarray
    limit: np.ndarray
    ngpus: np.ndarray
    taken: np.ndarray


def _victims(cluster: ClusterState, occupancy: np.ndarray, now: float, slo: float, delay: float) -> _Victims:
    jobs, speed, _, _ = _kernels.lone_jobs(
        occupancy, cluster.resident, cluster.speed, cluster.job_ngpus, np.empty(0, dtype=np.int64)
    )
    work = cluster.job_work[jobs]
    remaining = cluster.job_remaining[jobs] / speed
    slack = (slo * work - cluster.job_remaining[jobs] - delay) / speed - (now - cluster.job_start[jobs])
    order = np.argsort(-remaining, kind="stable")
    limit = URGENCY * (slo - 1.0) * work / speed
    return _Victims(jobs[order], speed[order], remaining[order], slack[order], limit[order],
                    cluster.job_ngpus[jobs][order].astype(np.int64), np.zeros(jobs.shape[0], dtype=bool))


def _take(victims: _Victims, ok: np.ndarray, free: np.ndarray, resident: np.ndarray, node: np.ndarray,
          k: int) -> tuple[tuple[int, ...], list[int]] | None:
    """GPUs for a job of ``k`` GPUs: free ones, plus the GPUs of victims allowed by ``ok`` (longest first);
    returns (gpus, victims whose GPUs it uses) or None."""
    need = k - int(free.sum())
    chosen: list[int] = []
    if need > 0:
        idx = np.flatnonzero(ok & ~victims.taken)
        got = np.cumsum(victims.ngpus[idx])
        if got.shape[0] == 0 or got[-1] < need:
            return None
        chosen = idx[: int(np.searchsorted(got, need)) + 1].tolist()
    trial = free.copy()
    gpus_of = {i: np.flatnonzero(resident[:, 0] == victims.job[i]) for i in chosen}
    for i in chosen:
        trial[gpus_of[i]] = True
    gpus = pick_free_gpus(trial, node, k)
    if gpus is None:
        return None
    used = set(gpus.tolist())
    return tuple(int(g) for g in gpus), [i for i in chosen if used & set(gpus_of[i].tolist())]


def preempt_and_place(
    queue: Queue,
    cluster: ClusterState,
    now: float,
    slo: float,
    place: Placer,
    pair_q: np.ndarray | None = None,
    unsure: np.ndarray | None = None,
) -> Decision:
    """One call of the rules in the module docstring; ``place`` gives sharewise's placements for a view.

    ``pair_q`` holds the slowdowns the SLO is checked at, flattened (``q[i * n + j]`` of workload ``i`` next
    to ``j``), and ``unsure`` (same layout) whether a pair's slowdowns are predictions rather than measured;
    without ``pair_q`` step 0 is skipped."""
    delay = float(cluster.preempt_delay_s)
    occupancy = cluster.occupancy()
    rescued: list[int] = []
    if pair_q is not None:
        rescued = slo_rescues(cluster, occupancy, now, slo, pair_q)
        if rescued:
            _, cluster, occupancy = _after(queue, cluster, occupancy, [], rescued)
    resident = cluster.resident
    urgent, wake = _kernels.urgent_restarts(
        queue.job, queue.remaining, cluster.job_start, cluster.job_work, float(now), float(slo), delay, URGENCY,
        TOLERANCE_S,
    )

    start: list[Placement] = []
    stopped: list[int] = []
    if urgent.shape[0]:
        free = occupancy == 0
        victims = _victims(cluster, occupancy, now, slo, delay)
        for i in urgent.tolist():
            cost = (queue.remaining[i] + delay) / SLACK_SHARE
            ok = victims.slack - cost / victims.speed > victims.limit
            got = _take(victims, ok, free, resident, cluster.node, int(queue.gpus[i]))
            if got is None:
                continue
            gpus, chosen = got
            for v in chosen:
                victims.taken[v] = True
                stopped.append(int(victims.job[v]))
                free[resident[:, 0] == victims.job[v]] = True
            free[list(gpus)] = False
            start.append(Placement(int(queue.job[i]), gpus))

    view_queue, view_cluster, occ = queue, cluster, occupancy
    if start or stopped:
        view_queue, view_cluster, occ = _after(queue, cluster, occupancy, start, stopped)
    placed = place(view_queue, view_cluster) if len(view_queue) else []
    start.extend(placed)
    check = False
    for p in placed:
        gpus_p = list(p.gpus)
        if unsure is not None and not check and occ[gpus_p].any():
            check = _joins_unsure(p, occ, view_cluster, queue, unsure)
        occ[gpus_p] += 1
    if check:
        # A job joined a GPU next to a partner it never ran with: once the cluster has seen the pair run
        # (at the next call), step 0 checks it.
        wake = min(wake, now + TOLERANCE_S)

    done = np.zeros(len(queue), dtype=bool)
    done[np.searchsorted(queue.job, [p.job for p in start])] = True  # queue.job is ascending
    if not done.all():
        excluded = np.asarray(rescued + stopped + [p.job for p in start], dtype=np.int64)
        params = np.array([now, slo, delay, PREEMPT_RATIO, SLACK_SHARE, URGENCY], dtype=np.float64)
        rows, gpus, victims = _kernels.srpt_preemptions(
            occ, view_cluster.resident, cluster.node, cluster.speed, cluster.job_remaining, cluster.job_work,
            cluster.job_start, cluster.job_ngpus, excluded, queue.gpus, queue.remaining, done, params, HEAD,
            MAX_PREEMPTIONS,
        )
        for i, row in zip(rows.tolist(), gpus.tolist(), strict=True):
            start.append(Placement(int(queue.job[i]), tuple(row[: int(queue.gpus[i])])))
        stopped.extend(victims.tolist())
    return Decision(start=start, preempt=tuple(rescued + stopped), wake_at=max(wake, now + TOLERANCE_S))


def _after(queue: Queue, cluster: ClusterState, occupancy: np.ndarray, start: list[Placement],
           stopped: list[int]) -> tuple[Queue, ClusterState, np.ndarray]:
    """The queue and cluster as ``place`` sees them once ``stopped`` left their GPUs and ``start`` took theirs."""
    resident = np.array(cluster.resident, copy=True)
    occ = occupancy.copy()
    for j in stopped:  # the loop's own transition: stops, then starts
        transition.vacate(resident, occ, j, transition.gpus_of(resident, j))
    for p in start:
        for g in p.gpus:
            transition.place(resident, occ, p.job, g)
    keep = ~np.isin(queue.job, [p.job for p in start])
    fields = {f.name: getattr(queue, f.name) for f in dataclasses.fields(queue)}
    view = Queue(**{k: (readonly(np.asarray(v)[keep]) if v is not None else None) for k, v in fields.items()})
    state = dataclasses.replace(cluster, resident=readonly(resident), occupied=readonly(occ))
    return view, state, occ


def slo_rescues(cluster: ClusterState, occupancy: np.ndarray, now: float, slo: float, pair_q: np.ndarray) -> list[int]:
    """Step 0: the jobs to pause where jobs sharing GPUs would break the SLO by sharing on
    (``_kernels.slo_rescues`` states the rule).

    Only groups with a GPU whose pair formed in the last ``RECHECK_S`` are checked, where the cluster says
    when (``ClusterState.placed_at``): a pair's slowdowns change only when it is first measured, right
    after it forms (the wake-up after a join), and a pair formed of measured partners passed the join's
    SLO check at the measured values; rates only rise when a partner leaves."""
    shared = occupancy == 2
    if cluster.placed_at is not None:
        shared &= cluster.placed_at >= now - RECHECK_S
    if not shared.any():
        return []
    n = _side(pair_q.shape[0])
    jobs = _kernels.slo_rescues(
        occupancy, shared, cluster.resident, cluster.speed, cluster.node, float(cluster.cross_node_slowdown),
        cluster.job_workload, cluster.job_remaining, cluster.job_work, cluster.job_start, cluster.job_ngpus, pair_q,
        n, float(now), float(slo), float(cluster.preempt_delay_s), URGENCY,
    )
    return jobs.tolist() if jobs.shape[0] else []


@functools.lru_cache(maxsize=64)
def _side(cells: int) -> int:
    """The number of workloads of a flattened n x n pair table of ``cells`` cells."""
    return math.isqrt(cells)


def _joins_unsure(p: Placement, occ: np.ndarray, cluster: ClusterState, queue: Queue, unsure: np.ndarray) -> bool:
    """Whether placement ``p`` joins a resident (``occ`` before it) with whom its slowdowns are predicted."""
    n = _side(unsure.shape[0])
    wl = int(queue.workload[np.searchsorted(queue.job, p.job)])
    for g in p.gpus:
        if occ[g] and unsure[wl * n + int(cluster.job_workload[cluster.resident[g, 0]])]:
            return True
    return False
