"""Benchmark: every registered policy on a suite of cells (trace x cluster x truth x view), side by side.

The policies defined for rounds (``round_based``: PAL's artifact's, which re-place every job every round) run
in their own setting, ``bench_pal_setting.py``; this event-driven suite leaves them out.

Cells (issue 10): Gavel traces of different load (2869ce on 32 GPUs and 6214e9 on 160, light; e13805 on 16,
heavy), each with the truth of each Gavel GPU (K80, P100, V100); the same Gavel traces on V100 with GPUs of
varied speed (log-normal sigma 0.1, 1.2x for jobs spanning nodes) for the variability-aware policies;
Philly (all 82,247 jobs, workloads drawn with seed 0) on ``--philly-gpus`` GPUs with the V100 truth; a
synthetic trace over the reference CPU workloads with the reference truth; and small traces of reference workloads
on 1 and 2 GPUs, arrivals a few seconds apart, as a new user tries them (issue 41's six jobs, and two of eight
jobs drawn with seeds 0 and 1: ``small_traces``). Each cell runs twice: policies
see out-of-fold predictions (each job's slowdown from a model that never saw its family), plus what they
observe of running pairs (``predicted``), or the truth (``oracle``).

Per cell: avg and p95 JCT, SLO violations, makespan, utilization of every policy. Summary: the cells where
sharewise has the lowest average JCT (within 1%) with SLO violations <= every other sharing policy's and
<= 1% of jobs; predicted/oracle average JCT of sharewise per Gavel cell; sharewise / exclusive-sjf on the
heavy cell; SJF-BSBF / Tiresias next to the paper's 0.67-0.73 and PAL / Packed-Sticky (geometric-mean JCT)
next to PAL's 0.58. Three ablations run beside the registered policies, scored against the same SLO:
sharewise without preemption (what pausing long jobs for short ones adds), without its SLO rescue (what
pausing one side of a measured pair that breaks the SLO adds), and sharewise sharing without its SLO check
and without preemption, next to the best other policy (how much of a baseline's lead over
sharing alone is bought with SLO violations).

Cells run in parallel processes (``--workers``), or as Ray tasks on a cluster with ``--address``.

    .venv/bin/python benchmarks/bench_policy_suite.py [--data-root DIR] [--workers 2]
        [--philly-gpus 512] [--skip-philly] [--only SUBSTRING] [--json OUT.json] [--address ADDR]
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from sharewise.datasets.public import public_data_root

REPO = Path(__file__).resolve().parents[1]
SHARING = ("sjf-ffs", "sjf-bsbf", "sharewise")
OURS = "sharewise"
NO_SLO = "sharewise, sharing only, no SLO"
NO_PREEMPT = "sharewise, no preemption"
NO_RESCUE = "sharewise, no SLO rescue"
WITHIN = 0.01  # "lowest average JCT" allows 1%
MAX_SLO_SHARE = 0.01  # SLO violations at most 1% of the jobs
GAVEL_CELLS = (("2869ce", 32, "light"), ("e13805", 16, "heavy"), ("6214e9", 160, "light"))
HEAVY = "e13805"
PAPER_BSBF_VS_TIRESIAS = (0.67, 0.73)
PAPER_PAL_VS_PACKED = 0.58


@dataclass(frozen=True)
class Cell:
    """One suite cell: a trace on a cluster with one truth; ``view`` is ``predicted`` or ``oracle``."""

    name: str
    trace: str
    data: str
    device: str
    n_gpus: int
    gpus_per_node: int
    view: str
    predictions: str | None = None
    speed_sigma: float = 0.0
    cross_node_slowdown: float = 1.0
    load: str = ""
    group: str = "gavel"

    def config(self):
        """The ``SimulationConfig`` that simulates this cell (as ``sharewise simulate`` would)."""
        from sharewise.app.simulate import SimulationConfig

        return SimulationConfig(
            trace=self.trace, data=self.data, device_name=self.device, n_gpus=self.n_gpus,
            gpus_per_node=self.gpus_per_node, oracle=self.view == "oracle", predictions=self.predictions,
            speed_sigma=self.speed_sigma, cross_node_slowdown=self.cross_node_slowdown, group_by="family",
        )


def prepare(data_root: Path, work: Path, philly_gpus: int, skip_philly: bool) -> list[Cell]:
    """Import Gavel, compute each truth's out-of-fold predictions once, write the synthetic trace; list cells."""
    from sharewise.app.imports import import_data
    from sharewise.datasets.store import Dataset
    from sharewise.datasets.traces.generic import write_generic_csv
    from sharewise.datasets.traces.synthetic import synthetic_trace

    gavel = work / "gavel"
    import_data("gavel", {"path": data_root / "gavel" / "simulation_throughputs.json"}, gavel)
    preds = {}
    for device in ("k80", "p100", "v100"):
        began = time.perf_counter()
        preds[device] = oof_predictions(gavel, work, device, group_by="family")
        print(f"out-of-fold predictions for {device}: {time.perf_counter() - began:.1f} s", flush=True)
    ref_pairs = Dataset("reference").read_pairs()
    ref_device = str(ref_pairs["device_name"].iloc[0])
    preds["reference"] = oof_predictions("reference", work, ref_device, group_by="family")
    cells: list[Cell] = []
    for view in ("predicted", "oracle"):
        for trace, gpus, load in GAVEL_CELLS:
            path = str(data_root / "gavel" / "traces_msr_seed0" / f"{trace}.trace")
            for device in ("k80", "p100", "v100"):
                cells.append(
                    Cell(f"{trace}/{gpus} {device}", path, str(gavel), device, gpus, 8, view,
                         preds[device] if view == "predicted" else None, load=load)
                )
            cells.append(
                Cell(f"{trace}/{gpus} v100 varied GPUs", path, str(gavel), "v100", gpus, 8, view,
                     preds["v100"] if view == "predicted" else None, speed_sigma=0.1, cross_node_slowdown=1.2,
                     load=load, group="varied")
            )
        if not skip_philly:
            cells.append(
                Cell(f"philly/{philly_gpus} v100", str(data_root / "philly" / "philly.csv"), str(gavel), "v100",
                     philly_gpus, 8, view, preds["v100"] if view == "predicted" else None, group="philly")
            )
    workloads = sorted(set(ref_pairs["workload_a"]) | set(ref_pairs["workload_b"]))
    synthetic = write_generic_csv(synthetic_trace(workloads, 300, 16, seed=0), work / "synthetic.csv")
    for view in ("predicted", "oracle"):
        cells.append(
            Cell("synthetic/16 reference", str(synthetic), "reference", ref_device, 16, 8, view,
                 preds["reference"] if view == "predicted" else None, group="reference")
        )
    for view in ("predicted", "oracle"):
        for name, trace in small_traces(workloads).items():
            path = write_generic_csv(trace, work / f"{name}.csv")
            for gpus in (1, 2):
                cells.append(
                    Cell(f"{name}/{gpus} reference", str(path), "reference", ref_device, gpus, gpus, view,
                         preds["reference"] if view == "predicted" else None, group="small")
                )
    return cells


#: Issue 41's six-job trace (reference workloads of 10-30 s, arrivals 2 s apart), as (workload, seconds).
SIX_JOBS = (("resnet18", 20.0), ("lstm_lm", 15.0), ("bert", 30.0), ("ncf", 10.0), ("mobilenet_v2", 25.0),
            ("a3c", 12.0))


def small_traces(workloads: list[str]) -> dict:
    """The small traces of the suite, by name: issue 41's six jobs, and eight jobs of 10-40 s over ``workloads``
    arriving 1-5 s apart, drawn with seeds 0 and 1 (``numpy.random.Generator``). One GPU each."""
    import numpy as np

    from sharewise.datasets.traces import Trace

    def trace(name, arrival, duration, workload):
        n = len(arrival)
        return Trace(job_id=np.array([f"j{i}" for i in range(n)], dtype=object), arrival=np.asarray(arrival, float),
                     duration=np.asarray(duration, float), gpus=np.ones(n, np.int64),
                     workload=np.asarray(workload, dtype=object), line=np.arange(2, n + 2), source=name, format="csv")

    out = {"six": trace("six", 2.0 * np.arange(len(SIX_JOBS)), [d for _, d in SIX_JOBS], [w for w, _ in SIX_JOBS])}
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        arrival = np.round(np.cumsum(np.r_[0.0, rng.uniform(1.0, 5.0, 7)]), 1)
        duration = np.round(rng.uniform(10.0, 40.0, 8), 1)
        out[f"eight-{seed}"] = trace(f"eight-{seed}", arrival, duration, rng.choice(np.asarray(workloads, object), 8))
    return out


def oof_predictions(data, work: Path, device: str, group_by: str) -> str:
    """Out-of-fold predictions of every shareable pair on ``device``, as ``sharewise simulate`` makes them."""
    from sharewise.app.simulate import prediction_candidates
    from sharewise.datasets.store import Dataset
    from sharewise.engine.table import SlowdownTable
    from sharewise.predictor import out_of_fold_predictions

    ds = Dataset(data)
    profiles, pairs = ds.read_profiles(), ds.read_pairs()
    truth = SlowdownTable.from_pairs(pairs, device_name=device)
    pred = out_of_fold_predictions(
        profiles, pairs, group_by=group_by, candidates=prediction_candidates(pairs, truth, device), holdout="self",
        calibrate=True,
    )
    path = work / f"oof_{Path(str(data)).name}_{device}.parquet"
    pred.to_parquet(path)
    return str(path)


def run_cell(cell: Cell) -> dict:
    """Simulate every registered policy on one cell; return its metrics (and the geometric-mean JCT)."""
    import numpy as np

    from sharewise.app.simulate import prepare, run_policy
    from sharewise.engine.simulator import simulate
    from sharewise.policy import event_driven_names, get_policy

    config = cell.config()
    began = time.perf_counter()
    inputs = prepare(config)
    out = {"cell": asdict(cell), "jobs": len(inputs.trace), "policies": {}}
    for name in event_driven_names():
        r = run_policy(name, inputs, config)
        out["policies"][name] = {
            **r.metrics,
            "geomean_jct": float(np.exp(np.mean(np.log(np.maximum(r.jct, 1e-9))))),
            "wall_s": r.wall_s,
        }
    # Ablations, not registered policies, scored with the same SLO: ours without preemption (what pausing
    # long jobs adds), and its sharing without the SLO check (how much of a baseline's lead over sharing
    # alone is bought with SLO violations).
    out["ablations"] = {}
    ablations = (
        (NO_PREEMPT, {"preempt": False}),
        (NO_RESCUE, {"rescue": False}),
        (NO_SLO, {"preempt": False, "max_slowdown": math.inf}),
    )
    for label, knobs in ablations:
        ablation = simulate(
            inputs.trace, functools.partial(get_policy(OURS), **knobs), inputs.truth, inputs.table,
            cluster=inputs.cluster, slo=config.max_slowdown, name=label, observe=inputs.observe,
        )
        out["ablations"][label] = ablation.metrics
    out["wall_s"] = time.perf_counter() - began
    return out


def _ablation_ratios(results: list[dict], label: str) -> dict:
    """Print and return sharewise's average JCT over that of ablation ``label``, per cell and view."""
    ratios = {}
    for r in results:
        plain = r["ablations"][label]
        ours = r["policies"][OURS]
        x = ours["avg_jct"] / plain["avg_jct"]
        ratios[f"{r['cell']['name']} ({r['cell']['view']})"] = x
        print(f"  {r['cell']['name']:32s} {r['cell']['view']:9s} {x:.3f} ({ours['slo_violations']} vs "
              f"{plain['slo_violations']} violations; {ours['preemptions']} preemptions)")
    return ratios


def run_all(cells: list[Cell], workers: int, address: str | None) -> list[dict]:
    if address:
        import ray

        ray.init(address=address, include_dashboard=False, log_to_driver=False)
        remote = ray.remote(num_cpus=1)(run_cell)
        return ray.get([remote.remote(c) for c in cells])
    if workers <= 1:
        return [run_cell(c) for c in cells]
    from concurrent.futures import ProcessPoolExecutor

    # Longest cells first, so one slow cell does not start last.
    order = sorted(range(len(cells)), key=lambda i: -_cost(cells[i]))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        done = dict(zip(order, pool.map(run_cell, [cells[i] for i in order]), strict=True))
    return [done[i] for i in range(len(cells))]


def _cost(cell: Cell) -> float:
    return {"philly": 100.0}.get(cell.group, 1.0) * cell.n_gpus


def wins(result: dict) -> tuple[bool, str]:
    """Does sharewise have the lowest avg JCT (within 1%), no more SLO violations than any other sharing
    policy, and at most 1% of the jobs violating the SLO? Returns (verdict, reason when not)."""
    pol = result["policies"]
    ours = pol[OURS]
    best = min(m["avg_jct"] for m in pol.values())
    reasons = []
    if ours["avg_jct"] > best * (1 + WITHIN):
        leader = min(pol, key=lambda n: pol[n]["avg_jct"])
        reasons.append(f"avg JCT {ours['avg_jct'] / best:.3f}x {leader}'s")
    worse = [n for n in SHARING if n != OURS and pol[n]["slo_violations"] < ours["slo_violations"]]
    if worse:
        reasons.append(f"more SLO violations than {', '.join(worse)}")
    if ours["slo_violations"] > MAX_SLO_SHARE * result["jobs"]:
        reasons.append(f"{ours['slo_violations']} SLO violations > 1% of {result['jobs']} jobs")
    return not reasons, "; ".join(reasons)


def report(results: list[dict]) -> dict:
    """Print every cell's table and the summary lines; return the summary."""
    from sharewise.policy import event_driven_names

    names = event_driven_names()
    for res in results:
        cell = res["cell"]
        base = res["policies"]["exclusive-sjf"]["avg_jct"]
        print(f"\n{cell['name']} ({cell['view']}, {res['jobs']} jobs, {res['wall_s']:.0f} s)")
        unit, u = (1.0, "s") if cell["group"] == "small" else (3600.0, "h")  # small traces last seconds
        print(f"  {'policy':24s} {'avg JCT ' + u:>9s} {'x excl-sjf':>10s} {'p95 ' + u:>8s} {'SLO viol':>8s} "
              f"{'makespan ' + u:>10s} {'util':>5s} {'preempt':>7s}")
        best = min(m["avg_jct"] for m in res["policies"].values())
        for n in names:
            m = res["policies"][n]
            mark = " *" if m["avg_jct"] <= best * (1 + WITHIN) else ""
            print(f"  {n:24s} {m['avg_jct'] / unit:9.2f} {m['avg_jct'] / base:10.3f} {m['p95_jct'] / unit:8.1f} "
                  f"{m['slo_violations']:8d} {m['makespan'] / unit:10.0f} {m['utilization']:5.2f} "
                  f"{m['preemptions']:7d}{mark}")
    summary: dict = {"cells": {}}
    for view in ("predicted", "oracle"):
        cells = [r for r in results if r["cell"]["view"] == view]
        verdicts = [(r["cell"]["name"], *wins(r)) for r in cells]
        n_win = sum(v for _, v, _ in verdicts)
        summary["cells"][view] = {"wins": n_win, "cells": len(cells)}
        print(f"\nsummary ({view} view): sharewise has the lowest average JCT (within 1%) with SLO violations "
              f"<= every other sharing policy's and <= 1% of jobs in {n_win} of {len(cells)} cells "
              f"({100 * n_win / max(1, len(cells)):.0f}%; target >= 90%)")
        for name, ok, why in verdicts:
            if not ok:
                print(f"  not won: {name}: {why}")
    print(f"\nwhat preemption adds: sharewise / {NO_PREEMPT} (avg JCT; SLO violations, preemptions):")
    summary["preemption"] = _ablation_ratios(results, NO_PREEMPT)
    print(f"\nwhat the SLO rescue adds (pausing one side of a measured pair that breaks the SLO): sharewise / "
          f"{NO_RESCUE} (avg JCT; SLO violations, preemptions):")
    summary["rescue"] = _ablation_ratios(results, NO_RESCUE)
    print(f"\nthe SLO's price: {NO_SLO} next to the best registered policy other than ours (x its avg JCT; "
          "SLO violations):")
    summary["no_slo"] = {}
    for view in ("predicted", "oracle"):
        n_best = 0
        cells = [r for r in results if r["cell"]["view"] == view]
        for r in cells:
            pol = {n: m for n, m in r["policies"].items() if n != OURS}
            rival = min(pol, key=lambda n: pol[n]["avg_jct"])
            free = r["ablations"][NO_SLO]
            x = free["avg_jct"] / pol[rival]["avg_jct"]
            n_best += x <= 1 + WITHIN
            summary["no_slo"][f"{r['cell']['name']} ({view})"] = {"vs": rival, "ratio": x}
            print(f"  {r['cell']['name']:32s} {view:9s} {x:.3f} x {rival} ({free['slo_violations']} vs "
                  f"{pol[rival]['slo_violations']} violations; with its SLO, ours has "
                  f"{r['policies'][OURS]['slo_violations']})")
        print(f"  {view} view: sharing alone without its SLO has the lowest average JCT (within 1%) in {n_best} of "
              f"{len(cells)} cells")
    by_name = {(r["cell"]["name"], r["cell"]["view"]): r for r in results}
    print("\nsharewise predicted / oracle average JCT per Gavel cell (target <= 1.05):")
    ratios = {}
    for (name, view), r in by_name.items():
        if view == "predicted" and r["cell"]["group"] in ("gavel", "varied"):
            oracle = by_name[(name, "oracle")]["policies"][OURS]["avg_jct"]
            ratios[name] = r["policies"][OURS]["avg_jct"] / oracle
            print(f"  {name:32s} {ratios[name]:.3f}")
    summary["predicted_over_oracle"] = ratios
    print("\nsmall traces (reference workloads on 1 and 2 GPUs): sharewise / the best policy with no more SLO "
          "violations (target <= 1.01):")
    summary["small"] = {}
    for (n, v), r in by_name.items():
        if r["cell"]["group"] == "small":
            ours = r["policies"][OURS]
            kept = {k: m for k, m in r["policies"].items()
                    if k != OURS and m["slo_violations"] <= ours["slo_violations"]}
            rival = min(kept, key=lambda k: kept[k]["avg_jct"])
            x = ours["avg_jct"] / kept[rival]["avg_jct"]
            summary["small"][f"{n} ({v})"] = {"vs": rival, "ratio": x}
            print(f"  {n:32s} {v:9s} {x:.3f} x {rival} ({ours['slo_violations']} vs {kept[rival]['slo_violations']} "
                  "violations)")
    heavy = {n: r for (n, v), r in by_name.items() if v == "predicted" and n.startswith(HEAVY)}
    print("\nheavy cell (e13805 on 16 GPUs), predicted view: sharewise / exclusive-sjf (target <= 0.85):")
    summary["heavy_vs_exclusive_sjf"] = {}
    for n, r in heavy.items():
        x = r["policies"][OURS]["avg_jct"] / r["policies"]["exclusive-sjf"]["avg_jct"]
        summary["heavy_vs_exclusive_sjf"][n] = x
        print(f"  {n:32s} {x:.3f}")
    print(f"\nSJF-BSBF / Tiresias average JCT (paper: {PAPER_BSBF_VS_TIRESIAS[0]}-{PAPER_BSBF_VS_TIRESIAS[1]}):")
    summary["bsbf_vs_tiresias"] = {}
    for (n, v), r in by_name.items():
        x = r["policies"]["sjf-bsbf"]["avg_jct"] / r["policies"]["tiresias"]["avg_jct"]
        summary["bsbf_vs_tiresias"][f"{n} ({v})"] = x
        print(f"  {n:32s} {v:9s} {x:.3f}")
    print(f"\nPAL / Packed-Sticky geometric-mean JCT, varied GPUs (paper: {PAPER_PAL_VS_PACKED}):")
    summary["pal_vs_packed_sticky"] = {}
    for (n, v), r in by_name.items():
        if r["cell"]["group"] == "varied":
            x = r["policies"]["pal"]["geomean_jct"] / r["policies"]["packed-sticky"]["geomean_jct"]
            summary["pal_vs_packed_sticky"][f"{n} ({v})"] = x
            print(f"  {n:32s} {v:9s} {x:.3f}")
    return summary


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=None, help="Default: data/ ($SHAREWISE_DATA).")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--address", default=None, help="Run cells as Ray tasks on this cluster.")
    parser.add_argument("--philly-gpus", type=int, default=512)
    parser.add_argument("--skip-philly", action="store_true")
    parser.add_argument("--only", default=None, help="Run only cells whose name contains this.")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    args.data_root = public_data_root(args.data_root)
    if not (args.data_root / "gavel").is_dir():
        raise SystemExit(f"public data not found under {args.data_root}; pass --data-root")
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sharewise-suite-") as tmp:
        cells = prepare(args.data_root, Path(tmp), args.philly_gpus, args.skip_philly)
        if args.only:
            cells = [c for c in cells if args.only in c.name]
        results = run_all(cells, args.workers, args.address)
    summary = report(results)
    print(f"\nsuite: {len(results)} runs of {len(results[0]['policies'])} policies in "
          f"{time.perf_counter() - began:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "results": results}, indent=1, default=_json))


def _json(value):
    return None if isinstance(value, float) and not math.isfinite(value) else str(value)


if __name__ == "__main__":
    main(sys.argv[1:])
