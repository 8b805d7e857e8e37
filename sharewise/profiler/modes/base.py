"""What every sharing mode is: its one signature, the cores a worker gets, and the worker environment."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol


class ModeSettings(Protocol):
    """What a sharing mode reads of a run's settings: its device, mode and threads per process (``profiler.config.
    RunConfig`` is one; the modes sit below the config, which checks a mode name against them)."""

    device: str
    mode: str
    threads: int | None


@dataclass(frozen=True)
class CoreAssignment:
    """Where one worker process runs on the host: the cores it may use and its thread count, and the environment
    it starts with beyond the mode's (``env``: a sharing knob that the process reads at start, e.g. MPS's
    thread percentage; part of the assignment so a warm worker is reused only under the same knob)."""

    cores: tuple[int, ...]
    threads: int
    env: tuple[tuple[str, str], ...] = ()


@contextlib.contextmanager
def no_extra_env(config: ModeSettings) -> Iterator[dict[str, str]]:
    """The environment of modes that need no daemon: nothing added."""
    yield {}


@dataclass(frozen=True)
class SharingMode:
    """How two worker processes share one device; one module per mode, listed in ``SHARING_MODES``.

    Example: ``SharingMode("cpu", "cpu", "both processes on all cores, time-shared", share_all_cores)``.

    Attributes
    ----------
    name : str
        The mode's registry name (``--mode``).
    device_kind : str
        ``"cpu"`` or ``"cuda"``: the devices the mode runs on.
    summary : str
        One line for help text and docs.
    placements : callable
        ``(config, n_workers) -> list[CoreAssignment]``: one assignment per worker of a run.
    environment : callable
        ``(config) -> context manager`` yielding the extra environment of the workers while the mode is
        in use (the MPS daemon's pipe directory for ``mps``, nothing for the others).
    solo_as : str, optional
        The mode whose solo runs this mode's equal (a job alone runs the same way in both), so its solo
        features are reused rather than traced again: ``mps`` takes ``timeslice``'s, since a lone MPS client
        runs its kernels as a lone context does. None: the mode's own (``cpu-partition`` gives a job half
        the cores ``cpu`` does, so its features differ).
    """

    name: str
    device_kind: str
    summary: str
    placements: Callable[[ModeSettings, int], list[CoreAssignment]]
    environment: Callable[[ModeSettings], AbstractContextManager[dict[str, str]]] = no_extra_env
    solo_as: str | None = None

    @property
    def features_mode(self) -> str:
        """The mode under which this mode's solo features are kept (``solo_as``, else its own name)."""
        return self.solo_as or self.name

    def __post_init__(self) -> None:
        if self.device_kind not in ("cpu", "cuda"):
            raise ValueError(
                f"sharing mode {self.name!r}: device_kind must be 'cpu' or 'cuda', got {self.device_kind!r}"
            )


def available_cores() -> tuple[int, ...]:
    """Return the cores this process may run on (respects cgroup/taskset limits)."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return tuple(range(os.cpu_count() or 1))


def share_all_cores(config: ModeSettings, n_workers: int) -> list[CoreAssignment]:
    """Every worker on every core, each with as many threads as cores (or ``config.threads``)."""
    cores = available_cores()
    return [CoreAssignment(cores, config.threads or len(cores)) for _ in range(n_workers)]


def split_threads(config: ModeSettings, n_workers: int) -> list[CoreAssignment]:
    """Every worker on every core for its host-side work, the threads split so they do not oversubscribe.

    The placement of the CUDA modes: the device is shared, the host's cores only feed it.
    """
    cores = available_cores()
    threads = config.threads or max(1, len(cores) // max(1, n_workers))
    return [CoreAssignment(cores, threads) for _ in range(n_workers)]


def worker_env(assignment: CoreAssignment, base: dict[str, str] | None = None) -> dict[str, str]:
    """Return the environment of a worker process; set before torch is imported there.

    ``OMP_WAIT_POLICY=PASSIVE`` is mandatory: spinning OpenMP threads turn CPU oversubscription into
    3-26x slowdown artefacts instead of the time-sharing we mean to measure. ``TEARDOWN_CUPTI=1``: a worker's
    features are traced with the CUDA profiler (CUPTI) before its throughput and probe windows, and without
    it CUPTI stays attached after the trace and slows every later kernel launch of the process by 10-20%
    (pytorch#144455), which those windows would measure.
    """
    env = dict(os.environ if base is None else base)
    threads = str(assignment.threads)
    env.update(
        {
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
            "OMP_WAIT_POLICY": "PASSIVE",
            "KMP_BLOCKTIME": "0",
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "PYTHONUNBUFFERED": "1",
            "TEARDOWN_CUPTI": "1",
            "SHAREWISE_CORES": ",".join(str(c) for c in assignment.cores),
        }
    )
    return env
