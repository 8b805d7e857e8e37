"""What every executor is: one constructor signature, ``check`` before any run, tasks in, finished tasks out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from sharewise.profiler.pair import PairTask
from sharewise.profiler.solo import ProfileTask

if TYPE_CHECKING:
    from sharewise.profiler.config import RunConfig

#: What an executor runs: a solo profile or a pair run.
Task = ProfileTask | PairTask


@dataclass(frozen=True)
class ExecutorOptions:
    """Options of an executor, handed over whole; each executor reads the ones it has and refuses the rest.

    ``address``: the cluster to join (Ray: ``host:port`` or ``"auto"``); ``cpus_per_task``: CPUs one task
    holds (Ray on CPU clusters; default a whole node); ``max_retries``: retries of a task whose worker or
    node died (Ray).
    """

    address: str | None = None
    cpus_per_task: int | None = None
    max_retries: int = 2


@dataclass(frozen=True)
class Finished:
    """A task that ran: the row it measured, or why there is none.

    ``row`` is a profiles-table row for a ``ProfileTask`` (None when the profile failed) and a pairs-table
    row for a ``PairTask`` (always: a pair that failed is a row with its status). ``status`` is ``"ok"`` or
    the failure's (``failed``, ``oom``, ``timeout``), ``error`` its one-line reason.

    Example: ``Finished(ProfileTask("ncf", "ncf"), row=None, status="oom", error="CUDA out of memory")``.
    """

    task: Task
    row: dict | None
    status: str = "ok"
    error: str = ""

    @classmethod
    def pair(cls, task: PairTask, row: dict) -> Finished:
        """A finished pair run, its status and error read from its row."""
        return cls(task, row, row["status"], row["error"])


class Executor(Protocol):
    """Runs tasks (solo profiles and pair runs) and hands each back once it finished.

    Constructed as ``cls(config, device_name, extra_env, options)``; ``cls.check(options)`` fails early
    (before anything runs) on options it cannot use or a missing dependency. It owns the worker processes
    its tasks run in and ends them in ``close``. ``spans_nodes``: rows carry the device name of the node that
    ran them (resume then matches any node of the device kind).

    The campaign drives it with one loop (``campaign.run_tasks``): while it ``has_room()``, the next task
    goes to ``submit``; then ``next_finished()`` (blocking until a submitted task finished) hands one back,
    and its row is written before the loop asks for more. ``busy`` counts the tasks submitted and not yet
    handed back. An executor that runs one task at a time has room only when idle, so for it the loop is
    "next task, run, write"; one that spans a cluster has room for every task and hands them back in the
    order they finish.
    """

    name: ClassVar[str]
    spans_nodes: ClassVar[bool]

    def __init__(
        self, config: RunConfig, device_name: str, extra_env: dict[str, str] | None, options: ExecutorOptions
    ) -> None: ...

    @classmethod
    def check(cls, options: ExecutorOptions) -> None: ...

    @property
    def busy(self) -> int: ...

    def has_room(self) -> bool: ...

    def submit(self, task: Task) -> None: ...

    def next_finished(self) -> Finished: ...

    def prepare(self, tasks: Sequence[Task]) -> int:
        """Get ready for ``tasks`` (a campaign's pairs, when all are known in advance) before the first is
        submitted, e.g. start the worker processes they need together; return how many processes started."""
        ...

    def close(self) -> None: ...
