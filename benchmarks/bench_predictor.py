"""Predictor benchmarks: Gavel held-out-family accuracy next to baselines, prediction speed, training time.

Run: ``.venv/bin/python benchmarks/bench_predictor.py [--only gavel,reference,speed] [--tune] [--work DIR]``.
Targets (issue 3): Gavel ``--group-by family`` MAPE <= 15% (reference numbers in the issue: training median
25.1%, XGBoost on isolated throughput + batch size + GPU type 21.4%); the reference CPU dataset
``--group-by workload`` MAPE <= 4%; batch prediction >= 1,000,000 pairs/s on 2 cores; training on 10,000
pairs <= 10 s.

Honesty rules this file follows: every accuracy number is grouped cross-validation in which the held-out
group never appears in a training row (as self or partner); everything fitted (model, baselines, device
references, partner effects) is fitted per fold on training rows; the model runs with the library's fixed
defaults, or, with ``--tune``, with parameters chosen per fold by an inner grouped cross-validation over
that fold's training groups only. The random split is printed beside the headline, labelled optimistic.
Speed runs the configurations side by side in one process, interleaved, and reports mean and coefficient
of variation over repeats, because the CPU is shared and absolute numbers drift between runs.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.datasets import read_datasets
from sharewise.datasets.public import public_data_root
from sharewise.datasets.store import Dataset, resolve_dataset_path
from sharewise.datasets.synthetic import synthetic_tables
from sharewise.predictor import SlowdownRegressor, cross_validate, ordered_rows, predict_pairs, train_model
from sharewise.predictor.baselines import BASELINES
from sharewise.predictor.evaluation import summarize
from sharewise.predictor.metrics import slowdown_metrics
from sharewise.predictor.pair_features import pair_feature_matrix_indexed

GAVEL_FILE = public_data_root() / "gavel" / "simulation_throughputs.json"
ISSUE_REFERENCE = {"median": 25.1, "xgb_isolated": 21.4, "model": 15.0}
# The previous default configuration, kept as the side-by-side reference of the speed benchmark and as
# the regressor of the issue's "XGBoost on isolated throughput, batch size and GPU type" baseline.
PREVIOUS = {
    "n_estimators": 100,
    "max_depth": 3,
    "learning_rate": 0.1,
    "min_child_weight": 3.0,
    "monotone": False,
}


class IsolatedXGB:
    """The issue's reference baseline: XGBoost on isolated step time, batch size and GPU type only.

    The batch sizes come from ``every`` (all features of the rows, by row label), because the physical
    feature set the baselines see leaves batch size out.
    """

    COLUMNS = ("self_iter_time_ms", "self_f_batch_size", "partner_iter_time_ms", "partner_f_batch_size")

    def __init__(self, devices: list[str], every: pd.DataFrame) -> None:
        self.codes = {d: float(i) for i, d in enumerate(sorted(devices))}
        self.every = every[[c for c in self.COLUMNS if c in every.columns]]

    def _frame(self, X: pd.DataFrame, meta: pd.DataFrame) -> pd.DataFrame:
        out = self.every.loc[X.index].copy()
        out["device_code"] = meta["device_name"].map(self.codes).to_numpy(dtype=float)
        return out

    def fit(self, X, y, meta):
        self.model_ = SlowdownRegressor(**PREVIOUS).fit(self._frame(X, meta), y)
        return self

    def predict(self, X, meta):
        return self.model_.predict(self._frame(X, meta))


def _table(title: str, summary: dict, reference: dict | None = None) -> None:
    print(f"\n{title}: {summary['n_samples']} ordered pairs, {summary['n_groups']} held-out groups")
    print(
        f"  {'predictor':<16}{'MAPE %':>9}{'MAE':>8}{'Spearman':>10}{'share acc %':>13}{'p10-p90 %':>11}"
        f"{'issue ref. MAPE':>17}"
    )
    rows = [("model", summary["model"])] + list(summary["baselines"].items())
    nan = float("nan")
    for name, m in rows:
        ref = (reference or {}).get(name)
        if m.get("not_applicable"):
            print(f"  {name:<16}{'n/a':>9}   ({m['not_applicable']})")
            continue
        print(
            f"  {name:<16}{m['mape']:>9.1f}{m['mae']:>8.3f}{m['spearman']:>10.2f}"
            f"{m.get('decision_accuracy', nan):>13.1f}{m.get('coverage_p10_p90', nan):>11.1f}"
            f"{'' if ref is None else ('<= ' if name == 'model' else '') + f'{ref:.1f}':>17}"
        )
    per = summary["per_group"]
    keys = [k for k in next(iter(per.values())) if k.endswith("_mape")]
    print(f"  MAPE % by held-out group ({', '.join(k[:-5] for k in keys)}):")
    for g, entry in per.items():
        cells = "".join(f"{'n/a':>8}" if entry[k] is None else f"{entry[k]:>8.1f}" for k in keys)
        print(f"    {g:<28} n={entry['n']:<5}" + cells)


def _by_device(cv) -> None:
    rows = cv.rows
    preds = ["p50"] + [c for c in rows.columns if c.startswith("pred_") and rows[c].notna().any()]
    print(f"  MAPE % by device of the same folds ({', '.join(p.removeprefix('pred_') for p in preds)}):")
    for device, part in rows.groupby("device_name", sort=True):
        y = part["measured"].to_numpy()
        cells = "".join(f"{slowdown_metrics(y, part[p].to_numpy())['mape']:>8.1f}" for p in preds)
        print(f"    {device:<28} n={len(part):<5}{cells}")


def _additive_bounds(cv) -> None:
    """What one term per job (as self, as partner) per device can explain, in sample, and what is left once
    the held-out family's self term is unknown: the ceiling and the floor around the model's family folds."""
    rows = cv.rows
    print("  one term per job as self and as partner, per device (fitted on every row, in sample; MAPE %):")
    print(f"    {'device':<10}{'additive fit':>14}{'self term unknown':>19}{'model':>8}")
    totals = np.zeros(3)
    for device, part in rows.groupby("device_name", sort=True):
        jobs = sorted(set(part["self_workload"]) | set(part["partner_workload"]))
        col = {w: i for i, w in enumerate(jobs)}
        n = len(jobs)
        design = np.zeros((len(part), 2 * n + 1))
        design[:, -1] = 1.0
        at = np.arange(len(part))
        design[at, part["self_workload"].map(col).to_numpy()] = 1.0
        design[at, n + part["partner_workload"].map(col).to_numpy()] = 1.0
        y = part["measured"].to_numpy()
        coef = np.linalg.lstsq(design, np.log(y), rcond=None)[0]
        self_term = dict(zip(jobs, coef[:n], strict=True))
        fam_of = dict(zip(part["self_workload"], part["self_family"], strict=False))
        # The held-out self's term replaced by the median self term of the other families' jobs; the
        # partner's term (known from training rows in a real fold) kept.
        unknown = np.array(
            [np.median([t for w, t in self_term.items() if fam_of.get(w, f) != f]) for f in part["self_family"]]
        )
        partner = coef[n + part["partner_workload"].map(col).to_numpy()]
        cells = [
            slowdown_metrics(y, np.exp(design @ coef))["mape"],
            slowdown_metrics(y, np.exp(unknown + partner + coef[-1]))["mape"],
            slowdown_metrics(y, part["p50"].to_numpy())["mape"],
        ]
        totals += np.array(cells) * len(part)
        print(f"    {device:<10}" + "".join(f"{c:>{w}.1f}" for c, w in zip(cells, (14, 19, 8), strict=True)))
    print(f"    {'all':<10}" + "".join(f"{c:>{w}.1f}" for c, w in zip(totals / len(rows), (14, 19, 8), strict=True)))


def bench_gavel(work: Path, tune: bool) -> None:
    if not GAVEL_FILE.is_file():
        print(f"gavel: skipped, {GAVEL_FILE} not found")
        return
    from sharewise.datasets.importers.gavel import import_gavel

    out = work / "gavel"
    t0 = time.perf_counter()
    if not (out / "pairs").is_dir():
        result = import_gavel(GAVEL_FILE, out)  # static features cached in out/static_features.json
        print(f"imported Gavel in {time.perf_counter() - t0:.1f}s; static features {result.static_features}")
        for w in result.warnings:
            print(f"  warning: {w}")
    profiles, pairs = read_datasets([out])
    rows = ordered_rows(profiles, pairs, features="all")  # every feature: each run selects its own set
    devices = sorted(set(rows.meta["device_name"]))
    baselines = {**BASELINES, "xgb_isolated": lambda: IsolatedXGB(devices, rows.X)}
    runs = [("family", False), ("workload", False), ("device", False)]
    if tune:
        runs.insert(1, ("family", True))
    for group_by, nested in runs:
        t0 = time.perf_counter()
        cv = cross_validate(
            rows,
            group_by=group_by,
            baselines=baselines,
            random_split=group_by == "family" and not nested,
            tune=nested,
        )
        summary = summarize(cv)
        how = "defaults"
        if nested:
            how = "nested: parameters chosen per fold by inner CV on its training groups"
        _table(
            f"Gavel, --group-by {group_by}, model with {how} ({time.perf_counter() - t0:.1f}s)",
            summary,
            ISSUE_REFERENCE if group_by == "family" else None,
        )
        if group_by == "family":
            _by_device(cv)
            if not nested:
                _additive_bounds(cv)
        if nested:
            for f in summary["folds"]:
                chosen = ", ".join(f"{k}={v}" for k, v in f["chosen"].items() if k != "inner_mape")
                print(f"    held out {f['group']}: {chosen} (inner MAPE {f['chosen']['inner_mape']:.1f}%)")
        if "random_split" in summary:
            print(
                f"  OPTIMISTIC random split over pairs (test workloads seen in training; not the headline): "
                f"MAPE {summary['random_split']['model']['mape']:.1f}%"
            )


def bench_reference() -> None:
    path = resolve_dataset_path("reference")
    if not Dataset(path).exists():
        print(f"\nreference: skipped, the reference dataset is not shipped yet ({path})")
        return
    profiles, pairs = read_datasets(["reference"])
    rows = ordered_rows(profiles, pairs)
    summary = summarize(cross_validate(rows, group_by="workload"))
    _table("reference CPU dataset, --group-by workload (target MAPE <= 4%)", summary)


def _cv(values) -> float:
    v = np.asarray(values, dtype=float)
    return float(v.std(ddof=1) / v.mean() * 100) if v.size > 1 else 0.0


def _stats(values: list[float]) -> str:
    return f"{np.mean(values):>12,.0f}  (CV {_cv(values):4.1f}%, n={len(values)})"


def bench_speed(repeats: int) -> None:
    profiles, pairs = synthetic_tables(n_workloads=400, n_pairs=10_000)
    print(
        f"\nspeed: synthetic GPU-like profiles ({sum(c.startswith('f_') for c in profiles.columns)} f_* "
        f"columns), 10,000 measured pairs; {repeats} interleaved repeats per number"
    )
    configs = {
        "previous": {"features": "all", "partner_effect": False, **PREVIOUS},
        "default": {},
    }
    train_times: dict[tuple[str, int], list[float]] = {}
    models: dict[str, SlowdownRegressor] = {}
    for _ in range(repeats):
        for name, params in configs.items():
            for n_jobs in (1, 2):
                t0 = time.perf_counter()
                models[name] = train_model(profiles, pairs, n_jobs=n_jobs, **params)
                train_times.setdefault((name, n_jobs), []).append(time.perf_counter() - t0)
    for (name, n_jobs), times in train_times.items():
        model = models[name]
        print(
            f"  train {name:<9} ({model.n_features_in_} features, {len(model.booster_.get_dump())} trees), "
            f"10,000 pairs = 20,000 ordered rows incl. features, n_jobs={n_jobs}: "
            f"{np.mean(times):.2f} s (CV {_cv(times):.0f}%; target <= 10 s)"
        )
    rng = np.random.default_rng(1)
    n = 1_000_000
    raw = {
        name: np.ascontiguousarray(rng.lognormal(0, 1, (n, m.n_features_in_)).astype(np.float32))
        for name, m in models.items()
    }
    ia, ib = rng.integers(0, len(profiles), n), rng.integers(0, len(profiles), n)
    query = pd.DataFrame(
        {
            "workload_a": profiles["workload"].to_numpy()[ia],
            "workload_b": profiles["workload"].to_numpy()[ib],
            "device_name": "gpu",
        }
    )
    rates: dict[tuple[str, str, int], list[float]] = {}
    for name, model in models.items():  # warm up
        model.set_params(n_jobs=2)
        model.predict_matrix(raw[name][:1000])
    for _ in range(repeats):
        for n_jobs in (1, 2):
            for name, model in models.items():
                model.set_params(n_jobs=n_jobs)
                t0 = time.perf_counter()
                model.predict_matrix(raw[name])
                rates.setdefault(("raw", name, n_jobs), []).append(n / (time.perf_counter() - t0))
                t0 = time.perf_counter()
                out = predict_pairs(model, profiles, query)
                rates.setdefault(("pairs", name, n_jobs), []).append(len(out) / (time.perf_counter() - t0))
    print("  raw batch predict: 1e6 distinct float32 feature rows, p10/p50/p90 (XGBoost inplace_predict);")
    print("  one row is one ordered pair (one slowdown); a pair with both slowdowns is two rows")
    for n_jobs in (1, 2):
        for name in models:
            r = rates[("raw", name, n_jobs)]
            print(f"    {name:<9} n_jobs={n_jobs}: rows/s {_stats(r)}   = {np.mean(r) / 2:>12,.0f} pairs/s")
        ratio = np.asarray(rates[("raw", "default", n_jobs)]) / np.asarray(rates[("raw", "previous", n_jobs)])
        print(f"    default / previous, n_jobs={n_jobs}: {ratio.mean():.2f}x (CV {_cv(ratio):.0f}%)")
    print(
        f"  predict_pairs end to end: 1e6 pairs among {len(profiles)} workloads, both slowdowns with "
        "quantiles, from names to table (repeated profile pairs predicted once)"
    )
    for n_jobs in (1, 2):
        for name in models:
            print(f"    {name:<9} n_jobs={n_jobs}: pairs/s {_stats(rates[('pairs', name, n_jobs)])}")
    # Feature building alone, for a million ordered rows without deduplication.
    model = models["default"]
    base = [c[len("self_") :] for c in model.feature_names_in_ if c.startswith("self_")]
    matrix = profiles[base].to_numpy(np.float64)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        pair_feature_matrix_indexed(matrix, ia, ib, base)
        times.append(time.perf_counter() - t0)
    print(f"  pair features alone (numpy), 1e6 ordered rows: {n / np.mean(times):,.0f} rows/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="gavel,reference,speed", help="comma-separated sections to run")
    parser.add_argument("--work", default="runs/bench-predictor", type=Path, help="folder for imported data")
    parser.add_argument("--tune", action="store_true", help="also run the nested per-fold selection (slow)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of each speed number")
    args = parser.parse_args()
    sections = set(args.only.split(","))
    if "gavel" in sections:
        bench_gavel(args.work, args.tune)
    if "reference" in sections:
        bench_reference()
    if "speed" in sections:
        bench_speed(args.repeats)


if __name__ == "__main__":
    main()
