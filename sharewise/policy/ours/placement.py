"""Step 1 of ``sharewise``, free GPUs: queued jobs start shortest first while they fit, the longest of them on
the fastest placement; then the waiting head of the queue is offered GPUs to share (``sharing``).

Among the jobs starting now, the longest takes the fastest placement (PAL's effective speed,
``_gpus.fastest_block``: the slowest of its GPUs, divided by the cross-node slowdown when they span nodes; ties:
fewer nodes, then the fullest node), so per-GPU speed and locality go where a job's completion time depends on
them most. Where every placement is equally fast (one speed, no cross-node slowdown) this is best-fit packing
(``_gpus.pick_free_gpus``). Where the cluster has PAL's per-class variability, a GPU's speed is its speed for the
job's class. A call is one kernel (``place_kernel``) up to the sharing step's assignment, which scipy solves.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sharewise.engine.compiled import kernel
from sharewise.engine.gpus import fastest_block, lone_residents, pick_free_gpus
from sharewise.engine.interface import Placement, Queue
from sharewise.engine.order import by_sensitivity, smallest, stable_order
from sharewise.policy.ours.arrays import Gpus, Jobs, Knobs, Pairs, Waiting, waiting_of
from sharewise.policy.ours.sharing import assign, offer


class Placed(NamedTuple):
    """What ``place_kernel`` decided. ``started`` (queue positions) start on free GPUs, ``start_gpus`` their
    GPUs, each job's ascending, one after the other; ``joined`` are multi-GPU jobs joining shared GPUs (their
    GPUs ``join_gpus``, likewise); ``cost`` is the sharing assignment of the waiting jobs at queue positions
    ``rows`` to the GPUs ``single[cols]`` (``sharing.assignment_costs``; no rows: nothing to assign)."""

    started: np.ndarray
    start_gpus: np.ndarray
    joined: np.ndarray
    join_gpus: np.ndarray
    single: np.ndarray
    cost: np.ndarray
    rows: np.ndarray
    cols: np.ndarray


def place(queue: Queue, gpus: Gpus, jobs: Jobs, pairs: Pairs, knobs: Knobs, order: str = "sum") -> list[Placement]:
    """Steps 1 and 2 of ``sharewise`` on the cluster ``gpus``, ``jobs``: the placements, in order (starts on
    free GPUs, multi-GPU joins, then the assignment's joins)."""
    placed = place_kernel(tuple(gpus), tuple(jobs), tuple(waiting_of(queue)), tuple(pairs), tuple(knobs))
    return (_rows(queue, placed.started, placed.start_gpus) + _rows(queue, placed.joined, placed.join_gpus)
            + assign(queue.job, placed.single, placed.cost, placed.rows, placed.cols, order))


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
    and ``Knobs`` as plain tuples (``arrays``)."""
    gpus, jobs, waiting, pairs, knobs = Gpus(*gpus), Jobs(*jobs), Waiting(*waiting), Pairs(*pairs), Knobs(*knobs)
    occ = gpus.occupancy.copy()
    lone, n_free, starting, rows = prepare(occ, gpus, jobs, waiting, pairs.allowed, knobs.sharing_head)
    started, start_gpus, n_free, n_single = start_on_free_gpus(occ, n_free, lone, starting, gpus, jobs, waiting)
    empty = np.empty(0, dtype=np.int64)
    if rows.shape[0] == 0 or n_single == 0:
        return Placed(started, start_gpus, empty, empty, empty, np.empty((0, 0)), empty, empty)
    joined, join_gpus, single, cost, cost_rows, cols = offer(occ, n_free, lone, rows, gpus, jobs, waiting, pairs, knobs)
    return Placed(started, start_gpus, joined, join_gpus, single, cost, cost_rows, cols)


@kernel
def prepare(occ, gpus, jobs, waiting, allowed, head):  # pragma: no cover - compiled; tested against the oracle
    """One call's set-up: the lone residents (``_gpus.lone_residents``), the queued jobs that could start now
    (enough free GPUs, or GPUs they may join), and those jobs' SJF walk over the free GPUs (``sjf_walk``).
    Return ``(lone, n_free, starting, waiting)``, the last two as queue positions."""
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
        return lone, n_free, empty, empty
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
    cand = cand[:n_cand]
    starting, rows = sjf_walk(waiting.remaining[cand], waiting.gpus[cand], n_free, head)
    return lone, n_free, cand[starting], cand[rows]


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
