"""Event-driven, deterministic cluster simulator: replays a trace under a policy with measured interference.

The scheduling loop (``loop.SchedulingLoop``: arrivals, the queue, policy calls, GPU slots, metrics; its
docstring states the semantics) runs over a simulated world (``SimWorld``): a running job advances at rate
``speed / slowdown`` on each of its GPUs and a multi-GPU job at the rate of its slowest GPU; the slowdown
next to a partner is the measured one (the truth ``SlowdownTable``), while the policy sees its own table
(predictions, or the truth with ``oracle``). Completions live in a heap; a completion whose job changed rate
since it was scheduled is skipped by its version stamp. A restart after preemption costs
``Cluster.preempt_delay_s`` of exclusive run time (checkpoint restore). ``sharewise run`` drives the same loop
over real jobs (``sharewise.runtime``).
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

import numpy as np
from numba import njit

from sharewise.datasets.traces import check_trace
from sharewise.engine.cluster import Cluster, seeded_speeds  # noqa: F401 - re-exported for callers
from sharewise.engine.loop import SchedulingLoop
from sharewise.engine.policy_types import Policy
from sharewise.engine.result import RunResult
from sharewise.engine.table import SlowdownTable
from sharewise.engine.world import DONE, Jobs, Observation
from sharewise.errors import ConfigError, UnknownRateError

if TYPE_CHECKING:
    from sharewise.datasets.traces import Trace

__all__ = ["Cluster", "RunResult", "SimWorld", "seeded_speeds", "simulate"]


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
    job_speed: np.ndarray | None = None,
    move_cost: np.ndarray | None = None,
) -> RunResult:
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
    job_speed
        Per job, how much faster it truly runs than its trace duration says (default 1.0 for all): the
        policies know the durations, the jobs run at ``job_speed`` times their rate. ``sharewise run
        --compare-sim`` gives the policies what the physical run's policies knew, and the jobs the speed
        measured in the sitting.
    move_cost
        Per job, what restarting it on other GPUs costs (seconds of exclusive run time), where resuming it on
        the GPUs it left costs nothing, as a physical run pauses and resumes jobs in place; default: every
        restart costs ``cluster.preempt_delay_s`` (a checkpoint restore).
    """
    if round_s is not None and not (math.isfinite(round_s) and round_s > 0):
        raise ConfigError(f"round length must be a positive number of seconds, got {round_s}")
    cluster = cluster or Cluster()
    check_trace(trace, truth.workloads, cluster.n_gpus)
    table = truth if view is None else view.aligned(truth.workloads).restricted(truth.allowed)
    loop = SchedulingLoop(
        arrival=np.asarray(trace.arrival, dtype=float),
        work=np.asarray(trace.duration, dtype=float),
        gpus=np.asarray(trace.gpus, dtype=np.int64),
        workload=truth.ids(trace.workload),
        line=trace.line,
        policy=policy,
        table=table,
        world=SimWorld(truth, cluster.preempt_delay_s, observe, job_speed, move_cost),
        cluster=cluster,
        slo=slo,
        name=name,
        validate=validate,
        observe=observe,
        round_s=round_s,
        job_class=None if cluster.variability is None else cluster.variability.class_ids(trace.workload),
        job_id=trace.job_id,
    )
    return loop.run()


class SimWorld:
    """The simulated world: running jobs advance at rate ``speed / slowdown`` (the truth's p50 next to their
    partner, at their slowest GPU, divided by the cross-node slowdown when they span nodes), completions come
    from a heap, and a restart after preemption costs ``Cluster.preempt_delay_s`` of exclusive run time.

    A running job runs at ``rate`` since ``anchor_t``: its progress report is ``rate`` x the seconds since, and
    re-anchors it. A rate change pushes a new completion event, from the remaining work the loop keeps
    (``Jobs.remaining``, its last report taken), stamped with the job's ``version``, so a stale event is
    skipped. A pair is observed the moment it forms: the truth holds its slowdowns.
    """

    def tolerance(self, now: float) -> float:
        """Event times are exact up to float error."""
        return 1e-9 * max(1.0, now)

    def __init__(self, truth: SlowdownTable, preempt_delay_s: float, observe: bool,
                 job_speed: np.ndarray | None = None, move_cost: np.ndarray | None = None) -> None:
        self.truth_p50 = np.where(truth.allowed, truth.p50, np.inf)
        self.preempt_delay = float(preempt_delay_s)
        self.observe = observe
        self.job_speed = None if job_speed is None else np.asarray(job_speed, dtype=float)
        self.move_cost = None if move_cost is None else np.asarray(move_cost, dtype=float)
        self.last_gpus: dict[int, list[int]] = {}
        self.heap: list[tuple[float, int, int]] = []
        self.found: list[Observation] = []

    def bind(self, jobs: Jobs) -> None:
        self.jobs = jobs
        n = jobs.ngpus.shape[0]
        self.anchor_t = np.zeros(n)
        self.rate = np.zeros(n)
        self.version = [0] * n

    def _prune(self) -> None:
        heap, version = self.heap, self.version
        while heap and heap[0][2] != version[heap[0][1]]:
            heapq.heappop(heap)

    def advance(self, until: float) -> float:
        self._prune()
        t_done = self.heap[0][0] if self.heap else math.inf
        return min(t_done, until)

    def finished(self, now: float) -> list[tuple[int, int]]:
        """Pop the jobs due now (a tolerance absorbs float error in remaining / rate)."""
        heap, version = self.heap, self.version
        tol = 1e-9 * max(1.0, abs(now))
        done = []
        while heap and heap[0][0] <= now + tol:
            _, j, v = heapq.heappop(heap)
            if v != version[j]:
                continue
            self.rate[j] = 0.0
            version[j] += 1
            done.append((j, DONE))
        return done

    def progress(self, now: float, jobs=None) -> tuple[np.ndarray, np.ndarray]:
        if jobs is None:
            return advance(self.jobs.resident, float(now), self.anchor_t, self.rate)
        work = np.empty(len(jobs))
        for k, j in enumerate(jobs):
            work[k] = self.rate[j] * (now - self.anchor_t[j])
            self.anchor_t[j] = now
        return np.asarray(jobs, dtype=np.int64), work

    def started(self, j: int, gpus: list[int], now: float, restart: bool) -> float:
        cost = 0.0
        if restart:
            if self.move_cost is None:
                cost = self.preempt_delay
            elif self.last_gpus.get(j) != gpus:  # resumed in place costs nothing; a move restarts the job
                cost = float(self.move_cost[j])
        self.anchor_t[j] = now
        if self.observe:
            jobs = self.jobs
            resident, wl = jobs.resident, jobs.workload
            for g in gpus:
                other = int(resident[g, 0])
                if other == j:
                    continue
                a, b = wl[j], wl[other]
                if (a, b) not in jobs.observed:
                    self.found.append(Observation(j, other, float(self.truth_p50[a, b]), float(self.truth_p50[b, a])))
        return cost

    def stopped(self, j: int, now: float) -> None:
        self.rate[j] = 0.0
        self.version[j] += 1
        if self.move_cost is not None:
            self.last_gpus[j] = list(self.jobs.gpus[j])

    def rate_changed(self, j: int, now: float) -> None:
        jobs = self.jobs
        r = self._job_rate(j)
        if not 0.0 < r < math.inf or jobs.remaining[j] != jobs.remaining[j]:
            self._refuse(j, r)
        self.rate[j] = r
        self.version[j] += 1
        heapq.heappush(self.heap, (now + max(jobs.remaining[j], 0.0) / r, j, self.version[j]))

    def _refuse(self, j: int, rate: float) -> None:
        """A job whose rate is not a finite positive number (or whose remaining work is NaN) would never end,
        and its NaN completion time would keep the loop from ever reaching one: say which, and from what."""
        jobs = self.jobs
        partners = [int(o) for g in jobs.gpus[j] for o in jobs.resident[g] if o >= 0 and o != j]
        speed = jobs.speed_of(j)[jobs.gpus[j]].min() if jobs.gpus[j] else math.nan
        parts = [f"GPU speed {speed:g}"]
        if partners:
            w = jobs.workload[j]
            parts.append("slowdown next to its partner " + ", ".join(
                f"{self.truth_p50[w, jobs.workload[o]]:g}" for o in partners))
        if self.job_speed is not None:
            parts.append(f"its measured speed factor {self.job_speed[j]:g}")
        raise UnknownRateError(
            f"{jobs.name(j)} has no finite positive rate of progress in the simulation (rate {rate:g}, remaining "
            f"work {jobs.remaining[j]:g} s, from {'; '.join(parts)}); expected every running job to progress. "
            "Give its workload a measured solo step time (a calibration or a solo profile) and a length"
        )

    def _job_rate(self, j: int) -> float:
        """Progress per second of job ``j``: its slowest GPU's speed (for its class) over its slowdown there."""
        jobs = self.jobs
        w = jobs.workload[j]
        resident, truth_p50, wl_list = jobs.resident, self.truth_p50, jobs.workload
        speed = jobs.speed if jobs.job_class is None else jobs.class_speed[jobs.job_class[j]]
        best = math.inf
        for g in jobs.gpus[j]:
            a, b = resident[g, 0], resident[g, 1]
            o = int(b) if a == j else int(a)
            r = speed[g] if o < 0 else speed[g] / truth_p50[w, wl_list[o]]
            if r < best:
                best = r
        if self.job_speed is not None:
            return best / jobs.cross[j] * self.job_speed[j]
        return best / jobs.cross[j]

    def observations(self) -> list[Observation]:
        found, self.found = self.found, []
        return found

    def lengths(self) -> list[tuple[int, float]]:
        return []  # a simulated job's work is known from the start

    def pending(self) -> bool:
        self._prune()
        return bool(self.heap)


@njit(cache=True, nogil=True)
def advance(resident, now, anchor_t, rate):  # pragma: no cover - compiled
    """Every running job's work since its anchor, up to ``now`` (``SimWorld.progress``): ``(jobs, work)``, each
    job re-anchored at ``now`` (a multi-GPU job, seen on each of its GPUs, once: its anchor is ``now`` after the
    first). A job anchored at ``now`` already did no work since and is left out."""
    jobs = np.empty(resident.size, dtype=np.int64)
    work = np.empty(resident.size)
    n = 0
    for gpu in range(resident.shape[0]):
        for slot in range(resident.shape[1]):
            job = resident[gpu, slot]
            if job < 0 or anchor_t[job] == now:
                continue
            jobs[n] = job
            work[n] = rate[job] * (now - anchor_t[job])
            anchor_t[job] = now
            n += 1
    return jobs[:n], work[:n]
