"""Warm workers: one long-lived worker process per (workload, placement), reused by every run of a campaign.

The local executor (``executors.local``) makes and owns the pool; the profiles and pairs it runs ask it for
ready workers (``acquire``) and hand them back (``release``). A worker that is not in use waits on a blocking
read: no CPU, no device work; on a GPU its allocations stay resident, so before a start the pool checks that the
memory it needs fits (the device's free memory, and the sum of what resident workers hold against
``RESIDENT_SHARE`` of the device) and evicts (closes) the least recently used idle workers until it does; an
evicted workload is started again when a later run needs it. With ``reuse=False`` (``--isolation fresh``) every
acquire starts new processes and every release ends them, so the two isolations share one code path.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from sharewise.profiler.blackbox import start_worker
from sharewise.profiler.config import RunConfig, device_kind
from sharewise.profiler.device import FIRST_START_BYTES, device_memory
from sharewise.profiler.modes import CoreAssignment
from sharewise.profiler.session import SoloBank, WorkerFailed, WorkerProcess

#: Share of the device's memory that resident workers may hold together.
RESIDENT_SHARE = 0.85
class WorkerPool:
    """Ready worker processes kept across the runs of one campaign (see the module docstring).

    Parameters
    ----------
    config : RunConfig
        Device, sizes, warm-up and the start timeout (``timeout_s``) of every worker.
    extra_env : dict, optional
        The sharing mode's environment (the MPS pipe directory); every worker starts with it.
    reuse : bool
        Keep released workers for later runs (warm); False ends them on release (fresh).
    memory : callable, optional
        ``() -> (total, free)`` bytes of the device (default ``device_memory(config.device)``); tests
        pass a literal one.

    Example::

        with WorkerPool(config) as pool:
            a, b = pool.acquire(["resnet18", "ncf"], placements(config, 2))
            ...                       # windows
            pool.release([a, b])      # idle, resident, ready for the next pair
    """

    def __init__(
        self, config: RunConfig, extra_env: dict[str, str] | None = None, reuse: bool = True, memory=None
    ) -> None:
        self.config = config
        self.extra_env = extra_env
        self.reuse = reuse
        self._memory = memory or (lambda: device_memory(config.device))
        self.idle: list[WorkerProcess] = []
        self.busy: list[WorkerProcess] = []
        self.footprint: dict[str, float] = {}  # spec -> bytes its last worker reported
        self.started = 0
        self.reused = 0
        self.evicted = 0
        # Recent solo windows of the warm workers, for their later pairs (``SoloBank``; None where not reused).
        self.solos = SoloBank(config.solo_reuse) if reuse and config.solo_reuse > 0 else None
        self._prestarted: list[WorkerProcess] = []  # started by ``prestart``, not used by a run yet

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- getting and returning workers ------------------------------------------------------------------
    def acquire(self, specs: Sequence[str], assignments: Sequence[CoreAssignment]) -> list[WorkerProcess]:
        """Return one ready worker per ``(spec, assignment)``, distinct, starting the missing ones together.

        Raises ``WorkerFailed`` (its ``spec`` names the workload) when a start fails; the workers started
        for this call are then gone, the idle ones chosen stay idle. A start that runs out of memory while
        idle workers are resident is retried once after evicting every idle worker.
        """
        if len(specs) != len(assignments):
            raise ValueError(f"acquire: {len(specs)} specs but {len(assignments)} assignments")
        chosen: list[WorkerProcess | None] = [None] * len(specs)
        self._drop_dead()
        if self.reuse:
            for i, (spec, place) in enumerate(zip(specs, assignments, strict=True)):
                match = next((w for w in self.idle if w.spec == spec and w.assignment == place), None)
                if match is not None:
                    self.idle.remove(match)
                    chosen[i] = match
                    self.reused += 1
        self.busy.extend(w for w in chosen if w is not None)
        missing = [i for i, w in enumerate(chosen) if w is None]
        try:
            started = self._start([specs[i] for i in missing], [assignments[i] for i in missing])
        except BaseException:
            self.release([w for w in chosen if w is not None])
            raise
        for i, w in zip(missing, started, strict=True):
            chosen[i] = w
        return [w for w in chosen if w is not None]

    def prestart(self, specs: Sequence[str], assignments: Sequence[CoreAssignment]) -> int:
        """Start, all at once, the workers of ``(spec, assignment)`` that are not idle already, and leave them
        idle (warm) for later ``acquire`` calls; return how many started.

        A start is mostly the interpreter's and the framework's import and the device's context (about 10 s on
        a GPU host); started together they overlap, where ``acquire`` would pay them one pair at a time. Only
        for a warm pool (``reuse``). Raises ``WorkerFailed`` like ``acquire``; the workers of that start are gone.
        """
        if not self.reuse:
            raise ValueError("prestart keeps workers warm: it needs a pool with reuse=True (--isolation warm)")
        self._drop_dead()
        have = list(self.idle)
        want_specs, want_places = [], []
        for spec, place in zip(specs, assignments, strict=True):
            match = next((w for w in have if w.spec == spec and w.assignment == place), None)
            if match is not None:
                have.remove(match)
            else:
                want_specs.append(spec)
                want_places.append(place)
        started = self._start(want_specs, want_places)
        self._prestarted.extend(started)
        self.release(started)
        return len(started)

    def take_prestarted(self, worker: WorkerProcess) -> bool:
        """True, once, for a worker that ``prestart`` started and no run has used yet: its ready report's step
        time was measured while the others started beside it, so its first run should time a few steps alone."""
        if any(w is worker for w in self._prestarted):
            self._forget_prestarted(worker)
            return True
        return False

    def release(self, workers: Sequence[WorkerProcess]) -> None:
        """Hand workers back: idle and resident (warm), or ended (fresh, or a worker that died)."""
        gone = []
        for w in workers:
            if w in self.busy:
                self.busy.remove(w)
            if self.reuse and w.alive and w.ready:
                w.last_used = time.monotonic()
                self.idle.append(w)
            else:
                gone.append(w)
        self._end(gone)

    def discard(self, workers: Sequence[WorkerProcess]) -> None:
        """Kill workers after a fault (a hung one ignores a polite exit): they are never reused."""
        for w in workers:
            if w in self.busy:
                self.busy.remove(w)
            if w in self.idle:
                self.idle.remove(w)
            self._forget(w)
            w.kill()
            w.close(timeout=0)

    def evict_idle(self, keep: Sequence[CoreAssignment] | None = None) -> int:
        """Close the idle workers (only those whose placement is not in ``keep``, when given); return how many."""
        out = [w for w in self.idle if keep is None or w.assignment not in keep]
        self.idle = [w for w in self.idle if w not in out]
        self.evicted += len(out)
        self._end(out)
        return len(out)

    def evict_spec(self, spec: str) -> int:
        """Close the idle workers of ``spec`` (a probe after the profiles); return how many."""
        out = [w for w in self.idle if w.spec == spec]
        self.idle = [w for w in self.idle if w not in out]
        self.evicted += len(out)
        self._end(out)
        return len(out)

    def close(self) -> None:
        """End every worker, idle or busy (exits are asked for all at once, then awaited)."""
        everyone = self.idle + self.busy
        self.idle, self.busy = [], []
        self._end(everyone)

    # -- internals --------------------------------------------------------------------------------------
    def _end(self, workers: Sequence[WorkerProcess]) -> None:
        # CUDA workers exit politely, so their contexts are torn down in order (an MPS server tolerates a
        # killed client, but there is no need to make it); CPU workers are killed: it is instant.
        for w in workers:
            self._forget(w)
        _close_all(workers, polite=device_kind(self.config.device) == "cuda")

    def _forget(self, worker: WorkerProcess) -> None:
        self._forget_prestarted(worker)
        if self.solos is not None:
            self.solos.forget(worker)

    def _forget_prestarted(self, worker: WorkerProcess) -> None:
        self._prestarted = [w for w in self._prestarted if w is not worker]

    def _drop_dead(self) -> None:
        dead = [w for w in self.idle if not w.alive]
        for w in dead:
            self.idle.remove(w)
            self._forget(w)
            w.close(timeout=0)

    def _need(self, specs: Sequence[str]) -> float:
        first = FIRST_START_BYTES[device_kind(self.config.device)]
        return sum(self.footprint.get(s, first) for s in specs)

    def _make_room(self, specs: Sequence[str]) -> None:
        """Evict least recently used idle workers until the new ones fit (see the module docstring)."""
        need = self._need(specs)
        while self.idle:
            total, free = self._memory()
            resident = sum(w.mem_bytes for w in self.idle + self.busy)
            if resident + need <= RESIDENT_SHARE * total and need <= free:
                return
            victim = min(self.idle, key=lambda w: w.last_used)
            self.idle.remove(victim)
            self.evicted += 1
            self._end([victim])

    def _start(self, specs: Sequence[str], assignments: Sequence[CoreAssignment]) -> list[WorkerProcess]:
        if not specs:
            return []
        for attempt in (0, 1):
            self._make_room(specs)
            try:
                return self._start_once(specs, assignments)
            except WorkerFailed as exc:
                if exc.status != "oom" or attempt or not self.idle:
                    raise
                self.evict_idle()  # resident idle workers may be what left too little memory
        raise AssertionError("unreachable")

    def _start_once(self, specs: Sequence[str], assignments: Sequence[CoreAssignment]) -> list[WorkerProcess]:
        cfg = self.config
        deadline = time.monotonic() + cfg.timeout_s
        workers = [start_worker(s, cfg, a, self.extra_env, deadline) for s, a in zip(specs, assignments, strict=True)]
        self.started += len(workers)
        try:
            for w in workers:
                w.recv("ready", cfg.timeout_s)
                w.deadline = None  # the start's deadline; each run sets its own
                self.footprint[w.spec] = w.mem_bytes
        except BaseException:
            for w in workers:
                w.kill()
                w.close(timeout=0)
            raise
        self.busy.extend(workers)
        return workers


def _close_all(workers: Sequence[WorkerProcess], polite: bool = True) -> None:
    """End workers: ask all to exit, then wait for each (a torch process takes most of a second to exit);
    or, not ``polite``, kill them at once: a CPU worker holds nothing that its exit would free."""
    for w in workers:
        if polite:
            w.request_exit()
        else:
            w.kill()
    for w in workers:
        w.close()
