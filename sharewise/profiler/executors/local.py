"""The local executor: profiles and pair runs one after another on this machine (the default; needs no Ray).

It owns the worker processes they run in (``WorkerPool``; this is the one place a pool is made). With warm
isolation a workload's process starts once: its solo profile leaves it warm (a profile runs on a pair
member's host share, the solo rule of ``solo``), and its pairs take it from there; one probe process serves
every profile. On a GPU the workers a campaign's profiles and pairs need start together (``prepare``). A Ray
task runs its one task on a ``LocalExecutor`` of the node (``executors.ray``).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sharewise.errors import ConfigError, ProfileFailed
from sharewise.profiler.config import device_kind
from sharewise.profiler.executors.base import ExecutorOptions, Finished, Task
from sharewise.profiler.modes import placements
from sharewise.profiler.pair import PairTask, empty_row, extension_config, measure_pair_repeats
from sharewise.profiler.pool import WorkerPool
from sharewise.profiler.probe import PROBE_SPEC
from sharewise.profiler.session import RepeatResult, WorkerFailed
from sharewise.profiler.solo import ProfileTask, profile_workload, solo_placement

if TYPE_CHECKING:
    from sharewise.profiler.config import RunConfig

log = logging.getLogger(__name__)


class LocalExecutor:
    """Runs tasks one at a time on this machine, in the worker processes of its pool.

    ``run(task)`` runs one task at once (``profile_one`` and tests use it); a campaign goes through
    ``submit`` and ``next_finished`` (see ``executors.base.Executor``), where a pair run that raises (a bug,
    a broken machine) becomes a ``failed`` row and the campaign goes on.

    Example::

        with LocalExecutor(RunConfig(size="tiny"), "cpu0") as executor:
            finished = executor.run(ProfileTask("ncf", "ncf"))   # Finished(task, row={...}, status="ok")
    """

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
        warm = config.isolation == "warm"
        self.pool = WorkerPool(config, extra_env, reuse=warm)
        # Fresh isolation starts a job process per repeat, but one probe process serves a profile's repeats.
        self.probes = self.pool if warm else WorkerPool(config, extra_env, reuse=True)
        self._queue: deque[Task] = deque()
        self._profiled = False  # a profile ran since the last pair: its probe and placements may linger
        # The repeats of each pair measured here, by its two specs: an extension goes on from them.
        self._repeats: dict[tuple[str, str], list[RepeatResult]] = {}

    @classmethod
    def check(cls, options: ExecutorOptions) -> None:
        if options.address:
            raise ConfigError("--address is for --executor ray; the local executor runs on this machine")

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def busy(self) -> int:
        return len(self._queue)

    def has_room(self) -> bool:
        return not self._queue  # one at a time: each result is written before the next task is chosen

    def submit(self, task: Task) -> None:
        self._queue.append(task)

    def next_finished(self) -> Finished:
        task = self._queue.popleft()
        try:
            return self.run(task)
        except Exception as exc:
            if isinstance(task, ProfileTask):
                raise  # a profile that raises (not a failure of the workload) is a bug: it ends the campaign
            # A bug or a broken machine during a pair run: record it, keep the campaign going.
            row = empty_row(task, self.config, self.device_name, "failed", f"{type(exc).__name__}: {exc}")
            return Finished.pair(task, row)

    def run(self, task: Task) -> Finished:
        """Run one task now; a failed profile or pair is a ``Finished`` with its status, other errors raise."""
        if isinstance(task, PairTask):
            self._ready_for_pairs()
            key = (task.spec_a, task.spec_b)
            earlier = self._repeats.get(key) if task.extend else None
            config = extension_config(self.config, task.extend)
            row, kept = measure_pair_repeats(task, config, self.device_name, self.pool, earlier=earlier)
            if kept:
                self._repeats[key] = kept
            return Finished.pair(task, row)
        self._profiled = True
        try:
            row = profile_workload(task, self.config, self.pool, self.probes)
        except ProfileFailed as exc:
            return Finished(task, None, exc.status, exc.error)
        finally:
            if self.probes is not self.pool:
                self.probes.close()
        if not task.keep_worker:
            self.pool.evict_spec(task.spec)
        return Finished(task, row)

    def prepare(self, tasks: Sequence[Task]) -> int:
        """Start together the warm workers that ``tasks`` (a campaign's missing profiles, or its known pairs)
        will need, on CUDA devices; return how many started. A profiled workload gets its worker on the solo
        placement (which is a pair's first: the solo rule), and the probe one; for pairs each workload gets one
        worker, and a second where it pairs with itself. Workers idle in the pool already are not started again,
        so the profiles' workers serve the pairs.

        On a GPU host each worker start costs about 10 s (the framework's import, the CUDA context), so 8
        workloads started one at a time spend over a minute before their first measurement; started together
        they overlap on the host's cores (each worker then times a few steps alone before its first run:
        ``pair.settle_prestarted``). On a CPU the starts would compete for the cores they measure on, and
        there is nothing to gain: nothing is started there.
        """
        pairs = [t for t in tasks if isinstance(t, PairTask)]
        profiles = [t for t in tasks if isinstance(t, ProfileTask)]
        if not (pairs or profiles) or not self.pool.reuse or device_kind(self.config.device) != "cuda":
            return 0
        first, second = placements(self.config, 2)
        specs, places = [], []
        for t in profiles:
            specs.append(t.spec)
            places.append(solo_placement(self.config))
        if profiles and self.config.features and self.config.probe:
            specs.append(PROBE_SPEC)
            places.append(second)  # the probe's placement (``solo._ProbeRun``)
        if pairs:
            if not profiles:
                self._ready_for_pairs()
            paired_with_itself = {t.spec_a for t in pairs if t.spec_a == t.spec_b}
            for spec in dict.fromkeys(s for t in pairs for s in (t.spec_a, t.spec_b)):
                if spec not in {t.spec for t in profiles}:
                    specs.append(spec)
                    places.append(first)
                if spec in paired_with_itself:
                    specs.append(spec)
                    places.append(second)
        try:
            return self.pool.prestart(specs, places)
        except WorkerFailed as exc:  # the pair that needs it records the failure when it starts it again
            log.warning("starting the campaign's workers together failed (%s); they start pair by pair", exc)
            return 0

    def _ready_for_pairs(self) -> None:
        """After profiles, end the workers no pair will use: the probe's, and any on a placement no pair has
        (none under the solo rule, which profiles each job on a pair member's share)."""
        if self._profiled:
            self.pool.evict_spec(PROBE_SPEC)
            self.pool.evict_idle(keep=placements(self.config, 2))
            self._profiled = False

    def close(self) -> None:
        self.pool.close()
        if self.probes is not self.pool:
            self.probes.close()
