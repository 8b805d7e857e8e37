"""Issue 41, 2026-12-05: the calls where ours found the cluster idle with jobs waiting, in the given suite cells, and
which GPUs it paired at once there (``share_fresh="idle"``). From the repository root:

    .venv/bin/python benchmarks/results/policy-suite-2026-12-05-fresh-joins/idle_calls.py "e13805/16 v100 (oracle)"
"""
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/

from bench_policy_suite import prepare as suite_cells  # noqa: E402

from sharewise.app.simulate import prepare  # noqa: E402
from sharewise.datasets.public import public_data_root  # noqa: E402
from sharewise.engine.interface import as_decision  # noqa: E402
from sharewise.engine.simulator import simulate  # noqa: E402
from sharewise.policy import get_policy  # noqa: E402

with tempfile.TemporaryDirectory() as work:
    cells = suite_cells(public_data_root(), Path(work), 512, True)
    for key in sys.argv[1:]:
        cell = next(c for c in cells if f"{c.name} ({c.view})" == key)
        cfg = cell.config()
        inp = prepare(cfg)
        ours = get_policy("sharewise")

        def policy(queue, cluster, table, now, key=key, inp=inp, ours=ours):
            out = ours(queue, cluster, table, now)
            if cluster.occupancy().sum() == 0 and len(queue) > 1:
                d = as_decision(out)
                gpus = [g for p in d.start for g in p.gpus]
                paired = sorted(g for g in set(gpus) if gpus.count(g) == 2)
                head = ", ".join(f"{inp.trace.job_id[j]} x{int(queue.gpus[i])}" for i, j in enumerate(queue.job[:6]))
                print(f"{key}: idle call at {now:.0f} s, {len(queue)} waiting ({head}), {len(d.start)} start, "
                      f"GPUs paired at once: {paired}")
            return out

        policy.preemptive = True
        simulate(inp.trace, policy, inp.truth, inp.table, cluster=inp.cluster, slo=cfg.max_slowdown, name=key,
                 observe=inp.observe)
