"""What the scheduling loop asks of the world behind it (``World``: the simulated one, ``simulator.SimWorld``, or
a physical run's, ``sharewise.runtime.world.RealWorld``) and the measurements a world reports (``Observation``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sharewise.engine.loop import SchedulingLoop


@dataclass(frozen=True)
class Observation:
    """Measured slowdowns of jobs ``a`` and ``b`` next to each other (each one's rate alone over its rate
    while they shared a GPU). Example: ``Observation(a=3, b=7, slowdown_a=1.42, slowdown_b=1.18)``."""

    a: int
    b: int
    slowdown_a: float
    slowdown_b: float


class World(Protocol):
    """What runs the jobs behind the loop. Times are seconds since the run began; job ids index the trace.

    The loop owns the cluster slots, the queue and each job's ``remaining`` work (exclusive seconds on a
    speed-1.0 GPU), ``attained`` service and status; the world moves time and progress forward.
    """

    def tolerance(self, now: float) -> float:
        """Two event times near ``now`` closer than this are the same instant (round boundaries)."""

    def bind(self, loop: SchedulingLoop) -> None:
        """Called once before the first event, with the loop whose arrays the world reads and updates."""

    def advance(self, until: float) -> float:
        """Move time to the next event of the world (a job ends, a measurement arrives) or ``until``,
        whichever comes first; return the new time (``inf``: nothing will ever happen again)."""

    def finished(self, now: float) -> list[tuple[int, int]]:
        """Return ``(job, DONE or FAILED)`` for the jobs that ended by ``now``, in the order they ended."""

    def refresh(self, now: float) -> None:
        """Bring ``loop.remaining`` and ``loop.attained`` of every running job up to ``now``."""

    def started(self, job: int, gpus: list[int], now: float, restart: bool) -> None:
        """Job ``job`` was placed on ``gpus`` (already in ``loop.resident``); ``restart``: it ran before."""

    def stopped(self, job: int, now: float) -> None:
        """Running job ``job`` is preempted (``loop.job_gpus[job]`` still names its GPUs; it leaves them next)."""

    def rate_changed(self, job: int, now: float) -> None:
        """Running job ``job`` got or lost a partner on one of its GPUs at ``now``."""

    def observations(self) -> list[Observation]:
        """Measured slowdowns of sharing jobs since the last call (empty where nothing new was measured)."""

    def pending(self) -> bool:
        """Whether a running job will still end (a run with jobs waiting and none pending never ends)."""
