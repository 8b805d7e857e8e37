"""Conformal p10/p90: fit a ``ConformalCalibration`` (the value type, ``calibration``) on grouped out-of-fold residuals.

Why not MAPIE: its ``ConformalizedQuantileRegressor`` conformalizes one fitted model on one held-out
conformity set (rows), and its cross-conformal regressors keep one model per fold and conformalize an
absolute residual; neither scores the residuals of models that never saw a row's *group*, which is what
makes an interval hold for an unseen workload. The procedure here is conformalized quantile regression
(Romano, Patterson and Candès, NeurIPS 2019) with the conformity scores taken out of fold over groups:

1. Leave-one-group-out (at most ``folds.MAX_CALIBRATION_FOLDS`` folds of whole groups) over the training rows:
   a fold's model never sees a row whose self or partner is in the fold's groups, and predicts the rows whose
   self is (``folds.calibration_folds``).
2. Scores in log slowdown, one per tail: ``e_lo = log p10 - log y`` and ``e_hi = log y - log p90``.
3. Each tail's correction is the ``1 - alpha`` empirical quantile of its scores (``conformal_quantile``)
   with ``alpha = (1 - COVERAGE) / 2``; the calibrated interval is ``[p10 * exp(-c_lo), p90 * exp(c_hi)]``.

A workload that has revealed some of its own pairs (``shift.WorkloadShift``) is less uncertain: the same
residuals are replayed with ``k`` revealed pairs per workload for each level of ``LEVELS`` (seeded random
reveals, the shift fitted on them, scores on the rest), giving one pair of corrections per level.

4. Per device (Mondrian conformal prediction, Vovk et al. 2005: the scores are split by a category every
   query has, and each category gets its own quantile). Errors differ a lot between devices: on Gavel's
   family folds one pooled correction left p10-p90 covering 96.7% of the K80 measurements, 91.5% of the P100
   and 61.5% of the V100 ones (83.0% in all), so a V100 job's p90 was exceeded 18% of the time. A device with
   at least ``MIN_DEVICE_SCORES`` scores gets its own corrections at every level; another device (one the
   calibration never saw) takes the pooled ones. ``apply`` and ``corrections`` take the rows' devices;
   without them (a caller that has features only) every row takes the pooled corrections.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import pandas as pd

from sharewise.predictor.calibration import COVERAGE, ConformalCalibration
from sharewise.predictor.featurizer import row_weights
from sharewise.predictor.folds import (
    calibration_folds,
    fold_features,
    random_reveals,
    reveal_candidates,
    revealed_pairs,
)
from sharewise.predictor.model import SlowdownRegressor, three_quantiles
from sharewise.predictor.pair_features import PairRows
from sharewise.predictor.profile_join import ordered_rows
from sharewise.predictor.shift import WorkloadShift, estimate_shrinkage

#: Numbers of revealed pairs of a workload that get their own corrections (between levels, the lower one).
LEVELS = (0, 1, 2, 4, 8)
#: Repeats of the seeded reveals per level: more scores for the corrections of levels above 0.
LEVEL_REPEATS = 3
#: Fewest scores of a device (per level) for it to get its own corrections: five above a 90% quantile.
MIN_DEVICE_SCORES = 50
#: Scores of a level above 0 at which its corrections are halfway between its own and level 0's.
MIN_LEVEL_SCORES = 50


def conformal_quantile(scores: np.ndarray, alpha: float) -> float:
    """Return the ``1 - alpha`` empirical quantile of ``scores`` (the next score up, never interpolated).

    Split conformal's finite-sample level ``ceil((n + 1)(1 - alpha)) / n`` guarantees at least the coverage;
    here the target is a band around it (about 80%), and on a small dataset (the reference: 56 scores per
    fold) the inflated level of both tails covers 86% of held-out measurements, so the plain level is used.
    Example: ``conformal_quantile(np.arange(1.0, 11.0), 0.1)`` is ``10.0``; no scores give 0.
    """
    scores = np.asarray(scores, dtype=np.float64)
    scores = scores[np.isfinite(scores)]
    if scores.size == 0:
        return 0.0
    return float(np.quantile(scores, 1.0 - alpha, method="higher"))


def grouped_oof_log_quantiles(
    data: PairRows,
    group_by: str,
    features: str = "physical",
    partner_effect: bool = True,
    exclude: str | Collection[str] | None = None,
    cache: dict | None = None,
    **params,
) -> tuple[np.ndarray, int]:
    """Return the out-of-fold log quantiles (rows x 3, NaN where unscored) of ``data`` and the folds used.

    ``cache`` (a dict the caller keeps across outer folds) holds each fold model's log quantiles of every
    row by its set of held groups: the model that holds out ``{g, h}`` serves the inner fold ``h`` of outer
    fold ``g`` and the inner fold ``g`` of outer fold ``h`` alike, so a nested leave-one-group-out over
    ``k`` groups fits ``k(k-1)/2`` models instead of ``k(k-1)``, with identical results.
    """
    cache = {} if cache is None else cache
    out = np.full((len(data.y), 3), np.nan)
    folds = calibration_folds(data.meta, group_by, exclude=exclude)
    weights = row_weights(data.meta)
    # Folds of different outer folds may use different structures (nested selection): the key says which.
    structure = params.get("structure", "trees")
    for held, train, test in folds:
        key = (held, structure)
        if key not in cache:
            featurizer, X_fit, X_all = fold_features(data, train, features, partner_effect)
            model = SlowdownRegressor(**params).fit(
                X_fit, data.y[train], featurizer=featurizer, sample_weight=weights[train]
            )
            cache[key] = np.log(three_quantiles(model.predict_quantiles(X_all)))
        out[test] = cache[key][test]
    return out, len(folds)


def fit_calibration(
    log_q: np.ndarray,
    y: np.ndarray,
    meta: pd.DataFrame,
    group_by: str,
    n_groups: int,
    seed: int = 0,
    levels: tuple[int, ...] = LEVELS,
) -> ConformalCalibration:
    """Fit corrections per level of ``levels`` (0 always) and the shift's shrinkage from out-of-fold log
    quantiles ``log_q``; ``meta`` identifies each row (``PairRows.meta``), rows with NaN quantiles are ignored.
    """
    alpha = (1.0 - COVERAGE) / 2.0
    ok = np.isfinite(log_q).all(axis=1)
    log_q, log_y, meta = log_q[ok], np.log(np.asarray(y, dtype=np.float64)[ok]), meta.iloc[np.flatnonzero(ok)]
    shrinkage = estimate_shrinkage(log_y - log_q[:, 1], meta)
    device = meta["device_name"].astype(str).to_numpy()
    # Scores per level: (tail below, tail above, the device of each score).
    scores = {0: (log_q[:, 0] - log_y, log_y - log_q[:, 2], device)}
    rng = np.random.default_rng(seed)
    candidates = reveal_candidates(meta, group_by)
    for level in sorted(set(levels) - {0}):
        lo_scores, hi_scores, at = [], [], []
        for _ in range(LEVEL_REPEATS):
            revealed = random_reveals(meta, candidates, level, rng)
            shift = WorkloadShift.fit(log_y[revealed] - log_q[revealed, 1], meta.iloc[revealed], shrinkage)
            rest = np.setdiff1d(
                np.flatnonzero(meta["self_workload"].isin(shift.counts)), revealed_pairs(meta, revealed)
            )
            moved = log_q[rest] + shift.log_shift(meta.iloc[rest])[:, None]
            lo_scores.append(moved[:, 0] - log_y[rest])
            hi_scores.append(log_y[rest] - moved[:, 2])
            at.append(device[rest])
        scores[level] = (np.concatenate(lo_scores), np.concatenate(hi_scores), np.concatenate(at))
    lower = {k: conformal_quantile(lo, alpha) for k, (lo, _, _) in scores.items()}
    upper = {k: conformal_quantile(hi, alpha) for k, (_, hi, _) in scores.items()}
    for k, (lo, _, _) in scores.items():
        # A level's own 90% quantiles need scores: with n of them, its corrections are pulled toward level 0's
        # in proportion MIN_LEVEL_SCORES / (n + MIN_LEVEL_SCORES). On a 36-row campaign a level-2 replay has a
        # few dozen scores, and its own (narrower) corrections covered 35-65% of held-out measurements.
        n = int(np.isfinite(lo).sum())
        if k:
            pull = MIN_LEVEL_SCORES / (n + MIN_LEVEL_SCORES)
            lower[k] = (1 - pull) * lower[k] + pull * lower[0]
            upper[k] = (1 - pull) * upper[k] + pull * upper[0]
    return ConformalCalibration(
        lower=lower,
        upper=upper,
        group_by=group_by,
        n_scores=int(ok.sum()),
        n_groups=int(n_groups),
        shrinkage=shrinkage,
        devices=_device_corrections(scores, alpha) if len(set(device)) > 1 else {},
    )


def _device_corrections(scores: dict[int, tuple], alpha: float) -> dict:
    """Return ``{device: {"lower": {level: c}, "upper": {...}}}`` for the devices with at least
    ``MIN_DEVICE_SCORES`` level-0 scores (step 4 of the module docstring); a level where a device has fewer
    scores takes the pooled corrections of that level."""
    out = {}
    for device in sorted(set(scores[0][2])):
        if int((scores[0][2] == device).sum()) < MIN_DEVICE_SCORES:
            continue
        own: dict[str, dict[int, float]] = {"lower": {}, "upper": {}}
        for k, (lo, hi, where) in scores.items():
            mine = where == device if int((where == device).sum()) >= MIN_DEVICE_SCORES else np.ones_like(where, bool)
            own["lower"][k] = conformal_quantile(lo[mine], alpha)
            own["upper"][k] = conformal_quantile(hi[mine], alpha)
        out[str(device)] = own
    return out


def calibrate_rows(
    data: PairRows,
    group_by: str = "family",
    features: str = "physical",
    partner_effect: bool = True,
    exclude: str | Collection[str] | None = None,
    cache: dict | None = None,
    levels: tuple[int, ...] = LEVELS,
    **params,
) -> ConformalCalibration | None:
    """Calibrate the intervals of ``SlowdownRegressor(**params)`` by grouped out-of-fold residuals (module
    docstring) on the rows of ``data`` that involve no ``exclude`` group (an outer fold's training rows).

    ``cache`` shares fold models across outer folds (``grouped_oof_log_quantiles``); ``levels`` are the
    numbers of revealed pairs to calibrate (0 alone for an evaluation without a budget). Returns None when
    fewer than two folds can be scored.
    """
    log_q, n_folds = grouped_oof_log_quantiles(
        data, group_by, features, partner_effect, exclude=exclude, cache=cache, **params
    )
    if n_folds < 2 or not np.isfinite(log_q).all(axis=1).any():
        return None
    seed = int(params.get("random_state", 0))
    return fit_calibration(log_q, data.y, data.meta, group_by, n_folds, seed=seed, levels=levels)


def calibrate_model(model, profiles: pd.DataFrame, pairs: pd.DataFrame, group_by: str = "family"):
    """Attach a ``ConformalCalibration`` to fitted ``model`` from grouped out-of-fold residuals on its data.

    The out-of-fold models use ``model``'s own parameters and feature pipeline. Returns ``model`` (its
    ``calibration_`` set, None when the data has fewer than two ``group_by`` groups to fold over).
    """
    featurizer = model.get_featurizer()
    rows = ordered_rows(profiles, pairs, features="all")
    pipeline = {"features": featurizer.features, "partner_effect": featurizer.partner_effect}
    model.calibration_ = calibrate_rows(rows, group_by, **pipeline, **model.get_params())
    return model
