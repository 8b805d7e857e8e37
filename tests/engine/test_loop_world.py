"""The scheduling loop driven through the ``World`` protocol alone, by a world that reports what a script says.

``ScriptedWorld`` is a world of this test, not of sharewise: it runs nothing and measures nothing; at the times
of its script jobs end or their length becomes known, a running job does ``rate`` seconds of work per second, a
restart costs what the script says, and every call the loop makes is logged. What the loop keeps of each job
(remaining work, attained service, status, restarts) must follow the one rule of ``engine.loop`` from these
reports, whatever world sends them; the expectations below are worked out by hand.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from sharewise.engine.cluster import Cluster
from sharewise.engine.loop import SchedulingLoop
from sharewise.engine.policy_types import Decision, Placement
from sharewise.engine.result import RunResult
from sharewise.engine.table import SlowdownTable
from sharewise.engine.world import DONE, FAILED, RUNNING, Jobs, Observation


class Stopped(Exception):
    """The script stopped the run (as a signal stops a physical one)."""


class ScriptedWorld:
    """A ``World`` that reports what ``script`` says: ``{time: {"end": [(job, DONE or FAILED)], "length": [(job,
    work)], "stop": True}}`` (``stop``: ``advance`` raises ``Stopped`` there); a running job does ``rate`` work per
    second; a restart costs ``restart_cost``. ``log`` holds every call the loop made, in order."""

    def __init__(self, script: dict[float, dict], rate: float = 1.0, restart_cost: float = 0.0) -> None:
        self.script = dict(script)
        self.rate = rate
        self.restart_cost = restart_cost
        self.now = 0.0
        self.since: dict[int, float] = {}
        self.log: list[tuple] = []
        self._ended: list[tuple[int, int]] = []
        self._lengths: list[tuple[int, float]] = []

    def tolerance(self, now: float) -> float:
        return 1e-9

    def bind(self, jobs: Jobs) -> None:
        self.jobs = jobs

    def advance(self, until: float) -> float:
        due = min((t for t in self.script if t > self.now), default=math.inf)
        if due > until:
            self.now = until
            return until
        if due == math.inf:
            return math.inf
        self.now = due
        happens = self.script.pop(due)
        if happens.get("stop"):
            raise Stopped(due)
        self._ended += happens.get("end", [])
        self._lengths += happens.get("length", [])
        return due

    def finished(self, now: float) -> list[tuple[int, int]]:
        ended, self._ended = self._ended, []
        return ended

    def progress(self, now: float, jobs=None) -> tuple[np.ndarray, np.ndarray]:
        if jobs is None:
            jobs = np.flatnonzero(self.jobs.status == RUNNING).tolist()
        work = np.array([self.rate * (now - self.since[j]) for j in jobs])
        for j in jobs:
            self.since[j] = now
        self.log.append(("progress", now, tuple(jobs)))
        return np.array(jobs, dtype=np.int64), work

    def started(self, job: int, gpus: list[int], now: float, restart: bool) -> float:
        self.since[job] = now
        self.log.append(("started", job, tuple(gpus), now, restart))
        return self.restart_cost if restart else 0.0

    def stopped(self, job: int, now: float) -> None:
        self.log.append(("stopped", job, now))

    def rate_changed(self, job: int, now: float) -> None:
        self.log.append(("rate_changed", job, now))

    def observations(self) -> list[Observation]:
        return []

    def lengths(self) -> list[tuple[int, float]]:
        found, self._lengths = self._lengths, []
        return found

    def pending(self) -> bool:
        return any(happens.get("end") for happens in self.script.values())


def _table() -> SlowdownTable:
    return SlowdownTable(["w"], [[1.5]], [[1.5]], [[1.5]], [[True]], device_name="d", source="measured")


def _loop(world: ScriptedWorld, policy, arrival, work, n_gpus: int = 1) -> SchedulingLoop:
    n = len(arrival)
    return SchedulingLoop(arrival=np.array(arrival, dtype=float), work=np.array(work, dtype=float),
                          gpus=np.ones(n, dtype=np.int64), workload=np.zeros(n, dtype=np.int64),
                          line=np.arange(2, n + 2), policy=policy, table=_table(), world=world,
                          cluster=Cluster(n_gpus=n_gpus, gpus_per_node=n_gpus))


def test_the_loop_keeps_each_jobs_account_from_what_the_world_reports():
    """One GPU. A (10 s of work) starts at 0 and does 2 s of work per second; B (6 s) arrives at 3 and takes the
    GPU, A paused with 10 - 2 x 3 = 4 s left and 3 GPU-seconds of service. The world ends B at 5 (done: nothing
    left, 2 GPU-seconds); A restarts and its restart costs 1.5 s (5.5 left); at 6 the world learns A's real length,
    12 s (2 more: 7.5 left, its work 12); at 8 A fails, after 3 + 3 GPU-seconds. The metrics are over B alone."""
    seen = []

    def policy(queue, cluster, table, now):
        seen.append((now, dict(zip(queue.job.tolist(), queue.remaining.tolist(), strict=True)),
                     dict(zip(queue.job.tolist(), queue.attained.tolist(), strict=True)),
                     cluster.job_remaining.tolist(), cluster.job_attained.tolist()))
        if now == 0:
            return Decision(start=[Placement(0, (0,))])
        if now == 3:
            return Decision(start=[Placement(1, (0,))], preempt=(0,))
        return Decision(start=[Placement(0, (0,))])

    policy.preemptive = True
    world = ScriptedWorld({5.0: {"end": [(1, DONE)]}, 6.0: {"length": [(0, 12.0)]}, 8.0: {"end": [(0, FAILED)]}},
                          rate=2.0, restart_cost=1.5)
    loop = _loop(world, policy, [0.0, 3.0], [10.0, 6.0])
    result = loop.run()

    assert seen == [
        (0.0, {0: 10.0}, {0: 0.0}, [10.0, 6.0], [0.0, 0.0]),
        (3.0, {1: 6.0}, {1: 0.0}, [4.0, 6.0], [3.0, 0.0]),
        (5.0, {0: 4.0}, {0: 3.0}, [4.0, 0.0], [3.0, 2.0]),
    ]
    assert loop.remaining.tolist() == [7.5, 0.0] and loop.attained.tolist() == [6.0, 2.0]
    assert world.log == [
        ("progress", 0.0, ()), ("started", 0, (0,), 0.0, False), ("progress", 0.0, (0,)), ("rate_changed", 0, 0.0),
        ("progress", 3.0, (0,)), ("progress", 3.0, (0,)), ("stopped", 0, 3.0), ("started", 1, (0,), 3.0, False),
        ("progress", 3.0, (1,)), ("rate_changed", 1, 3.0),
        ("progress", 5.0, ()), ("started", 0, (0,), 5.0, True), ("progress", 5.0, (0,)), ("rate_changed", 0, 5.0),
    ]
    assert result.status.tolist() == [FAILED, DONE] and result.done().tolist() == [False, True]
    assert result.restarts.tolist() == [1, 0] and result.gpus.tolist() == [1, 1]
    assert result.start.tolist() == [0.0, 3.0] and result.finish.tolist() == [8.0, 5.0]
    assert result.duration.tolist() == [12.0, 6.0]  # the length learned is the job's work from then on
    m = result.metrics
    assert (m["avg_jct"], m["avg_queue"], m["makespan"], m["preemptions"]) == (2.0, 0.0, 8.0, 1)


def test_a_partners_progress_is_taken_before_its_rate_changes_and_a_snapshot_holds_it():
    """Two GPUs, a policy that puts every job on GPU 0, 1 s of work per second. A (10 s) starts at 0; B (5 s) joins
    it at 2: A's 2 s of work so far are taken (8 left), then it is told its rate changed; then B's (none yet). At 4
    A ends: B, alone now, has its 2 s taken (3 left) before its rate changes. The run stops at 4.5; ``catch_up``
    brings B's account to 4.5 (2.5 left, 2.5 GPU-seconds) for the snapshot, and a loop restored from it starts B
    again with those 2.5 s."""

    def onto_gpu_0(queue, cluster, table, now):
        return [Placement(int(j), (0,)) for j in queue.job]

    world = ScriptedWorld({4.0: {"end": [(0, DONE)]}, 4.5: {"stop": True}})
    loop = _loop(world, onto_gpu_0, [0.0, 2.0], [10.0, 5.0], n_gpus=2)
    assert not loop.jobs.remaining.flags.writeable and not loop.jobs.status.flags.writeable  # a world only reads
    with pytest.raises(ValueError):
        loop.jobs.remaining[0] = 0.0
    with pytest.raises(Stopped):
        loop.run()
    joined = world.log.index(("started", 1, (0,), 2.0, False))
    assert world.log[joined + 1:joined + 7] == [
        ("progress", 2.0, (0,)), ("rate_changed", 0, 2.0), ("progress", 2.0, (1,)), ("rate_changed", 1, 2.0),
        ("progress", 4.0, (1,)), ("rate_changed", 1, 4.0),
    ]
    assert loop.remaining.tolist() == [0.0, 3.0] and loop.attained.tolist() == [4.0, 2.0]
    loop.catch_up(4.5)
    snap = loop.snapshot()
    assert snap["remaining"] == [0.0, 2.5] and snap["attained"] == [4.0, 2.5] and snap["status"] == [DONE, RUNNING]

    resumed = _loop(ScriptedWorld({7.0: {"end": [(1, DONE)]}}), onto_gpu_0, [0.0, 2.0], [10.0, 5.0], n_gpus=2)
    resumed.restore(snap)
    assert resumed.queue.tolist() == [1] and resumed.remaining.tolist() == [0.0, 2.5] and resumed.last == 4.0
    result = resumed.run()  # its clock goes on from the snapshot's last event, 4 s: B restarts there
    assert result.start.tolist() == [0.0, 2.0] and result.finish.tolist() == [4.0, 7.0]
    assert result.restarts.tolist() == [0, 1]
    assert resumed.attained.tolist() == [4.0, 5.5]  # 2.5 GPU-seconds before the stop, 3 from 4 to 7


def test_a_result_reads_back_from_its_json_as_it_was():
    """``run.json`` keeps a physical run's result whole, so a later call that keeps the run compares it as it was."""
    world = ScriptedWorld({5.0: {"end": [(1, DONE)]}, 8.0: {"end": [(0, FAILED)]}})
    result = _loop(world, lambda q, c, t, now: [Placement(int(j), (int(j),)) for j in q.job],
                   [0.0, 3.0], [10.0, 6.0], n_gpus=2).run()
    back = RunResult.from_json(json.loads(json.dumps(result.to_json())))
    for name in ("arrival", "duration", "start", "finish", "realized_slowdown", "shared", "status", "restarts", "gpus"):
        assert np.array_equal(getattr(back, name), getattr(result, name), equal_nan=name != "shared"), name
    assert back.metrics == result.metrics and back.status.tolist() == [FAILED, DONE]
    # GPU 0 busy from 0 to 8, GPU 1 from 3 to 5: 10 GPU-seconds.
    assert (back.busy_gpu_seconds, back.n_gpus, back.slo, back.policy_calls) == (10.0, 2, 2.0, result.policy_calls)
