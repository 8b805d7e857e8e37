"""Benchmark: observed pair rows (``sharewise observe`` + Prometheus + ``sharewise collect``) against ``sharewise
pairs`` of the same two jobs, in one sitting (target: the slowdowns agree within their confidence, issue 39).

The jobs are two ordinary training scripts of ``tests/fixtures`` on the CPU (``cnn_train.py --data fixed``, a small
CNN, and ``lm_accum.py``, a small transformer LM with gradient accumulation), both on every core this process may
use, as ``pairs --mode cpu`` runs a pair's two workers.

1. **Measured**: ``sharewise pairs -w cnn=cmd:... -w lm=cmd:... --device cpu --mode cpu`` (solo profiles, then the
   pairs cnn|cnn, cnn|lm, lm|lm; windows repeated until each slowdown's 95% half-width is within 2%, or 20 repeats).
2. **Observed**: a Prometheus server on 127.0.0.1 scraping every second; ``cnn`` runs under ``sharewise observe``
   alone, then ``lm`` joins, then ``cnn`` stops and ``lm`` runs alone, then ``cnn`` joins again, ... (``--rounds``
   rounds of a join and a leave, ``--phase`` seconds each phase, counted from the moment the started job's
   metrics show it stepping: alone and together stretches alternate, so a drift of the machine's speed biases
   both alike); ``sharewise collect`` reads the server's HTTP API. Its rule of confidence is left wide open here
   (``--ci-target 99``) so the row is there to compare; whether it passes ``collect``'s default 5% is printed.
3. The cnn|lm rows side by side with their half-widths. They agree where the two intervals overlap:
   ``|observed - measured| <= ci_obs x observed + ci_meas x measured``.

Writes into ``--out``: ``measured/`` and ``observed/`` (dataset folders), ``series.csv`` (the series read from
Prometheus), ``comparison.json``, the Prometheus config and the jobs' logs. Needs the ``prometheus`` binary
(Debian: ``apt-get install prometheus``). Run on an idle machine from the repository root:

    .venv/bin/python benchmarks/bench_observed_pairs.py --out benchmarks/results/observed-pairs-2026-12-04
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "runtime"))
sys.path.insert(0, str(REPO / "tests"))  # the sitting of the real-Prometheus test, run here at benchmark length

from test_observe_prometheus import JOBS, PrometheusServer, free_port, observed_sitting  # noqa: E402

PAIR = ("cnn", "lm")


def measure_pairs(out: Path) -> dict:
    """``sharewise pairs`` of the two jobs into ``out``; return the cnn|lm row."""
    from sharewise.datasets.store import Dataset

    specs = [f"{name}=cmd:{shlex.join(argv)}" for name, argv in JOBS.items()]
    cmd = [sys.executable, "-m", "sharewise", "pairs", "--device", "cpu", "--mode", "cpu", "--no-probe",
           "--out", str(out)]
    for spec in specs:
        cmd += ["-w", spec]
    began = time.monotonic()
    subprocess.run(cmd, check=True)
    rows = Dataset(out).read_pairs()
    row = rows[(rows.workload_a == PAIR[0]) & (rows.workload_b == PAIR[1])].iloc[0].to_dict()
    row["wall_s"] = time.monotonic() - began
    return row


def observe_pairs(folder: Path, phase_s: float, rounds: int, ci_target: float) -> tuple[dict, object]:
    """The observed sitting under a Prometheus server, then ``collect``; return the cnn|lm row and the result."""
    from sharewise.observe.collect import CollectOptions, collect
    from sharewise.profiler.modes import available_cores

    ports = (free_port(), free_port())
    binary = shutil.which("prometheus")
    if binary is None:
        sys.exit("needs the prometheus binary: apt-get install prometheus")
    with PrometheusServer(folder / "prometheus", [f"127.0.0.1:{p}" for p in ports], binary) as server:
        began, ended = observed_sitting(folder, PAIR, ports, list(available_cores()), phase_s, rounds)
        result = collect(CollectOptions(prometheus=server.url, start=began, end=ended, out=folder / "observed",
                                        ci_target=ci_target))
    result.observed.to_frame().to_csv(folder / "series.csv", index=False)
    rows = result.rows.to_dict(orient="records")
    return (rows[0] if rows else {}), result


def compare(measured: dict, observed: dict) -> list[dict]:
    """Per side: both slowdowns, their half-widths (as fractions) and whether the intervals overlap."""
    out = []
    for side, name in zip(("a", "b"), PAIR, strict=True):
        m, o = measured[f"slowdown_{side}"], observed.get(f"slowdown_{side}", math.nan)
        cm, co = measured[f"ci_{side}"], observed.get(f"ci_{side}", math.nan)
        bound = co * o + cm * m
        out.append({"job": name, "partner": PAIR[1] if side == "a" else PAIR[0], "measured": m, "ci_measured": cm,
                    "observed": o, "ci_observed": co, "difference": o - m, "bound": bound,
                    "agree": bool(abs(o - m) <= bound), "solo_measured": measured[f"solo_{side}"],
                    "solo_observed": observed.get(f"solo_{side}", math.nan)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--phase", type=float, default=15.0, help="seconds of each phase of the sitting")
    parser.add_argument("--rounds", type=int, default=4, help="joins and leaves of the sitting")
    parser.add_argument("--ci-target", type=float, default=99.0, help="collect's --ci-target, percent")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    measured = measure_pairs(args.out / "measured")
    began = time.monotonic()
    observed, result = observe_pairs(args.out, args.phase, args.rounds, args.ci_target / 100)
    sitting_s = time.monotonic() - began
    rows = compare(measured, observed) if observed else []
    report = {
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "measured": {k: measured[k] for k in ("trials", "window_s", "other_cpu_frac", "wall_s")},
        "observed": {"trials": observed.get("trials"), "window_s": observed.get("window_s"),
                     "pair_s": observed.get("pair_s"), "sitting_s": sitting_s,
                     "intervals": [vars(i) for i in result.intervals], "skipped": dict(result.skipped),
                     "alone_windows": result.alone_windows},
        "comparison": rows,
    }
    (args.out / "comparison.json").write_text(json.dumps(report, indent=1, default=str))
    print(f"{'job':<5} {'partner':<8} {'measured (pairs)':>18} {'observed (collect)':>20} {'diff':>7} {'bound':>7} "
          "agree")
    for r in rows:
        print(f"{r['job']:<5} {r['partner']:<8} {r['measured']:>9.3f} +-{r['ci_measured'] * 100:4.1f}% "
              f"{r['observed']:>11.3f} +-{r['ci_observed'] * 100:4.1f}% {r['difference']:>+7.3f} {r['bound']:>7.3f} "
              f"{'yes' if r['agree'] else 'NO'}")
    if not rows:
        print(f"no observed row: {dict(result.skipped)}; intervals: {[vars(i) for i in result.intervals]}")
    else:
        widest = max(observed["ci_a"], observed["ci_b"])
        print(f"at collect's default --ci-target 5% the observed row is {'kept' if widest <= 0.05 else 'too noisy'} "
              f"(widest half-width {widest * 100:.1f}%)")
    print(f"windows: measured {measured['trials']} repeats of {measured['window_s']:.2f} s; observed "
          f"{observed.get('trials')} windows over {observed.get('pair_s', 0):.0f} s together; load average "
          f"{load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
