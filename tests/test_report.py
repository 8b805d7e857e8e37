"""The report page on a small literal dataset: figures, tables and a simulated JCT comparison."""

import json

import numpy as np
import pytest
from conftest import make_literal_dataset

from sharewise.cli import main
from sharewise.datasets.traces.synthetic import synthetic_trace


def test_synthetic_trace_is_seeded_and_valid():
    t1, t2 = synthetic_trace(["a", "b"], 50, 4, seed=3), synthetic_trace(["a", "b"], 50, 4, seed=3)
    for field in ("arrival", "duration", "gpus", "workload"):
        np.testing.assert_array_equal(getattr(t1, field), getattr(t2, field))
    assert (np.diff(t1.arrival) >= 0).all() and (t1.duration > 0).all()
    assert set(t1.gpus) <= {1, 2} and set(t1.workload) <= {"a", "b"}


def test_report_writes_page_and_figures(tmp_path):
    make_literal_dataset(tmp_path / "d")
    main(["report", str(tmp_path / "d"), "--out", str(tmp_path / "r"), "--gpus", "4", "--jobs", "40"])
    page = (tmp_path / "r" / "index.html").read_text()
    for name in ("heatmap_0.png", "predicted_vs_measured.png", "jct.png"):
        assert (tmp_path / "r" / name).stat().st_size > 1000
        assert name in page
    sim = json.loads((tmp_path / "r" / "simulation.json").read_text())
    assert sim["jobs"] == 40 and "sharewise" in sim["policies"] and "exclusive-fifo-strict" in sim["policies"]


def test_report_of_a_dataset_without_pairs_is_exit_2(tmp_path, capsys):
    ds = make_literal_dataset(tmp_path / "d")
    for f in ds.pairs_dir.glob("*.parquet"):
        f.unlink()
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path / "d"), "--out", str(tmp_path / "r")])
    assert exc.value.code == 2 and "no pair measurements" in capsys.readouterr().err
