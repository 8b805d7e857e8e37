"""The slowdown contract where a scheduler runs it: ``simulate`` and ``run`` read each job's bound from the trace,
choose each pair's split of the sharing knob, apply it (for real: a CPU quota through the cgroup controller) and
count the bounded jobs that exceeded their bound.

The simulate cases are worked out by hand on a tiny dataset written here (device ``dev``, mode ``cpu``):

- ``a`` next to ``b`` without a split: both slowed 1.6;
- at 70:30 (a takes 70%): a 1.2, b 2.2; at 30:70: a 2.4, b 1.3.

Job ``j1`` (workload a, 100 s, bound 1.3) and ``j2`` (b, 100 s, no bound) arrive together on one GPU, the SLO 2.5.
Of the two splits only 70:30 keeps a within 1.3 (1.2; at 30:70 it is 2.4) and b within the SLO (2.2), and it pays
(1/1.2 + 1/2.2 = 1.29 > 1): they share at 70:30, j1 ends at 120 s (1.2 x 100) having kept its bound, j2 has done
120 / 2.2 = 54.5 s of its work and finishes the rest alone at 120 + 45.5 = 165.5 s. Without a split (``--split
none``) a is slowed 1.6 > 1.3: the pair may not share, the jobs run one after the other (100 s and 200 s). With
``--bounds report`` the policies schedule as without bounds: they share without a split, j1 is slowed 1.6 and its
violation is counted.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli

from sharewise.app.simulate import SimulationConfig, run_simulation
from sharewise.datasets.store import Dataset, utc_now

DEVICE = "dev"
SLO = 2.5
#: One row per pair measurement: (a, b, split_a or NaN, slowdown_a, slowdown_b).
PAIRS = [
    ("a", "b", math.nan, 1.6, 1.6),
    ("a", "a", math.nan, 1.5, 1.5),
    ("b", "b", math.nan, 1.5, 1.5),
    ("a", "b", 70.0, 1.2, 2.2),
    ("a", "b", 30.0, 2.4, 1.3),
]


def _dataset(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    ds = Dataset(path)
    ds.write_profiles(pd.DataFrame([{
        "workload": w, "family": w, "batch_size": 1, "device_kind": "cpu", "device_name": DEVICE, "mode": "cpu",
        "host": "test", "torch_version": "x", "created_at": utc_now(), "iter_time_ms": 10.0, "throughput": 100.0,
    } for w in ("a", "b")]))
    ds.write_pairs(pd.DataFrame([{
        "workload_a": a, "workload_b": b, "device_kind": "cpu", "device_name": DEVICE, "mode": "cpu",
        "solo_a": 100.0, "solo_b": 100.0, "coloc_a": 100 / s_a, "coloc_b": 100 / s_b, "slowdown_a": s_a,
        "slowdown_b": s_b, "trials": 3, "cv_a": 0.01, "cv_b": 0.01, "status": "ok", "error": "",
        "created_at": utc_now(), "split_a": split,
    } for a, b, split, s_a, s_b in PAIRS]))
    return path


def _trace(tmp_path: Path, bound_j1: str | None, name: str = "jobs.csv") -> Path:
    """j1 (a) and j2 (b), 100 s each, both at 0 s; a ``bound`` column where ``bound_j1`` is not None."""
    path = tmp_path / name
    if bound_j1 is None:
        path.write_text("job_id,arrival_s,workload,gpus,duration_s\nj1,0,a,1,100\nj2,0,b,1,100\n")
    else:
        path.write_text(f"job_id,arrival_s,workload,gpus,duration_s,bound\nj1,0,a,1,100,{bound_j1}\nj2,0,b,1,100,\n")
    return path


def _simulate(trace: Path, data: Path, **options):
    config = SimulationConfig(trace=str(trace), data=str(data), policies=("sjf-ffs",), n_gpus=1, gpus_per_node=1,
                              oracle=True, max_slowdown=SLO, **options)
    return run_simulation(config)


def test_a_bounded_job_shares_at_the_split_that_keeps_its_bound(tmp_path):
    report = _simulate(_trace(tmp_path, "1.3"), _dataset(tmp_path))
    r = report.results["sjf-ffs"]
    # Shared at 70:30: j1 at 1.2 (its bound kept), j2 at 2.2 while they share, then alone.
    assert r.finish.tolist() == pytest.approx([120.0, 120.0 + (100 - 120 / 2.2)])
    assert r.realized_slowdown[0] == pytest.approx(1.2)
    m = report.to_json()["policies"]["sjf-ffs"]
    assert (m["bounded_jobs"], m["bound_violations"], m["bound_violation_rate"]) == (1, 0, 0.0)
    assert any("share at a split" in n and "30:70, 70:30" in n for n in report.notes), report.notes


def test_without_a_split_the_bounded_pair_does_not_share(tmp_path):
    report = _simulate(_trace(tmp_path, "1.3"), _dataset(tmp_path), split="none")
    r = report.results["sjf-ffs"]
    assert sorted(r.finish.tolist()) == [100.0, 200.0]  # one after the other: 1.6 would break j1's 1.3
    assert report.to_json()["policies"]["sjf-ffs"]["bound_violations"] == 0
    assert any("no split is chosen (--split none)" in n for n in report.notes)


def test_bounds_report_counts_the_violation_without_changing_the_schedule(tmp_path):
    data = _dataset(tmp_path)
    report = _simulate(_trace(tmp_path, "1.3"), data, bounds="report")
    plain = _simulate(_trace(tmp_path, None, "plain.csv"), data, split="none")
    r, p = report.results["sjf-ffs"], plain.results["sjf-ffs"]
    assert r.start.tolist() == p.start.tolist() and r.finish.tolist() == p.finish.tolist()
    assert r.realized_slowdown[0] == pytest.approx(1.6)  # shared without a split
    m = report.to_json()["policies"]["sjf-ffs"]
    assert (m["bounded_jobs"], m["bound_violations"], m["bound_violation_rate"]) == (1, 1, 1.0)
    assert {k: v for k, v in m.items() if not k.startswith("bound")} == plain.to_json()["policies"]["sjf-ffs"]
    lines = report.bounded_jobs()
    assert lines["sjf-ffs"][0]["job_id"] == "j1"


def test_the_cli_prints_the_violation_rate_in_the_table_and_the_verdict(tmp_path, capsys):
    code = run_cli(["simulate", _trace(tmp_path, "protected"), "--data", _dataset(tmp_path), "--gpus", "1",
                    "--gpus-per-node", "1", "--oracle", "--policy", "sjf-ffs", "--policy", "sharewise",
                    "--max-slowdown", str(SLO), "--bounds", "report"])
    out = capsys.readouterr().out
    assert code == 0
    assert "bound violations" in out
    assert "sjf-ffs: 1 of 1 bounded job(s) exceeded their bound (violation rate 100%): j1 (protected (<= 1.25)) " \
        "at 1.60" in " ".join(out.split())


def test_without_bounds_and_knob_rows_simulate_is_as_before(tmp_path):
    """A trace whose bound column is empty, on data without rows under the knob: the same summary as without
    the column (no contract: nothing typed, no new metric)."""
    ds = Dataset(_dataset(tmp_path))
    pairs = ds.read_pairs()
    clean = tmp_path / "clean"
    Dataset(clean).write_profiles(ds.read_profiles())
    Dataset(clean).write_pairs(pairs[pairs["split_a"].isna()].drop(columns=["split_a"]))
    empty = tmp_path / "empty.csv"
    empty.write_text("job_id,arrival_s,workload,gpus,duration_s,bound\nj1,0,a,1,100,\nj2,0,b,1,100,\n"
                     "j3,30,a,1,50,\n")
    plain = tmp_path / "plain.csv"
    plain.write_text("job_id,arrival_s,workload,gpus,duration_s\nj1,0,a,1,100\nj2,0,b,1,100\nj3,30,a,1,50\n")
    for oracle in (True, False):
        got = [run_simulation(SimulationConfig(trace=str(t), data=str(clean), n_gpus=2, gpus_per_node=2,
                                               oracle=oracle)) for t in (empty, plain)]
        assert got[0].to_json() == got[1].to_json()
        assert got[0].notes == got[1].notes
        for name, r in got[0].results.items():
            assert r.finish.tolist() == got[1].results[name].finish.tolist()


def test_the_policies_see_out_of_fold_predictions_at_the_measured_splits(tmp_path):
    """Without --oracle the policies' slowdowns at a split are out-of-fold predictions of the pairs at the
    dataset's splits (30:70 and its mirror 70:30), and their table without the knob is the one they saw before."""
    from sharewise.app import simulate, splits

    data = _dataset(tmp_path)
    config = SimulationConfig(trace=str(_trace(tmp_path, "1.3")), data=str(data), max_slowdown=SLO)
    profiles, pairs = simulate._read_truth(str(data))
    truth, knob = splits.base_truth(pairs)
    at = simulate.split_candidates(["a", "b"], splits.measured_splits(knob), DEVICE)
    assert len(at) == 3 * 2  # a+a, a+b, b+b at 30 and 70
    table, _, view_at = simulate.policies_tables(config, profiles, pairs, truth, DEVICE, at_splits=at)
    before, _ = simulate.policies_table(config, profiles, pairs, truth, DEVICE)
    assert np.array_equal(table.p90, before.p90) and np.array_equal(table.p50, before.p50)
    assert view_at.splits == (30, 70) and np.isfinite(view_at.p90).all()
    contract = simulate.prepare(config).contract
    assert ("a [<= 1.3]", "b") in {**contract.typed.choices, **contract.typed.declined}


def test_a_bad_bound_cell_is_one_line_naming_its_line_and_exit_2(tmp_path, capsys):
    trace = tmp_path / "bad.csv"
    trace.write_text("job_id,arrival_s,workload,gpus,duration_s,bound\nj1,0,a,1,100,\nj2,0,b,1,100,fast\n")
    data = _dataset(tmp_path)
    for command in (["simulate", trace, "--data", data, "--oracle", "--gpus", "1"],
                    ["run", trace, "--data", data, "--oracle", "--out", tmp_path / "run", "--calibrate", "0"]):
        code = run_cli(command)
        err = capsys.readouterr().err
        assert code == 2, err
        assert "bad.csv:3: column 'bound'" in err and "'fast'" in err
        assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def test_split_and_bounds_options_refuse_other_values(tmp_path, capsys):
    trace = _trace(tmp_path, None)
    code = run_cli(["simulate", trace, "--data", _dataset(tmp_path), "--split", "70:30"])
    assert code == 2 and "--split must be one of ['auto', 'none'], got '70:30'" in capsys.readouterr().err
    code = run_cli(["simulate", trace, "--data", _dataset(tmp_path), "--bounds", "warn"])
    assert code == 2 and "--bounds must be one of ['enforce', 'report']" in capsys.readouterr().err


# ---- sharewise run: the split applied to real jobs (slow: real processes, a real cgroup) ---------------------
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "physical_workloads.py"
SLEEP = f"{FIXTURE}:SleepStep"


def _cpu_knob_problem() -> str | None:
    """Why a CPU quota cannot be set here (no writable cgroup CPU controller), or None."""
    from sharewise.profiler.knob import KnobError, knob_for

    knob = knob_for("cpu")
    try:
        knob.check()
    except KnobError as exc:
        return str(exc)
    finally:
        knob.close()  # the cgroup the check made
    return None


@pytest.mark.slow
@pytest.mark.skipif(_cpu_knob_problem() is not None, reason=f"no writable cgroup CPU controller: "
                    f"{_cpu_knob_problem()}")
def test_run_applies_the_split_to_real_jobs_and_reports_the_violation_rate(tmp_path):
    """Two sleep jobs on one CPU slot, the pair measured at 70:30 (sleeping steps barely slow each other, so
    any split keeps the bound): sjf-ffs puts them side by side, each runs under its share of the split (a
    'split' event with its percent, a 'release' when its partner leaves), and run.json carries the bounded
    job's bound and the violation metrics; ``--compare-sim`` simulates the same types."""
    from sharewise.runtime.slots import cpu_layout

    device = cpu_layout(1).device_name
    data = tmp_path / "data"
    ds = Dataset(data)
    ds.write_profiles(pd.DataFrame([{
        "workload": "sleep_step", "family": "sleep", "batch_size": 1, "device_kind": "cpu", "device_name": device,
        "mode": "cpu", "host": "test", "torch_version": "x", "created_at": utc_now(), "iter_time_ms": 10.0,
        "throughput": 100.0,
    }]))
    ds.write_pairs(pd.DataFrame([{
        "workload_a": "sleep_step", "workload_b": "sleep_step", "device_kind": "cpu", "device_name": device,
        "mode": "cpu", "solo_a": 100.0, "solo_b": 100.0, "coloc_a": 100 / s, "coloc_b": 100 / s, "slowdown_a": s,
        "slowdown_b": s, "trials": 3, "cv_a": 0.01, "cv_b": 0.01, "status": "ok", "error": "",
        "created_at": utc_now(), "split_a": split,
    } for split, s in ((math.nan, 1.05), (50.0, 1.05), (70.0, 1.05))]))
    trace = tmp_path / "jobs.csv"
    trace.write_text(f"job_id,arrival_s,workload,gpus,steps,bound\nx,0,{SLEEP},1,300,3\ny,0.2,{SLEEP},1,150,\n")
    env = {**os.environ, "COLUMNS": "200"}
    command = [sys.executable, "-m", "sharewise", "run", str(trace), "--data", str(data), "--oracle", "--policy",
               "sjf-ffs", "--calibrate", "1", "--max-slowdown", "3", "--out", str(tmp_path / "run"), "--json",
               "--compare-sim"]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    m = summary["policies"]["sjf-ffs"]
    assert m["bounded_jobs"] == 1 and m["bound_violations"] in (0, 1)
    assert m["bound_violation_rate"] == m["bound_violations"] / m["bounded_jobs"]
    run = json.loads((tmp_path / "run" / "sjf-ffs" / "run.json").read_text())
    assert run["metrics"]["bounded_jobs"] == 1
    jobs = {j["job_id"]: j for j in run["jobs"]}
    assert jobs["x"]["bound"] == "<= 3" and jobs["x"]["bound_max"] == 3.0 and jobs["y"]["bound_max"] is None
    assert jobs["x"]["kind"] == "sleep_step [<= 3]" and jobs["y"]["kind"] == "sleep_step"
    for j in ("x", "y"):
        assert jobs[j]["shared"], jobs[j]["events"]
        splits = [e for e in jobs[j]["events"] if e["event"] == "split"]
        assert splits and all(e["share"] in (30, 50, 70) for e in splits), jobs[j]["events"]
    shares = {j: [e["share"] for e in jobs[j]["events"] if e["event"] == "split"][0] for j in ("x", "y")}
    assert shares["x"] + shares["y"] == 100
    # y (shorter) ends first: x's limit is lifted then.
    assert any(e["event"] == "release" for e in jobs["x"]["events"]), jobs["x"]["events"]
    assert any("cgroup CPU quota" in n for n in summary["notes"])
    assert any("bounded job(s) exceeded their bound" in line for line in summary["verdict"])
    assert np.isfinite(jobs["x"]["realized_slowdown"])
    # --compare-sim simulates the same jobs over the same types, at the same splits.
    sim = summary["comparison"]["sjf-ffs"]
    assert sim["bounded_jobs_simulated"] == 1 and sim["jobs_compared"] == 2
