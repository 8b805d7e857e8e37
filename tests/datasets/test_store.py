"""Dataset store: schema validation, atomic writes, latest-row reads, the campaign lock, bad files."""

import math

import pandas as pd
import pytest

from sharewise.datasets import Dataset, validate_pairs, validate_profiles
from sharewise.datasets.store import reference_path, resolve_dataset_path
from sharewise.datasets.summary import directed_slowdowns, slowdown_matrix
from sharewise.errors import DatasetError, DatasetLockedError, SchemaError

PROFILE = dict(
    workload="a",
    family="fa",
    batch_size=8,
    device_kind="cpu",
    device_name="cpu0",
    mode="cpu",
    host="h",
    torch_version="2",
    created_at="2026-01-01T00:00:00",
    iter_time_ms=10.0,
    throughput=100.0,
    f_flops=1e9,
)
PAIR = dict(
    workload_a="a",
    workload_b="b",
    device_kind="cpu",
    device_name="cpu0",
    mode="cpu",
    solo_a=100.0,
    solo_b=50.0,
    coloc_a=60.0,
    coloc_b=40.0,
    slowdown_a=100 / 60,
    slowdown_b=1.25,
    trials=3,
    cv_a=0.01,
    cv_b=0.02,
    status="ok",
    error="",
    created_at="2026-01-01T00:00:00",
)


def test_round_trip_and_latest_row_wins(tmp_path):
    ds = Dataset(tmp_path / "d")
    ds.write_profiles(pd.DataFrame([PROFILE]))
    ds.write_profiles(pd.DataFrame([{**PROFILE, "throughput": 120.0}]))
    ds.write_pairs(pd.DataFrame([PAIR]))
    prof = ds.read_profiles()
    assert len(prof) == 1 and prof.loc[0, "throughput"] == 120.0
    assert len(ds.read_profiles(latest=False)) == 2
    pairs = ds.read_pairs()
    assert pairs.loc[0, "slowdown_b"] == 1.25 and pairs["trials"].dtype == "int64"


def test_leftover_temp_file_is_ignored_and_cleaned_by_lock(tmp_path):
    ds = Dataset(tmp_path)
    ds.write_pairs(pd.DataFrame([PAIR]))
    junk = ds.pairs_dir / ".tmp-deadbeef.parquet"
    junk.write_bytes(b"PAR1 half a file")
    assert len(ds.read_pairs()) == 1
    with ds.lock():
        pass
    assert not junk.exists()


def test_truncated_parquet_names_the_file(tmp_path):
    ds = Dataset(tmp_path)
    path = ds.write_pairs(pd.DataFrame([PAIR]))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SchemaError, match=path.name):
        ds.read_pairs()


def test_lock_refuses_a_second_writer(tmp_path):
    ds = Dataset(tmp_path)
    with ds.lock():
        with pytest.raises(DatasetLockedError, match="another --out folder"):
            with Dataset(tmp_path).lock():
                pass
    with Dataset(tmp_path).lock():  # released
        pass


@pytest.mark.parametrize(
    "change, match",
    [
        ({"throughput": -1.0}, "throughput"),
        ({"f_flops": math.inf}, "f_flops"),
        ({"f_flops": "lots"}, "f_flops"),
        ({"batch_size": 2.5}, "batch_size"),
        ({"workload": 3}, "workload"),
    ],
)
def test_profile_validation(change, match):
    with pytest.raises(SchemaError, match=match):
        validate_profiles(pd.DataFrame([{**PROFILE, **change}]), "t.parquet")


def test_profile_missing_column():
    row = dict(PROFILE)
    del row["throughput"]
    with pytest.raises(SchemaError, match=r"missing column\(s\) \['throughput'\]"):
        validate_profiles(pd.DataFrame([row]), "t.parquet")


@pytest.mark.parametrize(
    "change, match",
    [
        ({"slowdown_a": -2.0}, "slowdown_a"),
        ({"status": "great"}, "status"),
        ({"coloc_b": math.nan}, "coloc_b"),
        ({"precision": "roughly"}, r"'precision' holds \['roughly'\]; expected 'met', 'missed' or ''"),
    ],
)
def test_pair_validation(change, match):
    with pytest.raises(SchemaError, match=match):
        validate_pairs(pd.DataFrame([{**PAIR, **change}]), "t.parquet")


def test_a_pair_row_keeps_its_precision_judgment_and_older_rows_read_as_not_judged(tmp_path):
    ds = Dataset(tmp_path / "d")
    ds.write_pairs(pd.DataFrame([PAIR]))  # a row from before the judgment existed
    ds.write_pairs(pd.DataFrame([{**PAIR, "workload_b": "c", "ci_a": 0.01, "ci_b": 0.3, "ci_target": 0.05,
                                  "precision": "missed"}]))
    pairs = ds.read_pairs().set_index("workload_b")
    assert pairs.loc["c", "precision"] == "missed" and pairs.loc["c", "ci_target"] == 0.05
    assert pairs.loc["b", "precision"] == "" and math.isnan(pairs.loc["b", "ci_target"])


def test_failed_pairs_may_leave_numbers_missing():
    row = {**PAIR, "status": "timeout", "slowdown_a": math.nan, "coloc_a": math.nan}
    assert validate_pairs(pd.DataFrame([row]), "t").loc[0, "status"] == "timeout"


def test_missing_and_empty_dataset(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        Dataset(tmp_path / "nope").require()
    (tmp_path / "profiles").mkdir()
    with pytest.raises(DatasetError, match="holds no profiles"):
        Dataset(tmp_path).require()


def test_reference_word_resolves_to_the_package(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_dataset_path("reference") == reference_path()


def test_slowdown_matrix_directions():
    pairs = validate_pairs(
        pd.DataFrame([PAIR, {**PAIR, "workload_b": "a", "slowdown_a": 2.0, "slowdown_b": 2.2}]), "t"
    )
    directed = directed_slowdowns(pairs)
    assert len(directed) == 3  # a|b both ways, a|a once
    m = slowdown_matrix(pairs)
    assert m.loc["a", "b"] == pytest.approx(100 / 60)
    assert m.loc["b", "a"] == pytest.approx(1.25)
    assert m.loc["a", "a"] == pytest.approx(2.1)
