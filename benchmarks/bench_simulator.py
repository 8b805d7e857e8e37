"""Benchmark: simulator speed, every event-driven policy on all 82,247 Philly jobs (target: sharewise <= 20 s on
2 cores).

The jobs of ``philly.csv`` (workloads drawn with seed 0 from the Gavel V100 workloads) replay on
``--gpus`` GPUs (8 per node) with the imported Gavel V100 pairs as the truth; policies see out-of-fold
predictions by family (calibrated intervals) plus what they observe, as ``sharewise simulate`` gives them.
Each policy runs in this process one after the other, so their wall times compare side by side. The
predictions are computed once and not timed. Where policies stand on JCT is the job of
``bench_policy_suite.py``; this prints the metrics only to show the runs are the real thing.

    .venv/bin/python benchmarks/bench_simulator.py [--data-root ../shared/data] [--gpus 512]
        [--policy NAME ...] [--max-jobs N] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 20.0
OURS = "sharewise"


def main(argv: list[str]) -> None:
    from sharewise.app.imports import import_data
    from sharewise.app.simulate import SimulationConfig, prepare, run_policy
    from sharewise.policy import event_driven_names

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--gpus", type=int, default=512)
    parser.add_argument("--policy", action="append", default=None)
    parser.add_argument("--max-jobs", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if not (args.data_root / "philly").is_dir():
        raise SystemExit(f"public data not found under {args.data_root}; pass --data-root")
    names = args.policy or event_driven_names()  # PAL's round-based policies run in bench_pal_setting.py
    out = {}
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
        began = time.perf_counter()
        inputs = prepare(config)
        prep_s = time.perf_counter() - began
        print(
            f"Philly: {len(inputs.trace)} jobs on {args.gpus} GPUs; trace, truth and out-of-fold predictions "
            f"prepared in {prep_s:.1f} s (not timed below); target: {OURS} <= {TARGET_S:.0f} s"
        )
        print(f"{'policy':24s} {'sim s':>7s} {'events':>8s} {'calls':>8s} {'avg JCT h':>10s} {'SLO viol':>9s}")
        for name in names:
            r = run_policy(name, inputs, config)
            m = r.metrics
            out[name] = {**m, "wall_s": r.wall_s, "events": r.events, "policy_calls": r.policy_calls}
            print(
                f"{name:24s} {r.wall_s:7.1f} {r.events:8d} {r.policy_calls:8d} {m['avg_jct'] / 3600:10.2f} "
                f"{m['slo_violations']:9d}",
                flush=True,
            )
    if OURS in out:
        verdict = "met" if out[OURS]["wall_s"] <= TARGET_S else "MISSED"
        print(f"{OURS}: {out[OURS]['wall_s']:.1f} s (target <= {TARGET_S:.0f} s: {verdict})")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
