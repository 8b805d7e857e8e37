"""Sharing modes: the registry of how two worker processes share a device, one module per mode.

Adding a mode is its module (a ``SharingMode`` named ``MODE``) and one line in ``SHARING_MODES``; config
validation, worker placement and the campaign read the registry.
"""

from __future__ import annotations

from sharewise.profiler.modes.base import (
    CoreAssignment,
    ModeSettings,
    SharingMode,
    available_cores,
    worker_env,
)
from sharewise.registry import Registry

__all__ = [
    "SHARING_MODES",
    "CoreAssignment",
    "SharingMode",
    "available_cores",
    "modes_for",
    "placements",
    "worker_env",
]

#: name -> ``module:MODE``; the order is that of listings, and the first mode of a device kind is its default.
SHARING_MODES: Registry[SharingMode] = Registry(
    "sharing mode",
    "sharewise.profiler.modes",
    {
        "cpu": "cpu:MODE",
        "cpu-partition": "cpu_partition:MODE",
        "timeslice": "timeslice:MODE",
        "mps": "mps:MODE",
    },
    signature="SharingMode(name, device_kind, summary, placements(config, n_workers) -> list[CoreAssignment], "
    "environment(config) -> context manager of extra worker env)",
)


def modes_for(device_kind: str) -> list[str]:
    """Return the names of the sharing modes that run on ``device_kind`` (``"cpu"`` or ``"cuda"``), in order.

    >>> modes_for("cuda")
    ['timeslice', 'mps']
    """
    return [name for name, mode in SHARING_MODES.items() if mode.device_kind == device_kind]


def placements(config: ModeSettings, n_workers: int) -> list[CoreAssignment]:
    """Return one core assignment per worker of a run under ``config.mode``.

    ``cpu``: every worker may use every core (the OS time-shares them). ``cpu-partition``: the cores are
    split into disjoint parts, so only caches and memory bandwidth are shared. CUDA modes give each
    worker all cores for its host-side work, with threads split so the two do not oversubscribe.
    """
    return SHARING_MODES.get(config.mode).placements(config, n_workers)
