"""Victims: the running jobs ``sharewise`` may preempt, and the one rule by which a job takes their GPUs (urgent
restarts and SRPT both use it).

A **victim** holds each of its GPUs alone (a job on a shared GPU is never preempted: its partner's rate depends
on it) and was not placed or stopped in this call. It may give its GPUs to a job whose run time (plus the
restart cost) over ``Params.slack_share`` it can wait and still keep more slack than its urgency limit
(``may_wait``: so a victim is never preempted into urgency; a share < 1 leaves room for the queue ahead of it).
A job of ``k`` GPUs takes the free GPUs, plus the GPUs of the victims it may use, longest remaining first (ties:
the order of ``lone_jobs``), until enough are free; its GPUs are then ``pick_free_gpus``'s choice among those,
and only the victims whose GPUs it gets are preempted (``take``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sharewise.engine.compiled import kernel
from sharewise.engine.gpus import pick_free_gpus
from sharewise.policy.ours.slo import slack, urgency_limit


class Victims(NamedTuple):
    """Jobs ``job`` holding all their GPUs alone (``gpus[first[v]:first[v + 1]]``, ascending), the speed of
    their slowest GPU, their remaining run time and their slack beyond the urgency limit (``spare``), both in
    seconds on those GPUs."""

    job: np.ndarray
    slowest: np.ndarray
    first: np.ndarray
    gpus: np.ndarray
    remaining: np.ndarray
    spare: np.ndarray


@kernel
def victims_of(occupancy, resident, speed, jobs, excluded, knobs):  # pragma: no cover - compiled
    """The ``Victims`` of a cluster (``jobs``: ``arrays.Jobs``), leaving out the jobs in ``excluded``."""
    job, slowest, first, gpus = lone_jobs(occupancy, resident, speed, jobs.ngpus, excluded)
    n_v = job.shape[0]
    remaining = np.empty(n_v, dtype=np.float64)
    spare = np.empty(n_v, dtype=np.float64)
    for v in range(n_v):
        j = job[v]
        remaining[v] = jobs.remaining[j] / slowest[v]
        left = slack(knobs.slo, jobs.work[j], jobs.remaining[j], knobs.delay, slowest[v], knobs.now - jobs.start[j])
        spare[v] = left - urgency_limit(knobs.slo, knobs.urgency, jobs.work[j]) / slowest[v]
    return Victims(job, slowest, first, gpus, remaining, spare)


@kernel
def may_wait(victims, v, cost):  # pragma: no cover - compiled
    """Whether victim ``v`` keeps more slack than its urgency limit after waiting ``cost`` seconds (on a
    speed-1.0 GPU)."""
    return victims.spare[v] > cost / victims.slowest[v]


@kernel
def take(victims, eligible, taken, occupancy, node, k):  # pragma: no cover - compiled; tested against the oracle
    """GPUs for a job of ``k`` GPUs: the free ones (``occupancy`` 0) plus those of the victims marked in
    ``eligible`` and not ``taken``, longest remaining first (first of equals: the lower index, as a stable sort
    gives), until enough are free; ``pick_free_gpus`` chooses among them. Return ``(gpus, used)``: its GPUs
    (ascending; empty where it gets none) and the victims whose GPUs it uses."""
    empty = np.empty(0, dtype=np.int64)
    n_v = victims.job.shape[0]
    n_free = 0
    for g in range(occupancy.shape[0]):
        if occupancy[g] == 0:
            n_free += 1
    need = k - n_free
    chosen = np.empty(n_v, dtype=np.int64)
    out = taken.copy()  # taken, or chosen for this job
    n_c, got = 0, 0
    while got < need:  # a few victims at most: a pass for each beats sorting them all
        best = -1
        for v in range(n_v):
            if eligible[v] and not out[v] and (best < 0 or victims.remaining[v] > victims.remaining[best]):
                best = v
        if best < 0:
            return empty, empty
        out[best] = True
        chosen[n_c] = best
        n_c += 1
        got += victims.first[best + 1] - victims.first[best]
    trial = occupancy.copy()
    for c in range(n_c):
        v = chosen[c]
        for p in range(victims.first[v], victims.first[v + 1]):
            trial[victims.gpus[p]] = 0
    picked = pick_free_gpus(trial, node, k)
    if picked.shape[0] < k:
        return empty, empty
    in_pick = np.zeros(occupancy.shape[0], dtype=np.bool_)
    for p in range(k):
        in_pick[picked[p]] = True
    used = np.empty(n_c, dtype=np.int64)
    n_used = 0
    for c in range(n_c):
        v = chosen[c]
        uses = False
        for p in range(victims.first[v], victims.first[v + 1]):
            uses = uses or in_pick[victims.gpus[p]]
        if uses:
            used[n_used] = v
            n_used += 1
    return picked, used[:n_used]


@kernel
def stop(victims, used, taken, occupancy):  # pragma: no cover - compiled
    """Mark the victims ``used`` taken and their GPUs free in ``occupancy``; return how many GPUs that frees."""
    freed = 0
    for c in range(used.shape[0]):
        v = used[c]
        taken[v] = True
        for p in range(victims.first[v], victims.first[v + 1]):
            occupancy[victims.gpus[p]] = 0
            freed += 1
    return freed


@kernel
def lone_jobs(occupancy, resident, speed, job_ngpus, excluded):  # pragma: no cover - compiled
    """The running jobs that hold every one of their GPUs alone (``occupancy`` 1, slot 1 empty) and are not in
    ``excluded``: ``(jobs, slowest speed, first, gpus)``, where ``gpus[first[i]:first[i + 1]]`` are job
    ``jobs[i]``'s GPUs, ascending; single-GPU jobs first, then multi-GPU ones, each in the order of their
    first GPU. A job sits on exactly ``job_ngpus`` GPUs, so it holds all of them alone when that many of the
    lone GPUs are its own."""
    n_gpus = resident.shape[0]
    jobs = np.empty(n_gpus, dtype=np.int64)
    slowest = np.empty(n_gpus, dtype=np.float64)
    first = np.zeros(n_gpus + 1, dtype=np.int64)
    gpus = np.empty(n_gpus, dtype=np.int64)
    multi = np.empty(n_gpus, dtype=np.int64)  # lone GPUs of multi-GPU jobs, grouped below
    n, used, n_multi = 0, 0, 0
    for g in range(n_gpus):
        j = resident[g, 0]
        if j < 0 or resident[g, 1] >= 0 or occupancy[g] != 1:
            continue
        if job_ngpus[j] > 1:
            multi[n_multi] = g
            n_multi += 1
            continue
        out = False
        for e in range(excluded.shape[0]):
            out = out or excluded[e] == j
        if out:
            continue
        jobs[n] = j
        slowest[n] = speed[g]
        gpus[used] = g
        used += 1
        n += 1
        first[n] = used
    # Multi-GPU jobs: count each job's lone GPUs in a small open-addressing table (slots in the order of the
    # jobs' first GPU), keep the jobs found on all of their GPUs, then write their GPUs out, ascending.
    size = 2
    while size < 2 * n_multi:
        size *= 2
    key = np.full(size, -1, dtype=np.int64)
    count = np.zeros(size, dtype=np.int64)
    at = np.full(size, -1, dtype=np.int64)  # a complete job's row in the output
    seen = np.empty(n_multi, dtype=np.int64)  # the slots, in the order of their job's first GPU
    n_seen = 0
    slot_of = np.empty(n_multi, dtype=np.int64)
    for a in range(n_multi):
        j = resident[multi[a], 0]
        h = (j * 40503) & (size - 1)
        while key[h] != j and key[h] >= 0:
            h = (h + 1) & (size - 1)
        if key[h] < 0:
            key[h] = j
            seen[n_seen] = h
            n_seen += 1
        count[h] += 1
        slot_of[a] = h
    fill = np.empty(size, dtype=np.int64)  # the next output position of each complete job's GPUs
    for c in range(n_seen):
        h = seen[c]
        j = key[h]
        out = count[h] != job_ngpus[j]
        for e in range(excluded.shape[0]):
            out = out or excluded[e] == j
        if out:
            continue
        at[h] = n
        jobs[n] = j
        slowest[n] = np.inf
        fill[h] = used
        used += count[h]
        n += 1
        first[n] = used
    for a in range(n_multi):
        h = slot_of[a]
        if at[h] < 0:
            continue
        gpus[fill[h]] = multi[a]
        fill[h] += 1
        slowest[at[h]] = min(slowest[at[h]], speed[multi[a]])
    return jobs[:n], slowest[:n], first[: n + 1], gpus[:used]
