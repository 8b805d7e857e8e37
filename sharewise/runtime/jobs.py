"""One job of a physical run as a process on this machine: start it on slots, pause, resume, read its steps, end.

A job is a workload spec (built-in, ``file.py:Class``, an ``nn.Module`` spec or a training command) with a
target step count. Built-in and class workloads run in ``runner``; a training command runs as the user
wrote it, its steps reported by the step hook sharewise installs in its interpreter
(``sharewise.profiler.commands``). Both report through the progress protocol
(``sharewise.profiler.progress``), and both are paused and resumed from outside, with SIGSTOP and SIGCONT to
the job's whole process group: a paused job keeps its process and its memory (host or device) and stops
stepping, and resumes where it was. A job that must run elsewhere is killed and started again there from its
step count (for a command: the hook continues the count; the script itself starts over unless it restores a
checkpoint).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sharewise.profiler.progress import ENV_MAX_STEPS, ENV_PATH, ENV_START_STEP, ProgressReader
from sharewise.runtime.exits import DONE_STATUS, Exit, cgroup_oom_kills, evidence, exit_reason
from sharewise.runtime.lengths import OutputTotal
from sharewise.runtime.slots import Layout

__all__ = ["DONE_STATUS", "Exit", "JobSpec", "LocalJob"]


@dataclass(frozen=True)
class JobSpec:
    """What a job runs: ``workload`` (any workload spec the profiler accepts), recorded as ``name``, for
    ``steps`` steps (``None``: a training command that runs until it ends by itself), at ``size`` and
    ``batch_size`` (built-in workloads; ``None``: the workload's default)."""

    job_id: str
    workload: str
    name: str
    steps: int | None
    size: str = "small"
    batch_size: int | None = None


class LocalJob:
    """A job's process on this machine, started on ``slots`` of ``layout`` from step ``start_step``.

    ``poll()`` reads the steps reported since the last call; ``exit()`` says how the process ended (``None``
    while it lives). Times are ``time.time()`` seconds, those of the progress records. A command with no step
    count to run to (``spec.steps`` None) has its output read for its own total (``own_total``).
    """

    def __init__(
        self,
        spec: JobSpec,
        layout: Layout,
        slots: list[int],
        start_step: int,
        progress_path: str | os.PathLike,
        log_path: str | os.PathLike,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        from sharewise.profiler.modes import CoreAssignment, worker_env

        self.spec = spec
        self.slots = list(slots)
        self.start_step = int(start_step)
        self.progress_path = str(progress_path)
        self.log_path = str(log_path)
        cores, threads, cuda = layout.job_place(self.slots)
        env = worker_env(CoreAssignment(cores, threads))
        env.update(extra_env or {})
        env[ENV_PATH] = self.progress_path
        env[ENV_START_STEP] = str(self.start_step)
        if spec.steps is not None:
            env[ENV_MAX_STEPS] = str(spec.steps)
        if cuda is not None:
            env["CUDA_VISIBLE_DEVICES"] = cuda
        Path(self.progress_path).unlink(missing_ok=True)  # a restart reports from its start step on
        self.reader = ProgressReader(self.progress_path, self.start_step)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the job
        self.spawned_at = time.time()
        self._oom_kills = cgroup_oom_kills()  # the cgroup's count before this job: a rise is evidence of an OOM
        self.proc = _spawn(spec, layout, cores, threads, cuda, env, self._log, self.start_step)
        self.paused = False
        self._exit: Exit | None = None
        self._total = OutputTotal(self.log_path) if spec.steps is None else None
        self.own_total: int | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> list[tuple[int, float]]:
        """The ``(step, time)`` records reported since the last call."""
        before = self.reader.steps
        records = self.reader.poll()
        if self._total is not None:
            self.own_total = self._total.scan(before, self.reader.steps)
        return records

    @property
    def steps(self) -> int:
        return self.reader.steps

    def pause(self) -> None:
        """Stop the job's processes where they are (SIGSTOP to its process group)."""
        if self._signal(signal.SIGSTOP):
            self.paused = True

    def resume(self) -> None:
        """Let a paused job go on (SIGCONT)."""
        if self._signal(signal.SIGCONT):
            self.paused = False

    def kill(self) -> None:
        """End the job's processes at once (SIGKILL to the group, and SIGCONT so a paused one dies too)."""
        self._signal(signal.SIGKILL)
        self._signal(signal.SIGCONT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()

    def exit(self) -> Exit | None:
        """How the process ended (``None`` while it runs): ``done`` if it exited 0, however many steps it ran
        (a script ends its own training), else why it failed, from evidence (``exits.exit_reason``)."""
        if self._exit is not None:
            return self._exit
        code = self.proc.poll()
        if code is None:
            return None
        self.poll()
        self._exit = exit_reason(code, evidence(self.log_path, code, self.proc.pid, self._oom_kills))
        self._log.close()
        return self._exit

    def _signal(self, sig: int) -> bool:
        if self.proc.poll() is not None:
            return False
        try:
            os.killpg(self.proc.pid, sig)
            return True
        except ProcessLookupError:
            return False


def _spawn(spec: JobSpec, layout: Layout, cores, threads, cuda, env, log, start_step: int) -> subprocess.Popen:
    from sharewise.command_spec import is_command_spec

    if is_command_spec(spec.workload):
        from sharewise.profiler.commands import launch, parse_command

        extra = {k: v for k, v in env.items() if k.startswith("CUDA_MPS_")}  # the sharing mode's
        return launch(parse_command(spec.workload), progress_path=env[ENV_PATH], max_steps=spec.steps,
                      start_step=start_step, cores=cores, cuda_devices=cuda, threads=threads, extra_env=extra,
                      stdout=log, die_with_parent=True)
    payload = {
        "spec": spec.workload,
        "device": "cpu" if layout.device == "cpu" else "cuda:0",
        "size": spec.size,
        "batch_size": spec.batch_size,
        "threads": threads,
        "cores": list(cores),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "sharewise.runtime.runner", json.dumps(payload)],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )

