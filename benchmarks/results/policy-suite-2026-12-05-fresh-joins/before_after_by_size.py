import sys, tempfile, json
from pathlib import Path
import numpy as np
sys.path.insert(0, "benchmarks")
from bench_policy_suite import prepare as suite_cells
from sharewise.app.simulate import SimulationConfig, prepare
from sharewise.engine.simulator import simulate
from sharewise.policy import get_policy
out = {}
with tempfile.TemporaryDirectory() as work:
    cells = suite_cells(Path('/work/main/data'), Path(work), 512, True)
    for key in sys.argv[2:]:
        cell = next(c for c in cells if f"{c.name} ({c.view})" == key)
        cfg = SimulationConfig(trace=cell.trace, data=cell.data, device_name=cell.device, n_gpus=cell.n_gpus,
                               gpus_per_node=cell.gpus_per_node, oracle=cell.view == "oracle",
                               predictions=cell.predictions, speed_sigma=cell.speed_sigma,
                               cross_node_slowdown=cell.cross_node_slowdown, group_by="family")
        inp = prepare(cfg)
        r = simulate(inp.trace, get_policy("sharewise"), inp.truth, inp.table, cluster=inp.cluster, slo=cfg.max_slowdown, name="x", observe=inp.observe)
        out[key] = {"jct": r.jct.tolist(), "gpus": np.asarray(inp.trace.gpus).tolist(), "rs": r.realized_slowdown.tolist(), "ids": list(inp.trace.job_id)}
json.dump(out, open(sys.argv[1], "w"))
