"""Driver side of worker processes: launch, coordinate the shared windows, collect results, clean up.

A worker lives for one repeat (``--isolation fresh``) or for a whole campaign (``warm``, kept by
``pool.WorkerPool``); the windows it measures are the same either way.
"""

from __future__ import annotations

import abc
import json
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Protocol

from sharewise.profiler.config import SETTLE_TOLERANCE, RunConfig
from sharewise.profiler.hostload import ForeignCpuMeter
from sharewise.profiler.modes import CoreAssignment, worker_env

START_DELAY_S = 0.03  # lead time so every worker is waiting (blocked, idle) before the shared start
STOP_TIMEOUT_S = 30.0  # a worker answers "stop" after its current step; a step longer than this is a hang


class WorkerFailed(Exception):
    """A worker reported an error, died, or missed a deadline; ``status`` is failed, oom or timeout.

    ``spec`` names the workload whose worker failed (empty when unknown).
    """

    def __init__(self, status: str, error: str, spec: str = "") -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.spec = spec


@dataclass
class Window:
    """One measured window of one worker."""

    steps: int
    elapsed_s: float
    throughput: float
    step_mean_ms: float
    step_p50_ms: float
    step_p95_ms: float
    step_p99_ms: float
    late_ms: float = 0.0
    cpu_s: float = 0.0


class WorkerProcess(Protocol):
    """The driver's side of a job's process: a built-in or file workload's (``Worker``, stepping on command) or a
    training command's (``blackbox.CommandWorker``, stepping on its own, paused and resumed from outside), both
    kinds of ``WorkerBase``. Pools, profiles, the probe, pairs and campaigns use only this.

    Life cycle: made by ``blackbox.start_worker`` (launched; ``deadline`` bounds its start) -> ``recv("ready")``
    sets ``info`` and ``ready`` -> ``send`` a command and ``recv`` its answer (``measure`` -> ``measured``,
    ``warm`` -> ``warmed``, ``features`` -> ``features``; the protocol of ``worker``) as often as needed ->
    ``request_exit`` then ``close``, or ``kill`` after a fault. A failure is a ``WorkerFailed`` from ``recv``.
    """

    spec: str
    assignment: CoreAssignment
    cores: tuple[int, ...]
    info: dict
    ready: bool
    deadline: float | None
    last_used: float

    @property
    def pid(self) -> int: ...

    @property
    def alive(self) -> bool: ...

    @property
    def mem_bytes(self) -> float: ...

    def send(self, **msg) -> None: ...

    def recv(self, expect: str, timeout: float) -> dict: ...

    def request_exit(self) -> None: ...

    def close(self, timeout: float = 10.0) -> None: ...

    def kill(self) -> None: ...


class WorkerBase(abc.ABC):
    """What every ``WorkerProcess`` shares: its bookkeeping, the waits of ``recv`` and the checks of each answer,
    ``mem_bytes``, ``pid`` and killing its process group. ``Worker`` and ``blackbox.CommandWorker`` are its two
    kinds; they differ in how a job starts, how a command reaches it and how an answer comes back.

    Construction sets the bookkeeping of the protocol (``spec``, ``assignment``, ``cores``, ``deadline``,
    ``last_used``, ``info``, ``ready``) and calls ``_launch(config, extra_env)``, which starts the job and sets
    ``proc`` (its ``subprocess.Popen``, in a session of its own; None where it could not start). A kind gives
    ``_launch``, ``_next_message`` (the job's next answer), ``send``, ``request_exit``, ``close`` and ``kill``.
    """

    def __init__(
        self,
        spec: str,
        config: RunConfig,
        assignment: CoreAssignment,
        extra_env: dict[str, str] | None = None,
        deadline: float | None = None,
    ) -> None:
        self.spec = spec
        self.assignment = assignment
        self.cores = assignment.cores
        self.deadline = deadline  # ``time.monotonic()`` by which the start (or the current run) must answer
        self.last_used = time.monotonic()
        self.info: dict = {}
        self.ready = False  # said "ready": it reads commands now, so it can be asked to exit
        self.proc: subprocess.Popen | None = None
        self._launch(config, extra_env)

    @abc.abstractmethod
    def _launch(self, config: RunConfig, extra_env: dict[str, str] | None) -> None:
        """Start the job and set ``proc`` (None where it could not start)."""

    @abc.abstractmethod
    def _next_message(self, limit: float) -> dict | None:
        """The job's next answer, None once ``limit`` (``time.monotonic()``) has passed; raises ``WorkerFailed``
        when the job died."""

    @property
    def _name(self) -> str:
        """How the job's failures name it."""
        return self.spec

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else -1

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def mem_bytes(self) -> float:
        """Device memory the worker holds while idle (its ready report; 0.0 before it is ready)."""
        return float(self.info.get("mem_bytes", 0.0))

    def recv(self, expect: str, timeout: float) -> dict:
        """Wait for the next message; raise ``WorkerFailed`` on error, death or timeout.

        The wait ends at ``timeout`` seconds from now or at ``deadline``, whichever comes first.
        """
        began = time.monotonic()
        limit = began + timeout
        if self.deadline is not None:
            limit = min(limit, self.deadline)
        while True:
            msg = self._next_message(limit)
            if msg is None:
                raise WorkerFailed("timeout", self._timeout_message(expect, limit < began + timeout, timeout),
                                   self.spec)
            if msg.get("event") == "stopped" and expect != "stopped":
                continue  # the late answer to a "stop" sent while a run was being abandoned: nothing waits for it
            if msg.get("event") == "error":
                raise WorkerFailed(msg.get("status", "failed"), self._error_message(msg), self.spec)
            if msg.get("event") != expect:
                raise WorkerFailed("failed", f"{self._name}: expected {expect!r}, got {msg}", self.spec)
            if expect == "ready":
                self.ready = True
                self.info = msg
            self.last_used = time.monotonic()
            return msg

    def _timeout_message(self, expect: str, run_limit: bool, timeout: float) -> str:
        # Name the limit that ran out: the whole run's deadline often cuts this wait short.
        limit = "before the run's timeout" if run_limit else f"within {timeout:.0f} s"
        return f"{self._name}: no {expect!r} {limit}"

    def _error_message(self, msg: dict) -> str:
        """The failure an ``error`` answer reports."""
        return f"{self._name}: {msg.get('error')}"

    def _kill_group(self) -> None:
        """SIGKILL the job's process group (its own session: the whole tree) and reap it, if it still runs."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # a zombie the kernel has not reaped yet: nothing more to do
                pass


class Worker(WorkerBase):
    """One workload in its own fresh process (its own session, so the whole tree can be killed), stepping on the
    driver's commands (``profiler.worker``); a ``WorkerProcess``."""

    def _launch(self, config: RunConfig, extra_env: dict[str, str] | None) -> None:
        assignment = self.assignment
        payload = {
            "spec": self.spec,
            "device": config.device,
            "size": config.size,
            "batch_size": config.batch_size,
            "threads": assignment.threads,
            "cores": list(assignment.cores),
            "warmup_steps": config.warmup_steps,
            "warmup_max_s": config.warmup_max_s,
            "tolerance": SETTLE_TOLERANCE,
        }
        env = worker_env(assignment)
        if extra_env:
            env.update(extra_env)
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sharewise.profiler.worker", json.dumps(payload)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            start_new_session=True,
            text=True,
            bufsize=1,
        )
        self._buf = ""

    def send(self, **msg) -> None:
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise WorkerFailed(
                "failed", f"{self.spec}: worker exited unexpectedly{self._stderr_tail()}", self.spec
            ) from None

    def _next_message(self, limit: float) -> dict | None:
        fd = self.proc.stdout.fileno()
        while "\n" not in self._buf:
            remaining = limit - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], min(remaining, 1.0))
            if ready:
                chunk = os.read(fd, 65536).decode(errors="replace")
                if not chunk:
                    self.proc.wait(timeout=5)
                    code = self.proc.returncode
                    reason = (
                        f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                    )
                    status = "oom" if code == -signal.SIGKILL else "failed"
                    raise WorkerFailed(
                        status, f"{self.spec}: worker died ({reason}){self._stderr_tail()}", self.spec
                    )
                self._buf += chunk
        line, self._buf = self._buf.split("\n", 1)
        return json.loads(line)

    def _stderr_tail(self) -> str:
        try:
            self._stderr.seek(0)
            text = self._stderr.read().decode(errors="replace").strip()
        except (OSError, ValueError):
            return ""
        lines = [ln for ln in text.splitlines() if ln.strip()]
        return f": {lines[-1][-300:]}" if lines else ""

    def request_exit(self) -> None:
        """Ask a ready worker to exit without waiting, so several workers shut down in parallel."""
        if self.ready and self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"cmd": "exit"}) + "\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                pass

    def close(self, timeout: float = 10.0) -> None:
        """Ask the worker to exit, then kill its process group if it does not.

        A worker that never said ready is still building or warming up and reads no command (a hung one
        never will), so it is killed at once instead of after ``timeout``.
        """
        if self.ready and self.proc.poll() is None:
            self.request_exit()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        self._stderr.close()

    def kill(self) -> None:
        self._kill_group()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except (OSError, ValueError):
                pass


@dataclass
class RepeatResult:
    """One repeat of a pair run: solo and co-located windows of both workers."""

    solo: list[Window]
    coloc: list[Window]
    window_s: float
    foreign_cpu: float  # max share of the machine used by other processes during any window
    info: list[dict] = field(default_factory=list)
    reused: list[bool] = field(default_factory=list)  # per worker: its solo came from its recent pairs (SoloBank)


def _window(msg: dict) -> Window:
    return Window(**{k: msg[k] for k in Window.__dataclass_fields__ if k in msg})


def common_window(config: RunConfig, step_ms: list[float]) -> float:
    """Return the window length that holds ``min_window_steps`` solo steps of the slowest worker.

    A co-located step takes longer; the worker extends its window until it holds ``min_window_steps``
    steps (its partners keep stepping in their tails meanwhile), so the window need not be sized for the
    slowdown it is about to measure.
    """
    slowest = max(step_ms) / 1e3
    needed = config.min_window_steps * slowest * 1.2
    return min(config.max_window_s, max(config.window_s, needed))


def measure_together(
    workers: list[WorkerProcess], window_s: float, min_steps: int, tail: bool = False, timeout: float | None = None
) -> tuple[list[Window], float]:
    """Start ``workers`` on one shared absolute start time; return their windows and the foreign CPU share.

    The foreign share is that of the machine, or of the cores the workers are pinned to where that is higher
    (``ForeignCpuMeter``): for workers on every core the two are the same.

    With ``tail`` every worker keeps stepping until all windows are over, so each stays loaded to the end of
    its partners' windows; each then answers "stop" with "stopped" after its current step, so the next
    window starts on an idle device. A worker whose window has not come back within six windows plus 30 s
    (windows are extended to hold ``min_steps``), or ``timeout`` when that is shorter, is a timeout.
    """
    timeout = min(window_s * 6 + 30, timeout if timeout is not None else math.inf)
    cores = sorted({c for w in workers for c in w.cores})
    meter = ForeignCpuMeter([w.pid for w in workers], cores=cores)
    start_at = time.time() + START_DELAY_S
    meter.start()
    for w in workers:
        w.send(cmd="measure", start_at=start_at, window_s=window_s, min_steps=min_steps, tail=tail)
    windows = [_window(w.recv("measured", timeout)) for w in workers]
    foreign = meter.stop()
    if tail:
        for w in workers:
            w.send(cmd="stop")
        for w in workers:
            w.recv("stopped", min(timeout, STOP_TIMEOUT_S))
    return windows, foreign


class SoloBank:
    """Recent solo windows of warm workers, which a workload's later pairs take as their solos.

    Under the solo rule (``solo``: a job's solo has the host share it has next to a partner) a job's solo is the
    same in every pair it joins, so a solo window a warm worker measured in one pair serves its next pairs for
    ``max_age_s`` seconds (``RunConfig.solo_reuse``). A pair takes each window at most once (``used``), so its
    repeats still average distinct solo windows; only the shared window is measured where a solo is there.
    The pool owns one (``pool.WorkerPool.solos``) and forgets a worker's windows when it ends.

    Example::

        bank = SoloBank(20.0)
        used = set()
        bank.put(worker, window, used)    # measured in this pair: this pair never takes it again
        bank.take(worker, set())          # the next pair of the same worker: that window, for one of its repeats
    """

    def __init__(self, max_age_s: float) -> None:
        self.max_age_s = max_age_s
        self._windows: dict[tuple, list[tuple[float, int, Window]]] = {}
        self._count = 0
        self.reused = 0  # windows handed out again

    @staticmethod
    def _key(worker: WorkerProcess) -> tuple:
        return (worker.pid, worker.spec, worker.assignment)

    def put(self, worker: WorkerProcess, window: Window, used: set[int]) -> None:
        """Keep a solo window the worker just measured in a repeat its pair kept (marked used by that pair)."""
        self._count += 1
        used.add(self._count)
        self._windows.setdefault(self._key(worker), []).append((time.monotonic(), self._count, window))

    def take(self, worker: WorkerProcess, used: set[int]) -> Window | None:
        """The newest of the worker's solo windows younger than ``max_age_s`` that ``used`` lacks, else None."""
        entries = self._windows.get(self._key(worker))
        if not entries:
            return None
        now = time.monotonic()
        entries[:] = [e for e in entries if now - e[0] <= self.max_age_s]
        for _, ident, window in reversed(entries):
            if ident not in used:
                used.add(ident)
                self.reused += 1
                return window
        return None

    def forget(self, worker: WorkerProcess) -> None:
        self._windows.pop(self._key(worker), None)


def run_round(
    workers: list[WorkerProcess],
    config: RunConfig,
    index: int,
    timeout: float | None = None,
    solos: SoloBank | None = None,
    used: set[int] | None = None,
    solo_workers: list[WorkerProcess] | None = None,
    knob=None,
) -> RepeatResult:
    """Run one repeat of a pair on ready workers: each alone, then both over one shared window.

    Odd repeats run the windows in mirrored order (shared window first, then the solo windows from the
    last worker to the first), so a drift of the machine's speed during a run of repeats biases
    consecutive repeats' slowdowns in opposite directions and cancels in their mean. The idle partner
    waits on a blocking read during the other's solo window, so it uses no CPU (on a GPU it still holds
    its memory, as a resident job would). With ``solos`` a worker's solo comes from its recent windows where
    there is one this pair (``used``) has not taken yet (``RepeatResult.reused``); the caller keeps the solos
    measured here for later pairs once it keeps the repeat (``SoloBank.put``). Raises ``WorkerFailed``.

    Under the sharing knob (``config.split``, ``knob``: a ``profiler.knob.ShareKnob``) the shared window runs at
    the split: a live knob (a CPU quota) is set on both processes for that window only, and lifted for the solo
    windows; a knob read at start (MPS) was set when ``workers`` started, and the solo windows run on
    ``solo_workers``, the same workloads without it. Either way the solo is the job's at the full device.
    """
    soloists = solo_workers or workers
    window = common_window(config, [w.info["step_ms"] for w in workers])
    used = set() if used is None else used
    solo: list[Window | None] = [solos.take(w, used) if solos is not None else None for w in soloists]
    reused = [w is not None for w in solo]
    coloc: list[Window] = []
    foreign = 0.0
    steps: list[tuple[str, int]] = [("solo", i) for i in range(len(workers)) if solo[i] is None] + [("shared", -1)]
    if index % 2:
        steps.reverse()
    live = knob is not None and knob.live and config.split is not None
    for kind, i in steps:
        if kind == "solo":
            (solo[i],), share = measure_together([soloists[i]], window, config.min_window_steps, timeout=timeout)
        else:
            if live:
                for w, s in zip(workers, (config.split, 1.0 - config.split), strict=True):
                    knob.apply(w.pid, s)
            try:
                coloc, share = measure_together(workers, window, config.min_window_steps, tail=True, timeout=timeout)
            finally:
                if live:
                    for w in workers:
                        knob.release(w.pid)
        foreign = max(foreign, share)
    return RepeatResult([w for w in solo if w is not None], coloc, window, foreign, [w.info for w in workers], reused)
