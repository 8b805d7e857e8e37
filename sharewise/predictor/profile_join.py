"""The profile join: find each pair's two solo profiles and build both ordered directions of every pair."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from sharewise.errors import DatasetError, ModelSchemaError, SchemaError
from sharewise.predictor.feature_state import device_reference, reference_matrix
from sharewise.predictor.pair_features import (
    SHARE_RATES,
    PairRows,
    base_columns,
    job_rates,
    pair_feature_matrix_indexed,
    pair_feature_names,
    select_base,
)


def profile_index(profiles: pd.DataFrame, workloads, devices, modes=None) -> np.ndarray:
    """Return, for each (workload, device, mode) query, the row of ``profiles`` that describes it, or -1.

    A query matches profiles of the same workload on the same device; among several, one of the same mode
    is preferred (when ``modes`` is given), then the latest ``created_at``.
    """
    # Queries come by the million (a scheduler's candidate pairs) but name few distinct values: encode
    # each query column once, fill a small table (distinct workloads x devices x modes) from the
    # profiles, and gather from it.
    columns = [workloads, devices] + ([modes] if modes is not None and "mode" in profiles else [])
    encoded = [pd.factorize(c if isinstance(c, pd.Series) else pd.Series(np.asarray(c, dtype=object)))
               for c in columns]
    n = len(encoded[0][0])
    if len(profiles) == 0 or n == 0:
        return np.full(n, -1, dtype=np.int64)
    created = profiles["created_at"].astype(str).to_numpy() if "created_at" in profiles else None
    order = np.argsort(created, kind="stable") if created is not None else np.arange(len(profiles))
    fields = ["workload", "device_name", "mode"][: len(columns)]
    values = [profiles[f].astype(str).to_numpy(dtype=object)[order] for f in fields]
    position = [{str(u): i for i, u in enumerate(uniques)} for _, uniques in encoded]
    table = np.full((len(position[0]), len(position[1])), -1, dtype=np.int64)
    for w, d, row in zip(values[0], values[1], order, strict=True):  # later (newer) rows overwrite
        i, j = position[0].get(w), position[1].get(d)
        if i is not None and j is not None:
            table[i, j] = row
    if len(columns) == 3:
        table = np.repeat(table[:, :, None], len(position[2]), axis=2)
        for w, d, m, row in zip(*values, order, strict=True):
            i, j, k = position[0].get(w), position[1].get(d), position[2].get(m)
            if i is not None and j is not None and k is not None:
                table[i, j, k] = row
    codes = [c for c, _ in encoded]
    known = np.logical_and.reduce([c >= 0 for c in codes])
    result = np.full(n, -1, dtype=np.int64)
    result[known] = table[tuple(c[known] for c in codes)]
    return result


def _profile_matrix(profiles: pd.DataFrame, base: Sequence[str]) -> np.ndarray:
    missing = [c for c in base if c not in profiles.columns]
    if missing:
        raise ModelSchemaError(
            f"the profiles lack feature column(s) {missing} that the model was trained on; profile the "
            "workloads with the same features, or retrain the model on this data with 'sharewise train'"
        )
    if not base:
        return np.empty((len(profiles), 0))
    # Rounded to float32, the precision of the feature matrix: features recomputed later from a matrix's
    # self_/partner_ columns (``with_reference``) then equal those computed here, bit for bit.
    values = profiles[list(base)].to_numpy(dtype=np.float64, na_value=np.nan)
    return values.astype(np.float32).astype(np.float64)


def _profile_devices(profiles: pd.DataFrame) -> np.ndarray:
    if "device_name" not in profiles.columns:
        return np.full(len(profiles), "", dtype=object)
    return profiles["device_name"].astype(str).to_numpy(dtype=object)


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
    reference: Mapping[str, Mapping[str, float]] | None = None,
    features: str = "physical",
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
        Profile columns to build features from; default ``select_base(base_columns(profiles), features)``.
    with_target : bool
        Whether to return measured slowdowns as ``y``.
    device_name : str, optional
        Device for pairs without a ``device_name`` column; by default the only device of ``profiles``.
    reference : dict, optional
        Device references for the share features (``device_reference``), e.g. a trained model's; by
        default those of the profiles these pairs name, which is what a training set needs.
    features : {"physical", "all"}
        Feature set when ``base`` is not given (``select_base``); ``"all"`` for a caller that selects
        later (``PairFeaturizer(features=...)``), as nested model selection does.

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
        base = select_base(base_columns(profiles), features)
    for col in ("workload_a", "workload_b"):
        if col not in pairs.columns:
            raise SchemaError(f"pairs table lacks column {col!r}; it needs workload_a and workload_b")
    if with_target and "status" in pairs.columns:
        pairs = pairs[pairs["status"] == "ok"]
    pairs = pairs.reset_index(drop=True)
    profiles = profiles.reset_index(drop=True)
    n = len(pairs)
    wa, wb, dev, mode, ia, ib = resolve_pairs(profiles, pairs, device_name)
    matrix = _profile_matrix(profiles, base)
    fam = _families(profiles)
    i_self = np.concatenate([ia, ib])
    i_partner = np.concatenate([ib, ia])
    # Shares are computed for the profiles these pairs name, against their own highest rates unless a
    # reference (a trained model's) is given.
    used = np.unique(i_self)
    rates = job_rates(matrix[used], base)
    used_devices = _profile_devices(profiles)[used]
    if reference is None:
        reference = device_reference(rates, used_devices)
    ref = np.full((len(profiles), len(SHARE_RATES)), np.nan)
    ref[used] = reference_matrix(reference, used_devices, rates)
    X = pair_feature_matrix_indexed(matrix, i_self, i_partner, base, ref)
    names = pair_feature_names(base)
    meta = pd.DataFrame(
        {
            "self_workload": np.concatenate([wa, wb]),
            "partner_workload": np.concatenate([wb, wa]),
            "device_name": np.concatenate([dev, dev]),
            # Pairs without a mode take their profiles' (the self's: both are profiled in the mode they share).
            "mode": np.concatenate([mode, mode]) if mode is not None else _profile_modes(profiles)[i_self],
            "self_family": fam[i_self],
            "partner_family": fam[i_partner],
            "pair_id": np.concatenate([np.arange(n), np.arange(n)]),
            "direction": np.repeat([0, 1], n),
            "halfwidth": np.concatenate([halfwidth(pairs, "a"), halfwidth(pairs, "b")]),
            # The sharing knob: self's share of the device (a fraction; NaN where no knob limited the pair).
            "self_share": np.concatenate([_share(pairs), 1.0 - _share(pairs)]),
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


def _share(pairs: pd.DataFrame) -> np.ndarray:
    """Job a's share of the device under the knob, as a fraction (``split_a`` / 100; NaN without a knob)."""
    if "split_a" not in pairs.columns:
        return np.full(len(pairs), np.nan)
    return pd.to_numeric(pairs["split_a"], errors="coerce").to_numpy(dtype=np.float64) / 100.0


def _profile_modes(profiles: pd.DataFrame) -> np.ndarray:
    if "mode" not in profiles:
        return np.full(len(profiles), "", dtype=object)
    return profiles["mode"].fillna("").astype(str).to_numpy(dtype=object)


def halfwidth(pairs: pd.DataFrame, side: str) -> np.ndarray:
    """Return the 95% confidence half-width (a fraction) of slowdown ``side`` ("a" or "b") of every pair.

    The recorded ``ci_a``/``ci_b`` where present, else Student's t from ``cv`` and ``trials`` (the rule of
    ``profiler.pair.ci_halfwidth``: ``t(0.975, n - 1) * cv / sqrt(n)``), else NaN (unknown: one trial, or an
    import that gives none). Example: ``array([0.021, nan])``.
    """
    n = len(pairs)
    out = np.full(n, np.nan)
    col = f"ci_{side}"
    if col in pairs.columns:
        out = pd.to_numeric(pairs[col], errors="coerce").to_numpy(dtype=np.float64)
    if f"cv_{side}" in pairs.columns and "trials" in pairs.columns:
        from scipy.stats import t

        cv = pd.to_numeric(pairs[f"cv_{side}"], errors="coerce").to_numpy(dtype=np.float64)
        trials = pd.to_numeric(pairs["trials"], errors="coerce").to_numpy(dtype=np.float64)
        ok = np.isfinite(cv) & (trials >= 2)
        derived = np.full(n, np.nan)
        derived[ok] = t.ppf(0.975, trials[ok] - 1) * cv[ok] / np.sqrt(trials[ok])
        out = np.where(np.isfinite(out), out, derived)
    return out


def resolve_pairs(profiles: pd.DataFrame, pairs: pd.DataFrame, device_name: str | None = None):
    """Find the profile row of both workloads of every pair.

    ``profiles`` must have a default RangeIndex (the returned indices are positions). Returns
    ``(workload_a, workload_b, device, mode or None, index_a, index_b)`` as arrays.

    Raises
    ------
    DatasetError
        A pair names a workload with no profile on its device.
    """
    ia, ib = pair_indices(profiles, pairs, device_name)
    wa = pairs["workload_a"].astype(str).to_numpy(dtype=object)
    wb = pairs["workload_b"].astype(str).to_numpy(dtype=object)
    dev = _pair_devices(profiles, pairs, device_name).astype(str).to_numpy(dtype=object)
    mode = pairs["mode"].astype(str).to_numpy(dtype=object) if "mode" in pairs.columns else None
    return wa, wb, dev, mode, ia, ib


def pair_indices(
    profiles: pd.DataFrame, pairs: pd.DataFrame, device_name: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Return the profile rows (positions) of ``workload_a`` and ``workload_b`` of every pair.

    The fast core of ``resolve_pairs`` for batch prediction: no per-row strings are built.

    Raises
    ------
    DatasetError
        A pair names a workload with no profile on its device.
    """
    dev = _pair_devices(profiles, pairs, device_name)
    mode = pairs["mode"].astype(str) if "mode" in pairs.columns else None
    ia = profile_index(profiles, pairs["workload_a"].astype(str), dev, mode)
    ib = profile_index(profiles, pairs["workload_b"].astype(str), dev, mode)
    lost = (ia < 0) | (ib < 0)
    if lost.any():
        i = int(np.argmax(lost))
        who = pairs["workload_a"].iloc[i] if ia[i] < 0 else pairs["workload_b"].iloc[i]
        n_lost = int(lost.sum())
        raise DatasetError(
            f"no profile of workload {str(who)!r} on device {str(dev.iloc[i])!r} (needed by pair row {i}"
            f"{f' and {n_lost - 1} more' if n_lost > 1 else ''}); profile it there first, "
            "or drop the pairs that name it"
        )
    return ia, ib


def _pair_devices(profiles: pd.DataFrame, pairs: pd.DataFrame, device_name: str | None) -> pd.Series:
    if "device_name" in pairs.columns:
        return pairs["device_name"].astype(str)
    name = device_name if device_name is not None else _only_device(profiles)
    return pd.Series(np.full(len(pairs), name, dtype=object), index=pairs.index).astype(str)


def profile_matrix(profiles: pd.DataFrame, base: Sequence[str]) -> np.ndarray:
    """Return the ``base`` columns of ``profiles`` as a float64 matrix (NaN for missing values).

    Raises
    ------
    ModelSchemaError
        A column of ``base`` is absent (the message lists them).
    """
    return _profile_matrix(profiles, base)


def _only_device(profiles: pd.DataFrame) -> str:
    devices = sorted(set(profiles["device_name"].astype(str))) if "device_name" in profiles else []
    if len(devices) != 1:
        raise DatasetError(
            f"the pairs give no device_name and the profiles cover {len(devices)} devices {devices}; "
            "add a device_name column to the pairs to say which device each pair shares"
        )
    return devices[0]
