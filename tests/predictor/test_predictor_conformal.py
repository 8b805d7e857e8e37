"""Tests of the conformal p10/p90 (grouped out-of-fold calibration, kept in the sidecar), the workload shift,
honest baselines, and the lazy predictor package."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from test_predictor import FAST, synthetic

from sharewise.errors import ModelSchemaError
from sharewise.predictor import SlowdownRegressor, calibrate_model, ordered_rows, predict_pairs, train_model
from sharewise.predictor.calibration import ConformalCalibration
from sharewise.predictor.conformal import calibrate_rows, conformal_quantile, fit_calibration
from sharewise.predictor.evaluation import cross_validate, summarize
from sharewise.predictor.folds import calibration_folds, grouped_folds, subset
from sharewise.predictor.shift import VARIANCE_FLOOR, WorkloadShift, _components, posterior_sd


@pytest.fixture(scope="module")
def data():
    return synthetic(n_workloads=8)


@pytest.fixture(scope="module")
def rows(data):
    return ordered_rows(*data)


def test_conformal_quantile_is_the_next_score_up():
    assert conformal_quantile(np.arange(1.0, 11.0), 0.1) == 10.0
    assert conformal_quantile(np.arange(1.0, 11.0), 0.5) == 6.0  # 0.5 * 9 = 4.5 -> index 5
    assert conformal_quantile(np.array([np.nan, 2.0]), 0.1) == 2.0
    assert conformal_quantile(np.array([]), 0.1) == 0.0


def test_fit_calibration_on_a_literal_case():
    # 10 rows, raw interval [-0.1, 0.1] in log space around 0; measured log slowdowns 0.0 .. 0.45.
    log_y = np.linspace(0.0, 0.45, 10)
    log_q = np.tile([-0.1, 0.0, 0.1], (10, 1))
    meta = pd.DataFrame(
        {"self_workload": [f"w{i % 5}" for i in range(10)], "partner_workload": "p", "device_name": "d",
         "self_family": [f"w{i % 5}" for i in range(10)], "partner_family": "p", "pair_id": range(10)}
    )
    cal = fit_calibration(log_q, np.exp(log_y), meta, "workload", n_groups=5, levels=(0,))
    # Upper scores log_y - 0.1: the 0.9 quantile ("higher") is the largest, 0.35; lower: -0.1 - log_y -> -0.1.
    assert cal.upper[0] == pytest.approx(0.35)
    assert cal.lower[0] == pytest.approx(-0.1)
    q = cal.apply(log_q.copy())
    assert np.allclose(q[:, 2], 0.45) and np.allclose(q[:, 0], 0.0)  # narrowed to the median, never past it


def test_each_device_gets_its_own_corrections_on_a_literal_case():
    # 120 rows per device, raw interval [-0.1, 0.1] around 0. Device "calm" errs by 0.01 k (k = 1..120),
    # device "wild" by 0.05 k, alternating in sign; "rare" has too few rows for corrections of its own.
    k = np.arange(1, 121)
    errors = {"calm": 0.01 * k * (-1.0) ** k, "wild": 0.05 * k * (-1.0) ** k, "rare": np.array([0.3, -0.3])}
    log_y = np.concatenate(list(errors.values()))
    device = np.concatenate([[d] * len(e) for d, e in errors.items()])
    n = len(log_y)
    meta = pd.DataFrame(
        {"self_workload": [f"w{i % 6}" for i in range(n)], "partner_workload": "p", "device_name": device,
         "self_family": [f"w{i % 6}" for i in range(n)], "partner_family": "p", "pair_id": range(n)}
    )
    log_q = np.tile([-0.1, 0.0, 0.1], (n, 1))
    cal = fit_calibration(log_q, np.exp(log_y), meta, "workload", n_groups=6, levels=(0,))
    assert set(cal.devices) == {"calm", "wild"}
    # Upper scores log y - 0.1 of "calm": the 60 odd k (negative errors) sort below the 60 even ones; the 0.9
    # quantile ("higher": sorted position ceil(0.9 * 119) = 108) is the 49th even k, 98: 0.98 - 0.1 = 0.88.
    # "wild": 0.05 * 98 - 0.1 = 4.8.
    assert cal.devices["calm"]["upper"][0] == pytest.approx(0.88)
    assert cal.devices["wild"]["upper"][0] == pytest.approx(4.8)
    lo, hi = cal.corrections(np.zeros(3, dtype=np.int64), np.array(["calm", "wild", "rare"]))
    assert hi[0] == pytest.approx(0.88) and hi[1] == pytest.approx(4.8) and hi[2] == pytest.approx(cal.upper[0])
    # Each device's interval now covers about 80% of its own rows; the pooled one over-covers "calm".
    for d in ("calm", "wild"):
        rows = device == d
        own = cal.apply(log_q[rows].copy(), devices=device[rows])
        pooled = cal.apply(log_q[rows].copy())
        y = log_y[rows]
        inside = lambda q, y=y: np.mean((y >= q[:, 0]) & (y <= q[:, 2]))  # noqa: E731
        assert inside(own) == pytest.approx(0.8, abs=0.03)
        if d == "calm":
            assert inside(pooled) == 1.0
    again = ConformalCalibration.from_dict(json.loads(json.dumps(cal.to_dict())))
    assert again == cal
    broken = cal.to_dict()
    broken["devices"]["calm"]["upper"] = {"0": 0.1, "4": 0.2}
    with pytest.raises(ModelSchemaError, match="levels differ"):
        ConformalCalibration.from_dict(broken)


def test_calibration_levels_and_json_round_trip():
    cal = ConformalCalibration(lower={0: 0.3, 2: 0.2, 8: 0.1}, upper={0: 0.4, 2: 0.3, 8: 0.2}, shrinkage={"a": 1.0})
    assert list(cal.level_of([0, 1, 2, 5, 9])) == [0, 0, 2, 2, 8]
    lo, hi = cal.corrections(np.array([1, 8]))
    assert list(lo) == [0.3, 0.1] and list(hi) == [0.4, 0.2]
    again = ConformalCalibration.from_dict(json.loads(json.dumps(cal.to_dict())))
    assert again == cal
    with pytest.raises(ModelSchemaError, match="level '0'"):
        ConformalCalibration.from_dict({"lower": {"1": 0.1}, "upper": {"1": 0.1}})


def test_calibration_folds_never_train_on_a_held_or_excluded_group(rows):
    for held, train, test in calibration_folds(rows.meta, "family", exclude="fam0"):
        fams = set(rows.meta["self_family"].iloc[train]) | set(rows.meta["partner_family"].iloc[train])
        assert not fams & (held | {"fam0"})
        assert set(rows.meta["self_family"].iloc[test]) <= held - {"fam0"}
    folds = calibration_folds(rows.meta, "workload", max_folds=3)
    assert len(folds) == 3 and sorted(w for h, _, _ in folds for w in h) == [f"w{i}" for i in range(8)]


def test_nested_calibration_with_the_shared_cache_equals_calibrating_the_subset(rows):
    cache: dict = {}
    for fold in grouped_folds(rows.meta, "family")[:2]:
        shared = calibrate_rows(rows, "family", exclude=fold.group, cache=cache, levels=(0, 1), **FAST)
        alone = calibrate_rows(subset(rows, fold.train), "family", levels=(0, 1), **FAST)
        assert shared == alone
    assert len(cache) == 3 + 2  # fam0 with fam1, fam2, fam3; fam1 with fam2, fam3 (fam0-fam1 shared)


def test_cross_validation_reports_calibrated_coverage_per_group(rows):
    summary = summarize(cross_validate(rows, group_by="family", **FAST))
    model = summary["model"]
    assert {"coverage_p10_p90", "coverage_p10_p90_uncalibrated"} <= set(model)
    assert all("model_coverage_p10_p90" in e for e in summary["per_group"].values())
    raw = summarize(cross_validate(rows, group_by="family", calibrate=False, **FAST))["model"]
    assert raw["coverage_p10_p90"] == pytest.approx(model["coverage_p10_p90_uncalibrated"])
    assert raw["mape"] == pytest.approx(model["mape"])  # calibration moves the interval, never the p50


def test_calibrated_model_saves_and_loads_its_calibration_and_shift(data, tmp_path):
    profiles, pairs = data
    model = calibrate_model(train_model(profiles, pairs, **FAST), profiles, pairs, group_by="family")
    assert model.calibration_ is not None and set(model.calibration_.lower) == {0, 1, 2, 4, 8}
    meta = ordered_rows(profiles, pairs[pairs["workload_a"] == "w3"]).meta
    model.shift_ = WorkloadShift.fit(np.full(len(meta), 0.2), meta, model.calibration_.shrinkage, ["w3"])
    side = json.loads(model.save(tmp_path / "m.json").read_text())
    assert side["calibration"]["group_by"] == "family" and "w3" in side["shift"]["counts"]
    loaded = SlowdownRegressor.load(tmp_path / "m.json")
    query = pd.DataFrame({"workload_a": ["w3", "w0"], "workload_b": ["w5", "w1"], "device_name": "dev1"})
    pd.testing.assert_frame_equal(predict_pairs(loaded, profiles, query), predict_pairs(model, profiles, query))
    plain = train_model(profiles, pairs, **FAST)
    wide, narrow = predict_pairs(model, profiles, query), predict_pairs(plain, profiles, query)
    # w0 and w1 have no shift: only their interval moves; w3 as self moves by its shift on dev1.
    assert np.allclose(wide.loc[1, ["p50_a", "p50_b"]], narrow.loc[1, ["p50_a", "p50_b"]])
    ratio = wide.loc[0, "p50_a"] / narrow.loc[0, "p50_a"]
    assert ratio == pytest.approx(np.exp(model.shift_.tables["self"]["dev1"]["w3"]))


def test_workload_shift_on_a_literal_case():
    meta = pd.DataFrame(
        {"self_workload": ["new", "new", "old"], "partner_workload": ["a", "b", "new"], "device_name": ["d", "d", "e"]}
    )
    shrink = {f"{side}_{k}": 0.1 for side in ("self", "partner") for k in ("tau_w", "tau_d", "sigma")}
    shift = WorkloadShift.fit(np.array([0.2, 0.4, 0.5]), meta, shrink, ["new"])
    # Both rows are on device d, so they share its term: v = 1 / (0.1 + 2 * 0.1), a = 0.6 v / (10 + 2 v) = 0.12
    # (two rows on two devices would give 0.6 / (2 + 2) = 0.15); lambda_d = 1: b = (0.08 + 0.28) / 3 = 0.12.
    assert shift.tables["self"]["d"]["new"] == pytest.approx(0.24)
    assert shift.defaults["self"]["new"] == pytest.approx(0.12)
    # As a partner: one row (old next to new on e): a = 0.5 / 3, b = (0.5 - a) / 2.
    a = 0.5 / 3
    assert shift.tables["partner"]["e"]["new"] == pytest.approx(a + (0.5 - a) / 2)
    query = pd.DataFrame({"self_workload": ["new", "new", "old"], "partner_workload": ["x", "x", "y"],
                          "device_name": ["d", "f", "d"]})
    assert np.allclose(shift.log_shift(query), [0.24, 0.12, 0.0])  # device f unmeasured: workload level
    spread = WorkloadShift.fit(np.array([0.2, 0.4]), meta.iloc[:2].assign(device_name=["d", "e"]), shrink, ["new"])
    assert spread.defaults["self"]["new"] == pytest.approx(0.15)
    assert list(shift.revealed(np.array(["new", "old"]))) == [2, 0]
    sd = posterior_sd(shrink, np.array([0.0, 2.0]), np.array([0.0, 2.0]))
    assert sd[0] == pytest.approx(np.sqrt(0.2)) and sd[1] == pytest.approx(np.sqrt(0.1 * 2 / 4 + 0.1 / 3))
    assert WorkloadShift.from_dict(json.loads(json.dumps(shift.to_dict()))) == shift


def _random_effects(seed: int, tau_w: float, tau_d: float, sigma: float, n_workloads: int = 400):
    """Residuals drawn from the shift's model: a level per workload, one per (workload, device), noise;
    two or three devices per workload and 1-6 rows per cell, so the cells' shares of a workload differ."""
    rng = np.random.default_rng(seed)
    w, d, r = [], [], []
    for i in range(n_workloads):
        theta = rng.normal(0, np.sqrt(tau_w))
        for dev in ["d0", "d1", "d2"][: rng.integers(2, 4)]:
            n = int(rng.integers(1, 7))
            level = theta + rng.normal(0, np.sqrt(tau_d))
            w += [f"w{i}"] * n
            d += [dev] * n
            r += list(level + rng.normal(0, np.sqrt(sigma), n))
    return np.array(r), np.array(w), np.array(d)


def test_shrinkage_components_recover_the_variances_they_were_drawn_with():
    # The plain mean square of cell-minus-workload deviations sees (D - 1) / D of tau_d (it gave 0.019 here,
    # half the truth, and 0.027 for tau_w); the expectation-weighted estimate is unbiased.
    est = [_components(*_random_effects(seed, 0.02, 0.04, 0.05)) for seed in range(6)]
    assert np.mean([e["tau_d"] for e in est]) == pytest.approx(0.04, rel=0.15)
    assert np.mean([e["tau_w"] for e in est]) == pytest.approx(0.02, rel=0.2)
    assert np.mean([e["sigma"] for e in est]) == pytest.approx(0.05, rel=0.05)


def test_shrinkage_components_on_a_literal_case():
    # One workload, one row on each of two devices: the deviations are +-0.2, each cell holds half the rows,
    # so E[dev^2] = tau_d * (1 - 2 * 0.5 + 0.5) = tau_d / 2, less the (floor) noise: tau_d = 2 * 0.04 - 1e-4.
    parts = _components(np.array([0.3, -0.1]), np.array(["w", "w"]), np.array(["a", "b"]))
    assert parts["sigma"] == VARIANCE_FLOOR
    assert parts["tau_d"] == pytest.approx(2 * (0.04 - VARIANCE_FLOOR * 0.5))
    # One device per workload says nothing about devices: tau_d stays at the floor.
    one = _components(np.array([0.3, 0.1, -0.2]), np.array(["w", "w", "v"]), np.array(["a", "a", "a"]))
    assert one["tau_d"] == VARIANCE_FLOOR


def test_util_sum_is_not_applicable_without_a_utilization_column(data):
    profiles, pairs = data
    rows = ordered_rows(profiles.drop(columns=["f_busy_frac"]), pairs)
    summary = summarize(cross_validate(rows, group_by="family", calibrate=False, **FAST))
    util = summary["baselines"]["util_sum"]
    assert util["mape"] is None and "f_busy_frac" in util["not_applicable"]
    assert all(e["util_sum_mape"] is None for e in summary["per_group"].values())
    assert summary["baselines"]["median"]["mape"] is not None


def test_the_cli_reads_option_names_without_sklearn_or_xgboost():
    code = (
        "import sys, json; import sharewise.cli.predictor as p, sharewise.cli.policy, sharewise.cli.options as o; "
        "assert o.GROUP_BY == p.GROUP_BY; "
        "print(json.dumps(sorted(m for m in ('sklearn', 'xgboost', 'scipy') if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_lazy_package_exports_resolve():
    import sharewise.predictor as predictor

    for name in predictor.__all__:
        assert getattr(predictor, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        predictor.nope  # noqa: B018


def test_out_of_fold_predictions_can_be_calibrated_without_moving_the_median(data):
    from sharewise.predictor import out_of_fold_predictions

    profiles, pairs = data
    raw = out_of_fold_predictions(profiles, pairs, group_by="family", holdout="self", **FAST)
    cal = out_of_fold_predictions(profiles, pairs, group_by="family", holdout="self", calibrate=True, **FAST)
    assert np.allclose(raw["p50_a"], cal["p50_a"]) and not np.allclose(raw["p90_a"], cal["p90_a"])
    assert (cal["p10_a"] <= cal["p50_a"]).all() and (cal["p50_a"] <= cal["p90_a"]).all()
