"""The pairing solver of ``recommend``: which queued jobs run alone, pair up on a free GPU or join a resident.

Jobs of the same workload are interchangeable for the objective, so the pairing is solved over workload
types: an integer program chooses how many jobs of each type run alone, how many pairs of each two types share
a free GPU, and how many jobs join a resident of each type; concrete jobs (shortest remaining first) and GPUs
are then filled in. The program is exact; its size grows with the number of distinct workloads (not with
the queue), and above ``EXACT_MAX_VARIABLES`` variables a greedy pairing over the best partners of each type
is used instead (the output says which).

The objective is the expected work rate of the cluster in GPU-equivalents: a job alone on ``k`` GPUs does
``k`` GPUs' worth of work, a pair does ``1/s_a + 1/s_b`` (p50 slowdowns). A pair may share only if both p90
slowdowns are within ``max_slowdown``, their memory fits, and sharing beats taking turns
(``1/s_a + 1/s_b > 1``). At most two jobs run on a GPU; multi-GPU jobs run alone, and residents that span
several GPUs are not offered as partners.
"""

from __future__ import annotations

import gc
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sharewise.engine.free_gpus import FreeGpus
from sharewise.engine.table import SlowdownTable
from sharewise.errors import ConfigError
from sharewise.planner import METHODS
from sharewise.planner.jobs import ClusterLayout, normalize_cluster, normalize_queue

EXACT_MAX_VARIABLES = 20_000
# Greedy fallback: partners kept per workload type (the best by gain), so memory stays linear in types.
GREEDY_PARTNERS = 32
MILP_TIME_LIMIT_S = 1.5


@dataclass
class Plan:
    """A recommendation: placements, jobs left waiting, and the expected work rate.

    ``placements`` example::

        [{"gpus": ["0"], "jobs": ["j1", "j7"], "workloads": ["resnet18", "lstm_lm"], "kind": "pair",
          "p50": [1.31, 1.22], "p90": [1.52, 1.40], "gain": 0.58, "rate": 1.58, "why": {...}},
         {"gpus": ["1"], "jobs": ["j2"], "workloads": ["bert"], "kind": "alone", "p50": [1.0], "p90": [1.0],
          "gain": 0.0, "rate": 1.0}]

    ``kind`` is ``alone``, ``pair`` (two queued jobs on a free GPU) or ``join`` (a queued job next to the
    job already on the GPU; ``jobs`` then lists the resident second). ``gain`` is ``1/p50_a + 1/p50_b - 1``:
    the extra work per second over running one of the two alone; ``rate`` the work rate the placement adds.
    Work rates are in GPU-equivalents (one job alone on one GPU does 1.0), not steps/s: ``work_rate`` is
    the expected work rate of all GPUs, ``exclusive_work_rate`` that of placing queued jobs alone only.
    """

    placements: list[dict]
    waiting: list[str]
    method: str
    method_note: str
    work_rate: float
    exclusive_work_rate: float
    solve_s: float
    notes: list[str] = field(default_factory=list)

    @property
    def gain_pct(self) -> float:
        """Percent more work per second than running the queued jobs alone (0.0 on an empty cluster)."""
        if self.exclusive_work_rate <= 0:
            return 0.0
        return 100.0 * (self.work_rate / self.exclusive_work_rate - 1.0)

    def to_json(self) -> dict:
        """Return the ``--json`` object: ``{"method", "method_note", "placements", "waiting", ...}``."""
        return {
            "method": self.method,
            "method_note": self.method_note,
            "placements": self.placements,
            "waiting": self.waiting,
            "work_rate": round(self.work_rate, 6),
            "exclusive_work_rate": round(self.exclusive_work_rate, 6),
            "work_rate_gain": round(self.work_rate - self.exclusive_work_rate, 6),
            "work_rate_gain_pct": round(self.gain_pct, 3),
            "solve_s": round(self.solve_s, 4),
            "notes": self.notes,
        }


@dataclass
class _Problem:
    """The pairing problem over workload types (indices into ``t1``, ``multi``, ``tr``)."""

    t1: np.ndarray  # workload ids of 1-GPU queued types
    c1: np.ndarray  # jobs of each
    multi: list[tuple[int, int]]  # (workload id, GPUs) of multi-GPU queued types
    cm: np.ndarray
    tr: np.ndarray  # workload ids of offered residents
    dr: np.ndarray  # GPUs hosting each
    pair_a: np.ndarray  # pair edges between 1-GPU types (a <= b) and their gains
    pair_b: np.ndarray
    pair_v: np.ndarray
    join_a: np.ndarray  # join edges: 1-GPU type next to resident type, and gains
    join_r: np.ndarray
    join_v: np.ndarray
    n_free: int

    @property
    def n_vars(self) -> int:
        return self.t1.shape[0] + len(self.multi) + self.pair_a.shape[0] + self.join_a.shape[0]


# ---- the solver --------------------------------------------------------------------------------------
def plan_pairs(
    queue: pd.DataFrame,
    table: SlowdownTable,
    *,
    gpus: int | None = None,
    cluster: pd.DataFrame | None = None,
    max_slowdown: float = 2.0,
    method: str = "auto",
    exact_max_variables: int = EXACT_MAX_VARIABLES,
) -> Plan:
    """Choose which queued jobs run alone, which pair up on a free GPU and which join a resident job.

    Parameters
    ----------
    queue
        ``job_id, workload`` and optionally ``gpus`` (default 1) and ``remaining_s`` (shorter jobs are placed
        first among interchangeable ones); workloads must be in ``table``.
    table
        Predicted slowdowns; ``allowed`` marks pairs that may share at all (memory fit, not ``oom``).
    gpus
        Number of free GPUs (ids ``"0"``, ``"1"``, ...); or give ``cluster``.
    cluster
        One row per (GPU, resident job): ``gpu`` and optionally ``node``, ``job_id``, ``workload`` (empty
        for a free GPU; a GPU with two residents is full; a job listed on several GPUs spans them).
    max_slowdown
        Both jobs' p90 slowdown must be at most this for them to share.
    method
        ``auto`` (exact up to ``exact_max_variables`` variables, greedy above), ``exact`` or ``greedy``.

    Returns
    -------
    Plan
        Placements, waiting jobs, the method used, and the expected work rate (see ``Plan``).
    """
    if method not in METHODS:
        raise ConfigError(f"method must be one of {list(METHODS)}, got {method!r}")
    if not (math.isfinite(max_slowdown) and max_slowdown >= 1.0):
        raise ConfigError(f"--max-slowdown must be a number >= 1.0, got {max_slowdown}")
    t0 = time.perf_counter()
    jobs = normalize_queue(queue, table)
    layout = normalize_cluster(gpus, cluster, table)
    if any(layout.residents):
        free_gpus = [g for g, r in enumerate(layout.residents) if not r]
        # Offered residents: GPUs holding exactly one job that runs on that GPU only.
        host_gpus = [g for g, r in enumerate(layout.residents) if len(r) == 1 and r[0][2] == 1]
    else:  # --gpus N: every GPU free
        free_gpus, host_gpus = list(range(len(layout.residents))), []
    problem = _problem(jobs, layout, table, host_gpus, len(free_gpus), max_slowdown)
    n_vars = problem.n_vars
    use_exact = method == "exact" or (method == "auto" and n_vars <= exact_max_variables)
    counts = _solve_exact(problem) if use_exact else None
    if counts is not None:
        chosen = "exact"
        note = (
            f"exact: integer program over {problem.t1.shape[0] + len(problem.multi)} queued workload types "
            f"and {problem.tr.shape[0]} resident types ({n_vars} variables)"
        )
    else:
        counts = _solve_greedy(problem)
        chosen = "greedy"
        if use_exact:
            note = (
                "approximate: the integer program found no optimum within its time limit; greedy pairing used"
            )
        elif method == "greedy":
            note = "approximate: greedy pairing, as asked"
        else:
            note = (
                f"approximate: {n_vars} variables exceed the exact limit of {exact_max_variables}; greedy "
                f"pairing over the best {GREEDY_PARTNERS} partners of each workload"
            )
    with _collector_paused():
        placements, waiting = _assign(problem, counts, jobs, layout, table, free_gpus, host_gpus)
    base = _resident_rate(layout, table)
    return Plan(
        placements=placements,
        waiting=waiting,
        method=chosen,
        method_note=note,
        work_rate=base + sum(p["rate"] for p in placements),
        exclusive_work_rate=base + _exclusive_rate(jobs["gpus"].to_numpy(), len(free_gpus)),
        solve_s=time.perf_counter() - t0,
    )


def _problem(jobs, layout, table, host_gpus, n_free, max_slowdown) -> _Problem:
    wl = jobs["wid"].to_numpy()
    k = jobs["gpus"].to_numpy()
    one = k == 1
    t1, c1 = np.unique(wl[one], return_counts=True)
    multi_frame = pd.DataFrame({"w": wl[~one], "k": k[~one]}).value_counts().sort_index()
    multi = [(int(w), int(g)) for w, g in multi_frame.index]
    cm = multi_frame.to_numpy(dtype=np.int64)
    host_wl = np.array([layout.residents[g][0][1] for g in host_gpus], dtype=np.int64)
    tr, dr = np.unique(host_wl, return_counts=True)
    pair_a, pair_b, pair_v = _edges(table, t1, t1, max_slowdown, upper=True)
    join_a, join_r, join_v = _edges(table, t1, tr, max_slowdown, upper=False)
    return _Problem(t1, c1, multi, cm, tr, dr, pair_a, pair_b, pair_v, join_a, join_r, join_v, n_free)


def _edges(
    table: SlowdownTable, left: np.ndarray, right: np.ndarray, max_slowdown: float, upper: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Allowed (left type, right type) index pairs and their gain ``1/s_a + 1/s_b - 1`` (positive only)."""
    if left.shape[0] == 0 or right.shape[0] == 0:
        e = np.empty(0, dtype=np.int64)
        return e, e, np.empty(0)
    A, B = left[:, None], right[None, :]
    ok = table.allowed[A, B] & (table.p90[A, B] <= max_slowdown) & (table.p90[B, A] <= max_slowdown)
    with np.errstate(invalid="ignore", divide="ignore"):
        gain = 1.0 / table.p50[A, B] + 1.0 / table.p50[B, A] - 1.0
    ok &= np.isfinite(gain) & (gain > 0)
    if upper:
        ok &= np.arange(left.shape[0])[:, None] <= np.arange(right.shape[0])[None, :]
    i, j = np.nonzero(ok)
    return i, j, gain[i, j]


def _solve_exact(p: _Problem) -> dict | None:
    """Maximize the work rate with ``scipy.optimize.milp``; return the counts, or None without an optimum."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    n1, nm, npair, njoin = p.t1.shape[0], len(p.multi), p.pair_a.shape[0], p.join_a.shape[0]
    n = n1 + nm + npair + njoin
    if n == 0:
        return _counts(np.zeros(0), n1, nm, npair)
    mk = np.array([g for _, g in p.multi], dtype=float)
    # Work rate in GPU-equivalents: alone on k GPUs = k, a pair on one free GPU = 1 + gain, a join = gain.
    value = np.concatenate([np.ones(n1), mk, 1.0 + p.pair_v, p.join_v])
    self_pair = p.pair_a == p.pair_b
    ub = np.concatenate(
        [
            p.c1,
            p.cm,
            np.where(self_pair, p.c1[p.pair_a] // 2, np.minimum(p.c1[p.pair_a], p.c1[p.pair_b])),
            np.minimum(p.c1[p.join_a], p.dr[p.join_r]),
        ]
    ).astype(float)
    o_pair, o_join = n1 + nm, n1 + nm + npair
    pair_cols = o_pair + np.arange(npair)
    join_cols = o_join + np.arange(njoin)
    other = ~self_pair
    n_res = p.tr.shape[0]
    free_row = n1 + n_res
    rows = np.concatenate(
        [
            np.arange(n1),
            p.pair_a,
            p.pair_b[other],
            p.join_a,  # each 1-GPU type: used <= count
            n1 + p.join_r,  # each resident type: joins <= hosts
            np.full(n1 + nm + npair, free_row),  # free GPUs: k * alone + pairs <= free
        ]
    )
    cols = np.concatenate(
        [
            np.arange(n1),
            pair_cols,
            pair_cols[other],
            join_cols,
            join_cols,
            np.arange(n1 + nm),
            pair_cols,
        ]
    )
    vals = np.concatenate(
        [
            np.ones(n1),
            np.where(self_pair, 2.0, 1.0),
            np.ones(int(other.sum())),
            np.ones(njoin),
            np.ones(njoin),
            np.ones(n1),
            mk,
            np.ones(npair),
        ]
    )
    upper = np.concatenate([p.c1, p.dr, [p.n_free]]).astype(float)
    A = coo_matrix((vals, (rows, cols)), shape=(free_row + 1, n)).tocsr()
    res = milp(
        -value,
        integrality=np.ones(n),
        bounds=Bounds(np.zeros(n), ub),
        constraints=LinearConstraint(A, -np.inf, upper),
        options={"time_limit": MILP_TIME_LIMIT_S},
    )
    if res.status != 0 or res.x is None:
        return None
    return _counts(np.rint(res.x).astype(np.int64), n1, nm, npair)


def _counts(x: np.ndarray, n1: int, nm: int, npair: int) -> dict:
    x = np.asarray(x, dtype=np.int64)
    o_pair, o_join = n1 + nm, n1 + nm + npair
    return {"alone1": x[:n1], "alonem": x[n1:o_pair], "pairs": x[o_pair:o_join], "joins": x[o_join:]}


def _solve_greedy(p: _Problem) -> dict:
    """Greedy counts: pair the jobs that cannot run alone by descending gain, then fill free GPUs alone."""
    left1 = p.c1.astype(np.int64).copy()
    hosts = p.dr.astype(np.int64).copy()
    pairs = np.zeros(p.pair_a.shape[0], dtype=np.int64)
    joins = np.zeros(p.join_a.shape[0], dtype=np.int64)
    demand = int(p.c1.sum()) + int(sum(g * c for (_, g), c in zip(p.multi, p.cm, strict=True)))
    excess = max(0, demand - p.n_free)  # jobs (in GPU units) that cannot all run alone
    kind = np.concatenate([np.zeros(p.pair_a.shape[0], int), np.ones(p.join_a.shape[0], int)])
    idx = np.concatenate([np.arange(p.pair_a.shape[0]), np.arange(p.join_a.shape[0])])
    owner = np.concatenate([p.pair_a, p.join_a])
    gain = np.concatenate([p.pair_v, p.join_v])
    # Keep each type's best partners only, so the candidate list stays linear in the number of types.
    order = np.lexsort((-gain, owner))
    starts = np.flatnonzero(np.r_[True, owner[order][1:] != owner[order][:-1]])
    rank = np.arange(order.shape[0]) - np.repeat(starts, np.diff(np.r_[starts, order.shape[0]]))
    cand = order[rank < GREEDY_PARTNERS]
    cand = cand[np.argsort(-gain[cand], kind="stable")]
    used_free = 0
    for e in cand.tolist():
        if excess <= 0:
            break
        i = int(idx[e])
        if kind[e] == 0:
            a, b = int(p.pair_a[i]), int(p.pair_b[i])
            n = left1[a] // 2 if a == b else min(left1[a], left1[b])
            n = min(int(n), excess, p.n_free - used_free)
            if n <= 0:
                continue
            pairs[i] += n
            left1[a] -= n
            left1[b] -= n
            used_free += n
        else:
            a, r = int(p.join_a[i]), int(p.join_r[i])
            n = min(int(left1[a]), int(hosts[r]), excess)
            if n <= 0:
                continue
            joins[i] += n
            left1[a] -= n
            hosts[r] -= n
        excess -= n
    room = p.n_free - used_free
    alonem = np.zeros(len(p.multi), dtype=np.int64)
    for m, ((_, g), c) in enumerate(zip(p.multi, p.cm, strict=True)):
        alonem[m] = min(int(c), room // g)
        room -= int(alonem[m]) * g
    alone1 = np.zeros(p.t1.shape[0], dtype=np.int64)
    for t in range(p.t1.shape[0]):
        alone1[t] = min(int(left1[t]), room)
        room -= int(alone1[t])
    return {"alone1": alone1, "alonem": alonem, "pairs": pairs, "joins": joins}


@contextmanager
def _collector_paused():
    """Pause Python's cyclic garbage collector: the placements of 100,000 jobs are some 300,000 new dicts and
    lists (none in a reference cycle), whose allocation otherwise sets off full collections over every object
    alive, 60% of the assignment's time on 50,000 GPUs. Afterwards they move to the oldest generation
    unexamined (``freeze`` then ``unfreeze``): switching the collector back on would otherwise examine them all
    at the next allocation, a third of the assignment's time again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        if enabled:
            gc.enable()


def _assign(p: _Problem, counts: dict, jobs, layout: ClusterLayout, table, free_gpus, host_gpus):
    """Turn type counts into placements: within a type, shortest remaining (then queue order) first.

    Linear in jobs and GPUs: each type's jobs and each resident type's hosts are consumed through a cursor,
    and free GPUs come from ``FreeGpus`` (``pick_free_gpus``'s rule without a scan of every GPU per job).
    The jobs of each type are found with numpy (a stable sort by remaining time puts unknown times last and
    keeps queue order among ties), and each placement is one dict literal: Python's work is one dict and its
    lists per placement.
    """
    by_type = _jobs_by_type(jobs)
    cursor = dict.fromkeys(by_type, 0)
    ids = jobs["job_id"].tolist()
    free = np.zeros(len(layout.gpu_ids), dtype=bool)
    free[free_gpus] = True
    gpus_free = FreeGpus(free, layout.node)
    hosts_of: dict[int, list[int]] = {}
    for g in host_gpus:
        hosts_of.setdefault(layout.residents[g][0][1], []).append(g)
    next_host = dict.fromkeys(hosts_of, 0)
    out: list[dict] = []

    def take(w: int, g: int, n: int) -> list[int]:
        at = cursor[(w, g)]
        got = by_type[(w, g)][at : at + n]
        cursor[(w, g)] = at + len(got)
        return got

    gid = layout.gpu_ids
    names = table.workloads
    for m, (w, g) in enumerate(p.multi):  # multi-GPU jobs first: they need whole blocks of GPUs
        for pos in take(w, g, int(counts["alonem"][m])):
            out.append(_alone([gid[x] for x in gpus_free.take(g)], ids[pos], names[w], g))
    # Then one GPU per pair and per lone job, in this order: handed out in one go.
    singles = [gid[x] for x in gpus_free.take_ones(int(counts["pairs"].sum()) + int(counts["alone1"].sum()))]
    used = 0
    for e in np.argsort(-p.pair_v, kind="stable").tolist():  # best pairs first in the output
        a, b = int(p.t1[p.pair_a[e]]), int(p.t1[p.pair_b[e]])
        n = int(counts["pairs"][e])
        if n:
            wa, wb, p50, p90, gain, rate = _shared_fields("pair", a, b, table)
            if a != b:
                firsts, seconds = take(a, 1, n), take(b, 1, n)
            else:
                both = take(a, 1, 2 * n)
                firsts, seconds = both[0::2], both[1::2]
            for ja, jb, gpu in zip(firsts, seconds, singles[used : used + len(firsts)], strict=True):
                out.append({"gpus": [gpu], "jobs": [ids[ja], ids[jb]], "workloads": [wa, wb], "kind": "pair",
                            "p50": [*p50], "p90": [*p90], "gain": gain, "rate": rate})  # fmt: skip
            used += len(firsts)
    for e in np.argsort(-p.join_v, kind="stable").tolist():
        a, r = int(p.t1[p.join_a[e]]), int(p.tr[p.join_r[e]])
        n = int(counts["joins"][e])
        if n:
            wa, wb, p50, p90, gain, rate = _shared_fields("join", a, r, table)
            for ja in take(a, 1, n):
                at = next_host[r]
                next_host[r] = at + 1
                g = hosts_of[r][at]
                out.append({"gpus": [gid[g]], "jobs": [ids[ja], layout.residents[g][0][0]], "workloads": [wa, wb],
                            "kind": "join", "p50": [*p50], "p90": [*p90], "gain": gain, "rate": rate})  # fmt: skip
    for t, w in enumerate(p.t1.tolist()):
        lone = take(int(w), 1, int(counts["alone1"][t]))
        name = names[w]
        for pos, gpu in zip(lone, singles[used : used + len(lone)], strict=True):
            out.append({"gpus": [gpu], "jobs": [ids[pos]], "workloads": [name], "kind": "alone", "p50": [1.0],
                        "p90": [1.0], "gain": 0.0, "rate": 1.0})  # fmt: skip
        used += len(lone)
    placed = np.zeros(len(ids), dtype=bool)
    for key, at in cursor.items():
        placed[by_type[key][:at]] = True
    waiting = [ids[i] for i in np.flatnonzero(~placed).tolist()]
    return out, waiting


def _jobs_by_type(jobs) -> dict[tuple[int, int], list[int]]:
    """Queue positions of the jobs of each ``(workload id, GPUs)`` type, shortest remaining time first (unknown
    last), then in queue order: ``{(3, 1): [7, 0, 12], (5, 2): [4]}``."""
    order = np.argsort(jobs["remaining_s"].to_numpy(dtype=float), kind="stable")  # NaN sorts last
    wid = jobs["wid"].to_numpy(dtype=np.int64)[order]
    k = jobs["gpus"].to_numpy(dtype=np.int64)[order]
    if not order.shape[0]:
        return {}
    key = wid * (int(k.max()) + 1) + k
    grouped = np.argsort(key, kind="stable")
    key, wid, k, order = key[grouped], wid[grouped], k[grouped], order[grouped]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    ends = np.r_[starts[1:], key.shape[0]]
    positions = order.tolist()
    return {
        (int(wid[s]), int(k[s])): positions[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)
    }


def _alone(gpus: list[str], job: str, workload: str, k: int) -> dict:
    return {"gpus": gpus, "jobs": [job], "workloads": [workload], "kind": "alone", "p50": [1.0], "p90": [1.0],
            "gain": 0.0, "rate": float(k)}


def _shared_fields(kind: str, a: int, b: int, table: SlowdownTable) -> tuple:
    """The fields of a shared placement of types ``a`` and ``b`` other than its GPUs and jobs, computed once per
    pair of types: ``(workload a, workload b, (p50 a, p50 b), (p90 a, p90 b), gain, rate)``, rounded as printed."""
    p50 = [float(table.p50[a, b]), float(table.p50[b, a])]
    gain = 1.0 / p50[0] + 1.0 / p50[1] - 1.0
    p50r = (round(p50[0], 4), round(p50[1], 4))
    p90r = (round(float(table.p90[a, b]), 4), round(float(table.p90[b, a]), 4))
    # Work rate this placement adds: a pair fills a free GPU, a join adds to a resident already counted.
    rate = 1.0 + gain if kind == "pair" else gain
    return table.workloads[a], table.workloads[b], p50r, p90r, round(gain, 4), rate


def _resident_rate(layout: ClusterLayout, table: SlowdownTable) -> float:
    rate = 0.0
    for res in filter(None, layout.residents):
        if len(res) == 1:
            rate += 1.0
        elif len(res) == 2:
            a, b = res[0][1], res[1][1]
            s_ab, s_ba = table.p50[a, b], table.p50[b, a]
            rate += 1.0 / s_ab + 1.0 / s_ba if np.isfinite(s_ab) and np.isfinite(s_ba) else 1.0
    return rate


def _exclusive_rate(k: np.ndarray, n_free: int) -> float:
    """Work rate of placing queued jobs alone only, in queue order, skipping those that do not fit."""
    k = np.asarray(k, dtype=np.int64)
    fit = int(np.searchsorted(np.cumsum(k), n_free, side="right"))  # the longest prefix that fits as a whole
    used = int(k[:fit].sum())
    for g in k[fit:].tolist():
        if used == n_free:  # full: every job asks for at least one GPU
            break
        if used + g <= n_free:
            used += g
    return float(used)


