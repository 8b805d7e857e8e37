"""Policies' predictions from few pairs, all of one workload (the 2026-12-04 H200 window's physical stage failed
there: 5 pairs, all of resnet18, and each workload held out in turn left nothing to train on)."""

import numpy as np
import pandas as pd
import pytest

from sharewise.datasets.store import Dataset
from sharewise.errors import ConfigError
from sharewise.predictor import out_of_fold_predictions

FAST = {"n_estimators": 10, "min_child_weight": 1}


@pytest.fixture(scope="module")
def one_workloads_pairs():
    """The shipped CPU reference's profiles and its four pairs of a3c with others, and a3c next to itself."""
    ds = Dataset("reference")
    profiles, pairs = ds.read_profiles(), ds.read_pairs()
    of_a3c = pairs[(pairs["workload_a"] == "a3c") | (pairs["workload_b"] == "a3c")]
    partners = [b if a == "a3c" else a for a, b in zip(of_a3c["workload_a"], of_a3c["workload_b"], strict=True)]
    keep = [p for p in partners if p != "a3c"][:3] + ["a3c"]
    few = of_a3c[[p in keep for p in partners]]
    return profiles, few.reset_index(drop=True), keep[0]


def test_evaluation_still_refuses_to_pass_in_sample_predictions_for_out_of_fold_ones(one_workloads_pairs):
    profiles, few, _ = one_workloads_pairs
    with pytest.raises(ConfigError, match="no measured pair is left to train on once workload 'a3c'"):
        out_of_fold_predictions(profiles, few, group_by="workload", holdout="self", **FAST)


def test_policies_predictions_widen_where_nothing_is_left_and_say_how(one_workloads_pairs):
    profiles, few, other = one_workloads_pairs
    candidates = pd.DataFrame({"workload_a": ["a3c", "a3c"], "workload_b": ["a3c", other]})
    out = out_of_fold_predictions(profiles, few, group_by="workload", candidates=candidates, holdout="self",
                                  calibrate=True, nothing_left="widen", **FAST)
    assert len(out) == 2 and np.isfinite(out[["p10_a", "p50_a", "p90_a", "p50_b"]].to_numpy()).all()
    assert (out["p10_a"] <= out["p50_a"]).all() and (out["p50_a"] <= out["p90_a"]).all()
    notes = out.attrs["notes"]
    assert any("every measured pair involves workload 'a3c'" in n and "only as the partner" in n for n in notes)
    # Only a3c's self-pair measured: nothing saw a3c even as a partner, so its model trains on every pair.
    selfpair = few[(few["workload_a"] == "a3c") & (few["workload_b"] == "a3c")]
    out = out_of_fold_predictions(profiles, selfpair, group_by="workload", holdout="self", nothing_left="widen",
                                  **FAST)
    assert np.isfinite(out["p50_a"]).all() and "in sample" in out.attrs["notes"][0]
    with pytest.raises(ConfigError, match="nothing_left must be 'raise' or 'widen'"):
        out_of_fold_predictions(profiles, few, group_by="workload", nothing_left="guess", **FAST)
