"""``sharewise recommend``: which queued jobs should share a GPU, as a maximum-weight pairing.

Jobs of the same workload are interchangeable for the objective, so the pairing is solved over workload
types: an integer program chooses how many jobs of each type run alone, how many pairs of each two types share
a free GPU, and how many jobs join a resident of each type; concrete jobs (shortest remaining first) and GPUs
are then filled in. The program is exact; its size grows with the number of distinct workloads (not with
the queue), and above ``EXACT_MAX_VARIABLES`` variables a greedy pairing over the best partners of each type
is used instead (the output says which).

The objective is the expected throughput of the cluster: a job alone on ``k`` GPUs does ``k`` GPUs' worth of
work, a pair does ``1/s_a + 1/s_b`` (p50 slowdowns). A pair may share only if both p90 slowdowns are within
``max_slowdown``, their memory fits, and sharing beats taking turns (``1/s_a + 1/s_b > 1``). At most two jobs
run on a GPU; multi-GPU jobs run alone, and residents that span several GPUs are not offered as partners.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.errors import ConfigError, DatasetError, TraceError
from sharewise.policy.base import pick_free_gpus
from sharewise.policy.table import SlowdownTable

EXACT_MAX_VARIABLES = 20_000
# Greedy fallback: partners kept per workload type (the best by gain), so memory stays linear in types.
GREEDY_PARTNERS = 32
MILP_TIME_LIMIT_S = 1.5
QUEUE_COLUMNS = ("job_id", "workload")
CLUSTER_COLUMNS = ("gpu",)
# Memory a job needs, by preference: what the caching allocator holds, what tensors used, RSS growth (CPU).
MEMORY_COLUMNS = ("f_mem_peak_reserved_bytes", "f_mem_peak_allocated_bytes", "f_mem_rss_growth_bytes")


@dataclass
class Plan:
    """A recommendation: placements, jobs left waiting, and the expected throughput.

    ``placements`` example::

        [{"gpus": ["0"], "jobs": ["j1", "j7"], "workloads": ["resnet18", "lstm_lm"], "kind": "pair",
          "p50": [1.31, 1.22], "p90": [1.52, 1.40], "gain": 0.58, "rate": 1.58, "why": {...}},
         {"gpus": ["1"], "jobs": ["j2"], "workloads": ["bert"], "kind": "alone", "p50": [1.0], "p90": [1.0],
          "gain": 0.0, "rate": 1.0}]

    ``kind`` is ``alone``, ``pair`` (two queued jobs on a free GPU) or ``join`` (a queued job next to the
    job already on the GPU; ``jobs`` then lists the resident second). ``gain`` is ``1/p50_a + 1/p50_b - 1``:
    the extra work per second over running one of the two alone; ``rate`` the work rate the placement adds, in
    GPU-equivalents. ``throughput`` is the expected work rate of all GPUs; ``exclusive_throughput`` that of
    placing queued jobs alone only.
    """

    placements: list[dict]
    waiting: list[str]
    method: str
    method_note: str
    throughput: float
    exclusive_throughput: float
    solve_s: float
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        """Return the ``--json`` object: ``{"method", "method_note", "placements", "waiting", ...}``."""
        return {
            "method": self.method,
            "method_note": self.method_note,
            "placements": self.placements,
            "waiting": self.waiting,
            "throughput": round(self.throughput, 6),
            "exclusive_throughput": round(self.exclusive_throughput, 6),
            "throughput_gain": round(self.throughput - self.exclusive_throughput, 6),
            "throughput_gain_pct": round(100.0 * (self.throughput / self.exclusive_throughput - 1.0), 3)
            if self.exclusive_throughput > 0
            else 0.0,
            "solve_s": round(self.solve_s, 4),
            "notes": self.notes,
        }


@dataclass
class _Cluster:
    gpu_ids: list[str]
    node: np.ndarray
    residents: list[list[tuple[str, int, int]]]  # per GPU: (job id, workload id, GPUs of that job)


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
        Placements, waiting jobs, the method used, and expected throughput (see ``Plan``).
    """
    if method not in ("auto", "exact", "greedy"):
        raise ConfigError(f"method must be 'auto', 'exact' or 'greedy', got {method!r}")
    if not (math.isfinite(max_slowdown) and max_slowdown >= 1.0):
        raise ConfigError(f"--max-slowdown must be a number >= 1.0, got {max_slowdown}")
    t0 = time.perf_counter()
    jobs = _normalize_queue(queue, table)
    layout = _normalize_cluster(gpus, cluster, table)
    free_gpus = [g for g, r in enumerate(layout.residents) if not r]
    # Offered residents: GPUs holding exactly one job that runs on that GPU only.
    host_gpus = [g for g, r in enumerate(layout.residents) if len(r) == 1 and r[0][2] == 1]
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
    placements, waiting = _assign(problem, counts, jobs, layout, table, free_gpus, host_gpus)
    base = _resident_rate(layout, table)
    return Plan(
        placements=placements,
        waiting=waiting,
        method=chosen,
        method_note=note,
        throughput=base + sum(p["rate"] for p in placements),
        exclusive_throughput=base + _exclusive_rate(jobs["gpus"].to_numpy(), len(free_gpus)),
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
    """Maximize throughput with ``scipy.optimize.milp``; return the counts, or None without an optimum."""
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


def _assign(p: _Problem, counts: dict, jobs, layout: _Cluster, table, free_gpus, host_gpus):
    """Turn type counts into placements: within a type, shortest remaining (then queue order) first."""
    order = jobs.sort_values(["remaining_s", "pos"], na_position="last", kind="stable")
    by_type: dict[tuple[int, int], list[int]] = {}
    for pos, w, g in zip(order["pos"].tolist(), order["wid"].tolist(), order["gpus"].tolist(), strict=True):
        by_type.setdefault((int(w), int(g)), []).append(pos)
    ids = jobs["job_id"].tolist()
    free = np.zeros(len(layout.gpu_ids), dtype=bool)
    free[free_gpus] = True
    hosts_of: dict[int, list[int]] = {}
    for g in host_gpus:
        hosts_of.setdefault(layout.residents[g][0][1], []).append(g)
    placed: set[int] = set()
    out: list[dict] = []

    def take(w: int, g: int, n: int) -> list[int]:
        got = by_type[(w, g)][:n]
        by_type[(w, g)] = by_type[(w, g)][n:]
        placed.update(got)
        return got

    def free_block(n: int) -> list[int]:
        chosen = pick_free_gpus(free, layout.node, n)
        free[chosen] = False
        return [int(x) for x in chosen]

    gid = layout.gpu_ids
    for m, (w, g) in enumerate(p.multi):  # multi-GPU jobs first: they need whole blocks of GPUs
        for pos in take(w, g, int(counts["alonem"][m])):
            out.append(_alone([gid[x] for x in free_block(g)], ids[pos], table.workloads[w], g))
    for e in np.argsort(-p.pair_v, kind="stable").tolist():  # best pairs first in the output
        a, b = int(p.t1[p.pair_a[e]]), int(p.t1[p.pair_b[e]])
        for _ in range(int(counts["pairs"][e])):
            ja, jb = take(a, 1, 1)[0], take(b, 1, 1)[0]
            out.append(_shared("pair", [gid[x] for x in free_block(1)], [ids[ja], ids[jb]], a, b, table))
    for e in np.argsort(-p.join_v, kind="stable").tolist():
        a, r = int(p.t1[p.join_a[e]]), int(p.tr[p.join_r[e]])
        for _ in range(int(counts["joins"][e])):
            ja = take(a, 1, 1)[0]
            g = hosts_of[r].pop(0)
            out.append(_shared("join", [gid[g]], [ids[ja], layout.residents[g][0][0]], a, r, table))
    for t, w in enumerate(p.t1.tolist()):
        for pos in take(int(w), 1, int(counts["alone1"][t])):
            out.append(_alone([gid[x] for x in free_block(1)], ids[pos], table.workloads[w], 1))
    waiting = [ids[i] for i in range(len(ids)) if i not in placed]
    return out, waiting


def _alone(gpus: list[str], job: str, workload: str, k: int) -> dict:
    return {
        "gpus": gpus,
        "jobs": [job],
        "workloads": [workload],
        "kind": "alone",
        "p50": [1.0],
        "p90": [1.0],
        "gain": 0.0,
        "rate": float(k),
    }


def _shared(kind: str, gpus: list[str], jobs: list[str], a: int, b: int, table: SlowdownTable) -> dict:
    p50 = [float(table.p50[a, b]), float(table.p50[b, a])]
    gain = 1.0 / p50[0] + 1.0 / p50[1] - 1.0
    return {
        "gpus": gpus,
        "jobs": jobs,
        "workloads": [table.workloads[a], table.workloads[b]],
        "kind": kind,
        "p50": [round(x, 4) for x in p50],
        "p90": [round(float(table.p90[a, b]), 4), round(float(table.p90[b, a]), 4)],
        "gain": round(gain, 4),
        # Work rate this placement adds: a pair fills a free GPU, a join adds to a resident already counted.
        "rate": 1.0 + gain if kind == "pair" else gain,
    }


def _resident_rate(layout: _Cluster, table: SlowdownTable) -> float:
    rate = 0.0
    for res in layout.residents:
        if len(res) == 1:
            rate += 1.0
        elif len(res) == 2:
            a, b = res[0][1], res[1][1]
            s_ab, s_ba = table.p50[a, b], table.p50[b, a]
            rate += 1.0 / s_ab + 1.0 / s_ba if np.isfinite(s_ab) and np.isfinite(s_ba) else 1.0
    return rate


def _exclusive_rate(k: np.ndarray, n_free: int) -> float:
    """Work rate of placing queued jobs alone only, in queue order, skipping those that do not fit."""
    used = 0
    for g in k.tolist():
        if used + g <= n_free:
            used += g
    return float(used)


# ---- inputs ------------------------------------------------------------------------------------------
def _normalize_queue(queue: pd.DataFrame, table: SlowdownTable) -> pd.DataFrame:
    missing = [c for c in QUEUE_COLUMNS if c not in queue.columns]
    if missing:
        raise TraceError(
            f"queue: missing column(s) {missing}; expected {list(QUEUE_COLUMNS)} and optionally gpus, "
            "remaining_s"
        )
    jobs = pd.DataFrame(
        {
            "job_id": queue["job_id"].astype(str).str.strip().to_numpy(dtype=object),
            "workload": queue["workload"].astype(str).str.strip().to_numpy(dtype=object),
        }
    )
    gpus = (
        pd.to_numeric(queue["gpus"], errors="coerce")
        if "gpus" in queue.columns
        else pd.Series(1, index=queue.index)
    )
    bad = gpus.isna().to_numpy() | (gpus.to_numpy(dtype=float) < 1) | (gpus.to_numpy(dtype=float) % 1 != 0)
    if bad.any():
        row = int(np.argmax(bad))
        raise TraceError(
            f"queue line {row + 2}: column 'gpus' must be a whole number >= 1, got "
            f"{queue['gpus'].iloc[row]!r}"
        )
    jobs["gpus"] = gpus.to_numpy(dtype=float).astype(np.int64)
    if "remaining_s" in queue.columns:
        rem = pd.to_numeric(queue["remaining_s"], errors="coerce").to_numpy(dtype=float)
        given = (
            queue["remaining_s"].astype(str).str.strip().ne("").to_numpy()
            & queue["remaining_s"].notna().to_numpy()
        )
        bad = given & (~np.isfinite(rem) | (rem < 0))
        if bad.any():
            row = int(np.argmax(bad))
            raise TraceError(
                f"queue line {row + 2}: column 'remaining_s' must be a number >= 0 (or empty), got "
                f"{queue['remaining_s'].iloc[row]!r}"
            )
        jobs["remaining_s"] = np.where(given, rem, np.nan)
    else:
        jobs["remaining_s"] = np.nan
    dup = jobs["job_id"].duplicated()
    if dup.any():
        row = int(np.argmax(dup.to_numpy()))
        raise TraceError(f"queue line {row + 2}: job_id {jobs['job_id'].iloc[row]!r} appears twice")
    jobs["wid"] = table.ids(jobs["workload"], what="queued workload")
    jobs["pos"] = np.arange(len(jobs))
    return jobs


def _normalize_cluster(gpus: int | None, cluster: pd.DataFrame | None, table: SlowdownTable) -> _Cluster:
    if (gpus is None) == (cluster is None):
        raise ConfigError("give the GPUs either as a count (--gpus N) or as a cluster file (--cluster FILE)")
    if cluster is None:
        if gpus < 0:
            raise ConfigError(f"--gpus must be >= 0, got {gpus}")
        return _Cluster(
            [str(g) for g in range(gpus)], np.zeros(gpus, dtype=np.int64), [[] for _ in range(gpus)]
        )
    if "gpu" not in cluster.columns:
        raise TraceError(
            f"cluster: missing column 'gpu'; expected {list(CLUSTER_COLUMNS)} and optionally node, job_id, "
            "workload"
        )
    text = {
        c: cluster[c].fillna("").astype(str).str.strip().tolist()
        if c in cluster.columns
        else [""] * len(cluster)
        for c in ("gpu", "node", "job_id", "workload")
    }
    gpu_ids: list[str] = []
    nodes: list[str] = []
    residents: dict[str, list[tuple[str, str, int]]] = {}
    for i, g in enumerate(text["gpu"]):
        if not g:
            raise TraceError(f"cluster line {i + 2}: column 'gpu' is empty")
        if g not in residents:
            gpu_ids.append(g)
            nodes.append(text["node"][i])
            residents[g] = []
        job, w = text["job_id"][i], text["workload"][i]
        if bool(job) != bool(w):
            raise TraceError(
                f"cluster line {i + 2}: give both job_id and workload of a resident job, or neither"
            )
        if job:
            residents[g].append((job, w, i + 2))
            if len(residents[g]) > 2:
                raise TraceError(
                    f"cluster line {i + 2}: GPU {g!r} lists a third job; at most two jobs share a GPU"
                )
    span: dict[str, int] = {}
    for res in residents.values():
        for job, _, _ in res:
            span[job] = span.get(job, 0) + 1
    all_w = [w for res in residents.values() for _, w, _ in res]
    ids = dict(zip(all_w, table.ids(all_w, what="resident workload").tolist(), strict=True)) if all_w else {}
    node_codes = pd.factorize(pd.Series(nodes))[0].astype(np.int64)
    return _Cluster(
        gpu_ids,
        node_codes,
        [[(job, ids[w], span[job]) for job, w, _ in residents[g]] for g in gpu_ids],
    )


# ---- the whole command -------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecommendConfig:
    """Inputs of ``sharewise recommend``: a saved model, the dataset with the jobs' solo profiles, the queue,
    and the GPUs (``gpus`` free GPUs, or a ``cluster`` CSV of GPUs and their resident jobs)."""

    model: str
    data: str
    queue: str
    gpus: int | None = None
    cluster: str | None = None
    max_slowdown: float = 2.0
    device_name: str | None = None
    method: str = "auto"
    top: int = 3
    max_explained: int = 20


def recommend(config: RecommendConfig) -> Plan:
    """Run ``sharewise recommend``: predict every pair of the queued and resident workloads, then plan.

    Pairs that cannot fit in memory (combined ``f_mem_*`` above ``f_device_mem_bytes``) or that the dataset
    measured as ``oom`` may not share. Each shared placement gets a ``why``: the top feature contributions
    to both predicted slowdowns (``model.explain``), for up to ``max_explained`` distinct workload pairs.
    """
    from sharewise.datasets.store import open_dataset
    from sharewise.predictor import SlowdownRegressor, predict_pairs
    from sharewise.predictor.api import explain_pair

    model = SlowdownRegressor.load(config.model)
    ds = open_dataset(config.data, profiles=True)
    profiles = ds.read_profiles()
    queue = read_table_csv(config.queue, "queue", QUEUE_COLUMNS)
    cluster = read_table_csv(config.cluster, "cluster", CLUSTER_COLUMNS) if config.cluster else None
    needed = sorted(
        set(queue["workload"].astype(str).str.strip())
        | (
            set(cluster["workload"].fillna("").astype(str).str.strip()) - {""}
            if cluster is not None and "workload" in cluster.columns
            else set()
        )
    )
    device = _device(profiles, needed, config.device_name)
    prof = profiles[profiles["device_name"].astype(str) == device]
    missing = sorted(set(needed) - set(prof["workload"].astype(str)))
    if missing:
        raise DatasetError(
            f"no profile on device {device!r} of workload(s) {missing[:10]}; profile them first "
            f"('sharewise profile WORKLOAD --out {config.data}')"
        )
    i, j = np.triu_indices(len(needed))
    names = np.array(needed, dtype=object)
    candidates = pd.DataFrame({"workload_a": names[i], "workload_b": names[j], "device_name": device})
    predictions = predict_pairs(model, prof, candidates)
    table = SlowdownTable.from_predictions(predictions, workloads=needed)
    notes = []
    fits, note = memory_fit(prof, needed)
    notes.append(note)
    allowed = fits
    if ds.pairs_dir.is_dir():
        measured = ds.read_pairs()
        oom = measured[(measured["status"] == "oom") & (measured["device_name"].astype(str) == device)]
        index = {w: n for n, w in enumerate(needed)}
        for a, b in zip(oom["workload_a"], oom["workload_b"], strict=True):
            if a in index and b in index:
                allowed[index[a], index[b]] = allowed[index[b], index[a]] = False
    table = table.restricted(allowed)
    plan = plan_pairs(
        queue,
        table,
        gpus=config.gpus,
        cluster=cluster,
        max_slowdown=config.max_slowdown,
        method=config.method,
    )
    explained: dict[tuple[str, str], dict] = {}
    for p in plan.placements:
        if p["kind"] == "alone":
            continue
        key = (p["workloads"][0], p["workloads"][1])
        if key not in explained and len(explained) < config.max_explained:
            why = explain_pair(model, prof, key[0], key[1], device, top=config.top)
            explained[key] = {
                side: [
                    {"feature": c["feature"], "contribution": round(c["contribution"], 4)}
                    for c in why[side]["contributions"]
                ]
                for side in ("a", "b")
            }
        if key in explained:
            p["why"] = explained[key]
    shared = {(p["workloads"][0], p["workloads"][1]) for p in plan.placements if p["kind"] != "alone"}
    if len(shared) > len(explained):
        notes.append(
            f"explained the first {len(explained)} of {len(shared)} distinct shared workload pairs "
            "(raise max_explained for more)"
        )
    notes.append(f"device {device!r}; slowdowns predicted by {config.model}")
    plan.notes = notes
    return plan


def memory_fit(profiles: pd.DataFrame, workloads: list[str]) -> tuple[np.ndarray, str]:
    """Return ``(fits, note)``: ``fits[i, j]`` is False where both jobs' memory exceeds the device's.

    A job's memory is its first measured column of ``MEMORY_COLUMNS`` (median over its profiles); where a
    workload or the device memory (``f_device_mem_bytes``) is unknown, the pair is not blocked.
    """
    n = len(workloads)
    fits = np.ones((n, n), dtype=bool)
    cols = [c for c in MEMORY_COLUMNS if c in profiles.columns]
    if not cols or "f_device_mem_bytes" not in profiles.columns:
        return fits, "memory fit not checked: the profiles hold no memory features"
    grouped = profiles.groupby("workload")[[*cols, "f_device_mem_bytes"]].median()
    grouped = grouped.reindex(workloads)
    mem = np.full(n, np.nan)
    for c in reversed(cols):  # the first column present wins
        v = grouped[c].to_numpy(dtype=float)
        mem = np.where(np.isfinite(v), v, mem)
    device_mem = np.nanmin(grouped["f_device_mem_bytes"].to_numpy(dtype=float)) if n else np.nan
    if not np.isfinite(device_mem):
        return fits, "memory fit not checked: device memory unknown"
    total = mem[:, None] + mem[None, :]
    fits = ~(np.isfinite(total) & (total > device_mem))
    unknown = int((~np.isfinite(mem)).sum())
    note = f"memory fit checked against {device_mem / 2**30:.1f} GiB"
    if unknown:
        note += f" ({unknown} workload(s) without a memory measurement are not blocked)"
    return fits, note


def _device(profiles: pd.DataFrame, workloads: list[str], device_name: str | None) -> str:
    present = sorted(set(profiles["device_name"].astype(str)))
    if device_name is not None:
        if device_name not in present:
            raise DatasetError(f"no profiles on device {device_name!r}; the dataset holds {present}")
        return device_name
    of_jobs = sorted(
        set(profiles.loc[profiles["workload"].astype(str).isin(workloads), "device_name"].astype(str))
    )
    if len(of_jobs) == 1:
        return of_jobs[0]
    if not of_jobs:
        raise DatasetError(
            f"no profile of any queued workload; the dataset's workloads: "
            f"{', '.join(sorted(set(profiles['workload'].astype(str)))[:30])}"
        )
    raise ConfigError(f"the profiles cover several devices {of_jobs}; choose one with --device-name NAME")


def read_table_csv(path: str | os.PathLike, what: str, required: tuple[str, ...]) -> pd.DataFrame:
    """Read a small CSV (queue or cluster) as text columns; ``TraceError`` names the file and the problem."""
    path = Path(path)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except FileNotFoundError:
        raise TraceError(f"{what} file {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise TraceError(f"cannot read {what} file {str(path)!r}: {str(exc).splitlines()[0]}") from None
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise TraceError(f"{path}: missing column(s) {missing}; a {what} file needs {list(required)}")
    return df
