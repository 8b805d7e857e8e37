"""Issue 41, 2026-12-05: ours with each ``share_fresh`` against the baselines on the two small traces (reference
pairs, simulated, predicted view and truth). Run from the repository root:

    .venv/bin/python benchmarks/results/policy-suite-2026-12-05-fresh-joins/small_traces.py TRACE.csv GPUS
"""
import functools
import sys

import numpy as np

from sharewise.app.simulate import SimulationConfig, prepare
from sharewise.engine.simulator import simulate
from sharewise.policy import get_policy

trace, gpus = sys.argv[1], int(sys.argv[2])
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
