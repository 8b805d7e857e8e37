"""Sharing mode ``mps``: both processes are clients of one NVIDIA MPS daemon, started for the run if needed."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from sharewise.errors import MPSUnavailableError
from sharewise.profiler.modes.base import SharingMode, split_threads

if TYPE_CHECKING:
    from sharewise.profiler.config import RunConfig


class MpsDaemon:
    """Uses a running NVIDIA MPS control daemon, or starts one for the campaign and stops it after.

    Raises ``MPSUnavailableError`` with the reason when MPS cannot be used (no binary, the GPU is not in a
    compute mode MPS allows, the daemon does not start).
    """

    def __init__(self) -> None:
        self.started = False
        self._dir: str | None = None
        self.env: dict[str, str] = {}

    def __enter__(self) -> MpsDaemon:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        if self.started:
            raise RuntimeError("MpsDaemon.start() called twice")
        control = shutil.which("nvidia-cuda-mps-control")
        if control is None:
            raise MPSUnavailableError(
                "mode 'mps' needs NVIDIA MPS, but nvidia-cuda-mps-control is not on PATH; install the CUDA "
                "toolkit's MPS binaries or use --mode timeslice"
            )
        pipe_dir = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
        if _mps_running(control, pipe_dir):
            self.env = {"CUDA_MPS_PIPE_DIRECTORY": pipe_dir}
            return
        self._dir = tempfile.mkdtemp(prefix="sharewise-mps-")
        pipe_dir = str(Path(self._dir) / "pipe")
        log_dir = str(Path(self._dir) / "log")
        os.makedirs(pipe_dir)
        os.makedirs(log_dir)
        env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": pipe_dir, "CUDA_MPS_LOG_DIRECTORY": log_dir}
        proc = subprocess.run([control, "-d"], env=env, capture_output=True, text=True, timeout=30)
        if proc.returncode != 0 or not _mps_running(control, pipe_dir):
            log = Path(log_dir) / "control.log"
            detail = (proc.stderr or "").strip() or (log.read_text()[-300:] if log.exists() else "")
            raise MPSUnavailableError(
                f"could not start the MPS daemon ({detail or 'no output'}); check that the GPU's compute mode "
                "allows MPS (nvidia-smi -q | grep 'Compute Mode') or use --mode timeslice"
            )
        self.started = True
        self.env = {"CUDA_MPS_PIPE_DIRECTORY": pipe_dir, "CUDA_MPS_LOG_DIRECTORY": log_dir}

    def stop(self) -> None:
        if not self.started:
            return
        control = shutil.which("nvidia-cuda-mps-control")
        if control:
            subprocess.run(
                [control],
                input="quit\n",
                env={**os.environ, **self.env},
                capture_output=True,
                text=True,
                timeout=30,
            )
        self.started = False
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)


def _mps_running(control: str, pipe_dir: str) -> bool:
    if not Path(pipe_dir, "control").exists():
        return False
    probe = subprocess.run(
        [control],
        input="get_server_list\n",
        env={**os.environ, "CUDA_MPS_PIPE_DIRECTORY": pipe_dir},
        capture_output=True,
        text=True,
        timeout=10,
    )
    return probe.returncode == 0


@contextlib.contextmanager
def mps_environment(config: RunConfig) -> Iterator[dict[str, str]]:
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
)
