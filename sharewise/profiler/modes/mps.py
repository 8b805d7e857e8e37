"""Sharing mode ``mps``: both processes are clients of one NVIDIA MPS daemon, started for the run if needed."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from sharewise.errors import MPSUnavailableError
from sharewise.profiler.modes.base import ModeSettings, SharingMode, split_threads

#: The MPS control binary; CUDA itself connects to the daemon it starts, through the control pipe.
CONTROL_BINARY = "nvidia-cuda-mps-control"
#: Where CUDA looks for a daemon when ``CUDA_MPS_PIPE_DIRECTORY`` is not set.
DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"
#: Seconds a daemon started here has to answer on its control pipe before the start counts as failed.
READY_TIMEOUT_S = 15.0
#: Seconds between two readiness probes.
READY_POLL_S = 0.1
#: Seconds one control command (a probe, ``quit``) may take; a healthy daemon answers at once.
CONTROL_TIMEOUT_S = 10.0
#: Seconds the daemon's processes have to exit after an answered ``quit`` before they are killed.
QUIT_GRACE_S = 5.0
#: Lines of the daemon's output and log quoted when it fails.
LOG_TAIL_LINES = 10


class MpsDaemon:
    """Uses a running NVIDIA MPS control daemon, or starts one for the campaign and stops it after.

    A daemon started here lives in a private folder (``pipe/``, ``log/`` and its output ``daemon.out``) and is
    quit, and its folder removed, whether the start fails or ``stop()`` ends it; a daemon found running is
    used as is and left running (``started`` stays False).

    Raises ``MPSUnavailableError`` with the reason when MPS cannot be used (no binary, the GPU is not in a
    compute mode MPS allows, the daemon does not start or does not answer).
    """

    def __init__(self) -> None:
        self.started = False
        self._dir: str | None = None
        self._proc: subprocess.Popen | None = None
        self.env: dict[str, str] = {}

    def __enter__(self) -> MpsDaemon:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        if self.started:
            raise RuntimeError("MpsDaemon.start() called twice")
        control = shutil.which(CONTROL_BINARY)
        if control is None:
            raise MPSUnavailableError(
                f"mode 'mps' needs NVIDIA MPS, but {CONTROL_BINARY} is not on PATH; install the CUDA "
                "toolkit's MPS binaries or use --mode timeslice"
            )
        pipe_dir = default_pipe_directory()
        if daemon_answers(control, pipe_dir):
            self.env = {"CUDA_MPS_PIPE_DIRECTORY": pipe_dir}
            return
        self._dir = tempfile.mkdtemp(prefix="sharewise-mps-")
        pipe_dir = str(Path(self._dir) / "pipe")
        log_dir = str(Path(self._dir) / "log")
        env = {"CUDA_MPS_PIPE_DIRECTORY": pipe_dir, "CUDA_MPS_LOG_DIRECTORY": log_dir}
        # Whatever goes wrong from here on, an interrupt included, the daemon is quit and its folder removed.
        try:
            os.makedirs(pipe_dir)
            os.makedirs(log_dir)
            problem = self._launch(control, self._dir, {**os.environ, **env})
        except BaseException:
            self._discard(control, pipe_dir)
            raise
        if problem is not None:
            output = _output_tail(self._dir)
            self._discard(control, pipe_dir)
            raise MPSUnavailableError(
                f"could not start the MPS daemon: {problem}; its last output:\n{output}\n"
                "check that the GPU's compute mode allows MPS (nvidia-smi -q | grep 'Compute Mode' must show "
                "Default or Exclusive_Process) or use --mode timeslice"
            )
        self.started = True
        self.env = env

    def _launch(self, control: str, folder: str, env: dict[str, str]) -> str | None:
        """Start ``control -d`` with its output in ``folder`` and wait until it answers; return None, or what failed."""
        pipe_dir = env["CUDA_MPS_PIPE_DIRECTORY"]
        # A file, not pipes: the daemonised child inherits the output, so a pipe would never see EOF.
        with open(Path(folder) / "daemon.out", "ab") as out:
            try:
                self._proc = subprocess.Popen(
                    [control, "-d"],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as e:
                return f"{control} -d could not be run ({e})"
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            code = self._proc.poll()
            if code is not None and code != 0:
                return f"{control} -d exited with status {code}"
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return f"the daemon did not answer on its control pipe {pipe_dir} within {READY_TIMEOUT_S:g} s"
            if daemon_answers(control, pipe_dir, min(CONTROL_TIMEOUT_S, remaining)):
                return None
            time.sleep(min(READY_POLL_S, max(remaining, 0.0)))

    def _discard(self, control: str, pipe_dir: str) -> None:
        """Quit the daemon started here, kill what is left of it, and remove its folder."""
        quit_daemon(control, pipe_dir)
        if self._proc is not None:
            if self._proc.poll() is None:  # ``-d`` still running: its process group is its own (a new session)
                with contextlib.suppress(OSError):
                    os.killpg(self._proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=CONTROL_TIMEOUT_S)
            self._proc = None
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def stop(self) -> None:
        if not self.started:
            return
        self.started = False
        control = shutil.which(CONTROL_BINARY) or CONTROL_BINARY
        self._discard(control, self.env["CUDA_MPS_PIPE_DIRECTORY"])


def default_pipe_directory() -> str:
    """Return the pipe directory where CUDA looks for an MPS daemon: ``CUDA_MPS_PIPE_DIRECTORY`` or the default."""
    return os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE_DIRECTORY


def daemon_answers(control: str, pipe_dir: str, timeout: float | None = None) -> bool:
    """Return whether an MPS control daemon answers ``get_server_list`` on ``pipe_dir`` within ``timeout`` s.

    Without a ``control`` file in ``pipe_dir`` nothing is run: no daemon serves there. ``timeout`` defaults to
    ``CONTROL_TIMEOUT_S``; a daemon that does not answer in time counts as not serving.
    """
    if not Path(pipe_dir, "control").exists():
        return False
    limit = CONTROL_TIMEOUT_S if timeout is None else timeout
    return _control_command(control, pipe_dir, "get_server_list", limit) == 0


def quit_daemon(control: str, pipe_dir: str) -> None:
    """Send ``quit`` to the daemon of ``pipe_dir``, then kill its processes that are still running.

    Only processes of the MPS binaries whose environment names ``pipe_dir`` are killed, so a daemon serving
    another pipe directory, or a client of this one, is never touched.
    """
    answered = _control_command(control, pipe_dir, "quit", CONTROL_TIMEOUT_S) == 0
    # An answered quit ends the daemon and its servers in a moment; one not answered will not end them.
    deadline = time.monotonic() + (QUIT_GRACE_S if answered else 0.0)
    while _daemon_processes(pipe_dir) and time.monotonic() < deadline:
        time.sleep(0.05)
    for sig, wait_s in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
        pids = _daemon_processes(pipe_dir)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while pids and _daemon_processes(pipe_dir) and time.monotonic() < deadline:
            time.sleep(0.05)


def _control_command(control: str, pipe_dir: str, command: str, timeout: float) -> int | None:
    """Run one command through ``control``; return its exit status, or None if it failed to run or timed out."""
    try:
        # Output to /dev/null, not pipes, and a session of its own, so a hung command is killed whole.
        proc = subprocess.Popen(
            [control],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "CUDA_MPS_PIPE_DIRECTORY": pipe_dir},
            start_new_session=True,
        )
    except OSError:
        return None
    try:
        proc.communicate(f"{command}\n".encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)  # not yet waited for, so the group is still this one
        proc.wait()
        return None
    return proc.returncode


def _output_tail(folder: str) -> str:
    """The last lines of a started daemon's output and of its control log, indented for a message."""
    lines: list[str] = []
    for path in (Path(folder) / "daemon.out", Path(folder) / "log" / "control.log"):
        with contextlib.suppress(OSError):
            lines += path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    return "\n".join(f"  {line}" for line in lines if line.strip()) or "  (no output)"


def _daemon_processes(pipe_dir: str) -> list[int]:
    """The live processes of the MPS binaries started with ``CUDA_MPS_PIPE_DIRECTORY=pipe_dir`` (Linux /proc)."""
    wanted = f"CUDA_MPS_PIPE_DIRECTORY={pipe_dir}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if "nvidia-cuda-mps" not in (entry / "cmdline").read_bytes().decode(errors="replace"):
                continue
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or another user's
            continue
    return found


@contextlib.contextmanager
def mps_environment(config: ModeSettings) -> Iterator[dict[str, str]]:
    """Run the block with an MPS daemon (a running one, or one started here and stopped after).

    Yields the environment that makes worker processes its clients (``CUDA_MPS_PIPE_DIRECTORY``...);
    raises ``MPSUnavailableError`` with the reason when MPS cannot be used.
    """
    with MpsDaemon() as daemon:
        yield dict(daemon.env)


MODE = SharingMode(
    name="mps",
    device_kind="cuda",
    summary="both processes share the GPU through the NVIDIA MPS daemon (concurrent kernels)",
    placements=split_threads,
    environment=mps_environment,
    solo_as="timeslice",
)
