"""Predictor: slowdown of a job next to a partner from solo-profile features (XGBoost), and its evaluation.

Importing this package imports nothing heavy: each public name is loaded on first use (PEP 562), so the CLI
can read the option names of ``sharewise.predictor.choices`` without scikit-learn or XGBoost, and XGBoost
loads on the first fit or load.

Layers, as scikit-learn's estimator < model selection < calibration; a module imports only modules listed before
it, at the top of the file (``tests/project/test_import_layers.py`` fails on any import cycle):

1. ``choices``, ``params``, ``validation``, ``memory``, ``completion``: no predictor imports;
2. features: ``pair_features`` < ``feature_state`` < ``profile_join`` < ``featurizer``; ``baselines``;
3. value types: ``calibration`` (``ConformalCalibration``), ``shift`` (``WorkloadShift``); ``persistence`` (files);
4. the estimator: ``model`` (``SlowdownRegressor``, which saves and loads its own calibration and shift);
5. model selection: ``folds`` (resampling and reveals), ``metrics``;
6. the conformal procedure: ``conformal`` (fits a ``ConformalCalibration`` on out-of-fold residuals);
7. workflows: ``api`` < ``suggest`` < ``budget``; ``evaluation`` < ``plots``.
"""

from __future__ import annotations

from sharewise.lazy import lazy_exports

# Public name -> the module that defines it (one table: ``__all__``, ``__dir__`` and ``__getattr__`` read it).
_EXPORTS = {
    "BASELINES": "baselines",
    "BUDGET_STRATEGIES": "choices",
    "FEATURE_SETS": "choices",
    "GROUP_BY": "choices",
    "MODEL_SCHEMA_VERSION": "model",
    "PREDICTION_COLUMNS": "api",
    "ConformalCalibration": "calibration",
    "PairFeaturizer": "featurizer",
    "SlowdownRegressor": "model",
    "Suggestion": "suggest",
    "WorkloadShift": "shift",
    "calibrate_model": "conformal",
    "cross_validate": "evaluation",
    "evaluate": "evaluation",
    "evaluate_budget": "budget",
    "explain_pair": "api",
    "grouped_folds": "folds",
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


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
