"""Issue 41 experiments: ours against sjf-bsbf on a small trace, per mechanism (knob ablations), decisions."""
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
    variants = {
        "exclusive-sjf": get_policy("exclusive-sjf"),
        "sjf-bsbf": get_policy("sjf-bsbf"),
        "sharewise": get_policy("sharewise"),
        "ours q=p50": functools.partial(get_policy("sharewise"), quantile="p50"),
        "ours q=p50 slo=p50": functools.partial(get_policy("sharewise"), quantile="p50", slo_quantile="p50"),
        "ours no preempt": functools.partial(get_policy("sharewise"), preempt=False),
        "ours no rescue": functools.partial(get_policy("sharewise"), rescue=False),
        "ours head=1": functools.partial(get_policy("sharewise"), sharing_head=1),
        "ours p50,nopre,nores": functools.partial(get_policy("sharewise"), quantile="p50", preempt=False, rescue=False),
        "ours sjf": functools.partial(get_policy("sharewise"), share_order="sjf"),
        "ours sjf p50": functools.partial(get_policy("sharewise"), share_order="sjf", quantile="p50"),
        "ours sjf wake": functools.partial(get_policy("sharewise"), share_order="sjf", share_fresh=True),
    }
    print("oracle" if oracle else "predicted", "| table", "truth" if inputs.table is None else inputs.table.source)
    for name, pol in variants.items():
        r = simulate(inputs.trace, pol, inputs.truth, inputs.table, cluster=inputs.cluster, slo=cfg.max_slowdown,
                     name=name, observe=inputs.observe)
        m = r.metrics
        order = np.argsort(r.start)
        sched = " ".join(f"{inputs.trace.job_id[j]}:{r.start[j]:.0f}-{r.finish[j]:.0f}" for j in order)
        print(f"  {name:22s} avg {m['avg_jct']:7.2f} viol {m['slo_violations']} pre {m['preemptions']}  {sched}")
