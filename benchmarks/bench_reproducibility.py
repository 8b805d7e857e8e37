"""Benchmark: how reproducible are a dataset's pair slowdowns? The noise floor under any predictor's MAPE.

Re-measures a random sample of a dataset's pairs with the settings they were measured with (window, mode,
size; same code path as ``sharewise pairs``) and compares each slowdown with the stored one. The mean absolute
relative difference is the MAPE that *measuring the pair again* scores against the stored values; a predictor
from solo profiles cannot be expected to do better. If both measurements carry independent noise of the same
size, one measurement's own error is that figure over sqrt(2).

Run on an idle machine (each pair takes 30-60 s on the reference CPU dataset):

    .venv/bin/python benchmarks/bench_reproducibility.py [--data reference] [--pairs 12] [--seed 0] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np


def main(argv: list[str]) -> None:
    from sharewise.datasets.store import open_dataset, resolve_dataset_path
    from sharewise.profiler.config import RunConfig
    from sharewise.profiler.pair import PairTask, measure_pair

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="reference", help="dataset folder, or 'reference'")
    parser.add_argument("--pairs", type=int, default=12, help="pairs to re-measure (a seeded random sample)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="append each re-measured pair as a JSON line here")
    args = parser.parse_args(argv)

    pairs = open_dataset(resolve_dataset_path(args.data)).read_pairs()
    pairs = pairs[(pairs["status"] == "ok") & (pairs["device_kind"] == "cpu")].reset_index(drop=True)
    if pairs.empty:
        raise SystemExit(f"{args.data}: no measured CPU pairs to re-measure (GPU datasets need their GPU)")
    pick = np.random.default_rng(args.seed).permutation(len(pairs))[: args.pairs]
    print(f"{'pair':28s} {'stored a':>9s} {'now a':>7s} {'stored b':>9s} {'now b':>7s} {'trials':>6s} {'s':>5s}")
    diffs, logs = [], []
    for i in pick:
        old = pairs.iloc[i]
        window = float(old["window_s"]) if "window_s" in old and not math.isnan(old["window_s"]) else 2.0
        config = RunConfig(mode=str(old["mode"]), size=str(old.get("size", "small")), window_s=window, features=False)
        a, b = str(old["workload_a"]), str(old["workload_b"])
        began = time.monotonic()
        row = measure_pair(PairTask(a, b, a, b), config, str(old["device_name"]))
        took = time.monotonic() - began
        if row["status"] != "ok":
            print(f"{a + '|' + b:28s} {row['status']}: {row['error']}")
            continue
        for side in ("a", "b"):
            stored, now = float(old[f"slowdown_{side}"]), float(row[f"slowdown_{side}"])
            diffs.append(abs(now - stored) / stored * 100)
            logs.append(math.log(now / stored))
        print(
            f"{a + '|' + b:28s} {old['slowdown_a']:9.3f} {row['slowdown_a']:7.3f} {old['slowdown_b']:9.3f} "
            f"{row['slowdown_b']:7.3f} {row['trials']:6d} {took:5.0f}"
        )
        if args.out:
            with open(args.out, "a") as f:
                keep = ("workload_a", "workload_b", "slowdown_a", "slowdown_b", "trials", "cv_a", "cv_b")
                record = {k: row[k] for k in keep}
                record.update(stored_a=float(old["slowdown_a"]), stored_b=float(old["slowdown_b"]))
                f.write(json.dumps(record) + "\n")
    if not diffs:
        raise SystemExit("no pair could be re-measured")
    d = np.array(diffs)
    print(
        f"{d.size} slowdowns: |now - stored| / stored mean {d.mean():.2f}% (median {np.median(d):.2f}%, "
        f"max {d.max():.1f}%); drift: mean log(now/stored) {np.mean(logs):+.3f}, sd {np.std(logs):.3f}"
    )
    print(
        f"re-measuring every pair would score {d.mean():.1f}% MAPE against the stored values; one "
        f"measurement's own error is about {d.mean() / math.sqrt(2):.1f}% (independent noise of equal size)"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
