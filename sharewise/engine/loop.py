"""The scheduling loop shared by the simulator and physical runs: arrivals, the queue, policy calls, the
cluster's GPU slots and the metrics; a *world* behind it advances time and runs the jobs.

Jobs arrive, wait in a queue, and are gang-scheduled by a policy on the GPUs they ask for (at most two jobs
per GPU). The loop does not know how jobs progress: a ``World`` does. The simulated world
(``simulator.SimWorld``) advances each running job at rate ``speed / slowdown`` from a table of measured
pairs and predicts completions; the real world (``sharewise.runtime.world.RealWorld``) starts, pauses,
resumes and polls job processes and reads their step reports. The policies are called with the same
``ClusterState`` at the same events in both (docs/development/conventions.md, practice 16: Gavel's
``simulate=True/False``).

Semantics, stated once:

- **When the policy runs.** Event-driven (default): after every arrival, completion or requested wake-up,
  while jobs wait and a GPU slot is free (a preemptive policy runs whenever jobs wait, and at a wake-up it
  asked for even when none waits; one that never shares, ``shares_gpus = False``, only while a queued job
  fits on the free GPUs). Round-based (``round_s``, Gavel's 360 s rounds): only at multiples of ``round_s``;
  jobs that arrive or GPUs freed in between wait for the next round boundary.
- **Preemption.** A ``Decision`` may stop running jobs; a stopped job keeps its progress and returns to the
  queue; what a restart costs is the world's (the simulator charges ``Cluster.preempt_delay_s`` of exclusive
  run time; a physical run pays what resuming or restarting really takes). Its attained service (GPUs x
  seconds run) keeps counting across restarts.
- **Cluster transitions.** Stops first, then starts (``transition``): a job leaving a GPU moves its partner
  to slot 0; a job placed takes the first empty slot. The policy's own view of the cluster after stops
  (``policy.ours.stage``) uses the same functions.
- **Re-placement and migration.** A job that one ``Decision`` both stops and starts again is re-placed, not
  preempted: if it gets exactly the same GPUs back it simply keeps running (no cost, nothing counted, the
  world not told); on other GPUs it **migrates**: the world restarts it there (the simulator charges
  ``Cluster.preempt_delay_s``, 0 by default as in PAL's artifact) and it counts as a migration, not a
  preemption. A policy that re-places every running job at every call (``replaces_running = True`` on the
  function) states its whole placement each time: it is called at every scheduling point while any job
  runs or waits, and a running job it leaves out is preempted.
- **Speed.** A job runs on each GPU at that GPU's speed, or with ``Cluster.variability`` at that GPU's speed
  for the job's class (1 / PAL's factor, ``job_class``); a multi-GPU job at its slowest GPU's, divided by the
  cross-node slowdown when its GPUs span nodes.
- **Progress.** The world reports what happened; the loop keeps the account, with one rule for both worlds.
  A running job's remaining work (exclusive seconds on a speed-1.0 GPU) goes down by the work the world
  reports it did (``World.progress``: before every policy call for every running job, and for a job whose rate
  changes or that stops), up by what a start costs (``World.started``) and by a length learned anew
  (``World.lengths``); a job that ends done has none left. Its attained service grows by its GPUs x the
  seconds since it was last counted, at the same moments and when it ends.
- **Observation.** When the world reports the measured slowdowns of two jobs that share a GPU, the policies'
  table holds them from then on (both orders, p10 = p50 = p90 = measured), with ``observe``; the GPUs of
  that pair count as just placed (``ClusterState.placed_at``), so a policy that re-checks fresh pairs sees
  it. The simulator reports a pair when it forms; a physical run after it has watched the pair run long enough
  for the confidence rule of ``collect`` (``profiler.confidence``), and never a pair that fails it.
- **Metrics.** JCT = finish - arrival; queueing delay = first start - arrival; realized slowdown = (finish -
  first start) x the speed of its last GPUs / exclusive run time (time preempted counts against it; ``sharewise
  run`` reports it from each job's first step, its process start-up left out). ``RunResult.shared`` says which
  jobs ever had a partner on a GPU (a verdict credits sharing only where jobs shared).
"""

from __future__ import annotations

import math
import time

import numpy as np

from sharewise.datasets.pair import both_orders
from sharewise.engine import transition
from sharewise.engine.cluster import Cluster
from sharewise.engine.policy_types import MAX_JOBS_PER_GPU, ClusterState, Policy, Queue, as_decision, readonly
from sharewise.engine.result import RunResult
from sharewise.engine.table import SlowdownTable
from sharewise.engine.validation import check_placements
from sharewise.engine.world import DONE, QUEUED, RUNNING, Jobs, Observation, World, job_name
from sharewise.errors import InvalidPlacementError, UnknownRateError


class SchedulingLoop:
    """One run of one policy over the jobs of a trace, in a world (see the module docstring).

    ``work`` is each job's exclusive run time on a speed-1.0 GPU (seconds; a world may replace an estimate,
    ``World.lengths``), ``workload`` its id in ``table``, the policy's view. ``line`` and ``job_id`` (optional)
    name the job in messages. ``job_class`` is each job's class of ``cluster.variability`` (required with it).

    A job whose work is not a finite number of seconds >= 0, or whose world reports one, raises
    ``UnknownRateError`` naming it, as does a world whose next event time is NaN: a run that could never end
    stops at once instead of spinning.
    """

    def __init__(
        self,
        *,
        arrival: np.ndarray,
        work: np.ndarray,
        gpus: np.ndarray,
        workload: np.ndarray,
        line: np.ndarray,
        policy: Policy,
        table: SlowdownTable,
        world: World,
        cluster: Cluster,
        slo: float = 2.0,
        name: str = "policy",
        validate: bool = True,
        observe: bool = True,
        round_s: float | None = None,
        job_class: np.ndarray | None = None,
        job_id: np.ndarray | None = None,
    ) -> None:
        self.policy = policy
        self.preemptive = bool(getattr(policy, "preemptive", False))
        self.replaces = bool(getattr(policy, "replaces_running", False))
        self.shares = bool(getattr(policy, "shares_gpus", True))
        self.table = table  # the policies' knowledge of interference, learning what the world observes
        self.world = world
        self.name = name
        self.slo = float(slo)
        self.validate = validate
        self.observe = observe
        self.round_s = round_s
        self.line = line
        self.job_id = job_id
        self.began = time.perf_counter()
        n = self.n = int(arrival.shape[0])
        self.n_gpus = cluster.n_gpus
        self.speed = cluster.speed_array()
        self.node = cluster.node_array()
        self.cross = float(cluster.cross_node_slowdown)

        self.arrival = np.asarray(arrival, dtype=float)
        self.duration = np.asarray(work, dtype=float)
        bad = ~(np.isfinite(self.duration) & (self.duration >= 0))
        if bad.any():
            self._refuse_work(int(np.argmax(bad)), float(self.duration[np.argmax(bad)]))
        self.ngpus = np.asarray(gpus, dtype=np.int64)
        self.wl = np.asarray(workload, dtype=np.int64)
        self.wl_list = self.wl.tolist()
        # Per class and GPU, the speed a job of that class makes there; without variability one class, whose
        # row is the GPU speeds (and ``job_class_list`` is None: the worlds read ``speed``).
        variability = cluster.variability
        self.class_speed = self.speed[None, :] if variability is None else variability.speeds()
        if variability is not None and job_class is None:
            raise ValueError("a cluster with per-class variability needs each job's class (job_class)")
        self.job_class = np.zeros(n, np.int64) if variability is None else np.asarray(job_class, dtype=np.int64)
        self.job_class_list = None if variability is None else self.job_class.tolist()

        self.remaining = self.duration.copy()  # exact as of each job's last progress report
        self.attained = np.zeros(n)  # GPU-seconds run
        self.counted = np.zeros(n)  # when each running job's service was last counted
        self.start = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.eff_speed = np.ones(n)  # speed the job would have alone on its GPUs, for the realized slowdown
        self.eff_cross = np.ones(n)
        self.status = np.zeros(n, dtype=np.int8)
        self.job_gpus: list[list[int]] = [[] for _ in range(n)]
        self.restarts = np.zeros(n, dtype=np.int64)
        self.shared = np.zeros(n, dtype=bool)  # jobs that ever had a partner on one of their GPUs

        self.slots = transition.Slots(self.n_gpus)
        self.resident, self.occupancy = self.slots.resident, self.slots.occupancy
        self.placed_at = np.full(self.n_gpus, np.nan)  # when each GPU's newest job was placed there
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
            preempt_delay_s=float(cluster.preempt_delay_s),
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
        self.observed: set[tuple[int, int]] = set()  # workload pairs the view holds measured (both orders)
        self.learned: list[tuple[int, int, float, float]] = []  # what the view learned, in order
        self.queue = np.empty(0, dtype=np.int64)
        self._view: tuple[np.ndarray, Queue] | None = None
        self.next_arrival = 0
        self.wake = math.inf  # when the policy asked to be called again
        self.last = 0.0
        self.calls = 0
        self.events = 0
        self.preemptions = 0
        self.migrations = 0
        self._replaced: dict[int, tuple[int, ...]] = {}  # jobs the current decision stopped -> their GPUs
        self.jobs = Jobs(
            ngpus=readonly(self.ngpus), workload=self.wl_list, status=readonly(self.status), gpus=self.job_gpus,
            resident=readonly(self.resident), occupancy=readonly(self.occupancy), speed=readonly(self.speed),
            class_speed=readonly(self.class_speed), job_class=self.job_class_list, cross=readonly(self.eff_cross),
            observed=self.observed, remaining=readonly(self.remaining), job_id=job_id, line=line,
        )
        world.bind(self.jobs)

    # ---- the event loop ------------------------------------------------------------------------------
    def run(self) -> RunResult:
        world = self.world
        while True:
            t_arr = self.arrival[self.next_arrival] if self.next_arrival < self.n else math.inf
            now = world.advance(min(t_arr, self.wake, self._next_round()))
            if now == math.inf:
                break
            if now != now:  # NaN: never inf, never reached; the loop would spin on it forever
                self._refuse_time()
            self.events += 1
            self.busy_seconds += self.slots.busy * (now - self.last)
            self.last = now
            affected: set[int] = set()
            for j, work in world.lengths():
                if not (math.isfinite(work) and work >= 0):
                    self._refuse_work(j, work)
                # A real length replaced an estimate: policies see it from now on, what is left moves with it.
                self.remaining[j] += work - self.duration[j]
                self.duration[j] = work
            for j, status in world.finished(now):
                self._end(j, status, now, affected)
            self._arrive(now)
            woken = now >= self.wake
            if woken:
                self.wake = math.inf
            if self._learn(now):
                woken = True  # a measurement came in: a preemptive policy may act on it
            placed = self._schedule(now, affected, woken) if self._may_schedule(now) else False
            for j in sorted(affected):
                if self.status[j] == RUNNING:
                    self._account(now, *world.progress(now, (j,)))
                    world.rate_changed(j, now)
            self._learn(now)
            if not placed:
                self._check_progress()
        return self._result()

    def _waiting_work(self) -> bool:
        """Whether a policy call now could start something: jobs wait and a slot is free (or it preempts);
        for a policy that never shares, a queued job fits on the free GPUs; one that re-places running jobs
        while any runs."""
        if self.replaces and self.slots.busy:
            return True
        if not self.queue.shape[0]:
            return False
        if self.preemptive:
            return True
        if not self.shares:
            return self.n_gpus - self.slots.busy >= int(self.ngpus[self.queue].min())
        return self.slots.free_slots > 0

    def _next_round(self) -> float:
        """The next round boundary at or after the last event, while work waits; inf otherwise."""
        if self.round_s is None or not self._waiting_work():
            return math.inf
        k = math.ceil(self.last / self.round_s - 1e-12)
        t = k * self.round_s
        return t if t > self.last or self.events == 0 else (k + 1) * self.round_s

    def _may_schedule(self, now: float) -> bool:
        if self.round_s is None:
            return True
        k = round(now / self.round_s)
        return abs(now - k * self.round_s) <= self.world.tolerance(now)

    def _end(self, j: int, status: int, now: float, affected: set[int]) -> None:
        """Job ``j`` ended now (done, or failed in a physical run): count its service, free its GPUs."""
        self._account(now, np.array([j]), np.zeros(1))
        if status == DONE:
            self.remaining[j] = 0.0
        self.status[j] = status
        self.finish[j] = now
        affected.discard(j)
        self._vacate(j, affected)

    def _vacate(self, j: int, affected: set[int]) -> None:
        """Take job ``j`` off its GPUs; a partner left alone there changes rate."""
        for partner in self.slots.vacate(j, self.job_gpus[j]):
            affected.add(partner)
        self.job_gpus[j] = []

    def _arrive(self, now: float) -> None:
        first = self.next_arrival
        while self.next_arrival < self.n and self.arrival[self.next_arrival] <= now:
            self.next_arrival += 1
        if self.next_arrival > first:
            self.status[first : self.next_arrival] = QUEUED
            self.queue = np.concatenate([self.queue, np.arange(first, self.next_arrival)])

    def _schedule(self, now: float, affected: set[int], woken: bool = False) -> bool:
        """Show the policy the queue and the cluster; apply its decision. Return whether it started any job.

        ``woken``: the policy asked to be called now (or a measurement came in); a preemptive one then runs
        even with no job waiting."""
        if not (self._waiting_work() or (woken and self.preemptive)):
            return False
        self._account(now, *self.world.progress(now))
        queue = self.queue
        q = self._queue_view(queue)
        self.calls += 1
        decision = as_decision(self.policy(q, self.state, self.table, now))
        if decision.wake_at < math.inf:
            self.wake = max(float(decision.wake_at), now)
        again = {int(p.job): tuple(sorted(int(g) for g in p.gpus)) for p in decision.start} if decision.preempt else {}
        self._replaced = {}
        stopped = [self._preempt(int(j), now, affected, again.get(int(j))) for j in decision.preempt]
        if stopped:
            queue = self.queue = np.sort(np.concatenate([queue, np.array(stopped, dtype=np.int64)]))
            q = self._queue_view(queue)
        if not decision.start:
            return bool(stopped)
        if self.validate:
            check_placements(decision.start, q, self.state, self.table, self.name)
        for p in decision.start:
            self._start(p, now, affected)
        self._replaced = {}
        self.queue = queue[self.status[queue] == QUEUED]
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

    def _preempt(self, j: int, now: float, affected: set[int], again: tuple[int, ...] | None = None) -> int:
        """Stop running job ``j`` now: it keeps its progress and returns to the queue. ``again``: the GPUs the
        same decision starts it on (a re-placement: on the same GPUs it keeps running, the world not told)."""
        if self.status[j] != RUNNING:
            raise InvalidPlacementError(f"policy {self.name!r} preempted job {j}, which is not running")
        self.status[j] = QUEUED
        affected.discard(j)
        was = tuple(sorted(self.job_gpus[j]))
        self._replaced[j] = was
        if again != was:
            self._account(now, *self.world.progress(now, (j,)))
            self.world.stopped(j, now)  # still on its GPUs: the world may note where it was
        self._vacate(j, affected)
        self.preemptions += 1
        return j

    def _start(self, p, now: float, affected: set[int]) -> int:
        """Put job ``p.job`` on ``p.gpus`` now; its partners' rates change with it."""
        j = int(p.job)
        gs = [int(g) for g in p.gpus]
        if not self.validate and self.status[j] != QUEUED:
            raise InvalidPlacementError(f"policy {self.name!r} placed job {j}, which is not queued")
        was = self._replaced.pop(j, None)  # stopped by this same decision: re-placed, not preempted
        kept = was is not None and was == tuple(sorted(gs))
        if was is not None:
            self.preemptions -= 1
            self.migrations += not kept
        restart = bool(not kept and self.status[j] == QUEUED and math.isfinite(self.start[j]))
        if restart:
            self.restarts[j] += 1
        elif not kept:
            self.start[j] = now
        self.status[j] = RUNNING
        self.job_gpus[j] = gs
        for g in gs:
            partner = self.slots.place(j, g)
            if partner >= 0:
                affected.add(partner)
                self.shared[j] = self.shared[partner] = True
            if not kept:
                self.placed_at[g] = now
        speed = self.speed if self.job_class_list is None else self.class_speed[self.job_class_list[j]]
        sp = speed[gs].min()
        spans = len({int(self.node[g]) for g in gs}) > 1
        self.eff_cross[j] = self.cross if spans else 1.0
        self.eff_speed[j] = sp / self.eff_cross[j]
        affected.add(j)
        if not kept:
            self.remaining[j] += self.world.started(j, gs, now, restart)
            self.counted[j] = now
        return j

    def _account(self, now: float, jobs: np.ndarray, work: np.ndarray) -> None:
        """The one rule of progress: each of ``jobs`` did ``work`` (exclusive seconds, the world's report) and
        ran on its GPUs since it was last counted, up to ``now``."""
        if len(jobs):
            self.remaining[jobs] -= work
            self.attained[jobs] += self.ngpus[jobs] * (now - self.counted[jobs])
            self.counted[jobs] = now

    def catch_up(self, now: float) -> None:
        """Bring every running job's remaining work and attained service up to ``now`` (``World.progress``), as
        between two events before a snapshot: the snapshot then holds each job's progress so far."""
        self._account(now, *self.world.progress(now))

    def _learn(self, now: float) -> bool:
        """Take the world's new measurements into the policies' view (with ``observe``); return whether any
        came in."""
        found = self.world.observations()
        if not found:
            return False
        if self.observe:
            a = np.array([self.wl_list[o.a] for o in found], dtype=np.int64)
            b = np.array([self.wl_list[o.b] for o in found], dtype=np.int64)
            self.table = learn(self.table, a, b, np.array([o.slowdown_a for o in found]),
                              np.array([o.slowdown_b for o in found]))
            self.observed.update(zip(a.tolist(), b.tolist(), strict=True))
            self.learned.extend((o_a, o_b, o.slowdown_a, o.slowdown_b)
                                for o_a, o_b, o in zip(a.tolist(), b.tolist(), found, strict=True))
            self.observed.update(zip(b.tolist(), a.tolist(), strict=True))
            for o in found:
                for g in set(self.job_gpus[o.a]) & set(self.job_gpus[o.b]):
                    self.placed_at[g] = now
        return True

    # ---- stopping and resuming (physical runs) --------------------------------------------------------
    def snapshot(self) -> dict:
        """The loop's state between two events, as plain JSON values (``restore`` takes it back; ``catch_up``
        first, for each running job's progress up to the moment of the snapshot).

        Example: ``{"now": 312.4, "status": [3, 2, 1], "start": [0.0, 40.2, None], ..., "queue": [2]}``.
        """
        def floats(a):
            return [None if not math.isfinite(x) else float(x) for x in a.tolist()]

        return {
            "now": self.last, "status": self.status.tolist(), "start": floats(self.start),
            "finish": floats(self.finish), "remaining": self.remaining.tolist(), "attained": self.attained.tolist(),
            "restarts": self.restarts.tolist(), "next_arrival": self.next_arrival, "queue": self.queue.tolist(),
            "wake": None if self.wake == math.inf else self.wake, "calls": self.calls, "events": self.events,
            "preemptions": self.preemptions, "migrations": self.migrations, "busy_seconds": self.busy_seconds,
            "learned": [list(x) for x in self.learned], "work": self.duration.tolist(),
            "shared": self.shared.tolist(),
        }

    def restore(self, snap: dict) -> None:
        """Continue from ``snapshot()``: finished jobs stay finished; jobs that were running wait in the queue
        with the work they had left (their processes are gone) and start again from there."""
        def floats(a):
            return np.array([math.nan if x is None else x for x in a], dtype=float)

        self.last = float(snap["now"])
        status = np.array(snap["status"], dtype=np.int8)
        status[status == RUNNING] = QUEUED
        self.status[:] = status
        self.start[:] = floats(snap["start"])
        self.finish[:] = floats(snap["finish"])
        self.remaining[:] = snap["remaining"]
        self.attained[:] = snap["attained"]
        self.restarts[:] = snap["restarts"]
        self.duration[:] = snap.get("work", self.duration)
        self.shared[:] = snap.get("shared", self.shared)
        self.next_arrival = int(snap["next_arrival"])
        self.queue = np.flatnonzero(self.status == QUEUED).astype(np.int64)
        self.wake = math.inf if snap["wake"] is None else float(snap["wake"])
        if self.queue.shape[0]:
            self.wake = min(self.wake, self.last)  # the jobs that were running wait: call the policy at once
        self.counted[:] = self.last
        self.calls, self.events, self.preemptions = snap["calls"], snap["events"], snap["preemptions"]
        self.migrations = int(snap.get("migrations", 0))
        self.busy_seconds = float(snap["busy_seconds"])
        learned = snap.get("learned", [])
        if learned and self.observe:
            a, b, s_ab, s_ba = (np.array(x) for x in zip(*learned, strict=True))
            self.table = learn(self.table, a.astype(np.int64), b.astype(np.int64), s_ab, s_ba)
            self.learned = [tuple(x) for x in learned]
            self.observed.update(zip(a.tolist(), b.tolist(), strict=True))
            self.observed.update(zip(b.tolist(), a.tolist(), strict=True))

    def _check_progress(self) -> None:
        """Refuse a run that can never end: jobs wait on an idle cluster with nothing left to happen."""
        if not self.queue.shape[0] or self.next_arrival < self.n or self.wake < math.inf:
            return
        if self._next_round() < math.inf and self.slots.free_slots:
            return  # the next round boundary will call the policy
        if not self.world.pending():
            raise InvalidPlacementError(
                f"policy {self.name!r} left {self.queue.shape[0]} job(s) waiting on an idle cluster with no "
                f"arrivals left (first: trace line {int(self.line[self.queue[0]])}); it would never "
                "finish"
            )

    def _refuse_work(self, j: int, work: float) -> None:
        who = job_name(j, self.job_id, self.line)
        raise UnknownRateError(
            f"policy {self.name!r}: {who} has work {work} s; expected a finite number of seconds >= 0 (its "
            "length, or the step time or start-up it is measured in, is unknown); give the job's length (steps or "
            "duration_s) or measure its step time"
        )

    def _refuse_time(self) -> None:
        running = [job_name(int(j), self.job_id, self.line) for j in np.flatnonzero(self.status == RUNNING)]
        raise UnknownRateError(
            f"policy {self.name!r}: the world's next event time is NaN at {self.last:.3f} s (a running job's rate "
            f"or remaining work is not a number); running: {', '.join(running[:5]) or 'none'}; the run would "
            "never end"
        )

    def realized_slowdown(self) -> np.ndarray:
        """Each job's realized slowdown: (finish - first start) x the speed of its last GPUs / its exclusive run
        time (NaN for a job that did not finish; time preempted counts against it)."""
        return (self.finish - self.start) * self.eff_speed / self.duration

    def _result(self) -> RunResult:
        realized = self.realized_slowdown()
        result = RunResult(
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
            shared=self.shared.copy(),
            status=self.status.copy(),
            restarts=self.restarts.copy(),
            gpus=self.ngpus,
        )
        result.metrics = result.compute_metrics()
        return result


def learn(view: SlowdownTable, a: np.ndarray, b: np.ndarray, s_ab: np.ndarray, s_ba: np.ndarray) -> SlowdownTable:
    """Return ``view`` holding the measured slowdowns ``s_ab`` (of ``a`` next to ``b``) and ``s_ba`` as certain
    (p10 = p50 = p90) for the workload pairs ``(a, b)``; ``view`` itself where it holds them already."""
    rows, cols = both_orders(a, b)
    values = np.concatenate([s_ab, s_ba])
    if np.all(view.p50[rows, cols] == values) and np.all(view.p90[rows, cols] == values):
        return view
    arrays = [q.copy() for q in (view.p10, view.p50, view.p90)]
    for q in arrays:
        q[rows, cols] = values
    return SlowdownTable(
        view.workloads, *arrays, view.allowed, device_name=view.device_name, source=view.source + "+observed"
    )


__all__ = ["MAX_JOBS_PER_GPU", "Jobs", "Observation", "RunResult", "SchedulingLoop", "World", "learn"]
