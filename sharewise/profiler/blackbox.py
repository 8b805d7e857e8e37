"""The measurement protocol for black-box jobs: a command paused and resumed from outside (SIGSTOP/SIGCONT).

A warm worker (``worker.py``) steps when the driver asks; a user's command steps on its own, reporting each
step through the hook in its interpreter (``stephook``) to a progress file. ``CommandWorker`` gives such a
job the driver-side interface of ``session.Worker`` (``send``/``recv`` of the same messages, ``info``,
``pid``, ``close``...; what the two share is ``session.WorkerBase``), so profiles, the probe, pairs, warm
pools and campaigns measure it unchanged:

- **start**: launch the command (``commands.launch``: pinned to the placement's cores, the device sharewise
  chose as its only visible GPU, a warm worker's thread settings), wait for its first step (within
  ``--timeout``), let it run until its step time settles (``worker.step_time_settled``), pause it
  (``SIGSTOP`` to its process group): ``ready``. A paused job keeps its memory, so the pool's memory check
  before a pair counts it. On a GPU every pause waits for the kernels the job already queued
  (``drain_seconds``), so they do not run into its partner's window.
- **measure** (a window): at the shared start time resume it (``SIGCONT``); the window runs from the first
  step that ends after the resume to the first step ending ``window_s`` later with at least ``min_steps``
  steps, timed by the steps' own timestamps; the step cut by the pause is left out. Then pause it again,
  or, with ``tail``, let it run until ``stop`` (so its partner stays loaded), then pause it.
- **warm**: run it for a few steps and seconds, then pause. **features**: ask the hook for its features
  (a ``.request`` file, ``stephook``), let it run until they are written, then pause; on CUDA, NVML is
  sampled from outside for ``features.NVML_MIN_WINDOW_S`` while it runs unprofiled.
- **exit**: kill its process group (a training script holds nothing worth a polite exit here).

The job's state machine runs in a thread of the driver, one per job; ``recv`` waits on its answers.
Failures become ``session.WorkerFailed`` with one line naming what happened and the last lines of the job's
output: a command that cannot start or exits before its first step (``failed``), never reports a step
within the timeout (``timeout``), ends before the measurement is done (``failed``), or is killed for memory
(``oom``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import shutil
import signal
import socket
import tempfile
import threading
import time

from sharewise.errors import SharewiseError
from sharewise.profiler.commands import CommandSpec, launch, parse_command
from sharewise.profiler.config import SETTLE_TOLERANCE, RunConfig, device_kind
from sharewise.profiler.device import cuda_index, device_name
from sharewise.profiler.hostload import process_tree_cpu_seconds
from sharewise.profiler.job_process import cuda_visible, drain_seconds, job_memory_bytes, output_tail
from sharewise.profiler.modes import CoreAssignment
from sharewise.profiler.progress import ProgressReader
from sharewise.profiler.session import WorkerBase, WorkerFailed, WorkerProcess
from sharewise.profiler.taxonomy import CATEGORIES
from sharewise.profiler.worker import step_time_settled, summarize_window

log = logging.getLogger(__name__)

#: Seconds between two reads of a running job's progress file (steps are timed by their own timestamps;
#: this only sets how soon the driver notices a window's end).
POLL_S = 0.005
#: Features a command's profile cannot have, and why (``show`` prints these reasons).
UNMEASURED: dict[str, str] = {
    "f_activation_bytes": "counted from the tensors autograd saves in a step, which needs sharewise's "
    "hooks around a whole step() call that a command's script makes itself",
    "f_arith_intensity": "FLOPs over bytes moved, which needs the activation bytes",
    "f_ops_per_step_static": "aten ops counted by a dispatch mode around one step() call",
    **{f"f_opcount_{c}": "aten ops counted by a dispatch mode around one step() call" for c in CATEGORIES},
    **{f"f_opshare_{c}": "aten ops counted by a dispatch mode around one step() call" for c in CATEGORIES},
}
#: Features that are NaN for some commands only.
UNMEASURED_SOMETIMES: dict[str, str] = {
    "f_batch_size": "the spec gives no --batch-size",
    "f_param_bytes": "no optimizer stepped (an inference loop or a --progress-regex job)",
}


class _Failed(Exception):
    """A failure of the job, raised inside its monitor thread and answered as an ``error`` event."""

    def __init__(self, status: str, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error


class _Closed(Exception):
    """The driver closed the worker: the monitor thread ends quietly."""


class CommandWorker(WorkerBase):
    """A command job as a ``session.WorkerProcess``, the other kind of ``session.WorkerBase`` beside ``Worker``
    (see the module docstring).

    Parameters are those of ``Worker``: the spec (a command spec), the run's config, the placement
    (cores and threads), the sharing mode's environment and the start's deadline (``time.monotonic()``).
    """

    def _launch(self, config: RunConfig, extra_env: dict[str, str] | None) -> None:
        self.command: CommandSpec = parse_command(self.spec)
        self.config = config
        self._dir = tempfile.mkdtemp(prefix=f"sharewise-{self.command.name}-")
        self.progress_path = os.path.join(self._dir, "progress")
        self.features_path = os.path.join(self._dir, "hook.json")
        self.log_path = os.path.join(self._dir, "output.log")
        self._events: queue.Queue[dict] = queue.Queue()
        self._commands: queue.Queue[dict] = queue.Queue()
        self._stop = threading.Event()
        self._closed = threading.Event()
        self.reader = ProgressReader(self.progress_path)
        self._step_s = math.nan  # the job's latest median step time: how long a pause waits for its queue
        self._start_error = ""
        try:
            self._check_batch_size()
            kind = device_kind(config.device)
            self.proc = launch(
                self.command,
                progress_path=self.progress_path,
                features_path=self.features_path,
                cores=self.assignment.cores,
                threads=self.assignment.threads,
                # On the CPU the job must not find a GPU either: the device is sharewise's choice.
                cuda_devices=cuda_visible(cuda_index(config.device)) if kind == "cuda" else "",
                extra_env=extra_env,
                stdout=self.log_path,
                die_with_parent=True,
            )
        except SharewiseError as exc:
            self._start_error = str(exc)
        self._thread = threading.Thread(target=self._run, name=f"sharewise-job-{self.command.name}", daemon=True)
        self._thread.start()

    def _check_batch_size(self) -> None:
        asked, own = self.config.batch_size, self.command.batch_size
        if asked is not None and asked != own:
            raise _StartRefused(
                f"{self.command.name}: --batch-size {asked} cannot reach a command (its batch size is its own "
                f"flags'{'' if own is None else f', {own} by its spec'}); drop --batch-size, or measure the "
                "command on its own"
            )

    # -- the Worker interface ---------------------------------------------------------------------------
    @property
    def _name(self) -> str:
        return self.command.name

    @property
    def alive(self) -> bool:
        return super().alive and not self._closed.is_set()

    def send(self, **msg) -> None:
        if msg.get("cmd") == "stop":
            self._stop.set()
        else:
            self._commands.put(msg)

    def _next_message(self, limit: float) -> dict | None:
        while True:
            remaining = limit - time.monotonic()
            if remaining <= 0:
                return None
            try:
                return self._events.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                if not self._thread.is_alive() and self._events.empty():
                    raise WorkerFailed("failed", f"{self.command.name}: the job's monitor ended", self.spec) from None

    def _error_message(self, msg: dict) -> str:
        return msg["error"]  # the monitor names the job itself

    def request_exit(self) -> None:
        self.kill()

    def close(self, timeout: float = 10.0) -> None:
        self.kill()
        self._thread.join(timeout=min(timeout, 2.0))
        shutil.rmtree(self._dir, ignore_errors=True)

    def kill(self) -> None:
        self._closed.set()
        self._commands.put({"cmd": "exit"})
        self._kill_group()

    # -- the monitor thread ----------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._start()
            while True:
                msg = self._commands.get()
                if self._closed.is_set():
                    return
                cmd = msg.get("cmd")
                if cmd == "measure":
                    self._measure(msg)
                elif cmd == "warm":
                    self._warm(msg)
                elif cmd == "features":
                    self._features(int(msg.get("trace_steps", 3)))
                elif cmd == "exit":
                    return
                else:
                    raise _Failed("failed", f"{self.command.name}: unknown command {cmd!r}")
        except _Closed:
            return
        except _Failed as exc:
            self._events.put({"event": "error", "status": exc.status, "error": exc.error})
        except Exception as exc:  # a bug here must reach the driver as a failure, not a hang
            self._events.put({"event": "error", "status": "failed",
                              "error": f"{self.command.name}: {type(exc).__name__}: {exc}"})

    def _start(self) -> None:
        if self._start_error:
            raise _Failed("failed", self._start_error)
        cfg = self.config
        limit = self.deadline if self.deadline is not None else time.monotonic() + cfg.timeout_s
        records = self._wait_steps(1, limit, "start")
        warm_limit = time.monotonic() + cfg.warmup_max_s
        settled = False
        while True:
            times = [b[1] - a[1] for a, b in zip(records, records[1:], strict=False)]
            if len(times) >= max(cfg.warmup_steps, 4) and step_time_settled(times, SETTLE_TOLERANCE):
                settled = True
                break
            if time.monotonic() >= warm_limit and len(times) >= cfg.warmup_steps:
                break
            records += self._wait_steps(1, limit, "warm-up")
        recent = sorted(times[-5:])
        self._step_s = recent[len(recent) // 2]
        self._pause()
        self._events.put(
            {
                "event": "ready",
                "pid": self.pid,
                "host": socket.gethostname(),
                "torch_version": self._hook_report().get("info", {}).get("torch_version", ""),
                "device_name": device_name(cfg.device),
                "batch_size": self.command.batch_size or 1,
                "batch_known": self.command.batch_size is not None,
                "family": self.command.name,
                "threads": self.assignment.threads,
                "mem_bytes": job_memory_bytes(self.pid, cfg.device),
                "warmup_steps": len(records),
                "settled": settled,
                "step_ms": recent[len(recent) // 2] * 1e3,
            }
        )

    def _measure(self, msg: dict) -> None:
        start_at = float(msg["start_at"])
        while (remaining := start_at - time.time()) > 0:
            time.sleep(remaining)
        self.reader.poll()  # steps that ended while the last pause took hold belong to no window
        self._stop.clear()
        self._resume()
        limit = time.monotonic() + max(60.0, 6 * float(msg["window_s"]) + 30.0)
        first = self._wait_steps(1, limit, "window")
        t0, n0 = first[0][1], first[0][0]
        cpu0 = process_tree_cpu_seconds([self.pid])
        window_end = t0 + float(msg["window_s"])
        min_steps = int(msg["min_steps"])
        records = first
        while True:
            end = next((r for r in records if r[1] >= window_end and r[0] - n0 >= min_steps), None)
            if end is not None:
                break
            records = records + self._wait_steps(1, limit, "window")
        cpu_s = process_tree_cpu_seconds([self.pid]) - cpu0
        inside = [r for r in records if r[0] <= end[0]]
        times = [b[1] - a[1] for a, b in zip(inside, inside[1:], strict=False)]
        result = summarize_window(times, end[1] - t0)
        result.update(late_ms=(t0 - start_at) * 1e3, cpu_s=max(cpu_s, 0.0))
        self._step_s = result["step_p50_ms"] / 1e3
        if not msg.get("tail"):
            self._pause()
            self._events.put({"event": "measured", **result})
            return
        self._events.put({"event": "measured", **result})
        while not self._stop.is_set():
            self._check_running("window")
            self._stop.wait(0.02)
        self._pause()
        self._events.put({"event": "stopped"})

    def _warm(self, msg: dict) -> None:
        self.reader.poll()
        self._resume()
        until = time.monotonic() + float(msg.get("seconds", 0.0))
        limit = time.monotonic() + self.config.timeout_s
        records = self._wait_steps(int(msg["steps"]) + 1, limit, "warm-up")
        while time.monotonic() < until:
            records += self._wait_steps(1, limit, "warm-up")
        times = sorted(b[1] - a[1] for a, b in zip(records[-6:], records[-5:], strict=False))
        self._step_s = times[len(times) // 2]
        self._pause()
        self._events.put({"event": "warmed", "steps": len(records), "step_ms": times[len(times) // 2] * 1e3})

    def _features(self, trace_steps: int) -> None:
        request = f"{self.features_path}.request"
        with open(request, "w", encoding="utf-8") as fh:
            json.dump({"trace_steps": trace_steps}, fh)
        self.reader.poll()
        self._resume()
        limit = time.monotonic() + self.config.timeout_s
        while True:
            report = self._hook_report()
            if "features" in report or "error" in report:
                break
            if time.monotonic() > limit:
                raise _Failed("timeout", f"{self.command.name}: the step hook wrote no features within "
                              f"{self.config.timeout_s:.0f} s{self._tail()}")
            self._check_running("features")
            time.sleep(0.02)
        if report.get("ended"):  # the script ended: its exit is the failure to report
            try:
                self.proc.wait(timeout=30)
            except Exception:  # noqa: BLE001 - still tearing down after 30 s: report what is known
                pass
            self._check_running("features")
        nvml = self._sample_nvml() if device_kind(self.config.device) == "cuda" else {}
        self._pause()
        features = {k: float(v) for k, v in report.get("features", {}).items() if k.startswith("f_")}
        if "error" in report:
            log.warning("%s: the step hook could not measure the features: %s", self.command.name, report["error"])
        features.update(nvml)
        features.update(self._driver_features())
        for name in (*UNMEASURED, *UNMEASURED_SOMETIMES):
            features.setdefault(name, math.nan)
        self._events.put({"event": "features", "features": features})

    def _driver_features(self) -> dict[str, float]:
        from sharewise.profiler.device import device_memory

        total, _ = device_memory(self.config.device)
        out = {"f_device_mem_bytes": total if math.isfinite(total) else math.nan}
        if self.command.batch_size is not None:
            out["f_batch_size"] = float(self.command.batch_size)
        return out

    def _sample_nvml(self) -> dict[str, float]:
        """NVML features over ``NVML_MIN_WINDOW_S`` of the running job (unprofiled), as for built-in workloads."""
        from sharewise.errors import DeviceError
        from sharewise.profiler.device import nvml_index
        from sharewise.profiler.features import NVML_MIN_WINDOW_S
        from sharewise.profiler.nvml import NvmlSampler

        try:
            index = nvml_index(self.config.device)
            if index is None:
                raise DeviceError(f"NVML is unavailable or shows no GPU {self.config.device} of this process")
            sampler = NvmlSampler(index)
            sampler.start()
        except (DeviceError, ValueError) as exc:
            log.info("%s: no NVML features: %s", self.command.name, exc)
            return {}
        until = time.monotonic() + NVML_MIN_WINDOW_S
        try:
            while time.monotonic() < until:
                self._check_running("features")
                time.sleep(0.05)
        finally:
            features = sampler.stop()
        return features

    # -- helpers of the monitor thread -------------------------------------------------------------------
    def _wait_steps(self, n: int, limit: float, stage: str) -> list[tuple[int, float]]:
        """Return the next ``n`` or more step records; raise ``_Failed`` if the job ends, ``_Closed`` if closed."""
        got: list[tuple[int, float]] = []
        while True:
            got += self.reader.poll()
            if len(got) >= n:
                return got
            self._check_running(stage)
            if time.monotonic() > limit:
                raise _Failed("timeout", self._no_step_message(stage))
            time.sleep(POLL_S)

    def _check_running(self, stage: str) -> None:
        if self._closed.is_set():
            raise _Closed()
        code = self.proc.poll()
        if code is None:
            return
        self.reader.poll()
        tail = self._tail()
        status = "oom" if code == -signal.SIGKILL or "out of memory" in tail.lower() else "failed"
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        if self.reader.steps == 0:
            raise _Failed(status, f"{self.command.name}: the command {how} before reporting a step{tail}")
        raise _Failed(
            status,
            f"{self.command.name}: the command {how} after {self.reader.steps} steps, during the {stage}, before "
            f"the measurement was done; let it run longer (more epochs or steps){tail}",
        )

    def _no_step_message(self, stage: str) -> str:
        if self.reader.steps == 0:
            return (
                f"{self.command.name}: no step reported within {self.config.timeout_s:.0f} s (--timeout); a "
                "PyTorch job reports each optimizer.step(), a loop without an optimizer must call "
                "sys.audit('sharewise.step'), any other job needs --progress-regex in its spec"
                f"{self._tail()}"
            )
        return (
            f"{self.command.name}: no step for too long during the {stage} (after {self.reader.steps} steps)"
            f"{self._tail()}"
        )

    def _timeout_message(self, expect: str, run_limit: bool, timeout: float) -> str:
        if expect == "ready" and self.reader.steps == 0:
            return self._no_step_message("start")
        return f"{super()._timeout_message(expect, run_limit, timeout)} (after {self.reader.steps} steps){self._tail()}"

    def _pause(self) -> None:
        self._signal(signal.SIGSTOP)
        time.sleep(drain_seconds(self.config.device, self._step_s))

    def _resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, sig: int) -> None:
        if self._closed.is_set():
            raise _Closed()
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            self._check_running("run")

    def _hook_report(self) -> dict:
        try:
            with open(self.features_path, encoding="utf-8") as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return {}

    def _tail(self) -> str:
        """`` ; output ends: <last lines>`` of the job's output (one line), or ``""``."""
        return output_tail(self.log_path)


class _StartRefused(SharewiseError):
    """A command the worker refuses to start (reported like a failed start)."""


def start_worker(
    spec: str,
    config: RunConfig,
    assignment: CoreAssignment,
    extra_env: dict[str, str] | None = None,
    deadline: float | None = None,
) -> WorkerProcess:
    """A ``CommandWorker`` for a command spec, a ``session.Worker`` for any other (the pool's one constructor)."""
    from sharewise.profiler.commands import is_command_spec
    from sharewise.profiler.session import Worker

    if assignment.env:  # a knob the process reads at start (``CoreAssignment.env``)
        extra_env = {**(extra_env or {}), **dict(assignment.env)}
    if is_command_spec(spec):
        return CommandWorker(spec, config, assignment, extra_env, deadline)
    return Worker(spec, config, assignment, extra_env, deadline)
