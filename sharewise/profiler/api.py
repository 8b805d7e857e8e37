"""Profiler entry points for solo profiles: profile workloads (with the feature cache) on one or all devices."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import pandas as pd

from sharewise.datasets.store import Dataset
from sharewise.profiler.config import RunConfig, device_kind
from sharewise.profiler.interrupts import StopSignals
from sharewise.profiler.modes import SHARING_MODES
from sharewise.profiler.pool import WorkerPool
from sharewise.profiler.solo import add_pm_scores, profile_workload
from sharewise.profiler.workloads import resolve_specs, workload_name
from sharewise.profiler.writes import write_rows


def _feature_key(spec: str, config: RunConfig, info: dict) -> dict:
    return {
        "workload": workload_name(spec),
        "spec": spec,
        "size": config.size,
        "batch_size": int(info["batch_size"]),
        "device_name": info["device_name"],
        "torch_version": info.get("torch_version", ""),
        "mode": config.mode,
    }


def profile_one(
    spec: str,
    config: RunConfig,
    use_cache: bool = True,
    extra_env: dict[str, str] | None = None,
    pool: WorkerPool | None = None,
) -> dict:
    """Profile one workload and return its profiles-table row; features come from the cache when present.

    Features depend on (workload, size, batch size, device, torch version, mode), not on the run, so they
    are computed once and cached (``$SHAREWISE_CACHE_DIR`` or ``~/.cache/sharewise/features``), except a
    command's, measured at every profile. ``pool``:
    warm workers to run in and leave the job's worker in (a campaign's, see ``profile_workload``).
    """
    from sharewise.profiler.commands import is_command_spec
    from sharewise.profiler.features import FeatureCache

    # A command's features come from its script, which may change while its spec stays the same: never cached.
    cache = FeatureCache() if use_cache and not is_command_spec(spec) else None

    def lookup(info: dict):
        if cache is None:
            return None
        return cache.get(_feature_key(spec, config, info))

    result = profile_workload(spec, config, feature_lookup=lookup, extra_env=extra_env, pool=pool)
    if cache is not None and result.new_features is not None:
        cache.put(_feature_key(spec, config, result.row), result.new_features)
    return result.row


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
    the same workload (PAL's performance-variability score). With warm isolation one probe process per
    device serves every workload's profile.
    """
    from sharewise.profiler.device import device_name

    dataset = out if isinstance(out, Dataset) or out is None else Dataset(out)
    resolved = resolve_specs(specs)
    devices = visible_devices(config) if all_devices else [config.device]
    for dev in devices:
        device_name(dev)  # fail early, with the list of devices, before any run
    rows = []
    # The sharing mode's environment (the MPS daemon for ``mps``) holds for every profile, as in a campaign:
    # a profile labelled ``mps`` is measured under MPS, its probe window included.
    with StopSignals() as stops, SHARING_MODES.get(config.mode).environment(config) as mode_env:
        extra_env = dict(mode_env) or None
        pools = {
            dev: WorkerPool(config.replace(device=dev), extra_env, reuse=config.isolation == "warm") for dev in devices
        }
        try:
            with dataset.lock("profile") if dataset is not None else contextlib.nullcontext():
                for spec, _name in resolved:
                    rows.extend(_profile_devices(spec, config, pools, dataset, all_devices, use_cache, on_row, stops))
        finally:
            for pool in pools.values():
                pool.close()
    return pd.DataFrame(rows)


def _profile_devices(spec, config, pools, dataset, all_devices, use_cache, on_row, stops) -> list[dict]:
    """Profile one workload on each device; rows persist at once, or together once PM scores are known."""
    per_device = []
    for dev, pool in pools.items():
        row = profile_one(spec, config.replace(device=dev), use_cache=use_cache, pool=pool)
        pool.evict_spec(spec)  # no later run here needs the job's worker; the probe's stays for the next
        per_device.append(row)
        if not all_devices:
            with stops.deferred():
                _persist(dataset, row, on_row)
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
