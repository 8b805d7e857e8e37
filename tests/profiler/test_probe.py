"""The probe co-runner: its workload, the sensitivity/pressure features of solo profiles, the model's offset."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
from loadguard import LoadWindow, load_problem, measure_quietly

from sharewise.predictor.model import PROBE_OFFSET, SlowdownRegressor
from sharewise.profiler.api import profile_one
from sharewise.profiler.config import DISTURBANCE_LIMIT, RunConfig
from sharewise.profiler.hostload import wait_until_idle
from sharewise.profiler.probe import PROBE_SPEC, Probe
from sharewise.profiler.solo import noisy_profile_warning
from sharewise.profiler.workloads import load_workload_class

QUICK = RunConfig(
    size="tiny", window_s=0.4, repeats=2, max_repeats=2, idle_wait_s=2.0, disturbance_retries=0, timeout_s=120
)


def test_probe_is_a_loadable_workload_that_changes_its_state():
    assert load_workload_class(PROBE_SPEC) is Probe
    probe = Probe()
    probe.build("cpu")
    before = probe.a.clone()
    probe.step()
    assert not torch.equal(before, probe.a) and torch.isfinite(probe.a).all()
    assert not probe.a.requires_grad
    probe.close()
    assert probe.a is None


@pytest.mark.slow
def test_solo_profile_measures_sensitivity_and_pressure_next_to_the_probe(user_spec):
    """Both use every core, so each slows the other: a real measurement, not a constant."""
    # 512 x 512 products, a step of several ms: tiny steps can even speed up next to a partner (see README).
    config = QUICK.replace(features=True, probe=True, batch_size=512)

    def measure():
        # Machine-wide foreign share over the whole profile (both processes use every core); the worker
        # processes, exited and waited for by then, count as ours.
        with LoadWindow() as window:
            row = profile_one(user_spec("MatmulLoop"), config)
        unsteady = f"the repeats' sensitivities spread by {row['probe_cv']:.0%}" if row["probe_cv"] > 0.5 else None
        return row, window.problem(DISTURBANCE_LIMIT) or unsteady

    def before():
        return load_problem(wait_until_idle(DISTURBANCE_LIMIT, max_wait_s=5.0), DISTURBANCE_LIMIT)

    row = measure_quietly(measure, "matmul next to the probe", before=before)
    # Each takes CPU the other wanted, on any machine: both lose speed. How much depends on the machine (a
    # pair lost 4.71x once under host steal), so there is no upper bound, only finiteness.
    for feature in ("f_probe_slowdown", "f_probe_pressure"):
        assert math.isfinite(row[feature]) and row[feature] > 1.0, (feature, row[feature])
    assert math.isfinite(row["probe_cv"]) and row["probe_cv"] >= 0.0  # spread of the sensitivity over the repeats


@pytest.mark.slow
def test_no_probe_without_features(user_spec):
    row = profile_one(user_spec("TinyMLP"), QUICK.replace(features=False, repeats=1))
    assert "f_probe_slowdown" not in row and "f_probe_pressure" not in row


def _offset_data(n=400, seed=0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({PROBE_OFFSET: rng.uniform(1.0, 2.0, n), "partner_load": rng.uniform(0, 1, n)})
    y = X[PROBE_OFFSET] * np.exp(0.1 * X["partner_load"])
    return X, y


def test_offset_lets_the_model_reach_levels_it_never_saw():
    """Trees alone cannot predict above the training range; the probe offset carries the level."""
    X, y = _offset_data()
    unseen = pd.DataFrame({PROBE_OFFSET: [3.0], "partner_load": [0.5]})
    with_offset = SlowdownRegressor(min_child_weight=5).fit(X, y)
    without = SlowdownRegressor(min_child_weight=5, offset_feature=None).fit(X, y)
    assert with_offset.offset_index_ == 0 and without.offset_index_ is None
    assert with_offset.predict(unseen)[0] == pytest.approx(3.0 * math.exp(0.05), rel=0.05)
    assert without.predict(unseen)[0] < 2.3  # stuck at the top of the training range


def test_offset_rows_without_the_feature_start_from_zero_and_explain_adds_up(tmp_path):
    X, y = _offset_data()
    X.loc[:99, PROBE_OFFSET] = np.nan  # data without a probe (an import) trains beside it
    model = SlowdownRegressor(min_child_weight=5).fit(X, y)
    q = model.predict_quantiles(X)
    assert np.isfinite(q).all() and (np.diff(q, axis=1) >= 0).all()
    row = X.iloc[[150]]
    contrib = model.explain(row)
    assert f"offset: log {PROBE_OFFSET}" in contrib.index
    # The p50 head; predict() sorts the heads, which may cross by a hair (the same tolerance as test_predictor).
    assert contrib.sum() == pytest.approx(math.log(model.predict(row)[0]), abs=2e-3)
    nan_row = model.explain(X.iloc[[0]])
    assert nan_row[f"offset: log {PROBE_OFFSET}"] == 0.0
    model.save(tmp_path / "m.json")
    loaded = SlowdownRegressor.load(tmp_path / "m.json")
    # Features built elsewhere lack the structure's offset columns: "auto" falls back to the probe's column.
    assert loaded.offset_feature == "auto" and loaded.feature_names_in_[loaded.offset_index_] == PROBE_OFFSET
    np.testing.assert_allclose(loaded.predict_quantiles(X), q, rtol=1e-6)


def test_a_model_without_the_offset_feature_ignores_it():
    X, y = _offset_data()
    X = X.rename(columns={PROBE_OFFSET: "self_iter_time_ms"})
    model = SlowdownRegressor(min_child_weight=5).fit(X, y)
    assert model.offset_index_ is None
    assert "offset" not in " ".join(model.explain(X.iloc[[0]]).index)


def test_explain_pair_reports_the_offset_with_its_feature_value():
    """A model trained on profiles with the probe feature explains pairs (the demo's path) without a KeyError."""
    from test_predictor import synthetic

    from sharewise.predictor import train_model
    from sharewise.predictor.api import explain_pair

    profiles, pairs = synthetic()
    profiles["f_probe_slowdown"] = 1.0 + profiles["f_busy_frac"]
    model = train_model(profiles, pairs, n_estimators=10, min_child_weight=2, structure="offset")
    out = explain_pair(model, profiles, "w1", "w2", "dev0", top=50)
    terms = {c["feature"]: c for c in out["a"]["contributions"]}
    offset = terms["offset: log pair_offset_probe"]
    # The structure's offset is the probe's slowdown times the level of the device and mode (``structure``).
    probe = profiles.query("workload == 'w1' and device_name == 'dev0'")["f_probe_slowdown"].iloc[0]
    level = model.get_featurizer().structure_["levels_probe"]["dev0|cpu"]
    assert offset["value"] == pytest.approx(probe * math.exp(level), rel=1e-5)
    assert offset["contribution"] == pytest.approx(math.log(offset["value"]), rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("flag", [[], ["--no-probe"]], ids=["probe", "no-probe"])
def test_cli_profile_records_probe_features_unless_told_not_to(user_spec, tmp_path, flag):
    import subprocess
    import sys

    from sharewise.datasets.store import Dataset

    out = tmp_path / "d"
    cmd = [
        sys.executable, "-m", "sharewise", "profile", user_spec("TinyConv"), "--size", "tiny", "--window", "0.3",
        "--repeats", "1", "--idle-wait", "0.5", "--out", str(out), *flag,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = Dataset(out).read_profiles().iloc[0]
    if flag:
        assert "f_probe_slowdown" not in row.index
    else:
        assert row["f_probe_slowdown"] > 0 and row["f_probe_pressure"] > 0
        assert row["probe_cv"] == 0.0  # one repeat: no spread
        assert f"{row['f_probe_slowdown']:.2f}x" in proc.stdout  # the table's probe column


@pytest.mark.parametrize(
    "spreads, said",
    [
        ({"cv": 0.02, "probe_cv": 0.04}, None),
        ({"cv": 0.02, "probe_cv": math.nan}, None),  # profiled without the probe
        ({"cv": 0.24, "probe_cv": 0.03}, "throughput by 24%"),
        ({"cv": 0.02, "probe_cv": 0.18}, "probe sensitivity by 18%"),
        ({"cv": 0.12, "probe_cv": 0.15}, "throughput by 12% and probe sensitivity by 15%"),
    ],
)
def test_profile_warns_when_repeats_disagree(spreads, said):
    warning = noisy_profile_warning({"workload": "mobilenet_v2", **spreads}, repeats=3)
    if said is None:
        assert warning is None
    else:
        assert warning.startswith("mobilenet_v2: repeats disagree on " + said) and "--repeats 5" in warning


def test_explain_adds_up_with_an_offset_and_a_prior_pull():
    """The pull toward the prior scales the trees' part only, never the offset."""
    X, y = _offset_data()
    model = SlowdownRegressor(min_child_weight=5, prior_weight=0.5).fit(X, y)
    row = X.iloc[[7]]
    contrib = model.explain(row)
    assert contrib[f"offset: log {PROBE_OFFSET}"] == pytest.approx(math.log(row[PROBE_OFFSET].iloc[0]))
    assert contrib.sum() == pytest.approx(math.log(model.predict(row)[0]), abs=2e-3)
