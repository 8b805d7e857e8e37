"""The local executor: pair runs one after another on this machine (the default; needs no Ray)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from sharewise.errors import ConfigError
from sharewise.profiler.executors.base import ExecutorOptions
from sharewise.profiler.pair import PairTask, empty_row, measure_pair

if TYPE_CHECKING:
    from sharewise.profiler.config import RunConfig


class LocalExecutor:
    """Runs pair measurements one after another on this machine."""

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

    @classmethod
    def check(cls, options: ExecutorOptions) -> None:
        if options.address:
            raise ConfigError("--address is for --executor ray; the local executor runs on this machine")

    def run(self, tasks: Sequence[PairTask]) -> Iterator[dict]:
        for task in tasks:
            try:
                yield measure_pair(task, self.config, self.device_name, self.extra_env)
            except Exception as exc:  # a bug or a broken machine: record it, keep the campaign going
                yield empty_row(task, self.config, self.device_name, "failed", f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        pass
