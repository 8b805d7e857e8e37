"""Budgeted-measurement benchmark: MAPE against K revealed pairs per new workload, per strategy, and coverage.

Run: ``.venv/bin/python benchmarks/bench_budget.py [--only gavel,reference,csv] [--work DIR] [--plot DIR]``.
Targets (issue 11), each printed next to its measurement: Gavel, family held out: K = 0 MAPE <= 17%; K = 2
active <= 14% and <= 0.8x matrix completion at K = 2; K = 8 active <= 0.8x matrix completion at K = 8.
Calibrated p10-p90 coverage 75-85% under grouped cross-validation on Gavel, on the reference, and on a
dataset of at least 10 workloads imported through the generic CSV importer (here: Gavel's measurements
written as the two generic CSV files with step time and batch size only, what a user's own sheet holds).

Every number comes from ``budget.evaluate_budget`` / ``evaluation.evaluate``, the functions behind
``sharewise evaluate --budget K``: all strategies on the same folds, held-out groups never seen in training
or calibration. ``MAPE`` is scored on each strategy's own unrevealed rows (the protocol); ``common`` on the
rows no strategy revealed, so a strategy cannot gain by revealing the hard rows.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from sharewise.datasets import read_datasets
from sharewise.datasets.public import public_data_root
from sharewise.predictor import ordered_rows
from sharewise.predictor.budget import evaluate_budget
from sharewise.predictor.choices import BUDGET_STRATEGIES, K_CURVE
from sharewise.predictor.evaluation import evaluate

GAVEL_FILE = public_data_root() / "gavel" / "simulation_throughputs.json"
TARGETS = {"k0": 17.0, "k2_active": 14.0, "ratio": 0.8, "coverage": (75.0, 85.0)}


def gavel_dataset(work: Path) -> Path | None:
    """Import Gavel's file as a user does (``sharewise import gavel``, FLOPs counted); return the folder."""
    if not GAVEL_FILE.is_file():
        print(f"gavel: skipped, {GAVEL_FILE} not found")
        return None
    out = work / "gavel"
    if not (out / "pairs").is_dir():
        cmd = [sys.executable, "-m", "sharewise", "import", "gavel", str(GAVEL_FILE), "--out", str(out)]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def csv_dataset(work: Path, gavel: Path) -> Path:
    """Write Gavel's measurements as the generic CSV files (step time and batch size only) and import them."""
    from sharewise.datasets.importers.generic_csv import import_csv

    out = work / "generic-csv"
    if (out / "pairs").is_dir():
        return out
    profiles, pairs = read_datasets([gavel])
    work.mkdir(parents=True, exist_ok=True)
    profiles[["workload", "family", "device_name", "batch_size", "iter_time_ms"]].to_csv(
        work / "profiles.csv", index=False
    )
    ok = pairs[pairs["status"] == "ok"]
    ok[["workload_a", "workload_b", "device_name", "slowdown_a", "slowdown_b"]].to_csv(work / "pairs.csv", index=False)
    import_csv(work / "profiles.csv", work / "pairs.csv", out)
    return out


def k_curve(name: str, path, group_by: str) -> dict:
    profiles, pairs = read_datasets([path])
    rows = ordered_rows(profiles, pairs)
    t0 = time.perf_counter()
    curve = evaluate_budget(rows, group_by=group_by, budgets=K_CURVE)
    print(
        f"\n{name}, --group-by {group_by}: MAPE % by budget K (pair runs revealed per held-out workload), "
        f"{time.perf_counter() - t0:.0f}s"
    )
    print(f"  {'K':>3}" + "".join(f"{s:>19}" for s in BUDGET_STRATEGIES) + f"{'rows (common)':>15}")
    for k, entry in curve.items():
        cells = "".join(
            f"{m['mape']:>10.1f} ({m['mape_common']:>5.1f})"
            for m in (entry["strategies"][s] for s in BUDGET_STRATEGIES)
        )
        print(f"  {k:>3}{cells}{entry['n_common']:>15}")
    print("  p10-p90 coverage % by K (calibrated on the fold's training rows; matrix completion has no interval):")
    for k, entry in curve.items():
        cov = [entry["strategies"][s]["coverage_p10_p90"] for s in BUDGET_STRATEGIES]
        print(f"  {k:>3}" + "".join(f"{'n/a' if c is None else f'{c:.1f}':>19}" for c in cov))
    return curve


def gavel_targets(curve: dict) -> None:
    s = {k: e["strategies"] for k, e in curve.items()}
    checks = [
        ("K=0 MAPE <= 17%", s[0]["active"]["mape"], s[0]["active"]["mape"] <= TARGETS["k0"]),
        ("K=2 active <= 14%", s[2]["active"]["mape"], s[2]["active"]["mape"] <= TARGETS["k2_active"]),
    ]
    for k in (2, 8):
        ratio = s[k]["active"]["mape"] / s[k]["matrix-completion"]["mape"]
        checks.append((f"K={k} active <= 0.8x matrix completion", ratio, ratio <= TARGETS["ratio"]))
    print("  targets:")
    for label, value, met in checks:
        print(f"    {label:<42} {value:>7.2f}  {'met' if met else 'NOT met'}")


def coverage(name: str, path, group_by: str) -> dict:
    profiles, pairs = read_datasets([path])
    summary = evaluate(profiles, pairs, group_by=group_by)
    m = summary["model"]
    per = {g: e["model_coverage_p10_p90"] for g, e in summary["per_group"].items()}
    low, high = TARGETS["coverage"]
    met = low <= m["coverage_p10_p90"] <= high
    print(
        f"  {name:<34}{group_by:>10}{summary['n_groups']:>8}{m['n']:>7}{m['mape']:>8.1f}"
        f"{m['coverage_p10_p90_uncalibrated']:>13.1f}{m['coverage_p10_p90']:>12.1f}"
        f"{min(per.values()):>9.1f}{max(per.values()):>9.1f}  {'met' if met else 'NOT met'}"
    )
    devices = summary.get("per_device", {})
    if len(devices) > 1:  # intervals are calibrated per device: each device's own coverage, and its p90 tail
        cells = ", ".join(
            f"{d} {e['model_coverage_p10_p90']:.1f} ({e['model_above_p90']:.1f} above p90)" for d, e in devices.items()
        )
        print(f"  {'':<34}by device: {cells}")
    return summary


def plot(curves: dict[str, dict], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(5.5 * len(curves), 4.2), squeeze=False)
    for ax, (title, curve) in zip(axes[0], curves.items(), strict=True):
        ks = list(curve)
        for s in BUDGET_STRATEGIES:
            ax.plot(ks, [curve[k]["strategies"][s]["mape"] for k in ks], marker="o", label=s)
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_xlabel("pair runs revealed per new workload (K)")
        ax.set_ylabel("MAPE on the unrevealed pairs (%)")
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "budget_k_curve.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="gavel,reference,csv", help="comma-separated sections to run")
    parser.add_argument("--work", default="runs/bench-budget", type=Path, help="folder for imported data")
    parser.add_argument("--plot", default="runs/bench-budget", type=Path, help="folder for the K-curve PNG")
    args = parser.parse_args()
    sections = set(args.only.split(","))
    gavel = gavel_dataset(args.work) if sections & {"gavel", "csv"} else None
    curves = {}
    if "gavel" in sections and gavel is not None:
        curves["Gavel, family held out"] = k_curve("Gavel", gavel, "family")
        gavel_targets(curves["Gavel, family held out"])
    if "reference" in sections:
        curves["reference CPU, workload held out"] = k_curve("reference CPU", "reference", "workload")
    print("\ncalibrated p10-p90 coverage under grouped cross-validation (target 75-85%):")
    print(
        f"  {'dataset':<34}{'held out':>10}{'groups':>8}{'rows':>7}{'MAPE':>8}{'raw cover':>13}"
        f"{'calibrated':>12}{'min grp':>9}{'max grp':>9}"
    )
    if "gavel" in sections and gavel is not None:
        coverage("Gavel (sharewise import gavel)", gavel, "family")
    if "reference" in sections:
        coverage("reference CPU", "reference", "workload")
    if "csv" in sections and gavel is not None:
        csv = csv_dataset(args.work, gavel)
        n = pd.read_csv(args.work / "profiles.csv")["workload"].nunique()
        coverage(f"generic CSV ({n} workloads)", csv, "family")
        coverage(f"generic CSV ({n} workloads)", csv, "workload")
    if curves:
        print(f"\nwrote {plot(curves, args.plot)}")


if __name__ == "__main__":
    main()
