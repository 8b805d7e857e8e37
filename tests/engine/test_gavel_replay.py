"""Faithful replay of Gavel traces: multi-GPU durations, oversized jobs, both FIFOs and rounds, by hand.

The expected job completion times below are worked out from the trace and the throughputs with plain
arithmetic (written next to each number), not taken from the simulator's output.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sharewise.app.simulate import SimulationConfig, run_simulation
from sharewise.datasets.store import Dataset
from sharewise.datasets.traces import TraceContext
from sharewise.datasets.traces.gavel import job_throughput, read_gavel_trace

# Whole-job isolated steps/s by GPU count: A measured on 1 and 2 GPUs, B on one only.
CURVES = {"A": {1: 2.0, 2: 3.0}, "B": {1: 1.0}}
# (job type, total steps, arrival s, scale factor), in arrival order.
JOBS = [
    ("A", 300, 0.0, 2),  # j1: 300 / 3.0 = 100 s on 2 GPUs
    ("A", 1000, 0.0, 8),  # left out: 8 GPUs > the cluster's 4
    ("B", 100, 10.0, 2),  # j2: B has no 2-GPU rate: 1.0 * 2 / 1 = 2.0 steps/s -> 50 s
    ("A", 90, 15.0, 3),  # j5: largest measured <= 3 is 2: 3.0 * 3 / 2 = 4.5 steps/s -> 20 s
    ("A", 120, 20.0, 1),  # j3: 120 / 2.0 = 60 s on 1 GPU
]


def _trace_file(tmp_path: Path, layout: int) -> Path:
    lines = []
    for job_type, steps, arrival, scale in JOBS:
        if layout == 7:  # job_type, command, num_steps_arg, needs_data_dir, total_steps, arrival, scale
            fields = [job_type, "python3 train.py", "-n", "1", str(steps), f"{arrival:f}", str(scale)]
        else:  # job_type, command, working_dir, num_steps_arg, needs_data_dir, steps, scale, prio, SLO, arrival
            fields = [job_type, "python3 train.py", "/w", "-n", "1", str(steps), str(scale), "1", "-1", f"{arrival:f}"]
        lines.append("\t".join(fields))
    path = tmp_path / f"small{layout}.trace"
    path.write_text("\n".join(lines) + "\n")
    return path


def _dataset(tmp_path: Path) -> Path:
    base = dict(
        family="f", batch_size=1, device_kind="cuda", device_name="gpu", mode="timeslice", host="",
        torch_version="", created_at="2026-01-01T00:00:00+00:00",
    )
    profiles = pd.DataFrame(
        [
            {**base, "workload": w, "throughput": c[1], "iter_time_ms": 1000.0 / c[1],
             "scale_throughputs": json.dumps(c)}
            for w, c in CURVES.items()
        ]
    )
    pair = dict(
        device_kind="cuda", device_name="gpu", mode="timeslice", solo_a=1.0, solo_b=1.0, coloc_a=0.5,
        coloc_b=0.5, slowdown_a=2.0, slowdown_b=2.0, trials=1, cv_a=0.0, cv_b=0.0, status="ok", error="",
        created_at="2026-01-01T00:00:00+00:00",
    )
    pairs = pd.DataFrame(
        [{**pair, "workload_a": a, "workload_b": b} for a, b in (("A", "A"), ("A", "B"), ("B", "B"))]
    )
    ds = Dataset(tmp_path / "truth")
    ds.write_profiles(profiles)
    ds.write_pairs(pairs)
    return ds.path


def test_throughput_rule_for_unmeasured_scale_factors():
    assert job_throughput(CURVES["A"], 2) == (3.0, False)
    assert job_throughput(CURVES["A"], 3) == (4.5, True)  # 3.0 * 3 / 2
    assert job_throughput(CURVES["B"], 4) == (4.0, True)  # 1.0 * 4 / 1


@pytest.mark.parametrize("layout", [7, 10])
def test_both_layouts_give_durations_at_the_jobs_scale_factor(tmp_path, layout):
    trace = read_gavel_trace(_trace_file(tmp_path, layout), TraceContext(scale_throughputs=CURVES, n_gpus=4))
    assert trace.duration.tolist() == [100.0, 50.0, 20.0, 60.0]
    assert trace.gpus.tolist() == [2, 2, 3, 1] and trace.line.tolist() == [1, 3, 4, 5]
    notes = " ".join(trace.notes)
    assert "1 of 5 jobs ask for more than the cluster's 4 GPUs" in notes
    assert "2 of the 4 jobs replayed ask for a scale factor whose throughput was not measured" in notes


# Hand-worked JCTs on 4 GPUs (2 per node), jobs in trace order j1, j2, j5, j3.
# Strict FIFO (Gavel): t=0 j1 [0,100] on 2 GPUs; t=10 j2 [10,60] on the other 2; j5 (3 GPUs, t=15) heads the
#   queue and j3 (t=20) waits behind it; t=60 2 GPUs free, j5 does not fit and blocks j3; t=100 j1 ends: j5
#   [100,120] and j3 [100,160]. JCT: 100-0, 60-10, 120-15, 160-20.
STRICT = [100.0, 50.0, 105.0, 140.0]
# Backfilling FIFO: the same until t=60, when j3 (1 GPU) passes j5: j3 [60,120]; t=100: j5 [100,120].
BACKFILL = [100.0, 50.0, 105.0, 100.0]
# Strict FIFO in 30 s rounds: starts only at t = 0, 30, 60, ...: j1 [0,100]; j2 waits to 30: [30,80];
#   at 90 two GPUs are free but j5 blocks; j1 ends at 100, so at 120: j5 [120,140], j3 [120,180].
STRICT_ROUNDS = [100.0, 70.0, 125.0, 160.0]


@pytest.mark.parametrize("layout", [7, 10])
@pytest.mark.parametrize(
    "policy, round_s, expected",
    [
        ("exclusive-fifo-strict", None, STRICT),
        ("exclusive-fifo-backfill", None, BACKFILL),
        ("exclusive-fifo-strict", 30.0, STRICT_ROUNDS),
    ],
)
def test_golden_multi_gpu_replay(tmp_path, layout, policy, round_s, expected):
    config = SimulationConfig(
        trace=str(_trace_file(tmp_path, layout)),
        data=str(_dataset(tmp_path)),
        n_gpus=4,
        gpus_per_node=2,
        policies=(policy,),
        oracle=True,
        round_s=round_s,
    )
    report = run_simulation(config)
    assert report.n_jobs == 4
    np.testing.assert_allclose(report.results[policy].jct, expected)
