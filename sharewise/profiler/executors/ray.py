"""The Ray executor: each solo profile and each pair run is a Ray task holding one GPU (or a CPU node) of a cluster.

Profiles run on the nodes as pairs do, so a workload's profile and its pairs carry the device names of the
nodes that measured them (on a cluster of one GPU model, the same name, and they join).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sharewise.errors import DeviceError, MissingDependencyError
from sharewise.profiler.config import device_kind
from sharewise.profiler.executors.base import ExecutorOptions, Finished, Task
from sharewise.profiler.modes import available_cores
from sharewise.profiler.pair import PairTask, empty_row

if TYPE_CHECKING:
    from sharewise.profiler.config import RunConfig


def import_ray():
    try:
        import ray
    except ImportError:
        raise MissingDependencyError(
            "--executor ray needs Ray, which is not installed; install it with: pip install 'sharewise[ray]'"
        ) from None
    return ray


def _run_on_node(task: Task, config: RunConfig, extra_env: dict | None) -> Finished:
    """Body of one Ray task: run the task on a local executor of the node, its device named as the node sees it.

    The executor's workers live as long as the task (warm within a profile's or a pair's repeats). An error
    that is not a failure of the workload raises, so Ray retries the task like one whose worker died.
    """
    from sharewise.profiler.device import device_name
    from sharewise.profiler.executors.local import LocalExecutor

    with LocalExecutor(config, device_name(config.device), extra_env) as executor:
        return executor.run(task)


def _largest_node_cpus(ray) -> int:
    """Return the CPU count of the largest alive node of the cluster.

    A CPU pair run must hold a whole node, so no second run shares its cores; the cluster-wide figures
    (``ray.available_resources()``) sum over nodes and shrink while tasks run, so a request based on them can
    exceed every single node and would never be scheduled.
    """
    cpus = [node.get("Resources", {}).get("CPU", 0) for node in ray.nodes() if node.get("Alive")]
    return max(1, int(max(cpus, default=1)))


def _cpus_per_gpu(ray) -> int:
    """Return the CPUs a one-GPU task should hold: the smallest CPUs-per-GPU ratio over GPU nodes.

    Each pair run's two processes use host cores for data and kernel launches; holding a node's fair share
    keeps several GPU tasks on one node from oversubscribing its CPUs.
    """
    ratios = [
        node["Resources"].get("CPU", 1) / node["Resources"]["GPU"]
        for node in ray.nodes()
        if node.get("Alive") and node.get("Resources", {}).get("GPU", 0) > 0
    ]
    return max(1, int(min(ratios, default=1)))


class RayExecutor:
    """Runs each task (a solo profile or a pair) as a Ray task holding one whole GPU (CUDA) or
    ``cpus_per_task`` CPUs (CPU clusters).

    It has room for every task: Ray queues them and runs as many at once as the cluster holds. Results
    come back as tasks finish, so the campaign persists each before the next arrives. A task whose worker
    process or node dies is retried by Ray up to ``max_retries`` times; after that, and for exceptions, a
    pair is recorded as ``failed`` with the error, and a profile as failed (its pairs then are not run).
    """

    name = "ray"
    spans_nodes = True  # rows carry the device name of the node that ran them; resume matches any node

    @classmethod
    def check(cls, options: ExecutorOptions) -> None:
        """Fail before anything runs when Ray is not installed, with the install hint."""
        import_ray()

    def __init__(
        self,
        config: RunConfig,
        device_name: str,
        extra_env: dict[str, str] | None = None,
        options: ExecutorOptions = ExecutorOptions(),  # noqa: B008 - frozen, so one shared default is safe
    ) -> None:
        ray = import_ray()
        address, cpus_per_task = options.address, options.cpus_per_task
        self.ray = ray
        self.config = config
        self.device_name = device_name
        self.extra_env = extra_env
        self._started_here = False
        self._pending: dict = {}  # task ref -> Task, submitted and not yet handed back
        if not ray.is_initialized():
            if address:
                kwargs = {"address": address}
            elif os.environ.get("RAY_ADDRESS"):
                # ray.init() then joins that cluster, and refuses num_cpus when joining one.
                kwargs = {}
            else:
                # The cores this process may use (taskset/cgroup aware), as the local executor sees them.
                kwargs = {"num_cpus": len(available_cores())}
            try:
                ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False, **kwargs)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                where = f"the Ray cluster at {address!r}" if address else "a local Ray instance"
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise DeviceError(
                    f"could not start or join {where}: {reason}; check the address (host:port of the head "
                    "node, or 'auto') and that 'ray status' works there"
                ) from None
            self._started_here = True
        if device_kind(config.device) == "cuda":
            resources = {"num_gpus": 1, "num_cpus": cpus_per_task or _cpus_per_gpu(ray)}
        else:
            resources = {"num_cpus": cpus_per_task or _largest_node_cpus(ray)}
        # A task's processes are pinned to device index 0: Ray sets CUDA_VISIBLE_DEVICES.
        if device_kind(config.device) == "cuda":
            self.config = config.replace(device="cuda:0")
        # A task that raises is retried like one whose worker or node died (retry_exceptions), as bounded.
        remote = ray.remote(max_retries=options.max_retries, retry_exceptions=True, **resources)
        self.remote = remote(_run_on_node)

    @property
    def busy(self) -> int:
        return len(self._pending)

    def has_room(self) -> bool:
        return True  # Ray queues what the cluster cannot run yet

    def submit(self, task: Task) -> None:
        self._pending[self.remote.remote(task, self.config, self.extra_env)] = task

    def next_finished(self) -> Finished:
        ray = self.ray
        (ref,), _ = ray.wait(list(self._pending), num_returns=1)
        task = self._pending.pop(ref)
        try:
            return ray.get(ref)
        except Exception as exc:  # retries exhausted, or the task raised
            text = str(exc).strip().splitlines()
            error = f"ray task failed ({type(exc).__name__}): {text[-1] if text else ''}"[:500]
            if isinstance(task, PairTask):
                return Finished.pair(task, empty_row(task, self.config, self.device_name, "failed", error))
            return Finished(task, None, "failed", error)

    def prepare(self, tasks) -> int:
        """Nothing to start ahead: each Ray task starts its own workers on the node that runs it."""
        return 0

    def close(self) -> None:
        # A campaign that stops early (an error, Ctrl-C) must not leave runs going on a cluster that
        # outlives this driver: they would load nodes that later runs measure on.
        for ref in self._pending:
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # finished meanwhile, or the cluster is gone: nothing left to stop
                pass
        self._pending = {}
        if self._started_here:
            self.ray.shutdown()
