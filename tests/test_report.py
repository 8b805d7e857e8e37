"""The report page on a small literal dataset: figures, tables and a simulated JCT comparison."""

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from sharewise.cli import main
from sharewise.datasets import Dataset
from sharewise.report import synthetic_trace

WORKLOADS = {"w0": (1.0, 0.9), "w1": (2.0, 0.5), "w2": (0.5, 0.8), "w3": (1.5, 0.3)}  # (flops, busy)


def _dataset(path):
    ds = Dataset(path)
    base = dict(family="f", batch_size=8, device_kind="cpu", device_name="cpu0", mode="cpu", host="h",
                torch_version="2", created_at="2026-01-01T00:00:00", iter_time_ms=10.0, throughput=100.0)
    ds.write_profiles(pd.DataFrame([
        {**base, "workload": w, "family": f"fam{w}", "f_flops_per_step": f * 1e9, "f_busy_frac": b}
        for w, (f, b) in WORKLOADS.items()
    ]))
    rows = []
    for a, b in itertools.combinations_with_replacement(WORKLOADS, 2):
        # Slowdown grows with the partner's busy fraction: a pattern a model can learn from features.
        sa, sb = 1 + WORKLOADS[b][1], 1 + WORKLOADS[a][1]
        rows.append(dict(workload_a=a, workload_b=b, device_kind="cpu", device_name="cpu0", mode="cpu",
                         solo_a=10.0, solo_b=10.0, coloc_a=10 / sa, coloc_b=10 / sb, slowdown_a=sa, slowdown_b=sb,
                         trials=3, cv_a=0.01, cv_b=0.01, status="ok", error="", created_at="2026-01-01T00:00:00"))
    ds.write_pairs(pd.DataFrame(rows))
    return ds


def test_synthetic_trace_is_seeded_and_valid():
    t1, t2 = synthetic_trace(["a", "b"], 50, 4, seed=3), synthetic_trace(["a", "b"], 50, 4, seed=3)
    pd.testing.assert_frame_equal(t1, t2)
    assert (np.diff(t1["arrival_s"]) >= 0).all() and (t1["duration_s"] > 0).all()
    assert set(t1["gpus"]) <= {1, 2} and set(t1["workload"]) <= {"a", "b"}


def test_report_writes_page_and_figures(tmp_path):
    _dataset(tmp_path / "d")
    main(["report", str(tmp_path / "d"), "--out", str(tmp_path / "r"), "--gpus", "4", "--jobs", "40"])
    page = (tmp_path / "r" / "index.html").read_text()
    for name in ("heatmap_0.png", "predicted_vs_measured.png", "jct.png"):
        assert (tmp_path / "r" / name).stat().st_size > 1000
        assert name in page
    sim = json.loads((tmp_path / "r" / "simulation.json").read_text())
    assert sim["jobs"] == 40 and "sharewise" in sim["policies"] and "exclusive-fifo" in sim["policies"]


def test_report_of_a_dataset_without_pairs_is_exit_2(tmp_path, capsys):
    ds = _dataset(tmp_path / "d")
    for f in ds.pairs_dir.glob("*.parquet"):
        f.unlink()
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path / "d"), "--out", str(tmp_path / "r")])
    assert exc.value.code == 2 and "no pair measurements" in capsys.readouterr().err

