"""Analysis: the calls where ours found the cluster idle with jobs waiting, in the given policy-suite cells.

For each such call: the time, the waiting jobs (the first six, with their GPU counts), how many jobs the call
starts, and which GPUs it paired at once (``share_fresh="idle"``, issue 41). The cells are the policy suite's
(``bench_policy_suite.prepare``, Philly left out), named as the suite prints them; preparing them takes the suite's
out-of-fold predictions. Deterministic, no timing. Its output on 2026-12-05:
``results/policy-suite-2026-12-05-fresh-joins/idle_calls.txt``. From the repository root:

    .venv/bin/python benchmarks/idle_calls.py "e13805/16 v100 (oracle)" "e13805/16 v100 (predicted)"
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from sharewise.app.simulate import prepare
from sharewise.datasets.public import public_data_root
from sharewise.engine.policy_types import as_decision
from sharewise.engine.simulator import simulate
from sharewise.policy import get_policy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_policy_suite import prepare as suite_cells  # noqa: E402


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cells", nargs="+", metavar="CELL", help='a suite cell, e.g. "e13805/16 v100 (oracle)"')
    parser.add_argument("--data-root", type=Path, default=None, help="Default: data/ ($SHAREWISE_DATA).")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        cells = suite_cells(public_data_root(args.data_root), Path(work), 512, True)
        names = {f"{c.name} ({c.view})": c for c in cells}
        unknown = [key for key in args.cells if key not in names]
        if unknown:
            raise SystemExit(f"unknown cell(s) {unknown}; the cells are: {sorted(names)}")
        for key in args.cells:
            cfg = names[key].config()
            inp = prepare(cfg)
            ours = get_policy("sharewise")

            def policy(queue, cluster, table, now, key=key, inp=inp, ours=ours):
                out = ours(queue, cluster, table, now)
                if cluster.occupancy().sum() == 0 and len(queue) > 1:
                    d = as_decision(out)
                    gpus = [g for p in d.start for g in p.gpus]
                    paired = sorted(g for g in set(gpus) if gpus.count(g) == 2)
                    head = ", ".join(f"{inp.trace.job_id[j]} x{int(queue.gpus[i])}"
                                     for i, j in enumerate(queue.job[:6]))
                    print(f"{key}: idle call at {now:.0f} s, {len(queue)} waiting ({head}), {len(d.start)} start, "
                          f"GPUs paired at once: {paired}")
                return out

            policy.preemptive = True
            simulate(inp.trace, policy, inp.truth, inp.table, cluster=inp.cluster, slo=cfg.max_slowdown, name=key,
                     observe=inp.observe)


if __name__ == "__main__":
    main(sys.argv[1:])
