"""Benchmark: the slowdown contract on the CPU (issue 48): measured, predicted and chosen under the sharing knob.

Three parts, each on this machine for real (the knob is a cgroup CPU quota; ``sharewise profile`` and ``pairs``
run as a user runs them):

1. ``measure``: the scaling curves (``profile --shares 25,50,75``) and the pairs at three splits (``pairs --split
   30:70 --split 50:50 --split 70:30``) of four reference workloads, into ``--out`` (resumable: a rerun measures
   only what is missing).
2. ``coverage``: each knobbed pair predicted by a model that never saw either of its workloads (trained on the
   shipped ``reference`` pairs and the knobbed rows of the other workloads, calibrated p10/p90), against its
   measurement: p10-p90 coverage and MAPE per split (target: 70-90% for at least 12 ordered pairs at 3 splits).
3. ``protected``: one job bound to at most ``--bound`` (1.3) next to a batch partner. The split comes from
   ``planner.contract.choose_split`` on the model's predictions; the pair is then measured at that split and
   without a split, ``--windows`` windows each, and the share of windows that keep the bound, the pair's combined
   normalized throughput (1/s_a + 1/s_b) and the foreign load are printed (target: >= 90% of windows within the
   bound at the split, combined throughput >= 1.0 or the decline said, the bound broken without the split).

    .venv/bin/python benchmarks/bench_contract.py [--only measure,coverage,protected] [--out runs/bench-contract]
        [--workloads resnet18 dcgan lstm_lm ncf] [--protect resnet18 --partner dcgan --bound 1.3]

``measure`` and ``protected`` time the machine: run them with nothing else running (the foreign load is printed).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
SPLITS = ("30:70", "50:50", "70:30")
SHARES = "25,50,75"
WORKLOADS = ("resnet18", "dcgan", "lstm_lm", "ncf")


def sharewise(*args: str) -> None:
    """Run a sharewise command as a user does; stop the benchmark where it fails."""
    cmd = [sys.executable, "-m", "sharewise", *args]
    print("$ sharewise " + " ".join(args), flush=True)
    proc = subprocess.run(cmd, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"sharewise {args[0]} failed with exit {proc.returncode}")


def measure(out: Path, workloads: list[str]) -> None:
    began = time.monotonic()
    sharewise("profile", *workloads, "--device", "cpu", "--mode", "cpu", "--shares", SHARES, "--out", str(out))
    split_args = [x for s in SPLITS for x in ("--split", s)]
    sharewise("pairs", "-w", ",".join(workloads), "--device", "cpu", "--mode", "cpu", "--out", str(out),
              "--repeats", "3", "--max-repeats", "6", *split_args)
    print(f"measured in {time.monotonic() - began:.0f} s")


def knobbed_pairs(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    from sharewise.datasets import read_datasets

    profiles, pairs = read_datasets([str(out)])
    pairs = pairs[(pairs["status"] == "ok") & pairs["split_a"].notna()]
    return profiles, pairs


def coverage(out: Path) -> dict:
    """Each knobbed pair predicted with both its workloads held out (``out_of_fold_predictions`` by pair)."""
    from sharewise.datasets import read_datasets
    from sharewise.predictor import out_of_fold_predictions

    profiles, knobbed = knobbed_pairs(out)
    ref_profiles, ref_pairs = read_datasets(["reference"])
    # The scaling curves and knobbed rows come from --out; the shipped pairs (no knob) from reference. The
    # profiles of --out (measured now, with curves) stand for the workloads they hold.
    mine = set(profiles["workload"])
    all_profiles = pd.concat([profiles, ref_profiles[~ref_profiles["workload"].isin(mine)]], ignore_index=True)
    all_profiles["device_name"] = profiles["device_name"].iloc[0]
    ref_pairs = ref_pairs.assign(device_name=profiles["device_name"].iloc[0])
    train = pd.concat([ref_pairs, knobbed], ignore_index=True)
    cand = knobbed[["workload_a", "workload_b", "device_name", "mode", "split_a"]]
    pred = out_of_fold_predictions(all_profiles, train, group_by="workload", candidates=cand, holdout="pair",
                                   calibrate=True)
    rows = []
    for side, other in (("a", "b"), ("b", "a")):
        share = knobbed["split_a"].to_numpy() if side == "a" else 100 - knobbed["split_a"].to_numpy()
        rows.append(pd.DataFrame({
            "self": knobbed[f"workload_{side}"].to_numpy(), "partner": knobbed[f"workload_{other}"].to_numpy(),
            "share": share, "measured": knobbed[f"slowdown_{side}"].to_numpy(),
            "p10": pred[f"p10_{side}"].to_numpy(), "p50": pred[f"p50_{side}"].to_numpy(),
            "p90": pred[f"p90_{side}"].to_numpy()}))
    table = pd.concat(rows, ignore_index=True)
    table["inside"] = (table["measured"] >= table["p10"]) & (table["measured"] <= table["p90"])
    table["ape"] = (table["p50"] - table["measured"]).abs() / table["measured"] * 100
    print("\ncoverage under the knob: each ordered pair predicted with both workloads held out")
    print(table.round(3).to_string(index=False))
    result = {
        "ordered_rows": int(len(table)),
        "coverage_p10_p90": float(table["inside"].mean() * 100),
        "mape": float(table["ape"].mean()),
        "by_share": {str(int(s)): {"rows": int(len(g)), "coverage": float(g["inside"].mean() * 100),
                                   "mape": float(g["ape"].mean())} for s, g in table.groupby("share")},
    }
    print(f"\n{result['ordered_rows']} ordered rows: p10-p90 covers {result['coverage_p10_p90']:.1f}% (target 70-90%),"
          f" MAPE {result['mape']:.1f}%")
    for s, r in result["by_share"].items():
        print(f"  own share {s}%: {r['rows']} rows, coverage {r['coverage']:.0f}%, MAPE {r['mape']:.1f}%")
    return result


def protected(out: Path, protect: str, partner: str, bound: float, windows: int) -> dict:
    """Choose the split for ``protect`` (bound) next to ``partner`` and measure the pair with and without it."""
    from sharewise.datasets import read_datasets
    from sharewise.planner.contract import SPLIT_GRID, Bound, choose_split
    from sharewise.predictor import predict_pairs, train_model
    from sharewise.profiler.config import RunConfig
    from sharewise.profiler.pair import PairTask, measure_pair_repeats
    from sharewise.profiler.pool import WorkerPool

    profiles, pairs = read_datasets([str(out)])
    model = train_model(profiles, pairs[pairs["status"] == "ok"])
    device = str(profiles["device_name"].iloc[0])
    grid = list(SPLIT_GRID)
    frame = pd.DataFrame({"workload_a": protect, "workload_b": partner, "device_name": device,
                          "split_a": np.asarray(grid, dtype=float)})
    pred = predict_pairs(model, profiles, frame)
    choice = choose_split(grid, pred["p50_a"], pred["p90_a"], pred["p50_b"], pred["p90_b"],
                          Bound(bound, protected=True))
    print(f"\n{protect} bound to <= {bound} next to {partner}: {choice.reason}")
    result: dict = {"protect": protect, "partner": partner, "bound": bound, "choice": choice.reason,
                    "split": choice.split, "runs": {}}
    if choice.split is not None:
        settings = {"at the split": choice.split / 100, "without a split": None}
    else:  # declined: measure the split the model judged nearest to keeping the bound, to check the decline
        near = int(grid[int(np.argmin(pred["p90_a"].to_numpy(dtype=float)))])  # the partner has no bound
        settings = {f"at {near}:{100 - near} (declined; measured to check the decline)": near / 100,
                    "without a split": None}
    result["measured_splits"] = {label: (None if s is None else round(s * 100)) for label, s in settings.items()}
    for label, split in settings.items():
        config = RunConfig(device="cpu", mode="cpu", split=split, repeats=windows, max_repeats=windows, window_s=0.5)
        with WorkerPool(config) as pool:
            row, repeats = measure_pair_repeats(PairTask(protect, partner, protect, partner), config, device, pool)
        if row["status"] != "ok":
            raise SystemExit(f"the pair {protect} | {partner} {label} failed: {row['status']}: {row['error']}")
        slow_a = np.array([r.solo[0].throughput / r.coloc[0].throughput for r in repeats])
        slow_b = np.array([r.solo[1].throughput / r.coloc[1].throughput for r in repeats])
        foreign = float(np.mean([r.foreign_cpu for r in repeats]))
        run = {"split_a": None if split is None else round(split * 100),
               "windows": int(len(slow_a)), "within_bound": float((slow_a <= bound).mean() * 100),
               "slowdown_a": float(slow_a.mean()), "slowdown_b": float(slow_b.mean()),
               "combined_throughput": float(np.mean(1 / slow_a + 1 / slow_b)), "foreign_cpu": foreign,
               "per_window_a": [round(float(x), 3) for x in slow_a]}
        result["runs"][label] = run
        print(f"  {label}: {protect} {run['slowdown_a']:.2f}x (within {bound} in {run['within_bound']:.0f}% of "
              f"{run['windows']} windows), {partner} {run['slowdown_b']:.2f}x, combined throughput "
              f"{run['combined_throughput']:.2f}, foreign load {foreign:.0%}", flush=True)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="measure,coverage,protected", help="comma-separated parts")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-contract"))
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    parser.add_argument("--protect", default="resnet18")
    parser.add_argument("--partner", default="dcgan")
    parser.add_argument("--bound", type=float, default=1.3)
    parser.add_argument("--windows", type=int, default=12, help="windows per protected-pair measurement")
    parser.add_argument("--json", type=Path, help="write every number to this file")
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))
    out: dict = {}
    if "measure" in parts:
        measure(args.out, args.workloads)
    if "coverage" in parts:
        out["coverage"] = coverage(args.out)
    if "protected" in parts:
        out["protected"] = protected(args.out, args.protect, args.partner, args.bound, args.windows)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
