"""Conformal p10/p90: split-conformal corrections fitted on grouped out-of-fold residuals, kept in the sidecar.

Why not MAPIE: its ``ConformalizedQuantileRegressor`` conformalizes one fitted model on one held-out
conformity set (rows), and its cross-conformal regressors keep one model per fold and conformalize an
absolute residual; neither scores the residuals of models that never saw a row's *group*, which is what
makes an interval hold for an unseen workload. The procedure here is conformalized quantile regression
(Romano, Patterson and Candès, NeurIPS 2019) with the conformity scores taken out of fold over groups:

1. Leave-one-group-out (at most ``MAX_CALIBRATION_FOLDS`` folds of whole groups) over the training rows: a
   fold's model never sees a row whose self or partner is in the fold's groups, and predicts the rows whose
   self is (the folds of ``evaluation.grouped_folds``).
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
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sharewise.errors import ModelSchemaError
from sharewise.predictor.pair_features import PairRows

#: Target coverage of the calibrated p10-p90 interval.
COVERAGE = 0.8
#: At most this many folds of whole groups (a dataset of 300 workloads does not cost 300 fits).
MAX_CALIBRATION_FOLDS = 10
#: Numbers of revealed pairs of a workload that get their own corrections (between levels, the lower one).
LEVELS = (0, 1, 2, 4, 8)
#: Repeats of the seeded reveals per level: more scores for the corrections of levels above 0.
LEVEL_REPEATS = 3
#: Fewest scores of a device (per level) for it to get its own corrections: five above a 90% quantile.
MIN_DEVICE_SCORES = 50


@dataclass(frozen=True)
class ConformalCalibration:
    """Log corrections of the outermost quantiles per level of revealed pairs, and the shift's shrinkage.

    ``lower[k]`` is subtracted from the log p10 and ``upper[k]`` added to the log p90 of a row whose self has
    ``k`` revealed pairs (the largest level not above its count); ``devices`` holds the same per device for
    the devices calibrated on their own (module docstring, step 4), the pooled ones serve the rest.
    ``shrinkage`` holds the variance components of the residuals that ``WorkloadShift`` shrinks with.
    Example::

        ConformalCalibration(lower={0: 0.12, 1: 0.08}, upper={0: 0.2, 1: 0.15}, coverage=0.8,
                             group_by="family", n_scores=1900, n_groups=7, shrinkage={...},
                             devices={"v100": {"lower": {0: 0.31, 1: 0.2}, "upper": {0: 0.45, 1: 0.3}}})
    """

    lower: dict[int, float]
    upper: dict[int, float]
    coverage: float = COVERAGE
    group_by: str = "family"
    n_scores: int = 0
    n_groups: int = 0
    shrinkage: dict = field(default_factory=dict)
    devices: dict = field(default_factory=dict)

    def level_of(self, revealed: np.ndarray) -> np.ndarray:
        """Return the calibrated level used for each count of revealed pairs (the largest level <= count)."""
        levels = np.asarray(sorted(self.lower), dtype=np.int64)
        at = np.searchsorted(levels, np.asarray(revealed, dtype=np.int64), side="right") - 1
        return levels[np.clip(at, 0, levels.size - 1)]

    def corrections(
        self, revealed: np.ndarray, devices: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Return the (lower, upper) log corrections for rows whose selves revealed ``revealed`` pairs, on
        ``devices`` (one per row; without them, or for a device without its own, the pooled corrections)."""
        keys = sorted(self.lower)
        at = np.searchsorted(keys, self.level_of(revealed))
        table = lambda c: np.array([c[k] for k in keys], dtype=np.float64)  # noqa: E731 - level -> value
        lo, hi = table(self.lower)[at], table(self.upper)[at]
        if devices is not None and self.devices and at.size:
            codes, uniques = pd.factorize(pd.Series(np.asarray(devices, dtype=object)).astype(str))
            for code, device in enumerate(uniques):
                own = self.devices.get(str(device))
                if own is not None:
                    rows = codes == code
                    lo[rows] = table(own["lower"])[at[rows]]
                    hi[rows] = table(own["upper"])[at[rows]]
        return lo, hi

    def apply(
        self, log_q: np.ndarray, revealed: np.ndarray | None = None, devices: np.ndarray | None = None
    ) -> np.ndarray:
        """Widen (or narrow) the outermost columns of sorted log quantiles ``log_q`` in place; return it.

        Without ``revealed`` every row takes level 0; without ``devices`` the pooled corrections. A narrowing
        correction never crosses the median.
        """
        if revealed is None and (devices is None or not self.devices):
            lo, hi = self.lower[0], self.upper[0]
        else:
            revealed = np.zeros(log_q.shape[0], dtype=np.int64) if revealed is None else revealed
            lo, hi = self.corrections(revealed, devices)
        mid = log_q[:, log_q.shape[1] // 2]
        log_q[:, 0] = np.minimum(log_q[:, 0] - lo, mid)
        log_q[:, -1] = np.maximum(log_q[:, -1] + hi, mid)
        return log_q

    def to_dict(self) -> dict:
        """Return plain JSON types; levels become string keys, e.g. ``{"lower": {"0": 0.12}, ...}``."""
        return {
            "lower": {str(k): float(v) for k, v in sorted(self.lower.items())},
            "upper": {str(k): float(v) for k, v in sorted(self.upper.items())},
            "coverage": float(self.coverage),
            "group_by": str(self.group_by),
            "n_scores": int(self.n_scores),
            "n_groups": int(self.n_groups),
            "shrinkage": {str(k): float(v) for k, v in self.shrinkage.items()},
            "devices": {
                str(d): {side: {str(k): float(v) for k, v in sorted(own[side].items())} for side in ("lower", "upper")}
                for d, own in sorted(self.devices.items())
            },
        }

    @classmethod
    def from_dict(cls, data: dict) -> ConformalCalibration:
        """Rebuild from ``to_dict``'s output.

        Raises
        ------
        ModelSchemaError
            ``data`` lacks the level-0 corrections.
        """
        try:
            lower = {int(k): float(v) for k, v in data["lower"].items()}
            upper = {int(k): float(v) for k, v in data["upper"].items()}
            if 0 not in lower or 0 not in upper:
                raise KeyError("0")
            devices = {
                str(d): {side: {int(k): float(v) for k, v in own[side].items()} for side in ("lower", "upper")}
                for d, own in data.get("devices", {}).items()
            }
            if any(set(own["lower"]) != set(lower) or set(own["upper"]) != set(upper) for own in devices.values()):
                raise KeyError("a device's levels differ from the pooled levels")
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ModelSchemaError(
                f"calibration must hold 'lower' and 'upper' corrections with level '0', got {data!r} ({exc}); "
                "it was not written by ConformalCalibration.to_dict: retrain the model"
            ) from None
        return cls(
            lower=lower,
            upper=upper,
            coverage=float(data.get("coverage", COVERAGE)),
            group_by=str(data.get("group_by", "family")),
            n_scores=int(data.get("n_scores", 0)),
            n_groups=int(data.get("n_groups", 0)),
            shrinkage={str(k): float(v) for k, v in data.get("shrinkage", {}).items()},
            devices=devices,
        )


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


def calibration_folds(
    meta: pd.DataFrame,
    group_by: str,
    exclude: str | Collection[str] | None = None,
    max_folds: int = MAX_CALIBRATION_FOLDS,
    seed: int = 0,
) -> list[tuple[frozenset, np.ndarray, np.ndarray]]:
    """Return the grouped folds of the calibration as ``(held groups, train rows, test rows)``.

    Groups are those of ``group_by`` except ``exclude`` (an outer fold's held-out group or groups: their rows,
    as self or partner, are in no fold). Up to ``max_folds`` groups, one fold per group; above, the groups are dealt
    to ``max_folds`` folds in a seeded order. A fold trains on the rows in which neither self nor partner is
    held (nor ``exclude``) and scores the rows whose self is held; folds with nothing to train on are dropped.
    """
    from sharewise.predictor.evaluation import row_groups

    self_g, partner_g = row_groups(meta, group_by)
    excluded = {exclude} if isinstance(exclude, str) else set(exclude or ())
    usable = ~np.isin(self_g, list(excluded)) & ~np.isin(partner_g, list(excluded))
    groups = np.array(sorted(set(self_g[usable])), dtype=object)
    if len(groups) > max_folds:
        groups = groups[np.random.default_rng(seed).permutation(len(groups))]
    folds = []
    for i in range(min(max_folds, len(groups))):
        members = list(groups[i::max_folds])
        train = np.flatnonzero(usable & ~np.isin(self_g, members) & ~np.isin(partner_g, members))
        if train.size:
            held = frozenset(members) | excluded
            folds.append((held, train, np.flatnonzero(usable & np.isin(self_g, members))))
    return folds


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
    from sharewise.predictor.evaluation import _three, fold_features
    from sharewise.predictor.model import SlowdownRegressor

    cache = {} if cache is None else cache
    out = np.full((len(data.y), 3), np.nan)
    folds = calibration_folds(data.meta, group_by, exclude=exclude)
    for held, train, test in folds:
        if held not in cache:
            featurizer, X_fit, X_all = fold_features(data, train, features, partner_effect)
            model = SlowdownRegressor(**params).fit(X_fit, data.y[train], featurizer=featurizer)
            cache[held] = np.log(_three(model.predict_quantiles(X_all)))
        out[test] = cache[held][test]
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
    from sharewise.predictor.shift import WorkloadShift, estimate_shrinkage

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
    from sharewise.predictor.api import model_featurizer
    from sharewise.predictor.profile_join import ordered_rows

    featurizer = model_featurizer(model)
    rows = ordered_rows(profiles, pairs, features="all")
    pipeline = {"features": featurizer.features, "partner_effect": featurizer.partner_effect}
    model.calibration_ = calibrate_rows(rows, group_by, **pipeline, **model.get_params())
    return model


# ---- reveals (shared by the calibration replay and the budgeted evaluation) ------------------------------


def reveal_candidates(meta: pd.DataFrame, group_by: str) -> np.ndarray:
    """Return the rows a new workload may reveal: itself as self, a partner outside its own group.

    A user measures the new job next to jobs the cluster knows; pairs among new jobs are not revealed.
    """
    from sharewise.predictor.evaluation import row_groups

    self_g, partner_g = row_groups(meta, group_by)
    return np.flatnonzero(self_g != partner_g)


def random_reveals(meta: pd.DataFrame, candidates: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Return ``k`` random candidate rows per self workload (fewer where it has fewer), as row positions."""
    selves = meta["self_workload"].astype(str).to_numpy()[candidates]
    order = rng.permutation(candidates.size)
    picked = pd.Series(candidates[order]).groupby(selves[order], sort=False).head(k)
    return np.sort(picked.to_numpy())


def revealed_pairs(meta: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Return every row (both directions) of the pairs that rows ``rows`` belong to."""
    pair_id = meta["pair_id"].to_numpy()
    return np.flatnonzero(np.isin(pair_id, pair_id[np.asarray(rows, dtype=np.int64)]))
