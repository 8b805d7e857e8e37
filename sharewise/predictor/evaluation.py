"""Grouped cross-validation of the slowdown model next to simple baselines, and the metrics it reports.

Folds: for each group ``g`` (a workload, a model family or a device), the training rows are the ordered
rows in which neither self nor partner belongs to ``g``; the test rows are those whose *self* belongs to
``g``. Every ordered row is therefore scored exactly once, in the fold where its own workload is unseen, and
each number answers the user's question "how slow will a new model run next to my other jobs". Both
directions of a held-out pair are scored (each in the fold of its own self), so the "is sharing worth it"
decision, which needs both slowdowns, is scored on every pair.

Everything fitted is fitted per fold on the training rows only: the model, the baselines, and the device
references that the share features divide by (``features.rows_reference``). With ``tune=True`` the model's
parameters are chosen per fold too, by an inner grouped cross-validation over the fold's training groups
only (``select_params``), so no held-out group informs any choice made for it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sharewise.errors import ConfigError
from sharewise.predictor.features import (
    PairRows,
    job_flop_rate,
    ordered_rows,
    prepare_rows,
)
from sharewise.predictor.model import SlowdownRegressor

GROUP_BY = ("workload", "family", "device")
RANDOM_SPLIT_FOLDS = 5

#: Candidates of the nested selection (``select_params``), fixed before any evaluation: the feature set,
#: and the two knobs that set how finely trees may carve the training groups (depth, rows per leaf).
TUNING_GRID: dict[str, tuple] = {
    "features": ("physical", "all"),
    "partner_effect": (False, True),
    "max_depth": (2, 3),
    "min_child_weight": (10.0, 50.0),
}
#: Keys of a parameter set that configure the feature pipeline (``prepare_rows``), not the regressor.
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


# ---- baselines ------------------------------------------------------------------------------------------


class MedianBaseline:
    """Predict the median slowdown of the training rows for every row."""

    def fit(self, X: pd.DataFrame, y: np.ndarray, meta: pd.DataFrame) -> MedianBaseline:
        self.value_ = float(np.median(y))
        return self

    def predict(self, X: pd.DataFrame, meta: pd.DataFrame) -> np.ndarray:
        return np.full(len(X), self.value_)


class LinearBaseline:
    """Ridge regression of log slowdown on the same pair features (signed log, median-imputed, scaled).

    Predictions are clipped to the training range of log slowdown: a linear model extrapolates without
    bound to an unseen workload, and a clip is what anyone would do before using it.
    """

    def fit(self, X: pd.DataFrame, y: np.ndarray, meta: pd.DataFrame) -> LinearBaseline:
        from sklearn.impute import SimpleImputer
        from sklearn.linear_model import Ridge
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import FunctionTransformer, StandardScaler

        self.pipe_ = make_pipeline(
            FunctionTransformer(_signed_log),
            SimpleImputer(strategy="median", add_indicator=True),
            StandardScaler(),
            Ridge(alpha=1.0),
        )
        target = np.log(y)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # all-NaN columns are dropped by the imputer, by design
            self.pipe_.fit(X.to_numpy(dtype=np.float64), target)
        self.range_ = (float(target.min()), float(target.max()))
        return self

    def predict(self, X: pd.DataFrame, meta: pd.DataFrame) -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raw = self.pipe_.predict(X.to_numpy(dtype=np.float64))
        return np.exp(np.clip(raw, *self.range_))


class UtilSumBaseline:
    """Heuristic: slowdown = max(1, u_self + u_partner), where u is the share of the device a job uses alone.

    u is the busy fraction when measured, else the NVML SM utilization, else the job's FLOP rate over the
    highest FLOP rate seen on that device in training, else 1 (a job that needs the whole device, so two
    of them take turns: slowdown 2).
    """

    def fit(self, X: pd.DataFrame, y: np.ndarray, meta: pd.DataFrame) -> UtilSumBaseline:
        rate = _flop_rate(X, "self_")
        frame = pd.DataFrame({"device": meta["device_name"].to_numpy(), "rate": rate})
        self.rate_max_ = frame.groupby("device")["rate"].max().to_dict()
        return self

    def _util(self, X: pd.DataFrame, meta: pd.DataFrame, prefix: str) -> np.ndarray:
        u = np.full(len(X), np.nan)
        if f"{prefix}f_busy_frac" in X:
            u = X[f"{prefix}f_busy_frac"].to_numpy(dtype=np.float64)
        nvml = sorted(
            (c for c in X.columns if c.startswith(f"{prefix}f_nvml_") and "sm_util" in c),
            key=lambda c: not c.endswith("_mean"),  # the mean first, tail percentiles only as a fallback
        )
        for col in nvml:
            u = np.where(np.isnan(u), X[col].to_numpy(dtype=np.float64) / 100.0, u)
        peak = meta["device_name"].map(self.rate_max_).to_numpy(dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            relative = _flop_rate(X, prefix) / peak
        u = np.where(np.isnan(u), relative, u)
        return np.clip(np.where(np.isnan(u), 1.0, u), 0.0, 1.0)

    def predict(self, X: pd.DataFrame, meta: pd.DataFrame) -> np.ndarray:
        return np.maximum(1.0, self._util(X, meta, "self_") + self._util(X, meta, "partner_"))


def _flop_rate(X: pd.DataFrame, prefix: str) -> np.ndarray:
    # Same definition as the pair feature, on the self_/partner_ columns of a feature frame.
    base = [c[len(prefix) :] for c in X.columns if c.startswith(prefix)]
    values = X[[prefix + c for c in base]].to_numpy(dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return job_flop_rate(values, {c: i for i, c in enumerate(base)})


def _signed_log(values: np.ndarray) -> np.ndarray:
    # Byte counts and FLOP rates span ten orders of magnitude; a linear model needs them on a log scale.
    return np.sign(values) * np.log1p(np.abs(values))


# One registry: the evaluate table, the JSON keys and the tests all read it.
BASELINES: dict[str, Callable[[], object]] = {
    "median": MedianBaseline,
    "linear": LinearBaseline,
    "util_sum": UtilSumBaseline,
}


# ---- cross-validation -----------------------------------------------------------------------------------


@dataclass
class CVResult:
    """Out-of-fold predictions of the model and the baselines for every scored ordered row.

    ``rows`` has the row identity (``self_workload, partner_workload, device_name, self_family, ...``),
    ``group``, ``measured``, ``p10, p50, p90`` and one ``pred_<baseline>`` column per baseline.
    """

    group_by: str
    rows: pd.DataFrame
    folds: list[dict] = field(default_factory=list)
    random_split: dict | None = None


def cross_validate(
    data: PairRows,
    group_by: str = "workload",
    baselines: dict[str, Callable[[], object]] | None = None,
    random_split: bool = False,
    features: str = "physical",
    partner_effect: bool = True,
    tune: bool = False,
    **params,
) -> CVResult:
    """Run grouped cross-validation of ``SlowdownRegressor(**params)`` and the baselines on ordered rows.

    ``baselines`` maps a name to a factory of an object with ``fit(X, y, meta)`` and ``predict(X, meta)``;
    default ``BASELINES``; they see the pair features of feature set ``features`` (device shares fitted
    on the fold's training rows, no partner effect; ``X`` keeps the row labels of ``data.X``). The model sees
    ``prepare_rows(..., features, partner_effect)`` fitted on the fold's training rows. With ``tune``
    the model's pipeline and tree parameters are chosen per fold by ``select_params`` on that fold's
    training rows (``params`` fix the rest). With ``random_split`` the model is also scored on a random
    5-fold split over pairs (both directions of a pair in the same fold), which is optimistic: the test
    workloads were seen.
    """
    baselines = BASELINES if baselines is None else baselines
    if data.y is None:
        raise ConfigError("cross-validation needs measured slowdowns")
    folds = grouped_folds(data.meta, group_by)
    n = len(data.y)
    preds = np.full((n, 3), np.nan)
    base_preds = {name: np.full(n, np.nan) for name in baselines}
    group = np.empty(n, dtype=object)
    fold_info = []
    pipeline = {"features": features, "partner_effect": partner_effect}
    for fold in folds:
        chosen = select_params(_subset(data, fold.train), group_by, **params) if tune else {}
        fold_params = {**pipeline, **params, **{k: v for k, v in chosen.items() if k != "inner_mape"}}
        fold_pipeline = {k: fold_params.pop(k) for k in PIPELINE_KEYS}
        rows, _ = prepare_rows(data, fold.train, **fold_pipeline)
        model = SlowdownRegressor(**fold_params).fit(rows.X.iloc[fold.train], data.y[fold.train])
        preds[fold.test] = _three(model.predict_quantiles(rows.X.iloc[fold.test]))
        plain, _ = prepare_rows(data, fold.train, features=features, partner_effect=False)
        Xtr, ytr, mtr = plain.X.iloc[fold.train], data.y[fold.train], data.meta.iloc[fold.train]
        Xte, mte = plain.X.iloc[fold.test], data.meta.iloc[fold.test]
        for name, factory in baselines.items():
            base_preds[name][fold.test] = factory().fit(Xtr, ytr, mtr).predict(Xte, mte)
        group[fold.test] = fold.group
        info = {"group": fold.group, "n_train": int(fold.train.size), "n_test": int(fold.test.size)}
        if tune:
            info["chosen"] = chosen
        fold_info.append(info)
    rows = data.meta.copy()
    rows["group"] = group
    rows["measured"] = data.y
    rows["p10"], rows["p50"], rows["p90"] = preds[:, 0], preds[:, 1], preds[:, 2]
    for name, values in base_preds.items():
        rows[f"pred_{name}"] = values
    result = CVResult(group_by=group_by, rows=rows, folds=fold_info)
    if random_split:
        result.random_split = _random_split(data, **pipeline, **params)
    return result


def _subset(rows: PairRows, index: np.ndarray) -> PairRows:
    meta = rows.meta.iloc[index].reset_index(drop=True)
    X = rows.X.iloc[index].reset_index(drop=True)
    return PairRows(X=X, y=rows.y[index], meta=meta, reference=rows.reference)


def select_params(data: PairRows, group_by: str = "family", **fixed) -> dict:
    """Choose the feature pipeline and tree parameters by grouped cross-validation on ``data`` alone.

    Every combination of ``TUNING_GRID`` is scored by leave-one-group-out over the groups in ``data``
    (each inner fold fits its own pipeline state), with each pull toward the training median of
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
    prepared: dict[tuple, PairRows] = {}
    for fold in folds:
        prior[fold.test] = float(np.median(np.log(data.y[fold.train])))
        prepared.clear()
        for c, cand in enumerate(candidates):
            pipe = tuple(cand[k] for k in PIPELINE_KEYS)
            if pipe not in prepared:
                prepared[pipe] = prepare_rows(data, fold.train, *pipe)[0]
            rows = prepared[pipe]
            tree = {k: v for k, v in cand.items() if k not in PIPELINE_KEYS}
            model = SlowdownRegressor(**fixed, **tree).fit(rows.X.iloc[fold.train], data.y[fold.train])
            log_pred[c, fold.test] = np.log(model.predict(rows.X.iloc[fold.test]))
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
            rows, _ = prepare_rows(data, np.flatnonzero(train), features, partner_effect)
            model = SlowdownRegressor(**params).fit(rows.X[train], data.y[train])
            preds[test] = _three(model.predict_quantiles(rows.X[test]))
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
                   "coverage_p10_p90": 78.0},
         "baselines": {"median": {"mae": ..., "mape": ...}, "linear": {...}, "util_sum": {...}},
         "per_group": {"resnet18": {"n": 270, "model_mape": 12.0, "median_mape": 20.1, ...}, ...},
         "folds": [{"group": "a3c", "n_train": 1500, "n_test": 100}, ...]}
    """
    rows = cv.rows
    y = rows["measured"].to_numpy()
    pid = rows["pair_id"].to_numpy()
    out = {
        "group_by": cv.group_by,
        "n_samples": int(len(rows)),
        "n_groups": int(rows["group"].nunique()),
        "model": slowdown_metrics(
            y, rows["p50"].to_numpy(), pid, rows["p10"].to_numpy(), rows["p90"].to_numpy()
        ),
        "baselines": {
            c[len("pred_") :]: slowdown_metrics(y, rows[c].to_numpy(), pid)
            for c in rows.columns
            if c.startswith("pred_")
        },
    }
    per_group = {}
    for g, part in rows.groupby("group", sort=True):
        entry = {"n": int(len(part)), "model_mape": slowdown_metrics(part["measured"], part["p50"])["mape"]}
        for c in part.columns:
            if c.startswith("pred_"):
                entry[f"{c[len('pred_') :]}_mape"] = slowdown_metrics(part["measured"], part[c])["mape"]
        per_group[str(g)] = entry
    out["per_group"] = per_group
    out["folds"] = cv.folds
    if cv.random_split is not None:
        out["random_split"] = cv.random_split
    return out


def evaluate_rows(data: PairRows, group_by: str = "workload", random_split: bool = False, **params) -> dict:
    """Cross-validate on prepared ordered rows and return the summary (see ``summarize``)."""
    return summarize(cross_validate(data, group_by=group_by, random_split=random_split, **params))


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
    if group_by not in GROUP_BY:
        raise ConfigError(f"group_by must be one of {list(GROUP_BY)}, got {group_by!r}")
    # Nested selection tries every feature set, so it starts from all features.
    features = "all" if params.get("tune") else params.get("features", "physical")
    rows = ordered_rows(profiles, pairs, features=features)
    return evaluate_rows(rows, group_by=group_by, random_split=random_split, **params)
