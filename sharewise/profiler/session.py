"""Driver side of worker processes: launch, coordinate the shared windows, collect results, clean up."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from sharewise.profiler.config import SETTLE_TOLERANCE, RunConfig
from sharewise.profiler.hostload import ForeignCpuMeter
from sharewise.profiler.modes import CoreAssignment, worker_env

START_DELAY_S = 0.25  # lead time so both workers are waiting before the shared start


class WorkerFailed(Exception):
    """A worker reported an error, died, or missed a deadline; ``status`` is failed, oom or timeout."""

    def __init__(self, status: str, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error


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


class Worker:
    """One workload in its own fresh process (its own session, so the whole tree can be killed)."""

    def __init__(
        self,
        spec: str,
        config: RunConfig,
        assignment: CoreAssignment,
        extra_env: dict[str, str] | None = None,
        deadline: float | None = None,
    ) -> None:
        self.spec = spec
        self.deadline = deadline
        payload = {
            "spec": spec,
            "device": config.device,
            "size": config.size,
            "batch_size": config.batch_size,
            "threads": assignment.threads,
            "cores": list(assignment.cores),
            "warmup_steps": config.warmup_steps,
            "warmup_max_s": config.warmup_max_s,
            "tolerance": SETTLE_TOLERANCE,
        }
        self.cores = assignment.cores
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
        self.info: dict = {}
        self.ready = False  # said "ready": it reads commands now, so it can be asked to exit

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, **msg) -> None:
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerFailed(
                "failed", f"{self.spec}: worker exited unexpectedly{self._stderr_tail()}"
            ) from None

    def recv(self, expect: str, timeout: float) -> dict:
        """Wait for the next message; raise ``WorkerFailed`` on error, death or timeout."""
        began = time.monotonic()
        limit = began + timeout
        if self.deadline is not None:
            limit = min(limit, self.deadline)
        fd = self.proc.stdout.fileno()
        while "\n" not in self._buf:
            remaining = limit - time.monotonic()
            if remaining <= 0:
                # Name the limit that ran out: the whole run's deadline often cuts this wait short.
                if limit < began + timeout:
                    raise WorkerFailed("timeout", f"{self.spec}: no {expect!r} before the run's timeout")
                raise WorkerFailed("timeout", f"{self.spec}: no {expect!r} within {timeout:.0f} s")
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
                    raise WorkerFailed(status, f"{self.spec}: worker died ({reason}){self._stderr_tail()}")
                self._buf += chunk
        line, self._buf = self._buf.split("\n", 1)
        msg = json.loads(line)
        if msg.get("event") == "error":
            raise WorkerFailed(msg.get("status", "failed"), f"{self.spec}: {msg.get('error')}")
        if msg.get("event") != expect:
            raise WorkerFailed("failed", f"{self.spec}: expected {expect!r}, got {msg}")
        if expect == "ready":
            self.ready = True
        return msg

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
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
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


def _window(msg: dict) -> Window:
    return Window(**{k: msg[k] for k in Window.__dataclass_fields__ if k in msg})


def common_window(config: RunConfig, step_ms: list[float], n_partners: int) -> float:
    """Return the window length that holds ``min_window_steps`` of the slowest worker even when co-located.

    A co-located step can take up to ``n_partners`` times its solo time on shared cores, so the window is
    sized for that; the worker still extends a window that ends with too few steps.
    """
    slowest = max(step_ms) / 1e3
    needed = config.min_window_steps * slowest * max(1, n_partners) * 1.2
    return min(config.max_window_s, max(config.window_s, needed))


def measure_together(
    workers: list[Worker], window_s: float, min_steps: int, tail: bool = False
) -> tuple[list[Window], float]:
    """Start ``workers`` on one shared absolute start time; return their windows and the foreign CPU share.

    The foreign share is that of the machine, or of the cores the workers are pinned to where that is higher
    (``ForeignCpuMeter``): for workers on every core the two are the same.

    With ``tail`` every worker keeps stepping until all windows are over, so each stays loaded to the end of
    its partners' windows. A worker whose window has not come back within six windows plus 30 s (windows are
    extended to hold ``min_steps``) is a timeout.
    """
    timeout = window_s * 6 + 30
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
    return windows, foreign


def run_repeat(
    specs: tuple[str, str],
    config: RunConfig,
    assignments: list[CoreAssignment],
    extra_env: dict[str, str] | None = None,
) -> RepeatResult:
    """Run one repeat of a pair: both warm up, A alone, B alone, then both over one shared window.

    The idle partner waits on a blocking read during the other's solo window, so it uses no CPU (on a GPU it
    still holds its memory, as a resident job would). Raises ``WorkerFailed``.
    """
    deadline = time.monotonic() + config.timeout_s
    workers = [Worker(s, config, p, extra_env, deadline) for s, p in zip(specs, assignments, strict=True)]
    try:
        for w in workers:
            w.info = w.recv("ready", config.timeout_s)
        window = common_window(config, [w.info["step_ms"] for w in workers], len(workers))
        solo, foreign = [], 0.0
        for w in workers:
            (win,), share = measure_together([w], window, config.min_window_steps)
            solo.append(win)
            foreign = max(foreign, share)
        coloc, share = measure_together(workers, window, config.min_window_steps, tail=True)
        foreign = max(foreign, share)
        return RepeatResult(solo, coloc, window, foreign, [w.info for w in workers])
    except BaseException:
        # A failed run: stop the partner now; a hung worker would ignore a polite exit for the whole wait.
        for w in workers:
            w.kill()
        raise
    finally:
        # Exiting takes a torch process most of a second: ask all first, then wait for each.
        for w in workers:
            w.request_exit()
        for w in workers:
            w.close()
