"""The one builder of a measured pairs row (``datasets.pair_row``), which the profiler's pair runs, ``collect`` and
``sharewise run`` write through: every column in one order, what was not measured missing, nothing outside the
schema."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from sharewise.datasets.pair_row import OBSERVED, pair_row
from sharewise.datasets.schema import validate_pairs
from sharewise.profiler.config import RunConfig
from sharewise.profiler.pair import PairTask, empty_row


def test_a_row_holds_what_was_measured_and_leaves_the_rest_missing():
    row = pair_row("bert", "ncf", device_kind="cpu", device_name="cpu (2 cores)", mode="cpu", size="small",
                   isolation="run:sharewise", host="vm1", solo_a=10.0, solo_b=20.0, coloc_a=8.0, coloc_b=16.0,
                   slowdown_a=1.25, slowdown_b=1.25, cv_a=0.01, cv_b=0.02, trials=4, source=OBSERVED)
    assert list(row)[:7] == ["workload_a", "workload_b", "device_kind", "device_name", "mode", "size", "isolation"]
    assert list(row)[-1] == "source" and row["source"] == "observed" and row["host"] == "vm1"
    assert (row["trials"], row["status"], row["error"], row["batch_size_a"], row["steps_a"]) == (4, "ok", "", 0, 0)
    assert math.isnan(row["ci_a"]) and math.isnan(row["pair_s"]) and math.isnan(row["other_cpu_frac"])
    checked = validate_pairs(pd.DataFrame([row]), "a run's row")  # the schema takes it as written
    assert checked["slowdown_a"].iloc[0] == 1.25


def test_a_column_outside_the_schema_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"\['slowdown'\], which are no columns of the pairs table"):
        pair_row("a", "b", device_kind="cpu", device_name="d", mode="cpu", size="small", isolation="x",
                 slowdown=1.2)


def test_a_pair_runs_row_is_this_row_with_its_knob_and_target():
    """A pair run's row before (or without) its measurements, as a failed pair is written (``profiler.pair``)."""
    config = RunConfig(split=0.3, ci_target=0.02, batch_size=8)
    row = empty_row(PairTask("a.py:A", "b", "a", "b"), config, "cpu (2 cores)", "failed", "a: boom")
    plain = pair_row("a", "b", device_kind="cpu", device_name="cpu (2 cores)", mode=config.mode, size=config.size,
                     isolation=config.isolation)
    assert list(row) == [*plain, "split_a", "ci_target", "precision"]
    assert (row["status"], row["error"], row["trials"], row["batch_size_a"], row["batch_size_b"]) == (
        "failed", "a: boom", 0, 8, 8)
    assert (row["split_a"], row["ci_target"], row["precision"]) == (30.0, 0.02, "")
    assert math.isnan(row["slowdown_a"]) and math.isnan(empty_row(
        PairTask("a", "b", "a", "b"), RunConfig(), "d", "skipped", "")["split_a"])  # no knob: NaN
    checked = validate_pairs(pd.DataFrame([row]), "a failed pair's row")
    assert checked["split_a"].iloc[0] == 30.0
