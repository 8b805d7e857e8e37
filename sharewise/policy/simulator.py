"""Event-driven, deterministic cluster simulator: replays a trace under a policy with measured interference.

Jobs arrive, wait in a queue, and are gang-scheduled by a policy on the GPUs they ask for (at most two jobs
per GPU). A running job advances at rate ``speed / slowdown`` on each of its GPUs and a multi-GPU job at the
rate of its slowest GPU; the slowdown next to a partner is the measured one (the truth ``SlowdownTable``),
while the policy sees its own table (predictions, or the truth with ``oracle``). Events (arrivals,
completions, wake-ups a policy asked for, round boundaries) live in a heap; a completion whose job changed
rate since it was scheduled is skipped by its version stamp.

Semantics, stated once:

- **When the policy runs.** Event-driven (default): after every arrival, completion or requested wake-up,
  while jobs wait and a GPU slot is free (a preemptive policy runs whenever jobs wait, and at a wake-up it
  asked for even when none waits; one that never shares, ``shares_gpus = False``, only while a queued job
  fits on the free GPUs). Round-based
  (``round_s``, Gavel's 360 s rounds): only at multiples of ``round_s``; jobs that arrive or GPUs freed in
  between wait for the next round boundary.
- **Preemption.** A ``Decision`` may stop running jobs; a stopped job keeps its progress, returns to the
  queue, and pays ``Cluster.preempt_delay_s`` of exclusive run time (checkpoint restore) when it restarts.
  Its attained service (GPUs x seconds run) keeps counting across restarts.
- **Re-placement and migration.** A job that one ``Decision`` both stops and starts again is re-placed, not
  preempted: if it gets exactly the same GPUs back it simply keeps running (no cost, nothing counted); on
  other GPUs it **migrates**: it pays ``Cluster.preempt_delay_s`` (a migration is a restart elsewhere; 0 by
  default, as in PAL's artifact) and counts as a migration, not a preemption. A policy that re-places every
  running job at every round (``replaces_running = True`` on the function) states its whole placement each
  time (stop every running job, start every job that runs on): it is called at every scheduling point while
  any job runs or waits, and a running job it leaves out is preempted.
- **Speed.** A job runs on each GPU at that GPU's speed, or with ``Cluster.variability`` at the speed of that
  GPU for the job's class (1 / PAL's factor); a multi-GPU job at its slowest GPU's, divided by the cross-node
  slowdown when its GPUs span nodes.
- **Metrics.** JCT = finish - arrival; queueing delay = first start - arrival; realized slowdown = (finish -
  first start) x the speed of its last GPUs / exclusive run time (time preempted counts against it).
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from sharewise.datasets.pair import both_orders
from sharewise.datasets.traces import check_trace
from sharewise.errors import ConfigError
from sharewise.policy import _kernels
from sharewise.policy.base import (
    MAX_JOBS_PER_GPU,
    ClusterState,
    InvalidPlacementError,
    Policy,
    Queue,
    as_decision,
    check_placements,
    readonly,
)
from sharewise.policy.cluster import Cluster, seeded_speeds  # noqa: F401 - re-exported for callers
from sharewise.policy.table import SlowdownTable
from sharewise.stats import percentile

if TYPE_CHECKING:
    from sharewise.datasets.traces import Trace

_QUEUED, _RUNNING, _DONE = 1, 2, 3


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
    preemptions: int = 0
    migrations: int = 0
    metrics: dict = field(default_factory=dict)

    @property
    def jct(self) -> np.ndarray:
        """Job completion time: finish minus arrival, seconds."""
        return self.finish - self.arrival

    def compute_metrics(self) -> dict:
        """Return ``{"avg_jct", "p95_jct", "makespan", "avg_queue", "utilization", "slo_violations",
        "preemptions", "migrations"}``.

        Example: ``{"avg_jct": 5400.0, "p95_jct": 20000.0, "makespan": 86400.0, "avg_queue": 120.0,
        "utilization": 0.81, "slo_violations": 3, "preemptions": 0, "migrations": 0}``
        """
        jct = self.jct
        makespan = float(self.finish.max() - self.arrival.min())
        return {
            "avg_jct": float(jct.mean()),
            "p95_jct": percentile(jct, 95),
            "makespan": makespan,
            "avg_queue": float((self.start - self.arrival).mean()),
            "utilization": float(self.busy_gpu_seconds / (self.n_gpus * makespan)) if makespan > 0 else 0.0,
            # A small tolerance so float noise on a job that ran exactly at the SLO is not a violation.
            "slo_violations": int((self.realized_slowdown > self.slo * (1 + 1e-9)).sum()),
            "preemptions": int(self.preemptions),
            "migrations": int(self.migrations),
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
    observe: bool = True,
    round_s: float | None = None,
) -> SimulationResult:
    """Replay ``trace`` on ``cluster`` under ``policy``; return per-job times and the metrics.

    Parameters
    ----------
    trace
        The jobs (``sharewise.datasets.traces.load_trace``); their workloads must be in ``truth``.
    policy
        A function ``(queue, cluster_state, table, now) -> list[Placement] | Decision`` (``sharewise.policy``).
    truth
        Measured slowdowns: the rates the simulated jobs actually run at.
    view
        The table the policy sees (predictions); ``None`` shows it the truth (oracle). It is re-indexed to the
        truth's workloads and may never allow a pair the truth forbids (memory fit is known from profiles).
    cluster
        GPUs, nodes, speed factors and the preemption delay (default: 160 GPUs, 8 per node, all speed 1.0).
    slo
        Realized slowdown above which a job counts as an SLO violation.
    name
        Policy name for messages.
    validate
        Check every placement (job queued, GPU counts, at most two jobs per GPU, pair allowed).
    observe
        Once two workloads have run side by side, the policy's table holds their measured slowdowns, as a
        scheduler that measures the throughput of its running jobs knows them (on by default).
    round_s
        Call the policy only at multiples of this many seconds (Gavel's rounds); ``None``: after every event.
    """
    if round_s is not None and not (math.isfinite(round_s) and round_s > 0):
        raise ConfigError(f"round length must be a positive number of seconds, got {round_s}")
    run = _Replay(trace, policy, truth, view, cluster or Cluster(), slo, name, validate, observe, round_s)
    return run.run()


class _Replay:
    """The state of one simulation: per-job arrays, the GPU slots, the event heap, and the steps of a run.

    Running jobs hold an exact ``remaining`` at ``anchor_t`` and a ``rate``; a rate change re-anchors the job
    and pushes a new completion event stamped with the job's ``version``, so a stale event is skipped.
    """

    def __init__(self, trace, policy, truth, view, cluster, slo, name, validate, observe, round_s) -> None:
        check_trace(trace, truth.workloads, cluster.n_gpus)
        self.trace = trace
        self.policy = policy
        self.preemptive = bool(getattr(policy, "preemptive", False))
        self.replaces = bool(getattr(policy, "replaces_running", False))
        self.shares = bool(getattr(policy, "shares_gpus", True))
        self.truth = truth
        self.view = truth if view is None else view.aligned(truth.workloads).restricted(truth.allowed)
        self.name = name
        self.slo = float(slo)
        self.validate = validate
        self.observe = observe
        self.round_s = round_s
        self.preempt_delay = float(cluster.preempt_delay_s)
        self.began = time.perf_counter()
        n = self.n = len(trace)
        self.n_gpus = cluster.n_gpus
        self.speed = cluster.speed_array()
        self.node = cluster.node_array()
        self.cross = float(cluster.cross_node_slowdown)
        self.truth_p50 = np.where(truth.allowed, truth.p50, np.inf)

        self.arrival = np.asarray(trace.arrival, dtype=float)
        self.duration = np.asarray(trace.duration, dtype=float)
        self.ngpus = np.asarray(trace.gpus, dtype=np.int64)
        self.wl = truth.ids(trace.workload)
        self.wl_list = self.wl.tolist()
        # Per class and GPU, the speed a job of that class makes there (one class, the GPU speeds, without
        # variability); the job's row replaces ``speed`` wherever a job's own rate is computed.
        variability = cluster.variability
        self.class_speed = self.speed[None, :] if variability is None else variability.speeds()
        self.job_class = np.zeros(n, np.int64) if variability is None else variability.class_ids(trace.workload)
        self.job_class_list = self.job_class.tolist()

        self.remaining = self.duration.copy()  # exact at anchor_t for running jobs; refreshed before a call
        self.anchor_t = np.zeros(n)
        self.rate = np.zeros(n)
        self.attained = np.zeros(n)  # GPU-seconds run, exact at anchor_t for running jobs
        self.start = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.eff_speed = np.ones(n)  # speed the job would have alone on its GPUs, for the realized slowdown
        self.eff_cross = np.ones(n)
        self.version = [0] * n
        self.status = np.zeros(n, dtype=np.int8)
        self.job_gpus: list[list[int]] = [[] for _ in range(n)]

        self.resident = np.full((self.n_gpus, MAX_JOBS_PER_GPU), -1, dtype=np.int64)
        self.occupancy = np.zeros(self.n_gpus, dtype=np.int64)
        self.free_slots = MAX_JOBS_PER_GPU * self.n_gpus
        self.placed_at = np.full(self.n_gpus, np.nan)  # when each GPU's newest job was placed there
        self.busy = 0  # GPUs holding at least one job
        self.busy_seconds = 0.0

        self.state = ClusterState(
            resident=readonly(self.resident),
            node=readonly(self.node),
            speed=readonly(self.speed),
            job_remaining=readonly(self.remaining),
            job_workload=readonly(self.wl),
            job_ngpus=readonly(self.ngpus),
            job_start=readonly(self.start),
            job_work=readonly(self.duration),
            cross_node_slowdown=self.cross,
            slo=self.slo,
            preempt_delay_s=self.preempt_delay,
            job_attained=readonly(self.attained),
            job_arrival=readonly(self.arrival),
            occupied=readonly(self.occupancy),
            placed_at=readonly(self.placed_at),
            class_speed=None if variability is None else readonly(self.class_speed),
            job_class=None if variability is None else readonly(self.job_class),
        )
        self.ro = {
            k: readonly(v)
            for k, v in (
                ("arrival", self.arrival),
                ("gpus", self.ngpus),
                ("remaining", self.remaining),
                ("wl", self.wl),
                ("attained", self.attained),
            )
        }
        self.learned: list[tuple[int, int]] = []
        self.observed: set[tuple[int, int]] = set()  # pairs the view holds measured (both orders)
        self.heap: list[tuple[float, int, int]] = []
        self.queue = np.empty(0, dtype=np.int64)
        self._view: tuple[np.ndarray, Queue] | None = None
        self.next_arrival = 0
        self.wake = math.inf  # when the policy asked to be called again
        self.last = 0.0
        self.calls = 0
        self.events = 0
        self.preemptions = 0
        self.migrations = 0
        self.stopped: dict[int, tuple[int, ...]] = {}  # jobs the current decision stopped -> their GPUs
        self.restarts = np.zeros(n, dtype=np.int64)

    # ---- the event loop ------------------------------------------------------------------------------
    def run(self) -> SimulationResult:
        while True:
            now = self._next_time()
            if now == math.inf:
                break
            self.events += 1
            self.busy_seconds += self.busy * (now - self.last)
            self.last = now
            affected: set[int] = set()
            self._complete(now, affected)
            self._arrive(now)
            woken = now >= self.wake
            if woken:
                self.wake = math.inf
            placed = self._schedule(now, affected, woken) if self._may_schedule(now) else False
            for j in sorted(affected):
                if self.status[j] == _RUNNING:
                    self._set_rate(j, now)
            if self.learned:
                self.view = _learn(self.view, self.truth, self.learned)
                self.observed.update(self.learned)
                self.observed.update((b, a) for a, b in self.learned)
                self.learned.clear()
            if not placed:
                self._check_progress()
        return self._result()

    def _prune(self) -> None:
        heap, version = self.heap, self.version
        while heap and heap[0][2] != version[heap[0][1]]:
            heapq.heappop(heap)

    def _waiting_work(self) -> bool:
        """Whether a policy call now could start something: jobs wait and a slot is free (or it preempts);
        for a policy that never shares, a queued job fits on the free GPUs."""
        if self.replaces and self.busy:
            return True
        if not self.queue.shape[0]:
            return False
        if self.preemptive:
            return True
        if not self.shares:
            return self.n_gpus - self.busy >= int(self.ngpus[self.queue].min())
        return self.free_slots > 0

    def _next_round(self) -> float:
        """The next round boundary at or after the last event, while work waits; inf otherwise."""
        if self.round_s is None or not self._waiting_work():
            return math.inf
        k = math.ceil(self.last / self.round_s - 1e-12)
        t = k * self.round_s
        return t if t > self.last or self.events == 0 else (k + 1) * self.round_s

    def _next_time(self) -> float:
        t_arr = self.arrival[self.next_arrival] if self.next_arrival < self.n else math.inf
        self._prune()
        t_done = self.heap[0][0] if self.heap else math.inf
        return min(t_arr, t_done, self.wake, self._next_round())

    def _may_schedule(self, now: float) -> bool:
        if self.round_s is None:
            return True
        k = round(now / self.round_s)
        return abs(now - k * self.round_s) <= 1e-9 * max(1.0, now)

    def _complete(self, now: float, affected: set[int]) -> None:
        """Finish the jobs due now (a tolerance absorbs float error in remaining / rate); free their slots."""
        heap, version = self.heap, self.version
        tol = 1e-9 * max(1.0, abs(now))
        while heap and heap[0][0] <= now + tol:
            _, j, v = heapq.heappop(heap)
            if v != version[j]:
                continue
            self.status[j] = _DONE
            self.finish[j] = now
            self.attained[j] += self.ngpus[j] * (now - self.anchor_t[j])
            self.remaining[j] = 0.0
            self.rate[j] = 0.0
            version[j] += 1
            affected.discard(j)
            self._vacate(j, affected)

    def _vacate(self, j: int, affected: set[int]) -> None:
        """Take job ``j`` off its GPUs; a partner left alone there changes rate."""
        resident, occupancy = self.resident, self.occupancy
        for g in self.job_gpus[j]:
            if resident[g, 0] == j:
                resident[g, 0] = resident[g, 1]
            resident[g, 1] = -1
            occupancy[g] -= 1
            self.free_slots += 1
            if occupancy[g] == 0:
                self.busy -= 1
            else:
                affected.add(int(resident[g, 0]))
        self.job_gpus[j] = []

    def _arrive(self, now: float) -> None:
        first = self.next_arrival
        while self.next_arrival < self.n and self.arrival[self.next_arrival] <= now:
            self.next_arrival += 1
        if self.next_arrival > first:
            self.status[first : self.next_arrival] = _QUEUED
            self.queue = np.concatenate([self.queue, np.arange(first, self.next_arrival)])

    def _refresh(self, now: float) -> None:
        """Bring the remaining work and attained service of every running job up to ``now``."""
        _kernels.advance(self.resident, float(now), self.anchor_t, self.remaining, self.rate, self.attained, self.ngpus)

    def _schedule(self, now: float, affected: set[int], woken: bool = False) -> bool:
        """Show the policy the queue and the cluster; apply its decision. Return whether it started any job.

        ``woken``: the policy asked to be called now; a preemptive one then runs even with no job waiting."""
        if not (self._waiting_work() or (woken and self.preemptive)):
            return False
        self._refresh(now)
        queue = self.queue
        q = self._queue_view(queue)
        self.calls += 1
        decision = as_decision(self.policy(q, self.state, self.view, now))
        if decision.wake_at < math.inf:
            self.wake = max(float(decision.wake_at), now)
        self.stopped = {}
        stopped = [self._preempt(int(j), now, affected) for j in decision.preempt]
        if stopped:
            queue = self.queue = np.sort(np.concatenate([queue, np.array(stopped, dtype=np.int64)]))
            q = self._queue_view(queue)
        if not decision.start:
            return bool(stopped)
        if self.validate:
            check_placements(decision.start, q, self.state, self.view, self.name)
        for p in decision.start:
            self._start(p, now, affected)
        self.stopped = {}
        self.queue = queue[self.status[queue] == _QUEUED]
        return True

    def _queue_view(self, queue: np.ndarray) -> Queue:
        """The policy's view of the queued jobs ``queue``. Reused while the queue is the same array: queued
        jobs' fields change only when they run, and starting, preempting or an arrival makes a new array."""
        if self._view is not None and self._view[0] is queue:
            return self._view[1]
        ro = self.ro
        view = Queue(
            job=readonly(queue),
            arrival=ro["arrival"][queue],
            gpus=ro["gpus"][queue],
            remaining=ro["remaining"][queue],
            workload=ro["wl"][queue],
            attained=ro["attained"][queue],
        )
        self._view = (queue, view)
        return view

    def _preempt(self, j: int, now: float, affected: set[int]) -> int:
        """Stop running job ``j`` now: it keeps its progress and returns to the queue."""
        if self.status[j] != _RUNNING:
            raise InvalidPlacementError(f"policy {self.name!r} preempted job {j}, which is not running")
        self.status[j] = _QUEUED
        self.rate[j] = 0.0
        self.version[j] += 1
        affected.discard(j)
        self.stopped[j] = tuple(sorted(self.job_gpus[j]))
        self._vacate(j, affected)
        self.preemptions += 1
        return j

    def _start(self, p, now: float, affected: set[int]) -> int:
        """Put job ``p.job`` on ``p.gpus`` now; its partners' rates change with it."""
        j = int(p.job)
        gs = [int(g) for g in p.gpus]
        if not self.validate and self.status[j] != _QUEUED:
            raise InvalidPlacementError(f"policy {self.name!r} placed job {j}, which is not queued")
        was = self.stopped.pop(j, None)  # stopped by this same decision: re-placed, not preempted
        kept = was is not None and was == tuple(sorted(gs))
        if was is not None:
            self.preemptions -= 1
            self.migrations += not kept
        if not kept:
            if self.status[j] == _QUEUED and math.isfinite(self.start[j]):  # a restart, or a migration
                self.remaining[j] += self.preempt_delay
                self.restarts[j] += 1
            else:
                self.start[j] = now
        self.status[j] = _RUNNING
        self.anchor_t[j] = now
        self.job_gpus[j] = gs
        resident, occupancy = self.resident, self.occupancy
        for g in gs:
            slot = occupancy[g]
            if slot == 0:
                self.busy += 1
            else:
                affected.add(int(resident[g, 0]))
                if self.observe:
                    pair = (self.wl_list[j], self.wl_list[int(resident[g, 0])])
                    if pair not in self.observed:
                        self.learned.append(pair)
            resident[g, slot] = j
            occupancy[g] = slot + 1
            if not kept:
                self.placed_at[g] = now
            self.free_slots -= 1
        sp = self.class_speed[self.job_class_list[j]][gs].min()
        spans = len({int(self.node[g]) for g in gs}) > 1
        self.eff_cross[j] = self.cross if spans else 1.0
        self.eff_speed[j] = sp / self.eff_cross[j]
        affected.add(j)
        return j

    def _job_rate(self, j: int) -> float:
        """Progress per second of job ``j``: its slowest GPU's speed (for its class) over its slowdown there."""
        w = self.wl_list[j]
        resident, truth_p50, wl_list = self.resident, self.truth_p50, self.wl_list
        speed = self.class_speed[self.job_class_list[j]]
        best = math.inf
        for g in self.job_gpus[j]:
            a, b = resident[g, 0], resident[g, 1]
            o = int(b) if a == j else int(a)
            r = speed[g] if o < 0 else speed[g] / truth_p50[w, wl_list[o]]
            if r < best:
                best = r
        return best / self.eff_cross[j]

    def _set_rate(self, j: int, t: float) -> None:
        dt = t - self.anchor_t[j]
        self.remaining[j] -= self.rate[j] * dt
        self.attained[j] += self.ngpus[j] * dt
        self.anchor_t[j] = t
        r = self._job_rate(j)
        self.rate[j] = r
        self.version[j] += 1
        heapq.heappush(self.heap, (t + max(self.remaining[j], 0.0) / r, j, self.version[j]))

    def _check_progress(self) -> None:
        """Refuse a run that can never end: jobs wait on an idle cluster with nothing left to happen."""
        if not self.queue.shape[0] or self.next_arrival < self.n or self.wake < math.inf:
            return
        if self._next_round() < math.inf and self.free_slots:
            return  # the next round boundary will call the policy
        self._prune()
        if not self.heap:
            raise InvalidPlacementError(
                f"policy {self.name!r} left {self.queue.shape[0]} job(s) waiting on an idle cluster with no "
                f"arrivals left (first: trace line {int(self.trace.line[self.queue[0]])}); it would never "
                "finish"
            )

    def _result(self) -> SimulationResult:
        realized = (self.finish - self.start) * self.eff_speed / self.duration
        result = SimulationResult(
            policy=self.name,
            arrival=self.arrival,
            duration=self.duration,
            start=self.start,
            finish=self.finish,
            realized_slowdown=realized,
            busy_gpu_seconds=self.busy_seconds,
            n_gpus=self.n_gpus,
            slo=self.slo,
            wall_s=time.perf_counter() - self.began,
            policy_calls=self.calls,
            events=self.events,
            preemptions=self.preemptions,
            migrations=self.migrations,
        )
        result.metrics = result.compute_metrics()
        return result


def _learn(view: SlowdownTable, truth: SlowdownTable, pairs: list[tuple[int, int]]) -> SlowdownTable:
    """Return ``view`` with the measured slowdowns of ``pairs`` (workload ids, both directions)."""
    a, b = both_orders(np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]))
    if np.all(view.p50[a, b] == truth.p50[a, b]) and np.all(view.p90[a, b] == truth.p50[a, b]):
        return view
    arrays = [q.copy() for q in (view.p10, view.p50, view.p90)]
    for q in arrays:
        q[a, b] = truth.p50[a, b]
    return SlowdownTable(
        view.workloads, *arrays, view.allowed, device_name=view.device_name, source=view.source + "+observed"
    )
