"""Event-driven, deterministic cluster simulator: replays a trace under a policy with measured interference.

Jobs arrive, wait in a queue, and are gang-scheduled by a policy on the GPUs they ask for (at most two jobs
per GPU). A running job advances at rate ``speed / slowdown`` on each of its GPUs and a multi-GPU job at the
rate of its slowest GPU; the slowdown next to a partner is the measured one (the truth ``SlowdownTable``),
while the policy sees its own table (predictions, or the truth with ``oracle``). Events (arrivals,
completions) live in a heap; a completion whose job changed rate since it was scheduled is skipped by its
version stamp.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field

import numpy as np

from sharewise.errors import ConfigError
from sharewise.policy.base import (
    MAX_JOBS_PER_GPU,
    ClusterState,
    InvalidPlacementError,
    Policy,
    Queue,
    check_placements,
    readonly,
)
from sharewise.policy.table import SlowdownTable
from sharewise.policy.traces import Trace, check_trace

_QUEUED, _RUNNING, _DONE = 1, 2, 3


@dataclass(frozen=True)
class Cluster:
    """GPUs to simulate: ``n_gpus`` on nodes of ``gpus_per_node``, each with a speed factor (1.0 = nominal).

    ``cross_node_slowdown`` divides the rate of a job whose GPUs span more than one node (1.0: no penalty).
    """

    n_gpus: int = 160
    gpus_per_node: int = 8
    speeds: tuple[float, ...] | None = None
    cross_node_slowdown: float = 1.0

    def __post_init__(self) -> None:
        if self.n_gpus < 1 or self.gpus_per_node < 1:
            raise ConfigError(
                f"a cluster needs at least one GPU and one GPU per node, got {self.n_gpus} GPUs with "
                f"{self.gpus_per_node} per node"
            )
        if self.speeds is not None:
            if len(self.speeds) != self.n_gpus:
                raise ConfigError(f"got {len(self.speeds)} GPU speeds for {self.n_gpus} GPUs")
            if not all(math.isfinite(s) and s > 0 for s in self.speeds):
                raise ConfigError("GPU speed factors must be positive finite numbers")
        if not (math.isfinite(self.cross_node_slowdown) and self.cross_node_slowdown >= 1.0):
            raise ConfigError(f"cross-node slowdown must be >= 1.0, got {self.cross_node_slowdown}")

    def speed_array(self) -> np.ndarray:
        """Return the speed factor of each GPU."""
        if self.speeds is None:
            return np.ones(self.n_gpus)
        return np.asarray(self.speeds, dtype=float)

    def node_array(self) -> np.ndarray:
        """Return the node index of each GPU."""
        return np.arange(self.n_gpus) // self.gpus_per_node


def seeded_speeds(n_gpus: int, sigma: float, seed: int) -> tuple[float, ...]:
    """Draw GPU speed factors from a log-normal distribution with median 1.0 (``Generator(seed)``)."""
    if sigma < 0:
        raise ConfigError(f"speed spread (sigma) must be >= 0, got {sigma}")
    rng = np.random.default_rng(seed)
    return tuple(float(x) for x in np.exp(rng.normal(0.0, sigma, size=n_gpus)))


@dataclass
class SimulationResult:
    """Per-job outcome of one simulated policy (arrays follow the trace order) and its metrics."""

    policy: str
    arrival: np.ndarray
    duration: np.ndarray
    start: np.ndarray
    finish: np.ndarray
    realized_slowdown: np.ndarray
    busy_gpu_seconds: float
    n_gpus: int
    slo: float
    wall_s: float = 0.0
    policy_calls: int = 0
    events: int = 0
    metrics: dict = field(default_factory=dict)

    @property
    def jct(self) -> np.ndarray:
        """Job completion time: finish minus arrival, seconds."""
        return self.finish - self.arrival

    def compute_metrics(self) -> dict:
        """Return ``{"avg_jct", "p95_jct", "makespan", "avg_queue", "utilization", "slo_violations"}``.

        Example: ``{"avg_jct": 5400.0, "p95_jct": 20000.0, "makespan": 86400.0, "avg_queue": 120.0,
        "utilization": 0.81, "slo_violations": 3}``
        """
        jct = self.jct
        makespan = float(self.finish.max() - self.arrival.min())
        return {
            "avg_jct": float(jct.mean()),
            "p95_jct": float(np.percentile(jct, 95)),
            "makespan": makespan,
            "avg_queue": float((self.start - self.arrival).mean()),
            "utilization": float(self.busy_gpu_seconds / (self.n_gpus * makespan)) if makespan > 0 else 0.0,
            # A small tolerance so float noise on a job that ran exactly at the SLO is not a violation.
            "slo_violations": int((self.realized_slowdown > self.slo * (1 + 1e-9)).sum()),
        }


def simulate(
    trace: Trace,
    policy: Policy,
    truth: SlowdownTable,
    view: SlowdownTable | None = None,
    *,
    cluster: Cluster | None = None,
    slo: float = 2.0,
    name: str = "policy",
    validate: bool = True,
    observe: bool = False,
) -> SimulationResult:
    """Replay ``trace`` on ``cluster`` under ``policy``; return per-job times and the metrics.

    Parameters
    ----------
    trace
        The jobs (``load_trace``); their workloads must be in ``truth``.
    policy
        A function ``(queue, cluster_state, table, now) -> list[Placement]`` (see ``sharewise.policy``).
    truth
        Measured slowdowns: the rates the simulated jobs actually run at.
    view
        The table the policy sees (predictions); ``None`` shows it the truth (oracle). It is re-indexed to the
        truth's workloads and may never allow a pair the truth forbids (memory fit is known from profiles).
    cluster
        GPUs, nodes and speed factors (default: 160 GPUs, 8 per node, all speed 1.0).
    slo
        Realized slowdown above which a job counts as an SLO violation.
    name
        Policy name for messages.
    validate
        Check every placement (job queued, GPU counts, at most two jobs per GPU, pair allowed).
    observe
        Once two workloads have run side by side, the policy's table holds their measured slowdowns, as a
        scheduler that measures the throughput of its running jobs would know them.
    """
    cluster = cluster or Cluster()
    check_trace(trace, truth.workloads, cluster.n_gpus)
    view = truth if view is None else view.aligned(truth.workloads).restricted(truth.allowed)
    t0 = time.perf_counter()
    n = len(trace)
    n_gpus = cluster.n_gpus
    speed = cluster.speed_array()
    node = cluster.node_array()
    cross = float(cluster.cross_node_slowdown)
    truth_p50 = np.where(truth.allowed, truth.p50, np.inf)

    arrival = np.asarray(trace.arrival, dtype=float)
    duration = np.asarray(trace.duration, dtype=float)
    ngpus = np.asarray(trace.gpus, dtype=np.int64)
    wl = truth.ids(trace.workload)
    wl_list = wl.tolist()

    remaining = duration.copy()  # exact at anchor_t for running jobs; refreshed before each policy call
    anchor_t = np.zeros(n)
    rate = np.zeros(n)
    start = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    eff_speed = np.ones(n)  # speed the job would have alone on its GPUs, for the realized slowdown
    version = [0] * n
    status = np.zeros(n, dtype=np.int8)
    job_gpus: list[list[int]] = [[] for _ in range(n)]

    resident = np.full((n_gpus, MAX_JOBS_PER_GPU), -1, dtype=np.int64)
    occupancy = np.zeros(n_gpus, dtype=np.int64)
    free_slots = MAX_JOBS_PER_GPU * n_gpus
    busy = 0  # GPUs holding at least one job
    busy_seconds = 0.0

    ro_resident = readonly(resident)
    state = ClusterState(
        resident=ro_resident,
        node=readonly(node),
        speed=readonly(speed),
        job_remaining=readonly(remaining),
        job_workload=readonly(wl),
        job_ngpus=readonly(ngpus),
        job_start=readonly(start),
        job_work=readonly(duration),
        cross_node_slowdown=cross,
        slo=float(slo),
    )
    ro = {
        k: readonly(v)
        for k, v in (("arrival", arrival), ("gpus", ngpus), ("remaining", remaining), ("wl", wl))
    }

    learned: list[tuple[int, int]] = []
    heap: list[tuple[float, int, int]] = []
    queue = np.empty(0, dtype=np.int64)
    next_arrival = 0
    now = 0.0
    last = 0.0
    calls = events = 0

    def other_on(g: int, j: int) -> int:
        a, b = resident[g, 0], resident[g, 1]
        return int(b) if a == j else int(a)

    def job_rate(j: int) -> float:
        w = wl_list[j]
        best = math.inf
        for g in job_gpus[j]:
            o = other_on(g, j)
            r = speed[g] if o < 0 else speed[g] / truth_p50[w, wl_list[o]]
            if r < best:
                best = r
        return best / eff_cross[j]

    eff_cross = np.ones(n)

    def set_rate(j: int, t: float) -> None:
        remaining[j] -= rate[j] * (t - anchor_t[j])
        anchor_t[j] = t
        r = job_rate(j)
        rate[j] = r
        version[j] += 1
        heapq.heappush(heap, (t + max(remaining[j], 0.0) / r, j, version[j]))

    while True:
        t_arr = arrival[next_arrival] if next_arrival < n else math.inf
        while heap and heap[0][2] != version[heap[0][1]]:
            heapq.heappop(heap)
        t_done = heap[0][0] if heap else math.inf
        now = min(t_arr, t_done)
        if now == math.inf:
            break
        events += 1
        busy_seconds += busy * (now - last)
        last = now
        affected: set[int] = set()
        # Completions due now (a tolerance absorbs float error in remaining / rate).
        tol = 1e-9 * max(1.0, abs(now))
        while heap and heap[0][0] <= now + tol:
            _, j, v = heapq.heappop(heap)
            if v != version[j]:
                continue
            status[j] = _DONE
            finish[j] = now
            remaining[j] = 0.0
            rate[j] = 0.0
            version[j] += 1
            affected.discard(j)
            for g in job_gpus[j]:
                if resident[g, 0] == j:
                    resident[g, 0] = resident[g, 1]
                resident[g, 1] = -1
                occupancy[g] -= 1
                free_slots += 1
                if occupancy[g] == 0:
                    busy -= 1
                else:
                    affected.add(int(resident[g, 0]))
        # Arrivals due now.
        first = next_arrival
        while next_arrival < n and arrival[next_arrival] <= now:
            next_arrival += 1
        if next_arrival > first:
            status[first:next_arrival] = _QUEUED
            queue = np.concatenate([queue, np.arange(first, next_arrival)])
        placed_any = False
        if queue.shape[0] and free_slots:
            res = resident[resident >= 0]
            remaining[res] -= rate[res] * (now - anchor_t[res])
            anchor_t[res] = now
            q = Queue(
                job=readonly(queue),
                arrival=ro["arrival"][queue],
                gpus=ro["gpus"][queue],
                remaining=ro["remaining"][queue],
                workload=ro["wl"][queue],
            )
            calls += 1
            placements = policy(q, state, view, now)
            if placements:
                if validate:
                    check_placements(placements, q, state, view, name)
                placed_any = True
                done_jobs = []
                for p in placements:
                    j = int(p.job)
                    gs = [int(g) for g in p.gpus]
                    if not validate and status[j] != _QUEUED:
                        raise InvalidPlacementError(f"policy {name!r} placed job {j}, which is not queued")
                    status[j] = _RUNNING
                    start[j] = now
                    anchor_t[j] = now
                    job_gpus[j] = gs
                    done_jobs.append(j)
                    for g in gs:
                        slot = occupancy[g]
                        if slot == 0:
                            busy += 1
                        else:
                            affected.add(int(resident[g, 0]))
                            if observe:
                                learned.append((wl_list[j], wl_list[int(resident[g, 0])]))
                        resident[g, slot] = j
                        occupancy[g] = slot + 1
                        free_slots -= 1
                    sp = speed[gs].min()
                    spans = len({int(node[g]) for g in gs}) > 1
                    eff_cross[j] = cross if spans else 1.0
                    eff_speed[j] = sp / eff_cross[j]
                    affected.add(j)
                placed = np.sort(np.array(done_jobs, dtype=np.int64))
                queue = queue[~np.isin(queue, placed, assume_unique=True)]
        for j in sorted(affected):
            if status[j] == _RUNNING:
                set_rate(j, now)
        if learned:
            view = _learn(view, truth, learned)
            learned.clear()
        if not placed_any and queue.shape[0] and next_arrival >= n:
            while heap and heap[0][2] != version[heap[0][1]]:
                heapq.heappop(heap)
            if not heap:
                raise InvalidPlacementError(
                    f"policy {name!r} left {queue.shape[0]} job(s) waiting on an idle cluster with no "
                    f"arrivals left (first: trace line {int(trace.line[queue[0]])}); it would never finish"
                )
    realized = (finish - start) * eff_speed / duration
    result = SimulationResult(
        policy=name,
        arrival=arrival,
        duration=duration,
        start=start,
        finish=finish,
        realized_slowdown=realized,
        busy_gpu_seconds=busy_seconds,
        n_gpus=n_gpus,
        slo=slo,
        wall_s=time.perf_counter() - t0,
        policy_calls=calls,
        events=events,
    )
    result.metrics = result.compute_metrics()
    return result


def _learn(view: SlowdownTable, truth: SlowdownTable, pairs: list[tuple[int, int]]) -> SlowdownTable:
    """Return ``view`` with the measured slowdowns of ``pairs`` (workload ids, both directions)."""
    a = np.array([p[0] for p in pairs] + [p[1] for p in pairs])
    b = np.array([p[1] for p in pairs] + [p[0] for p in pairs])
    if np.all(view.p50[a, b] == truth.p50[a, b]) and np.all(view.p90[a, b] == truth.p50[a, b]):
        return view
    arrays = [q.copy() for q in (view.p10, view.p50, view.p90)]
    for q in arrays:
        q[a, b] = truth.p50[a, b]
    return SlowdownTable(
        view.workloads, *arrays, view.allowed, device_name=view.device_name, source=view.source + "+observed"
    )
