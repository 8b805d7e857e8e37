"""The reservation: once a job that needs a large share of the cluster is the first in ``sharewise``'s order that
cannot start, nothing started or paired in a call may delay its predicted start (EASY backfilling's reservation for
the head job: Lifka 1995; Mu'alem and Feitelson 2001).

**Which job.** The *head* is the first queued job, shortest remaining first, that asks for more GPUs than the jobs
before it leave free (those start: ``head``). It is reserved where it asks for at least ``Params.reserve_share``
of the cluster's GPUs, and at least two: a one-GPU job is not starved by fragmentation (SJF hands it the first
GPU that frees), where a job of many GPUs needs them free at once, and any job that takes one of them first, or
holds it longer by joining, pushes its start back.

**When it starts.** Its *shadow time* ``T`` (seconds from now) is when enough GPUs will be free for it: the
``k``-th soonest of the GPUs' predicted releases once the jobs ahead of it took theirs (``shadow``, on
``sharing.gpu_releases``: 0 for a free GPU, a lone job's end, a pair's later end at p50). The reservation counts
on the GPUs released by ``T``; ``spare`` of them, beyond the ``k`` it needs, are extra.

**The rule.** An action changes when its GPUs are released. It is taken only where at least ``k`` GPUs stay
released by ``T``: a GPU it holds past ``T`` that was released by then takes one spare GPU, one it releases by
``T`` that was not gives one back (``change``), and the spare count never goes below zero. So a job starts on
free GPUs now only where it ends by ``T`` (exclusive, at the slowest free GPU's speed, over the cross-node
slowdown if it asks for several) or the spare GPUs hold it (``backfill``: EASY's test, walked in SJF order); a job
joins a lone resident whose GPU the reservation counts on only where the pair's later end, at the SLO's quantile
(p90), is by ``T``, or a spare GPU is left (``sharing.savings`` and ``sharing.offer``); an SRPT preemptor likewise
on the victims' GPUs (``preemption_change``). The head itself is exempt, and once it starts (joining, or on
victims' GPUs) there is nothing left to reserve in the call.

**What it does not hold back.** An urgent restart (a preempted job whose SLO slack runs low) comes first and may
delay the head: the SLO is the harder promise, and the reservation is set on the cluster those restarts leave. The
rescue's pauses only free GPUs sooner. Re-placing lone jobs where migrating is free (``replacement``) moves jobs
between GPUs after the call's decision and is not checked. And predictions can be wrong: a pair that runs slower
than its p50 releases its GPU later than ``T`` said; the rule keeps the call's own decisions from delaying the head,
judged at the pessimistic end of their interval.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from sharewise.engine.compiled import kernel
from sharewise.engine.order import select_smallest, smallest
from sharewise.policy.ours.slo import end_bound


class Reservation(NamedTuple):
    """A call's reservation: the head's job id (``-1``: none), its shadow time (seconds from now; ``inf``:
    nothing reserved) and the spare GPUs left (released by the shadow time beyond those the head needs)."""

    job: int
    shadow: float
    spare: int


#: No job reserved.
NONE = Reservation(-1, math.inf, 0)


@kernel
def least_gpus(n_gpus, share):  # pragma: no cover - compiled
    """The fewest GPUs a reserved job asks for: ``share`` of the cluster's ``n_gpus``, and at least two."""
    return max(2.0, share * n_gpus)


@kernel
def head(waiting, n_free, n_gpus, share):  # pragma: no cover - compiled; tested against the oracle
    """The queue position of the reserved job, ``-1`` for none: the first job in SJF order (``waiting.remaining``,
    ties to the lower position) that asks for more GPUs than the jobs before it leave of the ``n_free`` free ones,
    where it asks for at least ``least_gpus`` and at most ``n_gpus`` (``waiting``: an ``arrays.Waiting``)."""
    least = least_gpus(n_gpus, share)
    big = False
    for i in range(waiting.gpus.shape[0]):
        big = big or (least <= waiting.gpus[i] and waiting.gpus[i] <= n_gpus)
    if not big:  # most calls: nobody large waits
        return -1
    order = smallest(waiting.remaining, n_free + 1)  # the head is among them: each job before it takes a GPU
    for c in range(order.shape[0]):
        i = order[c]
        k = waiting.gpus[i]
        if k <= n_free:
            n_free -= k
        else:
            return i if least <= k and k <= n_gpus else -1
    return -1


@kernel
def shadow(release, k):  # pragma: no cover - compiled; tested against the oracle
    """``(T, spare)``: the ``k``-th soonest of the GPUs' ``release`` times, and how many GPUs beyond ``k`` are
    released by then."""
    t = select_smallest(release, k).max()
    spare = -k
    for g in range(release.shape[0]):
        if release[g] <= t:
            spare += 1
    return t, spare


@kernel
def change(before, after, t):  # pragma: no cover - compiled
    """What moving one GPU's release from ``before`` to ``after`` does to the spare GPUs of a reservation with
    shadow time ``t``: ``-1`` where it was released by ``t`` and no longer is, ``+1`` the other way, else 0."""
    return (1 if after <= t else 0) - (1 if before <= t else 0)


@kernel
def backfill(order, gpus, ends, n_free, limit, t, spare):  # pragma: no cover - compiled; tested via the oracle
    """EASY's test, in SJF order: the jobs at queue positions ``order`` (the candidates from the head on, in SJF
    order) start on the ``n_free`` free GPUs where they fit and either end by ``t`` (``ends``, by queue position) or
    fit on the ``spare`` GPUs, which they then take; the others wait, the walk stopping after ``limit`` of them
    (as ``placement.sjf_walk``). Return ``(starting, waiting, spare)``, both in walk order."""
    n = order.shape[0]
    starting = np.empty(n, dtype=np.int64)
    waiting = np.empty(n, dtype=np.int64)
    ns, nw = 0, 0
    for c in range(n):
        i = order[c]
        k = gpus[i]
        if k <= n_free and (ends[i] <= t or k <= spare):
            if ends[i] > t:
                spare -= k
            n_free -= k
            starting[ns] = i
            ns += 1
        else:
            waiting[nw] = i
            nw += 1
            if nw >= limit:
                break
    return starting[:ns].copy(), waiting[:nw].copy(), spare


@kernel
def preemption_change(picked, end, used, victims, occupancy, t):  # pragma: no cover - compiled
    """``change`` summed over the GPUs of an SRPT preemption: a job takes GPUs ``picked`` until ``end``, stopping
    the victims ``used`` (``victims.Victims``; ``occupancy`` before the stop). A free GPU it takes was released at
    0; a victim's GPU at the victim's end, and is released at ``end`` where the job takes it, else now."""
    total = 0
    for p in range(picked.shape[0]):
        if occupancy[picked[p]] == 0:
            total += change(0.0, end, t)
    for u in range(used.shape[0]):
        v = used[u]
        for p in range(victims.first[v], victims.first[v + 1]):
            g = victims.gpus[p]
            taken = False
            for c in range(picked.shape[0]):
                taken = taken or picked[c] == g
            total += change(victims.remaining[v], end if taken else 0.0, t)
    return total


@kernel
def join_change(free, shared, wl, ea, lone, speed, q, n, t):  # pragma: no cover - compiled
    """``change`` summed over the GPUs of a multi-GPU join (``sharing.offer``): the joiner (workload ``wl``,
    ``ea`` seconds left alone on its slowest GPU) takes the free GPUs ``free`` and joins the lone residents of
    ``shared`` (``lone``: per GPU its job, workload and remaining exclusive time; ``q`` the slowdowns at the SLO's
    quantile, flattened over ``n`` workloads). It ends by ``t_a = max q x ea`` and a resident by ``slo.end_bound``
    (the bounds of ``sharing.multi_join_holds``): a free GPU is released at ``t_a``, a shared one at the later of
    the two ends."""
    partner_wl, remaining = lone[1], lone[2]
    q_max = 0.0
    for c in range(shared.shape[0]):
        q_max = max(q_max, q[wl * n + partner_wl[shared[c]]])
    t_a = q_max * ea
    total = 0
    total += free.shape[0] * change(0.0, t_a, t)
    for c in range(shared.shape[0]):
        g = shared[c]
        eb = remaining[g] / speed[g]
        total += change(eb, max(t_a, end_bound(q[partner_wl[g] * n + wl], eb, t_a)), t)
    return total
