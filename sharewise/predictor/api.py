"""Table-level entry points of the predictor: train on a dataset, predict pairs, out-of-fold predictions."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sharewise.datasets.schema import PREDICTION_COLUMNS
from sharewise.errors import ConfigError, DatasetError
from sharewise.predictor.choices import GROUP_BY
from sharewise.predictor.conformal import calibrate_rows
from sharewise.predictor.featurizer import PairFeaturizer, row_weights
from sharewise.predictor.folds import row_groups
from sharewise.predictor.model import OFFSET_TERM, SlowdownRegressor, three_quantiles
from sharewise.predictor.pair_features import SHARE_RATES, PairRows, base_columns, base_columns_of_model
from sharewise.predictor.profile_join import ordered_rows, pair_indices
from sharewise.predictor.shift import shift_log_quantiles
from sharewise.predictor.structure import STRUCTURE_CHOICES


def training_summary(rows: PairRows, profiles: pd.DataFrame) -> dict:
    """Describe what a model is trained on, for its sidecar.

    Example: ``{"pairs": 976, "devices": ["k80", "p100"], "workloads": ["A3C", ...], "families": [...],
    "base_features": ["iter_time_ms", "f_flops_per_step"], "profile_columns": [...]}`` (``rows`` is added
    by ``fit``). The fitted feature state is not here but in the model's ``featurizer_``.
    """
    meta = rows.meta
    share = meta["self_share"].to_numpy(dtype=np.float64) if "self_share" in meta else np.full(len(meta), np.nan)
    return {
        "pairs": int(meta["pair_id"].nunique()),
        # Ordered rows measured under the sharing knob (``profiler.knob``): what a prediction at a split rests on.
        "knob_rows": int(np.isfinite(share).sum()),
        "devices": sorted(set(meta["device_name"].astype(str))),
        "workloads": sorted(set(meta["self_workload"].astype(str))),
        "families": sorted(set(meta["self_family"].astype(str))),
        "base_features": base_columns_of_model(rows.X.columns),
        "profile_columns": base_columns(profiles),
    }


def train_model(
    profiles: pd.DataFrame,
    pairs: pd.DataFrame,
    features: str = "physical",
    partner_effect: bool = True,
    structure: str = "auto",
    group_by: str = "family",
    sources: dict | None = None,
    **params,
) -> SlowdownRegressor:
    """Fit a ``SlowdownRegressor`` on every measured (status ``ok``) pair, both directions.

    Parameters
    ----------
    profiles, pairs : DataFrame
        Profiles and pairs tables (``sharewise.datasets.read_datasets``).
    features : {"physical", "all"}
        Feature set (``PairFeaturizer``).
    partner_effect : bool
        Add each partner's measured effect on the selves it was paired with (``PARTNER_EFFECT``).
    structure : {"auto", "offset", "structured", "trees"}
        The model's structure (``predictor.structure``); ``auto`` chooses it by grouped cross-validation over
        ``group_by`` (``capacity.select_structure``).
    group_by : {"workload", "family", "device"}
        The held-out unit of that cross-validation.
    sources : dict, optional
        Rows per data source (e.g. ``{"runs/gpu": 12, "reference-h200": 36}``) for the model card.
    **params
        ``SlowdownRegressor`` parameters, e.g. ``n_estimators=300``.

    Returns
    -------
    SlowdownRegressor
        Fitted on rows weighted by their measurement's precision; ``training_summary_`` says on what,
        ``featurizer_`` holds the fitted feature state that prediction reuses, and ``card_`` is the model
        card (``capacity.model_card``: the structure and why, what the model uses, its grouped error).
    """
    from sharewise.predictor.capacity import model_card, select_structure

    if structure not in STRUCTURE_CHOICES:
        raise ConfigError(f"structure must be one of {', '.join(STRUCTURE_CHOICES)}, got {structure!r}")
    rows = ordered_rows(profiles, pairs, features=features)
    selection = select_structure(rows, group_by, features, partner_effect, **params)
    if structure != "auto":
        selection = {**selection, "chosen": structure, "reason": f"{structure}: as asked ({selection['reason']})"}
    featurizer = PairFeaturizer(features=features, partner_effect=partner_effect)
    X = featurizer.fit_transform(rows)
    summary = training_summary(rows, profiles)
    params = {k: v for k, v in params.items() if k != "structure"}
    model = SlowdownRegressor(**params, structure=selection["chosen"]).fit(
        X, rows.y, summary=summary, featurizer=featurizer, sample_weight=row_weights(rows.meta)
    )
    model.card_ = model_card(model, rows, selection, sources)
    return model


def model_rows(
    model: SlowdownRegressor, profiles: pd.DataFrame, pairs: pd.DataFrame, with_target: bool = False
) -> PairRows:
    """Return the ordered rows of ``pairs`` featurized for ``model`` (``PairFeaturizer.featurize_pairs``);
    ``rows.X`` goes straight into ``model.predict``.
    """
    return model.get_featurizer().featurize_pairs(profiles, pairs, with_target=with_target)


def predict_pairs(model: SlowdownRegressor, profiles: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Predict both slowdowns of every pair with quantiles.

    Parameters
    ----------
    model : SlowdownRegressor
        A fitted (or loaded) model.
    profiles : DataFrame
        Profiles of the workloads named by ``pairs`` (only the feature columns the model was trained on are
        used; extra columns are ignored).
    pairs : DataFrame
        ``workload_a, workload_b`` and optionally ``device_name`` (required when the profiles cover more than
        one device), ``mode`` (profiles of the same mode are preferred) and ``split_a`` (job a's share of the
        device in percent under the sharing knob, ``profiler.knob``; NaN or absent: no knob).

    Returns
    -------
    DataFrame
        One row per input pair, in input order::

            workload_a  workload_b  device_name  p10_a  p50_a  p90_a  p10_b  p50_b  p90_b
            resnet18    lstm_lm     cpu          1.31   1.52   1.80   1.10   1.24   1.45
    """
    profiles = profiles.reset_index(drop=True)
    pairs = pairs.reset_index(drop=True)
    ia, ib = pair_indices(profiles, pairs)
    n = len(pairs)
    block = np.empty((n, 6))
    split = (
        pd.to_numeric(pairs["split_a"], errors="coerce").to_numpy(dtype=np.float64)
        if "split_a" in pairs.columns
        else np.full(n, np.nan)
    )
    # Rows at one split share their features' knob columns: predict each split's rows together (most ask none).
    for value in np.unique(split[np.isfinite(split)]).tolist() + ([None] if np.isnan(split).any() else []):
        rows = np.flatnonzero(np.isnan(split) if value is None else split == value)
        share = None if value is None else value / 100.0
        both = _pair_quantiles(model, profiles, np.concatenate([ia[rows], ib[rows]]),
                               np.concatenate([ib[rows], ia[rows]]),
                               None if share is None else np.repeat([share, 1.0 - share], rows.size))
        block[rows, :3] = both[: rows.size]
        block[rows, 3:] = both[rows.size :]
    out = pd.DataFrame(block, columns=list(PREDICTION_COLUMNS[3:]), copy=False)
    out.insert(0, "device_name", (
        pairs["device_name"].astype(str)
        if "device_name" in pairs.columns
        else pd.Series(profiles["device_name"].astype(str).to_numpy(dtype=object)[ia], index=pairs.index)
    ))
    out.insert(0, "workload_b", pairs["workload_b"].astype(str))
    out.insert(0, "workload_a", pairs["workload_a"].astype(str))
    return out


def _pair_quantiles(model, profiles, self_rows, partner_rows, share) -> np.ndarray:
    """(p10, p50, p90) of the ordered rows (self ``self_rows[k]``, partner ``partner_rows[k]``), positions in
    ``profiles``, each at self's ``share[k]`` of the device (None: no knob)."""
    featurizer = model.get_featurizer()
    out = np.empty((self_rows.size, 3))
    shares = [None] if share is None else np.unique(share).tolist()
    for value in shares:
        at = np.arange(self_rows.size) if value is None else np.flatnonzero(share == value)
        # A scheduler asks about many pairs among few jobs: predict each distinct (self, partner) profile pair
        # once and gather, which is exact because the features depend on the two profiles (and the share) only.
        unique, inverse = _distinct_pairs(self_rows[at], partner_rows[at], len(profiles))
        i_self, i_partner = np.divmod(unique, max(len(profiles), 1))
        devices = (
            profiles["device_name"].astype(str).to_numpy(dtype=object)[i_self] if "device_name" in profiles else None
        )
        q = model.predict_matrix(featurizer.transform_indexed(profiles, i_self, i_partner, value), devices=devices)
        q = np.ascontiguousarray(three_quantiles(q))
        if getattr(model, "shift_", None) is not None:  # workloads with measured pairs of their own
            q = np.exp(shift_log_quantiles(model, np.log(q), _profile_pair_meta(profiles, i_self, i_partner)))
        out[at] = q[inverse]
    return out


def _profile_pair_meta(profiles: pd.DataFrame, i_self: np.ndarray, i_partner: np.ndarray) -> pd.DataFrame:
    """Row identity (``self_workload, partner_workload, device_name``) of (self, partner) profile positions."""
    names = profiles["workload"].astype(str).to_numpy(dtype=object)
    devices = profiles["device_name"].astype(str).to_numpy(dtype=object)
    return pd.DataFrame(
        {"self_workload": names[i_self], "partner_workload": names[i_partner], "device_name": devices[i_self]}
    )


# Up to this many possible (self, partner) profile pairs, distinct pairs are found with a lookup table
# (linear time) instead of a sort.
_TABLE_DEDUP_MAX = 1 << 24


def _distinct_pairs(i_self: np.ndarray, i_partner: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Return (distinct keys ``self * m + partner``, index of each row's key among them)."""
    m = max(m, 1)
    keys = i_self.astype(np.int64) * m + i_partner
    if m * m > _TABLE_DEDUP_MAX:
        unique, inverse = np.unique(keys, return_inverse=True)
        return unique, inverse.ravel()
    seen = np.zeros(m * m, dtype=bool)
    seen[keys] = True
    unique = np.flatnonzero(seen)
    lookup = np.empty(m * m, dtype=np.int64)
    lookup[unique] = np.arange(unique.size)
    return unique, lookup[keys]


def _pair_table(rows: PairRows, q: np.ndarray) -> pd.DataFrame:
    n = len(rows.X) // 2
    q = three_quantiles(q)
    meta = rows.meta
    return pd.DataFrame(
        {
            "workload_a": meta["self_workload"].to_numpy()[:n],
            "workload_b": meta["partner_workload"].to_numpy()[:n],
            "device_name": meta["device_name"].to_numpy()[:n],
            "p10_a": q[:n, 0],
            "p50_a": q[:n, 1],
            "p90_a": q[:n, 2],
            "p10_b": q[n:, 0],
            "p50_b": q[n:, 1],
            "p90_b": q[n:, 2],
        },
        columns=list(PREDICTION_COLUMNS),
    )


def out_of_fold_predictions(
    profiles: pd.DataFrame,
    pairs: pd.DataFrame,
    group_by: str = "family",
    candidates: pd.DataFrame | None = None,
    features: str = "physical",
    partner_effect: bool | None = None,
    holdout: str = "pair",
    calibrate: bool = False,
    structure: str = "auto",
    nothing_left: str = "raise",
    **params,
) -> pd.DataFrame:
    """Predict every candidate pair with models that never saw the held-out group(s).

    ``structure="auto"`` chooses the structure once, by ``capacity.select_structure`` on every measured row
    (the model ``train`` would write), and every held-out model uses it: one choice among three, not a
    nested selection per model, which would cost ten fits per model for the simulator's predictions. Rows
    are weighted by their measurement's precision.

    ``holdout="pair"``: one model is trained per unordered pair of groups ``{g, h}`` that the candidates
    involve (``g == h`` for pairs within one group), on the measured pairs in which neither self nor partner
    belongs to ``g`` or ``h``; it predicts both slowdowns of the candidates whose workloads fall in ``g`` and
    ``h`` (about ``k(k+1)/2`` fits for ``k`` groups).

    ``holdout="self"``: each slowdown is predicted by a model that never saw the group of the job it is
    about (self), trained on the pairs in which that group is neither self nor partner; the partner's group
    may have been seen with other jobs. This is the question of a brand-new model joining jobs the cluster
    already knows, and what the simulator's policies see; ``k`` fits. With ``partner_effect`` (default on
    here) a known partner's measured effect on other jobs, from the training rows only, is a feature.

    Parameters
    ----------
    profiles, pairs : DataFrame
        Profiles and measured pairs (only status ``ok`` pairs train).
    group_by : {"workload", "family", "device"}
        What is held out.
    candidates : DataFrame, optional
        Pairs to predict (``workload_a, workload_b`` and optionally ``device_name``, ``mode``); default the
        measured ``ok`` pairs.
    features : {"physical", "all"}
        Feature set (``PairFeaturizer``).
    partner_effect : bool, optional
        Add each partner's measured effect, from that model's training rows only. Default: on for
        ``holdout="self"``; off for ``"pair"``, where every partner is held out and the feature would be
        missing on every row a model predicts.
    holdout : {"pair", "self"}
        Whether a model excludes the groups of both workloads or only of the predicted job (see above).
    calibrate : bool
        Conformally calibrate each model's p10/p90 on grouped out-of-fold residuals of its own training rows
        (``conformal.calibrate_rows``, the held-out groups excluded), so the intervals a policy's SLO check
        reads cover about 80% of unseen workloads' slowdowns. Off by default: it adds about ``k`` fits per
        model, shared across models through one cache.
    nothing_left : {"raise", "widen"}
        What to do where holding a group out leaves no measured pair to train on (a few pairs, all of one
        workload): raise (evaluation, where in-sample predictions would pass for out-of-sample ones), or
        widen the training rows and say so in ``result.attrs["notes"]`` (the policies of ``simulate`` and
        ``run``, which must run with whatever pairs exist): with ``holdout="self"`` first to the pairs in
        which the group is the partner only (its own slowdowns still unseen), then to every measured pair.
    **params
        ``SlowdownRegressor`` parameters.

    Returns
    -------
    DataFrame
        Same columns as ``predict_pairs``, one row per candidate, in candidate order.

    Raises
    ------
    ConfigError
        A group pair for which no measured pair is left to train on.
    """
    if group_by not in GROUP_BY:
        raise ConfigError(f"group_by must be one of {list(GROUP_BY)}, got {group_by!r}")
    if nothing_left not in ("raise", "widen"):
        raise ConfigError(f"nothing_left must be 'raise' or 'widen', got {nothing_left!r}")
    train = ordered_rows(profiles, pairs, features=features)
    if candidates is None:
        candidates = pairs[pairs["status"] == "ok"] if "status" in pairs.columns else pairs
    cand = ordered_rows(profiles, candidates, with_target=False, features=features)
    n = len(cand.X) // 2
    train_self, train_partner = row_groups(train.meta, group_by)
    cand_a, cand_b = row_groups(cand.meta, group_by)
    cand_a, cand_b = cand_a[:n], cand_b[:n]
    if holdout not in ("pair", "self"):
        raise ConfigError(f"holdout must be 'pair' or 'self', got {holdout!r}")
    if partner_effect is None:
        partner_effect = holdout == "self"
    if structure not in STRUCTURE_CHOICES:
        raise ConfigError(f"structure must be one of {', '.join(STRUCTURE_CHOICES)}, got {structure!r}")
    if structure == "auto":
        from sharewise.predictor.capacity import select_structure

        structure = select_structure(train, group_by, features, partner_effect, **params)["chosen"]
    params = {**params, "structure": structure}
    weights = row_weights(train.meta)
    # Each key maps to the candidate rows one model predicts: rows i (direction a) and i + n (direction b).
    by_key: dict[tuple[str, ...], list[int]] = {}
    if holdout == "pair":
        for i, (a, b) in enumerate(zip(cand_a, cand_b, strict=True)):
            by_key.setdefault(tuple(sorted({a, b})), []).extend((i, i + n))
    else:
        for i, g in enumerate(np.concatenate([cand_a, cand_b])):
            by_key.setdefault((g,), []).append(i)
    q = np.full((2 * n, 3), np.nan)
    cache: dict = {}
    notes: list[str] = []
    for key, members in by_key.items():  # first-seen order, so the output is deterministic
        held = set(key)
        use = ~(np.isin(train_self, list(held)) | np.isin(train_partner, list(held)))
        if not use.any():
            names = " and ".join(map(repr, sorted(held)))
            if nothing_left == "raise":
                raise ConfigError(
                    f"no measured pair is left to train on once {group_by} {names} are held out; measure "
                    "pairs among other workloads or use a finer group_by"
                )
            use = ~np.isin(train_self, list(held)) if holdout == "self" else use
            if use.any():
                notes.append(f"every measured pair involves {group_by} {names}: its slowdowns are predicted by a "
                             f"model that saw it only as the partner ({int(use.sum())} row(s))")
            else:
                use = np.ones(len(train_self), dtype=bool)
                held = set()
                notes.append(f"every measured pair has {group_by} {names} itself: its slowdowns are predicted "
                             f"in sample, by a model trained on every measured pair ({len(use)} row(s))")
        # Each model has its own feature state (device references, partner effects) from its own rows.
        featurizer = PairFeaturizer(features=features, partner_effect=partner_effect)
        fit_rows = train.take(np.flatnonzero(use))
        X_fit = featurizer.fit_transform(fit_rows)
        model = SlowdownRegressor(**params).fit(
            X_fit, fit_rows.y, featurizer=featurizer, sample_weight=weights[np.flatnonzero(use)]
        )
        if calibrate:
            model.calibration_ = calibrate_rows(
                train, group_by, features, partner_effect, exclude=held, cache=cache, levels=(0,), **params
            )
        rows = np.asarray(members)
        pred = model.predict_quantiles(
            featurizer.transform(cand).iloc[rows], devices=cand.meta["device_name"].to_numpy()[rows]
        )
        q[rows] = three_quantiles(pred)
    table = _pair_table(cand, q)
    table.attrs["notes"] = notes
    return table


def common_devices(profiles: pd.DataFrame, workload_a: str, workload_b: str) -> list[str]:
    """Return the sorted devices on which both workloads have a profile.

    Raises
    ------
    DatasetError
        A workload with no profile at all (the message lists the profiled workloads).
    """
    known = sorted(set(profiles["workload"].astype(str)))
    for w in (workload_a, workload_b):
        if w not in known:
            shown = ", ".join(known[:30]) + (" ..." if len(known) > 30 else "")
            raise DatasetError(f"no profile of workload {w!r}; profiled workloads: {shown}")
    devices_of = profiles.groupby("workload")["device_name"].agg(lambda s: set(s.astype(str)))
    return sorted(devices_of[workload_a] & devices_of[workload_b])


def unseen_device_note(model: SlowdownRegressor, devices) -> str | None:
    """A one-line note when ``devices`` name hardware the model has no training pair on, else None.

    Slowdowns on other hardware are an extrapolation: the shipped reference (measured on an AMD EPYC VM),
    profiled again on an Intel Xeon VM, moved some probe sensitivities by 20-25% and throughputs by up to
    30%, more than any re-profile on one machine. A model trained before devices were recorded says nothing.

    >>> class M: training_summary_ = {"devices": ["AMD EPYC (2 cores)"]}
    >>> unseen_device_note(M(), ["AMD EPYC (2 cores)"]) is None
    True
    >>> unseen_device_note(M(), ["Intel Xeon (2 cores)"])[:60]
    "device(s) ['Intel Xeon (2 cores)'] have no training pair: th"
    """
    trained = {str(d) for d in (getattr(model, "training_summary_", None) or {}).get("devices", [])}
    new = sorted({str(d) for d in devices} - trained)
    if not trained or not new:
        return None
    return (
        f"device(s) {new} have no training pair: the model was trained on {sorted(trained)}, so its slowdowns "
        "there extrapolate across hardware; measure a few pairs on it ('sharewise pairs --budget K') and retrain"
    )


def explain_pair(
    model: SlowdownRegressor,
    profiles: pd.DataFrame,
    workload_a: str,
    workload_b: str,
    device_name: str,
    top: int = 5,
    split: float | None = None,
) -> dict:
    """Predict both slowdowns of one pair on one device, with the features that moved each prediction most.

    ``split`` is job a's share of the device in percent under the sharing knob (``profiler.knob``; None: no knob).

    Returns
    -------
    dict
        ``{"device_name": "cpu", "note": None, "sharing_worth_it": True, "speed_sum": 1.4,
        "a": {"workload": "resnet18", "partner": "lstm_lm", "p10": 1.2, "p50": 1.4, "p90": 1.7,
        "bias": 0.35, "contributions": [{"feature": "partner_f_busy_frac", "value": 0.93,
        "contribution": 0.12}, ...]}, "b": {...}}``. ``speed_sum`` is 1/p50_a + 1/p50_b: above 1, running
        the two together finishes more work than taking turns. Contributions are in log-slowdown units.
        ``note`` is ``unseen_device_note``'s line where the model has no training pair on the device.
    """
    return explain_pairs(model, profiles, [(workload_a, workload_b)], device_name, top=top, split=split)[0]


def explain_pairs(
    model: SlowdownRegressor,
    profiles: pd.DataFrame,
    pairs: list[tuple[str, str]],
    device_name: str,
    top: int = 5,
    split: float | None = None,
) -> list[dict]:
    """Return ``explain_pair`` of every ``(workload_a, workload_b)`` in ``pairs``, in order, computed together.

    One featurization and one XGBoost call serve all the pairs where that gives each pair's own answer: when
    the model holds a reference scale of every share feature on ``device_name``. Elsewhere a pair's share
    features are scaled by its own two profiles, so each pair is featurized alone, as ``explain_pair`` does.
    """
    model._check_fitted()
    if not pairs:
        return []
    if not _reference_covers(model.get_featurizer(), device_name):
        return [_explain_batch(model, profiles, [pair], device_name, top, split)[0] for pair in pairs]
    return _explain_batch(model, profiles, pairs, device_name, top, split)


def _reference_covers(featurizer: PairFeaturizer, device_name: str) -> bool:
    """Whether the featurizer's share features on ``device_name`` scale by a fitted reference (not by the
    profiles at hand), so featurizing pairs together gives each pair the features it gets alone."""
    reference = getattr(featurizer, "device_reference_", None)
    return reference is not None and all(str(device_name) in reference.get(rate, {}) for rate in SHARE_RATES)


def _explain_batch(model, profiles, pairs, device_name, top, split=None) -> list[dict]:
    frame = pd.DataFrame(
        {"workload_a": [a for a, _ in pairs], "workload_b": [b for _, b in pairs], "device_name": device_name}
    )
    if split is not None:
        frame["split_a"] = float(split)
    rows = model_rows(model, profiles, frame)
    q = model.predict_quantiles(rows.X, devices=rows.meta["device_name"].to_numpy())
    q = np.exp(shift_log_quantiles(model, np.log(three_quantiles(q)), rows.meta))
    contributions = model.explain_rows(rows.X)
    note = unseen_device_note(model, [device_name])
    if split is not None and not (getattr(model, "training_summary_", None) or {}).get("knob_rows"):
        knob = (
            "the model has no pair measured under the sharing knob: at this split each job's slowdown is its "
            "scaling curve's (1 / its share where its profile has none) times the interference of the pairs measured "
            "without a knob; measure some pairs at splits ('sharewise pairs --split 70:30') and retrain"
        )
        note = knob if note is None else f"{note}; {knob}"
    n = len(pairs)
    out = []
    for k, (workload_a, workload_b) in enumerate(pairs):
        one: dict = {"device_name": device_name, "note": note, "split": None if split is None else float(split)}
        # Direction 0 of pair k is row k, direction 1 is row n + k (``ordered_rows``).
        for side, i, (me, other) in (("a", k, (workload_a, workload_b)), ("b", n + k, (workload_b, workload_a))):
            contrib = contributions.iloc[i].rename(None)
            contrib = contrib.reindex(contrib.abs().sort_values(ascending=False, kind="stable").index)
            bias = float(contrib.pop("bias"))
            values = rows.X.iloc[i]
            one[side] = {
                "workload": me,
                "partner": other,
                "p10": float(q[i, 0]),
                "p50": float(q[i, 1]),
                "p90": float(q[i, 2]),
                "bias": bias,
                "contributions": [
                    {"feature": str(name), "value": float(values[_feature_of(name)]), "contribution": float(c)}
                    # A term that moved nothing (a feature no tree splits on) explains nothing.
                    for name, c in contrib[contrib.abs() > 1e-9].head(max(int(top), 0)).items()
                ],
            }
        one["speed_sum"] = 1.0 / one["a"]["p50"] + 1.0 / one["b"]["p50"]
        one["sharing_worth_it"] = bool(one["speed_sum"] > 1.0)
        out.append(one)
    return out


def _feature_of(term: str) -> str:
    """The feature behind an ``explain`` term: itself, or the offset's feature (``offset: log NAME``)."""
    return term[len(OFFSET_TERM) :] if term.startswith(OFFSET_TERM) else term
