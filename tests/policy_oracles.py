"""Reference oracles of the policies' compiled rules: the Python and numpy copies the kernels replaced, small and
slow, which tests hold the kernels equal to (docs/development/conventions.md, practice 14: the fast path is the
implementation, the slow copy a test oracle). Nothing here calls a kernel.

- ``pick_free_gpus``, ``by_sensitivity``, ``fastest_block``: the free-GPU rules of ``engine.gpus`` and ``engine.order``.
- ``shared_completion``, ``pair_constants``, ``release_times``, ``savings``, ``multi_join_holds``: the closed
  forms of ``ours.slo`` and ``ours.sharing`` over whole arrays.
- ``sjf_walk`` and ``sharewise_placements``: a whole ``sharewise`` call's placements without preemption, step by
  step (the policy's former general path).
- ``take_victims`` and ``urgent_restarts``: the victim-taking rule of urgent restarts (``ours.victims``).
- ``lone_victims`` and ``srpt_preemptions``: SLO-guarded SRPT (``ours.srpt``).
- ``rescue_pauses``: the SLO rescue of pairs, two-job groups and hubs (``ours.rescue``).
- ``reserved_head``, ``shadow_time``, ``easy_walk``, ``join_change``: the reservation (``ours.reservation``), which
  ``sharewise_placements`` and ``srpt_preemptions`` apply.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import linear_sum_assignment

from sharewise.engine.policy_types import ClusterState, Placement, Queue
from sharewise.engine.queue_order import in_order
from sharewise.engine.table import SlowdownTable


def pick_free_gpus(free: np.ndarray, node: np.ndarray, k: int) -> np.ndarray | None:
    """``k`` GPUs among ``free`` on as few nodes as possible; ``None`` if too few: best fit on one node for a job
    that fits on one (one GPU: the first of a node with the fewest free), else the fullest-free nodes first."""
    idx = np.flatnonzero(free)
    if idx.shape[0] < k:
        return None
    counts = np.bincount(node[idx])
    if k == 1:
        return idx[[int(np.argmin(counts[node[idx]]))]]
    fitting = np.flatnonzero(counts >= k)
    if fitting.shape[0]:
        best = fitting[np.argmin(counts[fitting])]
        return idx[node[idx] == best][:k]
    rank = np.argsort(-counts[node[idx]], kind="stable")
    return np.sort(idx[rank[:k]])


def by_sensitivity(queue: Queue, chosen: list[int]) -> list[int]:
    """Longest remaining first; ties: more GPUs, then queue order."""
    return sorted(chosen, key=lambda i: (-float(queue.remaining[i]), -int(queue.gpus[i]), i))


def fastest_block(free: np.ndarray, speed: np.ndarray, node: np.ndarray, k: int, penalty: float) -> np.ndarray:
    """PAL's rule: the ``k`` fastest free GPUs anywhere or of one node, by effective speed (slowest GPU, over
    ``penalty`` across nodes); ties to fewer nodes, then the node with fewer free GPUs."""
    idx = np.flatnonzero(free)
    ranked = idx[np.argsort(-speed[idx], kind="stable")]
    free_nodes = node[ranked]
    options = [ranked[:k]]
    for n in np.unique(free_nodes):
        on_node = ranked[free_nodes == n]
        if on_node.shape[0] >= k:
            options.append(on_node[:k])
    best_key, best = None, None
    for gpus in options:
        spans = np.unique(node[gpus]).shape[0]
        eff = float(speed[gpus].min()) / (penalty if spans > 1 else 1.0)
        node_free = int((free_nodes == node[gpus[0]]).sum()) if spans == 1 else idx.shape[0]
        key = (-eff, spans, node_free)
        if best_key is None or key < best_key:
            best_key, best = key, gpus
    return best


def budget(slo, work, speed, ran):
    """Wall seconds a job that started ``ran`` seconds ago may still run and end within the SLO (arrays)."""
    return slo * work / speed - ran


def shared_completion(e_a, e_b, s_a, s_b):
    """``(C_a, C_b)``: when two jobs sharing from now until the first one ends, end (arrays)."""
    f_a = s_a * e_a
    f_b = s_b * e_b
    a_first = f_a <= f_b
    return np.where(a_first, f_a, f_b + e_a - f_b / s_a), np.where(a_first, f_a + e_b - f_a / s_b, f_b)


def pair_constants(table: SlowdownTable, quantile: str):
    """``(ok, q, stretch, extra)`` per pair, flattened, at ``quantile``."""
    ok = table.allowed
    q = np.where(ok, getattr(table, quantile), 1.0)
    stretch = 2 * q - 1 - q / q.T
    extra = q * (1 - 1 / q.T)
    return tuple(np.ascontiguousarray(x).ravel() for x in (ok, q, stretch, extra))


def release_times(cluster: ClusterState, table: SlowdownTable, started: dict[int, float] | None = None) -> np.ndarray:
    """Every GPU's predicted release (p50), ascending (``gpu_release_times`` sorted)."""
    return np.sort(gpu_release_times(cluster, table, started))


def gpu_release_times(cluster: ClusterState, table: SlowdownTable, started: dict[int, float] | None = None
                      ) -> np.ndarray:
    """Each GPU's predicted release (p50), by GPU: 0 free, a lone job's remaining over the GPU's speed, a pair's
    later end; a free GPU the call just gave a job (``started``: GPU -> its remaining time) when it ends."""
    resident, occupancy = cluster.resident, cluster.occupancy()
    want = np.zeros(cluster.n_gpus)
    for g, rem in (started or {}).items():
        want[g] = rem / cluster.speed[g]
    single = np.flatnonzero(occupancy == 1)
    want[single] = cluster.job_remaining[resident[single, 0]] / cluster.speed[single]
    two = np.flatnonzero(occupancy == 2)
    a, b = resident[two, 0], resident[two, 1]
    wa, wb = cluster.job_workload[a], cluster.job_workload[b]
    s_ab = np.where(table.allowed[wa, wb], table.p50[wa, wb], 1.0)
    s_ba = np.where(table.allowed[wb, wa], table.p50[wb, wa], 1.0)
    c_a, c_b = shared_completion(cluster.job_remaining[a], cluster.job_remaining[b], s_ab, s_ba)
    want[two] = np.maximum(c_a, c_b) / cluster.speed[two]
    return want


def savings(wl_a, rem_a, release_a, wl_b, e_b, budget, speed_b, tab, q_slo, q_gain, max_slowdown, budget_a=None,
            joinable=None, reserve=None):
    """The sharing saving over the whole (jobs x GPUs) grid, ``-inf`` where forbidden. ``budget_a`` (jobs x GPUs):
    what the SLO leaves a preempted joiner (NaN for a job that never ran); ``joinable`` (GPUs): False where the
    resident shares another of its GPUs. With ``reserve = (t, spare, exempt)`` (``exempt``: the rows of the
    reserved job) also the cells that take a spare GPU (a resident released by ``t`` whose pair ends later, at
    ``q_slo``), forbidden where ``spare`` is 0: ``(saving, costly)``."""
    ok = tab.allowed
    q = np.where(ok, getattr(tab, q_slo), 1.0)
    g = np.where(ok, getattr(tab, q_gain), 1.0)
    a, b = wl_a[:, None], wl_b[None, :]
    ea, eb, bud = rem_a[:, None] / speed_b[None, :], e_b[None, :], budget[None, :]
    q_ab, q_ba, g_ab, g_ba = q[a, b], q[b, a], g[a, b], g[b, a]
    a_first = q_ab * ea <= q_ba * eb
    slo = np.where(
        a_first,
        (q_ab <= max_slowdown) & (eb + ea * (q_ab * (1 - 1 / q_ba)) <= bud),
        (q_ba * eb <= bud) & (ea + eb * (q_ba * (1 - 1 / q_ab)) <= max_slowdown * ea),
    )
    slo &= ok[a, b] & (eb <= bud)
    if budget_a is not None:
        end_a = np.where(a_first, q_ab * ea, ea + eb * (q_ba * (1 - 1 / q_ab)))
        slo &= np.isnan(budget_a) | (end_a <= budget_a)
    if joinable is not None:
        slo &= joinable[None, :]
    gain_first = g_ab * ea <= g_ba * eb
    stretch = np.where(gain_first, ea * (2 * g_ab - 1 - g_ab / g_ba), eb * (2 * g_ba - 1 - g_ba / g_ab))
    if reserve is None:
        return np.where(slo, np.minimum(eb, release_a[:, None]) - stretch, -np.inf)
    t, spare, exempt = reserve
    last_end = np.where(a_first, eb + ea * (q_ab * (1 - 1 / q_ba)), ea + eb * (q_ba * (1 - 1 / q_ab)))
    costly = slo & (eb <= t) & (last_end > t) & ~np.asarray(exempt, dtype=bool)[:, None]
    if spare <= 0:
        slo &= ~costly
        costly &= False
    return np.where(slo, np.minimum(eb, release_a[:, None]) - stretch, -np.inf), costly


def sjf_walk(keys: np.ndarray, gpus: np.ndarray, n_free: int, head: int) -> tuple[list[int], list[int]]:
    """Positions in ascending ``keys``: a job that fits on the GPUs still free starts, any other waits; the walk
    stops after ``head`` waiting (with no free GPU, the first ``head`` wait)."""
    if n_free == 0:
        return [], np.argsort(keys, kind="stable")[:head].tolist()
    starting, waiting = [], []
    for i in in_order(keys, n_free + head):
        if gpus[i] <= n_free:
            starting.append(i)
            n_free -= int(gpus[i])
        else:
            waiting.append(i)
            if len(waiting) >= head:
                break
    return starting, waiting


def multi_join_holds(job, wl, rem, shared, sp, cluster: ClusterState, q, n, now, slo, partner, partner_wl,
                     remaining) -> bool:
    """A multi-GPU job joining the lone residents of ``shared`` at once (``partner``, ``partner_wl``,
    ``remaining`` per GPU: the residents as step 1 left them, jobs it just started included): it ends by
    ``t = max q x e_a``; each resident by ``min(q_ba e_b, e_b + t (1 - 1/q_ba))``; both within what the SLO
    leaves them."""
    ea = rem / sp
    t = max([0.0] + [float(q[wl * n + partner_wl[g]]) for g in shared]) * ea
    start = cluster.job_start[job]
    if not t <= (slo * ea if np.isnan(start) else budget(slo, cluster.job_work[job], sp, now - start)):
        return False
    for g in shared:
        b = partner[g]
        q_ba = q[partner_wl[g] * n + wl]
        eb = remaining[g] / cluster.speed[g]
        if not min(q_ba * eb, eb + t * (1 - 1 / q_ba)) <= budget(slo, cluster.job_work[b], cluster.speed[g],
                                                                  now - cluster.job_start[b]):
            return False
    return True


def reserved_head(queue: Queue, n_free: int, n_gpus: int, share: float) -> int:
    """The reserved job's queue position (``-1``: none): walking the queue shortest remaining first (ties: the
    lower position), the first job that asks for more GPUs than those before it leave free, where it asks for at
    least ``max(2, share x n_gpus)`` GPUs and at most ``n_gpus``."""
    for i in sorted(range(len(queue)), key=lambda i: (float(queue.remaining[i]), i)):
        k = int(queue.gpus[i])
        if k > n_free:
            return i if max(2.0, share * n_gpus) <= k <= n_gpus else -1
        n_free -= k
    return -1


def shadow_time(release: np.ndarray, k: int) -> tuple[float, int]:
    """``(T, spare)``: the ``k``-th soonest release, and the GPUs beyond ``k`` released by then."""
    t = float(np.sort(release)[k - 1])
    return t, int(np.count_nonzero(release <= t)) - k


def change(before: float, after: float, t: float) -> int:
    """What moving a GPU's release from ``before`` to ``after`` does to the spare GPUs at shadow time ``t``."""
    return int(after <= t) - int(before <= t)


def easy_walk(order, gpus, ends, n_free: int, limit: int, t: float, spare: int):
    """EASY's test in the order given: a job starts where it fits and ends by ``t`` or takes spare GPUs; the others
    wait, the walk stopping after ``limit`` of them. ``(starting, waiting, spare)``."""
    starting, waiting = [], []
    for i in order:
        fits, on_time = int(gpus[i]) <= n_free, ends[i] <= t
        if fits and (on_time or int(gpus[i]) <= spare):
            starting.append(i)
            n_free -= int(gpus[i])
            spare -= 0 if on_time else int(gpus[i])
            continue
        waiting.append(i)
        if len(waiting) >= limit:
            break
    return starting, waiting, spare


def join_change(free, shared, wl, ea, partner_wl, remaining, speed, q, n, t) -> int:
    """The spare GPUs a multi-GPU join takes (negative) or gives: the joiner (``ea`` seconds left alone) ends by
    ``max q x ea`` on the ``free`` GPUs it takes, each resident of ``shared`` by ``min(q_ba e_b, e_b + t_a (1 -
    1/q_ba))``; a shared GPU is released at the later of the two."""
    t_a = max([0.0] + [float(q[wl * n + partner_wl[g]]) for g in shared]) * ea
    total = sum(change(0.0, t_a, t) for _ in free)
    for g in shared:
        q_ba, eb = float(q[partner_wl[g] * n + wl]), remaining[g] / speed[g]
        total += change(eb, max(t_a, min(q_ba * eb, eb + t_a * (1 - 1 / q_ba))), t)
    return total


def sharewise_placements(queue: Queue, cluster: ClusterState, table: SlowdownTable, now: float, max_slowdown: float,
                         head: int = 24, quantile: str = "p90", slo_quantile: str = "p90",
                         order: str = "sjf", share_fresh: str = "idle", reserve_share: float = 0.5,
                         reservation: bool = False):
    """``sharewise(..., preempt=False)`` step by step: candidates, the SJF walk, free GPUs longest first (packed,
    or PAL's fastest block where placements differ in speed), then multi-GPU joins and the single-GPU joins:
    shortest waiting job first on the GPU where it saves most (``order="sjf"``), or one assignment maximizing the
    summed saving (``"sum"``). A job started alone in this call may be joined where ``share_fresh`` is
    ``"always"``, or ``"idle"`` and no job ran at the call.

    The reservation (``reserve_share``): ``reserved_head``. The jobs ahead of it in SJF order start first; its
    shadow time is set on the GPUs' releases then; the others start in SJF
    order by ``easy_walk`` (ending at most at their remaining time over the slowest free GPU, over the cross-node
    slowdown where they ask for several GPUs); joins take spare GPUs where they hold a GPU released by the
    shadow time past it (``savings``, ``join_change``), the reserved job joining ends the reservation. With
    ``reservation``, return ``(placements, (job, shadow, spare))``."""
    resident, node, n_wl = cluster.resident, cluster.node, len(table)
    occupancy = cluster.occupancy()
    fresh_ok = share_fresh == "always" or (share_fresh == "idle" and occupancy.sum() == 0)
    partner = np.where(occupancy == 1, resident[:, 0], -1)
    partner_wl = np.where(partner >= 0, cluster.job_workload[partner], -1)
    remaining = np.where(partner >= 0, cluster.job_remaining[partner], 0.0)
    n_free = int((occupancy == 0).sum())
    alone = np.bincount(partner_wl[partner >= 0], minlength=n_wl)
    usable = n_free + (table.allowed.astype(np.int64) @ alone if alone.sum() else 0)
    cand = np.flatnonzero(queue.gpus <= np.broadcast_to(usable, (n_wl,))[queue.workload])
    r_pos = reserved_head(queue, n_free, cluster.n_gpus, reserve_share) if len(queue) else -1
    r_job, t, spare = (int(queue.job[r_pos]), math.inf, 0) if r_pos >= 0 else (-1, math.inf, 0)
    placements, started = [], {}

    def done(out):
        return (out, (r_job, t, spare)) if reservation else out

    def start(positions):
        for i in by_sensitivity(queue, positions):
            job, k = int(queue.job[i]), int(queue.gpus[i])
            speed = cluster.speed_of(job)
            if cluster.cross_node_slowdown == 1.0 and bool(np.all(speed == speed[0])):
                gpus = pick_free_gpus(occupancy == 0, node, k)
            else:
                gpus = fastest_block(occupancy == 0, speed, node, k, cluster.cross_node_slowdown)
            occupancy[gpus] += 1
            partner[gpus], partner_wl[gpus], remaining[gpus] = job, queue.workload[i], queue.remaining[i]
            started.update({int(g): float(queue.remaining[i]) for g in gpus})
            placements.append(Placement(job, tuple(sorted(int(g) for g in gpus))))

    if r_pos < 0:
        if len(queue) == 0 or (n_free == 0 and alone.sum() == 0):
            return done([])
        starting, waiting = sjf_walk(queue.remaining[cand], queue.gpus[cand], n_free, head)
        start(cand[starting].tolist())
        waiting = cand[waiting]
    else:
        if n_free == 0 and alone.sum() == 0:
            cand = cand[:0]

        def key(i):
            return float(queue.remaining[i]), int(i)

        ahead = [int(i) for i in cand if key(i) < key(r_pos)]
        start(ahead)
        t, spare = shadow_time(gpu_release_times(cluster, table, started), int(queue.gpus[r_pos]))
        free = occupancy == 0
        speeds = cluster.class_speed if cluster.class_speed is not None and cluster.job_class is not None else (
            cluster.speed[None, :])
        slowest = float(speeds[:, free].min()) if free.any() else math.inf
        ends = {int(i): float(queue.remaining[i]) / slowest * (cluster.cross_node_slowdown if queue.gpus[i] > 1
                                                               else 1.0) for i in cand}
        behind = sorted((int(i) for i in cand if int(i) not in set(ahead)), key=key)
        later, waiting, spare = easy_walk(behind, queue.gpus, ends, int(free.sum()), head, t, spare)
        start(later)
        waiting = np.array(waiting, dtype=np.int64)
    n_free = int((occupancy == 0).sum())
    single = np.flatnonzero(partner >= 0)
    if waiting.shape[0] == 0 or single.shape[0] == 0:
        return done(placements)
    k_a = queue.gpus[waiting]
    rel = release_times(cluster, table, started)
    m = min(int(k_a.sum()) + 1, cluster.n_gpus)
    release_a = rel[np.minimum(np.cumsum(k_a) - 1, m - 1)]
    shared_elsewhere = np.zeros(cluster.job_remaining.shape[0], dtype=bool)
    shared_elsewhere[resident[resident[:, 1] >= 0].ravel()] = True
    sp, res = cluster.speed[single], partner[single]
    job_a = queue.job[waiting]
    ran = now - cluster.job_start[res]  # NaN: started in this call, joinable only where fresh_ok (ran 0)
    bud = budget(max_slowdown, cluster.job_work[res], sp, np.where(np.isnan(ran), 0.0, ran) if fresh_ok else ran)
    bud_a = budget(max_slowdown, cluster.job_work[job_a][:, None], sp[None, :], now - cluster.job_start[job_a][:, None])
    saving, costly = savings(queue.workload[waiting], queue.remaining[waiting], release_a, partner_wl[single],
                             remaining[single] / sp, bud, sp, table, slo_quantile, quantile, max_slowdown, bud_a,
                             ~shared_elsewhere[res], (t, spare, job_a == r_job))
    n_good = (saving > 0).sum(axis=1)
    q = pair_constants(table, slo_quantile)[1]
    taken = np.zeros(single.shape[0], dtype=bool)
    for r in np.flatnonzero((k_a > 1) & (n_good > 0)).tolist():
        need = int(k_a[r]) - n_free
        if need <= 0 or need > n_good[r]:
            continue
        row = np.where(taken, -np.inf, saving[r])
        best = np.argsort(-row, kind="stable")[:need]
        if not np.all(row[best] > 0):
            continue
        free = pick_free_gpus(occupancy == 0, node, n_free) if n_free else None
        gpus = single[best] if free is None else np.concatenate([free, single[best]])
        i = int(waiting[r])
        sp_min = float(cluster.speed[gpus].min())
        if not multi_join_holds(int(queue.job[i]), int(queue.workload[i]), float(queue.remaining[i]), single[best],
                                sp_min, cluster, q, n_wl, now, max_slowdown, partner, partner_wl, remaining):
            continue
        if int(queue.job[i]) == r_job:
            t = math.inf
        elif t < math.inf:
            delta = join_change([] if free is None else free, single[best], int(queue.workload[i]),
                                float(queue.remaining[i]) / sp_min, partner_wl, remaining, cluster.speed, q, n_wl, t)
            if spare + delta < 0:
                continue
            spare += delta
        taken[best] = True
        occupancy[gpus] += 1
        n_free = int((occupancy == 0).sum())
        placements.append(Placement(int(queue.job[i]), tuple(sorted(int(g) for g in gpus))))
    rows = np.flatnonzero((k_a == 1) & ((saving > 0) & ~taken[None, :]).any(axis=1))
    cols = np.flatnonzero(((saving[k_a == 1] > 0) & ~taken[None, :]).any(axis=0))
    if rows.shape[0] == 0:
        return done(placements)
    gain, costly = saving[np.ix_(rows, cols)], costly[np.ix_(rows, cols)]
    if order == "sjf":
        free = np.ones(cols.shape[0], dtype=bool)
        for r in range(rows.shape[0]):
            row = np.where(free & (gain[r] > 0) & (~costly[r] | (spare > 0)), gain[r], -np.inf)
            c = int(np.argmax(row))
            if row[c] > 0:
                free[c] = False
                spare -= int(costly[r, c])
                placements.append(Placement(int(queue.job[waiting[rows[r]]]), (int(single[cols[c]]),)))
        return done(placements)
    cost = np.hstack([np.where((gain > 0) & ~costly, -gain, 1e18), np.zeros((rows.shape[0], rows.shape[0]))])
    for r, c in zip(*linear_sum_assignment(cost), strict=True):
        if c < cols.shape[0] and cost[r, c] < 1e18:
            placements.append(Placement(int(queue.job[waiting[rows[r]]]), (int(single[cols[c]]),)))
    return done(placements)


def take_victims(victims: dict, ok: np.ndarray, free: np.ndarray, resident: np.ndarray, node: np.ndarray, k: int):
    """GPUs for a job of ``k`` GPUs: free ones plus those of victims allowed by ``ok`` (``victims`` longest
    first), until enough; ``(gpus, victims whose GPUs it uses)`` or None."""
    need = k - int(free.sum())
    chosen: list[int] = []
    if need > 0:
        idx = np.flatnonzero(ok & ~victims["taken"])
        got = np.cumsum(victims["ngpus"][idx])
        if got.shape[0] == 0 or got[-1] < need:
            return None
        chosen = idx[: int(np.searchsorted(got, need)) + 1].tolist()
    trial = free.copy()
    gpus_of = {i: np.flatnonzero(resident[:, 0] == victims["job"][i]) for i in chosen}
    for i in chosen:
        trial[gpus_of[i]] = True
    gpus = pick_free_gpus(trial, node, k)
    if gpus is None:
        return None
    used = set(gpus.tolist())
    return tuple(int(g) for g in gpus), [i for i in chosen if used & set(gpus_of[i].tolist())]


def urgent_restarts(queue: Queue, cluster: ClusterState, now: float, slo: float, urgency: float, slack_share: float,
                    tolerance: float):
    """Preempted jobs whose slack is down to ``urgency`` of their SLO allowance restart, least slack first, on
    free GPUs or the GPUs of jobs running alone (longest first) that keep their own urgency slack after waiting
    (the waiter's run time + restart) / ``slack_share``. ``(placements, stopped, wake)``."""
    delay = cluster.preempt_delay_s
    start_q = cluster.job_start[queue.job]
    work_q = cluster.job_work[queue.job]
    ran = np.isfinite(start_q)
    s = slo * work_q - queue.remaining - delay - (now - start_q)
    limit = urgency * (slo - 1.0) * work_q + tolerance
    urgent = np.flatnonzero(ran & (s <= limit))
    urgent = urgent[np.argsort(s[urgent], kind="stable")]
    later = ran & (s > limit)
    wake = float((now + s[later] - limit[later]).min()) if later.any() else np.inf
    occupancy = cluster.occupancy()
    lone = [int(j) for j in np.unique(cluster.resident[occupancy == 1, 0])
            if (cluster.resident == j).sum() == cluster.job_ngpus[j] and not (cluster.resident[:, 1] == j).any()
            and (occupancy[(cluster.resident == j).any(axis=1)] == 1).all()]
    first_gpu = {j: int(np.flatnonzero(cluster.resident[:, 0] == j)[0]) for j in lone}
    lone.sort(key=lambda j: (cluster.job_ngpus[j] > 1, first_gpu[j]))  # single-GPU jobs first, by first GPU
    jobs = np.array(lone, dtype=np.int64)
    speed = np.array([cluster.speed[cluster.resident[:, 0] == j].min() for j in lone])
    speed = speed if jobs.shape[0] else np.empty(0)
    work = cluster.job_work[jobs]
    rem = cluster.job_remaining[jobs] / speed
    slack = (slo * work - cluster.job_remaining[jobs] - delay) / speed - (now - cluster.job_start[jobs])
    order = np.argsort(-rem, kind="stable")
    victims = {"job": jobs[order], "speed": speed[order], "slack": slack[order],
               "limit": (urgency * (slo - 1.0) * work / speed)[order], "ngpus": cluster.job_ngpus[jobs][order],
               "taken": np.zeros(jobs.shape[0], dtype=bool)}
    free = occupancy == 0
    start, stopped = [], []
    for i in urgent.tolist():
        cost = (queue.remaining[i] + delay) / slack_share
        ok = victims["slack"] - victims["limit"] > cost / victims["speed"]
        got = take_victims(victims, ok, free, cluster.resident, cluster.node, int(queue.gpus[i]))
        if got is None:
            continue
        gpus, chosen = got
        for v in chosen:
            victims["taken"][v] = True
            stopped.append(int(victims["job"][v]))
            free[cluster.resident[:, 0] == victims["job"][v]] = True
        free[list(gpus)] = False
        start.append(Placement(int(queue.job[i]), gpus))
    return start, stopped, wake


# ---- SRPT and the SLO rescue (``sharewise.srpt``, ``sharewise.rescue``) ----------------------------------------
def lone_victims(occupancy: np.ndarray, cluster: ClusterState, excluded, now: float, slo: float, delay: float,
                 urgency: float) -> list[dict]:
    """The jobs holding every one of their GPUs alone (``occupancy`` 1, slot 1 empty), not ``excluded``: single-GPU
    jobs by GPU, then multi-GPU jobs by first GPU; each with its GPUs, slowest speed, remaining run time and
    slack beyond its urgency limit (``spare``), in seconds on its slowest GPU."""
    res = cluster.resident
    lone = [g for g in range(res.shape[0]) if res[g, 0] >= 0 and res[g, 1] < 0 and occupancy[g] == 1]
    singles = [(int(res[g, 0]), [g]) for g in lone if cluster.job_ngpus[res[g, 0]] == 1]
    multi: dict[int, list[int]] = {}
    for g in lone:
        if cluster.job_ngpus[res[g, 0]] > 1:
            multi.setdefault(int(res[g, 0]), []).append(g)
    whole = [(j, gs) for j, gs in multi.items() if len(gs) == cluster.job_ngpus[j]]
    out = []
    for j, gs in singles + whole:
        if j in set(excluded):
            continue
        sp = float(cluster.speed[gs].min())
        work, rem = cluster.job_work[j], cluster.job_remaining[j]
        spare = (slo * work - rem - delay) / sp - (now - cluster.job_start[j]) - urgency * (slo - 1.0) * work / sp
        out.append({"job": j, "gpus": gs, "slowest": sp, "remaining": rem / sp, "spare": spare})
    return out


def srpt_preemptions(queue: Queue, started, stopped, occupancy: np.ndarray, cluster: ClusterState, now: float,
                     slo: float, delay: float, ratio: float, share: float, urgency: float, max_stops: int,
                     head: int, reserved=(-1, math.inf, 0)):
    """SLO-guarded SRPT: the waiting jobs not ``started``, shortest remaining first (the first ``head``), each
    taking the GPUs of victims whose remaining time exceeds ``ratio`` times its own plus ``delay`` and that keep
    their urgency slack after waiting (its run time + ``delay``) / ``share``; at most ``max_stops`` victims. A
    job for which no victim qualifies ends the call (none qualifies for the longer ones); one whose free GPUs
    suffice, or whose size once found too few victims' GPUs, is passed. A job other than the ``reserved`` one
    (``(job, shadow, spare)``) starts only where the spare GPUs stay >= 0: a free GPU it takes was released at 0, a
    victim's at the victim's end, released at the job's end (its remaining time at its slowest GPU's speed, over
    the cross-node slowdown where they span nodes) or now. ``([(queue position, gpus)], stops)``."""
    if len(started) == len(queue):
        return [], []
    r_job, t, spare = reserved
    if r_job in set(int(j) for j in started):
        t = math.inf
    done = np.isin(queue.job, np.asarray(started, dtype=np.int64))
    victims = lone_victims(occupancy, cluster, [*stopped, *started], now, slo, delay, urgency)
    occ = np.array(occupancy, copy=True)
    taken = [False] * len(victims)
    keys = np.where(done, np.inf, queue.remaining)
    order = np.argsort(keys, kind="stable")[:head]
    starts, stops, failed_k = [], [], np.inf
    for i in order.tolist():
        if done[i] or len(stops) >= max_stops:
            break
        r = float(queue.remaining[i])
        cost = (r + delay) / share
        eligible = [v for v, x in enumerate(victims) if not taken[v] and x["remaining"] > ratio * r + delay
                    and x["spare"] > cost / x["slowest"]]
        if not eligible:
            break
        k = int(queue.gpus[i])
        n_free = int((occ == 0).sum())
        need = k - n_free
        if k >= failed_k or need <= 0:
            continue
        if sum(len(victims[v]["gpus"]) for v in eligible) < need:
            failed_k = min(failed_k, k)
            continue
        chosen, got = [], 0
        for v in sorted(eligible, key=lambda v: -victims[v]["remaining"]):  # stable: lower index first
            if got >= need:
                break
            chosen.append(v)
            got += len(victims[v]["gpus"])
        trial = occ == 0
        for v in chosen:
            trial[victims[v]["gpus"]] = True
        picked = pick_free_gpus(trial, cluster.node, k)
        if picked is None:
            continue
        used = [v for v in chosen if set(victims[v]["gpus"]) & set(picked.tolist())]
        if int(queue.job[i]) == r_job:
            t = math.inf
        elif t < math.inf:
            spans = np.unique(cluster.node[picked]).shape[0] > 1
            end = r / (float(cluster.speed[picked].min()) / (cluster.cross_node_slowdown if spans else 1.0))
            delta = sum(change(0.0, end, t) for g in picked.tolist() if occ[g] == 0)
            delta += sum(change(victims[v]["remaining"], end if g in set(picked.tolist()) else 0.0, t)
                         for v in used for g in victims[v]["gpus"])
            if spare + delta < 0:
                continue
            spare += delta
        for v in used:
            taken[v] = True
            occ[victims[v]["gpus"]] = 0
            stops.append(victims[v]["job"])
        occ[picked] = 1
        starts.append((i, tuple(int(g) for g in np.sort(picked))))
    return starts, stops


def _pause_choice(share_bad, share_sum, bad_0, sum_0, bad_1, sum_1) -> int:
    """-1 share on, or the pause (0, 1) leaving the fewest jobs over the SLO if fewer than sharing on; ties: the
    smaller summed end time, then 0."""
    ways = [(bad_0, sum_0, 0), (bad_1, sum_1, 1)]
    best = min((w for w in ways if w[0] < share_bad), default=None, key=lambda w: (w[0], w[1], w[2]))
    return -1 if best is None else best[2]


def _two_jobs(e_a, w_a, ran_a, s_a, d_a, lim_a, e_b, w_b, ran_b, s_b, d_b, lim_b, limit) -> int:
    """Two jobs sharing only with each other: -1 share on, 0 pause b, 1 pause a."""
    (c_a,), (c_b,) = shared_completion(np.array([e_a]), np.array([e_b]), np.array([s_a]), np.array([s_b]))
    bad = int((ran_a + c_a) / w_a > limit) + int((ran_b + c_b) / w_b > limit)
    if bad == 0:
        return -1
    bad_0 = int((ran_a + e_a) / w_a > limit) + int((ran_b + e_a + e_b + d_b) / w_b > lim_b)
    bad_1 = int((ran_b + e_b) / w_b > limit) + int((ran_a + e_b + e_a + d_a) / w_a > lim_a)
    return _pause_choice(bad, c_a + c_b, bad_0, 2 * e_a + e_b + d_b, bad_1, 2 * e_b + e_a + d_a)


def rescue_pauses(cluster: ClusterState, q: np.ndarray, n: int, placed_at, now: float, slo: float, delay: float,
                  urgency: float, recheck_s: float) -> list[int]:
    """The SLO rescue: among jobs sharing GPUs at slowdowns ``q`` (flattened, ``n`` workloads), the groups with a
    GPU whose pair formed since ``now - recheck_s`` (``placed_at``; None: every shared GPU) are checked, and a
    side is paused where that leaves fewer jobs over the SLO than sharing on. Groups: two single-GPU jobs on a
    GPU (by GPU); two jobs sharing only with each other (from the lower id); a hub whose partners share with it
    alone (its partners paused, or it). A multi-GPU job paused must keep within ``slo - urgency (slo - 1)``."""
    res, occ = cluster.resident, cluster.occupancy()
    ngpus, wl = cluster.job_ngpus, cluster.job_workload
    limit = slo * (1.0 + 1e-9)
    paused_limit = slo - urgency * (slo - 1.0)
    fresh = [occ[g] == 2 and (placed_at is None or placed_at[g] >= now - recheck_s) for g in range(res.shape[0])]
    if not any(fresh):
        return []

    def other(g, x):
        return int(res[g, 1] if res[g, 0] == x else res[g, 0])

    def times(x, sp):
        return cluster.job_remaining[x] / sp, cluster.job_work[x] / sp, now - cluster.job_start[x]

    out, members = [], set()
    for g in range(res.shape[0]):
        if occ[g] != 2:
            continue
        a, b = int(res[g, 0]), int(res[g, 1])
        if ngpus[a] != 1 or ngpus[b] != 1:
            members |= {a, b}
            continue
        if fresh[g]:
            sp = cluster.speed[g]
            way = _two_jobs(*times(a, sp), q[wl[a] * n + wl[b]], delay / sp, limit,
                            *times(b, sp), q[wl[b] * n + wl[a]], delay / sp, limit, limit)
            if way >= 0:
                out.append(b if way == 0 else a)
    on = {x: [g for g in range(res.shape[0]) if x in (res[g, 0], res[g, 1])] for x in members}

    def effective(x):
        worst = min(cluster.speed[g] / (q[wl[x] * n + wl[o]] if (o := other(g, x)) >= 0 else 1.0) for g in on[x])
        slowest = min(cluster.speed[g] for g in on[x])
        spans = len({int(cluster.node[g]) for g in on[x]}) > 1
        return slowest / worst, slowest / (cluster.cross_node_slowdown if spans else 1.0)

    partner = {}
    for x in members:
        found = {other(g, x) for g in on[x]} - {-1}
        partner[x] = found.pop() if len(found) == 1 else (-1 if not found else -2)
    for x in sorted(members):
        if not any(fresh[g] for g in on[x]):
            continue
        if partner[x] >= 0:
            y = partner[x]
            if y < x or partner[y] != x:
                continue
            (s_x, sp_x), (s_y, sp_y) = effective(x), effective(y)
            way = _two_jobs(*times(x, sp_x), s_x, delay / sp_x, limit if ngpus[x] == 1 else paused_limit,
                            *times(y, sp_y), s_y, delay / sp_y, limit if ngpus[y] == 1 else paused_limit, limit)
            if way >= 0:
                out.append(y if way == 0 else x)
            continue
        if not all(other(g, x) < 0 or partner[other(g, x)] == x for g in on[x]):
            continue  # not a hub: some partner shares with others too
        s_j, sp_j = effective(x)
        e_j, w_j, ran_j = times(x, sp_j)
        t = s_j * e_j
        bad, share_sum = int((ran_j + t) / w_j > limit), t
        bad_0, sum_0 = int((ran_j + e_j) / w_j > limit), e_j
        bad_1, sum_1, last, partners = 0, 0.0, 0.0, []
        for g in on[x]:
            p = other(g, x)
            if p < 0 or on[p][0] != g:
                continue  # a multi-GPU partner counts once, on its first GPU
            s_p, sp_p = effective(p)
            e_p, w_p, ran_p = times(p, sp_p)
            end_p = min(s_p * e_p, e_p + t * (1 - 1 / s_p))
            bad += int((ran_p + end_p) / w_p > limit)
            share_sum += end_p
            bad_0 += int((ran_p + e_j + e_p + delay / sp_p) / w_p > (limit if ngpus[p] == 1 else paused_limit))
            sum_0 += e_j + e_p + delay / sp_p
            bad_1 += int((ran_p + e_p) / w_p > limit)
            sum_1 += e_p
            last = max(last, e_p)
            partners.append(p)
        bad_1 += int((ran_j + last + e_j + delay / sp_j) / w_j > paused_limit)
        sum_1 += last + e_j + delay / sp_j
        way = _pause_choice(bad, share_sum, bad_0, sum_0, bad_1, sum_1) if bad else -1
        out += partners if way == 0 else [x] if way == 1 else []
    return out
