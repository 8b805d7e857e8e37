"""Sharing mode ``timeslice``: default CUDA contexts, which the driver time-slices on the GPU."""

from __future__ import annotations

from sharewise.profiler.modes.base import SharingMode, split_threads

MODE = SharingMode(
    name="timeslice",
    device_kind="cuda",
    summary="default CUDA contexts, time-sliced by the driver",
    placements=split_threads,
)
