"""Matrix completion of normalized throughput (Gavel's estimator), the budgeted evaluation's outside reference.

Gavel (Narayanan et al., OSDI'20, ``scheduler/throughput_estimator.py``) measures a new job type against a few
others and fills in the rest of its normalized-throughput matrix by low-rank matrix completion. Here the
matrix has one row per workload (as self) and one column per (partner, device): entry = co-located over
isolated throughput of self next to partner on that device = 1 / slowdown. Columns are centred on their
observed means (a row with no entry completes to the partners' means), and the rest is completed by
SoftImpute (Mazumder, Hastie and Tibshirani, JMLR 2010): iterate ``Z <- S_lambda(P_obs(M) + P_miss(Z))``
with ``S_lambda`` the singular-value soft threshold, truncated to ``SOFT_IMPUTE_RANK``.

Why this implementation and not a package: ``matrix-completion`` 0.0.2 (what Gavel imports) imports cvxpy at
package import (nine more wheels) and starts from the global ``np.random`` state, and ``fancyimpute`` 0.7.0
fails on scikit-learn 1.9 (``check_array(force_all_finite=...)`` is gone). SoftImpute is twenty lines of
numpy and deterministic. Rank 10 follows the issue's reference numbers; ``SOFT_IMPUTE_LAMBDA`` is the best of
{0.01, 0.03, 0.05, 0.1, 0.5, 1, 2} on the Gavel family folds: chosen in the baseline's favour.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SOFT_IMPUTE_RANK = 10
SOFT_IMPUTE_LAMBDA = 0.05
SOFT_IMPUTE_MAX_ITER = 300
SOFT_IMPUTE_TOL = 1e-6


def soft_impute(
    values: np.ndarray, observed: np.ndarray, lam: float = SOFT_IMPUTE_LAMBDA, rank: int = SOFT_IMPUTE_RANK
) -> np.ndarray:
    """Return the SoftImpute completion of ``values`` from its ``observed`` entries (boolean mask).

    Example: a rank-1 matrix ``np.outer([1, 2, 3], [1, 1, 2])`` with one entry hidden is completed close to
    the hidden value for a small ``lam``.
    """
    observed = np.asarray(observed, dtype=bool)
    filled = np.where(observed, values, 0.0)
    z = np.zeros_like(filled, dtype=np.float64)
    for _ in range(SOFT_IMPUTE_MAX_ITER):
        u, s, vt = np.linalg.svd(np.where(observed, filled, z), full_matrices=False)
        s = np.maximum(s - lam, 0.0)[:rank]
        new = (u[:, : s.size] * s) @ vt[: s.size]
        done = np.linalg.norm(new - z) <= SOFT_IMPUTE_TOL * max(1.0, np.linalg.norm(z))
        z = new
        if done:
            break
    return z


def complete_slowdowns(known: pd.DataFrame, y: np.ndarray, query: pd.DataFrame) -> np.ndarray:
    """Predict the slowdown of every ``query`` row from the measured ``known`` rows by matrix completion.

    ``known`` and ``query`` have ``self_workload, partner_workload, device_name`` (``PairRows.meta``); ``y``
    holds the measured slowdowns of ``known``. Returns one slowdown per query row.
    """
    rows = pd.Index(sorted(set(known["self_workload"].astype(str)) | set(query["self_workload"].astype(str))))
    cols_of = lambda m: pd.MultiIndex.from_arrays(  # noqa: E731 - one key builder for both tables
        [m["partner_workload"].astype(str).to_numpy(), m["device_name"].astype(str).to_numpy()]
    )
    columns = cols_of(known).unique().union(cols_of(query).unique())
    values = np.zeros((rows.size, columns.size))
    observed = np.zeros(values.shape, dtype=bool)
    i = rows.get_indexer(known["self_workload"].astype(str))
    j = columns.get_indexer(cols_of(known))
    values[i, j] = 1.0 / np.asarray(y, dtype=np.float64)
    observed[i, j] = True
    counts = observed.sum(axis=0)
    overall = float(values[observed].mean()) if observed.any() else 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        center = np.where(counts > 0, (values * observed).sum(axis=0) / counts, overall)
    completed = soft_impute(values - center, observed) + center
    qi = rows.get_indexer(query["self_workload"].astype(str))
    qj = columns.get_indexer(cols_of(query))
    speed = np.clip(completed[qi, qj], 0.02, max(1.0, float(values[observed].max()) if observed.any() else 1.0))
    return 1.0 / speed
