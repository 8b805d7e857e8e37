"""Analysis: ours with each ``share_fresh`` against the baselines on a small trace, every job's schedule printed.

Simulated on the reference pairs, with the policies seeing out-of-fold predictions and then the truth; per policy
the average JCT (s), SLO violations, preemptions and each job's ``id:start-finish``, in start order. Deterministic,
about 10 s (issue 41: the six-job trace and the physical benchmark's 16-job trace, both kept with their
outputs in ``results/policy-suite-2026-12-05-fresh-joins/``). From the repository root:

    .venv/bin/python benchmarks/small_traces.py TRACE.csv GPUS

e.g. ``benchmarks/results/policy-suite-2026-12-05-fresh-joins/six-job-trace.csv 1``.
"""

from __future__ import annotations

import argparse
import functools
import sys

import numpy as np

from sharewise.app.simulate import SimulationConfig, prepare
from sharewise.engine.simulator import simulate
from sharewise.policy import get_policy


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="a trace CSV of reference workloads")
    parser.add_argument("gpus", type=int, help="GPUs of the one node the trace runs on")
    args = parser.parse_args(argv)
    trace, gpus = args.trace, args.gpus
    for oracle in (False, True):
        cfg = SimulationConfig(trace=trace, data="reference", n_gpus=gpus, gpus_per_node=gpus, oracle=oracle)
        inputs = prepare(cfg)
        variants = {name: get_policy(name) for name in ("exclusive-sjf", "sjf-ffs", "sjf-bsbf")}
        for fresh in ("idle", "next-call", "always"):
            variants[f"ours, share_fresh={fresh}"] = functools.partial(get_policy("sharewise"), share_fresh=fresh)
        print(f"{trace.rsplit('/', 1)[-1]} on {gpus} GPU(s), {'the truth' if oracle else 'predictions'}")
        for name, pol in variants.items():
            r = simulate(inputs.trace, pol, inputs.truth, inputs.table, cluster=inputs.cluster, slo=cfg.max_slowdown,
                         name=name, observe=inputs.observe)
            m = r.metrics
            order = np.argsort(r.start)
            sched = " ".join(f"{inputs.trace.job_id[j]}:{r.start[j]:.0f}-{r.finish[j]:.0f}" for j in order)
            print(f"  {name:28s} avg {m['avg_jct']:7.2f} viol {m['slo_violations']} pre {m['preemptions']}  {sched}")


if __name__ == "__main__":
    main(sys.argv[1:])
