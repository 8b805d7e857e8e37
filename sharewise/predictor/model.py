"""``SlowdownRegressor``: XGBoost quantile regression of log slowdown, a scikit-learn style estimator."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.errors import (
    ConfigError,
    ModelSchemaError,
    NotFittedError,
    SchemaError,
)
from sharewise.predictor.calibration import ConformalCalibration
from sharewise.predictor.featurizer import PairFeaturizer, monotone_signs
from sharewise.predictor.params import Params
from sharewise.predictor.persistence import read_model_files, sidecar_path, write_model_files
from sharewise.predictor.shift import WorkloadShift
from sharewise.predictor.structure import OFFSET_OF, STRUCTURES
from sharewise.predictor.validation import as_matrix, check_feature_names, feature_names_of
from sharewise.predictor.xgboost_import import xgboost_module

# Version of the saved model layout (sidecar keys and pair feature naming). Bump it when a saved model
# could no longer be read correctly; load() refuses other versions instead of predicting garbage.
# 2: device-share features and references; 3: the probe offset (``offset_feature``); 4: the fitted feature
# state (device references, partner effects) moves from ``training`` to ``featurizer`` (``PairFeaturizer``);
# 5: the model's structure (``structure``: the offsets as feature columns, the featurizer's fitted ``structure``,
# the model card).
MODEL_SCHEMA_VERSION = 5
#: The job's slowdown next to the profiler's probe (``sharewise.profiler.probe``): the offset of a model whose
#: features lack the structure's offset columns (features built elsewhere).
PROBE_OFFSET = "self_f_probe_slowdown"
#: ``offset_feature`` default: the offset column of the model's ``structure`` (``structure.OFFSET_OF``).
AUTO_OFFSET = "auto"
#: ``min_child_weight`` that forbids every split: the structures without trees are one round of one leaf per
#: quantile, each quantile's constant around the offset.
NO_SPLIT = 1e30
#: How ``explain`` names the offset's term: this prefix, then the feature name.
OFFSET_TERM = "offset: log "


class SlowdownRegressor(Params):
    """Predict the slowdown of a job next to a partner from ordered pair features.

    The target is the log of the measured slowdown; one XGBoost model with the quantile objective learns
    the p10, p50 and p90 of it at once. ``predict`` returns the p50 slowdown, ``predict_quantiles`` all three.
    Missing features (NaN) are allowed: XGBoost learns a default direction for them.

    The defaults are fixed from two constraints, not tuned on any evaluation. Generalizing to a model
    family never seen in training, from a few families: shallow trees (depth 3) with large leaves
    (``min_child_weight=30``, about 30 rows per leaf under the quantile objective, so a leaf cannot isolate
    one small family), Friedman's row and column sampling (0.8), and a partner's device share may only
    raise the predicted slowdown (``monotone``: more load next to a job never makes it faster). Batch
    prediction at a million pairs per second on two cores: its cost is rounds x quantiles x depth per row,
    so 60 rounds at learning rate 0.15 (the same total shrinkage as about 100 rounds at 0.1).

    Parameters
    ----------
    n_estimators : int
        Boosting rounds (each round adds one tree per quantile).
    max_depth : int
        Depth of each tree.
    learning_rate : float
        Shrinkage per round.
    subsample, colsample_bytree : float
        Row and column sampling per tree, in (0, 1].
    min_child_weight : float
        Minimum hessian in a leaf: with the quantile objective roughly a minimum number of rows.
    structure : {"offset", "structured", "trees"}
        What the model is (``predictor.structure``): the offset alone, the offset with the partner terms, or
        that plus trees. Without trees no split is allowed (every round is one leaf per quantile), so the
        model is its offset plus one constant per quantile. ``train`` chooses it by grouped cross-validation
        (``capacity.select_structure``).
    monotone : bool
        Constrain the prediction to rise with the partner's load: its device shares
        (``pair_partner_share_*``), measured utilization (``partner_f_busy_frac``,
        ``partner_f_nvml_sm_util_mean``) and measured effect on others (``pair_partner_effect``) where
        present.
    prior_weight : float
        In [0, 1): pull the predicted log slowdowns toward the median of the training target by this
        fraction (all quantiles move together, so the interval keeps its width). A guard for new
        workloads unlike any in training; 0 turns it off.
    reg_lambda : float
        L2 regularization of leaf values.
    max_bin : int
        Histogram bins per feature.
    quantiles : tuple of float
        Quantiles to learn, sorted, containing 0.5 (``predict`` returns that one).
    offset_feature : str or None
        A feature holding a first estimate of the slowdown; where present (and positive), its log is the
        starting point of every quantile (XGBoost's base margin) and the trees learn only the correction.
        ``"auto"`` (default): the offset column of ``structure`` that ``PairFeaturizer`` builds
        (``pair_offset_probe`` or ``pair_offset_structured``), else the job's slowdown next to the profiler's
        probe, Bubble-Up's sensitivity (Mars et al., MICRO'11): on the reference CPU campaign the probe cut
        the error on a workload never seen from 20.8% to 4.6% MAPE, because trees cannot extrapolate a level
        from a handful of training workloads. Rows without it (NaN) start from 0. None turns it off.
    n_jobs : int or None
        Threads for XGBoost, with scikit-learn's meaning: None is 1, -1 is every core. One thread is the
        default because the quantile objective synchronizes threads after every tree, which on a few
        thousand rows (and on a CPU shared with other jobs) costs more than it gains.
    random_state : int
        Seed of the row and column sampling.

    Attributes
    ----------
    booster_ : xgboost.Booster
        The fitted model.
    feature_names_in_ : ndarray of str
        Feature names seen in ``fit`` (``x0, x1, ...`` when fitted on an array).
    n_features_in_ : int
    quantiles_ : ndarray of float
    prior_ : float
        Median log slowdown of the training rows, after the offset (what ``prior_weight`` pulls toward).
    offset_index_ : int or None
        Column of ``offset_feature`` in ``feature_names_in_`` (None when the features do not include it).
    training_summary_ : dict
        What the model was trained on, e.g. ``{"rows": 1952, "pairs": 976, "devices": ["k80"], ...}``.
    featurizer_ : PairFeaturizer or None
        The fitted featurizer that built the training features (``fit(..., featurizer=...)``): prediction
        builds features with the same state. None for a model fitted on features built elsewhere.
    calibration_ : ConformalCalibration or None
        Conformal corrections of p10/p90 from grouped out-of-fold residuals (``conformal.calibrate_model``),
        pooled and per device; ``predict_quantiles`` applies level 0 (the rows' devices' corrections when it is
        given them). None (``fit`` alone) leaves the raw quantiles.
    card_ : dict or None
        The model card (``capacity.model_card``) when fitted through ``train_model``; saved in the sidecar.
    shift_ : WorkloadShift or None
        Corrections for workloads from their own measured pairs (``suggest.refit_on_pairs``), applied by the
        table-level functions that know each row's workloads (``predict_pairs``, ``explain_pair``), not by
        ``predict``/``predict_quantiles``, which see features only.
    """

    def __init__(
        self,
        n_estimators: int = 60,
        max_depth: int = 3,
        learning_rate: float = 0.15,
        subsample: float = 0.8,
        colsample_bytree: float = 0.8,
        min_child_weight: float = 30.0,
        reg_lambda: float = 1.0,
        structure: str = "trees",
        monotone: bool = True,
        prior_weight: float = 0.0,
        max_bin: int = 256,
        quantiles: tuple[float, ...] = (0.1, 0.5, 0.9),
        offset_feature: str | None = AUTO_OFFSET,
        n_jobs: int | None = None,
        random_state: int = 0,
    ) -> None:
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.min_child_weight = min_child_weight
        self.reg_lambda = reg_lambda
        self.structure = structure
        self.monotone = monotone
        self.prior_weight = prior_weight
        self.max_bin = max_bin
        self.quantiles = quantiles
        self.offset_feature = offset_feature
        self.n_jobs = n_jobs
        self.random_state = random_state

    # ---- fitting -------------------------------------------------------------------------------------
    def fit(
        self,
        X,
        y,
        summary: dict | None = None,
        featurizer: PairFeaturizer | None = None,
        sample_weight=None,
    ) -> SlowdownRegressor:
        """Fit on pair features ``X`` and measured slowdowns ``y`` (positive); return ``self``.

        ``sample_weight`` (one per row, default 1) weighs each row, e.g. by its measurement's precision
        (``featurizer.row_weights``). ``summary`` is stored as ``training_summary_`` (and in the saved
        with the model, so that prediction builds its features with the training state.
        with the model, so that prediction builds its features with the training state.

        Raises
        ------
        ModelSchemaError
            The columns of ``X`` are not the features ``featurizer`` builds (the message lists them).
        """
        xgb = xgboost_module()
        quantiles = self._check_params()
        names = feature_names_of(X)
        if featurizer is not None:
            expected = list(featurizer.get_feature_names_out())
            check_feature_names(names, expected, what="X and the featurizer", ordered=True)
        data = as_matrix(X, "X")
        target = np.asarray(y, dtype=np.float64).ravel()
        if target.shape[0] != data.shape[0]:
            raise SchemaError(f"X has {data.shape[0]} rows but y has {target.shape[0]}; they must match")
        if data.shape[0] == 0:
            raise SchemaError("no training rows: the pairs table holds no measured pair with status 'ok'")
        bad = ~np.isfinite(target) | (target <= 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise SchemaError(
                f"slowdowns must be positive finite numbers, got {target[i]!r} at row {i}; "
                "drop failed measurements before training"
            )
        weight = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64).ravel()
        if weight is not None and (weight.shape[0] != data.shape[0] or not np.all(np.isfinite(weight) & (weight > 0))):
            raise SchemaError(
                f"sample_weight must hold one positive finite weight per row ({data.shape[0]}), got "
                f"{weight.shape[0]} values, min {np.nanmin(weight) if weight.size else 'none'}"
            )
        trees = self.structure == "trees"
        params = {
            "objective": "reg:quantileerror",
            "quantile_alpha": quantiles,
            "tree_method": "hist",
            "max_depth": int(self.max_depth),
            # Without trees one round of one leaf per quantile at full step is the weighted quantile of the
            # residuals around the offset (XGBoost fits quantile leaves exactly), so more rounds add nothing.
            "eta": float(self.learning_rate) if trees else 1.0,
            "subsample": float(self.subsample) if trees else 1.0,
            "colsample_bytree": float(self.colsample_bytree),
            "min_child_weight": float(self.min_child_weight) if trees else NO_SPLIT,
            "lambda": float(self.reg_lambda),
            "max_bin": int(self.max_bin),
            "seed": int(self.random_state),
        }
        if self.monotone:
            signs = monotone_signs(names)
            if any(signs):
                params["monotone_constraints"] = "(" + ",".join(str(v) for v in signs) + ")"
        params["nthread"] = self._threads()
        self.quantiles_ = quantiles
        self.offset_index_ = _offset_index(names, self.offset_feature, self.structure)
        offset, margin = self._offset(data)
        dtrain = xgb.QuantileDMatrix(
            data,
            label=np.log(target),
            weight=weight,
            base_margin=margin,
            feature_names=list(names),
            max_bin=int(self.max_bin),
            nthread=self._threads(),
        )
        self.booster_ = xgb.train(params, dtrain, num_boost_round=int(self.n_estimators) if trees else 1)
        self.feature_names_in_ = np.asarray(names, dtype=object)
        self.n_features_in_ = len(names)
        self.prior_ = float(np.median(np.log(target) - (0.0 if offset is None else offset)))
        self.training_summary_ = {**(summary or {}), "rows": int(data.shape[0])}
        self.featurizer_ = featurizer
        self.calibration_ = None
        self.shift_ = None
        self.card_ = None
        return self

    def _threads(self) -> int:
        if self.n_jobs is None:
            return 1
        if int(self.n_jobs) < 0:
            return max(1, (os.cpu_count() or 1) + 1 + int(self.n_jobs))
        return max(1, int(self.n_jobs))

    def _check_params(self) -> np.ndarray:
        q = np.asarray(self.quantiles, dtype=np.float64).ravel()
        if q.size == 0 or np.any((q <= 0) | (q >= 1)) or not np.any(np.isclose(q, 0.5)):
            raise ConfigError(
                f"quantiles must lie strictly between 0 and 1 and include 0.5, got {tuple(self.quantiles)}"
            )
        for name, low, high in (("subsample", 0, 1), ("colsample_bytree", 0, 1), ("learning_rate", 0, 1)):
            value = getattr(self, name)
            if not (low < value <= high):
                raise ConfigError(f"{name} must be in ({low}, {high}], got {value!r}")
        if not (0.0 <= float(self.prior_weight) < 1.0):
            raise ConfigError(f"prior_weight must be in [0, 1), got {self.prior_weight!r}")
        for name in ("n_estimators", "max_depth"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.structure not in STRUCTURES:
            raise ConfigError(
                f"structure must be one of {', '.join(STRUCTURES)}, got {self.structure!r}; 'auto' is chosen by "
                "train_model / cross_validate, which fit one of these"
            )
        return np.sort(q)

    # ---- predicting ----------------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "booster_"):
            raise NotFittedError(
                f"this {type(self).__name__} is not fitted yet; call fit(X, y) first, or load a saved model "
                "with SlowdownRegressor.load(path)"
            )

    def get_featurizer(self) -> PairFeaturizer:
        """Return the featurizer that builds this model's features from profiles and pairs: the fitted
        ``featurizer_``, or for a model fitted on features built elsewhere one without fitted state
        (``PairFeaturizer.from_feature_names``)."""
        self._check_fitted()
        featurizer = getattr(self, "featurizer_", None)
        return featurizer if featurizer is not None else PairFeaturizer.from_feature_names(self.feature_names_in_)

    def _validated(self, X) -> np.ndarray:
        self._check_fitted()
        if isinstance(X, pd.DataFrame):
            check_feature_names(list(X.columns), list(self.feature_names_in_))
            X = X[list(self.feature_names_in_)]
        data = as_matrix(X, "X")
        if data.shape[1] != self.n_features_in_:
            raise ModelSchemaError(
                f"X has {data.shape[1]} features but the model was fitted on {self.n_features_in_}; "
                "build X with the same pair features (pass a DataFrame to have the names checked)"
            )
        return data

    def _offset(self, data: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Return the log of the offset feature per row (0 where it is missing or not positive) and the same
        as XGBoost's base margin, one column per quantile; ``(None, None)`` for a model without an offset."""
        if self.offset_index_ is None:
            return None, None
        col = np.asarray(data[:, self.offset_index_], dtype=np.float64)
        offset = np.log(np.where(np.isfinite(col) & (col > 0), col, 1.0))
        return offset, np.repeat(offset[:, None], self.quantiles_.shape[0], axis=1)

    def _raw_quantiles(self, data: np.ndarray, devices=None) -> np.ndarray:
        # n_jobs may have changed through set_params, and a loaded booster knows no thread count.
        self.booster_.set_param({"nthread": self._threads()})
        offset, margin = self._offset(data)
        raw = np.asarray(self.booster_.inplace_predict(data, validate_features=False, base_margin=margin))
        raw = raw.reshape(data.shape[0], -1)
        # Quantile heads are fitted independently and may cross; sorting restores p10 <= p50 <= p90.
        out = _sorted_rows(raw)
        w = float(self.prior_weight)
        if w > 0:
            mid = out[:, [int(np.argmin(np.abs(self.quantiles_ - 0.5)))]]
            resid = mid - (0.0 if offset is None else offset[:, None])
            out += w * (self.prior_ - resid)
        calibration = getattr(self, "calibration_", None)
        if calibration is not None:
            calibration.apply(out, devices=None if devices is None else np.asarray(devices))
        return out

    def predict_matrix(self, data: np.ndarray, devices=None) -> np.ndarray:
        """Return ``predict_quantiles`` of a float32 matrix whose columns are ``feature_names_in_``, fast.

        For batch callers that build the features themselves (``predict_pairs``): no name check, no copy
        of a C-contiguous float32 input. ``devices`` as in ``predict_quantiles``.
        """
        self._check_fitted()
        data = np.ascontiguousarray(data, dtype=np.float32)
        if data.ndim != 2 or data.shape[1] != self.n_features_in_:
            raise ModelSchemaError(
                f"expected a matrix of {self.n_features_in_} feature columns, got shape {data.shape}"
            )
        return np.exp(self._raw_quantiles(data, devices))

    def predict(self, X) -> np.ndarray:
        """Return the median (p50) predicted slowdown of each row."""
        data = self._validated(X)
        mid = int(np.argmin(np.abs(self.quantiles_ - 0.5)))
        return np.exp(self._raw_quantiles(data)[:, mid])

    def score(self, X, y) -> float:
        """Return R^2 of the p50 predictions of ``X`` against slowdowns ``y`` (scikit-learn's regressor score)."""
        from sklearn.metrics import r2_score

        return float(r2_score(np.asarray(y, dtype=np.float64), self.predict(X)))

    def predict_quantiles(self, X, devices=None) -> np.ndarray:
        """Return predicted slowdowns at ``quantiles_`` as an array of shape (n, n_quantiles), sorted per row.

        ``devices`` (one device name per row) lets the calibration use each device's own corrections
        (``ConformalCalibration``); the features do not name the device, so without it every row takes the
        pooled ones. The median never depends on it. Example: ``array([[1.21, 1.38, 1.66]])`` for one row
        with the default (p10, p50, p90).
        """
        data = self._validated(X)
        return np.exp(self._raw_quantiles(data, devices))

    def explain(self, X_row) -> pd.Series:
        """Return per-feature contributions to the p50 log slowdown of one row, largest magnitude first.

        Contributions add up (with ``bias`` and, for a model with an offset, the term
        ``offset: log <offset_feature>``) to the predicted log slowdown, so ``exp(contribution)`` is the
        factor a feature multiplies the slowdown by. Example::

            self_iter_time_ms       0.21
            partner_f_busy_frac     0.12
            bias                    0.45
            ...
        """
        rows = self.explain_rows(X_row)
        if rows.shape[0] != 1:
            raise ConfigError(f"explain() takes one row, got {rows.shape[0]}; select the row to explain")
        series = rows.iloc[0].rename(None)
        return series.reindex(series.abs().sort_values(ascending=False, kind="stable").index)

    def explain_rows(self, X) -> pd.DataFrame:
        """Return ``explain``'s contributions of every row of ``X`` at once (terms as columns in model order:
        features, ``bias``, then the offset term if any): one XGBoost call for many rows."""
        return self._contributions(self._validated(X))

    def _contributions(self, data: np.ndarray) -> pd.DataFrame:
        xgb = xgboost_module()
        offset, margin = self._offset(data)
        contribs = self.booster_.predict(
            xgb.DMatrix(data, feature_names=list(self.feature_names_in_), base_margin=margin),
            pred_contribs=True,
            validate_features=False,
        )
        contribs = np.asarray(contribs)
        if contribs.ndim == 3:  # (rows, outputs, features + 1): keep the median head
            contribs = contribs[:, int(np.argmin(np.abs(self.quantiles_ - 0.5))), :]
        values = np.array(contribs, dtype=np.float64).reshape(data.shape[0], -1)
        index = [*self.feature_names_in_, "bias"]
        if offset is not None:  # the offset's log arrives inside the bias: show it as its own term
            values[:, -1] -= offset
        w = float(self.prior_weight)
        if w > 0:  # the pull toward the prior scales the trees' contributions and moves the bias
            values = (1.0 - w) * values
            values[:, -1] += w * self.prior_
        if offset is not None:
            values = np.column_stack([values, offset])
            index.append(OFFSET_TERM + str(self.feature_names_in_[self.offset_index_]))
        return pd.DataFrame(values, columns=index, dtype=np.float64)

    # ---- persistence ---------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Save as XGBoost JSON at ``path`` plus a sidecar JSON next to it; return the sidecar path.

        The sidecar holds ``schema_version``, ``feature_names``, ``quantiles``, ``prior``, ``params``,
        ``training`` (devices, workloads, rows), ``featurizer`` (``PairFeaturizer.to_dict``, or null for
        a model fitted without one), ``calibration`` (``ConformalCalibration.to_dict`` or null), ``shift``
        (``WorkloadShift.to_dict`` or null) and ``card`` (the model card, or null). Never a pickle: both files
        are plain JSON.
        """
        self._check_fitted()
        params = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.get_params().items()}
        payload = {
            "schema_version": MODEL_SCHEMA_VERSION,
            "model_file": Path(path).name,
            "target": "log slowdown",
            "feature_names": [str(n) for n in self.feature_names_in_],
            "quantiles": [float(q) for q in self.quantiles_],
            "prior": float(self.prior_),
            "params": params,
            "training": self.training_summary_,
            "featurizer": None if self.featurizer_ is None else self.featurizer_.to_dict(),
            "calibration": None if self.calibration_ is None else self.calibration_.to_dict(),
            "shift": None if self.shift_ is None else self.shift_.to_dict(),
            "card": getattr(self, "card_", None),
        }
        return write_model_files(self.booster_, payload, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> SlowdownRegressor:
        """Load a model saved by ``save``; raise ``ModelSchemaError`` if the files do not fit together.

        Raises
        ------
        ModelSchemaError
            Missing sidecar, another schema version, or feature names that differ between the two files or
            from the featurizer's (the message lists the unseen and missing names).
        """
        booster, meta = read_model_files(path, MODEL_SCHEMA_VERSION, xgboost_module())
        side = sidecar_path(path)
        names = [str(n) for n in meta.get("feature_names", [])]
        check_feature_names(list(booster.feature_names or []), names, what=f"{Path(path).name} and {side.name}")
        featurizer = None
        if meta.get("featurizer") is not None:
            featurizer = PairFeaturizer.from_dict(meta["featurizer"])
            got = list(featurizer.get_feature_names_out())
            check_feature_names(got, names, what=f"{side.name}'s featurizer", ordered=True)
        params = {k: v for k, v in meta.get("params", {}).items() if k in cls._get_param_names()}
        if "quantiles" in params:
            params["quantiles"] = tuple(params["quantiles"])
        model = cls(**params)
        model.booster_ = booster
        model.feature_names_in_ = np.asarray(names, dtype=object)
        model.n_features_in_ = len(names)
        model.offset_index_ = _offset_index(names, model.offset_feature, model.structure)
        model.quantiles_ = np.asarray(
            meta.get("quantiles", params.get("quantiles", (0.1, 0.5, 0.9))), dtype=np.float64
        )
        model.prior_ = float(meta.get("prior", 0.0))
        model.training_summary_ = meta.get("training", {})
        model.featurizer_ = featurizer
        calibration, shift = meta.get("calibration"), meta.get("shift")
        model.calibration_ = None if calibration is None else ConformalCalibration.from_dict(calibration)
        model.shift_ = None if shift is None else WorkloadShift.from_dict(shift)
        model.card_ = meta.get("card")
        return model


def _offset_index(names: Sequence[str], offset_feature: str | None, structure: str = "trees") -> int | None:
    """Column of the offset in ``names``; None without one (or when the features lack it).

    ``"auto"`` takes the structure's offset column where the features have it, else ``PROBE_OFFSET``.
    """
    names = list(names)
    if offset_feature == AUTO_OFFSET:
        for candidate in (OFFSET_OF.get(structure), PROBE_OFFSET):
            if candidate in names:
                return names.index(candidate)
        return None
    return names.index(offset_feature) if offset_feature and offset_feature in names else None


def three_quantiles(q: np.ndarray) -> np.ndarray:
    """Return the p10, p50 and p90 columns of predicted quantiles ``q``: for a model with other quantiles, its
    lowest, middle and highest (``[[1.1, 1.3, 1.6]]`` from ``[[1.1, 1.3, 1.6]]``; columns 0, 2, 4 of five)."""
    return q[:, [0, q.shape[1] // 2, q.shape[1] - 1]]


def _sorted_rows(values: np.ndarray) -> np.ndarray:
    """Return ``np.sort(values, axis=1)`` as float64; three columns (the usual quantiles) take a fast path."""
    if values.shape[1] != 3:
        return np.sort(np.asarray(values, dtype=np.float64), axis=1)
    a, b, c = values[:, 0], values[:, 1], values[:, 2]
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    out = np.empty(values.shape, dtype=np.float64)
    out[:, 0] = np.minimum(lo, c)
    out[:, 1] = np.maximum(lo, np.minimum(hi, c))
    out[:, 2] = np.maximum(hi, c)
    return out
