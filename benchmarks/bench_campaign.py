"""Benchmark: the same pair campaign with ``--isolation fresh`` and ``--isolation warm``, side by side in one run.

Each campaign is one ``sharewise pairs`` CLI process, exactly as a user runs it (profiles with the probe,
then every pair of the listed workloads, self-pairs included, with the default stopping rule: at least
``--repeats`` repeats, more until each slowdown's 95% confidence half-width is <= 2%, at most
``--max-repeats``). The isolations alternate (fresh, warm, then warm, fresh with ``--rounds 2``) so that slow
drift of this shared VM does not favour one of them. Printed per campaign and as ratios warm / fresh:

- wall time of the whole campaign and of its pairs alone (the sum of the rows' ``pair_s``);
- pairs per hour (pairs over the campaign's wall time, and over the pairs' own time);
- the confidence half-widths (median, widest, share of pairs whose both half-widths reached the target);
- the agreement of the slowdowns: mean absolute difference between the two isolations, per side of
  every pair, beside the re-measurement noise (the mean of the two half-widths, and the reference spread of
  5% between re-measurements).

Run on an idle machine (nothing else heavy: not the test suite, not a helper):

    .venv/bin/python benchmarks/bench_campaign.py [--workloads a3c,ncf,bert,lstm_lm] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

CI_TARGET = 0.02
SPEEDUP_TARGET = 4.0
AGREEMENT_TARGET = 0.05


def run_campaign(workloads: str, isolation: str, out: Path, extra: list[str]) -> float:
    """Run one ``sharewise pairs`` campaign in a new process; return its wall time in seconds."""
    cmd = [sys.executable, "-m", "sharewise", "pairs", "-w", workloads, "--device", "cpu", "--mode", "cpu",
           "--isolation", isolation, "--out", str(out), *extra]
    env = {**os.environ, "SHAREWISE_CACHE_DIR": str(out.parent / f"cache-{out.name}")}
    began = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - began
    if proc.returncode != 0:
        raise SystemExit(f"{isolation} campaign failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    return wall


def pair_table(out: Path) -> pd.DataFrame:
    from sharewise.datasets.store import Dataset

    pairs = Dataset(out).read_pairs()
    return pairs[pairs["status"] == "ok"].set_index(["workload_a", "workload_b"]).sort_index()


def summarize(isolation: str, wall: float, pairs: pd.DataFrame) -> dict:
    widest = pairs[["ci_a", "ci_b"]].max(axis=1)
    pair_s = float(pairs["pair_s"].sum())
    return {
        "isolation": isolation,
        "wall_s": wall,
        "pairs": len(pairs),
        "pair_s": pair_s,
        "pairs_per_h": len(pairs) / wall * 3600,
        "pairs_per_h_pairs_only": len(pairs) / pair_s * 3600 if pair_s else float("nan"),
        "repeats_mean": float(pairs["trials"].mean()),
        "ci_median": float(np.nanmedian(pairs[["ci_a", "ci_b"]].to_numpy())),
        "ci_max": float(widest.max()),
        "reached": float((widest <= CI_TARGET + 1e-12).mean()),
    }


def agreement(fresh: pd.DataFrame, warm: pd.DataFrame) -> dict:
    both = fresh.merge(warm, left_index=True, right_index=True, suffixes=("_f", "_w"))
    diffs, noise = [], []
    for side in ("a", "b"):
        f, w = both[f"slowdown_{side}_f"], both[f"slowdown_{side}_w"]
        diffs.extend((abs(w - f) / f).tolist())
        noise.extend(((both[f"ci_{side}_f"] + both[f"ci_{side}_w"]) / 2).tolist())
    return {
        "pairs_compared": len(both),
        "mean_abs_diff": float(np.mean(diffs)),
        "max_abs_diff": float(np.max(diffs)),
        "mean_halfwidth": float(np.nanmean(noise)),
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="a3c,ncf,bert,lstm_lm")
    parser.add_argument("--rounds", type=int, default=1, help="fresh+warm rounds, alternating the order")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("extra", nargs="*", help="more `sharewise pairs` options, after --")
    args = parser.parse_args(argv)

    results, agreements = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = ("fresh", "warm") if r % 2 == 0 else ("warm", "fresh")
            tables = {}
            for isolation in order:
                out = Path(tmp) / f"{isolation}-{r}"
                wall = run_campaign(args.workloads, isolation, out, args.extra)
                tables[isolation] = pair_table(out)
                results.append(summarize(isolation, wall, tables[isolation]) | {"round": r})
                print(f"round {r} {isolation}: {wall:.0f} s", file=sys.stderr, flush=True)
            agreements.append(agreement(tables["fresh"], tables["warm"]) | {"round": r})

    frame = pd.DataFrame(results)
    print(f"campaign: -w {args.workloads} --device cpu --mode cpu, {frame['pairs'].iloc[0]} pairs, defaults otherwise")
    print(f"{'round':>5s} {'isolation':>9s} {'wall s':>7s} {'pairs s':>8s} {'pairs/h':>8s} {'(pairs only)':>12s} "
          f"{'repeats':>8s} {'CI med':>7s} {'CI max':>7s} {'<=2%':>6s}")
    for row in results:
        print(f"{row['round']:5d} {row['isolation']:>9s} {row['wall_s']:7.0f} {row['pair_s']:8.0f} "
              f"{row['pairs_per_h']:8.1f} {row['pairs_per_h_pairs_only']:12.1f} {row['repeats_mean']:8.1f} "
              f"{row['ci_median'] * 100:6.1f}% {row['ci_max'] * 100:6.1f}% {row['reached'] * 100:5.0f}%")
    mean = frame.groupby("isolation").mean(numeric_only=True)
    speedup = mean.loc["warm", "pairs_per_h"] / mean.loc["fresh", "pairs_per_h"]
    speedup_pairs = mean.loc["warm", "pairs_per_h_pairs_only"] / mean.loc["fresh", "pairs_per_h_pairs_only"]
    agree = pd.DataFrame(agreements).mean(numeric_only=True)
    print(f"warm / fresh pairs per hour: {speedup:.2f}x over the campaign, {speedup_pairs:.2f}x over the pairs "
          f"alone (target >= {SPEEDUP_TARGET:.0f}x) -> {'met' if speedup >= SPEEDUP_TARGET else 'NOT met'}")
    print(f"slowdown agreement warm vs fresh: mean |diff| {agree['mean_abs_diff'] * 100:.1f}% (max "
          f"{agree['max_abs_diff'] * 100:.1f}%) over {agree['pairs_compared']:.0f} pairs x 2 sides; mean half-width "
          f"{agree['mean_halfwidth'] * 100:.1f}%; target within {AGREEMENT_TARGET * 100:.0f}% -> "
          f"{'met' if agree['mean_abs_diff'] <= AGREEMENT_TARGET else 'NOT met'}")
    warm_reached = mean.loc["warm", "reached"]
    print(f"warm pairs reaching the {CI_TARGET * 100:.0f}% half-width: {warm_reached * 100:.0f}% (target >= 90%) -> "
          f"{'met' if warm_reached >= 0.9 else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps({"campaigns": results, "agreement": agreements}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
