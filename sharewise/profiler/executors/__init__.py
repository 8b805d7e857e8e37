"""Executors run a campaign's tasks (solo profiles and pairs): locally one by one, or as Ray tasks on a cluster.

Every executor has one signature (``executors.base.Executor``); adding one is its module and one line in
``EXECUTORS``, which lives in ``sharewise.profiler.executor_registry`` so that the CLI's ``--executor`` choices
come from the registry without importing this package.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from sharewise.profiler.executor_registry import EXECUTORS
from sharewise.profiler.executors.base import Executor, ExecutorOptions, Finished, Task

__all__ = ["EXECUTORS", "Executor", "ExecutorOptions", "Finished", "Task", "executor_factory"]


def executor_factory(
    name: str, address: str | None = None, cpus_per_task: int | None = None, max_retries: int = 2
) -> Callable[..., Executor]:
    """Return a callable ``(config, device_name, extra_env) -> executor`` for the registered ``name``.

    Fails here, before any profile or run, on an unknown name (``ConfigError``), an option the executor
    does not take (``--address`` with the local executor) or a missing dependency (Ray's install hint).

    >>> executor_factory("local").func.name
    'local'
    """
    cls = EXECUTORS.get(name)
    options = ExecutorOptions(address=address, cpus_per_task=cpus_per_task, max_retries=max_retries)
    cls.check(options)
    return functools.partial(cls, options=options)
