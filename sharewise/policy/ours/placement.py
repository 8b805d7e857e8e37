"""Step 1 of ``sharewise``, free GPUs: queued jobs start shortest first while they fit, the longest of them on
the fastest placement; then the waiting head of the queue is offered GPUs to share (``sharing``).

Among the jobs starting now, the longest takes the fastest placement (PAL's effective speed,
``_gpus.fastest_block``: the slowest of its GPUs, divided by the cross-node slowdown when they span nodes; ties:
fewer nodes, then the fullest node), so per-GPU speed and locality go where a job's completion time depends on
them most. Where every placement is equally fast (one speed, no cross-node slowdown) this is best-fit packing
(``_gpus.pick_free_gpus``). Where the cluster has PAL's per-class variability, a GPU's speed is its speed for the
job's class. Where a job is reserved (``reservation``), the jobs ahead of it in SJF order start first and the
others only where they do not delay it. A call is one kernel (``place_kernel``) up to the sharing step's
assignment, which scipy solves.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sharewise.engine.compiled import kernel
from sharewise.engine.gpus import fastest_block, lone_residents, pick_free_gpus
from sharewise.engine.order import by_sensitivity, smallest, stable_order
from sharewise.engine.policy_types import Placement, Queue
from sharewise.policy.ours.arrays import Gpus, Jobs, Knobs, Pairs, Waiting, waiting_of
from sharewise.policy.ours.reservation import Reservation, backfill, head, shadow
from sharewise.policy.ours.sharing import assign, gpu_releases, offer


class Placed(NamedTuple):
    """What ``place_kernel`` decided. ``started`` (queue positions) start on free GPUs, ``start_gpus`` their
    GPUs, each job's ascending, one after the other; ``joined`` are multi-GPU jobs joining shared GPUs (their
    GPUs ``join_gpus``, likewise); ``cost`` is the sharing assignment of the waiting jobs at queue positions
    ``rows`` to the GPUs ``single[cols]`` (``sharing.assignment_costs``; no rows: nothing to assign), where the
    cells marked in ``costly`` take a spare GPU of the reservation; ``job``, ``shadow`` and ``spare`` are the
    reservation as the call leaves it before the assignment (``reservation.Reservation``; ``job`` a job id)."""

    started: np.ndarray
    start_gpus: np.ndarray
    joined: np.ndarray
    join_gpus: np.ndarray
    single: np.ndarray
    cost: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    costly: np.ndarray
    job: int
    shadow: float
    spare: int


def place(queue: Queue, gpus: Gpus, jobs: Jobs, pairs: Pairs, knobs: Knobs, order: str = "sum"
          ) -> tuple[list[Placement], Reservation]:
    """Steps 1 and 2 of ``sharewise`` on the cluster ``gpus``, ``jobs``: the placements, in order (starts on
    free GPUs, multi-GPU joins, then the assignment's joins), and the reservation they leave for SRPT, e.g.
    ``([Placement(4, (2,))], Reservation(job=9, shadow=3600.0, spare=0))``."""
    placed = place_kernel(tuple(gpus), tuple(jobs), tuple(waiting_of(queue)), tuple(pairs), tuple(knobs))
    joins, spare = assign(queue.job, placed.single, placed.cost, placed.rows, placed.cols, order, placed.costly,
                          placed.spare)
    starts = _rows(queue, placed.started, placed.start_gpus) + _rows(queue, placed.joined, placed.join_gpus)
    return starts + joins, Reservation(int(placed.job), float(placed.shadow), int(spare))


def _rows(queue: Queue, positions: np.ndarray, gpus: np.ndarray) -> list[Placement]:
    """Placements of the jobs at ``positions``, their GPUs one job after the other in ``gpus``."""
    out = []
    o = 0
    for i in positions.tolist():
        k = int(queue.gpus[i])
        out.append(Placement(int(queue.job[i]), tuple(gpus[o : o + k].tolist())))
        o += k
    return out


@kernel
def place_kernel(gpus, jobs, waiting, pairs, knobs):  # pragma: no cover - compiled; tested against the oracle
    """Steps 1 and 2 up to the assignment (``Placed``); arguments are ``Gpus``, ``Jobs``, ``Waiting``, ``Pairs``
    and ``Knobs`` as plain tuples (``arrays``).

    Where a job is reserved (``reservation.head``), the jobs ahead of it in SJF order start first; its shadow
    time is set on the cluster they leave, and the jobs behind it start on free GPUs only where
    ``reservation.backfill`` lets them, after the others (so they do not take the fastest GPUs first)."""
    gpus, jobs, waiting, pairs, knobs = Gpus(*gpus), Jobs(*jobs), Waiting(*waiting), Pairs(*pairs), Knobs(*knobs)
    occ = gpus.occupancy.copy()
    lone, n_free, cand = prepare(occ, gpus, jobs, waiting, pairs.allowed)
    h = head(waiting, n_free, occ.shape[0], knobs.reserve_share) if waiting.gpus.shape[0] else -1
    job, t, spare = -1, np.inf, 0
    if h < 0:
        starting, rows = sjf_walk(waiting.remaining[cand], waiting.gpus[cand], n_free, knobs.sharing_head)
        rows = cand[rows]
        started, start_gpus, n_free, n_single = start_on_free_gpus(occ, n_free, lone, cand[starting], gpus, jobs,
                                                                   waiting)
    else:
        job = waiting.job[h]
        ahead, behind = around(cand, waiting.remaining, h)
        started, start_gpus, n_free, n_single = start_on_free_gpus(occ, n_free, lone, ahead, gpus, jobs, waiting)
        t, spare = shadow(releases_now(lone, gpus, jobs, pairs), waiting.gpus[h])
        ends = free_ends(occ, gpus, waiting, behind)
        later, rows, spare = backfill(behind, waiting.gpus, ends, n_free, knobs.sharing_head, t, spare)
        more, more_gpus, n_free, n_single = start_on_free_gpus(occ, n_free, lone, later, gpus, jobs, waiting)
        started = np.concatenate((started, more))
        start_gpus = np.concatenate((start_gpus, more_gpus))
    empty = np.empty(0, dtype=np.int64)
    if rows.shape[0] == 0 or n_single == 0:
        return Placed(started, start_gpus, empty, empty, empty, np.empty((0, 0)), empty, empty,
                      np.empty((0, 0), dtype=np.bool_), job, t, spare)
    joined, join_gpus, single, cost, cost_rows, cols, costly, t, spare = offer(
        occ, n_free, lone, rows, gpus, jobs, waiting, pairs, knobs, (job, t, spare))
    return Placed(started, start_gpus, joined, join_gpus, single, cost, cost_rows, cols, costly, job, t, spare)


@kernel
def prepare(occ, gpus, jobs, waiting, allowed):  # pragma: no cover - compiled; tested against the oracle
    """One call's set-up: the lone residents (``_gpus.lone_residents``) and the queued jobs that could start now
    (enough free GPUs, or GPUs they may join). Return ``(lone, n_free, candidates)``, the last as queue
    positions, ascending."""
    n_workloads = allowed.shape[0]
    lone = lone_residents(occ, gpus.resident, jobs.workload, jobs.remaining, n_workloads)
    alone = lone[3]
    n_free = 0
    for gpu in range(occ.shape[0]):
        if occ[gpu] == 0:
            n_free += 1
    n_single = alone.sum()
    empty = np.empty(0, dtype=np.int64)
    if waiting.gpus.shape[0] == 0 or (n_free == 0 and n_single == 0):
        return lone, n_free, empty
    # GPUs each workload could use now: the free ones and those a job of a workload it may join holds alone.
    usable = np.full(n_workloads, n_free, dtype=np.int64)
    if n_single > 0:
        for w in range(n_workloads):
            for v in range(n_workloads):
                if allowed[w, v]:
                    usable[w] += alone[v]
    cand = np.empty(waiting.gpus.shape[0], dtype=np.int64)
    n_cand = 0
    for i in range(waiting.gpus.shape[0]):
        if waiting.gpus[i] <= usable[waiting.workload[i]]:
            cand[n_cand] = i
            n_cand += 1
    return lone, n_free, cand[:n_cand]


@kernel
def around(cand, remaining, h):  # pragma: no cover - compiled; tested against the oracle
    """The candidates (queue positions, ascending) ahead of the reserved job at position ``h`` in SJF order
    (``remaining``, ties to the lower position), and the others in SJF order (``h`` first, if a candidate)."""
    before = np.zeros(cand.shape[0], dtype=np.bool_)
    n_ahead = 0
    for c in range(cand.shape[0]):
        i = cand[c]
        before[c] = remaining[i] < remaining[h] or (remaining[i] == remaining[h] and i < h)
        n_ahead += 1 if before[c] else 0
    ahead = np.empty(n_ahead, dtype=np.int64)
    rest = np.empty(cand.shape[0] - n_ahead, dtype=np.int64)
    a, b = 0, 0
    for c in range(cand.shape[0]):
        if before[c]:
            ahead[a] = cand[c]
            a += 1
        else:
            rest[b] = cand[c]
            b += 1
    return ahead, rest[stable_order(remaining[rest])]


@kernel
def releases_now(lone, gpus, jobs, pairs):  # pragma: no cover - compiled
    """Each GPU's predicted release (``sharing.gpu_releases``) once step 1 placed jobs (``lone``: a GPU it gave a
    job is released when that job ends)."""
    started = np.full(gpus.resident.shape[0], np.nan)
    for gpu in range(started.shape[0]):
        if gpus.resident[gpu, 0] < 0 and lone[0][gpu] >= 0:
            started[gpu] = lone[2][gpu]
    return gpu_releases(gpus.resident, jobs.remaining, jobs.workload, gpus.speed, pairs.allowed, pairs.p50, started)


@kernel
def free_ends(occ, gpus, waiting, positions):  # pragma: no cover - compiled
    """When each job at queue ``positions`` would end if it started on free GPUs now (by queue position, inf
    elsewhere): at most its remaining time over the slowest free GPU's speed for any class, over the cross-node
    slowdown where it asks for several GPUs."""
    slowest = np.inf
    for g in range(occ.shape[0]):
        if occ[g] == 0:
            for c in range(gpus.class_speed.shape[0]):
                slowest = min(slowest, gpus.class_speed[c, g])
    ends = np.full(waiting.gpus.shape[0], np.inf)
    for c in range(positions.shape[0]):
        i = positions[c]
        ends[i] = waiting.remaining[i] / slowest * (gpus.cross if waiting.gpus[i] > 1 else 1.0)
    return ends


@kernel
def sjf_walk(keys, gpus, n_free, head):  # pragma: no cover - compiled; tested against the Python walk
    """Walk positions in ascending ``keys`` (ties: lower position first) while ``n_free`` GPUs last: a job
    asking for at most the GPUs still free starts, any other waits. Return ``(starting, waiting)``; the walk
    stops after ``head`` waiting jobs (with no free GPU, the first ``head`` jobs wait).

    Where ``n_free + head`` is small (at most 64) only that many of the order are found up front
    (``smallest``), as ``base.smallest_first`` does, and the whole queue is sorted only if the walk runs past
    them; otherwise the whole queue is sorted at once.
    """
    n = keys.shape[0]
    if n_free == 0:
        return np.empty(0, dtype=np.int64), smallest(keys, max(head, 0))
    starting = np.empty(n, dtype=np.int64)
    waiting = np.empty(n, dtype=np.int64)
    ns = 0
    nw = 0
    m = n_free + head
    order = smallest(keys, m) if m <= 64 else stable_order(keys)
    full = order.shape[0] == n
    pos = 0
    while True:
        if pos == order.shape[0]:
            if full:
                break
            order = stable_order(keys)  # the prefix walked so far is this one's prefix
            full = True
            continue
        i = order[pos]
        pos += 1
        if gpus[i] <= n_free:
            starting[ns] = i
            ns += 1
            n_free -= gpus[i]
        else:
            waiting[nw] = i
            nw += 1
            if nw >= head:
                break
    return starting[:ns].copy(), waiting[:nw].copy()


@kernel
def start_on_free_gpus(occ, n_free, lone, starting, gpus, jobs, waiting):  # pragma: no cover - compiled
    """Place the jobs at queue positions ``starting`` on free GPUs, longest first (``_order.by_sensitivity``):
    packed where every placement is equally fast for the job, else on ``fastest_block`` by its class's speeds.
    Updates ``occ`` and ``lone`` (a started job holds its GPUs alone: the sharing step may offer them).
    Return ``(started, start_gpus, n_free, n_single)``."""
    partner, partner_wl, remaining, alone = lone
    order = by_sensitivity(starting, waiting.remaining, waiting.gpus)
    total = 0
    for s in range(order.shape[0]):
        total += waiting.gpus[order[s]]
    start_gpus = np.empty(total, dtype=np.int64)
    n_single = alone.sum()
    uniform = np.full(gpus.class_speed.shape[0], -1, dtype=np.int64)  # per class: unknown, 0 or 1
    o = 0
    for s in range(order.shape[0]):
        i = order[s]
        k = waiting.gpus[i]
        cls = jobs.job_class[waiting.job[i]] if jobs.job_class.shape[0] else 0
        speed = gpus.class_speed[cls]
        if uniform[cls] < 0:
            uniform[cls] = 1
            for g in range(speed.shape[0]):
                if speed[g] != speed[0]:
                    uniform[cls] = 0
                    break
        if gpus.cross == 1.0 and uniform[cls] == 1:
            chosen = pick_free_gpus(occ, gpus.node, k)
        else:
            chosen = fastest_block(occ, speed, gpus.node, k, gpus.cross)
        for c in range(chosen.shape[0]):
            g = chosen[c]
            n_free -= 1
            n_single += 1
            partner[g] = waiting.job[i]
            partner_wl[g] = waiting.workload[i]
            remaining[g] = waiting.remaining[i]
            alone[waiting.workload[i]] += 1
            occ[g] += 1
        chosen = chosen[stable_order(chosen)]
        for c in range(chosen.shape[0]):
            start_gpus[o] = chosen[c]
            o += 1
    return order, start_gpus, n_free, n_single
