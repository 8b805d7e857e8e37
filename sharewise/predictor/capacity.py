"""Capacity that follows the data: choose the model's structure by grouped cross-validation, and say what it uses.

``select_structure`` scores each of ``structure.STRUCTURES`` (the probe offset, the sensitivity x pressure
model, that plus trees) by leave-one-group-out over the rows it is given, every candidate on the same folds
and each fold's feature state fitted on that fold's training rows, next to the baselines on the same folds.
The lowest error wins, and a more complex structure must beat a simpler one by ``MIN_GAIN`` (a relative
margin) to be chosen: on a few dozen rows two structures a fraction of a point apart are the same structure
to the folds. Called on an outer fold's training rows (``evaluation.cross_validate``) this is nested
cross-validation; called on every row (``api.train_model``) it chooses the model a user gets.

``model_card`` turns a fitted model and its selection into the card ``train`` prints, ``evaluate --json``
carries and the sidecar keeps: what the model was trained on, which structure and why, what it uses, its
grouped out-of-fold error beside the baselines, and a warning with the remedy when the data is too small for
the partner to be learned.
"""

from __future__ import annotations

import numpy as np

from sharewise.predictor.baselines import BASELINES, unusable_reason
from sharewise.predictor.featurizer import row_weights
from sharewise.predictor.folds import calibration_folds, fold_features
from sharewise.predictor.model import SlowdownRegressor
from sharewise.predictor.pair_features import PairRows
from sharewise.predictor.structure import (
    OFFSET_COLUMNS,
    PRECISION_TARGET,
    STRUCTURES,
    describe_structure,
)

#: A structure must lower the weighted grouped MAPE of the simpler one by this fraction of it to be chosen.
MIN_GAIN = 0.02
#: Below this many training groups there is no grouped fold to choose with: the offset alone is used, and the
#: card says so (with two groups each fold trains on the other's rows only, e.g. one GPU for another).
MIN_GROUPS = 2


def _weighted_mape(y: np.ndarray, pred: np.ndarray, w: np.ndarray) -> float:
    ok = np.isfinite(pred)
    if not ok.any():
        return float("nan")
    return float(np.average(np.abs(pred[ok] - y[ok]) / y[ok], weights=w[ok]) * 100)


def select_structure(
    data: PairRows,
    group_by: str = "family",
    features: str = "physical",
    partner_effect: bool = True,
    candidates: tuple[str, ...] = STRUCTURES,
    **params,
) -> dict:
    """Choose a structure for ``data`` by grouped cross-validation (module docstring); return the evidence.

    Returns
    -------
    dict
        E.g. ``{"chosen": "structured", "group_by": "workload", "folds": 8, "rows_scored": 36,
        "scores": {"offset": 9.9, "structured": 9.0, "trees": 9.0}, "baselines": {"median": 16.8, ...},
        "reason": "structured: 9.0% against offset 9.9% ..."}``: weighted MAPE (percent) of each candidate's
        and baseline's out-of-fold p50 on the same rows.
    """
    params = {k: v for k, v in params.items() if k != "structure"}
    weights = row_weights(data.meta)
    groups = sorted(set(data.meta["self_workload" if group_by == "workload" else "self_family"].astype(str)))
    if group_by == "device":
        groups = sorted(set(data.meta["device_name"].astype(str)))
    folds = calibration_folds(data.meta, group_by) if len(groups) >= 2 else []
    if len(folds) < min(MIN_GROUPS, len(groups)) or len(groups) < MIN_GROUPS:
        return {
            "chosen": candidates[0],
            "group_by": group_by,
            "folds": len(folds),
            "rows_scored": 0,
            "scores": {},
            "baselines": {},
            "reason": (
                f"{len(groups)} {group_by}(s) in the data: too few for grouped cross-validation to tell "
                f"structures apart (at least {MIN_GROUPS}), so the simplest ({candidates[0]}) is used"
            ),
        }
    y = data.y
    preds = {c: np.full(len(y), np.nan) for c in candidates}
    base = {name: np.full(len(y), np.nan) for name in BASELINES}
    for _held, train, test in folds:
        featurizer, X_fit, X_all = fold_features(data, train, features, partner_effect)
        for c in candidates:
            model = SlowdownRegressor(**params, structure=c).fit(
                X_fit, y[train], featurizer=featurizer, sample_weight=weights[train]
            )
            preds[c][test] = model.predict(X_all.iloc[test])
        plain = X_all.drop(columns=[col for col in X_all.columns if col in OFFSET_COLUMNS])
        plain_fit = plain.iloc[train]
        for name, factory in BASELINES.items():
            baseline = factory()
            if unusable_reason(baseline, plain_fit) is None:
                base[name][test] = baseline.fit(plain_fit, y[train], data.meta.iloc[train]).predict(
                    plain.iloc[test], data.meta.iloc[test]
                )
    scored = np.isfinite(preds[candidates[0]])
    scores = {c: _weighted_mape(y[scored], preds[c][scored], weights[scored]) for c in candidates}
    baselines = {
        name: _weighted_mape(y[scored], values[scored], weights[scored])
        for name, values in base.items()
        if np.isfinite(values[scored]).any()
    }
    chosen = candidates[0]
    for c in candidates[1:]:
        if scores[c] < scores[chosen] * (1.0 - MIN_GAIN):
            chosen = c
    others = ", ".join(f"{c} {scores[c]:.1f}%" for c in candidates if c != chosen)
    return {
        "chosen": chosen,
        "group_by": group_by,
        "folds": len(folds),
        "rows_scored": int(scored.sum()),
        "scores": scores,
        "baselines": baselines,
        "reason": (
            f"{chosen}: {scores[chosen]:.1f}% grouped out-of-fold MAPE (each {group_by} held out, {len(folds)} "
            f"folds, rows weighted by precision) against {others}; a more complex structure must gain "
            f"{MIN_GAIN:.0%} to be chosen"
        ),
    }


def tree_splits(model: SlowdownRegressor) -> dict[str, int]:
    """Return ``{feature: number of split nodes on it}`` over every tree of ``model``'s booster (all quantiles).

    ``{}`` for a model without a split: its prediction is its offset plus one constant per quantile.
    """
    frame = model.booster_.trees_to_dataframe()
    splits = frame[frame["Feature"] != "Leaf"]
    counts = splits["Feature"].value_counts()
    return {str(k): int(v) for k, v in counts.items()}


def model_card(model: SlowdownRegressor, data: PairRows, selection: dict, sources: dict | None = None) -> dict:
    """Return the model card of ``model`` fitted on ``data`` with the structure ``selection`` chose.

    Example::

        {"rows": 36, "pairs": 18, "workloads": 8, "devices": ["NVIDIA H200"], "modes": ["timeslice"],
         "sources": {"reference-h200": 36}, "imprecise_rows": 14, "weight_total": 29.3,
         "structure": "structured", "why": "...", "selection": {...},
         "uses": {"offset": "log probe slowdown + level (...) + 0.41 x (log partner_f_probe_pressure - 0.87)",
                  "partner_terms": {"partner_f_probe_pressure": 0.41}, "tree_splits": 0,
                  "features_with_splits": {}},
         "summary": "the probe's slowdown, one level per device and mode, and the partner's pressure",
         "warnings": ["..."]}
    """
    meta = data.meta
    weights = row_weights(meta)
    halfwidth = meta["halfwidth"].to_numpy(dtype=np.float64) if "halfwidth" in meta else np.full(len(meta), np.nan)
    state = model.get_featurizer().structure_ or {"levels": {}, "levels_probe": {}, "terms": {}}
    splits = tree_splits(model)
    structure = model.structure
    uses_terms = structure in ("structured", "trees")
    terms = {k: round(v["coef"], 4) for k, v in state["terms"].items()} if uses_terms else {}
    has_probe = bool(state.get("sensitivity"))
    start = "the probe's slowdown of the job" if has_probe else "a constant"
    summary = f"{start}, one level per device and mode"
    if structure == "linear":
        summary = f"{start} and a ridge regression on {len(state['linear']['columns'])} pair features"
    if terms:
        summary += ", and the partner's " + " and ".join(_term_words(t) for t in terms)
    if splits:
        summary += f", corrected by trees ({sum(splits.values())} splits on {len(splits)} features)"
    elif structure == "offset" and has_probe:
        levels = state.get("levels_probe", {})
        if len(levels) == 1:
            summary = f"the probe's slowdown scaled by {np.exp(next(iter(levels.values()))):.3f}"
    warnings = []
    if structure == "trees" and not splits:
        warnings.append(
            "the trees found no split (too few rows for min_child_weight): the model is its structured offset"
        )
    scores = selection.get("scores", {})
    if structure == "offset" and "structured" in scores:
        if _matrix_complete(meta) and len(data.y) >= MIN_PARTNER_ROWS:
            warnings.append(
                f"the partner's terms did not lower the grouped error (structured {scores['structured']:.1f}% "
                f"against offset {scores['offset']:.1f}%): on this data a job's slowdown hardly depends on its "
                "partner, so every partner is predicted alike"
            )
        else:
            warnings.append(
                f"too few measured pairs to learn the partner ({len(data.y)} rows, {meta['self_workload'].nunique()} "
                "workloads, the matrix of pairs incomplete): every partner is predicted alike; measure the pairs "
                "that would tell most next ('sharewise suggest --model MODEL --data DATA NEW_WORKLOAD --budget 2')"
            )
    if not selection.get("scores"):
        warnings.append(selection.get("reason", ""))
    imprecise = int(np.sum(np.isfinite(halfwidth) & (halfwidth > PRECISION_TARGET)))
    return {
        "rows": int(len(data.y)),
        "pairs": int(meta["pair_id"].nunique()),
        "workloads": int(meta["self_workload"].nunique()),
        "devices": sorted(set(meta["device_name"].astype(str))),
        "modes": sorted(set(meta["mode"].astype(str))) if "mode" in meta else [],
        "sources": dict(sources or {}),
        "imprecise_rows": imprecise,
        "precision_target": PRECISION_TARGET,
        "weight_total": round(float(weights.sum()), 2),
        "structure": structure,
        "why": selection.get("reason", ""),
        "selection": selection,
        "uses": {
            "offset": describe_structure(state, structure) if state.get("levels") else "none",
            "partner_terms": terms,
            "tree_splits": int(sum(splits.values())),
            "features_with_splits": dict(sorted(splits.items(), key=lambda kv: -kv[1])[:10]),
        },
        "summary": summary,
        "warnings": [w for w in warnings if w],
    }


#: Rows below which the card blames the data, not the partner, when the partner's terms do not help.
MIN_PARTNER_ROWS = 60


def _matrix_complete(meta) -> bool:
    """Whether every unordered pair of the measured workloads is measured on every device and mode."""
    for _, part in meta.groupby(["device_name", "mode"] if "mode" in meta else ["device_name"]):
        n = part["self_workload"].nunique()
        if part["pair_id"].nunique() < n * (n + 1) // 2:
            return False
    return True


def _term_words(name: str) -> str:
    return {"partner_f_probe_pressure": "probe pressure", "pair_partner_effect": "measured effect on others"}.get(
        name, name
    )
