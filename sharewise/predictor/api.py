"""Table-level entry points of the predictor: train on a dataset, predict pairs, out-of-fold predictions."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sharewise.errors import ConfigError
from sharewise.predictor.evaluation import GROUP_BY, row_groups
from sharewise.predictor.features import (
    PairRows,
    base_columns,
    base_columns_of_model,
    ordered_rows,
)
from sharewise.predictor.model import SlowdownRegressor

PREDICTION_COLUMNS = (
    "workload_a",
    "workload_b",
    "device_name",
    "p10_a",
    "p50_a",
    "p90_a",
    "p10_b",
    "p50_b",
    "p90_b",
)


def training_summary(rows: PairRows, profiles: pd.DataFrame) -> dict:
    """Describe what a model is trained on, for its sidecar.

    Example: ``{"pairs": 976, "devices": ["k80", "p100"], "workloads": ["A3C", ...], "families": [...],
    "base_features": ["iter_time_ms", "f_batch_size"]}`` (``rows`` is added by ``fit``).
    """
    meta = rows.meta
    return {
        "pairs": int(meta["pair_id"].nunique()),
        "devices": sorted(set(meta["device_name"].astype(str))),
        "workloads": sorted(set(meta["self_workload"].astype(str))),
        "families": sorted(set(meta["self_family"].astype(str))),
        "base_features": base_columns(profiles),
    }


def train_model(profiles: pd.DataFrame, pairs: pd.DataFrame, **params) -> SlowdownRegressor:
    """Fit a ``SlowdownRegressor`` on every measured (status ``ok``) pair, both directions.

    Parameters
    ----------
    profiles, pairs : DataFrame
        Profiles and pairs tables (``sharewise.datasets.read_datasets``).
    **params
        ``SlowdownRegressor`` parameters, e.g. ``n_estimators=300``.

    Returns
    -------
    SlowdownRegressor
        Fitted; ``training_summary_`` says on what.
    """
    rows = ordered_rows(profiles, pairs)
    return SlowdownRegressor(**params).fit(rows.X, rows.y, summary=training_summary(rows, profiles))


def predict_pairs(model: SlowdownRegressor, profiles: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Predict both slowdowns of every pair with quantiles.

    Parameters
    ----------
    model : SlowdownRegressor
        A fitted (or loaded) model.
    profiles : DataFrame
        Profiles of the workloads named by ``pairs`` (only the feature columns the model was trained on are
        used; extra columns are ignored).
    pairs : DataFrame
        ``workload_a, workload_b`` and optionally ``device_name`` (required when the profiles cover more than
        one device) and ``mode`` (profiles of the same mode are preferred).

    Returns
    -------
    DataFrame
        One row per input pair, in input order::

            workload_a  workload_b  device_name  p10_a  p50_a  p90_a  p10_b  p50_b  p90_b
            resnet18    lstm_lm     cpu          1.31   1.52   1.80   1.10   1.24   1.45
    """
    model._check_fitted()
    rows = ordered_rows(
        profiles, pairs, base=base_columns_of_model(model.feature_names_in_), with_target=False
    )
    return _pair_table(rows, model.predict_quantiles(rows.X))


def _pair_table(rows: PairRows, q: np.ndarray) -> pd.DataFrame:
    n = len(rows.X) // 2
    q = q[:, [0, q.shape[1] // 2, q.shape[1] - 1]]
    meta = rows.meta
    return pd.DataFrame(
        {
            "workload_a": meta["self_workload"].to_numpy()[:n],
            "workload_b": meta["partner_workload"].to_numpy()[:n],
            "device_name": meta["device_name"].to_numpy()[:n],
            "p10_a": q[:n, 0],
            "p50_a": q[:n, 1],
            "p90_a": q[:n, 2],
            "p10_b": q[n:, 0],
            "p50_b": q[n:, 1],
            "p90_b": q[n:, 2],
        },
        columns=list(PREDICTION_COLUMNS),
    )


def out_of_fold_predictions(
    profiles: pd.DataFrame,
    pairs: pd.DataFrame,
    group_by: str = "family",
    candidates: pd.DataFrame | None = None,
    **params,
) -> pd.DataFrame:
    """Predict every candidate pair with a model that has seen neither of its two groups.

    One model is trained per unordered pair of groups ``{g, h}`` that the candidates involve (``g == h``
    for pairs within one group), on the measured pairs in which neither self nor partner belongs to ``g`` or
    ``h``; it predicts exactly the candidates whose two workloads fall in ``g`` and ``h``. This is what a
    simulator needs so that its policy only ever sees "brand-new model" predictions. It costs one fit per
    group pair present: 28 fits for 7 families, about ``k(k+1)/2`` for ``k`` groups.

    Parameters
    ----------
    profiles, pairs : DataFrame
        Profiles and measured pairs (only status ``ok`` pairs train).
    group_by : {"workload", "family", "device"}
        What is held out.
    candidates : DataFrame, optional
        Pairs to predict (``workload_a, workload_b`` and optionally ``device_name``, ``mode``); default the
        measured ``ok`` pairs.
    **params
        ``SlowdownRegressor`` parameters.

    Returns
    -------
    DataFrame
        Same columns as ``predict_pairs``, one row per candidate, in candidate order.

    Raises
    ------
    ConfigError
        A group pair for which no measured pair is left to train on.
    """
    if group_by not in GROUP_BY:
        raise ConfigError(f"group_by must be one of {list(GROUP_BY)}, got {group_by!r}")
    train = ordered_rows(profiles, pairs)
    if candidates is None:
        candidates = pairs[pairs["status"] == "ok"] if "status" in pairs.columns else pairs
    cand = ordered_rows(profiles, candidates, base=base_columns(profiles), with_target=False)
    n = len(cand.X) // 2
    train_self, train_partner = row_groups(train.meta, group_by)
    cand_a, cand_b = row_groups(cand.meta, group_by)
    cand_a, cand_b = cand_a[:n], cand_b[:n]
    by_key: dict[tuple[str, ...], list[int]] = {}
    for i, (a, b) in enumerate(zip(cand_a, cand_b, strict=True)):
        by_key.setdefault(tuple(sorted({a, b})), []).append(i)
    q = np.full((2 * n, 3), np.nan)
    for key, members in by_key.items():  # first-seen order, so the output is deterministic
        held = set(key)
        use = ~(np.isin(train_self, list(held)) | np.isin(train_partner, list(held)))
        if not use.any():
            names = " and ".join(map(repr, sorted(held)))
            raise ConfigError(
                f"no measured pair is left to train on once {group_by} {names} are held out; measure "
                "pairs among other workloads or use a finer group_by"
            )
        model = SlowdownRegressor(**params).fit(train.X[use], train.y[use])
        idx = np.asarray(members)
        rows = np.concatenate([idx, idx + n])
        pred = model.predict_quantiles(cand.X.iloc[rows])
        q[rows] = pred[:, [0, pred.shape[1] // 2, pred.shape[1] - 1]]
    return _pair_table(cand, q)
