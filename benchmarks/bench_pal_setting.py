"""Benchmark: PAL's headline in PAL's own setting, with the measured variability of real GPUs (issue 30).

PAL (Jain et al., SC'24) reports that PAL cuts average JCT by 42-43% and PM-First by 40% against Packed-Sticky
(geometric mean over 8 traces). This runs their experiment as their artifact (hal-uw/blox-pal, artifact-v1.4)
sets it up: the 8 "Sia-Philly" traces (160 jobs each) on 16 nodes x 4 GPUs, 360 s rounds, 1.7x for a job that
spans nodes, no migration cost, and per-GPU, per-class slowdown factors drawn (seed 42) from PAL's measurements
on TACC Longhorn's V100s (``profiles.json``). Policies: the artifact's Packed-Sticky, Packed-Non-Sticky,
PM-First and PAL, our event-driven variants of the last three (SJF with backfilling, no re-placement),
exclusive-sjf and sharewise. No measured pairs cover PAL's models on a V100, so no job shares a GPU
(``--data none``): sharewise is its placement, re-placement and SLO-guarded preemption here.

Printed: average JCT per trace and policy; the geometric-mean ratio to Packed-Sticky and to Packed-Non-Sticky
next to the paper's (the artifact's plotting script labels its non-sticky run "Packed-Sticky", so its 43% may
be against Packed-Non-Sticky: both are shown); the ablations PAL's paper does not show (every factor 1.0, so
only ordering, packing and free migration remain; a 60 s migration cost); sharewise against PAL, and without
its re-placement; and how the headline moves with the draw (other seeds, and numpy's legacy stream).

    .venv/bin/python benchmarks/bench_pal_setting.py [--data-root DIR] [--seeds 20] [--json OUT]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
import time
from pathlib import Path

import numpy as np

from sharewise.datasets.public import public_data_root

N_GPUS, PER_NODE, ROUND_S, CROSS, MIGRATION_S = 64, 4, 360.0, 1.7, 60.0
PS, PNS, PMF, PAL = "packed-sticky-artifact", "packed-non-sticky", "pm-first-artifact", "pal-artifact"
OURS = "sharewise"
NO_REPLACE = "sharewise, no re-placement"
POLICIES = (PS, PNS, PMF, PAL, "packed-sticky", "pm-first", "pal", "exclusive-sjf", OURS)
SHORT = {PS: "PS", PNS: "PNS", PMF: "PM-First", PAL: "PAL", "packed-sticky": "ps-sjf", "pm-first": "pmf-sjf",
         "pal": "pal-sjf", "exclusive-sjf": "excl-sjf", OURS: "sharewise", NO_REPLACE: "sw-norepl"}
#: The paper's ratios of average JCT to Packed-Sticky (geometric mean over the 8 traces): 40% and 42-43% less.
PAPER = {PMF: "0.60", PAL: "0.57-0.58"}
WITHIN = 0.01  # sharewise must be within 1% of PAL's average JCT (geometric mean over the traces)
BAD = 1.5  # a class-A factor above this marks one of the few runs on Longhorn's two bad nodes


def prepare_traces(pal: Path) -> list:
    """Load the 8 traces once, as ``sharewise simulate --data none`` does (the cluster is replaced per run)."""
    from sharewise.app.simulate import SimulationConfig, prepare

    out = []
    for k in range(1, 9):
        config = SimulationConfig(
            trace=str(pal / "workload-traces" / "philly" / f"workload-{k}.csv"), data="none", n_gpus=N_GPUS,
            gpus_per_node=PER_NODE, cross_node_slowdown=CROSS, round_s=ROUND_S, pm_scores=str(pal / "profiles.json"),
        )
        out.append((config, prepare(config)))
    return out


def run_setting(traces: list, variability, policies, migration_s: float = 0.0) -> dict:
    """Average JCT (s) and migrations per trace of each policy, on GPUs with ``variability``."""
    from sharewise.engine.simulator import simulate
    from sharewise.policy import get_policy

    out: dict = {}
    for name in policies:
        policy = functools.partial(get_policy(OURS), replace=False) if name == NO_REPLACE else get_policy(name)
        jct, migrations = [], []
        for config, inputs in traces:
            cluster = dataclasses.replace(inputs.cluster, variability=variability, preempt_delay_s=migration_s)
            r = simulate(inputs.trace, policy, inputs.truth, inputs.table, cluster=cluster, slo=config.max_slowdown,
                         name=name, observe=inputs.observe, round_s=config.round_s)
            jct.append(r.metrics["avg_jct"])
            migrations.append(r.metrics["migrations"])
        out[name] = {"avg_jct": jct, "migrations": migrations}
    return out


def geomean_ratio(res: dict, name: str, base: str) -> float:
    return float(np.exp(np.mean(np.log(np.array(res[name]["avg_jct"]) / np.array(res[base]["avg_jct"])))))


def print_table(res: dict, title: str) -> None:
    names = list(res)
    print(f"\n{title}: average JCT (h) per trace")
    print("  trace " + " ".join(f"{SHORT.get(n, n):>9s}" for n in names))
    for k in range(8):
        print(f"  {k + 1:5d} " + " ".join(f"{res[n]['avg_jct'][k] / 3600:9.2f}" for n in names))
    gm = {n: float(np.exp(np.mean(np.log(res[n]["avg_jct"])))) for n in names}
    print("  geom. " + " ".join(f"{gm[n] / 3600:9.2f}" for n in names))
    print("  migr. " + " ".join(f"{sum(res[n]['migrations']):9d}" for n in names))


def print_ratios(res: dict, title: str, paper: bool = False) -> dict:
    print(f"\n{title}: geometric mean over the 8 traces of avg JCT / that of Packed-Sticky and of Packed-Non-Sticky")
    print(f"  {'policy':28s} {'/ PS':>7s} {'/ PNS':>7s}" + ("   paper (/ PS)" if paper else ""))
    out = {}
    for n in res:
        a, b = geomean_ratio(res, n, PS), geomean_ratio(res, n, PNS)
        out[n] = {"vs_packed_sticky": a, "vs_packed_non_sticky": b}
        print(f"  {n:28s} {a:7.3f} {b:7.3f}" + (f"   {PAPER.get(n, '')}" if paper else ""))
    return out


def describe(variability) -> str:
    parts = [f"{c} max {f.max():.2f}, {int((f > BAD).sum())} GPUs > {BAD}x"
             for c, f in zip(variability.classes, variability.factors, strict=True)]
    return "; ".join(parts)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=None, help="Default: data/ ($SHAREWISE_DATA).")
    parser.add_argument("--seeds", type=int, default=20, help="Other draws (seeds 0..N-1) for the sensitivity.")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    args.data_root = public_data_root(args.data_root)
    pal = args.data_root / "pal"
    if not (pal / "profiles.json").is_file():
        raise SystemExit(f"PAL's data not found under {args.data_root}; pass --data-root")
    from sharewise.app.simulate import class_variability
    from sharewise.datasets.variability import read_variability

    began = time.perf_counter()
    traces = prepare_traces(pal)
    drawn = traces[0][1].cluster.variability
    print(f"PAL's setting: {N_GPUS} GPUs ({N_GPUS // PER_NODE} nodes x {PER_NODE}), {ROUND_S:g} s rounds, {CROSS}x "
          f"across nodes, migration free, no sharing (no pair data covers PAL's models), 8 traces x 160 jobs")
    print(f"factors: {drawn.source}: {describe(drawn)}")
    out: dict = {"drawn": describe(drawn)}

    main_res = run_setting(traces, drawn, (*POLICIES, NO_REPLACE))
    print_table(main_res, "measured variability (seed 42)")
    out["main"] = {"avg_jct": main_res, "ratios": print_ratios(main_res, "measured variability (seed 42)", True)}

    uniform = run_setting(traces, drawn.uniform(), (*POLICIES, NO_REPLACE))
    out["uniform"] = {"avg_jct": uniform, "ratios": print_ratios(uniform, "ablation: every factor 1.0")}
    costly = run_setting(traces, drawn, (*POLICIES, NO_REPLACE), MIGRATION_S)
    ratios = print_ratios(costly, f"ablation: {MIGRATION_S:g} s per migration")
    out["migration_60s"] = {"avg_jct": costly, "ratios": ratios}

    print("\nwhat variability costs each policy: geometric mean of avg JCT with the drawn factors / with all 1.0")
    out["variability_cost"] = {}
    for n in main_res:
        x = float(np.exp(np.mean(np.log(np.array(main_res[n]["avg_jct"]) / np.array(uniform[n]["avg_jct"])))))
        out["variability_cost"][n] = x
        print(f"  {n:28s} {x:.3f}")

    print(f"\nsharewise in PAL's setting (target: avg JCT <= PAL's x {1 + WITHIN:.2f}, geometric mean over the traces)")
    out["sharewise"] = {}
    for label, res in (("measured variability", main_res), ("every factor 1.0", uniform),
                       (f"{MIGRATION_S:g} s per migration", costly)):
        x, y = geomean_ratio(res, OURS, PAL), geomean_ratio(res, NO_REPLACE, PAL)
        out["sharewise"][label] = {"vs_pal": x, "no_replace_vs_pal": y}
        print(f"  {label:24s} sharewise / PAL {x:.3f} ({'met' if x <= 1 + WITHIN else 'missed'}); without "
              f"re-placement {y:.3f}; sharewise / exclusive-sjf {geomean_ratio(res, OURS, 'exclusive-sjf'):.3f}")

    print("\nhow the headline moves with the draw (class A = ResNet-50: about 1.4% of its runs are over 1.5x)")
    print(f"  {'draw':22s} {'A max':>6s} {'A>1.5x':>6s} {'PMF/PS':>7s} {'PAL/PS':>7s} {'PAL/PNS':>7s} "
          f"{'sw/PAL':>7s} {'sw cost':>7s} {'PAL cost':>8s}")
    legacy = read_variability(pal / "profiles.json", N_GPUS, seed=42, class_of=drawn.class_of, stream="mt19937")
    draws = [("seed 42 (pcg64)", drawn), ("seed 42 (mt19937)", legacy)]
    profiles = str(pal / "profiles.json")
    draws += [(f"seed {s} (pcg64)", class_variability(profiles, N_GPUS, s)) for s in range(args.seeds)]
    uni_ref = {n: uniform[n] for n in (PS, PNS, PMF, PAL, OURS)}
    out["draws"] = {}
    for label, var in draws:
        res = run_setting(traces, var, (PS, PNS, PMF, PAL, OURS)) if var is not drawn else main_res
        cost = {n: float(np.exp(np.mean(np.log(np.array(res[n]["avg_jct"]) / np.array(uni_ref[n]["avg_jct"])))))
                for n in (PAL, OURS)}
        row = {"a_max": float(var.factors[0].max()), "a_bad": int((var.factors[0] > BAD).sum()),
               "pmf_ps": geomean_ratio(res, PMF, PS), "pal_ps": geomean_ratio(res, PAL, PS),
               "pal_pns": geomean_ratio(res, PAL, PNS), "sw_pal": geomean_ratio(res, OURS, PAL),
               "sw_cost": cost[OURS], "pal_cost": cost[PAL]}
        out["draws"][label] = row
        print(f"  {label:22s} {row['a_max']:6.2f} {row['a_bad']:6d} {row['pmf_ps']:7.3f} {row['pal_ps']:7.3f} "
              f"{row['pal_pns']:7.3f} {row['sw_pal']:7.3f} {row['sw_cost']:7.3f} {row['pal_cost']:8.3f}", flush=True)
    rows = list(out["draws"].values())[2:]
    with_bad = [r for r in rows if r["a_bad"]]
    without = [r for r in rows if not r["a_bad"]]
    for label, group in (("with a class-A GPU over 1.5x", with_bad), ("without", without)):
        if group:
            pal_ps = [r["pal_ps"] for r in group]
            pmf_ps = [r["pmf_ps"] for r in group]
            print(f"  seeds 0-{args.seeds - 1} {label}: {len(group)} draws, PAL/PS median {np.median(pal_ps):.3f} "
                  f"({min(pal_ps):.3f}-{max(pal_ps):.3f}), PM-First/PS median {np.median(pmf_ps):.3f} "
                  f"({min(pmf_ps):.3f}-{max(pmf_ps):.3f}), sharewise/PAL max {max(r['sw_pal'] for r in group):.3f}")
    every = list(out["draws"].values())
    cheaper = sum(r["sw_cost"] <= r["pal_cost"] for r in every)
    print(f"  all {len(every)} draws: variability costs sharewise no more than PAL in {cheaper} (median "
          f"{np.median([r['sw_cost'] for r in every]):.3f} against {np.median([r['pal_cost'] for r in every]):.3f}); "
          f"sharewise / PAL at most {max(r['sw_pal'] for r in every):.3f}")
    print(f"\nbenchmark: {time.perf_counter() - began:.0f} s (simulation results are deterministic; times are not)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))



if __name__ == "__main__":
    main(sys.argv[1:])
