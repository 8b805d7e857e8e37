"""Campaign planning without running anything: all pairs, the specs check, and which pairs count as done."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest

from sharewise.datasets.pair import Pair
from sharewise.errors import ConfigError
from sharewise.profiler.campaign import all_pairs, done_keys
from sharewise.profiler.config import RunConfig
from sharewise.profiler.workloads import resolve_specs


def test_all_pairs_includes_self_pairs_in_input_order():
    assert all_pairs(["a", "b", "c"]) == [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]
    assert all_pairs([]) == []


def test_resolve_specs_names_each_spec_and_refuses_repeats(user_spec):
    assert resolve_specs(["ncf", user_spec("TinyMLP")]) == [("ncf", "ncf"), (user_spec("TinyMLP"), "tiny_mlp")]
    with pytest.raises(ConfigError, match="no workloads given"):
        resolve_specs([])
    with pytest.raises(ConfigError, match="'ncf' is listed twice; self-pairs are measured automatically"):
        resolve_specs(["ncf", "ncf"])


def _rows(*rows):
    base = {"device_kind": "cpu", "device_name": "cpu0", "mode": "cpu", "size": "small", "status": "ok"}
    return pd.DataFrame([{**base, "workload_a": a, "workload_b": b, **extra} for a, b, extra in rows])


def test_done_keys_are_pairs_in_either_order_on_this_device_mode_and_size():
    existing = _rows(
        ("b", "a", {}),
        ("c", "c", {}),
        ("a", "c", {"mode": "cpu-partition"}),
        ("b", "c", {"device_name": "cpu1"}),
        ("a", "d", {"size": "tiny"}),
        ("d", "d", {"status": "failed"}),
    )
    done = done_keys(existing, RunConfig(), "cpu0", retry_failed=False)
    assert done == {Pair.of("a", "b"), Pair.of("c", "c"), Pair.of("d", "d")}
    assert Pair.of("b", "a") in done  # the order a pair is planned in does not matter
    # --retry-failed reruns failed and timed-out pairs; any device of the kind counts for a cluster.
    assert done_keys(existing, RunConfig(), "cpu0", retry_failed=True) == {Pair.of("a", "b"), Pair.of("c", "c")}
    assert Pair.of("b", "c") in done_keys(existing, RunConfig(), None, retry_failed=False)
    assert done_keys(existing.iloc[:0], RunConfig(), "cpu0", retry_failed=False) == set()


# --- warm campaigns, budgets, and what show prints --------------------------------------------------------

import math  # noqa: E402

from sharewise.app.budget import BudgetPicker  # noqa: E402
from sharewise.datasets.store import Dataset  # noqa: E402
from sharewise.datasets.summary import dataset_overview, slowdown_matrix  # noqa: E402
from sharewise.profiler.campaign import run_campaign  # noqa: E402
from sharewise.profiler.executors.local import LocalExecutor  # noqa: E402
from sharewise.profiler.probe import CPU_SHAPE, cuda_shape  # noqa: E402

TINY = RunConfig(size="tiny", window_s=0.2, repeats=2, max_repeats=3, idle_wait_s=0.5, probe=False, timeout_s=60)


@pytest.mark.slow
def test_a_warm_campaign_starts_each_workload_once_and_stores_half_widths(user_spec, tmp_path):
    """Profiles and pairs share the pool: a workload's process starts once, plus one for its self-pair."""
    made = []

    def factory(config, device_name, extra_env):
        made.append(LocalExecutor(config, device_name, extra_env))
        return made[-1]

    specs = [user_spec("TinyMLP"), user_spec("TinyConv")]
    summary = run_campaign(specs, TINY, tmp_path / "d", executor_factory=factory)
    assert summary.by_status == {"ok": 3} and summary.profiled == 2
    pool = made[0].pool
    assert pool.started == 4 and pool.reused >= 3  # 2 profiles + 2 second instances for the self-pairs
    pairs = Dataset(tmp_path / "d").read_pairs()
    assert set(pairs["isolation"]) == {"warm"} and (pairs["trials"] >= TINY.repeats).all()
    assert pairs[["ci_a", "ci_b"]].notna().all().all() and (pairs["pair_s"] > 0).all()


def _literal(names, device, with_pairs):
    base = dict(family="f", batch_size=8, device_kind="cpu", device_name=device, mode="cpu", host="h", size="tiny",
                torch_version="2", created_at="2026-01-01T00:00:00", iter_time_ms=10.0, throughput=100.0)
    profiles = pd.DataFrame([{**base, "workload": n, "f_flops_per_step": (i + 1) * 1e9, "f_busy_frac": 0.2 * (i + 1)}
                             for i, n in enumerate(names)])
    rows = []
    for a, b in itertools.combinations_with_replacement(with_pairs, 2):
        s = 1.2 + 0.1 * names.index(b)
        rows.append(dict(workload_a=a, workload_b=b, device_kind="cpu", device_name=device, mode="cpu", size="tiny",
                         solo_a=10.0, solo_b=10.0, coloc_a=10 / s, coloc_b=10 / s, slowdown_a=s, slowdown_b=s,
                         trials=3, cv_a=0.01, cv_b=0.01, status="ok", error="", created_at="2026-01-01T00:00:00",
                         batch_size_a=8, batch_size_b=8))
    return profiles, pd.DataFrame(rows)


@pytest.mark.slow
def test_a_budget_measures_k_suggested_pairs_per_new_workload_then_stops(user_spec, tmp_path):
    from sharewise.predictor import train_model
    from sharewise.profiler.device import cpu_device_name

    names = ["tiny_mlp", "tiny_conv", "tiny_embed"]
    profiles, pairs = _literal(names, cpu_device_name(), with_pairs=names[:2])
    ds = Dataset(tmp_path / "d")
    ds.write_profiles(profiles)
    ds.write_pairs(pairs)
    model = train_model(profiles, pairs, n_estimators=10, min_child_weight=1)
    specs = [user_spec(c) for c in ("TinyMLP", "TinyConv", "TinyEmbed")]
    summary = run_campaign(specs, TINY, ds, picker=BudgetPicker(1, model))
    assert summary.total == 1 and summary.measured == 1 and summary.by_status == {"ok": 1}
    new = ds.read_pairs()
    new = new[(new["workload_a"] == "tiny_embed") | (new["workload_b"] == "tiny_embed")]
    assert len(new) == 1 and set(new["workload_b"]) <= {"tiny_mlp", "tiny_conv"}
    # Now every listed workload has a pair: nothing is new, nothing is measured.
    assert run_campaign(specs, TINY, ds, picker=BudgetPicker(1, model)).measured == 0


def test_a_budget_without_a_model_fails_before_anything_runs(user_spec, tmp_path):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "sharewise", "pairs", "-w", "ncf,a3c", "--budget", "2", "--out", str(tmp_path / "d")],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2 and "--budget needs a model" in proc.stderr and "--model" in proc.stderr
    assert not (tmp_path / "d" / "profiles").exists()


def test_show_prints_the_half_widths(tmp_path):
    import subprocess
    import sys

    profiles, pairs = _literal(["a", "b"], "cpu0", with_pairs=["a", "b"])
    pairs["ci_a"], pairs["ci_b"] = [0.011, 0.02, 0.034], [0.012, math.nan, 0.03]
    ds = Dataset(tmp_path / "d")
    ds.write_profiles(profiles)
    ds.write_pairs(pairs)
    cis = slowdown_matrix(ds.read_pairs(), value="ci")
    assert cis.loc["a", "b"] == pytest.approx(0.02) and cis.loc["a", "a"] == pytest.approx(0.0115)
    assert math.isnan(cis.loc["b", "a"])
    overview = dataset_overview(ds.read_profiles(), ds.read_pairs())
    assert overview["ci_median"] == pytest.approx(0.02) and overview["ci_max"] == pytest.approx(0.034)
    out = subprocess.run([sys.executable, "-m", "sharewise", "show", str(tmp_path / "d")], capture_output=True,
                         text=True, timeout=120, env={**__import__("os").environ, "COLUMNS": "200"}).stdout
    assert "+-2.0%" in out and "+-3.2%" in out and "median 95% confidence half-width" in out


def test_the_probe_is_sized_to_the_gpu_it_runs_on():
    h200 = cuda_shape(l2_bytes=60 * 2**20, total_bytes=141 * 2**30, sm_count=132)
    assert h200.side == 4096 and h200.l2_floats * 4 == 30 * 2**20 and h200.l2_passes == 8
    assert h200.stream_floats * 4 == 8 * 60 * 2**20  # eight times the L2, far past it
    assert h200.device_bytes() < 1.5 * 2**30  # beside any job that leaves it room
    small = cuda_shape(l2_bytes=2 * 2**20, total_bytes=4 * 2**30, sm_count=16)
    assert small.side == 2048 and small.stream_floats * 4 == 4 * 2**30 // 64  # capped by the memory
    assert CPU_SHAPE.l2_passes == 0 and CPU_SHAPE.side == 512


# --- precision that holds: extensions, the flag, the time budget ---------------------------------------------


@pytest.mark.slow
def test_a_pair_that_misses_its_target_is_extended_and_flagged(user_spec, tmp_path):
    """An unreachable target: the pair gets its extension (longer windows, more repeats on top of its own), then
    stays flagged; a later campaign with --retry-failed extends the recorded row again."""
    config = TINY.replace(ci_target=1e-6, max_repeats=2, extend_rounds=1)
    spec = user_spec("TinyMLP")
    summary = run_campaign([spec], config, tmp_path / "d")
    ds = Dataset(tmp_path / "d")
    row = ds.read_pairs().iloc[0]
    assert summary.extended == 1 and summary.missed == [("tiny_mlp", "tiny_mlp")]
    assert row["precision"] == "missed" and row["ci_target"] == pytest.approx(1e-6)
    # Two planned repeats of 0.2 s windows, then two more of 0.4 s: the extension went on from the first two.
    assert row["trials"] == 4 and row["window_s"] == pytest.approx(0.3, rel=0.2)
    assert len(ds.read_pairs(latest=False)) == 2  # the planned row, then the extended one in its place
    again = run_campaign([spec], config, ds, retry_failed=True)
    assert again.measured == 0 and again.extended == 1 and again.missed == [("tiny_mlp", "tiny_mlp")]
    assert ds.read_pairs().iloc[0]["trials"] == 4  # measured afresh under the extension's settings
    assert run_campaign([spec], config, ds).extended == 0  # without --retry-failed recorded rows stay as they are


def test_a_campaign_out_of_time_leaves_its_pairs_for_a_rerun(user_spec, tmp_path):
    config = TINY.replace(time_budget_s=1e-3)
    summary = run_campaign([user_spec("TinyMLP"), user_spec("TinyConv")], config, tmp_path / "d",
                           profile_missing=False)
    assert summary.left == 3 and summary.measured == 0 and summary.missed == []
    with pytest.raises(ConfigError, match="time_budget_s must be a positive"):
        RunConfig(time_budget_s=0)


def test_show_flags_the_pairs_that_missed_their_target(tmp_path):
    import subprocess
    import sys

    from sharewise.profiler.campaign import missed_target

    profiles, pairs = _literal(["a", "b"], "cpu0", with_pairs=["a", "b"])
    pairs["ci_a"], pairs["ci_b"] = [0.011, 0.02, 0.034], [0.012, 0.2, 0.03]
    pairs["ci_target"], pairs["precision"] = 0.05, ["met", "missed", "met"]
    ds = Dataset(tmp_path / "d")
    ds.write_profiles(profiles)
    ds.write_pairs(pairs)
    assert missed_target(ds.read_pairs(), 0.05).tolist() == [False, True, False]

    def show(*args):
        return subprocess.run([sys.executable, "-m", "sharewise", "show", *args], capture_output=True, text=True,
                              timeout=120, env={**__import__("os").environ, "COLUMNS": "200"}).stdout

    out = show(str(tmp_path / "d"))
    assert "precision: 1 of 3 pairs missed their target (+-5%" in out and "+-20.0%*" in out and "+-3.2%*" not in out
    # Rows measured before rows carried the judgment are judged against the target their dataset's meta states.
    assert "precision: 14 of 18 pairs missed their target (+-5%" in show("reference-h200")
    assert '"missed": 14' in show("reference-h200", "--json").replace("\n", "").replace("  ", "")
