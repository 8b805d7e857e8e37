"""Sharing modes: the environment, CPU affinity and MPS daemon each worker process runs under."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sharewise.errors import MPSUnavailableError
from sharewise.profiler.config import RunConfig, device_kind


@dataclass(frozen=True)
class Placement:
    """Where one worker runs: the cores it may use and its thread count."""

    cores: tuple[int, ...]
    threads: int


def available_cores() -> tuple[int, ...]:
    """Return the cores this process may run on (respects cgroup/taskset limits)."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return tuple(range(os.cpu_count() or 1))


def placements(config: RunConfig, n_workers: int) -> list[Placement]:
    """Return one placement per worker of a run.

    ``cpu``: every worker may use every core (the OS time-shares them). ``cpu-partition``: the cores are
    split into disjoint halves, so only caches and memory bandwidth are shared. CUDA modes give each
    worker all cores for its host-side work, with threads split so the two do not oversubscribe.
    """
    cores = available_cores()
    if config.mode == "cpu-partition" and n_workers > 1:
        if len(cores) < n_workers:
            from sharewise.errors import ConfigError

            raise ConfigError(
                f"mode 'cpu-partition' needs at least {n_workers} cores, this process may use {len(cores)}"
            )
        share = len(cores) // n_workers
        parts = [cores[i * share : (i + 1) * share] for i in range(n_workers)]
        return [Placement(p, config.threads or len(p)) for p in parts]
    if config.mode == "cpu-partition":
        # A solo profile in partition mode uses the half of the machine a pair member would get.
        half = cores[: max(1, len(cores) // 2)]
        return [Placement(half, config.threads or len(half))]
    if device_kind(config.device) == "cuda":
        threads = config.threads or max(1, len(cores) // max(1, n_workers))
        return [Placement(cores, threads) for _ in range(n_workers)]
    return [Placement(cores, config.threads or len(cores)) for _ in range(n_workers)]


def worker_env(placement: Placement, base: dict[str, str] | None = None) -> dict[str, str]:
    """Return the environment of a worker process; set before torch is imported there.

    ``OMP_WAIT_POLICY=PASSIVE`` is mandatory: spinning OpenMP threads turn CPU oversubscription into
    3-26x slowdown artefacts instead of the time-sharing we mean to measure.
    """
    env = dict(os.environ if base is None else base)
    threads = str(placement.threads)
    env.update(
        {
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
            "OMP_WAIT_POLICY": "PASSIVE",
            "KMP_BLOCKTIME": "0",
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "PYTHONUNBUFFERED": "1",
            "SHAREWISE_CORES": ",".join(str(c) for c in placement.cores),
        }
    )
    return env


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
