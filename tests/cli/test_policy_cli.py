"""The policy commands of the CLI: ``policies``, help, ``recommend --json`` and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli

from sharewise.policy import REGISTRY


# ---- CLI ------------------------------------------------------------------------------------------
def test_cli_policies_lists_the_registry(capsys):
    assert run_cli(["policies", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == list(REGISTRY) and all(r["summary"] for r in rows)


def test_cli_policies_says_what_each_one_does_in_plain_text(capsys):
    assert run_cli(["policies", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    summaries = [r["summary"] for r in rows]
    assert len(set(summaries)) == len(summaries), "two policies share one description"
    assert not [s for s in summaries if "``" in s or "\n" in s]
    assert rows[0]["knobs"] == {"order": "fifo", "backfill": False}  # a variant's knobs, in JSON only
    assert run_cli(["policies"]) == 0
    table = capsys.readouterr().out
    assert "``" not in table and all(name in table for name in REGISTRY)


@pytest.mark.parametrize("command", ["policies", "simulate", "recommend"])
def test_cli_commands_have_help(command, capsys):
    assert run_cli([command, "--help"]) == 0
    assert "Example:" in capsys.readouterr().out


def _tiny_dataset(folder: Path) -> Path:
    from sharewise.datasets.store import Dataset

    names = ["w0", "w1", "w2", "w3"]
    rng = np.random.default_rng(0)
    feats: dict = {
        "f_busy_frac": [0.3, 0.5, 0.7, 0.9],
        "f_mem_peak_reserved_bytes": [2e9, 3e9, 4e9, 9e9],
        "f_device_mem_bytes": [16e9] * 4,
    }
    profiles = pd.DataFrame(
        {
            "workload": names,
            "family": ["x", "x", "y", "z"],
            "batch_size": 8,
            "device_kind": "cuda",
            "device_name": "gpu-x",
            "mode": "timeslice",
            "host": "h",
            "torch_version": "",
            "created_at": "t",
            "iter_time_ms": [10.0, 20.0, 30.0, 40.0],
            "throughput": [100.0, 50.0, 33.0, 25.0],
            **feats,
        }
    )
    rows = []
    for i in range(4):
        for j in range(i, 4):
            sa = 1.0 + feats["f_busy_frac"][j] * rng.uniform(0.8, 1.2)
            sb = 1.0 + feats["f_busy_frac"][i] * rng.uniform(0.8, 1.2)
            rows.append(
                {
                    "workload_a": names[i],
                    "workload_b": names[j],
                    "device_kind": "cuda",
                    "device_name": "gpu-x",
                    "mode": "timeslice",
                    "solo_a": 1.0,
                    "solo_b": 1.0,
                    "coloc_a": 1 / sa,
                    "coloc_b": 1 / sb,
                    "slowdown_a": sa,
                    "slowdown_b": sb,
                    "trials": 1,
                    "cv_a": 0.0,
                    "cv_b": 0.0,
                    "status": "ok",
                    "error": "",
                    "created_at": "t",
                }
            )
    ds = Dataset(folder)
    ds.write_profiles(profiles)
    ds.write_pairs(pd.DataFrame(rows))
    return folder


def test_cli_recommend_json_and_bad_queue(tmp_path, capsys):
    pytest.importorskip("xgboost")
    from sharewise.datasets.store import Dataset
    from sharewise.predictor import train_model

    data = _tiny_dataset(tmp_path / "data")
    ds = Dataset(data)
    model = train_model(ds.read_profiles(), ds.read_pairs(), n_estimators=20)
    model.save(tmp_path / "model.json")
    queue = tmp_path / "queue.csv"
    queue.write_text("job_id,workload,remaining_s\nq1,w0,100\nq2,w1,50\nq3,w2,10\nq4,w0,70\nq5,w3,20\n")
    argv = [
        "recommend",
        "--model",
        str(tmp_path / "model.json"),
        "--data",
        str(data),
        "--queue",
        str(queue),
        "--gpus",
        "2",
        "--max-slowdown",
        "5",
        "--json",
    ]
    assert run_cli(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "exact"
    placed = [j for p in out["placements"] for j in p["jobs"]]
    assert len(placed) == len(set(placed)) and len(placed) + len(out["waiting"]) == 5
    for p in out["placements"]:
        assert len(p["gpus"]) == 1 and len(p["jobs"]) <= 2
        if p["kind"] != "alone":
            assert max(p["p90"]) <= 5 and "why" in p and p["why"]["a"]
            assert p["workloads"] != ["w3", "w3"]  # 2 x 9 GB does not fit in 16 GB
    assert run_cli(argv[:-1]) == 0  # the table
    assert "GPU-equivalents" in capsys.readouterr().out
    bad = tmp_path / "bad.csv"
    bad.write_text("job,workload\nq1,w0\n")
    assert run_cli([*argv[:6], str(bad), "--gpus", "2"]) == 2
    assert "missing column(s) ['job_id']" in capsys.readouterr().err


