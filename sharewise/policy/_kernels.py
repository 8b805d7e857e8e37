"""Compiled inner loops of the ``sharewise`` policy and the simulator (numba).

The policy runs at every scheduling event, tens of thousands of times per trace; as numpy expressions each
call was dozens of temporary arrays and as many interpreter round trips. Here:

- ``sharing_savings`` scores every (waiting job, GPU holding one job) pair, ``release_times`` predicts the
  GPU releases, ``lone_residents`` tabulates the GPUs holding one job, ``sjf_walk`` orders the queue;
- ``sharewise_packed`` runs a whole policy call in one kernel on a cluster where every placement is equally
  fast (one GPU speed, no cross-node slowdown; free GPUs by ``pick_free_gpus``), up to the one assignment,
  which scipy solves; anything else (different speeds, a multi-GPU job joining shared GPUs) goes to the
  policy's step-by-step Python path;
- ``advance`` brings the simulator's running jobs up to date.

Each kernel computes exactly the closed forms and rules documented in ``interference_aware`` and ``base``
in the same order of operations (no fast-math), so the numbers match the array expressions bit for bit:
``tests/test_policy.py`` checks the scoring against a numpy transcription and ``pick_free_gpus`` against
the Python rule, and ``tests/test_simulator.py`` checks that the one-kernel call places every job on the same
GPUs as the step-by-step path. Where neighbouring GPUs hold the same job(s) at the same speed (a multi-GPU
job), their columns are computed once.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def sharing_savings(
    job_a, wl_a, rem_a, release_a, single, partner, partner_wl, remaining, speed, job_work, job_start, now, n,
    ok, q, extra, g, stretch, same_quantile, max_slowdown, shared_elsewhere,
):  # pragma: no cover - compiled; its numpy twin is tested against it
    """Return ``(saving, n_good)``: the (waiting jobs x lone residents) time saved by joining, ``-inf`` where
    forbidden, and per waiting job the number of GPUs where it saves time (``saving > 0``).

    Row ``i`` is a waiting job (``job_a``, workload ``wl_a``, remaining exclusive time ``rem_a`` on a speed-1
    GPU, ``release_a`` the predicted wait for its turn in the line); column ``j`` is GPU ``single[j]``, holding
    job ``partner[gpu]`` alone (workload ``partner_wl``, remaining exclusive time ``remaining``, whole
    exclusive time ``job_work[job]``, started at ``job_start[job]``). ``ok``, ``q``, ``extra`` (at the SLO's
    quantile) and ``g``, ``stretch`` (at the benefit's quantile) are the flattened per-pair constants of
    ``interference_aware._pair_constants``. A column whose resident is in ``shared_elsewhere`` (a multi-GPU
    job sharing another of its GPUs) is forbidden; a joiner that ran before (``job_start`` not NaN: it was
    preempted) must also end within what the SLO leaves of its own budget.
    """
    m = wl_a.shape[0]
    k = single.shape[0]
    out = np.full((m, k), -np.inf)
    n_good = np.zeros(m, dtype=np.int64)
    last = -1  # the last column computed
    for j in range(k):
        gpu = single[j]
        sp = speed[gpu]
        res = partner[gpu]
        if last >= 0:
            before = single[last]
            if partner[before] == res and speed[before] == sp and remaining[before] == remaining[gpu]:
                # The next GPU of the same multi-GPU job at the same speed: the same column.
                for i in range(m):
                    out[i, j] = out[i, last]
                    if out[i, j] > 0:
                        n_good[i] += 1
                continue
        last = j
        if shared_elsewhere[res]:
            continue  # a multi-GPU job sharing another of its GPUs: it runs slowed, not alone, for a time unknown here
        eb = remaining[gpu] / sp
        # Wall seconds the resident may still run within its SLO (its slowdown counts from its start).
        bud = max_slowdown * job_work[res] / sp - (now - job_start[res])
        if eb > bud:
            continue
        wb = partner_wl[gpu]
        for i in range(m):
            ab = wl_a[i] * n + wb
            if not ok[ab]:
                continue
            ba = wb * n + wl_a[i]
            ea = rem_a[i] / sp
            q_ab = q[ab]
            q_ba = q[ba]
            a_first = q_ab * ea <= q_ba * eb
            if a_first:
                if not (q_ab <= max_slowdown and eb + ea * extra[ab] <= bud):
                    continue
            elif not (q_ba * eb <= bud and ea + eb * extra[ba] <= max_slowdown * ea):
                continue
            ja = job_a[i]
            if not np.isnan(job_start[ja]):
                # A preempted job: its slowdown counts from its first start, so its end must fit in what is
                # left of its own budget, as the resident's does.
                bud_a = max_slowdown * job_work[ja] / sp - (now - job_start[ja])
                if (q_ab * ea if a_first else ea + eb * extra[ba]) > bud_a:
                    continue
            if not same_quantile:
                a_first = g[ab] * ea <= g[ba] * eb
            pair_stretch = ea * stretch[ab] if a_first else eb * stretch[ba]
            wait = eb if eb < release_a[i] else release_a[i]
            out[i, j] = wait - pair_stretch
            if out[i, j] > 0:
                n_good[i] += 1
    return out, n_good


@njit(cache=True, nogil=True)
def lone_residents(occupancy, resident, job_workload, job_remaining, n_workloads):  # pragma: no cover
    """Return ``(partner, partner_wl, remaining, alone)``: per GPU the job alone on it (``-1`` if the GPU is
    free or full), its workload id (``-1`` likewise) and its remaining exclusive time (0 elsewhere); per
    workload id, how many GPUs a job of it holds alone."""
    n_gpus = occupancy.shape[0]
    partner = np.full(n_gpus, -1, dtype=np.int64)
    partner_wl = np.full(n_gpus, -1, dtype=np.int64)
    remaining = np.zeros(n_gpus)
    alone = np.zeros(n_workloads, dtype=np.int64)
    for gpu in range(n_gpus):
        if occupancy[gpu] == 1:
            job = resident[gpu, 0]
            partner[gpu] = job
            partner_wl[gpu] = job_workload[job]
            remaining[gpu] = job_remaining[job]
            alone[job_workload[job]] += 1
    return partner, partner_wl, remaining, alone


@njit(cache=True, nogil=True)
def shared_ends(e_a, e_b, s_a, s_b):  # pragma: no cover - compiled; ``interference_aware.shared_completion``
    """When two jobs sharing from now end: ``e`` remaining exclusive times, ``s`` slowdowns next to each other;
    the one that ends first does so at ``s * e``, the other then runs alone for the work it has left."""
    f_a = s_a * e_a
    f_b = s_b * e_b
    if f_a <= f_b:
        return f_a, f_a + e_b - f_a / s_b
    return f_b + e_a - f_b / s_a, f_b


@njit(cache=True, nogil=True)
def release_times(resident, remaining, workload, speed, allowed, p50, m):  # pragma: no cover - compiled
    """Return the ``m`` soonest GPU releases (seconds from now, p50 slowdowns), ascending; a free GPU counts
    as 0. A pair's release is the later of its two ends (``shared_completion``)."""
    n_gpus = resident.shape[0]
    out = np.zeros(n_gpus)
    for gpu in range(n_gpus):
        a = resident[gpu, 0]
        b = resident[gpu, 1]
        if a < 0:
            continue
        if gpu > 0 and resident[gpu - 1, 0] == a and resident[gpu - 1, 1] == b and speed[gpu - 1] == speed[gpu]:
            out[gpu] = out[gpu - 1]  # the next GPU of the same job(s) at the same speed
            continue
        if b < 0:
            out[gpu] = remaining[a] / speed[gpu]
            continue
        wa = workload[a]
        wb = workload[b]
        s_ab = p50[wa, wb] if allowed[wa, wb] else 1.0
        s_ba = p50[wb, wa] if allowed[wb, wa] else 1.0
        c_a, c_b = shared_ends(remaining[a], remaining[b], s_ab, s_ba)
        out[gpu] = (c_a if c_a > c_b else c_b) / speed[gpu]
    if m < n_gpus:
        out = select_smallest(out, m)
    return out[stable_order(out)]


@njit(cache=True, nogil=True)
def advance(resident, now, anchor_t, remaining, rate, attained, ngpus):  # pragma: no cover - compiled
    """Bring every running job's remaining work and attained service up to ``now`` (a multi-GPU job, seen on
    each of its GPUs, once: its anchor is ``now`` after the first)."""
    for gpu in range(resident.shape[0]):
        for slot in range(resident.shape[1]):
            job = resident[gpu, slot]
            if job < 0 or anchor_t[job] == now:
                continue
            dt = now - anchor_t[job]
            remaining[job] -= rate[job] * dt
            attained[job] += ngpus[job] * dt
            anchor_t[job] = now


@njit(cache=True, nogil=True)
def stable_order(keys):  # pragma: no cover - compiled; tested against np.argsort(kind="stable")
    """``np.argsort(keys, kind="stable")``, as a bottom-up merge sort (numba's own sorts take seconds to
    compile)."""
    n = keys.shape[0]
    order = np.arange(n)
    spare = np.empty(n, dtype=np.int64)
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            a, b, o = lo, mid, lo
            while a < mid and b < hi:
                if keys[order[b]] < keys[order[a]]:
                    spare[o] = order[b]
                    b += 1
                else:
                    spare[o] = order[a]
                    a += 1
                o += 1
            while a < mid:
                spare[o] = order[a]
                a += 1
                o += 1
            while b < hi:
                spare[o] = order[b]
                b += 1
                o += 1
        order, spare = spare, order
        width *= 2
    return order


@njit(cache=True, nogil=True)
def smallest(keys, m):  # pragma: no cover - compiled; tested against np.argsort(kind="stable")
    """The first ``m`` positions of ``stable_order(keys)``, by insertion into a sorted buffer: linear in
    ``len(keys)`` for the few ``m`` a policy call needs."""
    m = min(m, keys.shape[0])
    out = np.empty(max(m, 0), dtype=np.int64)
    if m <= 0:
        return out
    filled = 0
    for i in range(keys.shape[0]):
        x = keys[i]
        if filled < m:
            j = filled
            filled += 1
        elif x < keys[out[m - 1]]:
            j = m - 1
        else:
            continue  # ties with the last kept key come after it: positions only grow
        while j > 0 and keys[out[j - 1]] > x:
            out[j] = out[j - 1]
            j -= 1
        out[j] = i
    return out


@njit(cache=True, nogil=True)
def select_smallest(values, m):  # pragma: no cover - compiled; tested against np.partition
    """The ``m`` smallest of ``values`` (``1 <= m <= len``), in no particular order: Hoare's quickselect
    with a median-of-three pivot, on a copy (what ``np.partition(values, m - 1)[:m]`` holds)."""
    a = values.copy()
    lo, hi, k = 0, a.shape[0] - 1, m - 1
    while lo < hi:
        mid = (lo + hi) // 2
        x, y, z = a[lo], a[mid], a[hi]
        pivot = max(min(x, y), min(max(x, y), z))
        i, j = lo, hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            break
    return a[:m].copy()


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True)
def sharing_prepare(
    occupancy, resident, job_workload, job_remaining, allowed, q_gpus, q_workload, q_remaining, head
):  # pragma: no cover - compiled; tested against SharingState, candidates and the Python walk
    """One ``sharewise`` call's set-up: the lone residents (``lone_residents``), the queued jobs that could
    start now (enough free GPUs, or GPUs they may join), and those jobs' SJF walk over the free GPUs
    (``sjf_walk``). Return ``(partner, partner_wl, remaining, alone, n_free, starting, waiting)``, the last
    two as queue positions."""
    n_workloads = allowed.shape[0]
    partner, partner_wl, remaining, alone = lone_residents(
        occupancy, resident, job_workload, job_remaining, n_workloads
    )
    n_free = 0
    for gpu in range(occupancy.shape[0]):
        if occupancy[gpu] == 0:
            n_free += 1
    n_single = alone.sum()
    empty = np.empty(0, dtype=np.int64)
    if q_gpus.shape[0] == 0 or (n_free == 0 and n_single == 0):
        return partner, partner_wl, remaining, alone, n_free, empty, empty
    # GPUs each workload could use now: the free ones and those a job of a workload it may join holds alone.
    usable = np.full(n_workloads, n_free, dtype=np.int64)
    if n_single > 0:
        for w in range(n_workloads):
            for v in range(n_workloads):
                if allowed[w, v]:
                    usable[w] += alone[v]
    cand = np.empty(q_gpus.shape[0], dtype=np.int64)
    n_cand = 0
    for i in range(q_gpus.shape[0]):
        if q_gpus[i] <= usable[q_workload[i]]:
            cand[n_cand] = i
            n_cand += 1
    cand = cand[:n_cand]
    starting, waiting = sjf_walk(q_remaining[cand], q_gpus[cand], n_free, head)
    return partner, partner_wl, remaining, alone, n_free, cand[starting], cand[waiting]


@njit(cache=True, nogil=True)
def sharing_gains(
    job_a, wl_a, rem_a, k_a, partner, partner_wl, remaining, resident, job_remaining, job_workload, speed, job_work,
    job_start, allowed, p50, now, n, ok, q, extra, g, stretch, same_quantile, max_slowdown,
):  # pragma: no cover - compiled; its parts are tested against their closed forms
    """Return ``(single, saving, n_good)`` for the waiting jobs (``job_a``: workloads ``wl_a``, remaining ``rem_a``,
    GPUs asked ``k_a``): the GPUs holding one job and ``sharing_savings`` against them, where a job's
    alternative is its turn in the predicted releases (``release_times``: the waiting jobs take them in SJF
    order, as many GPUs as each asks for)."""
    n_gpus = partner.shape[0]
    single = np.flatnonzero(partner >= 0)
    total = 0
    for i in range(k_a.shape[0]):
        total += k_a[i]
    release = release_times(resident, job_remaining, job_workload, speed, allowed, p50, min(total + 1, n_gpus))
    release_a = np.empty(k_a.shape[0])
    turn = -1
    for i in range(k_a.shape[0]):
        turn += k_a[i]
        release_a[i] = release[min(turn, release.shape[0] - 1)]
    shared_elsewhere = np.zeros(job_remaining.shape[0], dtype=np.bool_)
    for gpu in range(n_gpus):
        if resident[gpu, 1] >= 0:
            shared_elsewhere[resident[gpu, 0]] = True
            shared_elsewhere[resident[gpu, 1]] = True
    live = rows_that_may_save(wl_a, rem_a, release_a, single, speed, n, ok, stretch)
    if live.shape[0] == k_a.shape[0]:
        saving, n_good = sharing_savings(
            job_a, wl_a, rem_a, release_a, single, partner, partner_wl, remaining, speed, job_work, job_start, now, n,
            ok, q, extra, g, stretch, same_quantile, max_slowdown, shared_elsewhere,
        )
        return single, saving, n_good
    saving = np.full((k_a.shape[0], single.shape[0]), -np.inf)
    n_good = np.zeros(k_a.shape[0], dtype=np.int64)
    if live.shape[0]:
        part, part_good = sharing_savings(
            job_a[live], wl_a[live], rem_a[live], release_a[live], single, partner, partner_wl, remaining, speed,
            job_work, job_start, now, n, ok, q, extra, g, stretch, same_quantile, max_slowdown, shared_elsewhere,
        )
        for r in range(live.shape[0]):
            saving[live[r]] = part[r]
            n_good[live[r]] = part_good[r]
    return single, saving, n_good


@njit(cache=True, nogil=True)
def rows_that_may_save(wl_a, rem_a, release_a, single, speed, n, ok, stretch):  # pragma: no cover - compiled
    """The waiting jobs (rows of ``sharing_savings``) that may save time on some GPU, ascending; every other
    row's savings are all <= 0 (or forbidden), so leaving them forbidden changes no placement.

    A cell saves ``min(eb, release) - stretch``. If the joiner ends first the stretch is ``ea * stretch[ab]``,
    with ``ea >= rem_a / (fastest speed)``; so where ``stretch[ab] >= 0`` for every partner it may share with
    and ``rem_a / fastest * min stretch[ab] >= release`` no such cell saves. If the resident ends first it is
    ``eb * stretch[ba]``, which is at least ``eb`` where ``stretch[ba] >= 1`` for every such partner. Rounding
    is monotone, so the float products keep both inequalities.
    """
    m = wl_a.shape[0]
    if single.shape[0] == 0:
        return np.arange(m)
    fastest = 0.0
    for j in range(single.shape[0]):
        fastest = max(fastest, speed[single[j]])
    first = np.full(n, np.inf)  # per joiner workload: least stretch when it ends first
    second = np.full(n, np.inf)  # ... and when its partner ends first
    for a in range(n):
        for b in range(n):
            if ok[a * n + b]:
                first[a] = min(first[a], stretch[a * n + b])
                second[a] = min(second[a], stretch[b * n + a])
    live = np.empty(m, dtype=np.int64)
    n_live = 0
    for i in range(m):
        a = wl_a[i]
        hopeless = second[a] >= 1.0 and first[a] >= 0.0 and (rem_a[i] / fastest) * first[a] >= release_a[i]
        if not hopeless:
            live[n_live] = i
            n_live += 1
    return live[:n_live]


@njit(cache=True, nogil=True)
def assignment_costs(saving, k_a, taken, forbidden):  # pragma: no cover - compiled; tested via the policy
    """Return ``(cost, rows, cols)`` for the one assignment of single-GPU waiting jobs to shared GPUs:
    the rows (jobs asking one GPU) and columns (GPUs not ``taken``) with at least one saving cell, ``cost``
    the negated savings there (``forbidden`` where a cell saves nothing) followed by one zero column per row
    (waiting instead)."""
    m, k = saving.shape
    use_r = np.zeros(m, dtype=np.bool_)
    use_c = np.zeros(k, dtype=np.bool_)
    for i in range(m):
        if k_a[i] != 1:
            continue
        for j in range(k):
            if not taken[j] and saving[i, j] > 0:
                use_r[i] = True
                use_c[j] = True
    rows = np.flatnonzero(use_r)
    cols = np.flatnonzero(use_c)
    cost = np.zeros((rows.shape[0], cols.shape[0] + rows.shape[0]))
    for a in range(rows.shape[0]):
        for b in range(cols.shape[0]):
            gain = saving[rows[a], cols[b]]
            cost[a, b] = -gain if gain > 0 else forbidden
    return cost, rows, cols


@njit(cache=True, nogil=True)
def pick_free_gpus(occupancy, node, k):  # pragma: no cover - compiled; tested against base.pick_free_gpus
    """``base.pick_free_gpus`` over the GPUs with ``occupancy == 0``, ascending; empty if fewer than ``k``
    are free. The same rule exactly: best fit on one node for a job that fits on one, else the fullest-free
    nodes first."""
    n_gpus = occupancy.shape[0]
    n_nodes = 0
    for gpu in range(n_gpus):
        if node[gpu] + 1 > n_nodes:
            n_nodes = node[gpu] + 1
    counts = np.zeros(n_nodes, dtype=np.int64)
    n_free = 0
    for gpu in range(n_gpus):
        if occupancy[gpu] == 0:
            counts[node[gpu]] += 1
            n_free += 1
    if n_free < k:
        return np.empty(0, dtype=np.int64)
    out = np.empty(k, dtype=np.int64)
    if k == 1:  # the first free GPU of a node with the fewest free
        best = -1
        for gpu in range(n_gpus):
            if occupancy[gpu] == 0 and (best < 0 or counts[node[gpu]] < counts[node[best]]):
                best = gpu
        out[0] = best
        return out
    fit = -1  # the lowest node with the fewest free GPUs that still holds the job
    for nd in range(n_nodes):
        if counts[nd] >= k and (fit < 0 or counts[nd] < counts[fit]):
            fit = nd
    if fit >= 0:
        taken = 0
        for gpu in range(n_gpus):
            if occupancy[gpu] == 0 and node[gpu] == fit:
                out[taken] = gpu
                taken += 1
                if taken == k:
                    break
        return out
    # No node holds it: the first k free GPUs in the order of their node's free count, fullest first (ties:
    # GPU order, as a stable sort gives), returned ascending.
    chosen = np.zeros(n_gpus, dtype=np.bool_)
    taken = 0
    for c in range(counts.max(), 0, -1):
        for gpu in range(n_gpus):
            if taken < k and occupancy[gpu] == 0 and counts[node[gpu]] == c:
                chosen[gpu] = True
                taken += 1
    return np.flatnonzero(chosen)


@njit(cache=True, nogil=True)
def by_sensitivity(positions, q_remaining, q_gpus):  # pragma: no cover - compiled; tested via the policy
    """``pm_first.by_sensitivity``: ``positions`` longest remaining first (ties: more GPUs, then position)."""
    out = positions.copy()
    for a in range(1, out.shape[0]):
        x = out[a]
        b = a
        while b > 0:
            y = out[b - 1]
            if q_remaining[y] > q_remaining[x] or (
                q_remaining[y] == q_remaining[x]
                and (q_gpus[y] > q_gpus[x] or (q_gpus[y] == q_gpus[x] and y < x))
            ):
                break
            out[b] = y
            b -= 1
        out[b] = x
    return out


# Outcomes of ``sharewise_packed``.
@njit(cache=True, nogil=True)
def best_columns(row, need):  # pragma: no cover - compiled; tested via the policy's two paths
    """The ``need`` columns of ``row`` with the largest values, largest first (ties: the lower column first),
    as ``np.argsort(-row, kind="stable")[:need]`` gives them."""
    out = np.empty(need, dtype=np.int64)
    used = np.zeros(row.shape[0], dtype=np.bool_)
    for c in range(need):
        best = -1
        for j in range(row.shape[0]):
            if not used[j] and (best < 0 or row[j] > row[best]):
                best = j
        out[c] = best
        used[best] = True
    return out


@njit(cache=True, nogil=True)
def multi_join_holds(
    job, wl, rem, shared, sp, resident, job_workload, job_remaining, job_work, job_start, speed, q, n, now,
    max_slowdown,
):  # pragma: no cover - compiled; tested by hand-checked cases through the policy
    """The SLO check of a multi-GPU job (``job``, workload ``wl``, ``rem`` exclusive seconds left, ``sp`` the
    speed of its slowest GPU) joining the lone residents of GPUs ``shared``, all at once
    (``interference_aware._multi_join_holds`` states the bounds); ``q`` at the SLO's quantile, flattened."""
    ea = rem / sp
    q_max = 0.0
    for c in range(shared.shape[0]):
        q_max = max(q_max, q[wl * n + job_workload[resident[shared[c], 0]]])
    t = q_max * ea
    if np.isnan(job_start[job]):
        bud_a = max_slowdown * ea
    else:
        bud_a = max_slowdown * job_work[job] / sp - (now - job_start[job])
    if not t <= bud_a:
        return False
    for c in range(shared.shape[0]):
        g = shared[c]
        b = resident[g, 0]
        q_ba = q[job_workload[b] * n + wl]
        eb = job_remaining[b] / speed[g]
        bud_b = max_slowdown * job_work[b] / speed[g] - (now - job_start[b])
        end_b = min(q_ba * eb, eb + t * (1 - 1 / q_ba))
        if not end_b <= bud_b:
            return False
    return True


ASSIGN, IN_PYTHON = 1, 2


@njit(cache=True, nogil=True)
def sharewise_packed(
    occupancy, resident, node, job_workload, job_remaining, speed, cross_node_slowdown, job_work, job_start,
    allowed, p50, q_job, q_gpus, q_workload, q_remaining, head, now, ok, q, extra, g, stretch, same_quantile,
    max_slowdown, forbidden,
):  # pragma: no cover - compiled; the policy's two paths are tested to agree
    """A whole ``sharewise`` call on a cluster where every placement is equally fast (one GPU speed, no
    cross-node slowdown: free GPUs go by ``pick_free_gpus``), up to the assignment; on any other cluster,
    ``IN_PYTHON`` at once.

    Return ``(stage, started, start_gpus, waiting, single, cost, rows, cols)``. With ``stage == ASSIGN``:
    the queue positions ``started`` start on ``start_gpus`` (each job's GPUs in a row, ascending), then
    ``waiting[rows]`` are assigned to ``single[cols]`` by ``cost`` (``assignment_costs``; no rows: none).
    ``IN_PYTHON`` also where a multi-GPU job has enough saving shared GPUs to join and passes the joint SLO
    check (``multi_join_holds``) on the best of them; the policy's general path decides then, from scratch.
    """
    empty = np.empty(0, dtype=np.int64)
    no_cost = np.empty((0, 0))
    uniform = cross_node_slowdown == 1.0
    for gpu in range(speed.shape[0]):
        uniform = uniform and speed[gpu] == speed[0]
    if not uniform:
        return IN_PYTHON, empty, empty, empty, empty, no_cost, empty, empty
    occ = occupancy.copy()
    partner, partner_wl, remaining, alone, n_free, starting, waiting = sharing_prepare(
        occ, resident, job_workload, job_remaining, allowed, q_gpus, q_workload, q_remaining, head
    )
    n_single = alone.sum()
    started = by_sensitivity(starting, q_remaining, q_gpus)
    total = 0
    for s in range(started.shape[0]):
        total += q_gpus[started[s]]
    start_gpus = np.empty(total, dtype=np.int64)
    o = 0
    for s in range(started.shape[0]):
        i = started[s]
        gpus = pick_free_gpus(occ, node, q_gpus[i])
        for gpu in gpus:  # SharingState.place: a free GPU now holds the job alone (no one counts ``alone`` now)
            n_free -= 1
            n_single += 1
            partner[gpu] = q_job[i]
            partner_wl[gpu] = q_workload[i]
            remaining[gpu] = q_remaining[i]
            occ[gpu] += 1
            start_gpus[o] = gpu
            o += 1
    if waiting.shape[0] == 0 or n_single == 0:
        return ASSIGN, started, start_gpus, empty, empty, no_cost, empty, empty
    k_a = q_gpus[waiting]
    single, saving, n_good = sharing_gains(
        q_job[waiting], q_workload[waiting], q_remaining[waiting], k_a, partner, partner_wl, remaining, resident,
        job_remaining, job_workload, speed, job_work, job_start, allowed, p50, now, allowed.shape[0], ok, q, extra,
        g, stretch, same_quantile, max_slowdown,
    )
    for i in range(k_a.shape[0]):
        need = k_a[i] - n_free  # shared GPUs the job would take: the policy's multi-GPU step
        if k_a[i] > 1 and 0 < need <= n_good[i]:
            # The general path places it only if its best GPUs pass the joint SLO check; with none taken yet,
            # the first such job sees what is checked here, so where none passes, none is placed there either.
            best = best_columns(saving[i], need)
            shared = single[best]
            ok_all = True
            for c in range(need):
                ok_all = ok_all and saving[i, best[c]] > 0
            if ok_all and multi_join_holds(
                q_job[waiting[i]], q_workload[waiting[i]], q_remaining[waiting[i]], shared, speed[0], resident,
                job_workload, job_remaining, job_work, job_start, speed, q, allowed.shape[0], now, max_slowdown,
            ):
                return IN_PYTHON, empty, empty, empty, empty, no_cost, empty, empty
    cost, rows, cols = assignment_costs(saving, k_a, np.zeros(single.shape[0], dtype=np.bool_), forbidden)
    return ASSIGN, started, start_gpus, waiting, single, cost, rows, cols


@njit(cache=True, nogil=True)
def lone_jobs(occupancy, resident, speed, job_ngpus, excluded):  # pragma: no cover - compiled; see _preemption
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


@njit(cache=True, nogil=True)
def srpt_preemptions(
    occupancy, resident, node, speed, job_remaining, job_work, job_start, job_ngpus, excluded,
    q_gpus, q_remaining, q_done, params, head, max_stops,
):  # pragma: no cover - compiled; tested through sharewise on hand-checked cases
    """Step 3 of ``_preemption`` (SLO-guarded SRPT) in one pass: ``(starts, gpus, stops)`` where queue
    position ``starts[i]`` takes ``gpus[i, :q_gpus[starts[i]]]`` and ``stops`` are the jobs preempted.
    ``params`` holds ``now, slo, delay, ratio, slack_share, urgency``."""
    now, slo, delay, ratio, share, urgency = params[0], params[1], params[2], params[3], params[4], params[5]
    starts = np.empty(0, dtype=np.int64)
    stops = np.empty(0, dtype=np.int64)
    max_k = 1
    shortest = np.inf
    for i in range(q_gpus.shape[0]):
        max_k = max(max_k, q_gpus[i])
        if not q_done[i]:
            shortest = min(shortest, q_remaining[i])
    out_gpus = np.full((0, max_k), -1, dtype=np.int64)
    # A quick bound first (most calls end here): is any lone GPU's job long enough, with slack enough, to
    # make way for the shortest waiting job? Bounds over every GPU speed, so no job is grouped yet.
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
        if job_remaining[j] / slowest_gpu <= ratio * shortest + delay:
            continue
        spare = slo * job_work[j] - job_remaining[j] - delay - urgency * (slo - 1.0) * job_work[j]
        spare = max(spare / slowest_gpu, spare / fastest_gpu) - (now - job_start[j])
        if spare > least_cost:
            any_victim = True
            break
    if not any_victim:
        return starts, out_gpus, stops
    jobs, slowest, first, lone_gpus = lone_jobs(occupancy, resident, speed, job_ngpus, excluded)
    n_v = jobs.shape[0]
    if n_v == 0:
        return starts, out_gpus, stops
    rem = np.empty(n_v, dtype=np.float64)
    spare = np.empty(n_v, dtype=np.float64)  # slack beyond the urgency limit, in seconds on the job's GPUs
    for v in range(n_v):
        j = jobs[v]
        rem[v] = job_remaining[j] / slowest[v]
        slack = (slo * job_work[j] - job_remaining[j] - delay) / slowest[v] - (now - job_start[j])
        spare[v] = slack - urgency * (slo - 1.0) * job_work[j] / slowest[v]
    keys = np.empty(q_gpus.shape[0], dtype=np.float64)
    for i in range(q_gpus.shape[0]):
        keys[i] = np.inf if q_done[i] else q_remaining[i]
    waiting = smallest(keys, head)
    occ = occupancy.copy()
    n_free = 0
    for g in range(occ.shape[0]):
        if occ[g] == 0:
            n_free += 1
    taken = np.zeros(n_v, dtype=np.bool_)
    start_list = np.empty(waiting.shape[0], dtype=np.int64)
    gpu_rows = np.full((waiting.shape[0], max_k), -1, dtype=np.int64)
    stop_list = np.empty(max_stops + max_k, dtype=np.int64)
    chosen = np.empty(n_v, dtype=np.int64)
    picked_now = np.zeros(n_v, dtype=np.bool_)
    # The victims still eligible, ascending. Waiting jobs come shortest first, and a victim eligible for a
    # job is eligible for every shorter one (both bounds grow with ``r``), so one that drops out stays out.
    cand = np.arange(n_v)
    n_cand = n_v
    n_start, n_stop = 0, 0
    failed_k = max_k + 1  # victims only get fewer for longer jobs: a size that failed fails again
    for w in range(waiting.shape[0]):
        i = waiting[w]
        if q_done[i] or n_stop >= max_stops:
            break
        r = q_remaining[i]
        cost = (r + delay) / share
        kept, eligible_gpus = 0, 0
        for c in range(n_cand):
            v = cand[c]
            if taken[v] or rem[v] <= ratio * r + delay or spare[v] <= cost / slowest[v]:
                continue
            cand[kept] = v
            kept += 1
            eligible_gpus += first[v + 1] - first[v]
        n_cand = kept
        if n_cand == 0:
            break  # no victim for this job, so none for the longer ones after it
        k = q_gpus[i]
        need = k - n_free
        if k >= failed_k or need <= 0:
            continue  # need <= 0: free GPUs are enough, step 2 left the job waiting for a reason of its own
        if eligible_gpus < need:
            failed_k = min(failed_k, k)
            continue
        n_c, got = 0, 0
        while got < need:  # the longest eligible victim next (first of equals: the order of a stable sort)
            best = -1
            for c in range(n_cand):
                v = cand[c]
                if picked_now[v]:
                    continue
                if best < 0 or rem[v] > rem[best]:
                    best = v
            picked_now[best] = True
            chosen[n_c] = best
            n_c += 1
            got += first[best + 1] - first[best]
        for c in range(n_c):
            picked_now[chosen[c]] = False
        trial = occ.copy()
        for c in range(n_c):
            v = chosen[c]
            for p in range(first[v], first[v + 1]):
                trial[lone_gpus[p]] = 0
        picked = pick_free_gpus(trial, node, k)
        if picked.shape[0] < k:
            continue
        in_pick = np.zeros(occ.shape[0], dtype=np.bool_)
        for p in range(k):
            in_pick[picked[p]] = True
        for c in range(n_c):
            v = chosen[c]
            uses = False
            for p in range(first[v], first[v + 1]):
                uses = uses or in_pick[lone_gpus[p]]
            if uses:
                taken[v] = True
                stop_list[n_stop] = jobs[v]
                n_stop += 1
                for p in range(first[v], first[v + 1]):
                    occ[lone_gpus[p]] = 0
                    n_free += 1
        for p in range(k):
            occ[picked[p]] = 1
            gpu_rows[n_start, p] = picked[p]
        n_free -= k
        start_list[n_start] = i
        n_start += 1
    return start_list[:n_start], gpu_rows[:n_start], stop_list[:n_stop]


@njit(cache=True, nogil=True)
def urgent_restarts(q_job, q_remaining, job_start, job_work, now, slo, delay, urgency, tolerance):
    """Step 1's selection in ``_preemption``: the queue positions of preempted jobs whose slack is down to
    their urgency limit, least slack first, and the time the next other one gets there (inf if none)."""
    n = q_job.shape[0]
    slack = np.empty(n, dtype=np.float64)
    picked = np.empty(n, dtype=np.int64)
    m = 0
    wake = np.inf
    for i in range(n):
        j = q_job[i]
        if not np.isfinite(job_start[j]):
            continue
        s = slo * job_work[j] - q_remaining[i] - delay - (now - job_start[j])
        limit = urgency * (slo - 1.0) * job_work[j] + tolerance
        if s <= limit:
            slack[m] = s
            picked[m] = i
            m += 1
        else:
            wake = min(wake, now + s - limit)
    order = stable_order(slack[:m])
    out = np.empty(m, dtype=np.int64)
    for i in range(m):
        out[i] = picked[order[i]]
    return out, wake


@njit(cache=True, nogil=True)
def _effective(x, gpus, resident, speed, node, cross, job_workload, q, n):  # pragma: no cover - compiled
    """Job ``x`` on its GPUs ``gpus``: ``(slowdown, speed)``, its slowdown next to the jobs sharing its GPUs now
    (it runs at the rate of its worst GPU) and its effective speed alone (slowest GPU over the cross-node
    slowdown when it spans nodes)."""
    slowest = np.inf
    worst = np.inf
    spans = False
    for c in range(gpus.shape[0]):
        g = gpus[c]
        spans = spans or node[g] != node[gpus[0]]
        slowest = min(slowest, speed[g])
        o = resident[g, 1] if resident[g, 0] == x else resident[g, 0]
        s_g = q[job_workload[x] * n + job_workload[o]] if o >= 0 else 1.0
        worst = min(worst, speed[g] / s_g)
    return slowest / worst, slowest / (cross if spans else 1.0)


@njit(cache=True, nogil=True)
def _pause_choice(share_bad, share_sum, bad_0, sum_0, bad_1, sum_1):  # pragma: no cover - compiled
    """Which way on wins (-1 share on, 0 or 1 a pause): a pause only where it leaves fewer jobs over the
    SLO, the one with the fewest, then the smallest summed end time."""
    best, best_bad, best_sum = -1, share_bad, share_sum
    if bad_0 < share_bad:
        best, best_bad, best_sum = 0, bad_0, sum_0
    if bad_1 < share_bad and (bad_1 < best_bad or (bad_1 == best_bad and sum_1 < best_sum)):
        best = 1
    return best


@njit(cache=True, nogil=True)
def _two_jobs(e_a, w_a, ran_a, s_a, d_a, lim_a, e_b, w_b, ran_b, s_b, d_b, lim_b, limit):  # pragma: no cover
    """The way on for two jobs sharing only with each other (``slo_rescues``): -1 share on, 0 pause b, 1
    pause a; ``lim_*`` the realized slowdown that job must keep when it is the one paused."""
    c_a, c_b = shared_ends(e_a, e_b, s_a, s_b)
    bad = int((ran_a + c_a) / w_a > limit) + int((ran_b + c_b) / w_b > limit)
    if bad == 0:
        return -1
    bad_0 = int((ran_a + e_a) / w_a > limit) + int((ran_b + e_a + e_b + d_b) / w_b > lim_b)
    bad_1 = int((ran_b + e_b) / w_b > limit) + int((ran_a + e_b + e_a + d_a) / w_a > lim_a)
    return _pause_choice(bad, c_a + c_b, bad_0, 2 * e_a + e_b + d_b, bad_1, 2 * e_b + e_a + d_a)


@njit(cache=True, nogil=True)
def slo_rescues(
    occupancy, fresh, resident, speed, node, cross, job_workload, job_remaining, job_work, job_start, job_ngpus, q,
    n, now, slo, delay, urgency,
):  # pragma: no cover - compiled; tested by hand-checked cases through the policy
    """Step 0 of ``_preemption``: the jobs to pause where jobs sharing GPUs, at ``q`` (flattened slowdowns),
    would not all end within the SLO and pausing some of them leaves fewer over it.

    Jobs that share GPUs form groups: two jobs sharing only with each other (on one GPU or several), or a
    hub sharing with several jobs that share with it alone; other groups are left as they are. A job runs
    at the rate of its worst GPU (``_effective``: slowdown ``s``), and times are seconds at its effective
    speed: ``e`` remaining alone, ``w`` its exclusive run time; its realized slowdown on a way on is (time
    since its first start + time to its end) / ``w``. Three ways on are compared: share on; pause one side,
    which restarts (with the restart cost) once the other side ends; pause the other side. A pause is taken
    only where it leaves fewer jobs over the SLO than sharing on (``_pause_choice``), so GPUs are never
    churned for nothing. A multi-GPU job is never the one paused: it may wait long to get all its GPUs back,
    which the restart-when-the-other-ends picture does not see.

    - Two jobs: sharing on ends them as ``shared_completion`` does (exact).
    - A hub ``j`` and partners ``p``: ``j`` ends by ``t = s_j e_j``, and ``p`` by
      ``min(s_p e_p, e_p + t (1 - 1/s_p))`` (the bounds of ``multi_join_holds``); paused, the partners
      restart when ``j`` ends.

    Only groups with a GPU marked in ``fresh`` are checked. Two single-GPU jobs on a GPU are checked in the
    first pass over the GPUs; groups with a multi-GPU job, rarer, are then gathered from the GPUs that hold
    one. Returns the jobs to pause."""
    n_gpus = resident.shape[0]
    out = np.empty(n_gpus, dtype=np.int64)
    m = 0
    limit = slo * (1.0 + 1e-9)
    # A paused multi-GPU job must not become urgent by the time it restarts: getting all its GPUs back can
    # take longer than the restart-when-the-other-ends picture assumes.
    calm = slo - urgency * (slo - 1.0)
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
    jobs = np.unique(multi[:n_multi])
    k = jobs.shape[0]
    # Each job's GPUs (``gpus[first[i]:first[i + 1]]``) and its distinct partners.
    count = np.zeros(k + 1, dtype=np.int64)
    slot_job = np.full((n_gpus, 2), -1, dtype=np.int64)
    for g in range(n_gpus):
        for slot in range(2):
            r = resident[g, slot]
            if r >= 0:
                i = np.searchsorted(jobs, r)
                if i < k and jobs[i] == r:
                    slot_job[g, slot] = i
                    count[i + 1] += 1
    first = np.cumsum(count)
    gpus = np.empty(first[k], dtype=np.int64)
    fill = first[:k].copy()
    for g in range(n_gpus):
        for slot in range(2):
            i = slot_job[g, slot]
            if i >= 0:
                gpus[fill[i]] = g
                fill[i] += 1
    partner = np.full(k, -1, dtype=np.int64)  # the one partner, -2 with several
    for i in range(k):
        for c in range(first[i], first[i + 1]):
            g = gpus[c]
            o = resident[g, 1] if resident[g, 0] == jobs[i] else resident[g, 0]
            if o < 0 or o == partner[i]:
                continue
            partner[i] = o if partner[i] == -1 else -2
    for i in range(k):
        x = jobs[i]
        new = False
        for c in range(first[i], first[i + 1]):
            new = new or fresh[gpus[c]]
        if not new:  # every GPU the group shares is on x's: none of them formed its pair just now
            continue
        if partner[i] >= 0:  # two jobs sharing only with each other: from the lower id
            y = partner[i]
            iy = np.searchsorted(jobs, y)
            if y < x or partner[iy] != x:
                continue
            s_x, sp_x = _effective(x, gpus[first[i]:first[i + 1]], resident, speed, node, cross, job_workload, q, n)
            s_y, sp_y = _effective(y, gpus[first[iy]:first[iy + 1]], resident, speed, node, cross, job_workload, q, n)
            way = _two_jobs(
                job_remaining[x] / sp_x, job_work[x] / sp_x, now - job_start[x], s_x, delay / sp_x,
                limit if job_ngpus[x] == 1 else calm,
                job_remaining[y] / sp_y, job_work[y] / sp_y, now - job_start[y], s_y, delay / sp_y,
                limit if job_ngpus[y] == 1 else calm, limit,
            )
            if way >= 0:
                out[m] = y if way == 0 else x
                m += 1
            continue
        # A hub: every partner must share with it alone.
        star = True
        for c in range(first[i], first[i + 1]):
            g = gpus[c]
            o = resident[g, 1] if resident[g, 0] == x else resident[g, 0]
            star = star and (o < 0 or partner[np.searchsorted(jobs, o)] == x)
        if not star:
            continue
        s_j, sp_j = _effective(x, gpus[first[i]:first[i + 1]], resident, speed, node, cross, job_workload, q, n)
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
            g = gpus[c]
            p = resident[g, 1] if resident[g, 0] == x else resident[g, 0]
            if p < 0:
                continue
            ip = np.searchsorted(jobs, p)
            if gpus[first[ip]] != g:  # a multi-GPU partner: once, on its first GPU
                continue
            s_p, sp_p = _effective(p, gpus[first[ip]:first[ip + 1]], resident, speed, node, cross, job_workload, q, n)
            e_p, w_p, ran_p = job_remaining[p] / sp_p, job_work[p] / sp_p, now - job_start[p]
            end_p = min(s_p * e_p, e_p + t * (1 - 1 / s_p))
            bad += int((ran_p + end_p) / w_p > limit)
            share_sum += end_p
            d_p = delay / sp_p
            bad_0 += int((ran_p + e_j + e_p + d_p) / w_p > (limit if job_ngpus[p] == 1 else calm))
            sum_0 += e_j + e_p + d_p
            bad_1 += int((ran_p + e_p) / w_p > limit)
            sum_1 += e_p
            last = max(last, e_p)
            out[m] = p
            m += 1
        bad_1 += int((ran_j + last + e_j + delay / sp_j) / w_j > calm)
        sum_1 += last + e_j + delay / sp_j
        way = _pause_choice(bad, share_sum, bad_0, sum_0, bad_1, sum_1) if bad else -1
        if way != 0:
            m = m0
        if way == 1:
            out[m] = x
            m += 1
    return out[:m]
