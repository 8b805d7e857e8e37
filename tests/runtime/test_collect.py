"""``sharewise collect``: pair rows from observed series, on saved scrapes of jobs whose rates are known exactly.

The scrapes are written here as an exporter serves them (its series names and labels), for jobs that step at
set rates with some jitter: alone, then together on one device, then alone again, so the slowdowns the rows must
find are known. The real thing (a Prometheus server scraping two observed commands) is
``test_observe_prometheus.py``.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sharewise.datasets.store import Dataset, read_datasets
from sharewise.errors import ConfigError, SchemaError
from sharewise.observe.collect import CollectOptions, collect
from sharewise.observe.series import parse_time
from sharewise.profiler.exporter import LAST_STEP, STEPS_SERIES

T0 = 1_764_880_000.0
CPU = "Test CPU (2 cores)"


def job(name, segments, device="0-1", kind="cpu", device_name=CPU, pid=None, jitter=0.05, seed=0):
    """A job stepping at ``rate`` steps/s within each ``(start, end, rate)`` (seconds after T0), with jitter."""
    rng = np.random.default_rng(seed)
    steps, t = [], T0 + segments[0][0]
    for start, end, rate in segments:
        t = max(t, T0 + start)
        while t < T0 + end:
            t += rng.lognormal(0.0, jitter) / rate
            if t < T0 + end:
                steps.append(t)
    labels = {"name": name, "device_kind": kind, "device": device, "device_name": device_name, "host": "n1",
              "pid": str(pid or abs(hash(name)) % 90000 + 100)}
    return labels, np.array(steps), (T0 + segments[0][0], T0 + segments[-1][1])


def write_scrapes(path: Path, jobs, until_s: float, every_s: float = 1.0) -> Path:
    """Scrapes every ``every_s`` seconds of each job present then: its step count and last step's time."""
    lines = []
    for tau in T0 + np.arange(0.0, until_s, every_s):
        stamp = int(round(tau * 1000))
        for labels, steps, (start, end) in jobs:
            done = steps[steps <= tau]
            if not start <= tau <= end or not len(done):
                continue
            text = ",".join(f'{k}="{v}"' for k, v in labels.items())
            lines.append(f"{STEPS_SERIES}{{{text}}} {len(done)}.0 {stamp}")
            lines.append(f"{LAST_STEP}{{{text}}} {done[-1]:.6f} {stamp}")
    path.write_text("# HELP sharewise_observed_steps_total Steps.\n" + "\n".join(lines) + "\n")
    return path


def classic(tmp_path, b_device="0-1", b_alone=True, **kw):
    """A alone at 10/s for 20 s, then with B (A 6/s, B 5/s) for 25 s; B then alone at 8/s for 25 s.
    The slowdowns are 10/6 for A and 8/5 for B."""
    a = job("cnn", [(0, 20, 10.0), (20, 45, 6.0)], **kw)
    b = job("lm", [(20, 45, 5.0), *([(45, 70, 8.0)] if b_alone else [])], device=b_device, seed=1,
            **{k: v for k, v in kw.items() if k != "seed"})
    return write_scrapes(tmp_path / "scrapes.txt", [a, b], 75)


def test_two_jobs_that_shared_a_device_make_one_row_with_their_slowdowns(tmp_path):
    out = tmp_path / "observed"
    result = collect(CollectOptions(scrapes=(classic(tmp_path),), out=out))
    ((row),) = result.rows.to_dict(orient="records")
    assert (row["workload_a"], row["workload_b"], row["device_name"], row["mode"]) == ("cnn", "lm", CPU, "cpu")
    assert row["source"] == "observed" and row["status"] == "ok" and row["isolation"] == "observed:alone/alone"
    assert row["slowdown_a"] == pytest.approx(10 / 6, rel=0.04) and row["slowdown_b"] == pytest.approx(8 / 5, rel=0.04)
    assert row["solo_a"] == pytest.approx(10, rel=0.04) and row["coloc_b"] == pytest.approx(5, rel=0.04)
    for side, truth in (("a", 10 / 6), ("b", 8 / 5)):
        assert 0 < row[f"ci_{side}"] < 0.05 and row[f"cv_{side}"] > 0  # jitter gives a spread, windows narrow it
        assert abs(row[f"slowdown_{side}"] / truth - 1) < 4 * row[f"ci_{side}"] + 0.01
    assert row["trials"] >= 15 and row["steps_a"] >= 3 and 20 <= row["pair_s"] <= 25
    (interval,) = result.intervals
    assert interval.jobs == ("cnn", "lm") and interval.outcome == "written" and interval.device == "n1:0-1"
    assert result.alone_windows == {"cnn on n1:0-1": pytest.approx(17, abs=3), "lm on n1:0-1": pytest.approx(22, abs=3)}
    stored = Dataset(out).read_pairs()
    assert len(stored) == 1 and stored.loc[0, "slowdown_a"] == row["slowdown_a"]
    series = result.observed.to_frame()
    assert set(series["name"]) == {"cnn", "lm"} and (series.groupby("pid")["steps"].diff().dropna() >= 0).all()


def test_rows_already_in_the_folder_are_kept(tmp_path):
    out = tmp_path / "observed"
    scrapes = classic(tmp_path)
    collect(CollectOptions(scrapes=(scrapes,), out=out))
    collect(CollectOptions(scrapes=(scrapes,), out=out))
    assert len(Dataset(out).read_pairs(latest=False)) == 2 and len(list((out / "pairs").glob("*.parquet"))) == 2


def test_too_short_together_is_no_row_and_counted(tmp_path):
    a = job("cnn", [(0, 20, 10.0), (20, 25, 6.0)])  # together 5 s: one window once the edges are dropped
    b = job("lm", [(20, 25, 5.0), (25, 50, 8.0)], seed=1)
    out = tmp_path / "observed"
    result = collect(CollectOptions(scrapes=(write_scrapes(tmp_path / "s.txt", [a, b], 55),), out=out))
    assert result.rows.empty and result.skipped == {"too short": 1} and not out.exists()
    assert result.intervals[0].outcome.startswith("too short: ")


def test_too_noisy_is_no_row_and_counted(tmp_path):
    result = collect(CollectOptions(scrapes=(classic(tmp_path, jitter=0.6),), ci_target=0.01))
    assert result.rows.empty and result.skipped == {"too noisy": 1}
    assert "half-widths" in result.intervals[0].outcome


def test_a_job_never_alone_takes_its_solo_profile_on_that_device_model(tmp_path):
    scrapes = classic(tmp_path, b_alone=False)
    bare = collect(CollectOptions(scrapes=(scrapes,)))
    assert bare.rows.empty and bare.skipped == {"no rate alone": 1}
    assert bare.intervals[0].outcome == "no rate alone: lm ran alone on no stretch and has no solo profile"
    data = tmp_path / "profiles"
    base = {"family": "lm", "batch_size": 8, "device_kind": "cpu", "mode": "cpu", "host": "n1", "torch_version": "2",
            "created_at": "2026-12-04T00:00:00Z", "iter_time_ms": 125.0, "throughput": 8.0}
    Dataset(data).write_profiles(pd.DataFrame([{**base, "workload": "lm", "device_name": "Other CPU (2 cores)",
                                                "throughput": 99.0}, {**base, "workload": "lm", "device_name": CPU}]))
    out = tmp_path / "observed"
    (row,) = collect(CollectOptions(scrapes=(scrapes,), data=(str(data),), out=out)).rows.to_dict(orient="records")
    assert row["isolation"] == "observed:alone/profile" and row["solo_b"] == 8.0
    assert row["slowdown_b"] == pytest.approx(8 / 5, rel=0.04) and row["slowdown_a"] == pytest.approx(10 / 6, rel=0.04)
    profiles, pairs = read_datasets([data, out])  # as `train DATA OBSERVED` reads them: pairs beside profiles
    assert len(profiles) == 2 and pairs["source"].tolist() == ["observed"]


def test_core_sets_that_overlap_but_differ_are_an_interval_and_no_row(tmp_path):
    result = collect(CollectOptions(scrapes=(classic(tmp_path, b_device="1-2"),)))
    assert result.rows.empty and result.skipped == {"core sets overlap but differ": 1}
    assert result.intervals[0].device == "n1:0-1,n1:1-2"
    apart = collect(CollectOptions(scrapes=(classic(tmp_path, b_device="2-3"),)))  # no shared core: no interval
    assert apart.intervals == [] and apart.rows.empty


def test_three_jobs_on_one_device_are_skipped(tmp_path):
    a = job("cnn", [(0, 20, 10.0), (20, 45, 5.0)])
    b = job("lm", [(20, 45, 4.0), (45, 70, 8.0)], seed=1)
    c = job("ncf", [(20, 45, 4.0)], seed=2)
    result = collect(CollectOptions(scrapes=(write_scrapes(tmp_path / "s.txt", [a, b, c], 75),)))
    assert result.rows.empty and result.skipped == {"3 jobs on one device": 1}
    assert result.intervals[0].jobs == ("cnn", "lm", "ncf")


def test_gpus_are_one_device_by_uuid_and_rows_are_timeslice_by_default(tmp_path):
    gpu = {"kind": "cuda", "device_name": "NVIDIA H200"}
    a = job("cnn", [(0, 20, 10.0), (20, 45, 6.0)], device="GPU-aaaa", **gpu)
    b = job("lm", [(20, 45, 5.0), (45, 70, 8.0)], device="GPU-aaaa", seed=1, **gpu)
    (row,) = collect(CollectOptions(scrapes=(write_scrapes(tmp_path / "s.txt", [a, b], 75),))).rows.to_dict(
        orient="records")
    assert (row["device_kind"], row["device_name"], row["mode"]) == ("cuda", "NVIDIA H200", "timeslice")
    other = job("lm", [(20, 45, 5.0), (45, 70, 8.0)], device="GPU-bbbb", seed=1, **gpu)
    apart = collect(CollectOptions(scrapes=(write_scrapes(tmp_path / "t.txt", [a, other], 75),), mode="mps"))
    assert apart.intervals == [] and apart.rows.empty


def test_what_collect_refuses(tmp_path):
    with pytest.raises(ConfigError, match="either --prometheus"):
        CollectOptions()
    with pytest.raises(ConfigError, match="needs a time range"):
        CollectOptions(prometheus="http://127.0.0.1:9")
    bare = tmp_path / "bare.txt"
    bare.write_text(f'{STEPS_SERIES}{{name="x"}} 3.0\n')
    with pytest.raises(SchemaError, match="has no timestamp"):
        collect(CollectOptions(scrapes=(bare,)))
    empty = tmp_path / "empty.txt"
    empty.write_text("other_metric 1.0 1764880000000\n")
    with pytest.raises(SchemaError, match="no sharewise_observed_steps_total"):
        collect(CollectOptions(scrapes=(empty,)))
    with pytest.raises(ConfigError, match="cannot reach Prometheus at http://127.0.0.1:9"):
        collect(CollectOptions(prometheus="http://127.0.0.1:9", start=T0, end=T0 + 60, timeout_s=5))


def test_times_are_read_as_people_write_them():
    assert parse_time("-90s", now=1000.0) == 910.0 and parse_time("-1.5h", now=10_000.0) == 4600.0
    assert parse_time("now", now=5.0) == 5.0 and parse_time("2026-12-04T22:40:00Z") == parse_time("1796424000")
    with pytest.raises(ConfigError, match="ISO 8601"):
        parse_time("yesterday")


def test_the_cli_writes_the_rows_prints_the_intervals_and_the_series(tmp_path):
    scrapes = classic(tmp_path)
    out, csv = tmp_path / "observed", tmp_path / "series.csv"
    done = subprocess.run([sys.executable, "-m", "sharewise", "collect", "--scrapes", str(scrapes), "--out", str(out),
                           "--series-csv", str(csv)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "cnn" in done.stdout and "written" in done.stdout and "wrote 1 row(s)" in done.stderr
    series = pd.read_csv(csv)
    assert {"time", "name", "device", "pid", "steps", "last_step"} <= set(series.columns) and len(series) > 90
    assert len(Dataset(out).read_pairs()) == 1
    as_json = subprocess.run([sys.executable, "-m", "sharewise", "collect", "--scrapes", str(scrapes), "--json"],
                             capture_output=True, text=True, timeout=120)
    import json

    got = json.loads(as_json.stdout)
    assert got["rows"][0]["workload_a"] == "cnn" and got["intervals"][0]["outcome"] == "written"
    assert math.isfinite(got["rows"][0]["ci_a"]) and got["written"] is None
