"""Tests of the slowdown contract's rule: bounds read from a queue, and the split that keeps both bounds at p90 while
the pair's combined throughput is highest (``planner.contract``), on cases small enough to check by hand."""

from __future__ import annotations

import math

import pytest

from sharewise.errors import ConfigError
from sharewise.planner.contract import PROTECTED_SLOWDOWN, Bound, choose_split


def test_bounds_read_from_a_queue_cell():
    assert Bound.parse("") == Bound() and not Bound().bounded and str(Bound()) == "none"
    assert Bound.parse(float("nan")) == Bound()
    assert Bound.parse("1.3") == Bound(1.3) and str(Bound(1.3)) == "<= 1.3"
    assert Bound.parse("Protected") == Bound(PROTECTED_SLOWDOWN, protected=True)
    for bad in ("0.9", "fast"):
        with pytest.raises(ConfigError, match="maximum slowdown"):
            Bound.parse(bad)


# Three splits of one pair, by hand: a gets 30, 50 or 70 percent.
SPLITS = [30, 50, 70]
P50_A, P90_A = [2.4, 1.6, 1.2], [2.7, 1.8, 1.24]
P50_B, P90_B = [1.3, 1.6, 2.2], [1.4, 1.8, 2.6]


def test_a_protected_job_gets_the_split_that_keeps_it_within_its_bound():
    # Only 70:30 keeps a <= 1.25 at p90 (1.24); its throughput 1/1.2 + 1/2.2 = 1.288 > 1: it shares there.
    c = choose_split(SPLITS, P50_A, P90_A, P50_B, P90_B, Bound(PROTECTED_SLOWDOWN, protected=True))
    assert c.split == 70 and c.p90 == (1.24, 2.6)
    assert c.throughput == pytest.approx(1 / 1.2 + 1 / 2.2)
    assert "70:30 keeps a protected (<= 1.25) (p90 1.24)" in c.reason


def test_without_bounds_the_highest_throughput_wins_and_ties_go_to_the_middle():
    # Throughputs: 30:70 0.417 + 0.769 = 1.186, 50:50 1.25, 70:30 1.288: 70:30.
    assert choose_split(SPLITS, P50_A, P90_A, P50_B, P90_B).split == 70
    # Equal throughput at 30 and 50 and 70: the split nearest 50:50.
    assert choose_split(SPLITS, [1.5] * 3, [1.6] * 3, [1.5] * 3, [1.6] * 3).split == 50


def test_a_pair_no_split_can_bound_or_that_does_not_pay_is_declined_with_the_reason():
    both = Bound(1.25)
    c = choose_split(SPLITS, P50_A, P90_A, P50_B, P90_B, both, both)
    assert c.split is None and not c.shares and "no split keeps both bounds" in c.reason
    # Keeps the bounds (none) but 1/2.1 + 1/2.1 < 1: taking turns does more work.
    c = choose_split([50], [2.1], [2.3], [2.1], [2.3])
    assert c.split is None and "does not pay" in c.reason and c.throughput == pytest.approx(2 / 2.1)


def test_bad_input_is_one_clear_error():
    with pytest.raises(ConfigError, match="one prediction per split"):
        choose_split([50, 70], [1.2], [1.3], [1.2], [1.3])
    assert math.isinf(Bound().max_slowdown)


# ---- measured, predicted and chosen: the knob through the predictor and recommend ------------------------------


def _knob_data():
    """Profiles with scaling curves and pairs measured at three splits (synthetic: a's share costs 1 / its curve,
    times a constant interference 1.1), plus the same pairs without a knob."""
    import numpy as np
    from test_predictor import synthetic

    profiles, pairs = synthetic(n_workloads=6, devices=("dev0",))
    rng = np.random.default_rng(0)
    curve = {w: sorted(rng.uniform(0.2, 1.0, 3)) for w in profiles["workload"]}
    for k, col in enumerate(("f_share_25", "f_share_50", "f_share_75")):
        profiles[col] = [curve[w][k] for w in profiles["workload"]]
    ok = pairs[pairs["status"] == "ok"]
    rows = [pairs]
    for split in (30.0, 50.0, 70.0):
        at = ok.copy()
        at["split_a"] = split
        for side, share in (("a", split / 100), ("b", 1 - split / 100)):
            rate = [np.interp(share, [0, .25, .5, .75, 1], [0, *curve[w], 1]) for w in at[f"workload_{side}"]]
            at[f"slowdown_{side}"] = 1.1 / np.asarray(rate)
        rows.append(at)
    import pandas as pd

    return profiles, pd.concat(rows, ignore_index=True)


def test_a_model_trained_under_the_knob_predicts_a_split_from_the_scaling_curve():
    import numpy as np
    import pandas as pd

    from sharewise.predictor import predict_pairs, train_model

    profiles, pairs = _knob_data()
    model = train_model(profiles, pairs, n_estimators=15)
    assert model.training_summary_["knob_rows"] == 2 * int(pairs["split_a"].notna().sum())
    frame = pd.DataFrame({"workload_a": ["w1", "w1"], "workload_b": ["w4", "w4"], "device_name": "dev0",
                          "split_a": [30.0, 70.0]})
    pred = predict_pairs(model, profiles, frame)
    # More share, less slowdown for a; less for b: the curve read at each split.
    assert pred["p50_a"].iloc[1] < pred["p50_a"].iloc[0] and pred["p50_b"].iloc[1] > pred["p50_b"].iloc[0]
    # Measured 1.1 / curve: the prediction at a measured split is close to it.
    w1 = profiles.set_index("workload").loc["w1"]
    truth = 1.1 / np.interp(0.7, [0, .25, .5, .75, 1], [0, w1.f_share_25, w1.f_share_50, w1.f_share_75, 1])
    assert pred["p50_a"].iloc[1] == pytest.approx(truth, rel=0.15)


def test_recommend_chooses_a_split_per_pair_that_keeps_a_protected_job_and_emits_it(tmp_path):
    from conftest import run_cli

    from sharewise.datasets.store import Dataset
    from sharewise.predictor import train_model

    profiles, pairs = _knob_data()
    profiles["mode"] = "mps"
    pairs["mode"] = "mps"
    # A GPU's memory and each job's peak: an emitted plan shares only pairs whose memory limits fit.
    profiles["f_mem_peak_reserved_bytes"] = 2e9
    profiles["f_device_mem_bytes"] = 80e9
    data = tmp_path / "data"
    ds = Dataset(data)
    ds.write_profiles(profiles)
    ds.write_pairs(pairs)
    model = tmp_path / "model.json"
    train_model(profiles, pairs, n_estimators=15).save(model)
    queue = tmp_path / "queue.csv"
    queue.write_text("job_id,workload,bound\nj1,w1,protected\nj2,w4,\nj3,w2,\nj4,w5,\n")
    out = tmp_path / "plan.json"
    code = run_cli(["recommend", "--model", model, "--data", data, "--queue", queue, "--gpus", "2", "--emit", "plan",
                    "--sharing", "mps", "--out", out])
    assert code == 0
    import json

    plan = json.loads(out.read_text())
    jobs = {j["job_id"]: (p, j) for p in plan["placements"] for j in p["jobs"]}
    shared = [p for p in plan["placements"] if len(p["jobs"]) == 2]
    assert shared, plan
    for p in shared:  # every pair at the split chosen for it: both bounds kept at p90, the percentages sum to 100
        assert all(j["split_source"] == "contract" for j in p["jobs"])
        assert sum(j["active_thread_percentage"] for j in p["jobs"]) == 100
        for j in p["jobs"]:
            limit = 1.25 if j["bound"].startswith("protected") else 2.0
            assert j["p90"] <= limit + 1e-9
    if "j1" in jobs:
        assert jobs["j1"][1]["bound"] == "protected (<= 1.25)"
    assert any("planner.contract" in n for n in plan["notes"])
