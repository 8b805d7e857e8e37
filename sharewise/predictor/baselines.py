"""Simple baselines the slowdown model is scored next to: the training median, ridge regression, summed utilization.

Each has ``fit(X, y, meta)`` and ``predict(X, meta)`` on the same pair features and folds as the model. A
baseline that needs columns a dataset lacks says so through ``unusable(X)`` (a reason, or None): the
evaluation then reports it as not applicable (n/a) instead of scoring a stand-in for what it needs.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pandas as pd

from sharewise.predictor.pair_features import job_flop_rate


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
    of them take turns: slowdown 2). The fallbacks fill rows of a dataset that measures utilization; a
    dataset with no utilization column at all (Gavel's) cannot use this baseline (``unusable``).
    """

    @staticmethod
    def unusable(X: pd.DataFrame) -> str | None:
        """Return why the baseline cannot run on features ``X`` (no utilization column), else None."""
        if any(_is_utilization(c) for c in X.columns):
            return None
        return f"needs a utilization column ({', '.join(UTILIZATION_COLUMNS)}); the data has none"

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


#: Profile columns ``UtilSumBaseline`` reads as a job's utilization (``*`` matches NVML's mean and tails).
UTILIZATION_COLUMNS = ("f_busy_frac", "f_nvml_sm_util*")


def _is_utilization(column: str) -> bool:
    name = column.removeprefix("self_").removeprefix("partner_")
    return name == "f_busy_frac" or (name.startswith("f_nvml_") and "sm_util" in name)


def unusable_reason(baseline: object, X: pd.DataFrame) -> str | None:
    """Return why ``baseline`` cannot be scored on features ``X`` (its ``unusable``), or None when it can."""
    check = getattr(baseline, "unusable", None)
    return check(X) if check is not None else None


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
