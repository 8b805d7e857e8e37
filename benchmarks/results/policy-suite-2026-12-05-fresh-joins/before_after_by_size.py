"""Issue 41: ours' per-job JCTs in suite cells, written to OUT.json, to compare two commits job by job. Run from the
root of a checkout of each commit (the public data from $SHAREWISE_DATA, default data/). It builds each cell's
configuration itself, not with ``Cell.config``, which the commit before the issue does not have:

    python before_after_by_size.py OUT.json "e13805/16 p100 (predicted)" ...
"""
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, "benchmarks")
from bench_policy_suite import prepare as suite_cells

from sharewise.app.simulate import SimulationConfig, prepare
from sharewise.engine.simulator import simulate
from sharewise.policy import get_policy

out = {}
with tempfile.TemporaryDirectory() as work:
    cells = suite_cells(Path(os.environ.get('SHAREWISE_DATA', 'data')), Path(work), 512, True)
    for key in sys.argv[2:]:
        cell = next(c for c in cells if f"{c.name} ({c.view})" == key)
        cfg = SimulationConfig(trace=cell.trace, data=cell.data, device_name=cell.device, n_gpus=cell.n_gpus,
                               gpus_per_node=cell.gpus_per_node, oracle=cell.view == "oracle",
                               predictions=cell.predictions, speed_sigma=cell.speed_sigma,
                               cross_node_slowdown=cell.cross_node_slowdown, group_by="family")
        inp = prepare(cfg)
        r = simulate(inp.trace, get_policy("sharewise"), inp.truth, inp.table, cluster=inp.cluster,
                     slo=cfg.max_slowdown, name="sharewise", observe=inp.observe)
        out[key] = {"jct": r.jct.tolist(), "gpus": np.asarray(inp.trace.gpus).tolist(),
                    "rs": r.realized_slowdown.tolist(), "ids": list(inp.trace.job_id)}
json.dump(out, open(sys.argv[1], "w"))
