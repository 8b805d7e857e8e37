"""Profiler entry points for solo profiles: profile workloads on one or all devices, through the local executor."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import pandas as pd

from sharewise.datasets.store import Dataset
from sharewise.errors import ProfileFailed
from sharewise.profiler.config import RunConfig, device_kind
from sharewise.profiler.executors.local import LocalExecutor
from sharewise.profiler.interrupts import StopSignals
from sharewise.profiler.modes import SHARING_MODES
from sharewise.profiler.solo import ProfileTask, add_pm_scores
from sharewise.profiler.workloads import resolve_specs, workload_name
from sharewise.profiler.writes import write_rows


def profile_one(
    spec: str, config: RunConfig, use_cache: bool = True, extra_env: dict[str, str] | None = None
) -> dict:
    """Profile one workload and return its profiles-table row; raises ``ProfileFailed``.

    Features depend on (workload, size, batch size, device, torch version, mode), not on the run, so they
    are computed once and cached (``$SHAREWISE_CACHE_DIR`` or ``~/.cache/sharewise/features``), except a
    command's, measured at every profile (``solo.profile_workload``). ``use_cache=False`` recomputes them.

    Example row (abridged): ``{"workload": "ncf", "batch_size": 256, "throughput": 41.2, "f_probe_slowdown":
    1.31, ...}``
    """
    from sharewise.profiler.device import device_name

    task = ProfileTask(spec, workload_name(spec), use_cache=use_cache, keep_worker=False)
    with LocalExecutor(config, device_name(config.device), extra_env) as executor:
        finished = executor.run(task)
    if finished.row is None:
        raise ProfileFailed(finished.status, finished.error)
    return finished.row


def visible_devices(config: RunConfig) -> list[str]:
    """Return the devices ``--all-devices`` profiles: each visible GPU for CUDA, the CPU for CPU."""
    if device_kind(config.device) == "cpu":
        return ["cpu"]
    from sharewise.profiler.device import gpu_names

    return [f"cuda:{i}" for i in range(len(gpu_names()))]


def profile_many(
    specs: Sequence[str],
    config: RunConfig,
    out: str | Dataset | None = None,
    all_devices: bool = False,
    use_cache: bool = True,
    on_row: Callable[[dict], None] | None = None,
) -> pd.DataFrame:
    """Profile each workload (on each visible device with ``all_devices``), persisting each row as it lands.

    With ``all_devices`` each row also gets ``pm_score``: its throughput relative to the median device's for
    the same workload (PAL's performance-variability score). One local executor per device runs the
    profiles; with warm isolation its probe process serves every workload's profile there.
    """
    from sharewise.profiler.device import device_name

    dataset = out if isinstance(out, Dataset) or out is None else Dataset(out)
    resolved = resolve_specs(specs)
    devices = visible_devices(config) if all_devices else [config.device]
    names = {dev: device_name(dev) for dev in devices}  # fail early, with the list of devices, before any run
    rows = []
    # The sharing mode's environment (the MPS daemon for ``mps``) holds for every profile, as in a campaign:
    # a profile labelled ``mps`` is measured under MPS, its probe window included.
    with StopSignals() as stops, SHARING_MODES.get(config.mode).environment(config) as mode_env:
        extra_env = dict(mode_env) or None
        executors = {dev: LocalExecutor(config.replace(device=dev), names[dev], extra_env) for dev in devices}
        try:
            with dataset.lock("profile") if dataset is not None else contextlib.nullcontext():
                for spec, name in resolved:
                    # No pair follows: the job's worker is ended after its profile; the probe's stays.
                    task = ProfileTask(spec, name, use_cache=use_cache, keep_worker=False)
                    rows.extend(_profile_devices(task, executors, dataset, all_devices, on_row, stops))
        finally:
            for executor in executors.values():
                executor.close()
    return pd.DataFrame(rows)


def _profile_devices(task, executors, dataset, all_devices, on_row, stops) -> list[dict]:
    """Profile one workload on each device; rows persist at once, or together once PM scores are known."""
    per_device = []
    for executor in executors.values():
        finished = executor.run(task)
        if finished.row is None:
            raise ProfileFailed(finished.status, finished.error)
        per_device.append(finished.row)
        if not all_devices:
            with stops.deferred():
                _persist(dataset, finished.row, on_row)
    if all_devices:
        with stops.deferred():
            for row in add_pm_scores(per_device):
                _persist(dataset, row, on_row)
    return per_device


def _persist(dataset: Dataset | None, row: dict, on_row) -> None:
    if dataset is not None:
        write_rows(dataset, "profiles", [row])
    if on_row is not None:
        on_row(row)
