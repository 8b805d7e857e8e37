"""Static features of imported job types: spec parsing, meta-device counting, the feature cache, named errors."""

from __future__ import annotations

import dataclasses
import math

import pytest

from sharewise.errors import SharewiseError
from sharewise.profiler.features import FeatureCache
from sharewise.profiler.static import StaticCountError, count_static, parse_spec


@pytest.mark.parametrize(
    "spec, parsed",
    [
        ("ncf", ("ncf", {})),
        ("lstm_lm[dim=200,dropout=0.2]", ("lstm_lm", {"dim": 200, "dropout": 0.2})),
        (" lstm_lm [ dim = 200 ] ", ("lstm_lm", {"dim": 200})),
        ("x[kernel=(3, 3),act=gelu,bias=True]", ("x", {"kernel": (3, 3), "act": "gelu", "bias": True})),
        ("x[]", ("x", {})),
    ],
)
def test_parse_spec(spec, parsed):
    assert parse_spec(spec) == parsed


@pytest.mark.parametrize("spec", ["", "x[dim=1", "x[dim]", "x[1=2]", "[dim=2]"])
def test_parse_spec_refuses_malformed(spec):
    with pytest.raises(StaticCountError, match="static spec"):
        parse_spec(spec)


def test_count_static_matches_static_features_on_meta_and_caches(tmp_path, monkeypatch):
    import torch

    from sharewise.profiler.flops import static_features
    from sharewise.profiler.workloads import load_workload_class

    cache = FeatureCache(tmp_path)
    feats, batch = count_static("ncf[mf_dim=16]", 32, size="tiny", cache=cache)
    # What the count stands for: the workload at that size with the field replaced, one step on meta.
    workload = load_workload_class("ncf")(batch_size=32, size="tiny")
    workload.cfg = dataclasses.replace(workload.cfg, mf_dim=16)
    workload.build(torch.device("meta"))
    expected = static_features(workload)
    workload.close()
    assert batch == 32 and "f_batch_size" not in feats
    assert feats == {k: v for k, v in expected.items() if k != "f_batch_size"}
    assert all(isinstance(v, float) and math.isfinite(v) for v in feats.values())
    assert len(list(tmp_path.glob("*.json"))) == 1

    # A second call reads the cache: nothing is built or counted.
    def never(*a, **k):
        raise AssertionError("counted again despite the cache")

    monkeypatch.setattr("sharewise.profiler.flops.static_features", never)
    assert count_static("ncf[mf_dim=16]", 32, size="tiny", cache=cache) == (feats, 32)
    # Another configuration or batch size is another key.
    with pytest.raises(StaticCountError, match="AssertionError"):
        count_static("ncf[mf_dim=8]", 32, size="tiny", cache=cache)


def test_count_static_default_batch_and_overrides_change_the_count(tmp_path):
    base, batch = count_static("ncf", None, size="tiny", use_cache=False)
    from sharewise.profiler.workloads import load_workload_class

    assert batch == load_workload_class("ncf")(size="tiny").batch_size
    wider, _ = count_static("ncf[mf_dim=64]", None, size="tiny", use_cache=False)
    assert wider["f_param_bytes"] > base["f_param_bytes"]
    assert not list(tmp_path.iterdir())  # use_cache=False wrote nothing anywhere we look


def test_non_finite_features_become_nan_and_are_not_cached(tmp_path, monkeypatch):
    monkeypatch.setattr(
        "sharewise.profiler.flops.static_features",
        lambda w: {"f_flops_per_step": float("inf"), "f_param_bytes": 8.0, "f_batch_size": 4.0},
    )
    feats, _ = count_static("ncf", 4, size="tiny", cache=FeatureCache(tmp_path))
    assert math.isnan(feats["f_flops_per_step"]) and feats["f_param_bytes"] == 8.0
    assert not list(tmp_path.glob("*.json"))


@pytest.mark.parametrize(
    "spec, batch, match",
    [
        ("no_such_model", None, "unknown workload 'no_such_model'"),
        ("ncf[nope=1]", None, r"has no field\(s\) nope; its fields: "),
        ("ncf", 0, "batch_size must be a positive integer"),
        ("ncf[mf_dim=-4]", None, r"counting static features of 'ncf\[mf_dim=-4\]' failed \(RuntimeError: "),
    ],
)
def test_failures_are_one_named_error(spec, batch, match):
    with pytest.raises(StaticCountError, match=match) as info:
        count_static(spec, batch, size="tiny", use_cache=False)
    assert isinstance(info.value, SharewiseError)


def test_without_torch_the_error_says_so(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(StaticCountError, match="the static feature counter is not available"):
        count_static("ncf", None, use_cache=False)
