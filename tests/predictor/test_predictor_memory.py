"""Tests of the one memory rule: a job's footprint, the pair memory features, and ``memory_fit``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sharewise.predictor import memory_fit, ordered_rows
from sharewise.predictor.memory import job_memory

GIB = 2.0**30


def _profiles(rows: list[dict]) -> pd.DataFrame:
    base = {"device_name": "gpu0", "mode": "timeslice", "created_at": "2024-01-01", "iter_time_ms": 10.0}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_job_memory_prefers_reserved_then_allocated_then_rss_then_static():
    cols = ["f_mem_peak_allocated_bytes", "f_mem_peak_reserved_bytes", "f_mem_rss_growth_bytes",
            "f_param_bytes", "f_activation_bytes"]
    nan = np.nan
    values = np.array(
        [
            [5e9, 6e9, 1e9, 1e8, 2e8],  # reserved: what the caching allocator holds
            [5e9, nan, 1e9, 1e8, 2e8],  # allocated
            [nan, nan, 1e9, 1e8, 2e8],  # RSS growth
            [nan, nan, nan, 1e8, 2e8],  # static: 4 x parameters + activations
            [nan, nan, nan, nan, 2e8],  # nothing to go on
        ]
    )
    got = job_memory(values, {c: i for i, c in enumerate(cols)})
    np.testing.assert_array_equal(got, [6e9, 5e9, 1e9, 6e8, nan])


def test_memory_fit_on_a_literal_case():
    profiles = _profiles(
        [
            {"workload": "a", "f_mem_peak_reserved_bytes": 6e9, "f_device_mem_bytes": 10e9},
            {"workload": "b", "f_mem_peak_reserved_bytes": 3e9, "f_device_mem_bytes": 10e9},
        ]
    )
    fits, note = memory_fit(profiles, ["a", "b"])
    assert fits.tolist() == [[False, True], [True, True]]
    assert note == f"memory fit checked against {10e9 / GIB:.1f} GiB"


def test_memory_fit_uses_the_static_estimate_and_leaves_unknown_jobs_unblocked():
    profiles = _profiles(
        [
            {"workload": "a", "f_param_bytes": 1e9, "f_activation_bytes": 1e9, "f_device_mem_bytes": 9e9},
            {"workload": "b", "f_param_bytes": 1e8, "f_activation_bytes": 1e8, "f_device_mem_bytes": 9e9},
            {"workload": "c", "f_param_bytes": np.nan, "f_activation_bytes": 1e8, "f_device_mem_bytes": 9e9},
        ]
    )
    fits, note = memory_fit(profiles, ["a", "b", "c"])
    # a needs 5 GB (4 x 1 GB + 1 GB): two of it exceed 9 GB, a next to b (0.5 GB) fits; c is unknown.
    assert fits.tolist() == [[False, True, True], [True, True, True], [True, True, True]]
    assert "1 workload(s) without a memory measurement are not blocked" in note


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"f_param_bytes": 1e9}, "the profiles hold no memory features"),  # half a static estimate is none
        ({"f_mem_peak_reserved_bytes": 1e9}, "the profiles hold no memory features"),  # no device memory column
        ({"f_mem_peak_reserved_bytes": 1e9, "f_device_mem_bytes": np.nan}, "device memory unknown"),
    ],
)
def test_memory_fit_says_when_it_checked_nothing(columns, message):
    fits, note = memory_fit(_profiles([{"workload": "a", **columns}]), ["a"])
    assert fits.tolist() == [[True]] and note == f"memory fit not checked: {message}"


def test_pair_memory_features_follow_the_same_rule():
    profiles = _profiles(
        [
            {"workload": w, "family": w, "f_mem_peak_allocated_bytes": alloc, "f_mem_peak_reserved_bytes": res,
             "f_device_mem_bytes": 10e9}
            for w, alloc, res in (("a", 5e9, 6e9), ("b", 2e9, np.nan))
        ]
    )
    pairs = pd.DataFrame({"workload_a": ["a", "a"], "workload_b": ["a", "b"]})
    rows = ordered_rows(profiles, pairs, with_target=False, features="all")
    # a counts its reserved 6 GB, b (nothing reserved) its allocated 2 GB.
    np.testing.assert_allclose(rows.X["pair_sum_mem_bytes"].iloc[:2], [12e9, 8e9])
    np.testing.assert_allclose(rows.X["pair_mem_fit"].iloc[:2], [1.2, 0.8])
    fits, _ = memory_fit(profiles, ["a", "b"])
    assert fits.tolist() == [[False, True], [True, True]]  # the pairs the feature puts above 1
