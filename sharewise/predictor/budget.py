"""Budgeted evaluation: replay "a new workload measures K of its pairs" on a complete dataset, per strategy.

Protocol (``evaluate_budget``), on the folds of ``folds.grouped_folds``: in the fold of group ``g``
every workload of ``g`` reveals ``K`` of its measured pairs, chosen by a strategy among its pairs with a
partner outside ``g`` (a user measures the new job next to jobs the cluster knows). The model trains on
the fold's training rows plus both directions of the revealed pairs, its shift (``WorkloadShift``) is
fitted on the revealed rows, and it is scored on the rest of the rows whose self is in ``g``. Every
strategy runs on the same folds; the calibration of each fold (``conformal.calibrate_rows``) comes from
its training rows only and is shared by the strategies. Strategies (``STRATEGIES``):

- ``active``: one pick per workload per round, the candidate with the highest ``suggest.pick_scores``
  (the device where the workload's level is least known, there its most typical partner), the shift
  refitted cheaply after every round from the first model's residuals;
- ``random``: seeded uniform picks;
- ``reference``: fixed reference partners, Gavel's "profile against reference models": the training
  workloads with the most measured pairs, in that order, each on every device before the next;
- ``matrix-completion``: Gavel's estimator, SoftImpute of the normalized-throughput matrix
  (``completion.complete_slowdowns``) from the training rows and the same reveals as ``random``.

At ``K = 0`` nothing is revealed and every model-based strategy scores the plain fold model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sharewise.errors import ConfigError
from sharewise.predictor.capacity import select_structure
from sharewise.predictor.choices import BUDGET_STRATEGIES
from sharewise.predictor.completion import complete_slowdowns
from sharewise.predictor.conformal import calibrate_rows
from sharewise.predictor.featurizer import row_weights
from sharewise.predictor.folds import Fold, fold_features, grouped_folds, reveal_candidates, revealed_pairs, subset
from sharewise.predictor.metrics import slowdown_metrics
from sharewise.predictor.model import SlowdownRegressor, three_quantiles
from sharewise.predictor.pair_features import PairRows
from sharewise.predictor.profile_join import ordered_rows
from sharewise.predictor.shift import WorkloadShift, shift_log_quantiles
from sharewise.predictor.suggest import DEFAULT_SHRINKAGE, pick_scores


@dataclass
class FoldContext:
    """What a strategy may look at in one fold: the rows, the held-out workloads' candidate rows, the first
    model's log quantiles of every row (``log_q``) and the row of each row's other direction (``reverse``)."""

    data: PairRows
    fold: Fold
    candidates: dict[str, np.ndarray]
    log_q: np.ndarray
    reverse: np.ndarray
    shrinkage: dict
    rng: np.random.Generator


def _random(ctx: FoldContext, k: int) -> dict[str, list[int]]:
    return {w: list(ctx.rng.permutation(rows)[:k]) for w, rows in ctx.candidates.items()}


def _reference(ctx: FoldContext, k: int) -> dict[str, list[int]]:
    meta = ctx.data.meta
    trained = meta.iloc[ctx.fold.train]
    measured = trained.groupby("self_workload").size()
    rank = {w: i for i, w in enumerate(sorted(measured.index, key=lambda w: (-measured[w], str(w))))}
    out = {}
    for w, rows in ctx.candidates.items():
        key = [(rank.get(meta["partner_workload"].iat[r], len(rank)), str(meta["device_name"].iat[r])) for r in rows]
        out[w] = [rows[i] for i in sorted(range(len(rows)), key=key.__getitem__)][:k]
    return out


def _active(ctx: FoldContext, k: int) -> dict[str, list[int]]:
    meta, log_y = ctx.data.meta, np.log(ctx.data.y)
    picks: dict[str, list[int]] = {w: [] for w in ctx.candidates}
    held = list(ctx.candidates)
    for _ in range(k):
        chosen = [r for rows in picks.values() for r in rows]
        both = revealed_pairs(meta, np.asarray(chosen, dtype=np.int64)) if chosen else np.empty(0, np.int64)
        shift = WorkloadShift.fit(log_y[both] - ctx.log_q[both, 1], meta.iloc[both], ctx.shrinkage, held)
        for w, rows in ctx.candidates.items():
            left = np.setdiff1d(rows, picks[w])
            if left.size == 0:
                continue
            mine = ctx.log_q[left] + shift.log_shift(meta.iloc[left])[:, None]
            other = ctx.reverse[left]
            theirs = ctx.log_q[other] + shift.log_shift(meta.iloc[other])[:, None]
            sd = shift.posterior_sd(meta["self_workload"].to_numpy()[left], meta["device_name"].to_numpy()[left])
            score = pick_scores(mine, theirs, sd, meta["device_name"].to_numpy()[left])[0]
            picks[w].append(int(left[int(np.argmax(score))]))
    return picks


#: Strategy name -> (how it picks the rows to reveal, the estimator that predicts the rest); the names are
#: ``choices.BUDGET_STRATEGIES`` (the CLI's list), which a test keeps equal to these keys.
STRATEGIES: dict[str, tuple[Callable[[FoldContext, int], dict[str, list[int]]], str]] = {
    "active": (_active, "model"),
    "random": (_random, "model"),
    "reference": (_reference, "model"),
    "matrix-completion": (_random, "completion"),
}


def reverse_rows(meta: pd.DataFrame) -> np.ndarray:
    """Return, for every row, the position of the other direction of its pair (itself when it has none)."""
    frame = pd.DataFrame({"pair": meta["pair_id"].to_numpy(), "dir": meta["direction"].to_numpy()})
    frame["pos"] = np.arange(len(frame))
    other = frame.assign(dir=1 - frame["dir"]).merge(frame, on=["pair", "dir"], how="left", suffixes=("", "_o"))
    return other["pos_o"].fillna(other["pos"]).to_numpy(np.int64)


def evaluate_budget(
    data: PairRows,
    group_by: str = "family",
    budgets: tuple[int, ...] = (1,),
    strategies: tuple[str, ...] = BUDGET_STRATEGIES,
    features: str = "physical",
    partner_effect: bool = True,
    calibrate: bool = True,
    seed: int = 0,
    structure: str = "auto",
    **params,
) -> dict:
    """Replay the budgeted protocol (module docstring) for every budget and strategy on the same folds.

    ``structure="auto"`` chooses each fold's structure on that fold's training rows alone
    (``capacity.select_structure``, as ``evaluation.cross_validate`` does); every fit weighs rows by their
    measurement's precision.

    Returns
    -------
    dict
        ``{K: {"strategies": {"active": {"n": 1800, "mape": 15.2, "mae": .., "decision_accuracy": ..,
        "coverage_p10_p90": 80.1, "mape_common": 16.0, "per_group": {"a3c": 20.1, ...}}, ...},
        "n_common": 1700}}``; ``mape_common`` is scored on the rows no strategy revealed at that K, and
        matrix completion has no interval (``coverage_p10_p90`` None).

    Raises
    ------
    ConfigError
        An unknown strategy or a negative budget.
    """
    unknown = sorted(set(strategies) - set(STRATEGIES))
    if unknown:
        raise ConfigError(f"unknown strategy {unknown}; known strategies: {sorted(STRATEGIES)}")
    if any(int(k) < 0 for k in budgets):
        raise ConfigError(f"budgets must be non-negative numbers of pair runs, got {list(budgets)}")
    budgets = tuple(sorted({int(k) for k in budgets}))
    n = len(data.y)
    preds = {(k, s): np.full((n, 3), np.nan) for k in budgets for s in strategies}
    pipeline = {"features": features, "partner_effect": partner_effect}
    reverse = reverse_rows(data.meta)
    group = np.empty(n, dtype=object)
    cache: dict = {}
    weights = row_weights(data.meta)
    all_params = params
    for i, fold in enumerate(grouped_folds(data.meta, group_by)):
        group[fold.test] = fold.group
        chosen = structure
        if structure == "auto":
            chosen = select_structure(subset(data, fold.train), group_by, **pipeline, **all_params)["chosen"]
        params = {**all_params, "structure": chosen}
        featurizer, X_fit, X_all = fold_features(data, fold.train, **pipeline)
        first = SlowdownRegressor(**params).fit(
            X_fit, data.y[fold.train], featurizer=featurizer, sample_weight=weights[fold.train]
        )
        calibration = None
        if calibrate:  # on the fold's training rows only (its held-out group excluded)
            calibration = calibrate_rows(data, group_by, **pipeline, exclude=fold.group, cache=cache, **params)
        first.calibration_ = calibration
        log_q = np.log(three_quantiles(first.predict_quantiles(X_all, devices=data.meta["device_name"].to_numpy())))
        ctx = FoldContext(
            data=data,
            fold=fold,
            candidates=_candidates(data.meta, fold, group_by),
            log_q=log_q,
            reverse=reverse,
            shrinkage=calibration.shrinkage if calibration is not None else DEFAULT_SHRINKAGE,
            rng=np.random.default_rng([seed, i]),
        )
        orders: dict[str, dict[str, list[int]]] = {}
        for name in strategies:
            pick, _ = STRATEGIES[name]
            ctx.rng = np.random.default_rng([seed, i])  # random and matrix completion see the same draws
            orders[name] = pick(ctx, max(budgets))
        for k in budgets:
            for name in strategies:
                chosen = np.asarray([r for rows in orders[name].values() for r in rows[:k]], dtype=np.int64)
                both = revealed_pairs(data.meta, chosen) if chosen.size else np.empty(0, np.int64)
                scored = np.setdiff1d(fold.test, both)
                preds[(k, name)][scored] = _predict(
                    data, fold, both, scored, STRATEGIES[name][1], ctx, log_q, calibration, pipeline, params
                )
    return _score(data, preds, budgets, strategies, group)


def evaluate_budget_dataset(
    profiles: pd.DataFrame, pairs: pd.DataFrame, group_by: str = "family", budgets: tuple[int, ...] = (1,), **options
) -> dict:
    """Join a dataset's measured pairs to their profiles and run ``evaluate_budget`` (same options)."""
    rows = ordered_rows(profiles, pairs, features=options.get("features", "physical"))
    return evaluate_budget(rows, group_by=group_by, budgets=budgets, **options)


def _candidates(meta: pd.DataFrame, fold: Fold, group_by: str) -> dict[str, np.ndarray]:
    allowed = np.intersect1d(reveal_candidates(meta, group_by), fold.test)
    selves = meta["self_workload"].astype(str).to_numpy()
    return {str(w): allowed[selves[allowed] == w] for w in sorted(set(selves[fold.test]))}


def _predict(data, fold, both, scored, estimator, ctx, log_q, calibration, pipeline, params) -> np.ndarray:
    """Return the (p10, p50, p90) of rows ``scored`` once the rows ``both`` are revealed."""
    meta = data.meta
    if estimator == "completion":
        known = np.union1d(fold.train, both)
        p50 = complete_slowdowns(meta.iloc[known], data.y[known], meta.iloc[scored])
        out = np.full((scored.size, 3), np.nan)
        out[:, 1] = p50
        return out
    if both.size == 0:
        return np.exp(log_q[scored])
    train = np.union1d(fold.train, both)
    featurizer, X_fit, X_all = fold_features(data, train, **pipeline)
    model = SlowdownRegressor(**params).fit(
        X_fit, data.y[train], featurizer=featurizer, sample_weight=row_weights(meta.iloc[train])
    )
    model.calibration_ = calibration
    at = np.concatenate([both, scored])
    lq = np.log(three_quantiles(model.predict_quantiles(X_all.iloc[at], devices=meta["device_name"].to_numpy()[at])))
    held = list(ctx.candidates)
    model.shift_ = WorkloadShift.fit(np.log(data.y[both]) - lq[: both.size, 1], meta.iloc[both], ctx.shrinkage, held)
    return np.exp(shift_log_quantiles(model, lq[both.size :], meta.iloc[scored]))


def _score(data: PairRows, preds: dict, budgets, strategies, group: np.ndarray) -> dict:
    y, pid = data.y, data.meta["pair_id"].to_numpy()
    out: dict[int, dict] = {}
    for k in budgets:
        common = np.logical_and.reduce([~np.isnan(preds[(k, s)][:, 1]) for s in strategies])
        entry: dict = {"strategies": {}, "n_common": int(common.sum())}
        for name in strategies:
            q = preds[(k, name)]
            ok = ~np.isnan(q[:, 1])
            has_interval = not np.isnan(q[ok, 0]).all()
            lo, hi = (q[ok, 0], q[ok, 2]) if has_interval else (None, None)
            metrics = slowdown_metrics(y[ok], q[ok, 1], pid[ok], lo, hi)
            metrics.setdefault("coverage_p10_p90", None)
            metrics["mape_common"] = slowdown_metrics(y[common], q[common, 1])["mape"]
            metrics["per_group"] = {
                str(g): slowdown_metrics(y[ok & (group == g)], q[ok & (group == g), 1])["mape"]
                for g in sorted(set(group[ok]))
            }
            entry["strategies"][name] = metrics
        out[k] = entry
    return out
