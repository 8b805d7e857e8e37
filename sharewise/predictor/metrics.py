"""Scores of predicted slowdowns against measured ones: errors, rank correlation, the share-or-not decision."""

from __future__ import annotations

import numpy as np
import pandas as pd


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
