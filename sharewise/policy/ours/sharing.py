"""Step 2 of ``sharewise``, sharing: which waiting jobs join a GPU that holds one job, where it pays and the SLO
holds.

A waiting job (the head of the SJF queue that found no free GPU) may join the lone resident of a GPU only if,
at the predicted slowdowns of ``Params.slo_quantile`` (p90), each job's realized slowdown (its run time over its
exclusive run time, counting what it has already run: the resident, and a joiner preempted before) stays within
the SLO, and sharing pays at ``Params.quantile``: the two jobs' summed extra run time (stretch) is less than the
time the joiner saves by not waiting, which is the earlier of the resident's own end (SJF-BSBF's sequential
alternative) and the predicted release of the GPU the joiner would get in the waiting line (``release_times``).
Run times are divided by the speed of the GPU in question, so a slow GPU is a worse host.

A multi-GPU job takes its best GPUs greedily when each of them saves and the SLO holds for it and every resident
at once (``multi_join_holds``: it runs at the rate of its worst GPU); then one assignment (Hungarian, scipy)
over the single-GPU jobs and the GPUs left maximizes the summed saving. A GPU whose job shares another of its
GPUs is not offered: that job runs slowed there, for a time the check cannot see. A job step 1 started alone in
this call is offered where ``Params.share_fresh`` says (by default only where the cluster held no job at the call:
elsewhere a call comes soon, when a job ends or arrives, and the job is offered then). Where a job is reserved
(``reservation``), a join that would keep a GPU the reservation counts on busy past its shadow time takes a spare
GPU, and waits where none is left.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from sharewise.engine.compiled import kernel
from sharewise.engine.gpus import pick_free_gpus
from sharewise.engine.order import select_smallest, stable_order
from sharewise.engine.policy_types import ClusterState, Placement
from sharewise.engine.table import SlowdownTable
from sharewise.policy.ours.arrays import FORBIDDEN, Waiting
from sharewise.policy.ours.reservation import join_change
from sharewise.policy.ours.slo import budget, end_bound, joiner_budget, shared_ends


def release_times(cluster: ClusterState, table: SlowdownTable, m: int | None = None) -> np.ndarray:
    """Predict when GPUs become free (seconds from now, p50 slowdowns), ascending; a free GPU counts as 0.

    With ``m``, only the ``m`` soonest releases are returned (a partial sort: policies need the head only).
    Example: a GPU free, one whose job has 100 s left at speed 0.5 and a pair ending at 300 s give
    ``[0.0, 200.0, 300.0]``.
    """
    started = np.full(cluster.n_gpus, np.nan)
    return releases(cluster.resident, cluster.job_remaining, cluster.job_workload, cluster.speed, table.allowed,
                    table.p50, cluster.n_gpus if m is None else min(m, cluster.n_gpus), started)


@kernel
def releases(resident, remaining, workload, speed, allowed, p50, m, started):  # pragma: no cover - compiled
    """``release_times`` on arrays: the ``m`` soonest of ``gpu_releases``, ascending."""
    out = gpu_releases(resident, remaining, workload, speed, allowed, p50, started)
    if m < out.shape[0]:
        out = select_smallest(out, m)
    return out[stable_order(out)]


@kernel
def gpu_releases(resident, remaining, workload, speed, allowed, p50, started):  # pragma: no cover - compiled
    """Each GPU's predicted release (seconds from now, p50 slowdowns), by GPU: 0 where free, a lone job's
    remaining time over the GPU's speed, a pair's later end (``slo.shared_ends``); neighbouring GPUs of the same
    job(s) at the same speed are computed once. A GPU free in ``resident`` that this call just gave a job
    (``started[gpu]``: that job's remaining exclusive time, NaN for none) is released when that job ends, not
    now."""
    n_gpus = resident.shape[0]
    out = np.zeros(n_gpus)
    for gpu in range(n_gpus):
        a = resident[gpu, 0]
        b = resident[gpu, 1]
        if a < 0:
            if not np.isnan(started[gpu]):
                out[gpu] = started[gpu] / speed[gpu]
            continue
        if gpu > 0 and resident[gpu - 1, 0] == a and resident[gpu - 1, 1] == b and speed[gpu - 1] == speed[gpu]:
            out[gpu] = out[gpu - 1]
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
    return out


@kernel
def savings(joiners, release, single, lone, speed, jobs, pairs, knobs, shared_elsewhere, fresh_ok,
            reserved):  # pragma: no cover - compiled
    """Return ``(saving, n_good, costly)``: the (joiners x lone residents) time saved by joining, ``-inf`` where
    forbidden, per joiner the number of GPUs where it saves time (``saving > 0``), and the cells that take a spare
    GPU of the reservation ``reserved`` (``reservation.Reservation`` as a plain tuple).

    Row ``i`` is a waiting job (``joiners``: a ``Waiting``; ``release[i]`` the predicted wait for its turn in
    the line); column ``j`` is GPU ``single[j]``, holding ``lone``'s job alone (``lone``: per GPU the job, its
    workload and remaining exclusive time). A column whose resident is in ``shared_elsewhere`` (a multi-GPU
    job sharing another of its GPUs) is forbidden, and so is one whose job step 1 started in this call (its
    ``jobs.start`` NaN) unless ``fresh_ok``; a joiner that ran before (``jobs.start`` not NaN: it was
    preempted) must also end within what the SLO leaves of its own budget. A joiner other than the reserved job
    that would keep a GPU the reservation counts on (released by its shadow time) busy past it, at the pair's
    later end at the SLO's quantile, takes a spare GPU (``costly``), and is forbidden where none is spare. Where
    neighbouring GPUs hold the same job at the same speed (a multi-GPU job), their column is computed once.
    """
    reserved_job, t, spare = reserved
    partner, partner_wl, remaining = lone[0], lone[1], lone[2]
    job_work, job_start = jobs.work, jobs.start
    now, max_slowdown, n = knobs.now, knobs.slo, pairs.n
    ok, q, extra, g, stretch = pairs.ok, pairs.q, pairs.extra, pairs.gain, pairs.stretch
    job_a, wl_a, rem_a = joiners.job, joiners.workload, joiners.remaining
    m = wl_a.shape[0]
    k = single.shape[0]
    out = np.full((m, k), -np.inf)
    n_good = np.zeros(m, dtype=np.int64)
    costly = np.zeros((m, k), dtype=np.bool_)
    last = -1  # the last column computed
    for j in range(k):
        gpu = single[j]
        sp = speed[gpu]
        res = partner[gpu]
        if last >= 0:
            before = single[last]
            if partner[before] == res and speed[before] == sp and remaining[before] == remaining[gpu]:
                for i in range(m):
                    out[i, j] = out[i, last]
                    costly[i, j] = costly[i, last]
                    if out[i, j] > 0:
                        n_good[i] += 1
                continue
        last = j
        fresh = np.isnan(job_start[res])  # step 1 just started it here: offered only where ``fresh_ok``
        if shared_elsewhere[res] or (fresh and not fresh_ok):
            continue
        eb = remaining[gpu] / sp
        bud = budget(max_slowdown, job_work[res], sp, 0.0 if fresh else now - job_start[res])
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
                bud_a = budget(max_slowdown, job_work[ja], sp, now - job_start[ja])
                if (q_ab * ea if a_first else ea + eb * extra[ba]) > bud_a:
                    continue
            if eb <= t and ja != reserved_job:
                # The reservation counts on this GPU: the pair releases it at its later end.
                if (eb + ea * extra[ab] if a_first else ea + eb * extra[ba]) > t:
                    if spare <= 0:
                        continue
                    costly[i, j] = True
            if not pairs.same_quantile:
                a_first = g[ab] * ea <= g[ba] * eb
            pair_stretch = ea * stretch[ab] if a_first else eb * stretch[ba]
            wait = eb if eb < release[i] else release[i]
            out[i, j] = wait - pair_stretch
            if out[i, j] > 0:
                n_good[i] += 1
    return out, n_good, costly


@kernel
def gains(joiners, lone, gpus, jobs, pairs, knobs, reserved):  # pragma: no cover - compiled
    """Return ``(single, saving, n_good, costly)`` for the waiting jobs ``joiners``: the GPUs holding one job and
    ``savings`` against them (with the reservation ``reserved``), where a job's alternative is its turn in the
    predicted releases (``releases``: the waiting jobs take them in SJF order, as many GPUs as each asks for). A
    job step 1 started alone in this call is offered as ``Params.share_fresh`` says (``"idle"``: where the cluster
    held no job at the call)."""
    partner = lone[0]
    n_gpus = partner.shape[0]
    k_a = joiners.gpus
    single = np.flatnonzero(partner >= 0)
    total = 0
    for i in range(k_a.shape[0]):
        total += k_a[i]
    # The alternative to joining is the joiner's turn at a GPU that frees up; a GPU step 1 gave a job in this call
    # frees only when that job ends (the joiners' SJF-BSBF alternative too: wait for the resident to end).
    started = np.full(n_gpus, np.nan)
    for gpu in range(n_gpus):
        if gpus.resident[gpu, 0] < 0 and partner[gpu] >= 0:
            started[gpu] = lone[2][gpu]
    release = releases(gpus.resident, jobs.remaining, jobs.workload, gpus.speed, pairs.allowed, pairs.p50,
                       min(total + 1, n_gpus), started)
    release_a = np.empty(k_a.shape[0])
    turn = -1
    for i in range(k_a.shape[0]):
        turn += k_a[i]
        release_a[i] = release[min(turn, release.shape[0] - 1)]
    shared_elsewhere = np.zeros(jobs.remaining.shape[0], dtype=np.bool_)
    for gpu in range(n_gpus):
        if gpus.resident[gpu, 1] >= 0:
            shared_elsewhere[gpus.resident[gpu, 0]] = True
            shared_elsewhere[gpus.resident[gpu, 1]] = True
    fresh_ok = knobs.share_fresh == 2
    if knobs.share_fresh == 1:
        fresh_ok = True
        for gpu in range(n_gpus):
            if gpus.occupancy[gpu] > 0:
                fresh_ok = False
                break
    live = rows_that_may_save(joiners.workload, joiners.remaining, release_a, single, gpus.speed, pairs)
    if live.shape[0] == k_a.shape[0]:
        saving, n_good, costly = savings(joiners, release_a, single, lone, gpus.speed, jobs, pairs, knobs,
                                         shared_elsewhere, fresh_ok, reserved)
        return single, saving, n_good, costly
    saving = np.full((k_a.shape[0], single.shape[0]), -np.inf)
    n_good = np.zeros(k_a.shape[0], dtype=np.int64)
    costly = np.zeros((k_a.shape[0], single.shape[0]), dtype=np.bool_)
    if live.shape[0]:
        some = Waiting(joiners.job[live], joiners.gpus[live], joiners.workload[live], joiners.remaining[live])
        part, part_good, part_costly = savings(some, release_a[live], single, lone, gpus.speed, jobs, pairs, knobs,
                                               shared_elsewhere, fresh_ok, reserved)
        for r in range(live.shape[0]):
            saving[live[r]] = part[r]
            n_good[live[r]] = part_good[r]
            costly[live[r]] = part_costly[r]
    return single, saving, n_good, costly


@kernel
def rows_that_may_save(wl_a, rem_a, release_a, single, speed, pairs):  # pragma: no cover - compiled
    """The waiting jobs (rows of ``savings``) that may save time on some GPU, ascending; every other row's
    savings are all <= 0 (or forbidden), so leaving them forbidden changes no placement.

    A cell saves ``min(eb, release) - stretch``. If the joiner ends first the stretch is ``ea * stretch[ab]``,
    with ``ea >= rem_a / (fastest speed)``; so where ``stretch[ab] >= 0`` for every partner it may share with
    and ``rem_a / fastest * min stretch[ab] >= release`` no such cell saves. If the resident ends first it is
    ``eb * stretch[ba]``, which is at least ``eb`` where ``stretch[ba] >= 1`` for every such partner. Rounding
    is monotone, so the float products keep both inequalities.
    """
    n, ok, stretch = pairs.n, pairs.ok, pairs.stretch
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


@kernel
def best_columns(row, need):  # pragma: no cover - compiled; tested against the oracle
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


@kernel
def multi_join_holds(job, wl, rem, shared, sp, lone, gpus, jobs, q, n, now, max_slowdown):  # pragma: no cover
    """The SLO check of a multi-GPU job (``job``, workload ``wl``, ``rem`` exclusive seconds left, ``sp`` the
    speed of its slowest GPU) joining the lone residents of GPUs ``shared``, all at once; ``q`` at the SLO's
    quantile, flattened.

    Each GPU's own check (``savings``) pictures the joiner next to that GPU's resident alone. Spread over
    residents of several workloads, the joiner runs at the rate of its worst GPU: its slowdown is the largest
    of theirs while they all stay, so it may end later than any one check assumed, and stretch every resident
    longer. Bounds that hold whatever order they end in: the joiner ends by ``t = max q_ab x e_a`` (``e_a`` on
    its slowest GPU); resident ``b`` then ends by ``slo.end_bound`` (it shares for ``t`` at most). Both must fit
    the budget the SLO leaves each job, counting what it has already run (a preempted joiner too).
    """
    partner, partner_wl, remaining = lone[0], lone[1], lone[2]
    ea = rem / sp
    q_max = 0.0
    for c in range(shared.shape[0]):
        q_max = max(q_max, q[wl * n + partner_wl[shared[c]]])
    t = q_max * ea
    if not t <= joiner_budget(max_slowdown, jobs.work[job], ea, sp, jobs.start[job], now):
        return False
    for c in range(shared.shape[0]):
        g = shared[c]
        b = partner[g]
        q_ba = q[partner_wl[g] * n + wl]
        eb = remaining[g] / gpus.speed[g]
        left = budget(max_slowdown, jobs.work[b], gpus.speed[g], now - jobs.start[b])
        if not end_bound(q_ba, eb, t) <= left:
            return False
    return True


@kernel
def offer(occ, n_free, lone, rows, gpus, jobs, waiting, pairs, knobs, reserved):  # pragma: no cover - compiled
    """The sharing step on the cluster after step 1 (``occ``, ``n_free``, ``lone``: as step 1 left them) for
    the waiting jobs at queue positions ``rows``, with the reservation ``reserved`` (``reservation.Reservation``
    as a plain tuple): ``(joined, join_gpus, single, cost, cost_rows, cost_cols, costly, shadow, spare)``.

    Multi-GPU jobs (rare) first, in queue-head order: each takes its ``need`` best shared GPUs (with all free
    GPUs, when some are free) when every one of them saves, ``multi_join_holds`` and the reservation keeps its
    GPUs (``reservation.join_change``; the reserved job itself joining ends the reservation); ``joined`` are
    their queue positions and ``join_gpus`` their GPUs, each job's ascending, one after the other. Then
    ``assignment_costs`` for the single-GPU jobs and the shared GPUs not taken, ``costly`` marking the cells that
    take a spare GPU; ``shadow`` and ``spare`` are the reservation left for them.
    """
    reserved_job, t, spare = reserved
    joiners = Waiting(waiting.job[rows], waiting.gpus[rows], waiting.workload[rows], waiting.remaining[rows])
    k_a = joiners.gpus
    single, saving, n_good, costly = gains(joiners, lone, gpus, jobs, pairs, knobs, reserved)
    taken = np.zeros(single.shape[0], dtype=np.bool_)
    joined = np.empty(rows.shape[0], dtype=np.int64)
    n_joined = 0
    total = 0
    for r in range(rows.shape[0]):
        if k_a[r] > 1:
            total += k_a[r]
    join_gpus = np.empty(total, dtype=np.int64)
    o = 0
    for r in range(rows.shape[0]):
        need = k_a[r] - n_free  # a job with fewer saving GPUs than it needs cannot join
        if k_a[r] <= 1 or n_good[r] <= 0 or need <= 0 or need > n_good[r]:
            continue
        row = saving[r].copy()
        for c in range(single.shape[0]):
            if taken[c]:
                row[c] = -np.inf
        best = best_columns(row, need)
        every = True
        for c in range(need):
            every = every and row[best[c]] > 0
        if not every:
            continue
        free = pick_free_gpus(occ, gpus.node, n_free)
        shared = single[best]
        chosen = np.concatenate((free, shared))
        sp = np.inf
        for c in range(chosen.shape[0]):
            sp = min(sp, gpus.speed[chosen[c]])
        i = rows[r]
        if not multi_join_holds(waiting.job[i], waiting.workload[i], waiting.remaining[i], shared, sp, lone, gpus,
                                jobs, pairs.q, pairs.n, knobs.now, knobs.slo):
            continue
        if waiting.job[i] == reserved_job:
            t = np.inf  # the reserved job starts: nothing left to reserve
        elif t < np.inf:
            delta = join_change(free, shared, waiting.workload[i], waiting.remaining[i] / sp, lone, gpus.speed,
                                pairs.q, pairs.n, t)
            if spare + delta < 0:
                continue
            spare += delta
        for c in range(need):
            taken[best[c]] = True
        for c in range(chosen.shape[0]):
            occ[chosen[c]] += 1
        n_free -= free.shape[0]
        chosen = chosen[stable_order(chosen)]
        for c in range(chosen.shape[0]):
            join_gpus[o] = chosen[c]
            o += 1
        joined[n_joined] = i
        n_joined += 1
    cost, cost_rows, cost_cols, cost_costly = assignment_costs(saving, k_a, taken, knobs.forbidden, costly)
    return joined[:n_joined], join_gpus[:o], single, cost, rows[cost_rows], cost_cols, cost_costly, t, spare


@kernel
def assignment_costs(saving, k_a, taken, forbidden, costly):  # pragma: no cover - compiled; tested via the policy
    """Return ``(cost, rows, cols, cost_costly)`` for the one assignment of single-GPU waiting jobs to shared
    GPUs: the rows (jobs asking one GPU) and columns (GPUs not ``taken``) with at least one saving cell, ``cost``
    the negated savings there (``forbidden`` where a cell saves nothing) followed by one zero column per row
    (waiting instead), and ``costly`` on those rows and columns."""
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
    cost_costly = np.zeros((rows.shape[0], cols.shape[0]), dtype=np.bool_)
    for a in range(rows.shape[0]):
        for b in range(cols.shape[0]):
            gain = saving[rows[a], cols[b]]
            cost[a, b] = -gain if gain > 0 else forbidden
            cost_costly[a, b] = costly[rows[a], cols[b]]
    return cost, rows, cols, cost_costly


def assign(job: np.ndarray, single: np.ndarray, cost: np.ndarray, rows: np.ndarray, cols: np.ndarray,
           order: str = "sum", costly: np.ndarray | None = None, spare: int = 0) -> tuple[list[Placement], int]:
    """Solve the assignment of the waiting jobs at queue positions ``rows`` (ids ``job``) to GPUs
    ``single[cols]`` (``cost`` from ``assignment_costs``: one zero column per job for waiting), where a cell
    marked in ``costly`` takes one of the reservation's ``spare`` GPUs. Return the placements and the spare GPUs
    left. The summed-saving assignment (``order="sum"``) takes no costly cell: it cannot count spares."""
    if rows.shape[0] == 0:
        return [], spare
    placements = []
    n_cols = cols.shape[0]
    if costly is None or not costly.any():
        costly = None
    if order == "sjf":
        free = np.ones(n_cols, dtype=bool)
        for r in range(rows.shape[0]):
            usable = free if costly is None or spare > 0 else free & ~costly[r]
            c = int(np.argmin(np.where(usable, cost[r, :n_cols], np.inf))) if usable.any() else -1
            if c >= 0 and cost[r, c] < FORBIDDEN:
                free[c] = False
                spare -= int(costly is not None and costly[r, c])
                placements.append(Placement(int(job[rows[r]]), (int(single[cols[c]]),)))
        return placements, spare
    if costly is not None:
        cost = cost.copy()
        cost[:, :n_cols][costly] = FORBIDDEN
    for r, c in zip(*linear_sum_assignment(cost), strict=True):
        if c < n_cols and cost[r, c] < FORBIDDEN:
            placements.append(Placement(int(job[rows[r]]), (int(single[cols[c]]),)))
    return placements, spare
