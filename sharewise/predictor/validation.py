"""Input checks of the regressor: feature names, and numeric feature matrices."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from sharewise.errors import ModelSchemaError, SchemaError


def check_feature_names(
    got: Sequence[str], expected: Sequence[str], what: str = "X", ordered: bool = False
) -> None:
    """Raise ``ModelSchemaError`` listing unseen and missing names unless ``got`` matches ``expected``.

    With ``ordered`` the names must also come in the same order (for matrices used without names).
    """
    got_set, exp_set = set(got), set(expected)
    if got_set == exp_set and len(got) == len(expected):
        if ordered and list(got) != list(expected):
            raise ModelSchemaError(
                f"feature names of {what} come in another order than the model's; build the features with "
                "the model's featurizer (featurizer_.transform), which keeps its order"
            )
        return
    unseen = sorted(got_set - exp_set)
    missing = sorted(exp_set - got_set)
    parts = []
    if unseen:
        parts.append(f"unseen at fit time: {unseen}")
    if missing:
        parts.append(f"missing: {missing}")
    if not parts:
        parts.append("duplicate names")
    raise ModelSchemaError(
        f"feature names of {what} differ from those the model was fitted on ({'; '.join(parts)}); "
        "build the features from profiles with the same f_* columns, or retrain on this data"
    )


def feature_names_of(X) -> list[str]:
    """Return the feature names of ``X``: a frame's columns, ``["x0", "x1", ...]`` for an array.

    Raises
    ------
    SchemaError
        Duplicate column names, or an array that is not 2-dimensional.
    """
    if isinstance(X, pd.DataFrame):
        names = [str(c) for c in X.columns]
        if len(set(names)) != len(names):
            raise SchemaError("X has duplicate column names; each feature needs its own name")
        return names
    shape = np.shape(X)
    if len(shape) != 2:
        raise SchemaError(f"X must be 2-dimensional (rows, features), got shape {shape}")
    return [f"x{i}" for i in range(shape[1])]


def as_matrix(X, what: str) -> np.ndarray:
    """Return ``X`` (frame or array) as a C-contiguous float32 matrix; NaN marks a missing value.

    Raises
    ------
    SchemaError
        Non-numeric values, not 2-dimensional, or an infinite value (``what`` names ``X`` in the message).
    """
    try:
        data = np.asarray(
            X.to_numpy(dtype=np.float32, na_value=np.nan) if isinstance(X, pd.DataFrame) else X,
            dtype=np.float32,
        )
    except (TypeError, ValueError):
        raise SchemaError(f"{what} must hold numbers only (NaN for missing values)") from None
    if data.ndim != 2:
        raise SchemaError(f"{what} must be 2-dimensional (rows, features), got shape {data.shape}")
    if np.isinf(data).any():
        col = int(np.argmax(np.isinf(data).any(axis=0)))
        raise SchemaError(f"{what} holds an infinite value in column {col}; use NaN for a missing value")
    return np.ascontiguousarray(data)
