"""``sharewise observe``: run an unmodified command with its steps exported, or print the environment that does it.

The job's own behaviour is unchanged: the command runs in the foreground as a child of this process (same
process group, same terminal, same standard streams), only its environment gains the step hook
(``profiler.commands.HOOK_DIR`` first on ``PYTHONPATH``, ``SHAREWISE_LIB``) and the ``exporter.ENV_*``
variables; a job on the CPU also the environment sharewise's own CPU workers run with (``cpu_environment``),
without which OpenMP threads spin while they wait and two jobs sharing cores measure that spinning. Signals
sent to the wrapper (SIGTERM from Kubernetes or Slurm, SIGHUP, SIGUSR1/2, SIGINT sent to the wrapper alone) are
passed on to the command; a Ctrl-C on a terminal already reaches both, so it is not sent twice. The wrapper ends
as the command ended: its exit code, or the same signal (the CLI re-raises it).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence

from sharewise.errors import ConfigError, SharewiseError
from sharewise.profiler.commands import ENV_LIB, ENV_PIN, HOOK_DIR, LIB_DIR, CommandStartError
from sharewise.profiler.exporter import DEFAULT_HOST, ENV_HOST, ENV_NAME, ENV_PORT, ENV_STARTED

#: Signals passed on to the command (SIGINT only when it did not come from the terminal, see the module docstring).
FORWARDED = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGINT", "SIGQUIT", "SIGUSR1", "SIGUSR2")
    if hasattr(signal, name)
)


def no_gpu_visible() -> bool:
    """Whether this process sees no NVIDIA GPU (``CUDA_VISIBLE_DEVICES`` read as CUDA reads it): then the job it
    starts computes on the CPU. A GPU that NVML sees but cannot read counts as a GPU."""
    from sharewise.profiler.device import visible_gpus

    try:
        return not visible_gpus()
    except SharewiseError:
        return False


def cpu_environment(base: Mapping[str, str]) -> dict[str, str]:
    """What a CPU job gets added to ``base``: the environment of a ``pairs --mode cpu`` worker (``modes.
    worker_env``: ``OMP_WAIT_POLICY=PASSIVE``, ``KMP_BLOCKTIME=0``, OMP/MKL/OpenBLAS threads, ...) on every core
    this process may use, pinned there by the hook. A variable ``base`` sets is the user's choice and is left out;
    their ``OMP_NUM_THREADS`` also sets the other libraries' thread counts.

    Example, on two cores and a ``base`` without them: ``{"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2",
    "OPENBLAS_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0", "SHAREWISE_CORES": "0,1",
    "SHAREWISE_PIN_CORES": "1", ...}``.
    """
    from sharewise.profiler.modes import CoreAssignment, available_cores, worker_env

    cores = available_cores()
    chosen = base.get("OMP_NUM_THREADS", "")
    threads = int(chosen) if chosen.isdigit() and int(chosen) > 0 else len(cores)
    env = {**worker_env(CoreAssignment(cores, threads), base={}), ENV_PIN: "1"}
    return {key: value for key, value in env.items() if key not in base}


def observe_environment(
    port: int, name: str | None = None, host: str | None = None, base: Mapping[str, str] | None = None,
    cpu: bool | None = None,
) -> dict[str, str]:
    """The environment of an observed command: ``base`` (default this process's) with the hook and the exporter,
    and for a job on the CPU (``cpu``; None: where no GPU is visible, ``no_gpu_visible``) ``cpu_environment``.

    Example (abridged): ``{"SHAREWISE_OBSERVE_PORT": "9478", "SHAREWISE_OBSERVE_HOST": "127.0.0.1",
    "SHAREWISE_OBSERVE_NAME": "train", "SHAREWISE_LIB": "/opt/venv/lib/python3.11/site-packages",
    "PYTHONPATH": ".../sharewise/profiler/hook:...", "OMP_WAIT_POLICY": "PASSIVE", ...}``.
    """
    if not 0 < int(port) < 65536:
        raise ConfigError(f"--port must be a TCP port (1-65535), got {port}")
    env = dict(os.environ if base is None else base)
    if no_gpu_visible() if cpu is None else cpu:
        env.update(cpu_environment(env))
    env[ENV_PORT] = str(int(port))
    env[ENV_HOST] = host or env.get(ENV_HOST) or DEFAULT_HOST
    if name:
        env[ENV_NAME] = name
    env[ENV_LIB] = str(LIB_DIR)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(HOOK_DIR)]
    env["PYTHONPATH"] = os.pathsep.join([str(HOOK_DIR), *rest])
    return env


def shell_exports(port: int, name: str | None = None, host: str | None = None, cpu: bool | None = None) -> str:
    """``export`` lines that observe every Python job started after them (a Slurm script's ``eval``); for a job on
    the CPU (``cpu`` as ``observe_environment`` reads it) also ``cpu_environment``'s, each keeping a value the
    shell already has.

    Example::

        export SHAREWISE_OBSERVE_PORT=9478
        export SHAREWISE_OBSERVE_HOST=0.0.0.0
        export SHAREWISE_OBSERVE_NAME=train
        export SHAREWISE_LIB=/opt/venv/lib/python3.11/site-packages
        export PYTHONPATH=/opt/venv/lib/python3.11/site-packages/sharewise/profiler/hook${PYTHONPATH:+:$PYTHONPATH}
        export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
        export MKL_NUM_THREADS=${MKL_NUM_THREADS:-$OMP_NUM_THREADS}
        export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
        ...
    """
    env = observe_environment(port, name, host, base={}, cpu=False)
    lines = [f"export {key}={shlex.quote(env[key])}" for key in (ENV_PORT, ENV_HOST, ENV_NAME, ENV_LIB) if key in env]
    lines.append(f"export PYTHONPATH={shlex.quote(str(HOOK_DIR))}${{PYTHONPATH:+:$PYTHONPATH}}")
    if no_gpu_visible() if cpu is None else cpu:
        extra = cpu_environment({})
        lines.append(f"export OMP_NUM_THREADS=${{OMP_NUM_THREADS:-{extra.pop('OMP_NUM_THREADS')}}}")
        for key, value in extra.items():  # a thread count the shell has not set follows its OMP_NUM_THREADS
            given = "$OMP_NUM_THREADS" if key.endswith("_NUM_THREADS") else shlex.quote(value)
            lines.append(f"export {key}=${{{key}:-{given}}}")
    return "\n".join(lines)


def run_observed(
    argv: Sequence[str], port: int, name: str | None = None, host: str | None = None, cpu: bool | None = None
) -> int:
    """Run ``argv`` observed (module docstring; ``cpu`` as ``observe_environment`` reads it) and return its
    ``returncode``: negative ``-N`` where signal N ended it, as ``subprocess`` reports. ``CommandStartError``
    where the program cannot be started."""
    if not argv:
        raise ConfigError("no command given; usage: sharewise observe [--port P] [--name NAME] -- COMMAND ...")
    env = observe_environment(port, name, host, cpu=cpu)
    import psutil

    env[ENV_STARTED] = f"{psutil.Process().create_time():.3f}"  # this wrapper loads the machine before the job does
    try:
        proc = subprocess.Popen(list(argv), env=env)
    except OSError as exc:
        raise CommandStartError(
            f"cannot start {shlex.join(argv)!r}: {exc.strerror or exc} (check the program's name and PATH)"
        ) from None

    def forward(signum, frame) -> None:
        if signum == signal.SIGINT and _from_terminal():
            return  # the terminal sent it to the whole foreground group: the command has it already
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        return proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _from_terminal() -> bool:
    """Whether this process is in its terminal's foreground process group (then a Ctrl-C reached the child too)."""
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False
