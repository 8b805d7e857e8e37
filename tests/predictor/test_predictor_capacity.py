"""Tests of the model's structure and capacity: the structured offset, precision weights, the grouped choice among
structures, and the model card that ``train`` prints (its claims checked against the booster itself)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli
from test_predictor import synthetic
from typer.testing import CliRunner

from sharewise.cli import app
from sharewise.datasets import read_datasets
from sharewise.predictor import SlowdownRegressor, ordered_rows, train_model
from sharewise.predictor.capacity import select_structure, tree_splits
from sharewise.predictor.choices import STRUCTURES
from sharewise.predictor.conformal import MIN_LEVEL_SCORES, fit_calibration
from sharewise.predictor.structure import (
    MIN_TERM_ROWS,
    OFFSET_OF,
    PAIR_SHARE_SLOWDOWN,
    apply_structure,
    describe_structure,
    fit_knob_slope,
    fit_structure,
    precision_weights,
)

pytest.importorskip("xgboost")

#: The README's GPU quick start measures three workloads; these three have every pair among them in
#: ``reference-h200`` (6 pairs, 12 ordered rows).
QUICK_START = ("resnet18", "vgg16", "mobilenet_v2")


def _h200(workloads=None):
    profiles, pairs = read_datasets(["reference-h200"])
    pairs = pairs[pairs["mode"] == "timeslice"]
    if workloads is not None:
        pairs = pairs[pairs["workload_a"].isin(workloads) & pairs["workload_b"].isin(workloads)]
    return profiles, pairs


# ---- the structured offset, by hand ------------------------------------------------------------------------


def _rows(sensitivity, pressure, y, device="g", mode="timeslice"):
    X = pd.DataFrame({"self_f_probe_slowdown": sensitivity, "partner_f_probe_pressure": pressure})
    meta = pd.DataFrame({"device_name": device, "mode": mode}, index=X.index)
    return X, np.asarray(y, dtype=np.float64), meta


def test_the_structured_offset_recovers_a_sensitivity_times_pressure_law():
    # log s = log probe + 0.05 + 0.5 * (log pressure - mean): the fit finds the level and the coefficient.
    rng = np.random.default_rng(0)
    sens, press = rng.uniform(1.2, 2.0, 40), rng.uniform(1.5, 2.5, 40)
    center = np.log(press).mean()
    y = sens * np.exp(0.05 + 0.5 * (np.log(press) - center))
    X, y, meta = _rows(sens, press, y)
    state = fit_structure(X, y, meta)
    term = state["terms"]["partner_f_probe_pressure"]
    # (the ridge shrinks a coefficient by 1%)
    assert term["coef"] == pytest.approx(0.5, abs=0.01) and term["center"] == pytest.approx(center)
    assert state["levels"]["g|timeslice"] == pytest.approx(0.05, abs=0.005)
    probe, full, _linear = apply_structure(state, X, meta)
    np.testing.assert_allclose(np.exp(full), y, rtol=0.01)
    # Without partner terms the level is the mean of log(y / probe): the probe scaled by a constant.
    np.testing.assert_allclose(probe - np.log(sens), np.mean(np.log(y / sens)))
    # A device and mode the fit never saw takes the pooled level; a missing pressure its training mean.
    X2 = X.iloc[:1].assign(partner_f_probe_pressure=np.nan)
    _, unseen, _ = apply_structure(state, X2, meta.iloc[:1].assign(device_name="other"))
    assert unseen[0] == pytest.approx(np.log(sens[0]) + state["pooled_level"])


def _knob_rows(n, slope, seed=0):
    """``n`` rows without the knob (slowdown = probe x e^0.1) and ``n`` under it (share cost x probe^slope x
    e^-0.2), the two kinds the featurizer gives: a row under the knob has a finite ``pair_share_slowdown``."""
    rng = np.random.default_rng(seed)
    probe = rng.uniform(1.1, 2.1, 2 * n)
    cost = np.where(np.arange(2 * n) >= n, rng.uniform(1.2, 3.0, 2 * n), np.nan)
    share = np.where(np.isfinite(cost), rng.choice([0.3, 0.5, 0.7], 2 * n), np.nan)
    y = np.where(np.isfinite(cost), cost * probe**slope * np.exp(-0.2), probe * np.exp(0.1))
    X = pd.DataFrame({"self_f_probe_slowdown": probe, PAIR_SHARE_SLOWDOWN: cost})
    meta = pd.DataFrame({"device_name": "cpu", "mode": "cpu", "self_share": share}, index=X.index)
    return X, y, meta


def test_under_the_knob_a_jobs_sensitivity_enters_with_its_fitted_slope():
    # log s = log share cost + 0.8 log probe - 0.2 under the knob, log probe + 0.1 without it: the slope is found
    # on the knob's rows alone, each kind keeps its own level, and the offset reproduces every row.
    X, y, meta = _knob_rows(30, 0.8)
    assert fit_knob_slope(X, y, meta, np.ones(len(y))) == pytest.approx(0.8, abs=0.01)
    state = fit_structure(X, y, meta)
    assert state["knob_slope"] == pytest.approx(0.8, abs=0.01)
    assert state["levels_probe"]["cpu|cpu"] == pytest.approx(0.1, abs=1e-6)
    assert state["levels_probe"]["cpu|cpu|split"] == pytest.approx(-0.2, abs=0.01)
    probe, _full, linear = apply_structure(state, X, meta)
    np.testing.assert_allclose(np.exp(probe), y, rtol=0.01)
    # ``linear`` starts from the same point: its ridge has only the two levels' gap (0.3) left, and narrows it.
    assert np.abs(linear - np.log(y)).max() < 0.3
    assert f"under the knob: log share cost + {state['knob_slope']:.2f} x log probe slowdown" in describe_structure(
        state, "offset")
    # Rows without the knob are predicted as before: the slope touches only rows under it.
    plain = fit_structure(X[meta["self_share"].isna()], y[meta["self_share"].isna()], meta[meta["self_share"].isna()])
    assert plain["knob_slope"] == 0.0 and "under the knob" not in describe_structure(plain, "offset")


def test_the_knob_slope_is_zero_where_the_rows_cannot_tell_it():
    X, y, meta = _knob_rows(MIN_TERM_ROWS - 1, 0.8)
    assert fit_knob_slope(X, y, meta, np.ones(len(y))) == 0.0  # too few rows under the knob
    X, y, meta = _knob_rows(30, 0.8)
    X["self_f_probe_slowdown"] = 1.5  # one sensitivity: nothing to fit a slope on
    assert fit_knob_slope(X, y, meta, np.ones(len(y))) == 0.0
    X, y, meta = _knob_rows(30, 4.0)  # an implausible slope is held to the range
    assert fit_knob_slope(X, y, meta, np.ones(len(y))) == 1.5


def test_precision_weights_let_a_noisy_row_count_less():
    # Three rows on the law s = probe and one noisy row far off it: weighted by its wide interval it barely
    # moves the level.
    X, y, meta = _rows([1.5, 1.6, 1.7, 1.5], [2.0, 2.0, 2.0, 2.0], [1.5, 1.6, 1.7, 3.0])
    plain = fit_structure(X, y, meta)["levels_probe"]["g|timeslice"]
    weights = precision_weights(np.array([0.02, 0.02, 0.02, 0.87]))
    weighted = fit_structure(X, y, meta, weights)["levels_probe"]["g|timeslice"]
    assert weights[3] < 0.1 < 0.9 < weights[:3].min()
    assert abs(weighted) < abs(plain) / 5
    assert precision_weights(np.array([np.nan]))[0] == 1.0  # unknown precision: a whole row


def test_ordered_rows_carry_each_slowdowns_half_width():
    profiles, pairs = _h200()
    rows = ordered_rows(profiles, pairs)
    n = len(pairs)
    np.testing.assert_allclose(rows.meta["halfwidth"].to_numpy()[:n], pairs["ci_a"].to_numpy())
    np.testing.assert_allclose(rows.meta["halfwidth"].to_numpy()[n:], pairs["ci_b"].to_numpy())
    # The CPU reference records the CV over repeats: Student's t gives the half-width.
    profiles, pairs = read_datasets(["reference"])
    rows = ordered_rows(profiles, pairs)
    assert np.isfinite(rows.meta["halfwidth"]).all() and (rows.meta["halfwidth"] > 0).all()


# ---- the choice among structures ---------------------------------------------------------------------------


def test_selection_scores_every_structure_on_the_same_folds_and_prefers_the_simpler_on_a_tie():
    profiles, pairs = synthetic(n_workloads=8, devices=("dev0",))
    rows = ordered_rows(profiles, pairs)
    selection = select_structure(rows, "workload", n_estimators=15)
    assert set(selection["scores"]) == set(STRUCTURES) and selection["chosen"] in STRUCTURES
    assert selection["folds"] == 8 and selection["rows_scored"] == len(rows.y)
    assert set(selection["baselines"]) >= {"median", "linear"}
    # The rule, by hand: a more complex structure replaces the current choice only if it gains 2% of it.
    chosen = STRUCTURES[0]
    for name in STRUCTURES[1:]:
        if selection["scores"][name] < selection["scores"][chosen] * 0.98:
            chosen = name
    assert selection["chosen"] == chosen


def test_too_few_groups_take_the_offset_and_say_why():
    profiles, pairs = synthetic(n_workloads=1, devices=("dev0",))
    rows = ordered_rows(profiles, pairs)
    selection = select_structure(rows, "workload", n_estimators=15)
    assert selection["chosen"] == "offset" and selection["scores"] == {}
    assert "too few" in selection["reason"]


# ---- the model card ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("workloads", [QUICK_START, None], ids=["quick-start-3-workloads", "reference-h200"])
def test_train_prints_a_card_whose_claims_the_booster_bears_out(workloads, tmp_path):
    profiles, pairs = _h200(workloads)
    data = tmp_path / "data"
    from sharewise.datasets.store import Dataset

    ds = Dataset(data)
    ds.write_profiles(profiles)
    ds.write_pairs(pairs)
    out = tmp_path / "model.json"
    result = CliRunner().invoke(app, ["train", str(data), "--out", str(out)])
    assert result.exit_code == 0, result.output
    model = SlowdownRegressor.load(out)
    card = json.loads(out.with_name("model.sidecar.json").read_text())["card"]
    assert card == model.card_ and card["rows"] == 2 * len(pairs)
    assert card["structure"] == model.structure and f"structure: {card['structure']}" in result.output
    # What the card says the model uses is what the booster holds: its splits, feature by feature.
    splits = tree_splits(model)
    assert card["uses"]["tree_splits"] == sum(splits.values())
    assert card["uses"]["features_with_splits"] == dict(sorted(splits.items(), key=lambda kv: -kv[1])[:10])
    if not splits:
        assert "trees: no split" in result.output and "corrected by trees" not in card["summary"]
    assert model.feature_names_in_[model.offset_index_] == OFFSET_OF[model.structure]
    if model.structure in ("offset", "linear"):
        assert card["uses"]["partner_terms"] == {}
    else:
        assert card["uses"]["partner_terms"] and "partner" in card["summary"]
    if model.structure == "linear":
        assert "ridge regression" in card["summary"]
    # Every candidate and baseline scored on the same folds, printed beside the choice.
    for name in card["selection"]["scores"]:
        assert name in result.output
    assert "baseline: median" in result.output
    if workloads == QUICK_START:
        # Three workloads cannot show the partner: the card says so and names the remedy.
        assert model.structure == "offset"
        assert any("suggest" in w for w in card["warnings"]) and "warning:" in result.output


def test_one_pair_trains_with_a_warning(tmp_path):
    profiles, pairs = _h200(("resnet18",))
    assert len(pairs) == 1
    model = train_model(profiles, pairs)
    assert model.structure == "offset" and any("too few" in w for w in model.card_["warnings"])


def test_a_fixed_structure_is_kept_and_a_bad_one_refused(capsys):
    profiles, pairs = _h200()
    for structure in STRUCTURES:
        model = train_model(profiles, pairs, structure=structure, n_estimators=15)
        assert model.structure == structure == model.card_["structure"]
        if structure != "trees":
            assert tree_splits(model) == {}
    from sharewise.errors import ConfigError

    with pytest.raises(ConfigError, match="auto, offset, structured, linear, trees"):
        train_model(profiles, pairs, structure="forest")
    assert run_cli(["evaluate", "reference-h200", "--structure", "forest"]) == 2
    assert "--structure must be one of" in capsys.readouterr().err


@pytest.mark.slow
def test_evaluate_json_carries_the_card_and_each_folds_structure():
    result = CliRunner().invoke(app, ["evaluate", "reference-h200", "--group-by", "workload", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output[result.output.index("{"):])
    assert summary["card"]["structure"] in STRUCTURES and summary["card"]["rows"] == summary["n_samples"]
    assert all(fold["structure"] in STRUCTURES for fold in summary["folds"])


# ---- intervals after a few revealed pairs ------------------------------------------------------------------


def test_a_level_with_few_scores_is_pulled_toward_level_zero():
    # One workload per group, each with 6 rows; revealing 1 of them leaves few scores at level 1.
    rng = np.random.default_rng(1)
    n = 60
    meta = pd.DataFrame(
        {
            "self_workload": np.repeat([f"w{i}" for i in range(10)], 6),
            "partner_workload": np.tile([f"p{i}" for i in range(6)], 10),
            "device_name": "d",
            "pair_id": np.arange(n),
            "direction": 0,
        }
    )
    meta["self_family"], meta["partner_family"] = meta["self_workload"], meta["partner_workload"]
    level = np.repeat(rng.normal(0, 0.3, 10), 6)  # each workload's own level: revealing it tells a lot
    log_y = level + rng.normal(0, 0.02, n)
    log_q = np.zeros((n, 3))  # intervals of width zero: every correction is what the scores ask for
    calibration = fit_calibration(log_q, np.exp(log_y), meta, "workload", 10, levels=(0, 1))
    # Level 1's own corrections are about the noise's (the shift learns each workload's level, 0.02 sd), level 0's
    # about the levels' spread (0.3 sd); 150 level-1 scores (3 repeats of 10 workloads x 5 rows) pull level 1 a
    # quarter of the way toward level 0: MIN_LEVEL_SCORES / (150 + MIN_LEVEL_SCORES).
    pull = MIN_LEVEL_SCORES / (150 + MIN_LEVEL_SCORES)
    for side in (calibration.lower, calibration.upper):
        assert pull * side[0] < side[1] < side[0]
        assert side[1] - pull * side[0] < 0.1  # what is left is level 1's own (small) correction
