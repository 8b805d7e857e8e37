"""Tests of ``PairFeaturizer``: the fit/transform contract, its JSON form, and a saved model that predicts
exactly what the in-memory model predicts, also on workloads and devices it never saw."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from test_predictor import FAST, synthetic

from sharewise.errors import ConfigError, ModelSchemaError, NotFittedError
from sharewise.predictor import (
    MODEL_SCHEMA_VERSION,
    PairFeaturizer,
    SlowdownRegressor,
    model_rows,
    ordered_rows,
    predict_pairs,
    train_model,
)
from sharewise.predictor.api import explain_pair
from sharewise.predictor.feature_state import PARTNER_EFFECT, lookup_partner_effect
from sharewise.predictor.model import sidecar_path
from sharewise.predictor.profile_join import pair_indices
from sharewise.predictor.structure import OFFSET_COLUMNS, OFFSET_STRUCTURED, SHARE_COLUMNS


@pytest.fixture(scope="module")
def data():
    return synthetic(n_workloads=6, seed=2)


def _without(profiles: pd.DataFrame, pairs: pd.DataFrame, workload: str):
    keep = (pairs["workload_a"] != workload) & (pairs["workload_b"] != workload)
    return profiles[profiles["workload"] != workload], pairs[keep]


# ---- the estimator contract ----------------------------------------------------------------------------


def test_init_only_stores_parameters_and_clones():
    featurizer = PairFeaturizer(features="all", partner_effect=False)
    assert vars(featurizer) == featurizer.get_params() == {"features": "all", "partner_effect": False}
    copy = clone(featurizer)
    assert copy.get_params() == featurizer.get_params() and copy is not featurizer


def test_fit_learns_state_ending_in_underscore(data):
    rows = ordered_rows(*data)
    featurizer = PairFeaturizer()
    assert featurizer.fit(rows) is featurizer
    learned = set(vars(featurizer)) - {"features", "partner_effect"}
    assert learned == {"base_columns_", "device_reference_", "partner_effects_", "structure_"}
    assert set(featurizer.device_reference_) == {"flop_rate", "bytes_rate", "launch_rate"}
    assert set(featurizer.partner_effects_) == {"dev0", "dev1"}
    assert list(featurizer.transform(rows).columns) == list(featurizer.get_feature_names_out())
    # The partner effect, the sharing knob's columns, then the offsets of the structure close the feature list.
    assert list(featurizer.get_feature_names_out()[-6:]) == [PARTNER_EFFECT, *SHARE_COLUMNS, *OFFSET_COLUMNS]
    assert PARTNER_EFFECT not in PairFeaturizer(partner_effect=False).fit(rows).get_feature_names_out()


def test_transform_before_fit_and_bad_input(data):
    rows = ordered_rows(*data)
    with pytest.raises(NotFittedError, match="fit"):
        PairFeaturizer().transform(rows)
    with pytest.raises(NotFittedError, match="fit"):
        PairFeaturizer().to_dict()
    with pytest.raises(ConfigError, match="physical"):
        PairFeaturizer(features="most").fit(rows)
    unlabelled = ordered_rows(data[0], data[1], with_target=False)
    # The partner effect and the structure's levels are learned from labels.
    for partner_effect in (True, False):
        with pytest.raises(ConfigError, match="slowdowns"):
            PairFeaturizer(partner_effect=partner_effect).fit(unlabelled)
    fitted = PairFeaturizer().fit(rows)
    with pytest.raises(ModelSchemaError, match="self_f_busy_frac"):
        fitted.transform(ordered_rows(data[0].drop(columns=["f_busy_frac"]), data[1]))


def test_fit_transform_cross_fits_the_partner_effect(data):
    rows = ordered_rows(*data)
    featurizer = PairFeaturizer()
    train = featurizer.fit_transform(rows)
    predict = featurizer.transform(rows)
    # Only the partner effect (and the structured offset, which reads it) differs: a training row's value
    # leaves out its own self family ...
    cross_fitted = [PARTNER_EFFECT, OFFSET_STRUCTURED]
    pd.testing.assert_frame_equal(train.drop(columns=cross_fitted), predict.drop(columns=cross_fitted))
    assert not np.allclose(train[PARTNER_EFFECT], predict[PARTNER_EFFECT], equal_nan=True)
    # ... while a row to predict reads the table fitted on every training row.
    table = lookup_partner_effect(featurizer.partner_effects_, rows.meta).astype(np.float32)
    np.testing.assert_array_equal(predict[PARTNER_EFFECT].to_numpy(), table)
    assert (train.dtypes == np.float32).all() and (predict.dtypes == np.float32).all()
    assert train.index.equals(rows.X.index)


def test_to_dict_round_trips_through_json(data):
    rows = ordered_rows(*data)
    featurizer = PairFeaturizer(features="physical").fit(rows)
    state = json.loads(json.dumps(featurizer.to_dict()))
    assert set(state) == {
        "features", "partner_effect", "base_columns", "device_reference", "partner_effects", "structure"
    }
    again = PairFeaturizer.from_dict(state)
    assert again.get_params() == featurizer.get_params()
    pd.testing.assert_frame_equal(again.transform(rows), featurizer.transform(rows))
    with pytest.raises(ModelSchemaError, match="partner_effects"):
        PairFeaturizer.from_dict({k: v for k, v in state.items() if k != "partner_effects"})
    with pytest.raises(ModelSchemaError, match="retrain"):
        PairFeaturizer.from_dict(["not", "a", "mapping"])


# ---- the model keeps its featurizer --------------------------------------------------------------------


def test_train_model_keeps_the_fitted_featurizer(data):
    model = train_model(*data, **FAST)
    assert isinstance(model.featurizer_, PairFeaturizer)
    assert list(model.featurizer_.get_feature_names_out()) == list(model.feature_names_in_)
    assert "device_reference" not in model.training_summary_ and "partner_effect" not in model.training_summary_
    rows = ordered_rows(*data)
    featurizer = PairFeaturizer(partner_effect=True).fit(rows)
    missing = "missing: \\['pair_offset_linear', 'pair_offset_probe', 'pair_offset_structured', 'pair_partner_effect'"
    with pytest.raises(ModelSchemaError, match=missing):
        SlowdownRegressor(**FAST).fit(rows.X, rows.y, featurizer=featurizer)
    X = featurizer.transform(rows)
    with pytest.raises(ModelSchemaError, match="another order"):  # the fast path reads columns by position
        SlowdownRegressor(**FAST).fit(X[X.columns[::-1]], rows.y, featurizer=featurizer)


def test_fast_and_row_paths_build_the_same_features(data):
    profiles, pairs = data
    featurizer = train_model(profiles, pairs, **FAST).featurizer_
    query = pairs[pairs["status"] == "ok"].reset_index(drop=True)
    ia, ib = pair_indices(profiles.reset_index(drop=True), query)
    fast = featurizer.transform_indexed(profiles.reset_index(drop=True), np.r_[ia, ib], np.r_[ib, ia])
    rows = featurizer.featurize_pairs(profiles, query)
    np.testing.assert_array_equal(fast, rows.X.to_numpy())


def test_saved_model_predicts_exactly_on_unseen_workload_and_device(data, tmp_path):
    profiles, pairs = data
    model = train_model(*_without(profiles, pairs, "w5"), **FAST)
    path = tmp_path / "model.json"
    side = model.save(path)
    assert json.loads(side.read_text())["featurizer"] == model.featurizer_.to_dict()
    loaded = SlowdownRegressor.load(path)
    assert loaded.featurizer_.to_dict() == model.featurizer_.to_dict()
    # A workload added after training (w5) and a device the model never saw, with its own scale.
    new_device = profiles[profiles["device_name"] == "dev0"].assign(
        device_name="new-gpu", iter_time_ms=lambda p: p["iter_time_ms"] / 3.0
    )
    unseen = pd.concat([profiles, new_device], ignore_index=True)
    query = pd.DataFrame(
        {
            "workload_a": ["w5", "w5", "w1", "w5", "w0"],
            "workload_b": ["w1", "w5", "w3", "w2", "w5"],
            "device_name": ["dev0", "dev1", "new-gpu", "new-gpu", "new-gpu"],
        }
    )
    before, after = predict_pairs(model, unseen, query), predict_pairs(loaded, unseen, query)
    np.testing.assert_array_equal(after.filter(like="p").to_numpy(), before.filter(like="p").to_numpy())
    rows_before, rows_after = model_rows(model, unseen, query), model_rows(loaded, unseen, query)
    pd.testing.assert_frame_equal(rows_after.X, rows_before.X)
    np.testing.assert_array_equal(loaded.predict_quantiles(rows_after.X), model.predict_quantiles(rows_before.X))
    assert explain_pair(loaded, unseen, "w5", "w1", "new-gpu") == explain_pair(model, unseen, "w5", "w1", "new-gpu")


def test_load_refuses_the_previous_sidecar_layout(data, tmp_path):
    model = train_model(*data, **FAST)
    path = tmp_path / "model.json"
    side = model.save(path)
    meta = json.loads(side.read_text())
    # Version 3 kept the fitted state in "training" and had no featurizer.
    old = {k: v for k, v in meta.items() if k != "featurizer"}
    old["training"] = {**meta["training"], "device_reference": meta["featurizer"]["device_reference"]}
    side.write_text(json.dumps({**old, "schema_version": 3}))
    with pytest.raises(ModelSchemaError, match=f"schema version 3.*reads version {MODEL_SCHEMA_VERSION}.*retrain"):
        SlowdownRegressor.load(path)
    side.write_text(json.dumps({**meta, "featurizer": {"features": "physical"}}))
    with pytest.raises(ModelSchemaError, match="featurizer state"):
        SlowdownRegressor.load(path)
    assert sidecar_path(path) == side


def test_a_model_fitted_on_a_bare_frame_still_predicts_pairs(data, tmp_path):
    profiles, pairs = data
    rows = ordered_rows(profiles, pairs)
    model = SlowdownRegressor(**FAST).fit(PairFeaturizer().fit_transform(rows), rows.y)
    assert model.featurizer_ is None
    out = predict_pairs(model, profiles, pairs)
    assert np.isfinite(out[["p10_a", "p50_a", "p90_b"]].to_numpy()).all()
    side = model.save(tmp_path / "bare.json")
    assert json.loads(side.read_text())["featurizer"] is None
    assert SlowdownRegressor.load(tmp_path / "bare.json").featurizer_ is None


def test_column_order_of_the_profiles_does_not_change_the_model(data):
    """The same profiles with their ``f_*`` columns in another order (features counted fresh come in the
    counter's order, cached ones sorted) train the same model: same feature names, same predictions."""
    profiles, pairs = data
    feats = [c for c in profiles.columns if c.startswith("f_")]
    others = [c for c in profiles.columns if c not in feats]
    shuffled = profiles[others + feats[::-1]]
    assert list(shuffled.columns) != list(profiles.columns)
    model, again = train_model(profiles, pairs, **FAST), train_model(shuffled, pairs, **FAST)
    assert list(again.feature_names_in_) == list(model.feature_names_in_)
    query = pairs[["workload_a", "workload_b", "device_name"]]
    np.testing.assert_array_equal(
        predict_pairs(again, shuffled, query).filter(like="p").to_numpy(),
        predict_pairs(model, profiles, query).filter(like="p").to_numpy(),
    )
