"""The Ray executor: each solo profile and each pair run is a Ray task holding one GPU (or a CPU node) of a cluster.

Profiles run on the nodes as pairs do, so a workload's profile and its pairs carry the device names of the
nodes that measured them (on a cluster of one GPU model, the same name, and they join).
"""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sharewise.errors import DeviceError, MissingDependencyError
from sharewise.profiler.config import device_kind
from sharewise.profiler.executors.base import ExecutorOptions, Finished, Task
from sharewise.profiler.modes import available_cores
from sharewise.profiler.pair import PairTask, empty_row

if TYPE_CHECKING:
    from sharewise.profiler.config import RunConfig

log = logging.getLogger(__name__)

#: How long ``RayExecutor.close`` waits for its cancelled tasks to end before it gives up on them.
STOP_WAIT_S = 30.0


def import_ray():
    try:
        import ray
    except ImportError:
        raise MissingDependencyError(
            "--executor ray needs Ray, which is not installed; install it with: pip install 'sharewise[ray]'"
        ) from None
    return ray


@dataclass(frozen=True)
class StopFlag:
    """A campaign's stop as every node of the cluster sees it: set once by the driver, read by each task
    before it starts a worker process.

    It is a key in the cluster's key-value store (the GCS, through ``ray.experimental.internal_kv``, where
    Ray's own libraries keep their cluster-wide state): ``set`` returns once the store holds it, so a task
    that reads it afterwards, on any node, sees it. Reading it is a request to the store, not a wait on a Ray
    object (an actor's answer): a task blocked on an object lends its CPUs or GPU back to Ray, which then
    starts the next queued task on them, and two pair runs would share a node.

    Example: ``StopFlag().key == "stop:3f2a..."``; pickled into each task, which calls ``is_set()``.
    """

    key: str = field(default_factory=lambda: f"stop:{uuid.uuid4().hex}")

    def set(self) -> None:
        from ray.experimental import internal_kv

        internal_kv._internal_kv_put(self.key, b"1", namespace="sharewise")

    def is_set(self) -> bool:
        from ray.experimental import internal_kv

        return internal_kv._internal_kv_exists(self.key, namespace="sharewise")

    def clear(self) -> None:
        from ray.experimental import internal_kv

        internal_kv._internal_kv_del(self.key, namespace="sharewise")


def _run_on_node(task: Task, config: RunConfig, extra_env: dict | None, stop: StopFlag) -> Finished:
    """Body of one Ray task: run the task on a local executor of the node, its device named as the node sees it.

    The executor's workers live as long as the task (warm within a profile's or a pair's repeats). An error
    that is not a failure of the workload raises, so Ray retries the task like one whose worker died. A task
    that Ray starts after its campaign stopped (``stop`` set) starts no worker and comes back ``skipped``.
    """
    from sharewise.profiler.device import device_name
    from sharewise.profiler.executors.local import LocalExecutor

    if stop.is_set():
        # Ray can start a queued task in the moment between the stop and its cancel reaching it.
        error = "not run: the campaign stopped before this task started"
        if isinstance(task, PairTask):
            return Finished.pair(task, empty_row(task, config, device_name(config.device), "skipped", error))
        return Finished(task, None, "skipped", error)
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
    ``close`` stops the tasks still submitted: none that had not begun starts a worker, and the running ones
    have ended when it returns.
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
        self._pending: dict = {}  # task ref -> Task, submitted and not yet handed back, in submission order
        self._stop = StopFlag()
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
        self._pending[self.remote.remote(task, self.config, self.extra_env, self._stop)] = task

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
        """End the executor. Tasks still submitted (the campaign stopped early) are stopped: one that had not
        begun when this was called never starts a worker, and every one has ended when this returns (or, with
        a warning, after ``STOP_WAIT_S``)."""
        pending, self._pending = list(self._pending), {}
        if pending:
            self._stop_tasks(pending)
        if self._started_here:
            self.ray.shutdown()

    def _stop_tasks(self, refs: list) -> None:
        # A campaign that stops early (an error, Ctrl-C) must not leave runs going on a cluster that
        # outlives this driver: they would load nodes that later runs measure on. Cancelling alone does not
        # do it: a running task's node, freed by its cancel or by its end, goes to the next queued task, which
        # can start before its own cancel reaches it. The flag, set first, turns such a start into a no-op.
        ray = self.ray
        try:
            self._stop.set()
        except Exception as exc:  # the store is unreachable: cancelling is all that is left
            log.warning("could not flag the stop on the Ray cluster (%s); cancelling its tasks only", exc)
        # The latest first: those are the queued ones, cancelled before a running one frees its node.
        for ref in reversed(refs):
            try:
                ray.cancel(ref, force=True)
            except Exception:  # finished meanwhile, or the cluster is gone: nothing left to stop
                pass
        try:
            _, left = ray.wait(refs, num_returns=len(refs), timeout=STOP_WAIT_S, fetch_local=False)
        except Exception as exc:
            left, reason = refs, f": {exc}"
        else:
            reason = f" within {STOP_WAIT_S:.0f} s"
        if left:
            # The flag stays set, so these still start no worker should Ray run them later.
            log.warning("%d cancelled Ray task(s) did not end%s", len(left), reason)
            return
        try:
            self._stop.clear()
        except Exception:  # the flag is one small key; a cluster that went away took it along
            pass
