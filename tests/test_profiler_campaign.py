"""Campaign planning without running anything: all pairs, the specs check, and which pairs count as done."""

from __future__ import annotations

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
