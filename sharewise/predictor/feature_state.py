"""Fitted feature state: the device references the share features divide by, and partners' measured effect.

Both are learned from training rows only (``PairFeaturizer.fit``), so that in cross-validation nothing of a
held-out group reaches the features that score it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from sharewise.errors import ConfigError
from sharewise.predictor.pair_features import (
    PAIR_PREFIX,
    PARTNER_PREFIX,
    SELF_PREFIX,
    SHARE_RATES,
    PairRows,
    base_columns_of_model,
    job_rates,
    pair_feature_matrix,
    pair_feature_names,
)


def device_reference(rates: np.ndarray, devices: Sequence[str]) -> dict[str, dict[str, float]]:
    """Return the highest of each rate per device: the scale that device shares divide by.

    ``rates`` comes from ``job_rates`` for the profiles a model trains on, ``devices`` names their
    devices. Example: ``{"flop_rate": {"k80": 1.5e12, "v100": 8.8e12}, "bytes_rate": {...}, ...}``;
    a rate no profile of a device has is left out for that device.
    """
    rates = np.asarray(rates, dtype=np.float64).reshape(-1, len(SHARE_RATES))
    frame = pd.DataFrame(rates, columns=list(SHARE_RATES))
    frame["device"] = np.asarray(devices, dtype=object).astype(str)
    best = frame.groupby("device", sort=True)[list(SHARE_RATES)].max()
    return {
        rate: {str(d): float(v) for d, v in best[rate].items() if np.isfinite(v)} for rate in SHARE_RATES
    }


def reference_matrix(
    reference: Mapping[str, Mapping[str, float]],
    devices: Sequence[str],
    rates: np.ndarray | None = None,
) -> np.ndarray:
    """Return one row of references (``SHARE_RATES`` order) per row of ``devices``, for the share features.

    A device that ``reference`` lacks (one the model never saw) takes the highest of ``rates`` (rows
    aligned with ``devices``) on it: the best the profiles at hand show; without ``rates`` it stays NaN.
    """
    devices = np.asarray(devices, dtype=object).astype(str)
    out = np.full((devices.shape[0], len(SHARE_RATES)), np.nan)
    fallback = device_reference(rates, devices) if rates is not None else {}
    for j, rate in enumerate(SHARE_RATES):
        known = {**fallback.get(rate, {}), **dict(reference.get(rate, {}))}
        if known:
            out[:, j] = pd.Series(devices).map(known).to_numpy(dtype=np.float64)
    return out


def with_reference(rows: PairRows, reference: Mapping[str, Mapping[str, float]]) -> PairRows:
    """Return ``rows`` with its share features recomputed against ``reference`` (a fold's training scale).

    The base columns are read back from ``X`` (``self_*``, ``partner_*``), so the other features are
    unchanged; devices ``reference`` lacks take the highest rate among ``rows`` themselves.
    """
    names = list(rows.X.columns)
    if not any(n.startswith(f"{PAIR_PREFIX}self_share_") for n in names):
        return rows
    base = base_columns_of_model(names)
    s = rows.X[[SELF_PREFIX + b for b in base]].to_numpy(dtype=np.float64, na_value=np.nan)
    p = rows.X[[PARTNER_PREFIX + b for b in base]].to_numpy(dtype=np.float64, na_value=np.nan)
    devices = rows.meta["device_name"].astype(str).to_numpy(dtype=object)
    ref = reference_matrix(reference, devices, job_rates(s, base))
    same = (rows.meta["self_workload"] == rows.meta["partner_workload"]).to_numpy()
    full = pair_feature_matrix(s, p, base, same, ref, ref)
    X = rows.X.copy()
    shares = tuple(f"{PAIR_PREFIX}{side}_share_" for side in ("self", "partner", "sum"))
    for j, name in enumerate(pair_feature_names(base)):
        if name.startswith(shares):
            X[name] = full[:, j]
    return PairRows(X=X, y=rows.y, meta=rows.meta)


def rows_reference(rows: PairRows, index: np.ndarray | None = None) -> dict[str, dict[str, float]]:
    """Return ``device_reference`` of the profiles that appear as self in ``rows`` (or its rows ``index``).

    Both directions of every pair are rows, so the selves of a training split are all its profiles.
    """
    X = rows.X if index is None else rows.X.iloc[index]
    meta = rows.meta if index is None else rows.meta.iloc[index]
    base = base_columns_of_model(X.columns)
    s = X[[SELF_PREFIX + b for b in base]].to_numpy(dtype=np.float64, na_value=np.nan)
    return device_reference(job_rates(s, base), meta["device_name"].astype(str).to_numpy(dtype=object))


# ---- the partner's measured interference -----------------------------------------------------------

#: Optional feature: the mean log slowdown the partner caused to the selves it was measured next to on
#: the same device in training. A user asking about a new model has measured pairs among their other
#: jobs, so how hard each of those jobs presses on whatever runs next to it is known; the feature is NaN
#: for a partner without such measurements (a new workload).
PARTNER_EFFECT = "pair_partner_effect"
# Fewer measured selves than this leave a partner's effect unknown (NaN) rather than noisy.
_PARTNER_EFFECT_MIN_ROWS = 3


def partner_effect_table(rows: PairRows, index: np.ndarray | None = None) -> dict[str, dict[str, float]]:
    """Return ``{device: {workload: mean log slowdown of the selves next to it}}`` over rows ``index``.

    Example: ``{"v100": {"ResNet-50 (batch size 16)": 1.05, "A3C": 0.31, ...}, ...}``.
    """
    frame = _effect_frame(rows, index)
    grouped = frame.groupby(["device", "partner"], sort=True)["log_y"].agg(["sum", "count"])
    grouped = grouped[grouped["count"] >= _PARTNER_EFFECT_MIN_ROWS]
    table: dict[str, dict[str, float]] = {}
    for (device, partner), row in grouped.iterrows():
        table.setdefault(str(device), {})[str(partner)] = float(row["sum"] / row["count"])
    return table


def training_partner_effect(rows: PairRows) -> np.ndarray:
    """Return the ``PARTNER_EFFECT`` value of every row of ``rows`` as a training row (float64).

    A training row must not see its own label, nor anything a new workload could not have: its value leaves
    out every row whose self is of the training row's self family (at prediction the new self's family has
    no measurements), and it is NaN when the partner is of that family too (a new workload's family-mates
    are new as well). Rows to predict read ``partner_effect_table`` instead. Example: ``array([0.31, nan])``.
    """
    frame = _effect_frame(rows, None)
    keys = ["device", "partner"]
    total = frame.groupby(keys)["log_y"].agg(["sum", "count"])
    by_family = frame.groupby([*keys, "self_family"])["log_y"].agg(["sum", "count"])
    at_total = total.reindex(pd.MultiIndex.from_frame(frame[keys]))
    at_family = by_family.reindex(pd.MultiIndex.from_frame(frame[[*keys, "self_family"]]))
    count = at_total["count"].to_numpy() - at_family["count"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        own = (at_total["sum"].to_numpy() - at_family["sum"].to_numpy()) / count
    same_family = (frame["partner_family"] == frame["self_family"]).to_numpy()
    own[(count < _PARTNER_EFFECT_MIN_ROWS) | same_family] = np.nan
    return own


def lookup_partner_effect(table: Mapping[str, Mapping[str, float]], meta: pd.DataFrame) -> np.ndarray:
    """Return each row's partner effect from ``table`` (NaN for a partner or device it lacks).

    ``meta`` needs ``device_name`` and ``partner_workload`` (as in ``PairRows.meta``).
    """
    keys = pd.MultiIndex.from_arrays(
        [meta["device_name"].astype(str).to_numpy(), meta["partner_workload"].astype(str).to_numpy()]
    )
    flat = {(d, w): v for d, per in table.items() for w, v in per.items()}
    if not flat:
        return np.full(len(meta), np.nan)
    known = pd.Series(flat, dtype=np.float64)
    return known.reindex(keys).to_numpy(dtype=np.float64, na_value=np.nan)


def _effect_frame(rows: PairRows, index: np.ndarray | None) -> pd.DataFrame:
    if rows.y is None:
        raise ConfigError("the partner effect is measured from training rows: they need slowdowns")
    meta = rows.meta if index is None else rows.meta.iloc[index]
    y = rows.y if index is None else rows.y[index]
    return pd.DataFrame(
        {
            "device": meta["device_name"].astype(str).to_numpy(),
            "partner": meta["partner_workload"].astype(str).to_numpy(),
            "self_family": meta["self_family"].astype(str).to_numpy(),
            "partner_family": meta["partner_family"].astype(str).to_numpy(),
            "log_y": np.log(np.asarray(y, dtype=np.float64)),
        }
    )
