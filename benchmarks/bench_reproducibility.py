"""Benchmark: how reproducible are a dataset's measurements? The noise floor under any predictor's MAPE.

Pairs (default): re-measures a random sample of a dataset's pairs with the settings they were measured
with (window, mode, size; same code path as ``sharewise pairs``) and compares each slowdown with the stored
one. The mean absolute relative difference is the MAPE that *measuring the pair again* scores against the
stored values; a predictor from solo profiles cannot be expected to do better. If both measurements carry
independent noise of the same size, one measurement's own error is that figure over sqrt(2).

Profiles (``--reprofile``): profiles the dataset's workloads again (same code as ``sharewise profile``, probe
included) and scores the model by grouped cross-validation (``--group-by workload``) twice, side by side: with
the stored profiles and with the fresh ones, against the same stored pairs. The difference is what a
re-profile alone (its probe features above all) moves the headline MAPE.

Run on an idle machine (each pair takes 30-60 s on the reference CPU dataset, each profile 10-20 s):

    .venv/bin/python benchmarks/bench_reproducibility.py [--data reference] [--pairs 12] [--seed 0] [--out FILE]
    .venv/bin/python benchmarks/bench_reproducibility.py --reprofile [--times 5] [--window S]
        [--isolation warm,fresh,fresh:1.5]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="reference", help="dataset folder, or 'reference'")
    parser.add_argument("--pairs", type=int, default=12, help="pairs to re-measure (a seeded random sample)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="append each re-measured pair as a JSON line here")
    parser.add_argument("--reprofile", action="store_true", help="re-profile the workloads instead of pairs")
    parser.add_argument("--window", type=float, default=None, help="profile window with --reprofile (s)")
    parser.add_argument("--repeats", type=int, default=6, help="profile repeats with --reprofile (the CLI's default)")
    parser.add_argument("--times", type=int, default=1, help="independent re-profiles with --reprofile")
    parser.add_argument(
        "--isolation",
        default="warm",
        help="with --reprofile: arms side by side, alternating, e.g. warm,fresh or warm,fresh:1.5 "
        "(isolation[:window s]; without a window, --window or the CLI's default)",
    )
    args = parser.parse_args(argv)
    if args.reprofile:
        arms = args.isolation.split(",")
        results: dict[str, list[dict]] = {arm: [] for arm in arms}
        for _ in range(args.times):
            for arm in arms:
                isolation, _, window = arm.partition(":")
                print(f"-- re-profile, isolation {arm}")
                window_s = float(window) if window else args.window
                results[arm].append(reprofile(args.data, window_s, args.repeats, isolation))
        for arm, runs in results.items():
            if len(runs) > 1:
                print(f"-- isolation {arm}")
                summarize_reprofiles(runs)
    else:
        remeasure_pairs(args.data, args.pairs, args.seed, args.out)


def reprofile(data: str, window_s: float | None, repeats: int, isolation: str = "warm") -> dict:
    from sharewise.datasets.store import open_dataset, resolve_dataset_path
    from sharewise.predictor.evaluation import evaluate
    from sharewise.profiler.api import profile_many
    from sharewise.profiler.config import RunConfig

    ds = open_dataset(resolve_dataset_path(data))
    stored, pairs = ds.read_profiles(), ds.read_pairs()
    stored = stored[stored["device_kind"] == "cpu"]
    if stored.empty:
        raise SystemExit(f"{data}: no CPU profiles to re-profile (GPU datasets need their GPU)")
    specs = [str(s) for s in (stored["spec"] if "spec" in stored else stored["workload"])]
    size = str(stored["size"].iloc[0]) if "size" in stored else "small"
    began = time.monotonic()
    config = RunConfig(
        mode=str(stored["mode"].iloc[0]), size=size, repeats=repeats, max_repeats=max(repeats, 20), isolation=isolation
    )
    if window_s is not None:
        config = config.replace(window_s=window_s)
    fresh = profile_many(specs, config)
    took = time.monotonic() - began
    was, now = sorted(set(stored["device_name"].astype(str))), sorted(set(fresh["device_name"].astype(str)))
    if was != now:
        # Scoring profiles of one machine against pairs of another measures a change of hardware, not how
        # well a profile reproduces: say so, and label the numbers.
        print(
            f"note: {data} was profiled and paired on {was}, this machine is {now}: the fresh profiles are "
            "scored against another machine's pairs (cross-device). For reproducibility on this machine, "
            "measure a dataset here ('sharewise pairs ... --out DIR') and pass --data DIR"
        )
    scores = {
        name: evaluate(profiles, pairs, group_by="workload")
        for name, profiles in (("stored", stored), ("fresh", fresh))
    }
    print(f"{'workload':14s} {'probe stored':>12s} {'probe fresh':>11s} {'MAPE stored':>11s} {'MAPE fresh':>10s}")
    old, new = stored.set_index("workload"), fresh.set_index("workload")
    group_mape = {name: {w: g["model_mape"] for w, g in s["per_group"].items()} for name, s in scores.items()}
    for w in sorted(new.index):
        print(
            f"{w:14s} {old.loc[w, 'f_probe_slowdown']:12.3f} {new.loc[w, 'f_probe_slowdown']:11.3f} "
            f"{group_mape['stored'][w]:10.1f}% {group_mape['fresh'][w]:9.1f}%"
        )
    mape = {name: s["model"]["mape"] for name, s in scores.items()}
    median = scores["fresh"]["baselines"]["median"]["mape"]
    times = fresh["profile_s"]
    print(
        f"model MAPE, each workload held out: stored profiles {mape['stored']:.2f}%, fresh profiles "
        f"{mape['fresh']:.2f}% (training median {median:.1f}%); {len(specs)} profiles in {took:.0f} s "
        f"({times.min():.1f}-{times.max():.1f} s each)"
    )
    probe_spread = float(np.mean(np.abs(new["f_probe_slowdown"] / old.loc[new.index, "f_probe_slowdown"] - 1)))
    return {
        "stored": mape["stored"],
        "fresh": mape["fresh"],
        "probe": new["f_probe_slowdown"],
        "throughput": new["throughput"],
        "probe_vs_stored": probe_spread,
        "cross_device": was != now,
    }


def summarize_reprofiles(results: list[dict]) -> None:
    """Across re-profiles: the MAPE's median and worst, and each feature's spread (CV) next to the throughput's."""
    import pandas as pd

    fresh = [r["fresh"] for r in results]
    probe = pd.concat([r["probe"] for r in results], axis=1)
    tput = pd.concat([r["throughput"] for r in results], axis=1)
    probe_cv = (probe.std(axis=1, ddof=1) / probe.mean(axis=1)).mean()
    tput_cv = (tput.std(axis=1, ddof=1) / tput.mean(axis=1)).mean()
    label = " (cross-device: another machine's pairs)" if any(r.get("cross_device") for r in results) else ""
    print(
        f"{len(results)} re-profiles{label}: MAPE each workload held out median {np.median(fresh):.2f}%, worst "
        f"{max(fresh):.2f}% (each: {', '.join(f'{m:.2f}' for m in fresh)}); stored profiles "
        f"{results[0]['stored']:.2f}%"
    )
    print(
        f"spread between re-profiles, mean CV per workload: probe sensitivity {probe_cv * 100:.1f}%, "
        f"throughput {tput_cv * 100:.1f}%"
    )


def remeasure_pairs(data: str, n_pairs: int, seed: int, out: str | None) -> None:
    from sharewise.datasets.store import open_dataset, resolve_dataset_path
    from sharewise.profiler.config import RunConfig
    from sharewise.profiler.executors.local import LocalExecutor
    from sharewise.profiler.pair import PairTask

    pairs = open_dataset(resolve_dataset_path(data)).read_pairs()
    pairs = pairs[(pairs["status"] == "ok") & (pairs["device_kind"] == "cpu")].reset_index(drop=True)
    if pairs.empty:
        raise SystemExit(f"{data}: no measured CPU pairs to re-measure (GPU datasets need their GPU)")
    pick = np.random.default_rng(seed).permutation(len(pairs))[:n_pairs]
    print(f"{'pair':28s} {'stored a':>9s} {'now a':>7s} {'stored b':>9s} {'now b':>7s} {'trials':>6s} {'s':>5s}")
    diffs, logs = [], []
    for i in pick:
        old = pairs.iloc[i]
        window = float(old["window_s"]) if "window_s" in old and not math.isnan(old["window_s"]) else 2.0
        config = RunConfig(mode=str(old["mode"]), size=str(old.get("size", "small")), window_s=window, features=False)
        a, b = str(old["workload_a"]), str(old["workload_b"])
        began = time.monotonic()
        with LocalExecutor(config, str(old["device_name"])) as executor:
            row = executor.run(PairTask(a, b, a, b)).row
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
        if out:
            with open(out, "a") as f:
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
