"""A user's unmodified training command as a workload: its spec, and the launcher that starts it as a job.

Public API (used by the profiler's measurement protocol, ``profiler.blackbox``, and by the physical runtime):

``is_command_spec(spec) -> bool``
    Whether a workload spec names a command. Pure text, nothing is imported or run.
``parse_command(spec) -> CommandSpec``
    The frozen parse of a command spec: recorded ``name``, ``argv``, working directory ``cwd``, the
    environment ``env`` the user gave, ``batch_size`` and ``progress_regex``. Pure text; raises
    ``CommandSpecError`` (a ``ConfigError``) with the grammar in its message.
``recorded_name(spec) -> str``
    The name a spec is recorded under in tables: a command's name, any other spec unchanged. Cheap enough
    to map a column of a trace or a queue.
``launch(command, progress=..., ...) -> subprocess.Popen``
    Start the command as a job on the device sharewise chose (core pinning, ``CUDA_VISIBLE_DEVICES``), with
    the step hook in its interpreter and a warm worker's thread environment, in its own session, so
    ``os.killpg(proc.pid, SIGSTOP | SIGCONT | SIGKILL)`` reaches the whole process tree.

Spec grammar (one string, so it survives in datasets, queue and trace CSVs, and plans)::

    [NAME=]cmd:[--cwd DIR] [--batch-size N] [--progress-regex RE] [--] [VAR=VALUE ...] PROGRAM [ARG ...]

- The text after ``cmd:`` is split into words by POSIX shell rules (``shlex.split``): quotes and
  backslashes as in ``sh``, and nothing else (no ``$VAR`` expansion, globbing, pipes or redirections; for
  those run ``cmd:sh -c '...'``).
- ``NAME`` is the workload name the command is recorded under (letters, digits, ``_ . -``; not a built-in
  workload's name). Without it the name is the stem of the first argument ending in ``.py``, else the
  module after ``-m``, else the program's file name: ``cmd:python train.py`` is recorded as ``train``.
- Options come first, each ``--key VALUE`` or ``--key=VALUE``; ``--`` ends them (needed only when the
  program itself starts with ``--``). ``--cwd``: the working directory (relative to where sharewise runs;
  default: there). ``--batch-size``: samples per step, for samples/s and ``f_batch_size``.
  ``--progress-regex``: count one step per line of the job's output that matches (``re.search``), for
  jobs without a PyTorch optimizer; the step hook is then not installed.
- Leading ``VAR=VALUE`` words set environment variables for the command (as in ``sh``), on top of the
  environment sharewise runs in. ``CUDA_VISIBLE_DEVICES`` and ``SHAREWISE_*`` are sharewise's to set.

Examples: ``mytrain=cmd:python train.py --bs 64``, ``gan=cmd:--cwd ~/gan --batch-size 128 SEED=1 python
main.py``. In a CSV cell, a spec holding a comma or a double quote is quoted as CSV quotes any cell:
``"mytrain=cmd:python train.py --layers 1,2"``, with inner double quotes doubled.

What a step is, and what the job's environment holds, is described in ``profiler.stephook``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from sharewise.command_spec import (
    GRAMMAR,
    PREFIX,
    CommandSpec,
    CommandSpecError,
    is_command_spec,
    parse_command,
    recorded_name,
    recorded_names,
)
from sharewise.errors import ConfigError, SharewiseError
from sharewise.profiler import progress
from sharewise.profiler.exporter import OBSERVE_ENV

__all__ = [
    "GRAMMAR",
    "PREFIX",
    "CommandSpec",
    "CommandSpecError",
    "CommandStartError",
    "is_command_spec",
    "job_environment",
    "launch",
    "parse_command",
    "recorded_name",
    "recorded_names",
]

#: Folder holding the ``sitecustomize.py`` that installs the step hook; launch puts it first on PYTHONPATH.
HOOK_DIR = Path(__file__).resolve().parent / "hook"
#: Folder holding the ``sharewise`` package, so the hook imports this very sharewise in the job.
LIB_DIR = Path(__file__).resolve().parents[2]

#: Environment variables of the job's interpreter (besides ``progress.ENV_*``).
ENV_FEATURES = "SHAREWISE_FEATURES"  # where the hook writes its info and features (``stephook``)
ENV_LIB = "SHAREWISE_LIB"  # the folder holding the sharewise package the hook imports
ENV_PIN = "SHAREWISE_PIN_CORES"  # "1": the hook pins the interpreter to SHAREWISE_CORES at start
ENV_DIE_WITH_PARENT = "SHAREWISE_DIE_WITH_PARENT"  # "1": the job is killed when its launcher dies
ENV_NO_HOOK = "SHAREWISE_NO_HOOK"  # "1": the hook reports nothing (a --progress-regex job's interpreter)
ENV_TOKEN = "SHAREWISE_JOB_TOKEN"  # one value per launch: which processes belong to this start of the job


class CommandStartError(SharewiseError, OSError):
    """A command that could not be started (no such program, no such working directory)."""


def job_environment(
    command: CommandSpec,
    *,
    progress_path: str | os.PathLike,
    max_steps: int | None = None,
    start_step: int = 0,
    cores: Sequence[int] | None = None,
    cuda_devices: str | None = None,
    threads: int | None = None,
    extra_env: Mapping[str, str] | None = None,
    features_path: str | os.PathLike | None = None,
    die_with_parent: bool = False,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment ``launch`` gives a job, from low to high precedence.

    1. ``base`` (default this process's environment), then a warm worker's thread settings for ``cores``
       and ``threads`` (``modes.worker_env``: OMP/MKL threads, ``OMP_WAIT_POLICY=PASSIVE``, ...);
    2. ``CUDA_VISIBLE_DEVICES = cuda_devices`` when given; ``extra_env`` (a sharing mode's, e.g. MPS);
    3. the variables the spec sets (the user's explicit choice wins over sharewise's thread defaults);
    4. the step protocol: ``SHAREWISE_PROGRESS``, ``SHAREWISE_START_STEP``, ``SHAREWISE_MAX_STEPS`` (absent
       when None), ``SHAREWISE_FEATURES``, and the hook folder first on ``PYTHONPATH``.

    Parameters
    ----------
    command : CommandSpec
        From ``parse_command``.
    progress_path : path
        The progress file the job appends ``<step> <unix time>`` lines to (``profiler.progress``).
    max_steps : int, optional
        The job exits with code 0 once its step count (``start_step`` included) reaches this.
    start_step : int
        Steps done before this start (a restart continues the count).
    cores : sequence of int, optional
        Cores the job is pinned to (every thread of the started process, and its later threads and children;
        a Python job also pins itself at interpreter start). None: every core this process may use, unpinned.
        The thread count defaults to the number of cores.
    cuda_devices : str, optional
        ``CUDA_VISIBLE_DEVICES`` of the job (e.g. ``"3"``: it sees that GPU as ``cuda:0``); None leaves the
        variable as inherited.
    threads : int, optional
        OpenMP/MKL threads (default: the number of cores).
    extra_env : mapping, optional
        More environment (a sharing mode's); the spec's own variables still win.
    features_path : path, optional
        Where the step hook writes its info (first step) and, when asked, its features (``stephook``).
    die_with_parent : bool
        The job is killed when the process that launched it dies (Linux; a Python job arranges it at
        interpreter start, a ``--progress-regex`` job's output reader at its start).
    base : mapping, optional
        The environment to start from (default: this process's).

    Example (abridged): ``{"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE", "SEED": "1",
    "SHAREWISE_PROGRESS": "/tmp/j/progress", "SHAREWISE_START_STEP": "0", "PYTHONPATH": ".../hook", ...}``.
    """
    from sharewise.profiler.modes import CoreAssignment, available_cores, worker_env

    if max_steps is not None and max_steps < 1:
        raise ConfigError(f"max_steps must be >= 1 (or None), got {max_steps}")
    if start_step < 0:
        raise ConfigError(f"start_step must be >= 0, got {start_step}")
    where = tuple(cores) if cores else available_cores()
    env = worker_env(CoreAssignment(where, threads or len(where)), dict(os.environ if base is None else base))
    # A job sharewise measures is not one another scheduler started: an exported $SHAREWISE_OBSERVE_PORT would make
    # every worker try the same port (``sharewise observe``'s variables).
    for key in (progress.ENV_MAX_STEPS, ENV_FEATURES, ENV_PIN, ENV_DIE_WITH_PARENT, ENV_NO_HOOK, *OBSERVE_ENV):
        env.pop(key, None)
    if cuda_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(cuda_devices)
    env.update(extra_env or {})
    env.update(command.environ)
    env[progress.ENV_PATH] = os.path.abspath(progress_path)
    env[progress.ENV_START_STEP] = str(int(start_step))
    if max_steps is not None:
        env[progress.ENV_MAX_STEPS] = str(int(max_steps))
    if features_path is not None:
        env[ENV_FEATURES] = os.path.abspath(features_path)
    if cores:
        env[ENV_PIN] = "1"
    if die_with_parent:
        env[ENV_DIE_WITH_PARENT] = "1"
    env[ENV_LIB] = str(LIB_DIR)
    env[ENV_TOKEN] = uuid.uuid4().hex
    env["PYTHONPATH"] = os.pathsep.join([str(HOOK_DIR), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)])
    return env


def launch(
    command: CommandSpec,
    *,
    stdout: str | os.PathLike | int | IO[Any] | None = None,
    stderr: str | os.PathLike | int | IO[Any] | None = subprocess.STDOUT,
    cwd_base: str | os.PathLike | None = None,
    **environment: Any,
) -> subprocess.Popen:
    """Start ``command`` as a job and return its ``Popen`` (its own session: ``os.killpg(proc.pid, sig)``).

    Parameters
    ----------
    command : CommandSpec
        From ``parse_command``.
    stdout, stderr : path, file, fd or ``subprocess`` constant
        Where the job's output goes; a path is opened for appending. ``stderr`` defaults to ``stdout``'s.
    cwd_base : path, optional
        What a relative ``--cwd`` is relative to (default: the current directory).
    **environment
        ``job_environment``'s keywords (``progress_path`` required; ``max_steps``, ``start_step``, ``cores``,
        ``cuda_devices``, ``threads``, ``extra_env``, ``features_path``, ``die_with_parent``): the job's
        environment. A job given ``cores`` is also pinned to them from outside, every thread of it now.

    Raises
    ------
    CommandStartError
        The working directory does not exist, or the program cannot be executed.
    """
    workdir = command.workdir(cwd_base)
    if not workdir.is_dir():
        raise CommandStartError(
            f"{command.name}: working directory {str(workdir)!r} does not exist (from --cwd {command.cwd!r})"
        )
    env = job_environment(command, **environment)
    argv = list(command.argv)
    if command.progress_regex is not None:
        # A reader process in the job's session turns matching output lines into steps; the job itself
        # runs without the hook (it may not be PyTorch at all).
        argv = [sys.executable, "-m", "sharewise.profiler.outputsteps", command.progress_regex, "--", *argv]
    opened: list[IO[Any]] = []
    try:
        out = _stream(stdout, opened)
        err = stderr if stderr is subprocess.STDOUT else _stream(stderr, opened)
        try:
            proc = subprocess.Popen(
                argv,
                cwd=str(workdir),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise CommandStartError(
                f"{command.name}: cannot start {shlex.join(command.argv)!r}: {exc.strerror or exc} "
                f"(program {command.argv[0]!r}, working directory {str(workdir)!r}; check the name and PATH)"
            ) from None
    finally:
        for fh in opened:
            fh.close()  # the child holds its own descriptor
    cores = environment.get("cores")
    if cores:
        pin_process(proc.pid, cores)
    return proc


def _stream(target, opened: list) -> Any:
    if isinstance(target, (str, os.PathLike)):
        fh = open(target, "ab")  # noqa: SIM115 - closed by launch once the child holds it
        opened.append(fh)
        return fh
    return target


def pin_process(pid: int, cores: Sequence[int]) -> None:
    """Pin every thread of process ``pid`` to ``cores`` (threads and children made later inherit it)."""
    if not hasattr(os, "sched_setaffinity"):
        return
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = [pid]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, set(cores))
        except OSError:  # the thread ended meanwhile
            pass
