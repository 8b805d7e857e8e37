"""What the scheduling loop asks of the world behind it (``World``: the simulated one, ``simulator.SimWorld``, or a
physical run's, ``sharewise.runtime.world.RealWorld``): the job states, what a world may read of the loop's jobs
(``Jobs``) and what it reports (progress, ends, measurements as ``Observation``, lengths)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

#: Job states, kept by the loop and read by its world: not arrived yet, waiting in the queue (a preempted job
#: too), on its GPUs, ended done, ended failed (a physical job whose process died).
WAITING, QUEUED, RUNNING, DONE, FAILED = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class Observation:
    """Measured slowdowns of jobs ``a`` and ``b`` next to each other (each one's rate alone over its rate
    while they shared a GPU). Example: ``Observation(a=3, b=7, slowdown_a=1.42, slowdown_b=1.18)``."""

    a: int
    b: int
    slowdown_a: float
    slowdown_b: float


@dataclass(frozen=True)
class Jobs:
    """The loop's jobs and GPUs as its world sees them, handed over once (``World.bind``).

    The loop owns every array and keeps it current; the world reads them and never writes them (the arrays
    are read-only views). ``remaining`` is each job's exclusive seconds of work left on a speed-1.0 GPU, as
    the loop keeps it from what the world reports (``World.progress``, ``World.started``, ``World.lengths``):
    a simulated world predicts a running job's end from it.

    Example (two jobs, one GPU, job 0 running alone): ``Jobs(ngpus=[1, 1], workload=[0, 3], status=[2, 1],
    gpus=[[0], []], resident=[[0, -1]], occupancy=[1], speed=[1.0], class_speed=[[1.0]], job_class=None,
    cross=[1.0, 1.0], observed=set(), remaining=[35.0, 10.0], job_id=["a", "b"], line=[2, 3])``.
    """

    ngpus: np.ndarray  # GPUs each job asks for
    workload: list[int]  # each job's workload id in the tables
    status: np.ndarray  # each job's state (``WAITING`` ... ``FAILED``)
    gpus: list[list[int]]  # the GPUs each running job holds (empty otherwise)
    resident: np.ndarray  # (GPUs, 2): the jobs in each GPU's slots, -1 for none
    occupancy: np.ndarray  # jobs on each GPU
    speed: np.ndarray  # each GPU's speed factor
    class_speed: np.ndarray  # (classes, GPUs): a job class's speed on each GPU (one row without variability)
    job_class: list[int] | None  # each job's class, None without variability (read ``speed``)
    cross: np.ndarray  # each running job's cross-node slowdown (1.0 within a node)
    observed: set[tuple[int, int]]  # workload pairs the policies' table holds measured, both orders
    remaining: np.ndarray  # the loop's account of each job's work left
    job_id: np.ndarray | None = None  # each job's id in the trace, for messages (None: its index)
    line: np.ndarray | None = None  # each job's trace line, for messages

    def name(self, j: int) -> str:
        """Job ``j`` as a message names it: ``job 'j01' (trace line 3)``."""
        return job_name(j, self.job_id, self.line)

    def speed_of(self, j: int) -> np.ndarray:
        """The GPU speeds job ``j`` runs at: its class's, or every job's without variability."""
        return self.speed if self.job_class is None else self.class_speed[self.job_class[j]]


def job_name(j: int, job_id=None, line=None) -> str:
    """Job ``j`` as a message names it: its id and trace line where known (``job 'j01' (trace line 3)``), else
    its index (``job 4``)."""
    who = f"job {str(job_id[j])!r}" if job_id is not None else f"job {j}"
    return who + (f" (trace line {int(line[j])})" if line is not None else "")


class World(Protocol):
    """What runs the jobs behind the loop. Times are seconds since the run began; job ids index the trace.

    The loop owns the cluster slots, the queue, each job's state and its account of each job's progress; the
    world moves time forward and reports what happened: the work the running jobs did (``progress``) and
    what a start costs (``started``), the jobs that ended (``finished``), the pairs it measured
    (``observations``) and the jobs whose length it learned (``lengths``). From these the loop keeps each
    job's remaining work and attained service with one rule (``loop.SchedulingLoop``), in a simulation and in
    a physical run alike.
    """

    def tolerance(self, now: float) -> float:
        """Two event times near ``now`` closer than this are the same instant (round boundaries)."""

    def bind(self, jobs: Jobs) -> None:
        """Called once before the first event, with the loop's jobs (``Jobs``: what the world reads)."""

    def advance(self, until: float) -> float:
        """Move time to the next event of the world (a job ends, a measurement arrives) or ``until``,
        whichever comes first; return the new time (``inf``: nothing will ever happen again)."""

    def finished(self, now: float) -> list[tuple[int, int]]:
        """Return ``(job, DONE or FAILED)`` for the jobs that ended by ``now``, in the order they ended."""

    def progress(self, now: float, jobs: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(jobs, work)``: the work (exclusive seconds on a speed-1.0 GPU) each job did since its
        last report, up to ``now``, for ``jobs`` (None: every running job). Example: ``(array([0, 4]),
        array([12.5, 3.0]))``."""

    def started(self, job: int, gpus: list[int], now: float, restart: bool) -> float:
        """Job ``job`` was placed on ``gpus`` (already in ``Jobs.resident``); ``restart``: it ran before.
        Return the work the start adds to the job (a restart's set-up; 0.0 where it costs nothing)."""

    def stopped(self, job: int, now: float) -> None:
        """Running job ``job`` is preempted (``Jobs.gpus[job]`` still names its GPUs; it leaves them next); the
        loop took its progress up to ``now`` just before (a physical job's last steps before its pause come in
        its next report)."""

    def rate_changed(self, job: int, now: float) -> None:
        """Running job ``job`` got or lost a partner on one of its GPUs at ``now``; the loop took its progress up
        to ``now`` just before."""

    def observations(self) -> list[Observation]:
        """Measured slowdowns of sharing jobs since the last call (empty where nothing new was measured)."""

    def lengths(self) -> list[tuple[int, float]]:
        """``(job, work)`` for the jobs whose work (exclusive seconds on a speed-1.0 GPU) the world learned anew
        since the last call: a physical job's real length replacing an estimate. The loop takes it as the
        job's work from then on (what policies see, and the realized slowdown's base), its remaining work
        moving by the difference. Empty where nothing changed (always, in a simulation)."""

    def pending(self) -> bool:
        """Whether a running job will still end (a run with jobs waiting and none pending never ends)."""
