"""Tests of the predictor: estimator contract, persistence, pair features, grouped splits, API and CLI."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from sharewise.datasets.schema import validate_pairs, validate_profiles
from sharewise.datasets.store import Dataset
from sharewise.errors import ConfigError, DatasetError, ModelSchemaError, NotFittedError
from sharewise.predictor import (
    BASELINES,
    GROUP_BY,
    PREDICTION_COLUMNS,
    SlowdownRegressor,
    evaluate,
    grouped_folds,
    model_rows,
    ordered_rows,
    out_of_fold_predictions,
    pair_feature_names,
    predict_pairs,
    train_model,
)
from sharewise.predictor import api as predictor_api
from sharewise.predictor.folds import row_groups
from sharewise.predictor.metrics import slowdown_metrics
from sharewise.predictor.model import MODEL_SCHEMA_VERSION, sidecar_path
from sharewise.predictor.profile_join import profile_index
from sharewise.predictor.structure import OFFSET_OF

FAST = {"n_estimators": 15, "max_depth": 3}


def synthetic(n_workloads: int = 6, devices: tuple[str, ...] = ("dev0", "dev1"), seed: int = 0):
    """Profiles and pairs of ``n_workloads`` workloads in families of two, slowdown = f(busy fractions)."""
    rng = np.random.default_rng(seed)
    names = [f"w{i}" for i in range(n_workloads)]
    busy = dict(zip(names, rng.uniform(0.2, 0.95, n_workloads), strict=True))
    profiles, pairs = [], []
    for d, device in enumerate(devices):
        for i, w in enumerate(names):
            step = 10.0 * (1 + i) * (1 + d)
            profiles.append(
                {
                    "workload": w,
                    "family": f"fam{i // 2}",
                    "batch_size": 8,
                    "device_kind": "cpu",
                    "device_name": device,
                    "mode": "cpu",
                    "host": "h",
                    "torch_version": "2",
                    "created_at": "2024-01-01T00:00:00",
                    "iter_time_ms": step,
                    "throughput": 1000.0 / step,
                    "f_busy_frac": busy[w],
                    "f_flops_per_step": 1e9 * (i + 1),
                    "f_param_bytes": 1e6 * (i + 1),
                    "f_kernels_per_step": 50.0 + i,
                    "f_launch_rate": np.nan if i == 0 else 1000.0 / (i + 1),
                }
            )
        for i, a in enumerate(names):
            for b in names[i:]:
                sa = max(1.0, busy[a] + busy[b]) * rng.uniform(0.97, 1.03)
                sb = max(1.0, busy[a] + busy[b]) * rng.uniform(0.97, 1.03)
                pairs.append(_pair(a, b, device, sa, sb))
    pairs.append({**_pair("w0", "w1", devices[0], np.nan, np.nan), "status": "oom"})
    return (
        validate_profiles(pd.DataFrame(profiles), "synthetic"),
        validate_pairs(pd.DataFrame(pairs), "synthetic"),
    )


def _pair(a, b, device, sa, sb):
    return {
        "workload_a": a,
        "workload_b": b,
        "device_kind": "cpu",
        "device_name": device,
        "mode": "cpu",
        "solo_a": 10.0,
        "solo_b": 10.0,
        "coloc_a": 10.0 / sa,
        "coloc_b": 10.0 / sb,
        "slowdown_a": sa,
        "slowdown_b": sb,
        "trials": 1,
        "cv_a": 0.01,
        "cv_b": 0.01,
        "status": "ok",
        "error": "",
        "created_at": "2024-01-01T00:00:00",
    }


@pytest.fixture(scope="module")
def data():
    return synthetic()


@pytest.fixture(scope="module")
def fitted(data):
    profiles, pairs = data
    return train_model(profiles, pairs, **FAST)


# ---- estimator contract ------------------------------------------------------------------------------------


def test_init_only_stores_parameters():
    model = SlowdownRegressor(n_estimators=7)
    assert vars(model) == model.get_params()
    assert model.get_params()["n_estimators"] == 7


def test_fit_returns_self_and_learned_state_ends_in_underscore(data):
    rows = ordered_rows(*data)
    model = SlowdownRegressor(**FAST)
    before = set(vars(model))
    assert model.fit(rows.X, rows.y) is model
    learned = set(vars(model)) - before
    assert learned and all(name.endswith("_") for name in learned)
    assert model.n_features_in_ == rows.X.shape[1]
    assert list(model.feature_names_in_) == list(rows.X.columns)


def test_predict_before_fit_raises_not_fitted(data):
    rows = ordered_rows(*data)
    for call in (SlowdownRegressor().predict, SlowdownRegressor().predict_quantiles):
        with pytest.raises(NotFittedError, match="not fitted"):
            call(rows.X)
    with pytest.raises(NotFittedError):
        SlowdownRegressor().save("model.json")


def test_get_set_params_and_clone():
    model = SlowdownRegressor()
    assert model.set_params(max_depth=2, quantiles=(0.2, 0.5, 0.8)) is model
    assert model.get_params()["max_depth"] == 2
    copy = clone(model)
    assert copy.get_params() == model.get_params() and copy is not model
    with pytest.raises(ValueError, match="Invalid parameter"):
        model.set_params(not_a_param=1)


def test_bad_parameters_and_targets(data):
    rows = ordered_rows(*data)
    with pytest.raises(ConfigError, match="0.5"):
        SlowdownRegressor(quantiles=(0.1, 0.9)).fit(rows.X, rows.y)
    with pytest.raises(ValueError, match="positive"):
        SlowdownRegressor(**FAST).fit(rows.X, -rows.y)


def test_quantiles_are_sorted_and_predict_is_the_median(fitted, data):
    rows = model_rows(fitted, *data)
    q = fitted.predict_quantiles(rows.X)
    assert q.shape == (len(rows.X), 3)
    assert np.all(np.diff(q, axis=1) >= 0) and np.all(q > 0)
    np.testing.assert_allclose(fitted.predict(rows.X), q[:, 1])
    # A float32 array (the fast path) predicts the same as the named frame.
    np.testing.assert_allclose(fitted.predict(rows.X.to_numpy(np.float32)), q[:, 1])


def test_predict_reports_unseen_and_missing_feature_names(fitted, data):
    rows = model_rows(fitted, *data)
    X = rows.X.drop(columns=["self_f_busy_frac"]).assign(self_f_new=1.0)
    with pytest.raises(ModelSchemaError) as err:
        fitted.predict(X)
    assert "self_f_new" in str(err.value) and "self_f_busy_frac" in str(err.value)
    assert "unseen" in str(err.value) and "missing" in str(err.value)
    with pytest.raises(ModelSchemaError, match="features"):
        fitted.predict(rows.X.to_numpy()[:, :5])


def test_explain_contributions_add_up_to_the_prediction(fitted, data):
    rows = model_rows(fitted, *data)
    contrib = fitted.explain(rows.X.iloc[[3]])
    # Every feature, the bias, and the structure's offset (a term of its own).
    assert "bias" in contrib.index and len(contrib) == fitted.n_features_in_ + 2
    assert f"offset: log {OFFSET_OF[fitted.structure]}" in contrib.index
    assert np.isclose(contrib.sum(), np.log(fitted.predict(rows.X.iloc[[3]])[0]), atol=1e-3)
    assert list(contrib.abs()) == sorted(contrib.abs(), reverse=True)
    with pytest.raises(ConfigError, match="one row"):
        fitted.explain(rows.X.iloc[:2])


# ---- persistence -------------------------------------------------------------------------------------------


def test_save_load_round_trip(fitted, data, tmp_path):
    rows = model_rows(fitted, *data, with_target=True)
    path = tmp_path / "m" / "model.json"
    side = fitted.save(path)
    assert side == sidecar_path(path) == tmp_path / "m" / "model.sidecar.json"
    meta = json.loads(side.read_text())
    assert meta["schema_version"] == MODEL_SCHEMA_VERSION
    assert meta["feature_names"] == list(fitted.feature_names_in_)
    assert meta["training"]["devices"] == ["dev0", "dev1"] and meta["training"]["rows"] == len(rows.X)
    assert "w3" in meta["training"]["workloads"]
    json.loads(path.read_text())  # the model itself is XGBoost JSON, not a pickle
    loaded = SlowdownRegressor.load(path)
    np.testing.assert_allclose(loaded.predict_quantiles(rows.X), fitted.predict_quantiles(rows.X), rtol=1e-6)
    assert loaded.get_params() == fitted.get_params()
    assert loaded.training_summary_ == fitted.training_summary_
    # The fitted feature state (device references, partner effects) travels in the sidecar's featurizer.
    assert set(meta["featurizer"]["device_reference"]) == {"flop_rate", "bytes_rate", "launch_rate"}
    assert "w3" in meta["featurizer"]["partner_effects"]["dev0"]
    assert loaded.featurizer_.to_dict() == fitted.featurizer_.to_dict() == meta["featurizer"]
    pd.testing.assert_frame_equal(predict_pairs(loaded, *data), predict_pairs(fitted, *data))


def test_load_rejects_other_schema_version(fitted, tmp_path):
    path = tmp_path / "model.json"
    side = fitted.save(path)
    meta = json.loads(side.read_text())
    side.write_text(json.dumps({**meta, "schema_version": MODEL_SCHEMA_VERSION + 1}))
    with pytest.raises(ModelSchemaError, match="schema version"):
        SlowdownRegressor.load(path)


def test_load_rejects_feature_mismatch_listing_names(fitted, tmp_path):
    path = tmp_path / "model.json"
    side = fitted.save(path)
    meta = json.loads(side.read_text())
    names = meta["feature_names"]
    meta["feature_names"] = [n for n in names if n != "partner_f_param_bytes"] + ["self_f_other"]
    side.write_text(json.dumps(meta))
    with pytest.raises(ModelSchemaError) as err:
        SlowdownRegressor.load(path)
    assert "partner_f_param_bytes" in str(err.value) and "self_f_other" in str(err.value)


def test_load_needs_the_sidecar_and_a_json_path(fitted, tmp_path):
    path = tmp_path / "model.json"
    fitted.save(path)
    sidecar_path(path).unlink()
    with pytest.raises(ModelSchemaError, match="sidecar"):
        SlowdownRegressor.load(path)
    with pytest.raises(ConfigError, match=".json"):
        fitted.save(tmp_path / "model.bin")


def test_predict_pairs_needs_the_model_features(fitted, data):
    profiles, pairs = data
    with pytest.raises(ModelSchemaError, match="f_busy_frac"):
        predict_pairs(fitted, profiles.drop(columns=["f_busy_frac"]), pairs)


# ---- pair features and the join ----------------------------------------------------------------------------


def test_pair_features_are_symmetric_where_they_should_be(data):
    rows = ordered_rows(*data)
    n = len(rows.X) // 2
    a, b = rows.X.iloc[:n].reset_index(drop=True), rows.X.iloc[n:].reset_index(drop=True)
    np.testing.assert_allclose(a["pair_sum_busy_frac"], b["pair_sum_busy_frac"])
    np.testing.assert_allclose(a["pair_max_busy_frac"], b["pair_max_busy_frac"])
    np.testing.assert_allclose(a["pair_log_ratio_flop_rate"], -b["pair_log_ratio_flop_rate"], atol=1e-6)
    np.testing.assert_allclose(a["self_f_busy_frac"], b["partner_f_busy_frac"])
    same = rows.meta["self_workload"] == rows.meta["partner_workload"]
    assert (rows.X["pair_same_workload"] == same.astype(float)).all()
    # A missing launch rate stays missing in the ratio instead of becoming inf or 0.
    w0 = (rows.meta["self_workload"] == "w0").to_numpy()
    assert rows.X.loc[w0, "pair_log_ratio_launch_rate"].isna().all()
    assert np.isfinite(rows.X.to_numpy(dtype=float)[~np.isnan(rows.X.to_numpy(dtype=float))]).all()


def test_indexed_features_equal_row_aligned_features(data):
    from sharewise.predictor.pair_features import base_columns, pair_feature_matrix, pair_feature_matrix_indexed

    profiles = data[0]
    base = base_columns(profiles)
    matrix = profiles[base].to_numpy(dtype=float)
    i, j = np.array([0, 3, 5, 5, 11]), np.array([1, 3, 2, 5, 0])
    fast = pair_feature_matrix_indexed(matrix, i, j, base)
    slow = pair_feature_matrix(matrix[i], matrix[j], base, i == j)
    np.testing.assert_array_equal(np.isnan(fast), np.isnan(slow))
    np.testing.assert_allclose(np.nan_to_num(fast), np.nan_to_num(slow), rtol=1e-6)


def test_feature_names_depend_only_on_the_base_columns():
    names = pair_feature_names(["iter_time_ms", "f_busy_frac"])
    assert names[:4] == [
        "self_iter_time_ms",
        "self_f_busy_frac",
        "partner_iter_time_ms",
        "partner_f_busy_frac",
    ]
    assert "pair_sum_busy_frac" in names and "pair_same_workload" in names
    assert "pair_mem_fit" not in names  # no memory columns, no memory combination


def test_profile_join_prefers_same_mode_then_latest():
    base = {
        "device_name": "d",
        "batch_size": 1,
        "device_kind": "cpu",
        "host": "",
        "torch_version": "",
        "iter_time_ms": 1.0,
        "throughput": 1.0,
        "family": "f",
    }
    profiles = pd.DataFrame(
        [
            {**base, "workload": "a", "mode": "cpu", "created_at": "2024-01-03"},
            {**base, "workload": "a", "mode": "mps", "created_at": "2024-01-01"},
            {**base, "workload": "a", "mode": "mps", "created_at": "2024-01-02"},
        ]
    )
    assert profile_index(profiles, ["a"], ["d"], ["mps"])[0] == 2
    assert profile_index(profiles, ["a"], ["d"], ["timeslice"])[0] == 0  # no same mode: the latest
    assert profile_index(profiles, ["a", "zz"], ["d", "d"])[1] == -1


def test_pair_without_profile_is_a_dataset_error(data):
    profiles, pairs = data
    with pytest.raises(DatasetError, match="w5"):
        ordered_rows(profiles[profiles["workload"] != "w5"], pairs)


# ---- grouped evaluation ------------------------------------------------------------------------------------


@pytest.mark.parametrize("group_by", GROUP_BY)
def test_grouped_split_leaks_nothing(data, group_by):
    rows = ordered_rows(*data)
    self_g, partner_g = row_groups(rows.meta, group_by)
    folds = grouped_folds(rows.meta, group_by)
    scored = np.concatenate([f.test for f in folds])
    assert sorted(scored) == list(range(len(rows.X)))  # every ordered row scored exactly once
    for fold in folds:
        assert fold.group not in set(self_g[fold.train]) | set(partner_g[fold.train])
        assert set(self_g[fold.test]) == {fold.group}
        held_workloads = set(rows.meta["self_workload"].to_numpy()[fold.test])
        if group_by != "device":
            train_workloads = set(rows.meta["self_workload"].to_numpy()[fold.train]) | set(
                rows.meta["partner_workload"].to_numpy()[fold.train]
            )
            assert not held_workloads & train_workloads


def test_grouped_split_needs_two_groups(data):
    profiles, pairs = data
    rows = ordered_rows(profiles, pairs[pairs["device_name"] == "dev0"])
    with pytest.raises(ConfigError, match="at least 2"):
        grouped_folds(rows.meta, "device")


def test_evaluate_json_shape(data):
    result = evaluate(*data, group_by="family", random_split=True, **FAST)
    assert result["group_by"] == "family" and result["n_groups"] == 3
    assert result["n_samples"] == 2 * int((data[1]["status"] == "ok").sum())
    for key in ("mae", "mape", "spearman", "decision_accuracy", "coverage_p10_p90"):
        assert isinstance(result["model"][key], float)
    assert set(result["baselines"]) == set(BASELINES)
    for metrics in result["baselines"].values():
        assert {"mae", "mape"} <= set(metrics)
    assert result["random_split"]["optimistic"] is True
    json.dumps(result)


def test_metrics_on_a_literal_case():
    m = slowdown_metrics(
        np.array([1.0, 2.0, 1.5, 1.5]), np.array([1.0, 1.0, 1.5, 3.0]), np.array([0, 0, 1, 1])
    )
    assert m["mae"] == pytest.approx(0.625)
    assert m["mape"] == pytest.approx((0 + 50 + 0 + 100) / 4)
    # pair 0: measured 1 + 0.5 > 1 and predicted 2 > 1 agree; pair 1: 1.33 > 1 vs 1.0 disagree
    assert m["decision_accuracy"] == pytest.approx(50.0)


# ---- table API ---------------------------------------------------------------------------------------------


def test_predict_pairs_one_row_per_input(fitted, data):
    profiles, _ = data
    query = pd.DataFrame(
        {"workload_a": ["w1", "w2", "w0"], "workload_b": ["w3", "w2", "w5"], "device_name": "dev1"}
    )
    out = predict_pairs(fitted, profiles, query)
    assert list(out.columns) == list(PREDICTION_COLUMNS)
    assert list(out["workload_a"]) == ["w1", "w2", "w0"] and len(out) == 3
    values = out[[c for c in PREDICTION_COLUMNS if c.startswith("p")]].to_numpy()
    assert (values > 0).all()
    assert (out["p10_a"] <= out["p50_a"]).all() and (out["p50_b"] <= out["p90_b"]).all()
    with pytest.raises(DatasetError, match="device_name"):
        predict_pairs(fitted, profiles, query.drop(columns=["device_name"]))
    single = predict_pairs(
        fitted, profiles[profiles["device_name"] == "dev0"], query.drop(columns=["device_name"])
    )
    assert set(single["device_name"]) == {"dev0"}


def test_predict_pairs_matches_row_by_row_prediction(fitted, data):
    profiles, pairs = data
    query = pd.concat([pairs, pairs.iloc[::-1]], ignore_index=True)  # repeated pairs share one prediction
    out = predict_pairs(fitted, profiles, query)
    rows = model_rows(fitted, profiles, query)
    q = fitted.predict_quantiles(rows.X)
    n = len(query)
    np.testing.assert_allclose(out[["p10_a", "p50_a", "p90_a"]].to_numpy(), q[:n], rtol=1e-6)
    np.testing.assert_allclose(out[["p10_b", "p50_b", "p90_b"]].to_numpy(), q[n:], rtol=1e-6)


def test_out_of_fold_models_never_see_either_group(data, monkeypatch):
    profiles, pairs = data
    train_rows = ordered_rows(profiles, pairs)
    fam = dict(zip(profiles["workload"], profiles["family"], strict=False))
    seen: list[set[str]] = []

    class Spy(SlowdownRegressor):
        def fit(self, X, y, summary=None, featurizer=None, sample_weight=None):
            meta = train_rows.meta.loc[X.index]
            seen.append(set(meta["self_family"]) | set(meta["partner_family"]))
            return super().fit(X, y, summary, featurizer, sample_weight)

        def predict_quantiles(self, X, devices=None):
            held = cand.meta.loc[X.index]
            groups = set(held["self_family"]) | set(held["partner_family"])
            assert not groups & seen[-1], (groups, seen[-1])
            return super().predict_quantiles(X, devices=devices)

    cand = ordered_rows(profiles, pairs[pairs["status"] == "ok"], with_target=False)
    monkeypatch.setattr(predictor_api, "SlowdownRegressor", Spy)
    out = out_of_fold_predictions(profiles, pairs, group_by="family", **FAST)
    ok = pairs[pairs["status"] == "ok"].reset_index(drop=True)
    assert list(out.columns) == list(PREDICTION_COLUMNS) and len(out) == len(ok)
    assert list(out["workload_a"]) == list(ok["workload_a"])
    assert len(seen) == 6  # unordered family pairs among 3 families, same-family pairs included
    assert not out.isna().any().any()
    assert {fam["w0"], fam["w2"]} == {"fam0", "fam1"}


def test_out_of_fold_explains_when_nothing_is_left(data):
    profiles, pairs = data
    few = pairs[pairs["workload_a"].isin(["w0", "w2"]) & pairs["workload_b"].isin(["w0", "w2"])]
    with pytest.raises(ConfigError, match="no measured pair is left"):
        out_of_fold_predictions(profiles, few, group_by="family", **FAST)


def test_plots_are_written(data, tmp_path):
    from sharewise.predictor import cross_validate
    from sharewise.predictor.plots import plot_evaluation

    cv = cross_validate(ordered_rows(*data), group_by="family", **FAST)
    paths = plot_evaluation(cv, tmp_path / "fig")
    assert [p.name for p in paths] == ["predicted_vs_measured.png", "error_by_group.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)


# ---- CLI ---------------------------------------------------------------------------------------------------


@pytest.fixture()
def dataset_dir(data, tmp_path):
    ds = Dataset(tmp_path / "ds")
    ds.write_profiles(data[0])
    ds.write_pairs(data[1])
    return ds.path


def run_cli(args, capsys):
    from sharewise.cli import main

    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_train_predict_evaluate(dataset_dir, tmp_path, capsys):
    model = tmp_path / "model.json"
    code, out, err = run_cli(["train", str(dataset_dir), "--out", str(model)], capsys)
    assert code == 0, err
    assert model.is_file() and sidecar_path(model).is_file()
    code, out, err = run_cli(
        [
            "predict",
            "--model",
            str(model),
            "--data",
            str(dataset_dir),
            "w1",
            "w4",
            "--device",
            "dev0",
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    result = json.loads(out)
    assert result["a"]["workload"] == "w1" and result["b"]["partner"] == "w1"
    assert result["a"]["p10"] <= result["a"]["p50"] <= result["a"]["p90"]
    # At most --top terms, each one that moved the prediction (a model without trees has its offset alone).
    contributions = result["a"]["contributions"]
    assert 1 <= len(contributions) <= 5 and all(c["contribution"] != 0 for c in contributions)
    code, out, err = run_cli(
        ["predict", "--model", str(model), "--data", str(dataset_dir), "w1", "w4"], capsys
    )
    assert code == 0 and "dev0" in out and "dev1" in out and "why" in out
    code, out, err = run_cli(["evaluate", str(dataset_dir), "--group-by", "family", "--json"], capsys)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["n_groups"] == 3 and set(summary["baselines"]) == set(BASELINES)
    code, out, err = run_cli(
        ["evaluate", str(dataset_dir), "-g", "device", "--random-split", "--plot", str(tmp_path / "f")],
        capsys,
    )
    assert code == 0 and "optimistic" in out and (tmp_path / "f" / "error_by_group.png").is_file()


def test_cli_predict_warns_on_a_device_without_training_pairs(data, tmp_path, capsys):
    profiles, pairs = data
    ds = Dataset(tmp_path / "ds")
    ds.write_profiles(profiles)
    ds.write_pairs(pairs[pairs["device_name"] == "dev0"])
    model = tmp_path / "model.json"
    code, out, err = run_cli(["train", str(ds.path), "--out", str(model)], capsys)
    assert code == 0, err
    base = ["predict", "--model", str(model), "--data", str(ds.path), "w1", "w4", "--json", "--device"]
    code, out, err = run_cli([*base, "dev1"], capsys)
    assert code == 0, err
    assert json.loads(out)["note"].startswith("device(s) ['dev1'] have no training pair")
    assert err.startswith("warning:") and "['dev0']" in err
    code, out, err = run_cli([*base, "dev0"], capsys)
    assert code == 0 and json.loads(out)["note"] is None and "warning" not in err


def test_cli_errors_are_one_line_exit_2(dataset_dir, tmp_path, capsys):
    code, out, err = run_cli(["evaluate", str(dataset_dir), "--group-by", "team"], capsys)
    assert (
        code == 2 and err.startswith("error: ") and "workload" in err and len(err.strip().splitlines()) == 1
    )
    code, out, err = run_cli(
        ["predict", "--model", str(tmp_path / "none.json"), "--data", str(dataset_dir), "w1", "w2"], capsys
    )
    assert code == 2 and "not found" in err and len(err.strip().splitlines()) == 1
    code, out, err = run_cli(["train", str(tmp_path / "missing"), "--out", str(tmp_path / "m.json")], capsys)
    assert code == 2 and "does not exist" in err


@pytest.mark.parametrize(
    "command", [["train"], ["evaluate"], ["predict"], ["import", "gavel"], ["import", "csv"]]
)
def test_cli_help_has_an_example(command, capsys):
    code, out, err = run_cli([*command, "--help"], capsys)
    assert code == 0 and "Example" in out
