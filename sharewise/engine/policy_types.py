"""The types every policy shares: the queue, the cluster state, a placement, a decision, and ``Policy``.

A policy is a pure function ``policy(queue, cluster, table, now) -> list[Placement] | Decision``. Most return
the placements to start now; a preemptive policy (``preemptive = True`` on the function, e.g. Tiresias)
returns a ``Decision`` that may also stop running jobs and ask to be called again at a given time. A policy
that never shares a GPU says so with ``shares_gpus = False`` on the function: the simulator then calls it
only when a queued job fits on the free GPUs, since it could start nothing otherwise. A policy that places
every running job again at each call (``replaces_running = True``; a job it stops and starts on the same
GPUs keeps running, see ``loop``) is called while any job runs; ``round_based = True`` marks one defined
for rounds (PAL's artifact's), which the event-driven benchmarks leave out. The
loop builds the inputs as numpy views, so a policy can be vectorised over the queue and the GPUs; the
views are read-only, so a policy cannot change the state it is shown.

The rules a policy may use beside these types live in their own modules: ``free_gpus`` (which free GPUs a job
gets), ``queue_order`` (the orders a queue is walked in) and ``validation`` (what a placement must satisfy,
checked by the loop).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from sharewise.engine.table import SlowdownTable

MAX_JOBS_PER_GPU = 2


class Placement(NamedTuple):
    """Start queued job ``job`` on GPUs ``gpus`` (as many as it asked for, each holding at most one more job).

    Example: ``Placement(job=7, gpus=(12, 13))``.
    """

    job: int
    gpus: tuple[int, ...]


class Decision(NamedTuple):
    """A policy's full answer: stop the running jobs ``preempt``, then start ``start`` (on GPUs free after the
    stops); call the policy again at ``wake_at`` (seconds) even if no job arrives or ends by then.

    Example: ``Decision(start=[Placement(4, (0,))], preempt=(2,), wake_at=7200.0)``.
    """

    start: list[Placement]
    preempt: tuple[int, ...] = ()
    wake_at: float = math.inf


def as_decision(answer: list[Placement] | Decision | None) -> Decision:
    """Return a policy's answer as a ``Decision`` (a list of placements starts them, stops nothing)."""
    if isinstance(answer, Decision):
        return answer
    return Decision(start=list(answer or ()))


@dataclass(frozen=True)
class Queue:
    """The waiting jobs, in arrival order; every field is a read-only array of the same length.

    ``job`` is sorted ascending and indexes the caller's job arrays (and ``ClusterState.job_*``);
    ``remaining`` is the job's remaining exclusive run time in seconds on a speed-1.0 GPU (schedulers in the
    SJF family assume it is known); ``workload`` holds ids of the ``SlowdownTable``; ``attained`` the
    service a job received so far in GPU-seconds (GPUs x time run; nonzero for a preempted job), or None.
    """

    job: np.ndarray
    arrival: np.ndarray
    gpus: np.ndarray
    remaining: np.ndarray
    workload: np.ndarray
    attained: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.job.shape[0])

    def __post_init__(self) -> None:
        _freeze(self)

    @classmethod
    def of_new_jobs(cls, n: int) -> Queue:
        """``n`` jobs arrived at 0, one GPU each, of workload 0 and one second of work: a policy's first call.

        >>> len(Queue.of_new_jobs(1))
        1
        """
        return cls(job=np.arange(n), arrival=np.zeros(n), gpus=np.ones(n, dtype=np.int64), remaining=np.ones(n),
                   workload=np.zeros(n, dtype=np.int64), attained=np.zeros(n))


@dataclass(frozen=True)
class ClusterState:
    """GPUs and the jobs on them; arrays are read-only.

    ``resident[g]`` holds up to two job indices on GPU ``g`` (``-1`` marks an empty slot; slot 0 fills first).
    ``node[g]`` and ``speed[g]`` describe the GPU (speed 1.0 = nominal; PAL's performance-variability score).
    ``job_remaining``, ``job_workload``, ``job_ngpus`` (GPUs the job holds), ``job_start`` (when it started)
    and ``job_work`` (its whole exclusive run time) are indexed by job and are meaningful for running jobs
    (queued jobs are described by the ``Queue``); with ``now`` they give a job's slowdown so far. A job
    spanning more than one node runs ``cross_node_slowdown`` times slower: locality-aware policies may weigh
    it. ``slo`` is the operator's bound on a job's realized slowdown (run time over exclusive run time);
    SLO-aware policies respect it; ``preempt_delay_s`` is what restarting a preempted job costs it in
    exclusive run time (``Cluster.preempt_delay_s``). ``job_attained`` (GPU-seconds of service so far) and
    ``job_arrival`` are indexed by job for every job, for policies that rank by attained service (Tiresias).
    ``occupied``,
    if given, is the number of jobs on each GPU as the owner of ``resident`` keeps it (the simulator does);
    ``occupancy()`` copies it instead of counting. ``placed_at``, if given, is when the newest job on each
    GPU was placed there (NaN for a GPU that never held one), so a policy can tell a pair that just formed.
    ``class_speed`` and ``job_class``, if given, are PAL's per-class variability: ``class_speed[c, g]`` is the
    speed of GPU ``g`` for a job of class ``c`` (``job_class``, indexed by job for every job), and ``speed``
    is then a class-blind summary (the geometric mean over classes); ``speed_of(j)`` gives job ``j``'s row.
    """

    resident: np.ndarray
    node: np.ndarray
    speed: np.ndarray
    job_remaining: np.ndarray
    job_workload: np.ndarray
    job_ngpus: np.ndarray
    job_start: np.ndarray
    job_work: np.ndarray
    cross_node_slowdown: float = 1.0
    slo: float = 2.0
    preempt_delay_s: float = 0.0
    job_attained: np.ndarray | None = None
    job_arrival: np.ndarray | None = None
    occupied: np.ndarray | None = None
    placed_at: np.ndarray | None = None
    class_speed: np.ndarray | None = None
    job_class: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.resident.flags.writeable:  # the simulator hands over read-only views already: skip the check
            _freeze(self)

    @property
    def n_gpus(self) -> int:
        return int(self.resident.shape[0])

    @classmethod
    def idle(cls, n_gpus: int, n_jobs: int) -> ClusterState:
        """``n_gpus`` empty GPUs of speed 1.0 on one node, for ``n_jobs`` jobs none of which runs yet."""
        return cls(resident=np.full((n_gpus, 2), -1, dtype=np.int64), node=np.zeros(n_gpus, dtype=np.int64),
                   speed=np.ones(n_gpus), job_remaining=np.ones(n_jobs), job_workload=np.zeros(n_jobs, dtype=np.int64),
                   job_ngpus=np.ones(n_jobs, dtype=np.int64), job_start=np.full(n_jobs, np.nan),
                   job_work=np.ones(n_jobs), job_attained=np.zeros(n_jobs), job_arrival=np.zeros(n_jobs),
                   occupied=np.zeros(n_gpus, dtype=np.int64), placed_at=np.full(n_gpus, np.nan))

    def speed_of(self, job: int) -> np.ndarray:
        """Return the speed of every GPU for job ``job``: its class's row of ``class_speed``, else ``speed``."""
        if self.class_speed is None or self.job_class is None:
            return self.speed
        return self.class_speed[self.job_class[job]]

    def occupancy(self) -> np.ndarray:
        """Return the number of jobs on each GPU (0, 1 or 2), a new array the caller may change."""
        if self.occupied is not None:
            return self.occupied.copy()
        return (self.resident >= 0).sum(axis=1)


Policy = Callable[["Queue", "ClusterState", "SlowdownTable", float], "list[Placement] | Decision"]


def _freeze(obj) -> None:
    """Make every writable array field of a frozen ``Queue`` or ``ClusterState`` a read-only view (no copy).

    What the docstrings promise, for every caller alike; and the compiled kernels see one array type, so a
    kernel is compiled once for the simulator's read-only views and a test's own arrays, not once for each
    (30 compiled specializations instead of 51 in the fast tests, 20 s less on a fresh clone).
    """
    cls = type(obj)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    for name in names:
        value = getattr(obj, name)
        if type(value) is np.ndarray and value.flags.writeable:
            object.__setattr__(obj, name, readonly(value))


_FIELDS: dict[type, tuple[str, ...]] = {}


def readonly(array: np.ndarray) -> np.ndarray:
    """Return a read-only view of ``array`` (no copy)."""
    view = array.view()
    view.flags.writeable = False
    return view
