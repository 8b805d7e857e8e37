"""Tests of the importers (Gavel JSON, generic CSV) on literal files, and on the public data in data/."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sharewise.datasets.importers import IMPORTERS, get_importer
from sharewise.datasets.importers import gavel as gavel_module
from sharewise.datasets.importers.gavel import import_gavel, parse_job_type
from sharewise.datasets.importers.generic_csv import import_csv
from sharewise.datasets.store import Dataset
from sharewise.errors import ConfigError, DatasetError, SchemaError

R18 = "('ResNet-18 (batch size 16)', 1)"
LM = "('LM (batch size 20)', 1)"
A3C = "('A3C', 1)"
GAVEL_LITERAL = {
    "k80": {
        R18: {"null": 4.0, R18: [2.0, 2.0], LM: [3.0, 10.0], A3C: [0.0, 0.0]},
        LM: {"null": 20.0, LM: [12.0, 12.0], R18: [10.0, 3.0], A3C: [15.0, 1.0]},
        A3C: {"null": 2.0, A3C: [1.0, 1.0], R18: [0.0, 0.0], LM: [1.0, 15.0]},
        "('ResNet-18 (batch size 16)', 2)": {"null": 7.0, "('ResNet-18 (batch size 16)', 2)": [0.0, 0.0]},
    },
    "v100": {
        R18: {"null": 30.0, R18: [20.0, 18.0], LM: [30.0, 60.0]},
        LM: {"null": 80.0, LM: [50.0, 50.0], R18: [60.0, 30.0]},
    },
    "v100_unconsolidated": {R18: {"null": 30.0, R18: [20.0, 18.0]}},
}


@pytest.fixture()
def gavel_file(tmp_path):
    path = tmp_path / "throughputs.json"
    path.write_text(json.dumps(GAVEL_LITERAL))
    return path


def test_registry_lists_both_formats():
    assert set(IMPORTERS) == {"gavel", "csv"}
    for name, importer in IMPORTERS.items():
        assert importer.name == name and importer.inputs and importer.summary and importer.example
    with pytest.raises(ConfigError, match="csv, gavel"):
        get_importer("parquet")


def test_parse_job_type():
    assert parse_job_type("LM (batch size 20)") == ("LM", 20)
    assert parse_job_type("CycleGAN") == ("CycleGAN", None)


def test_gavel_literal_file(gavel_file, tmp_path):
    result = import_gavel(gavel_file, tmp_path / "ds")
    assert result.devices == ["k80", "v100"]
    assert result.profiles == 5  # 3 job types on k80, 2 on v100; scale 2 and _unconsolidated skipped
    assert result.status_counts == {"ok": 8, "oom": 1}
    assert any("_unconsolidated" in w for w in result.warnings)
    ds = Dataset(tmp_path / "ds")
    profiles, pairs = ds.read_profiles(), ds.read_pairs()
    lm = profiles[(profiles["workload"] == "LM (batch size 20)") & (profiles["device_name"] == "k80")].iloc[0]
    assert lm["family"] == "lm" and lm["batch_size"] == 20 and lm["throughput"] == 20.0
    assert lm["iter_time_ms"] == pytest.approx(50.0) and lm["mode"] == "timeslice"
    a3c = profiles[profiles["workload"] == "A3C"].iloc[0]
    assert a3c["family"] == "a3c" and np.isnan(a3c["f_batch_size"])
    pair = pairs[
        (pairs["device_name"] == "k80")
        & (pairs["workload_a"] == "ResNet-18 (batch size 16)")
        & (pairs["workload_b"] == "LM (batch size 20)")
    ].iloc[0]
    assert pair["slowdown_a"] == pytest.approx(4.0 / 3.0) and pair["slowdown_b"] == pytest.approx(2.0)
    oom = pairs[pairs["status"] == "oom"].iloc[0]
    assert {oom["workload_a"], oom["workload_b"]} == {"ResNet-18 (batch size 16)", "A3C"}
    assert np.isnan(oom["slowdown_a"])
    # each unordered pair once per GPU, self-pairs included
    assert len(pairs[pairs["device_name"] == "k80"]) == 6 and len(pairs[pairs["device_name"] == "v100"]) == 3


def test_gavel_static_features_fall_back_to_nan_with_a_warning(gavel_file, tmp_path):
    def broken(spec, batch):
        raise DatasetError("the static feature counter is not available (test)")

    result = import_gavel(gavel_file, tmp_path / "ds", static_counter=broken)
    assert result.static_features["missing"] >= 1
    assert any("left missing (NaN)" in w and "not available" in w for w in result.warnings)
    assert not [
        c
        for c in Dataset(tmp_path / "ds").read_profiles().columns
        if c.startswith("f_") and c != "f_batch_size"
    ]


def test_gavel_static_features_are_counted_once_per_configuration_and_batch(gavel_file, tmp_path):
    calls = []

    def counter(spec, batch):
        calls.append((spec, batch))
        return {"f_flops_per_step": 1e9 * (batch or 1), "f_param_bytes": 4e6, "f_batch_size": 9.0}, batch or 32

    result = import_gavel(gavel_file, tmp_path / "ds", static_counter=counter)
    # once each, not per GPU; each Gavel model maps to the configuration its job command runs
    assert sorted(calls) == [("a3c_lstm", None), ("lstm_lm[dim=200,dropout=0.2]", 20), ("resnet18_cifar", 16)]
    assert result.static_features == {"counted": 3, "missing": 0}
    profiles = Dataset(tmp_path / "ds").read_profiles()
    assert profiles.loc[profiles["workload"] == "LM (batch size 20)", "f_flops_per_step"].eq(20e9).all()
    assert profiles.loc[profiles["workload"] == "A3C", "batch_size"].eq(32).all()
    # the batch size is Gavel's own (NaN for A3C, which names none), never the counter's
    assert profiles.loc[profiles["workload"] == "LM (batch size 20)", "f_batch_size"].eq(20.0).all()


def test_import_through_the_registry_gets_the_profilers_counter(gavel_file, tmp_path):
    from sharewise.app.imports import import_data

    result = import_data("gavel", {"path": gavel_file}, tmp_path / "ds", frozenset({"no_static"}))
    assert result.static_features == {}
    assert any("disabled" in w for w in result.warnings)


def test_gavel_bad_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"k80": {"ResNet-18": {"null": 1.0}}}))
    with pytest.raises(SchemaError, match="ResNet-18"):
        import_gavel(bad, tmp_path / "ds")
    bad.write_text(json.dumps({"k80": {R18: {"null": 1.0, R18: [1.0]}}}))
    with pytest.raises(SchemaError, match=r"bad\.json"):
        import_gavel(bad, tmp_path / "ds")


def test_gavel_public_data(public_data, tmp_path):
    result = import_gavel(public_data / "gavel" / "simulation_throughputs.json", tmp_path / "gavel")
    assert result.devices == ["k80", "p100", "v100"]
    assert result.pairs_ok == 976  # the README's feasible single-GPU pairs
    assert len(result.workloads) == 26
    pairs = Dataset(tmp_path / "gavel").read_pairs()
    ok = pairs[pairs["status"] == "ok"]
    speed = 1.0 / np.concatenate([ok["slowdown_a"], ok["slowdown_b"]])
    assert np.median(speed) == pytest.approx(0.58, abs=0.01)
    profiles = Dataset(tmp_path / "gavel").read_profiles()
    assert set(profiles["family"]) == {
        "resnet18",
        "resnet50",
        "transformer",
        "lm",
        "recommendation",
        "a3c",
        "cyclegan",
    }


# ---- generic CSV -------------------------------------------------------------------------------------------

PROFILES_CSV = """workload,family,device_name,throughput,flops,f_busy_frac
A,fa,gpu0,10,1e9,0.5
B,fb,gpu0,5,2e9,
C,fc,gpu0,2,4e9,0.9
"""
PAIRS_CSV = """workload_a,workload_b,device_name,slowdown_a,slowdown_b
A,B,gpu0,1.2,1.5
A,C,gpu0,1.4,1.1
B,C,gpu0,1.8,1.3
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_csv_import_round_trip(tmp_path):
    result = import_csv(
        write(tmp_path, "p.csv", PROFILES_CSV), write(tmp_path, "q.csv", PAIRS_CSV), tmp_path / "ds"
    )
    assert result.profiles == 3 and result.pairs_ok == 3
    ds = Dataset(tmp_path / "ds")
    profiles, pairs = ds.read_profiles(), ds.read_pairs()
    assert {"f_flops", "f_busy_frac"} <= set(profiles.columns)
    b = profiles[profiles["workload"] == "B"].iloc[0]
    assert np.isnan(b["f_busy_frac"]) and b["iter_time_ms"] == pytest.approx(200.0)
    row = pairs[(pairs["workload_a"] == "B") & (pairs["workload_b"] == "C")].iloc[0]
    assert row["slowdown_a"] == 1.8 and row["coloc_a"] == pytest.approx(5 / 1.8)


def test_csv_pairs_without_device_use_the_only_device(tmp_path):
    pairs = "workload_a,workload_b,slowdown_a,slowdown_b,notes\nA,B,1.2,1.5,x\n"
    result = import_csv(
        write(tmp_path, "p.csv", PROFILES_CSV), write(tmp_path, "q.csv", pairs), tmp_path / "ds"
    )
    assert result.pairs_ok == 1 and any("notes" in w for w in result.warnings)
    assert Dataset(tmp_path / "ds").read_pairs()["device_name"].tolist() == ["gpu0"]


@pytest.mark.parametrize(
    ("profiles", "pairs", "where", "why"),
    [
        (PROFILES_CSV, PAIRS_CSV + "A,D,gpu0,1.1,1.1\n", "q.csv, row 4 (line 5), column 'workload_b'", "'D'"),
        (PROFILES_CSV.replace("1e9", "lots"), PAIRS_CSV, "p.csv, row 1 (line 2), column 'flops'", "'lots'"),
        (
            PROFILES_CSV.replace(",0.9", ",nan"),
            PAIRS_CSV,
            "p.csv, row 3 (line 4), column 'f_busy_frac'",
            "empty",
        ),
        (PROFILES_CSV.replace("4e9", "inf"), PAIRS_CSV, "p.csv, row 3 (line 4), column 'flops'", "literal"),
        (
            PROFILES_CSV,
            PAIRS_CSV.replace("1.4,1.1", "1.4,0"),
            "q.csv, row 2 (line 3), column 'slowdown_b'",
            "positive",
        ),
        (
            PROFILES_CSV,
            PAIRS_CSV.replace("1.8,1.3", "-1,1.3"),
            "q.csv, row 3 (line 4), column 'slowdown_a'",
            "positive",
        ),
        (
            PROFILES_CSV,
            PAIRS_CSV.replace("1.2,1.5", "1.2,"),
            "q.csv, row 1 (line 2), column 'slowdown_b'",
            "empty",
        ),
        (
            PROFILES_CSV,
            PAIRS_CSV.replace("1.2,1.5", "1.2,NaN"),
            "q.csv, row 1 (line 2), column 'slowdown_b'",
            "literal",
        ),
    ],
)
def test_csv_bad_input_names_file_row_column(tmp_path, profiles, pairs, where, why):
    p, q = write(tmp_path, "p.csv", profiles), write(tmp_path, "q.csv", pairs)
    with pytest.raises(SchemaError) as err:
        import_csv(p, q, tmp_path / "ds")
    message = str(err.value)
    assert where in message and why in message
    assert not (tmp_path / "ds" / "profiles").exists()  # nothing half-written


def test_csv_missing_columns(tmp_path):
    with pytest.raises(SchemaError, match="'workload'"):
        import_csv(
            write(tmp_path, "p.csv", "name,x\nA,1\n"), write(tmp_path, "q.csv", PAIRS_CSV), tmp_path / "ds"
        )
    with pytest.raises(SchemaError, match="slowdown_b"):
        import_csv(
            write(tmp_path, "p.csv", PROFILES_CSV),
            write(tmp_path, "q.csv", "workload_a,workload_b,slowdown_a\nA,B,1\n"),
            tmp_path / "ds",
        )


def test_cli_import_csv_and_bad_input(tmp_path, capsys):
    from sharewise.cli import main

    p, q = write(tmp_path, "p.csv", PROFILES_CSV), write(tmp_path, "q.csv", PAIRS_CSV)
    main(["import", "csv", "--profiles", str(p), "--pairs", str(q), "--out", str(tmp_path / "ds")])
    assert "3 profiles" in capsys.readouterr().out
    bad = write(tmp_path, "bad.csv", PAIRS_CSV.replace("1.4,1.1", "1.4,-2"))
    with pytest.raises(SystemExit) as exc:
        main(["import", "csv", "--profiles", str(p), "--pairs", str(bad), "--out", str(tmp_path / "ds2")])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.startswith("error: ") and "bad.csv" in err and "slowdown_b" in err
    assert len(err.strip().splitlines()) == 1


def test_cli_import_gavel(gavel_file, tmp_path, capsys):
    from sharewise.cli import main

    main(["import", "gavel", str(gavel_file), "--out", str(tmp_path / "g"), "--no-static"])
    captured = capsys.readouterr()
    assert "5 profiles" in captured.out and "k80" in captured.out
    with pytest.raises(SystemExit) as exc:
        main(["import", "gavel", str(tmp_path / "nope.json"), "--out", str(tmp_path / "g")])
    assert exc.value.code == 2 and "not found" in capsys.readouterr().err


# ---- the zoo configurations that stand for Gavel's models -------------------------------------------------


def test_every_gavel_model_maps_to_a_registered_zoo_configuration():
    from dataclasses import fields

    from sharewise.profiler.workloads import REGISTRY, load_workload_class

    assert set(gavel_module.ZOO_WORKLOADS) == set(gavel_module.GAVEL_FAMILIES)
    for model, match in gavel_module.ZOO_WORKLOADS.items():
        assert match.workload in REGISTRY, model
        cls = load_workload_class(match.workload)
        known = {f.name for f in fields(type(cls.configs["full"]))}
        assert {k for k, _ in match.overrides} <= known, (model, match.overrides)
        assert match.source, f"{model}: say which configuration Gavel runs"
    # Gavel's ResNet-18 jobs train on CIFAR-10 (image_classification/cifar10): 32 px, not ImageNet's 224 px.
    cifar = load_workload_class(gavel_module.ZOO_WORKLOADS["ResNet-18"].workload)
    assert cifar.configs["full"].image == 32 and cifar.configs["full"].classes == 10


def test_gavel_static_features_follow_the_mapped_configuration():
    pytest.importorskip("torch")
    from sharewise.profiler.static import count_static

    r18, _ = count_static(gavel_module.ZOO_WORKLOADS["ResNet-18"].key(), 16)
    imagenet, _ = count_static(gavel_module.ZooMatch("resnet18").key(), 16)
    # About the same 11M parameters, a third of the FLOPs per image at 32 px without the ImageNet stem.
    assert r18["f_param_bytes"] == pytest.approx(imagenet["f_param_bytes"], rel=0.06)  # 10 vs 1000 classes
    assert 0.2 < r18["f_flops_per_step"] / imagenet["f_flops_per_step"] < 0.4
    lm, _ = count_static(gavel_module.ZOO_WORKLOADS["LM"].key(), 20)
    full, _ = count_static(gavel_module.ZooMatch("lstm_lm").key(), 20)
    assert lm["f_flops_per_step"] < full["f_flops_per_step"] / 2  # 200 units, not the 650-unit medium
