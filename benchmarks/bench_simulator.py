"""Benchmark: the Philly replay (82,247 jobs), sharewise's time over sjf-bsbf's in the same run (targets: ratio
<= 1.0, sharewise <= 20 s on an idle 2-core machine).

The jobs of ``philly.csv`` (workloads drawn with seed 0 from the Gavel V100 workloads) replay on ``--gpus``
GPUs (8 per node) with the imported Gavel V100 pairs as the truth; policies see out-of-fold predictions by
family (calibrated intervals) plus what they observe, as ``sharewise simulate`` gives them. The predictions
are computed once and not timed. Each round runs sharewise and sjf-bsbf (the seed policy it is measured
against) one after the other in this process, alternating which goes first, so their times compare side by
side and drift cancels; the ratio of each round and their median are printed. ``--all`` adds one run of every
other registered policy (``--policy NAME`` one of them). Where policies stand on JCT is the job of
``bench_policy_suite.py``; the metrics here only show the runs are the real thing.

The first runs (sharewise and sjf-bsbf on the first 2,000 jobs) load the numba kernels from their cache before
anything is timed; ``--cold`` gives them a fresh cache, so that time is the kernels' compile, once per install.
``--schedules OUT.json`` writes a fingerprint of each policy's schedule (every job's start and finish, and
the metrics); ``--expect IN.json`` compares against one written by other code, so a speed-up can show it
schedules exactly as before.

    .venv/bin/python benchmarks/bench_simulator.py [--data-root DIR] [--gpus 512] [--rounds 3]
        [--all | --policy NAME ...] [--max-jobs N] [--cold] [--schedules OUT.json] [--expect IN.json] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from sharewise.datasets.public import public_data_root

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 20.0
TARGET_RATIO = 1.0
OURS = "sharewise"
SEED_POLICY = "sjf-bsbf"


def fingerprint(result) -> dict:
    """The schedule of one run: a hash of every job's start and finish times, and the metrics."""
    times = np.ascontiguousarray(np.stack([result.start, result.finish]), dtype=np.float64)
    return {
        "schedule_sha256": hashlib.sha256(times.tobytes()).hexdigest(),
        "metrics": {k: round(float(v), 6) for k, v in result.metrics.items()},
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=None, help="Default: data/ ($SHAREWISE_DATA).")
    parser.add_argument("--gpus", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=1, help="side-by-side rounds of sharewise and sjf-bsbf")
    parser.add_argument("--all", action="store_true", help="also run every other registered policy once")
    parser.add_argument("--policy", action="append", default=[], help="also run this policy once (repeatable)")
    parser.add_argument("--max-jobs", type=int, default=None)
    parser.add_argument("--schedules", type=Path, default=None)
    parser.add_argument("--expect", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--cold", action="store_true", help="compile the numba kernels afresh (a temporary cache)")
    args = parser.parse_args(argv)
    args.data_root = public_data_root(args.data_root)
    if args.cold:  # before sharewise.policy imports numba
        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="sharewise-numba-cold-")
    if not (args.data_root / "philly").is_dir():
        raise SystemExit(f"public data not found under {args.data_root}; pass --data-root")
    from sharewise.app.imports import import_data
    from sharewise.app.simulate import SimulationConfig, prepare, run_policy
    from sharewise.policy import event_driven_names

    out: dict = {"rounds": [], "others": {}}
    prints: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="sharewise-bench-sim-") as tmp:
        data = Path(tmp) / "gavel"
        import_data("gavel", {"path": args.data_root / "gavel" / "simulation_throughputs.json"}, data)
        config = SimulationConfig(
            trace=str(args.data_root / "philly" / "philly.csv"),
            data=str(data),
            device_name="v100",
            n_gpus=args.gpus,
            gpus_per_node=8,
            max_jobs=args.max_jobs,
        )
        inputs = prepare(config)
        began = time.perf_counter()  # compile (or load from their cache) the kernels on the first 2,000 jobs
        for name in (OURS, SEED_POLICY):
            run_policy(name, dataclasses.replace(inputs, trace=inputs.trace.head(2_000)), config)
        first_s = time.perf_counter() - began
        cache = "a cold kernel cache: the numba compile, once per install" if args.cold else "kernels from their cache"
        print(
            f"Philly: {len(inputs.trace)} jobs on {args.gpus} GPUs (trace, truth and out-of-fold predictions "
            f"prepared once, not timed)\nfirst runs on 2,000 jobs: {first_s:.1f} s ({cache})\n"
            f"targets: {OURS} / {SEED_POLICY} <= {TARGET_RATIO:.1f} side by side, {OURS} <= {TARGET_S:.0f} s idle"
        )
        print(f"\n{'round':>5s} {OURS + ' s':>13s} {SEED_POLICY + ' s':>13s} {'ratio':>7s}")
        for k in range(args.rounds):
            order = (OURS, SEED_POLICY) if k % 2 == 0 else (SEED_POLICY, OURS)
            results = {name: run_policy(name, inputs, config) for name in order}
            ours, seed = results[OURS].wall_s, results[SEED_POLICY].wall_s
            out["rounds"].append({"first": order[0], OURS: ours, SEED_POLICY: seed, "ratio": ours / seed})
            print(f"{k + 1:5d} {ours:13.1f} {seed:13.1f} {ours / seed:7.2f}", flush=True)
            for name, r in results.items():
                prints.setdefault(name, fingerprint(r))
                if prints[name] != fingerprint(r):
                    raise SystemExit(f"{name} scheduled differently in round {k + 1}: the replay is not deterministic")
        # Why the ratio is what it is: a preemptive policy is called at every event while jobs wait (it may
        # stop a running job for a shorter one), a non-preemptive one only while a GPU slot is free.
        for name, r in results.items():
            print(f"  {name}: {r.policy_calls:,} policy calls at {r.events:,} events, "
                  f"{1e6 * r.wall_s / max(r.policy_calls, 1):.0f} us of replay per call")
        ratios = [r["ratio"] for r in out["rounds"]]
        ours_s = [r[OURS] for r in out["rounds"]]
        median_ratio = statistics.median(ratios)
        verdict = "met" if min(ours_s) <= TARGET_S else "missed here"
        print(
            f"\n{OURS} / {SEED_POLICY}: median {median_ratio:.2f} over {len(ratios)} round(s) "
            f"(target <= {TARGET_RATIO:.1f}: {'met' if median_ratio <= TARGET_RATIO else 'MISSED'}); "
            f"{OURS} {min(ours_s):.1f}-{max(ours_s):.1f} s "
            + (
                f"(target <= {TARGET_S:.0f} s on an idle machine: {verdict})"
                if args.max_jobs is None
                else f"(the first {args.max_jobs} jobs only: the {TARGET_S:.0f} s target is for the whole trace)"
            )
        )
        others = [n for n in (event_driven_names() if args.all else args.policy) if n not in (OURS, SEED_POLICY)]
        if others:
            print(f"\n{'policy':24s} {'sim s':>7s} {'events':>8s} {'calls':>8s} {'avg JCT h':>10s} {'SLO viol':>9s}")
            for name in others:
                r = run_policy(name, inputs, config)
                if r is not None:
                    prints[name] = fingerprint(r)
                    out["others"][name] = {"wall_s": r.wall_s, "events": r.events, "policy_calls": r.policy_calls}
                    m = r.metrics
                    print(
                        f"{name:24s} {r.wall_s:7.1f} {r.events:8d} {r.policy_calls:8d} {m['avg_jct'] / 3600:10.2f} "
                        f"{m['slo_violations']:9d}",
                        flush=True,
                    )
        for name in (OURS, SEED_POLICY):
            m = prints[name]["metrics"]
            print(f"{name}: avg JCT {m['avg_jct'] / 3600:.2f} h, {int(m['slo_violations'])} SLO violations")
    out["schedules"] = prints
    status = 0
    if args.expect:
        expected = json.loads(args.expect.read_text())
        for name, fp in prints.items():
            if name in expected:
                same = expected[name]["schedule_sha256"] == fp["schedule_sha256"]
                print(f"schedule of {name}: {'identical to' if same else 'DIFFERENT from'} {args.expect}")
                status |= 0 if same else 1
    if args.schedules:
        args.schedules.write_text(json.dumps(prints, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
