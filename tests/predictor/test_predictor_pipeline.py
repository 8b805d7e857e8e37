"""Tests of the fitted feature pipeline (device shares, partner effects, feature sets) and of nested tuning.

The central property: in grouped cross-validation nothing of a held-out group (its labels, and for the
fitted scales its profiles) reaches the model or the features that score it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_predictor import FAST, synthetic

from sharewise.predictor import (
    PairFeaturizer,
    SlowdownRegressor,
    cross_validate,
    ordered_rows,
    predict_pairs,
    train_model,
)
from sharewise.predictor import evaluation as evaluation_module
from sharewise.predictor.feature_state import PARTNER_EFFECT, device_reference, reference_matrix
from sharewise.predictor.featurizer import monotone_signs
from sharewise.predictor.folds import fold_features, grouped_folds, row_groups
from sharewise.predictor.pair_features import SHARE_RATES, job_rates, select_base


@pytest.fixture(scope="module")
def data():
    return synthetic(n_workloads=6, seed=1)


def _with_family_labels_scaled(pairs: pd.DataFrame, profiles: pd.DataFrame, family: str, factor: float):
    members = set(profiles.loc[profiles["family"] == family, "workload"])
    out = pairs.copy()
    hit = out["workload_a"].isin(members) | out["workload_b"].isin(members)
    out.loc[hit, ["slowdown_a", "slowdown_b"]] *= factor
    return out


@pytest.fixture(scope="module")
def tuned(data):
    """The nested (tuned) cross-validation of ``data`` by family, run once for the tests that need it, with the
    groups each inner selection was shown: ``(CVResult, [set of groups, ...])``."""
    profiles, pairs = data
    rows = ordered_rows(profiles, pairs, features="all")
    seen = []
    real = evaluation_module.select_params

    def spy(inner, group_by="family", **fixed):
        self_g, partner_g = row_groups(inner.meta, group_by)
        seen.append(set(self_g) | set(partner_g))
        return real(inner, group_by, **fixed)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(evaluation_module, "select_params", spy)
        cv = cross_validate(rows, group_by="family", tune=True, **FAST)
    return cv, seen


@pytest.mark.parametrize("tune", [False, True])
def test_held_out_labels_never_move_held_out_predictions(data, tune, request):
    profiles, pairs = data
    held = "fam1"
    runs = []
    for p in (pairs, _with_family_labels_scaled(pairs, profiles, held, 3.0)):
        if tune and p is pairs:  # the same nested cross-validation as the fixture's: run once
            cv = request.getfixturevalue("tuned")[0]
        else:
            rows = ordered_rows(profiles, p, features="all")
            cv = cross_validate(rows, group_by="family", tune=tune, **FAST)
        runs.append(cv.rows[cv.rows["group"] == held])
    before, after = runs
    np.testing.assert_allclose(before[["p10", "p50", "p90"]], after[["p10", "p50", "p90"]])
    assert not np.allclose(before["measured"], after["measured"])  # the labels did change


def test_fitted_scales_ignore_held_out_profiles(data):
    profiles, pairs = data
    rows = ordered_rows(profiles, pairs)
    busier = profiles.copy()
    busier.loc[busier["family"] == "fam2", "f_flops_per_step"] *= 1000.0  # would set every device maximum
    rows_busier = ordered_rows(busier, pairs)
    for fold in grouped_folds(rows.meta, "family"):
        if fold.group != "fam2":
            continue
        state_a, a, _ = fold_features(rows, fold.train)
        state_b, b, _ = fold_features(rows_busier, fold.train)
        assert state_a.device_reference_ == state_b.device_reference_
        pd.testing.assert_frame_equal(a, b)


def test_partner_effect_leaves_out_the_self_family(data):
    profiles, pairs = data
    rows = ordered_rows(profiles, pairs)
    featurizer = PairFeaturizer()
    values = featurizer.fit_transform(rows)[PARTNER_EFFECT].to_numpy()
    table = featurizer.partner_effects_
    meta, log_y = rows.meta, np.log(rows.y)
    for i in (0, 5, len(rows.y) - 3):
        same_partner = (meta["partner_workload"] == meta["partner_workload"].iloc[i]) & (
            meta["device_name"] == meta["device_name"].iloc[i]
        )
        if meta["partner_family"].iloc[i] == meta["self_family"].iloc[i]:
            assert np.isnan(values[i])  # a new workload's family-mates are new as well
            continue
        others = same_partner & (meta["self_family"] != meta["self_family"].iloc[i])
        assert values[i] == pytest.approx(log_y[others.to_numpy()].mean(), rel=1e-5)
        full = log_y[same_partner.to_numpy()].mean()
        assert table[meta["device_name"].iloc[i]][meta["partner_workload"].iloc[i]] == pytest.approx(full)


def test_partner_effect_of_a_held_out_partner_is_unknown(data):
    profiles, pairs = data
    rows = ordered_rows(profiles, pairs)
    for fold in grouped_folds(rows.meta, "family"):
        featurizer, _, X = fold_features(rows, fold.train)
        effect = X[PARTNER_EFFECT].to_numpy()[fold.test]
        partner_held = rows.meta["partner_family"].to_numpy()[fold.test] == fold.group
        assert partner_held.any() and np.isnan(effect[partner_held]).all()
        assert np.isfinite(effect[~partner_held]).all()
        held_workloads = set(rows.meta["self_workload"].to_numpy()[fold.test])
        assert not held_workloads & {w for per in featurizer.partner_effects_.values() for w in per}


def test_nested_selection_sees_only_the_training_groups(tuned):
    cv, seen = tuned
    assert [f["group"] for f in cv.folds] == ["fam0", "fam1", "fam2"]
    for fold, groups in zip(cv.folds, seen, strict=True):
        assert fold["group"] not in groups and len(groups) == 2
        chosen = fold["chosen"]
        assert set(chosen) == {*evaluation_module.TUNING_GRID, "prior_weight", "inner_mape"}


def test_device_reference_and_unseen_device_fallback():
    base = ["iter_time_ms", "f_flops_per_step"]
    values = np.array([[10.0, 1e9], [20.0, 4e9], [5.0, 1e9]])
    rates = job_rates(values, base)
    np.testing.assert_allclose(rates[:, 0], [1e11, 2e11, 2e11])
    assert np.isnan(rates[:, 1:]).all()  # no memory or kernel counts: no byte or launch rate
    ref = device_reference(rates[:2], ["a", "a"])
    assert ref["flop_rate"] == {"a": 2e11} and ref["bytes_rate"] == {}
    got = reference_matrix(ref, ["a", "b"], rates[[0, 2]])
    assert got.shape == (2, len(SHARE_RATES))
    assert got[0, 0] == 2e11  # the model's reference for a known device
    assert got[1, 0] == 2e11  # a device it never saw: the best of the rows at hand


def test_select_base_keeps_what_describes_load():
    base = ["iter_time_ms", "batch_size", "f_batch_size", "f_flops_per_step", "f_opcount_gemm_conv",
            "f_opshare_embedding", "f_busy_frac", "f_timeshare_gemm_conv"]
    assert select_base(base) == ["iter_time_ms", "f_flops_per_step", "f_busy_frac", "f_timeshare_gemm_conv"]
    assert select_base(base, "all") == base
    with pytest.raises(ValueError, match="physical"):
        select_base(base, "most")


def test_prior_weight_pulls_toward_the_training_median(data):
    rows = ordered_rows(*data)
    plain = SlowdownRegressor(**FAST).fit(rows.X, rows.y)
    pulled = SlowdownRegressor(**FAST, prior_weight=0.5).fit(rows.X, rows.y)
    assert pulled.prior_ == pytest.approx(np.median(np.log(rows.y)))
    q0, q1 = np.log(plain.predict_quantiles(rows.X)), np.log(pulled.predict_quantiles(rows.X))
    np.testing.assert_allclose(q1[:, 1], 0.5 * q0[:, 1] + 0.5 * pulled.prior_, rtol=1e-6)
    np.testing.assert_allclose(np.diff(q1, axis=1), np.diff(q0, axis=1), atol=1e-6)  # same widths
    contrib = pulled.explain(rows.X.iloc[[2]])
    assert contrib.sum() == pytest.approx(q1[2, 1], abs=1e-3)
    with pytest.raises(ValueError, match="prior_weight"):
        SlowdownRegressor(prior_weight=1.0).fit(rows.X, rows.y)


def test_more_partner_load_never_lowers_the_prediction(data):
    profiles, pairs = data
    model = train_model(profiles, pairs, **FAST)
    names = list(model.feature_names_in_)
    assert sum(monotone_signs(names)) >= 2  # partner shares and the partner effect
    X = model.featurizer_.transform(ordered_rows(profiles, pairs)).iloc[:40].reset_index(drop=True)
    col = "pair_partner_share_flop_rate"
    grid = np.linspace(0.0, 1.5, 7)
    preds = np.stack([model.predict_quantiles(X.assign(**{col: v})) for v in grid])
    assert (np.diff(preds, axis=0) >= -1e-9).all()


def test_predict_pairs_on_a_device_the_model_never_saw(data):
    profiles, pairs = data
    model = train_model(profiles, pairs, **FAST)
    other = profiles[profiles["device_name"] == "dev0"].assign(device_name="new-gpu")
    query = pairs[pairs["device_name"] == "dev0"].assign(device_name="new-gpu")
    out = predict_pairs(model, other, query[["workload_a", "workload_b", "device_name"]])
    assert len(out) == len(query) and np.isfinite(out[["p10_a", "p50_a", "p90_b"]].to_numpy()).all()
