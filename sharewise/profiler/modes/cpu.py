"""Sharing mode ``cpu``: both processes on every CPU core, time-shared by the OS scheduler."""

from __future__ import annotations

from sharewise.profiler.modes.base import SharingMode, share_all_cores

MODE = SharingMode(
    name="cpu",
    device_kind="cpu",
    summary="both processes on all CPU cores, time-shared; OpenMP threads wait passively",
    placements=share_all_cores,
)
