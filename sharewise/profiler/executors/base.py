"""What every executor is: one constructor signature, ``check`` before any run, ``run`` and ``close``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    from sharewise.profiler.config import RunConfig
    from sharewise.profiler.pair import PairTask


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


class Executor(Protocol):
    """Runs pair tasks and yields one pairs-table row per task, in the order they finish.

    Constructed as ``cls(config, device_name, extra_env, options)``; ``cls.check(options)`` fails early
    (before any profile or run) on options it cannot use or a missing dependency. ``spans_nodes``: rows
    carry the device name of the node that ran them (resume then matches any node of the device kind).
    An executor that keeps warm workers on this machine exposes them as ``pool`` (a ``WorkerPool``), and
    the campaign runs its solo profiles there too; one without (Ray) has ``pool = None``.
    """

    name: ClassVar[str]
    spans_nodes: ClassVar[bool]

    def __init__(
        self, config: RunConfig, device_name: str, extra_env: dict[str, str] | None, options: ExecutorOptions
    ) -> None: ...

    @classmethod
    def check(cls, options: ExecutorOptions) -> None: ...

    def run(self, tasks: Sequence[PairTask]) -> Iterator[dict]: ...

    def close(self) -> None: ...
