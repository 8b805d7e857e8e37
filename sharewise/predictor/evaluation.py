"""Grouped cross-validation of the slowdown model next to simple baselines, and the metrics it reports.

Folds: for each group ``g`` (a workload, a model family or a device), the training rows are the ordered
rows in which neither self nor partner belongs to ``g``; the test rows are those whose *self* belongs to
``g``. Every ordered row is therefore scored exactly once, in the fold where its own workload is unseen, and
each number answers the user's question "how slow will a new model run next to my other jobs". Both
directions of a held-out pair are scored (each in the fold of its own self), so the "is sharing worth it"
decision, which needs both slowdowns, is scored on every pair.

Everything fitted is fitted per fold on the training rows only: the model, the baselines, and the feature
state (``PairFeaturizer``: the device references of the share features, the partner effects). With
``tune=True`` the model's parameters are chosen per fold too, by an inner grouped cross-validation over
the fold's training groups only (``select_params``), so no held-out group informs any choice made for it.
The p10/p90 of each fold's model are calibrated by conformal prediction on grouped out-of-fold residuals of
that fold's training rows (``conformal.calibrate_rows``), so the reported coverage is that of intervals
for workloads the calibration never saw either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sharewise.errors import ConfigError
from sharewise.predictor.baselines import BASELINES, unusable_reason
from sharewise.predictor.choices import GROUP_BY
from sharewise.predictor.conformal import calibrate_rows
from sharewise.predictor.featurizer import PairFeaturizer
from sharewise.predictor.model import SlowdownRegressor
from sharewise.predictor.pair_features import PairRows
from sharewise.predictor.profile_join import ordered_rows

RANDOM_SPLIT_FOLDS = 5

#: Candidates of the nested selection (``select_params``), fixed before any evaluation: the feature set,
#: and the two knobs that set how finely trees may carve the training groups (depth, rows per leaf).
TUNING_GRID: dict[str, tuple] = {
    "features": ("physical", "all"),
    "partner_effect": (False, True),
    "max_depth": (2, 3),
    "min_child_weight": (10.0, 50.0),
}
#: Keys of a parameter set that configure the featurizer (``PairFeaturizer``), not the regressor.
PIPELINE_KEYS = ("features", "partner_effect")
#: Pulls toward the training median tried on the inner out-of-fold predictions (no refit needed).
TUNING_PRIOR_WEIGHTS = (0.0, 0.25, 0.5)


@dataclass(frozen=True)
class Fold:
    """One held-out group: the row indices to train on and to score."""

    group: str
    train: np.ndarray
    test: np.ndarray


def row_groups(meta: pd.DataFrame, group_by: str) -> tuple[np.ndarray, np.ndarray]:
    """Return the group of self and of the partner for every ordered row."""
    if group_by == "workload":
        cols = ("self_workload", "partner_workload")
    elif group_by == "family":
        cols = ("self_family", "partner_family")
    elif group_by == "device":
        cols = ("device_name", "device_name")
    else:
        raise ConfigError(f"group_by must be one of {list(GROUP_BY)}, got {group_by!r}")
    return meta[cols[0]].astype(str).to_numpy(), meta[cols[1]].astype(str).to_numpy()


def grouped_folds(meta: pd.DataFrame, group_by: str) -> list[Fold]:
    """Split ordered rows into one fold per group; no training row involves the fold's group.

    Raises
    ------
    ConfigError
        Fewer than two groups, or a group that every measured pair involves (nothing left to train on).
    """
    self_g, partner_g = row_groups(meta, group_by)
    groups = sorted(set(self_g))
    if len(groups) < 2:
        raise ConfigError(
            f"grouped evaluation by {group_by} needs at least 2 {group_by}s, the data has {len(groups)}; "
            "measure more workloads or choose another --group-by"
        )
    folds = []
    for g in groups:
        train = np.flatnonzero((self_g != g) & (partner_g != g))
        if train.size == 0:
            raise ConfigError(
                f"every measured pair involves {group_by} {g!r}, so holding it out leaves nothing to "
                "train on; measure pairs among the other workloads too"
            )
        folds.append(Fold(group=g, train=train, test=np.flatnonzero(self_g == g)))
    return folds


# ---- metrics --------------------------------------------------------------------------------------------


def slowdown_metrics(
    measured: np.ndarray,
    predicted: np.ndarray,
    pair_id: np.ndarray | None = None,
    low: np.ndarray | None = None,
    high: np.ndarray | None = None,
) -> dict[str, float]:
    """Score predicted slowdowns against measured ones.

    Returns
    -------
    dict
        ``{"n": 1952, "mae": 0.31, "mape": 16.2, "spearman": 0.61, "decision_accuracy": 0.83}`` plus
        ``"coverage_p10_p90"`` when ``low``/``high`` are given. MAPE and the decision accuracy are percent;
        the decision is "is sharing worth it": 1/slowdown_a + 1/slowdown_b > 1, scored on pairs whose two
        directions are both present (``pair_id`` says which rows belong together).
    """
    from scipy.stats import spearmanr

    y = np.asarray(measured, dtype=np.float64)
    p = np.asarray(predicted, dtype=np.float64)
    err = np.abs(p - y)
    out = {
        "n": int(y.size),
        "mae": float(err.mean()) if y.size else float("nan"),
        "mape": float((err / y).mean() * 100) if y.size else float("nan"),
        "spearman": float("nan"),
    }
    if y.size > 2 and np.ptp(p) > 0 and np.ptp(y) > 0:
        out["spearman"] = float(spearmanr(y, p).statistic)
    if pair_id is not None:
        out["decision_accuracy"] = _decision_accuracy(y, p, np.asarray(pair_id))
    if low is not None and high is not None:
        inside = (y >= np.asarray(low)) & (y <= np.asarray(high))
        out["coverage_p10_p90"] = float(inside.mean() * 100) if y.size else float("nan")
    return out


def _decision_accuracy(y: np.ndarray, p: np.ndarray, pair_id: np.ndarray) -> float:
    frame = pd.DataFrame({"pair": pair_id, "y": 1.0 / y, "p": 1.0 / p})
    grouped = frame.groupby("pair").agg(n=("y", "size"), y=("y", "sum"), p=("p", "sum"))
    both = grouped[grouped["n"] == 2]
    if both.empty:
        return float("nan")
    return float(((both["y"] > 1) == (both["p"] > 1)).mean() * 100)


# ---- cross-validation -----------------------------------------------------------------------------------


@dataclass
class CVResult:
    """Out-of-fold predictions of the model and the baselines for every scored ordered row.

    ``rows`` has the row identity (``self_workload, partner_workload, device_name, self_family, ...``),
    ``group``, ``measured``, ``p10, p50, p90`` (calibrated), ``p10_uncalibrated, p90_uncalibrated`` and one
    ``pred_<baseline>`` column per baseline; ``unusable`` maps a baseline that could not run on these
    features to why (its column is NaN).
    """

    group_by: str
    rows: pd.DataFrame
    folds: list[dict] = field(default_factory=list)
    random_split: dict | None = None
    unusable: dict[str, str] = field(default_factory=dict)


def cross_validate(
    data: PairRows,
    group_by: str = "workload",
    baselines: dict[str, Callable[[], object]] | None = None,
    random_split: bool = False,
    features: str = "physical",
    partner_effect: bool = True,
    tune: bool = False,
    calibrate: bool = True,
    **params,
) -> CVResult:
    """Run grouped cross-validation of ``SlowdownRegressor(**params)`` and the baselines on ordered rows.

    ``baselines`` maps a name to a factory of an object with ``fit(X, y, meta)`` and ``predict(X, meta)``;
    default ``BASELINES``; they see the pair features of feature set ``features`` (device shares fitted
    on the fold's training rows, no partner effect; ``X`` keeps the row labels of ``data.X``). The model sees
    the features of ``PairFeaturizer(features, partner_effect)`` fitted on the fold's training rows. With ``tune``
    the model's pipeline and tree parameters are chosen per fold by ``select_params`` on that fold's
    training rows (``params`` fix the rest). With ``calibrate`` (default) each fold's p10/p90 are conformally
    calibrated on its training rows alone (``conformal.calibrate_rows``, grouped by ``group_by``). With
    ``random_split`` the model is also scored on a random 5-fold split over pairs (both directions of a pair
    in the same fold), which is optimistic: the test workloads were seen.
    """
    baselines = BASELINES if baselines is None else baselines
    if data.y is None:
        raise ConfigError("cross-validation needs measured slowdowns")
    folds = grouped_folds(data.meta, group_by)
    n = len(data.y)
    preds = np.full((n, 3), np.nan)
    raw = np.full((n, 2), np.nan)
    base_preds = {name: np.full(n, np.nan) for name in baselines}
    unusable: dict[str, str] = {}
    # Calibration models by held groups, shared across folds; with tuning each fold has its own parameters.
    cache: dict | None = None if tune else {}
    group = np.empty(n, dtype=object)
    fold_info = []
    pipeline = {"features": features, "partner_effect": partner_effect}
    for fold in folds:
        chosen = select_params(_subset(data, fold.train), group_by, **params) if tune else {}
        fold_params = {**pipeline, **params, **{k: v for k, v in chosen.items() if k != "inner_mape"}}
        fold_pipeline = {k: fold_params.pop(k) for k in PIPELINE_KEYS}
        featurizer, X_fit, X_all = fold_features(data, fold.train, **fold_pipeline)
        model = SlowdownRegressor(**fold_params).fit(X_fit, data.y[fold.train], featurizer=featurizer)
        raw[fold.test] = _three(model.predict_quantiles(X_all.iloc[fold.test]))[:, [0, 2]]
        if calibrate:  # on the fold's training rows only; level 0 alone, nothing is revealed here
            model.calibration_ = calibrate_rows(
                data, group_by, **fold_pipeline, exclude=fold.group, cache=cache, levels=(0,), **fold_params
            )
        devices = data.meta["device_name"].to_numpy()[fold.test]
        preds[fold.test] = _three(model.predict_quantiles(X_all.iloc[fold.test], devices=devices))
        _, Xtr, plain = fold_features(data, fold.train, features=features, partner_effect=False)
        ytr, mtr = data.y[fold.train], data.meta.iloc[fold.train]
        Xte, mte = plain.iloc[fold.test], data.meta.iloc[fold.test]
        for name, factory in baselines.items():
            baseline = factory()
            reason = unusable_reason(baseline, Xtr)
            if reason is not None:
                unusable[name] = reason
                continue
            base_preds[name][fold.test] = baseline.fit(Xtr, ytr, mtr).predict(Xte, mte)
        group[fold.test] = fold.group
        info = {"group": fold.group, "n_train": int(fold.train.size), "n_test": int(fold.test.size)}
        if tune:
            info["chosen"] = chosen
        fold_info.append(info)
    rows = data.meta.copy()
    rows["group"] = group
    rows["measured"] = data.y
    rows["p10"], rows["p50"], rows["p90"] = preds[:, 0], preds[:, 1], preds[:, 2]
    rows["p10_uncalibrated"], rows["p90_uncalibrated"] = raw[:, 0], raw[:, 1]
    for name, values in base_preds.items():
        rows[f"pred_{name}"] = values
    result = CVResult(group_by=group_by, rows=rows, folds=fold_info, unusable=unusable)
    if random_split:
        result.random_split = _random_split(data, **pipeline, **params)
    return result


def fold_features(
    data: PairRows, train: np.ndarray, features: str = "physical", partner_effect: bool = True
) -> tuple[PairFeaturizer, pd.DataFrame, pd.DataFrame]:
    """Fit a ``PairFeaturizer`` on rows ``train`` of ``data``; return it, the training rows' features (in
    ``train`` order) and every row's features as rows to predict (index them with the test rows)."""
    featurizer = PairFeaturizer(features=features, partner_effect=partner_effect)
    X_fit = featurizer.fit_transform(data.take(train))
    return featurizer, X_fit, featurizer.transform(data)


def _subset(rows: PairRows, index: np.ndarray) -> PairRows:
    part = rows.take(index)
    return PairRows(X=part.X.reset_index(drop=True), y=part.y, meta=part.meta.reset_index(drop=True))


def select_params(data: PairRows, group_by: str = "family", **fixed) -> dict:
    """Choose the feature pipeline and tree parameters by grouped cross-validation on ``data`` alone.

    Every combination of ``TUNING_GRID`` is scored by leave-one-group-out over the groups in ``data``
    (each inner fold fits its own featurizer), with each pull toward the training median of
    ``TUNING_PRIOR_WEIGHTS`` applied to the same out-of-fold predictions; the lowest MAPE of the p50 wins.
    Called on the training rows of an outer fold, this is nested cross-validation. ``data`` should carry
    every feature (``ordered_rows(..., features="all")``) so that each feature set can be tried.

    Returns
    -------
    dict
        E.g. ``{"features": "physical", "partner_effect": True, "max_depth": 2, "min_child_weight": 50.0,
        "prior_weight": 0.25, "inner_mape": 14.2}``.
    """
    from itertools import product

    fixed = {k: v for k, v in fixed.items() if k not in TUNING_GRID and k != "prior_weight"}
    folds = grouped_folds(data.meta, group_by)
    keys = list(TUNING_GRID)
    candidates = [dict(zip(keys, values, strict=True)) for values in product(*TUNING_GRID.values())]
    log_pred = np.full((len(candidates), len(data.y)), np.nan)
    prior = np.full(len(data.y), np.nan)
    prepared: dict[tuple, tuple] = {}
    for fold in folds:
        prior[fold.test] = float(np.median(np.log(data.y[fold.train])))
        prepared.clear()
        for c, cand in enumerate(candidates):
            pipe = tuple(cand[k] for k in PIPELINE_KEYS)
            if pipe not in prepared:
                prepared[pipe] = fold_features(data, fold.train, *pipe)
            featurizer, X_fit, X_all = prepared[pipe]
            tree = {k: v for k, v in cand.items() if k not in PIPELINE_KEYS}
            model = SlowdownRegressor(**fixed, **tree).fit(X_fit, data.y[fold.train], featurizer=featurizer)
            log_pred[c, fold.test] = np.log(model.predict(X_all.iloc[fold.test]))
    scored = ~np.isnan(prior)
    y = data.y[scored]
    best, best_mape = None, np.inf
    for c, cand in enumerate(candidates):
        for w in TUNING_PRIOR_WEIGHTS:
            p = np.exp((1 - w) * log_pred[c, scored] + w * prior[scored])
            mape = float(np.mean(np.abs(p - y) / y) * 100)
            if mape < best_mape - 1e-9:
                best, best_mape = {**cand, "prior_weight": w}, mape
    return {**best, "inner_mape": best_mape}


def _three(q: np.ndarray) -> np.ndarray:
    # Models with other quantiles still fill p10/p50/p90 columns: lowest, middle, highest.
    return q[:, [0, q.shape[1] // 2, q.shape[1] - 1]]


def _random_split(
    data: PairRows, features: str = "physical", partner_effect: bool = True, **params
) -> dict:
    rng = np.random.default_rng(int(params.get("random_state", 0)))
    pair_ids = np.unique(data.meta["pair_id"].to_numpy())
    fold_of = dict(zip(rng.permutation(pair_ids), np.arange(pair_ids.size) % RANDOM_SPLIT_FOLDS, strict=True))
    fold = data.meta["pair_id"].map(fold_of).to_numpy()
    preds = np.full((len(data.y), 3), np.nan)
    for k in range(RANDOM_SPLIT_FOLDS):
        test, train = fold == k, fold != k
        if test.any() and train.any():
            featurizer, X_fit, X_all = fold_features(data, np.flatnonzero(train), features, partner_effect)
            model = SlowdownRegressor(**params).fit(X_fit, data.y[train], featurizer=featurizer)
            preds[test] = _three(model.predict_quantiles(X_all[test]))
    ok = ~np.isnan(preds[:, 1])
    metrics = slowdown_metrics(
        data.y[ok], preds[ok, 1], data.meta["pair_id"].to_numpy()[ok], preds[ok, 0], preds[ok, 2]
    )
    return {
        "optimistic": True,
        "note": "random 5-fold split over pairs: test workloads also appear in training; not the headline",
        "model": metrics,
    }


def summarize(cv: CVResult) -> dict:
    """Turn a ``CVResult`` into the JSON-ready evaluation summary.

    Example::

        {"group_by": "family", "n_samples": 1952, "n_groups": 7,
         "model": {"n": 1952, "mae": 0.3, "mape": 16.0, "spearman": 0.6, "decision_accuracy": 85.0,
                   "coverage_p10_p90": 78.0, "coverage_p10_p90_uncalibrated": 67.0},
         "baselines": {"median": {"mae": ..., "mape": ...}, "linear": {...},
                       "util_sum": {"n": 1952, "mae": None, ..., "not_applicable": "needs a utilization ..."}},
         "per_group": {"resnet18": {"n": 270, "model_mape": 12.0, "median_mape": 20.1, ...,
                                    "model_coverage_p10_p90": 81.0}, ...},
         "per_device": {"v100": {"n": 660, "model_mape": 33.6, "model_coverage_p10_p90": 69.1,
                                 "model_above_p90": 13.6}, ...},
         "folds": [{"group": "a3c", "n_train": 1500, "n_test": 100}, ...]}

    A baseline that could not run on the data's features (``CVResult.unusable``) has None for every metric
    and says why under ``not_applicable``.
    """
    rows = cv.rows
    y = rows["measured"].to_numpy()
    pid = rows["pair_id"].to_numpy()
    model = slowdown_metrics(y, rows["p50"].to_numpy(), pid, rows["p10"].to_numpy(), rows["p90"].to_numpy())
    if "p10_uncalibrated" in rows:
        inside = (y >= rows["p10_uncalibrated"].to_numpy()) & (y <= rows["p90_uncalibrated"].to_numpy())
        model["coverage_p10_p90_uncalibrated"] = float(inside.mean() * 100) if y.size else float("nan")
    names = [c[len("pred_") :] for c in rows.columns if c.startswith("pred_")]
    out = {
        "group_by": cv.group_by,
        "n_samples": int(len(rows)),
        "n_groups": int(rows["group"].nunique()),
        "model": model,
        "baselines": {
            name: _not_applicable(len(rows), cv.unusable[name])
            if name in cv.unusable
            else slowdown_metrics(y, rows[f"pred_{name}"].to_numpy(), pid)
            for name in names
        },
    }
    per_group = {}
    for g, part in rows.groupby("group", sort=True):
        entry = {"n": int(len(part)), "model_mape": slowdown_metrics(part["measured"], part["p50"])["mape"]}
        for name in names:
            entry[f"{name}_mape"] = (
                None if name in cv.unusable else slowdown_metrics(part["measured"], part[f"pred_{name}"])["mape"]
            )
        entry["model_coverage_p10_p90"] = slowdown_metrics(
            part["measured"], part["p50"], low=part["p10"], high=part["p90"]
        )["coverage_p10_p90"]
        per_group[str(g)] = entry
    out["per_group"] = per_group
    out["per_device"] = {
        str(d): {
            "n": int(len(part)),
            "model_mape": slowdown_metrics(part["measured"], part["p50"])["mape"],
            "model_coverage_p10_p90": slowdown_metrics(
                part["measured"], part["p50"], low=part["p10"], high=part["p90"]
            )["coverage_p10_p90"],
            # What an SLO check at p90 meets: the share of measurements above it.
            "model_above_p90": float((part["measured"] > part["p90"]).mean() * 100),
        }
        for d, part in rows.groupby("device_name", sort=True)
    }
    out["folds"] = cv.folds
    if cv.random_split is not None:
        out["random_split"] = cv.random_split
    return out


def _not_applicable(n: int, reason: str) -> dict:
    return {"n": n, "mae": None, "mape": None, "spearman": None, "decision_accuracy": None, "not_applicable": reason}


def evaluate_rows(data: PairRows, group_by: str = "workload", random_split: bool = False, **params) -> dict:
    """Cross-validate on prepared ordered rows and return the summary (see ``summarize``)."""
    return summarize(cross_validate(data, group_by=group_by, random_split=random_split, **params))


def cross_validate_dataset(
    profiles: pd.DataFrame, pairs: pd.DataFrame, group_by: str = "workload", random_split: bool = False, **params
) -> CVResult:
    """Join a dataset's measured pairs to their profiles and run ``cross_validate`` on the ordered rows.

    Parameters as ``evaluate``; returns the ``CVResult`` (for ``summarize`` and ``plots.plot_evaluation``).
    """
    if group_by not in GROUP_BY:
        raise ConfigError(f"group_by must be one of {list(GROUP_BY)}, got {group_by!r}")
    # Nested selection tries every feature set, so it starts from all features.
    features = "all" if params.get("tune") else params.get("features", "physical")
    rows = ordered_rows(profiles, pairs, features=features)
    return cross_validate(rows, group_by=group_by, random_split=random_split, **params)


def evaluate(
    profiles: pd.DataFrame,
    pairs: pd.DataFrame,
    group_by: str = "workload",
    random_split: bool = False,
    **params,
) -> dict:
    """Grouped cross-validation of the slowdown model on measured pairs, with baselines on the same folds.

    Parameters
    ----------
    profiles, pairs : DataFrame
        Tables as read by ``sharewise.datasets.read_datasets``; pairs with a status other than ``ok`` are
        ignored.
    group_by : {"workload", "family", "device"}
        What a held-out group is.
    random_split : bool
        Also report an optimistic random split over pairs, labelled as such.
    **params
        ``cross_validate`` options (``features``, ``partner_effect``, ``tune``) and ``SlowdownRegressor``
        parameters.

    Returns
    -------
    dict
        ``{"group_by": "family", "n_samples": 1952, "n_groups": 7, "model": {"mae": 0.3, "mape": 16.0,
        "spearman": 0.6, "decision_accuracy": 85.0, "coverage_p10_p90": 78.0, "n": 1952},
        "baselines": {"median": {"mae": ..., "mape": ...}, "linear": {...}, "util_sum": {...}},
        "per_group": {...}, "folds": [...]}``; MAPE and accuracies in percent, on slowdown.
    """
    return summarize(cross_validate_dataset(profiles, pairs, group_by, random_split, **params))
