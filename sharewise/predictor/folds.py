"""Resampling of ordered pair rows: grouped folds, the calibration's folds, fold-fitted features, reveals.

Folds: for each group ``g`` (a workload, a model family or a device), the training rows are the ordered
rows in which neither self nor partner belongs to ``g``; the test rows are those whose *self* belongs to
``g``. Every ordered row is therefore scored exactly once, in the fold where its own workload is unseen, and
each number answers the user's question "how slow will a new model run next to my other jobs". Both
directions of a held-out pair are scored (each in the fold of its own self), so the "is sharing worth it"
decision, which needs both slowdowns, is scored on every pair.

These are the primitives that the procedures above them share (scikit-learn's ``model_selection`` splitters):
the conformal calibration (``conformal``), the cross-validation (``evaluation``), the out-of-fold predictions
(``api``) and the budgeted replay (``budget``). Nothing here fits a model, except the featurizer of a fold.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sharewise.errors import ConfigError
from sharewise.predictor.choices import GROUP_BY
from sharewise.predictor.featurizer import PairFeaturizer
from sharewise.predictor.pair_features import PairRows

#: At most this many folds of whole groups in the calibration (a dataset of 300 workloads does not cost 300 fits).
MAX_CALIBRATION_FOLDS = 10


@dataclass(frozen=True)
class Fold:
    """One held-out group: the row indices to train on and to score."""

    group: str
    train: np.ndarray
    test: np.ndarray


def row_groups(meta: pd.DataFrame, group_by: str) -> tuple[np.ndarray, np.ndarray]:
    """Return the group of self and of the partner for every ordered row."""
    if group_by == "workload":
        cols = ("self_workload", "partner_workload")
    elif group_by == "family":
        cols = ("self_family", "partner_family")
    elif group_by == "device":
        cols = ("device_name", "device_name")
    else:
        raise ConfigError(f"group_by must be one of {list(GROUP_BY)}, got {group_by!r}")
    return meta[cols[0]].astype(str).to_numpy(), meta[cols[1]].astype(str).to_numpy()


def grouped_folds(meta: pd.DataFrame, group_by: str) -> list[Fold]:
    """Split ordered rows into one fold per group; no training row involves the fold's group.

    Raises
    ------
    ConfigError
        Fewer than two groups, or a group that every measured pair involves (nothing left to train on).
    """
    self_g, partner_g = row_groups(meta, group_by)
    groups = sorted(set(self_g))
    if len(groups) < 2:
        raise ConfigError(
            f"grouped evaluation by {group_by} needs at least 2 {group_by}s, the data has {len(groups)}; "
            "measure more workloads or choose another --group-by"
        )
    folds = []
    for g in groups:
        train = np.flatnonzero((self_g != g) & (partner_g != g))
        if train.size == 0:
            raise ConfigError(
                f"every measured pair involves {group_by} {g!r}, so holding it out leaves nothing to "
                "train on; measure pairs among the other workloads too"
            )
        folds.append(Fold(group=g, train=train, test=np.flatnonzero(self_g == g)))
    return folds


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


def fold_features(
    data: PairRows, train: np.ndarray, features: str = "physical", partner_effect: bool = True
) -> tuple[PairFeaturizer, pd.DataFrame, pd.DataFrame]:
    """Fit a ``PairFeaturizer`` on rows ``train`` of ``data``; return it, the training rows' features (in
    ``train`` order) and every row's features as rows to predict (index them with the test rows)."""
    featurizer = PairFeaturizer(features=features, partner_effect=partner_effect)
    X_fit = featurizer.fit_transform(data.take(train))
    return featurizer, X_fit, featurizer.transform(data)


def subset(rows: PairRows, index: np.ndarray) -> PairRows:
    """Return rows ``index`` of ``rows`` as a table of their own (labels 0..n-1, as ``ordered_rows`` gives)."""
    part = rows.take(index)
    return PairRows(X=part.X.reset_index(drop=True), y=part.y, meta=part.meta.reset_index(drop=True))


# ---- reveals (shared by the calibration replay and the budgeted evaluation) ------------------------------


def reveal_candidates(meta: pd.DataFrame, group_by: str) -> np.ndarray:
    """Return the rows a new workload may reveal: itself as self, a partner outside its own group.

    A user measures the new job next to jobs the cluster knows; pairs among new jobs are not revealed.
    """
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
