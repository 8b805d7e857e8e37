"""Predictor: slowdown of a job next to a partner from solo-profile features (XGBoost), and its evaluation.

Importing this package imports nothing heavy: each public name is loaded on first use (PEP 562), so the CLI
can read the option names of ``sharewise.predictor.choices`` without scikit-learn or XGBoost, and XGBoost
loads on the first fit or load.
"""

from __future__ import annotations

import importlib

# Public name -> the module that defines it (one table: ``__all__``, ``__dir__`` and ``__getattr__`` read it).
_EXPORTS = {
    "BASELINES": "baselines",
    "BUDGET_STRATEGIES": "choices",
    "FEATURE_SETS": "choices",
    "GROUP_BY": "choices",
    "MODEL_SCHEMA_VERSION": "model",
    "PREDICTION_COLUMNS": "api",
    "ConformalCalibration": "conformal",
    "PairFeaturizer": "featurizer",
    "SlowdownRegressor": "model",
    "Suggestion": "suggest",
    "WorkloadShift": "shift",
    "calibrate_model": "conformal",
    "cross_validate": "evaluation",
    "evaluate": "evaluation",
    "evaluate_budget": "budget",
    "explain_pair": "api",
    "grouped_folds": "evaluation",
    "memory_fit": "memory",
    "model_rows": "api",
    "ordered_rows": "profile_join",
    "out_of_fold_predictions": "api",
    "pair_feature_matrix": "pair_features",
    "pair_feature_names": "pair_features",
    "predict_pairs": "api",
    "refit_on_pairs": "suggest",
    "suggest_pairs": "suggest",
    "train_model": "api",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
