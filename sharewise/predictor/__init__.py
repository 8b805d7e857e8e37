"""Predictor: slowdown of a job next to a partner from solo-profile features (XGBoost), and its evaluation.

Importing this package does not import torch or XGBoost; XGBoost loads on the first fit or load.
"""

from sharewise.predictor.api import (
    PREDICTION_COLUMNS,
    explain_pair,
    model_rows,
    out_of_fold_predictions,
    predict_pairs,
    train_model,
)
from sharewise.predictor.evaluation import BASELINES, GROUP_BY, cross_validate, evaluate, grouped_folds
from sharewise.predictor.features import ordered_rows, pair_feature_matrix, pair_feature_names
from sharewise.predictor.model import MODEL_SCHEMA_VERSION, SlowdownRegressor

__all__ = [
    "BASELINES",
    "GROUP_BY",
    "MODEL_SCHEMA_VERSION",
    "PREDICTION_COLUMNS",
    "SlowdownRegressor",
    "cross_validate",
    "evaluate",
    "explain_pair",
    "model_rows",
    "grouped_folds",
    "ordered_rows",
    "out_of_fold_predictions",
    "pair_feature_matrix",
    "pair_feature_names",
    "predict_pairs",
    "train_model",
]
