"""Benchmark: what the partner explains, on a GPU against the CPU (issue 40, part 2).

For each dataset (the shipped ``reference`` CPU campaign, the shipped ``reference-h200`` GPU campaign, and
Gavel's V100/P100/K80 tables where the public data folder is present), on the ordered rows (self, partner) of
its measured pairs, one device and sharing mode at a time:

1. **Variance of log slowdown explained**: by the job alone (least squares on one indicator per self job), by
   job plus partner (one indicator per self job and one per partner, additive), both in sample (R^2, and R^2
   adjusted for the number of indicators, since a few dozen rows fit 15 indicators well by chance), and by the
   predictor out of sample (its leave-one-workload-out p50: 1 - SSE / SST of log slowdown).
2. **Leave-one-workload-out MAPE** of the predictor with every feature, without the probe's features
   (``f_probe_*``), and without the partner's features (every ``partner_*`` and ``pair_*`` column blanked and
   no fitted partner effect: the model sees the job alone), next to the median and linear baselines.

    .venv/bin/python benchmarks/bench_gpu_knowledge.py [--data reference reference-h200] [--no-gavel]

Deterministic (XGBoost's fixed seed, grouped folds): no timing, so it may run beside other work.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.datasets import read_datasets
from sharewise.datasets.public import public_data_root
from sharewise.predictor import cross_validate, ordered_rows
from sharewise.predictor.evaluation import summarize
from sharewise.predictor.pair_features import PairRows, base_columns

GAVEL_FILE = public_data_root() / "gavel" / "simulation_throughputs.json"


def indicator_r2(meta: pd.DataFrame, y: np.ndarray, partner: bool) -> tuple[float, float]:
    """R^2 and adjusted R^2 of log ``y`` on one indicator per self job (and per partner with ``partner``)."""
    target = np.log(y)
    blocks = [pd.get_dummies(meta["self_workload"].astype(str), dtype=float)]
    if partner:
        blocks.append(pd.get_dummies(meta["partner_workload"].astype(str), prefix="p", dtype=float).iloc[:, 1:])
    design = np.hstack([b.to_numpy() for b in blocks])
    coef = np.linalg.lstsq(design, target, rcond=None)[0]
    sse = float(((target - design @ coef) ** 2).sum())
    sst = float(((target - target.mean()) ** 2).sum())
    n, k = len(target), np.linalg.matrix_rank(design)
    r2 = 1 - sse / sst
    adjusted = 1 - (1 - r2) * (n - 1) / (n - k) if n > k else float("nan")
    return r2, adjusted


def out_of_sample_r2(y: np.ndarray, predicted: np.ndarray) -> float:
    target, pred = np.log(y), np.log(predicted)
    return float(1 - ((target - pred) ** 2).sum() / ((target - target.mean()) ** 2).sum())


def without(rows: PairRows, prefixes: tuple[str, ...]) -> PairRows:
    """``rows`` with every column that starts with one of ``prefixes`` blanked (NaN: no split can use it)."""
    X = rows.X.copy()
    cols = [c for c in X.columns if c.startswith(prefixes)]
    X[cols] = np.nan
    return PairRows(X=X, y=rows.y, meta=rows.meta)


def one_setting(name: str, profiles: pd.DataFrame, pairs: pd.DataFrame) -> dict:
    rows = ordered_rows(profiles, pairs)
    probe_free = [c for c in base_columns(profiles) if not c.startswith("f_probe_")]
    has_probe = any(c.startswith("f_probe_") for c in base_columns(profiles))
    runs = {"every feature": cross_validate(rows, group_by="workload")}
    if has_probe:
        runs["without the probe"] = cross_validate(
            ordered_rows(profiles, pairs, base=probe_free), group_by="workload", baselines={}
        )
    runs["without the partner"] = cross_validate(
        without(rows, ("partner_", "pair_")), group_by="workload", baselines={}, partner_effect=False
    )
    full = runs["every feature"]
    y = full.rows["measured"].to_numpy()
    alone, alone_adj = indicator_r2(full.rows, y, partner=False)
    both, both_adj = indicator_r2(full.rows, y, partner=True)
    summary = summarize(full)
    return {
        "name": name,
        "rows": len(y),
        "workloads": full.rows["self_workload"].nunique(),
        "job alone": (alone, alone_adj),
        "job + partner": (both, both_adj),
        "predictor (LOWO)": out_of_sample_r2(y, full.rows["p50"].to_numpy()),
        "mape": {label: summarize(cv)["model"]["mape"] for label, cv in runs.items()},
        "baselines": {k: v["mape"] for k, v in summary["baselines"].items() if v.get("mape") is not None},
    }


def settings(data: list[str], gavel: bool, work: Path) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
    out = []
    sources = [(d, read_datasets([d])) for d in data]
    if gavel and GAVEL_FILE.is_file():
        from sharewise.datasets.importers.gavel import import_gavel

        folder = work / "gavel"
        if not (folder / "pairs").is_dir():
            import_gavel(GAVEL_FILE, folder)
        sources.append(("gavel", read_datasets([str(folder)])))
    for source, (profiles, pairs) in sources:
        pairs = pairs[pairs["status"] == "ok"]
        for (device, mode), part in pairs.groupby(["device_name", "mode"], sort=True):
            prof = profiles[(profiles["device_name"] == device)]
            out.append((f"{source}: {device}, {mode}", prof, part))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=["reference", "reference-h200"])
    parser.add_argument("--no-gavel", action="store_true", help="leave out Gavel's tables")
    parser.add_argument("--work", type=Path, default=Path("runs/bench-gpu-knowledge"))
    args = parser.parse_args(argv)
    results = [one_setting(*s) for s in settings(args.data, not args.no_gavel, args.work)]
    print("\nshare of the variance of log slowdown explained (R^2; in sample: adjusted in brackets)")
    print(f"{'dataset':<44}{'rows':>5}{'jobs':>5}{'job alone':>17}{'job + partner':>17}{'predictor LOWO':>16}")
    for r in results:
        a, b = r["job alone"], r["job + partner"]
        print(f"{r['name']:<44}{r['rows']:>5}{r['workloads']:>5}{a[0]:>9.2f} ({a[1]:>5.2f})"
              f"{b[0]:>9.2f} ({b[1]:>5.2f}){r['predictor (LOWO)']:>16.2f}")
    print("\nleave-one-workload-out MAPE % of log-free slowdown")
    labels = ["every feature", "without the probe", "without the partner"]
    base = sorted({k for r in results for k in r["baselines"]})
    print(f"{'dataset':<44}" + "".join(f"{x:>22}" for x in labels + [f"baseline: {b}" for b in base]))
    for r in results:
        cells = [r["mape"].get(x) for x in labels] + [r["baselines"].get(b) for b in base]
        print(f"{r['name']:<44}" + "".join(f"{'-' if c is None else f'{c:.1f}':>22}" for c in cells))


if __name__ == "__main__":
    main()
