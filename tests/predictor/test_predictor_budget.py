"""Tests of budgeted measurement: the replay protocol of ``evaluate --budget``, its strategies, matrix
completion, ``suggest_pairs`` and the cheap refit, and their CLI commands."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from test_predictor import FAST, run_cli, synthetic

from sharewise.datasets.store import Dataset
from sharewise.errors import ConfigError, DatasetError
from sharewise.predictor import (
    calibrate_model,
    ordered_rows,
    predict_pairs,
    refit_on_pairs,
    suggest_pairs,
    train_model,
)
from sharewise.predictor.budget import STRATEGIES, FoldContext, evaluate_budget, reverse_rows
from sharewise.predictor.choices import BUDGET_STRATEGIES
from sharewise.predictor.completion import complete_slowdowns, soft_impute
from sharewise.predictor.evaluation import cross_validate, summarize
from sharewise.predictor.folds import Fold


@pytest.fixture(scope="module")
def data():
    """Eight workloads in four families of two, on two devices (``test_predictor.synthetic``)."""
    return synthetic(n_workloads=8)


@pytest.fixture(scope="module")
def rows(data):
    """Both directions of every measured pair, joined to the profiles."""
    return ordered_rows(*data)


@pytest.fixture(scope="module")
def curve(rows):
    return evaluate_budget(rows, group_by="family", budgets=(0, 1, 2), **FAST)


@pytest.fixture(scope="module")
def model(data):
    profiles, pairs = data
    return calibrate_model(train_model(profiles, pairs, **FAST), profiles, pairs, group_by="family")


def test_the_cli_names_are_the_registry():
    assert tuple(STRATEGIES) == BUDGET_STRATEGIES


def test_each_held_out_workload_reveals_k_pairs_and_is_scored_on_the_rest(curve, rows):
    total = len(rows.y)
    for k in (0, 1, 2):
        for name, m in curve[k]["strategies"].items():
            assert m["n"] == total - 8 * k, (k, name)  # 8 workloads, k self rows each leave the scored set
        assert curve[k]["n_common"] <= total - 8 * k
    assert curve[1]["strategies"]["matrix-completion"]["coverage_p10_p90"] is None
    assert curve[1]["strategies"]["active"]["coverage_p10_p90"] is not None


def test_budget_zero_is_the_plain_cross_validation(curve, rows):
    plain = summarize(cross_validate(rows, group_by="family", **FAST))["model"]
    for name in ("active", "random", "reference"):
        assert curve[0]["strategies"][name]["mape"] == pytest.approx(plain["mape"])
        assert curve[0]["strategies"][name]["coverage_p10_p90"] == pytest.approx(plain["coverage_p10_p90"])


def test_random_reveals_are_seeded(rows):
    def once():
        return evaluate_budget(rows, group_by="family", budgets=(1,), strategies=("random",), calibrate=False, **FAST)

    assert once() == once()
    with pytest.raises(ConfigError, match="unknown strategy"):
        evaluate_budget(rows, budgets=(1,), strategies=("oracle",))
    with pytest.raises(ConfigError, match="non-negative"):
        evaluate_budget(rows, budgets=(-1,))


def test_reference_strategy_takes_the_most_measured_partner_on_every_device_first():
    # Held-out "new" has candidates next to a, b on two devices; "b" has more training rows than "a".
    meta = pd.DataFrame(
        {
            "self_workload": ["new", "new", "new", "new", "b", "b", "a"],
            "partner_workload": ["a", "b", "a", "b", "a", "x", "x"],
            "device_name": ["d1", "d1", "d2", "d2", "d1", "d1", "d1"],
            "pair_id": range(7),
            "direction": 0,
        }
    )
    fold = Fold(group="new", train=np.array([4, 5, 6]), test=np.arange(4))
    ctx = FoldContext(
        data=type("R", (), {"meta": meta})(),
        fold=fold,
        candidates={"new": np.arange(4)},
        log_q=np.zeros((7, 3)),
        reverse=np.arange(7),
        shrinkage={},
        rng=np.random.default_rng(0),
    )
    pick, _ = STRATEGIES["reference"]
    assert pick(ctx, 3) == {"new": [1, 3, 0]}  # b on d1, b on d2, then a on d1


def test_reverse_rows_pairs_the_two_directions(rows):
    reverse = reverse_rows(rows.meta)
    assert (rows.meta["pair_id"].to_numpy()[reverse] == rows.meta["pair_id"].to_numpy()).all()
    assert (reverse[reverse] == np.arange(len(reverse))).all()


def test_soft_impute_completes_a_low_rank_matrix():
    full = np.outer([1.0, 2.0, 3.0, 4.0], [1.0, 0.5, 2.0, 1.5])
    observed = np.ones(full.shape, dtype=bool)
    observed[2, 1] = False
    completed = soft_impute(full, observed, lam=0.01, rank=1)
    assert completed[2, 1] == pytest.approx(full[2, 1], rel=0.05)


def test_completion_of_a_workload_without_entries_is_its_partners_mean():
    known = pd.DataFrame(
        {"self_workload": ["a", "b"], "partner_workload": ["p", "p"], "device_name": ["d", "d"]}
    )
    query = pd.DataFrame({"self_workload": ["new"], "partner_workload": ["p"], "device_name": ["d"]})
    # Normalized throughputs 1/2 and 1/4: the new row completes to their mean 3/8, slowdown 8/3.
    assert complete_slowdowns(known, np.array([2.0, 4.0]), query)[0] == pytest.approx(8 / 3, rel=1e-6)


def test_suggest_picks_k_per_workload_in_order_spreading_devices(model, data):
    profiles, pairs = data
    unmeasured = pairs[~pairs["workload_a"].isin(["w6", "w7"]) & ~pairs["workload_b"].isin(["w6", "w7"])]
    picks = suggest_pairs(model, profiles, unmeasured, ["w7", "w6"], budget=2)
    assert [(p.workload, p.rank) for p in picks] == [("w7", 1), ("w7", 2), ("w6", 1), ("w6", 2)]
    for w in ("w6", "w7"):
        assert {p.device_name for p in picks if p.workload == w} == {"dev0", "dev1"}  # one per device
    assert all(p.partner not in ("w6", "w7") and p.reason for p in picks)
    only = suggest_pairs(model, profiles, unmeasured, ["w7"], against=["w0"], budget=5)
    assert {p.partner for p in only} == {"w0"} and len(only) == 2  # w0 on two devices: all there is
    assert json.loads(json.dumps(only[0].to_dict()))["workload"] == "w7"
    assert suggest_pairs(model, profiles, unmeasured, ["w7"], budget=0) == []


def test_suggest_skips_measured_pairs_and_refuses_bad_input(model, data):
    profiles, pairs = data
    picks = suggest_pairs(model, profiles, pairs, ["w7"], budget=20)
    assert picks == []  # every pair of w7 is measured
    with pytest.raises(DatasetError, match="no profile of workload 'nope'"):
        suggest_pairs(model, profiles, pairs, ["nope"])
    with pytest.raises(ConfigError, match="non-negative"):
        suggest_pairs(model, profiles, pairs, ["w7"], budget=-1)


def test_cheap_refit_moves_the_new_workload_toward_its_measurements(model, data):
    profiles, pairs = data
    new = "w7"
    mine = pairs[(pairs["workload_a"] == "w0") & (pairs["workload_b"] == new)].copy()
    assert len(mine) == 2  # one per device
    mine["slowdown_b"] *= 1.5  # the new workload is slower next to w0 than the model thinks
    refit = refit_on_pairs(model, profiles, mine, [new])
    assert refit is not model and model.shift_ is None and refit.booster_ is model.booster_
    query = pd.DataFrame({"workload_a": [new, "w0"], "workload_b": ["w3", "w1"], "device_name": "dev0"})
    before, after = predict_pairs(model, profiles, query), predict_pairs(refit, profiles, query)
    assert after.loc[0, "p50_a"] > before.loc[0, "p50_a"]
    assert after.loc[1, "p50_a"] == pytest.approx(before.loc[1, "p50_a"])  # w0 next to w1: untouched
    full = refit_on_pairs(model, profiles, pd.concat([pairs, mine]), [new], full=True)
    assert full.booster_ is not model.booster_ and full.calibration_ is model.calibration_


@pytest.fixture()
def dataset_dir(tmp_path):
    profiles, pairs = synthetic(n_workloads=6, devices=("dev0",))
    ds = Dataset(tmp_path / "ds")
    ds.write_profiles(profiles)
    ds.write_pairs(pairs)
    return ds.path


def test_cli_evaluate_budget_and_suggest(dataset_dir, tmp_path, capsys):
    code, out, err = run_cli(["evaluate", str(dataset_dir), "-g", "family", "--json"], capsys)
    plain = json.loads(out)
    code, out, err = run_cli(["evaluate", str(dataset_dir), "-g", "family", "--budget", "0", "--json"], capsys)
    assert code == 0 and json.loads(out) == plain  # --budget 0 is the plain evaluation, exactly
    code, out, err = run_cli(["evaluate", str(dataset_dir), "-g", "family", "--budget", "1", "--json"], capsys)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["budget"] == 1 and summary["model"] == plain["model"]
    assert list(summary["strategies"]) == list(BUDGET_STRATEGIES)
    assert {"mape", "coverage_p10_p90", "mape_common"} <= set(summary["strategies"]["active"])
    code, out, err = run_cli(["evaluate", str(dataset_dir), "-g", "family", "-k", "1"], capsys)
    assert code == 0 and "matrix-completion" in out and "held-out families" in out
    model_path = tmp_path / "m.json"
    code, out, err = run_cli(["train", str(dataset_dir), "--out", str(model_path)], capsys)
    assert code == 0, err
    args = ["suggest", "--model", str(model_path), "--data", str(dataset_dir), "--workloads", "w5"]
    code, out, err = run_cli([*args, "--budget", "1", "--json"], capsys)
    assert code == 0 and json.loads(out)["suggestions"] == []  # the dataset has every pair of w5 already
    code, out, err = run_cli([*args, "--budget", "1"], capsys)
    assert code == 0 and out.strip() == "nothing to suggest for w5: every candidate pair is measured already"
    code, out, err = run_cli([*args, "--budget", "0"], capsys)
    assert code == 0 and out.strip() == "nothing to suggest for w5: the budget is 0"
    ds = Dataset(dataset_dir)
    fresh = Dataset(tmp_path / "fresh")  # the same workloads, no pair of w5 measured yet
    fresh.write_profiles(ds.read_profiles())
    kept = ds.read_pairs()
    fresh.write_pairs(kept[(kept["workload_a"] != "w5") & (kept["workload_b"] != "w5")])
    code, out, err = run_cli([*args[:4], str(fresh.path), "-w", "w5", "-k", "2"], capsys)
    assert code == 0 and "most typical partner" in out and out.count(" w5 ") >= 2, err
    code, out, err = run_cli([*args, "--workloads", "nope"], capsys)
    assert code == 2 and "no profile of workload 'nope'" in err and len(err.strip().splitlines()) == 1
    code, out, err = run_cli(["evaluate", str(dataset_dir), "--budget", "1", "--tune"], capsys)
    assert code == 2 and "--tune and --budget" in err
