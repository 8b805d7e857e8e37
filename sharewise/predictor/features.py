"""Pair features: join pairs to solo profiles and build ordered (self, partner) feature rows with numpy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sharewise.errors import DatasetError, ModelSchemaError, SchemaError

# Profile columns that are not named f_* but describe the solo run on the device. ``throughput`` is left out
# on purpose: it is 1000 / iter_time_ms for the same run, and the CSV importer may have to fill it with a
# placeholder when a source gives no step time.
CORE_COLUMNS = ("iter_time_ms",)
# Batch size comes from the profile's ``batch_size`` column only when no ``f_batch_size`` feature exists.
_BATCH_FALLBACK = "batch_size"

# Sources of a per-job memory footprint, most to least direct. The last entry is an estimate from static
# counts: parameters, gradients and two Adam moments (4 x parameter bytes) plus activations.
_MEMORY_COLUMNS = ("f_mem_peak_allocated_bytes", "f_mem_peak_reserved_bytes", "f_mem_rss_growth_bytes")
_STATIC_MEMORY = ("f_param_bytes", "f_activation_bytes")

_STEP_TIME_COLUMNS = ("f_step_time_ms", "iter_time_ms")
_FLOP_RATE_COLUMNS = ("f_achieved_flop_rate", "f_achieved_flops")
_KERNEL_COUNT_COLUMNS = ("f_kernels_per_step", "f_ops_per_step_static")

SELF_PREFIX = "self_"
PARTNER_PREFIX = "partner_"
PAIR_PREFIX = "pair_"


@dataclass(frozen=True)
class PairRows:
    """Ordered pair rows ready for the regressor.

    ``X`` holds one row per (self, partner) direction; ``y`` the measured slowdown of self (``None`` for
    rows to predict); ``meta`` the identity of each row: ``self_workload, partner_workload, device_name,
    mode, self_family, partner_family, pair_id, direction`` (0: self is ``workload_a``, 1: ``workload_b``).
    """

    X: pd.DataFrame
    y: np.ndarray | None
    meta: pd.DataFrame


def base_columns(profiles: pd.DataFrame) -> list[str]:
    """Return the profile columns the pair features are built from: the core columns and every ``f_*``.

    Example: ``["iter_time_ms", "f_flops_per_step", "f_batch_size", "f_busy_frac"]``.
    """
    feats = [c for c in profiles.columns if isinstance(c, str) and c.startswith("f_")]
    cols = [c for c in CORE_COLUMNS if c in profiles.columns]
    if "f_batch_size" not in feats and _BATCH_FALLBACK in profiles.columns:
        cols.append(_BATCH_FALLBACK)
    return cols + feats


def base_columns_of_model(feature_names: Sequence[str]) -> list[str]:
    """Recover the profile columns a model was trained on from its pair feature names."""
    return [n[len(SELF_PREFIX) :] for n in feature_names if n.startswith(SELF_PREFIX)]


def pair_feature_names(base: Sequence[str]) -> list[str]:
    """Return the pair feature names built from ``base`` profile columns, in matrix order."""
    return _combo_plan(list(base))[0]


def pair_feature_matrix(
    self_values: np.ndarray, partner_values: np.ndarray, base: Sequence[str], same_workload: np.ndarray
) -> np.ndarray:
    """Build the float32 pair feature matrix from the self and partner profile values.

    Parameters
    ----------
    self_values, partner_values : ndarray of shape (n, len(base))
        Profile values of self and of the partner, columns in ``base`` order; NaN marks a missing value.
    base : sequence of str
        Profile column names (``base_columns``).
    same_workload : ndarray of shape (n,)
        True where self and partner are the same workload.

    Returns
    -------
    ndarray of shape (n, len(pair_feature_names(base))), float32
        Columns ``self_<col>...``, ``partner_<col>...``, then the symmetric ``pair_*`` combinations.
    """
    base = list(base)
    names, combos = _combo_plan(base)
    s = np.asarray(self_values, dtype=np.float64)
    p = np.asarray(partner_values, dtype=np.float64)
    n, k = s.shape
    out = np.empty((n, len(names)), dtype=np.float32)
    out[:, :k] = s
    out[:, k : 2 * k] = p
    col = {c: i for i, c in enumerate(base)}
    with np.errstate(divide="ignore", invalid="ignore"):
        for j, (_, fn) in enumerate(combos):
            values = fn(s, p, col, np.asarray(same_workload, dtype=bool))
            out[:, 2 * k + j] = np.where(np.isfinite(values), values, np.nan)
    return out


def _combo_plan(base: list[str]):
    """Return (all feature names, [(combo name, function)]) for the combinations ``base`` supports.

    A combination is included only when its inputs exist as columns, so the names are a pure function of
    ``base`` and a model can rebuild exactly its training columns from its own feature names.
    """
    have = set(base)
    combos: list[tuple[str, object]] = []

    def add(name, fn):
        combos.append((PAIR_PREFIX + name, fn))

    def col(name):
        return lambda v, c: v[:, c[name]]

    has_step = bool(have & set(_STEP_TIME_COLUMNS))
    if "f_busy_frac" in have:
        _symmetric(add, "busy_frac", col("f_busy_frac"), ("sum", "min", "max"))
    # Summed utilizations: two jobs that together need more than the device has must slow down.
    for name in base:
        if name.startswith("f_nvml_") and "util" in name:
            _symmetric(add, name[2:], col(name), ("sum",))
    if have & set(_MEMORY_COLUMNS) or set(_STATIC_MEMORY) <= have:
        _symmetric(add, "mem_bytes", _memory, ("sum",))
        if "f_device_mem_bytes" in have:
            add(
                "mem_fit",
                lambda s, p, c, _: (_memory(s, c) + _memory(p, c)) / s[:, c["f_device_mem_bytes"]],
            )
    if have & set(_FLOP_RATE_COLUMNS) or ("f_flops_per_step" in have and has_step):
        _symmetric(add, "flop_rate", job_flop_rate, ("log_ratio", "sum"))
    if "f_launch_rate" in have:
        _symmetric(add, "launch_rate", col("f_launch_rate"), ("log_ratio", "sum"))
    if "f_kernel_mean_us" in have or (have & set(_KERNEL_COUNT_COLUMNS) and has_step):
        # Time-slicing alternates kernels: a job with short kernels next to one with long kernels gets the
        # smaller share of device time, so the ratio of mean kernel durations sets who waits for whom.
        _symmetric(add, "kernel_us", _kernel_us, ("log_ratio",))
    if has_step:
        _symmetric(add, "step_ms", _step_ms, ("log_ratio", "share"))
    add("same_workload", lambda s, p, c, same: same.astype(np.float64))
    names = [SELF_PREFIX + b for b in base] + [PARTNER_PREFIX + b for b in base] + [n for n, _ in combos]
    return names, combos


def _symmetric(add, name: str, get, kinds: Sequence[str]) -> None:
    """Add combinations of one per-job quantity ``get(values, cols)`` of self and partner."""
    ops = {
        "sum": lambda a, b: a + b,
        "min": np.fmin,
        "max": np.fmax,
        "log_ratio": lambda a, b: np.log(a / b),  # self over partner; 0 when equal
        "share": lambda a, b: a / (a + b),
    }
    for kind in kinds:
        add(f"{kind}_{name}", lambda s, p, c, _, op=ops[kind]: op(get(s, c), get(p, c)))


def _first_present(values: np.ndarray, cols: dict[str, int], names: Sequence[str]) -> np.ndarray:
    out = np.full(values.shape[0], np.nan)
    for name in names:
        if name in cols:
            out = np.where(np.isnan(out), values[:, cols[name]], out)
    return out


def _memory(values: np.ndarray, cols: dict[str, int]) -> np.ndarray:
    mem = _first_present(values, cols, _MEMORY_COLUMNS)
    if set(_STATIC_MEMORY) <= set(cols):
        static = 4.0 * values[:, cols["f_param_bytes"]] + values[:, cols["f_activation_bytes"]]
        mem = np.where(np.isnan(mem), static, mem)
    return mem


def _step_ms(values: np.ndarray, cols: dict[str, int]) -> np.ndarray:
    return _first_present(values, cols, _STEP_TIME_COLUMNS)


def job_flop_rate(values: np.ndarray, cols: dict[str, int]) -> np.ndarray:
    """Return each job's FLOP rate: measured, else counted FLOPs per step over the step time, else NaN."""
    rate = _first_present(values, cols, _FLOP_RATE_COLUMNS)
    if "f_flops_per_step" in cols:
        counted = values[:, cols["f_flops_per_step"]] / (_step_ms(values, cols) / 1000.0)
        rate = np.where(np.isnan(rate), counted, rate)
    return rate


def _kernel_us(values: np.ndarray, cols: dict[str, int]) -> np.ndarray:
    mean = _first_present(values, cols, ("f_kernel_mean_us",))
    # Without a trace, step time over the number of kernels (or of counted ops) bounds the mean kernel time.
    per_step = _step_ms(values, cols) * 1000.0 / _first_present(values, cols, _KERNEL_COUNT_COLUMNS)
    return np.where(np.isnan(mean), per_step, mean)


# ---- joining pairs to profiles --------------------------------------------------------------------------


def profile_index(profiles: pd.DataFrame, workloads, devices, modes=None) -> np.ndarray:
    """Return, for each (workload, device, mode) query, the row of ``profiles`` that describes it, or -1.

    A query matches profiles of the same workload on the same device; among several, one of the same mode
    is preferred (when ``modes`` is given), then the latest ``created_at``.
    """
    workloads = np.asarray(workloads, dtype=object)
    devices = np.asarray(devices, dtype=object)
    if len(profiles) == 0:
        return np.full(len(workloads), -1, dtype=np.int64)
    created = profiles["created_at"].astype(str).to_numpy() if "created_at" in profiles else None
    order = np.argsort(created, kind="stable") if created is not None else np.arange(len(profiles))
    w = profiles["workload"].to_numpy(dtype=object)[order]
    d = profiles["device_name"].to_numpy(dtype=object)[order]
    any_mode = pd.MultiIndex.from_arrays([w, d])
    keep = ~any_mode.duplicated(keep="last")
    result = any_mode[keep].get_indexer(pd.MultiIndex.from_arrays([workloads, devices]))
    result = np.where(result >= 0, order[keep][np.maximum(result, 0)], -1)
    if modes is not None and "mode" in profiles:
        m = profiles["mode"].to_numpy(dtype=object)[order]
        by_mode = pd.MultiIndex.from_arrays([w, d, m])
        keep_m = ~by_mode.duplicated(keep="last")
        hit = by_mode[keep_m].get_indexer(
            pd.MultiIndex.from_arrays([workloads, devices, np.asarray(modes, dtype=object)])
        )
        result = np.where(hit >= 0, order[keep_m][np.maximum(hit, 0)], result)
    return result.astype(np.int64)


def _profile_matrix(profiles: pd.DataFrame, base: Sequence[str]) -> np.ndarray:
    missing = [c for c in base if c not in profiles.columns]
    if missing:
        raise ModelSchemaError(
            f"the profiles lack feature column(s) {missing} that the model was trained on; profile the "
            "workloads with the same features, or retrain the model on this data with 'sharewise train'"
        )
    if not base:
        return np.empty((len(profiles), 0))
    return profiles[list(base)].to_numpy(dtype=np.float64, na_value=np.nan)


def _families(profiles: pd.DataFrame) -> np.ndarray:
    fam = profiles["family"].astype(str).to_numpy(dtype=object) if "family" in profiles else None
    names = profiles["workload"].astype(str).to_numpy(dtype=object)
    if fam is None:
        return names
    # A profile without a family is its own family, so grouping by family never merges unrelated models.
    return np.where(fam == "", names, fam)


def ordered_rows(
    profiles: pd.DataFrame,
    pairs: pd.DataFrame,
    base: Sequence[str] | None = None,
    with_target: bool = True,
    device_name: str | None = None,
) -> PairRows:
    """Join pair rows to their profiles and return both ordered directions of every pair.

    Parameters
    ----------
    profiles : DataFrame
        Profiles table (``workload, family, device_name, mode, created_at, iter_time_ms``, ``f_*``).
    pairs : DataFrame
        ``workload_a, workload_b`` and, optionally, ``device_name``, ``mode``; with ``with_target`` also
        ``slowdown_a, slowdown_b`` (only rows with status ``ok`` are used when a status column exists).
    base : sequence of str, optional
        Profile columns to build features from; default ``base_columns(profiles)``.
    with_target : bool
        Whether to return measured slowdowns as ``y``.
    device_name : str, optional
        Device for pairs without a ``device_name`` column; by default the only device of ``profiles``.

    Returns
    -------
    PairRows
        Direction 0 of pair ``i`` is row ``i``, direction 1 is row ``n + i``.

    Raises
    ------
    DatasetError
        A pair names a workload with no profile on its device.
    """
    if base is None:
        base = base_columns(profiles)
    for col in ("workload_a", "workload_b"):
        if col not in pairs.columns:
            raise SchemaError(f"pairs table lacks column {col!r}; it needs workload_a and workload_b")
    if with_target and "status" in pairs.columns:
        pairs = pairs[pairs["status"] == "ok"]
    pairs = pairs.reset_index(drop=True)
    profiles = profiles.reset_index(drop=True)
    n = len(pairs)
    wa = pairs["workload_a"].astype(str).to_numpy(dtype=object)
    wb = pairs["workload_b"].astype(str).to_numpy(dtype=object)
    if "device_name" in pairs.columns:
        dev = pairs["device_name"].astype(str).to_numpy(dtype=object)
    else:
        dev = np.full(n, device_name if device_name is not None else _only_device(profiles), dtype=object)
    mode = pairs["mode"].astype(str).to_numpy(dtype=object) if "mode" in pairs.columns else None
    ia = profile_index(profiles, wa, dev, mode)
    ib = profile_index(profiles, wb, dev, mode)
    lost = (ia < 0) | (ib < 0)
    if lost.any():
        i = int(np.argmax(lost))
        who = wa[i] if ia[i] < 0 else wb[i]
        n_lost = int(lost.sum())
        raise DatasetError(
            f"no profile of workload {who!r} on device {dev[i]!r} (needed by pair row {i}"
            f"{f' and {n_lost - 1} more' if n_lost > 1 else ''}); profile it there first, "
            "or drop the pairs that name it"
        )
    matrix = _profile_matrix(profiles, base)
    fam = _families(profiles)
    i_self = np.concatenate([ia, ib])
    i_partner = np.concatenate([ib, ia])
    same = np.concatenate([wa == wb, wa == wb])
    X = pair_feature_matrix(matrix[i_self], matrix[i_partner], base, same)
    names = pair_feature_names(base)
    meta = pd.DataFrame(
        {
            "self_workload": np.concatenate([wa, wb]),
            "partner_workload": np.concatenate([wb, wa]),
            "device_name": np.concatenate([dev, dev]),
            "mode": np.concatenate([mode, mode]) if mode is not None else "",
            "self_family": fam[i_self],
            "partner_family": fam[i_partner],
            "pair_id": np.concatenate([np.arange(n), np.arange(n)]),
            "direction": np.repeat([0, 1], n),
        }
    )
    y = None
    if with_target:
        for col in ("slowdown_a", "slowdown_b"):
            if col not in pairs.columns:
                raise SchemaError(f"pairs table lacks column {col!r} needed as the training target")
        y = np.concatenate(
            [pairs["slowdown_a"].to_numpy(dtype=np.float64), pairs["slowdown_b"].to_numpy(dtype=np.float64)]
        )
    return PairRows(X=pd.DataFrame(X, columns=names, copy=False), y=y, meta=meta)


def _only_device(profiles: pd.DataFrame) -> str:
    devices = sorted(set(profiles["device_name"].astype(str))) if "device_name" in profiles else []
    if len(devices) != 1:
        raise DatasetError(
            f"the pairs give no device_name and the profiles cover {len(devices)} devices {devices}; "
            "add a device_name column to the pairs to say which device each pair shares"
        )
    return devices[0]
