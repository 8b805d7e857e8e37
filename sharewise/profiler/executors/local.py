"""The local executor: pair runs one after another on this machine (the default; needs no Ray).

With warm isolation it keeps the campaign's ``WorkerPool``: the campaign profiles in it, and each pair takes
its two workers from it, so a workload's process starts once per campaign instead of once per repeat.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from sharewise.errors import ConfigError
from sharewise.profiler.executors.base import ExecutorOptions
from sharewise.profiler.pair import PairTask, empty_row, measure_pair
from sharewise.profiler.pool import WorkerPool

if TYPE_CHECKING:
    from sharewise.profiler.config import RunConfig


class LocalExecutor:
    """Runs pair measurements one after another on this machine, on the workers of ``pool``."""

    name = "local"
    spans_nodes = False

    def __init__(
        self,
        config: RunConfig,
        device_name: str,
        extra_env: dict[str, str] | None = None,
        options: ExecutorOptions = ExecutorOptions(),  # noqa: B008 - frozen, so one shared default is safe
    ) -> None:
        self.check(options)
        self.config = config
        self.device_name = device_name
        self.extra_env = extra_env
        self.pool = WorkerPool(config, extra_env, reuse=config.isolation == "warm")

    @classmethod
    def check(cls, options: ExecutorOptions) -> None:
        if options.address:
            raise ConfigError("--address is for --executor ray; the local executor runs on this machine")

    def run(self, tasks: Sequence[PairTask]) -> Iterator[dict]:
        for task in tasks:
            try:
                yield measure_pair(task, self.config, self.device_name, self.extra_env, pool=self.pool)
            except Exception as exc:  # a bug or a broken machine: record it, keep the campaign going
                yield empty_row(task, self.config, self.device_name, "failed", f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        self.pool.close()
