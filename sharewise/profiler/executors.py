"""Executors run pair tasks: locally one by one (default), or as Ray tasks across a cluster."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

from sharewise.errors import ConfigError, MissingDependencyError
from sharewise.profiler.campaign import LocalExecutor
from sharewise.profiler.config import RunConfig, device_kind
from sharewise.profiler.pair import PairTask, empty_row

EXECUTORS = ("local", "ray")


def executor_factory(name: str, address: str | None = None, cpus_per_task: int | None = None, max_retries: int = 2):
    """Return a callable ``(config, device_name, extra_env) -> executor`` for ``name`` (local or ray)."""
    if name == "local":
        if address:
            raise ConfigError("--address is for --executor ray; the local executor runs on this machine")
        return LocalExecutor
    if name == "ray":
        _import_ray()  # fail before anything runs, with the install hint

        def make(config: RunConfig, device_name: str, extra_env: dict | None):
            return RayExecutor(config, device_name, extra_env, address, cpus_per_task, max_retries)

        return make
    raise ConfigError(f"unknown executor {name!r}; choose one of {list(EXECUTORS)}")


def _import_ray():
    try:
        import ray
    except ImportError:
        raise MissingDependencyError(
            "--executor ray needs Ray, which is not installed; install it with: pip install 'sharewise[ray]'"
        ) from None
    return ray


def _measure_on_node(task: PairTask, config: RunConfig, extra_env: dict | None) -> dict:
    """Body of one Ray task: name the device as the node sees it, then measure the pair there."""
    from sharewise.profiler.device import device_name
    from sharewise.profiler.pair import measure_pair

    return measure_pair(task, config, device_name(config.device), extra_env)


class RayExecutor:
    """Runs each pair as a Ray task holding one whole GPU (CUDA) or ``cpus_per_task`` CPUs (CPU clusters).

    Results are yielded as tasks finish, so the campaign persists each before the next arrives. A task
    whose worker process or node dies is retried by Ray up to ``max_retries`` times; after that, and for
    exceptions, the pair is recorded as ``failed`` with the error.
    """

    name = "ray"

    def __init__(
        self,
        config: RunConfig,
        device_name: str,
        extra_env: dict | None,
        address: str | None,
        cpus_per_task: int | None,
        max_retries: int,
    ) -> None:
        ray = _import_ray()
        self.ray = ray
        self.config = config
        self.device_name = device_name
        self.extra_env = extra_env
        self._started_here = False
        if not ray.is_initialized():
            kwargs = {"address": address} if address else {"num_cpus": os.cpu_count() or 1}
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False, **kwargs)
            self._started_here = True
        if device_kind(config.device) == "cuda":
            resources = {"num_gpus": 1, "num_cpus": cpus_per_task or 1}
        else:
            resources = {"num_cpus": cpus_per_task or int(ray.available_resources().get("CPU", 1) or 1)}
        # Pair processes are pinned to device index 0 inside a task: Ray sets CUDA_VISIBLE_DEVICES.
        if device_kind(config.device) == "cuda":
            self.config = config.replace(device="cuda:0")
        self.remote = ray.remote(max_retries=max_retries, **resources)(_measure_on_node)

    def run(self, tasks: Sequence[PairTask]) -> Iterator[dict]:
        ray = self.ray
        pending = {self.remote.remote(t, self.config, self.extra_env): t for t in tasks}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            ref = done[0]
            task = pending.pop(ref)
            try:
                yield ray.get(ref)
            except Exception as exc:  # retries exhausted, or the task raised
                text = str(exc).strip().splitlines()
                yield empty_row(task, self.config, self.device_name, "failed",
                                f"ray task failed ({type(exc).__name__}): {text[-1] if text else ''}"[:500])

    def close(self) -> None:
        if self._started_here:
            self.ray.shutdown()
