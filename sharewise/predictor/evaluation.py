"""Grouped cross-validation of the slowdown model next to simple baselines, and the summary it reports.

Folds (``folds.grouped_folds``): for each group ``g`` (a workload, a model family or a device), the model
trains on the ordered rows in which neither self nor partner belongs to ``g`` and is scored on those whose
*self* belongs to ``g``, so every ordered row is scored once, in the fold where its own workload is unseen.

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
from itertools import product

import numpy as np
import pandas as pd

from sharewise.errors import ConfigError
from sharewise.predictor.baselines import BASELINES, unusable_reason
from sharewise.predictor.choices import GROUP_BY
from sharewise.predictor.conformal import calibrate_rows
from sharewise.predictor.featurizer import row_weights
from sharewise.predictor.folds import fold_features, grouped_folds, subset
from sharewise.predictor.metrics import slowdown_metrics
from sharewise.predictor.model import SlowdownRegressor, three_quantiles
from sharewise.predictor.pair_features import PairRows
from sharewise.predictor.profile_join import ordered_rows
from sharewise.predictor.stand_in import device_kinds
from sharewise.predictor.structure import OFFSET_COLUMNS, STRUCTURE_CHOICES

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
    structure: str = "auto",
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
    in the same fold), which is optimistic: the test workloads were seen. ``structure="auto"`` (default) chooses
    each fold's structure by ``capacity.select_structure`` on that fold's training rows alone (nested: the
    held-out group informs no choice made for it); a structure name fixes it. Rows are weighted by their
    measurement's precision in every fit (``featurizer.row_weights``); scores are unweighted.
    """
    from sharewise.predictor.capacity import select_structure

    if structure not in STRUCTURE_CHOICES:
        raise ConfigError(f"structure must be one of {', '.join(STRUCTURE_CHOICES)}, got {structure!r}")
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
    weights = row_weights(data.meta)
    for fold in folds:
        chosen = select_params(subset(data, fold.train), group_by, **params) if tune else {}
        fold_params = {**pipeline, **params, **{k: v for k, v in chosen.items() if k != "inner_mape"}}
        fold_pipeline = {k: fold_params.pop(k) for k in PIPELINE_KEYS}
        if structure == "auto":
            selection = select_structure(subset(data, fold.train), group_by, **fold_pipeline, **fold_params)
            fold_params["structure"] = selection["chosen"]
        else:
            fold_params["structure"] = structure
        featurizer, X_fit, X_all = fold_features(data, fold.train, **fold_pipeline)
        model = SlowdownRegressor(**fold_params).fit(
            X_fit, data.y[fold.train], featurizer=featurizer, sample_weight=weights[fold.train]
        )
        raw[fold.test] = three_quantiles(model.predict_quantiles(X_all.iloc[fold.test]))[:, [0, 2]]
        if calibrate:  # on the fold's training rows only; level 0 alone, nothing is revealed here
            model.calibration_ = calibrate_rows(
                data, group_by, **fold_pipeline, exclude=fold.group, cache=cache, levels=(0,), **fold_params
            )
        devices = data.meta["device_name"].to_numpy()[fold.test]
        preds[fold.test] = three_quantiles(model.predict_quantiles(X_all.iloc[fold.test], devices=devices))
        _, Xtr, plain = fold_features(data, fold.train, features=features, partner_effect=False)
        # The baselines see the pair features, not the structure's fitted offsets.
        Xtr, plain = Xtr.drop(columns=list(OFFSET_COLUMNS)), plain.drop(columns=list(OFFSET_COLUMNS))
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
        info = {
            "group": fold.group,
            "n_train": int(fold.train.size),
            "n_test": int(fold.test.size),
            "structure": fold_params["structure"],
        }
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
            preds[test] = three_quantiles(model.predict_quantiles(X_all[test]))
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


def unscored_device_note(profiles: pd.DataFrame, pairs: pd.DataFrame, out: str = "DIR") -> str | None:
    """One line where some workloads are profiled on a device with no measured pair (a user's machine next to
    the shipped data): the evaluation scores only the devices with pairs, so the model's error on that device
    is not measured; the line names the command that measures a pair there (into ``out``). None otherwise.

    Example: ``"transformer is profiled on 'Intel(R) Xeon(R) Processor (2 cores)', where no pair is measured:
    the scores are for 'AMD EPYC (2 cores)' only and the model's error there is not measured; measure pairs
    there (sharewise pairs -w transformer,a3c --out runs/new) and evaluate again, with --group-by device for
    the error on a device the model never saw"``.
    """
    measured = pairs[pairs["status"] == "ok"] if "status" in pairs.columns else pairs
    scored = set(measured["device_name"].astype(str)) if "device_name" in measured.columns else set()
    if not scored or "device_name" not in profiles.columns:
        return None
    devices = profiles["device_name"].astype(str)
    unscored = sorted(set(devices) - scored)
    if not unscored:
        return None
    device = unscored[0]
    mine = sorted(set(profiles.loc[devices == device, "workload"].astype(str)))
    known = sorted(set(measured["workload_a"].astype(str)) | set(measured["workload_b"].astype(str)))
    partner = next((w for w in known if w not in mine), known[0])
    names = ", ".join(mine[:8]) + (f" and {len(mine) - 8} more" if len(mine) > 8 else "")
    command = f"sharewise pairs -w {mine[0]},{partner} --out {out}"
    if device_kinds(profiles).get(device) == "cuda":
        command = command.replace(" --out", " --device cuda --out")
    return (
        f"{names} {'is' if len(mine) == 1 else 'are'} profiled on {device!r}, where no pair is measured: the scores "
        f"are for {' and '.join(repr(d) for d in sorted(scored))} only and the model's error on {device!r} is not "
        f"measured; measure pairs there ({command}) and evaluate again, with --group-by device for the error on a "
        "device the model never saw"
    )


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
