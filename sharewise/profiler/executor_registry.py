"""The executor registry on its own, so the CLI's ``--executor`` choices load no executor (each imports the profiler).

``sharewise.profiler.executors`` re-exports ``EXECUTORS``; adding an executor is its module in that package and
one line here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sharewise.registry import Registry

if TYPE_CHECKING:
    from sharewise.profiler.executors.base import Executor

EXECUTORS: Registry[type[Executor]] = Registry(
    "executor",
    "sharewise.profiler.executors",
    {"local": "local:LocalExecutor", "ray": "ray:RayExecutor"},
    signature="cls(config, device_name, extra_env, options: ExecutorOptions) with submit(task), has_room(), "
    "busy, next_finished() -> Finished, close(), spans_nodes; cls.check(options) before any run",
)
