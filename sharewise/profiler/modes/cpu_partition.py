"""Sharing mode ``cpu-partition``: each process pinned to its own cores; caches and memory are shared."""

from __future__ import annotations

from sharewise.errors import ConfigError
from sharewise.profiler.modes.base import CoreAssignment, ModeSettings, SharingMode, available_cores


def partition_cores(config: ModeSettings, n_workers: int) -> list[CoreAssignment]:
    """Split the cores into disjoint equal parts, one per worker; a solo run gets the part a pair member would."""
    cores = available_cores()
    if n_workers <= 1:
        half = cores[: max(1, len(cores) // 2)]
        return [CoreAssignment(half, config.threads or len(half))]
    if len(cores) < n_workers:
        raise ConfigError(
            f"mode 'cpu-partition' needs at least {n_workers} cores, this process may use {len(cores)}"
        )
    share = len(cores) // n_workers
    parts = [cores[i * share : (i + 1) * share] for i in range(n_workers)]
    return [CoreAssignment(p, config.threads or len(p)) for p in parts]


MODE = SharingMode(
    name="cpu-partition",
    device_kind="cpu",
    summary="each process pinned to its own CPU cores: only caches and memory bandwidth are shared",
    placements=partition_cores,
)
