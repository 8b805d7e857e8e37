"""Sharing mode ``timeslice``: default CUDA contexts, which the driver time-slices on the GPU."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator

from sharewise.errors import DeviceError
from sharewise.profiler.modes.base import ModeSettings, SharingMode, split_threads
from sharewise.profiler.modes.mps import CONTROL_BINARY, daemon_answers, default_pipe_directory


@contextlib.contextmanager
def timeslice_environment(config: ModeSettings) -> Iterator[dict[str, str]]:
    """Run the block with nothing added to the workers' environment, after checking that no MPS daemon serves them.

    CUDA makes every new context a client of an MPS daemon it finds on the pipe directory
    (``CUDA_MPS_PIPE_DIRECTORY`` or ``/tmp/nvidia-mps``), so with one there the run would measure MPS. Raises
    ``DeviceError`` in that case. Without the MPS binary, or without a control pipe, nothing is run.
    """
    control = shutil.which(CONTROL_BINARY)
    pipe_dir = default_pipe_directory()
    if control is not None and daemon_answers(control, pipe_dir):
        raise DeviceError(
            f"mode 'timeslice' needs the GPU without MPS, but an MPS daemon serves {pipe_dir}, so the timeslice "
            f"workers would be its clients and measure MPS; stop it with `echo quit | {CONTROL_BINARY}` "
            f"(CUDA_MPS_PIPE_DIRECTORY={pipe_dir}) or use --mode mps"
        )
    yield {}


MODE = SharingMode(
    name="timeslice",
    device_kind="cuda",
    summary="default CUDA contexts, time-sliced by the driver",
    placements=split_threads,
    environment=timeslice_environment,
)
