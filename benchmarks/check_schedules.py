"""Check that a change leaves every schedule as it was: each job's start and finish under every policy (and the
suite's ablations) in every cell of the policy suite, fingerprinted, saved before and compared after.

A refactoring (one scheduling loop for the simulator and physical runs, the policy laid out by mechanism)
must not move a single job. Run it on the old code with ``--save``, on the new one with ``--compare``; the
comparison names every (cell, policy) whose schedule differs, with the largest change of a finish time and
the number of jobs whose placement order changed, so a float-order change can be told from a real one.

    .venv/bin/python benchmarks/check_schedules.py --save before.json [--skip-philly] [--only SUBSTRING]
    .venv/bin/python benchmarks/check_schedules.py --compare before.json [--skip-philly] [--only SUBSTRING]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from sharewise.datasets.public import public_data_root

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_policy_suite import NO_PREEMPT, NO_RESCUE, NO_SLO, OURS, Cell, prepare  # noqa: E402

ABLATIONS = ((NO_PREEMPT, {"preempt": False}), (NO_RESCUE, {"rescue": False}),
             (NO_SLO, {"preempt": False, "max_slowdown": math.inf}))


def fingerprint(start: np.ndarray, finish: np.ndarray) -> dict:
    """Hash of the exact start and finish times, plus the arrays rounded to 1 ms for explaining a difference."""
    digest = hashlib.sha256(np.ascontiguousarray(start).tobytes() + np.ascontiguousarray(finish).tobytes())
    return {"sha256": digest.hexdigest(), "start": np.round(start, 3).tolist(), "finish": np.round(finish, 3).tolist()}


def run_cell(cell: Cell) -> dict:
    """Every registered policy and the suite's ablations on one cell: a fingerprint each."""
    from sharewise.app.simulate import prepare as prepare_inputs
    from sharewise.app.simulate import run_policy
    from sharewise.engine.simulator import simulate
    from sharewise.policy import event_driven_names, get_policy

    config = cell.config()
    inputs = prepare_inputs(config)
    out = {}
    for name in event_driven_names():  # as the suite: PAL's round-based artifact policies run in bench_pal_setting.py
        r = run_policy(name, inputs, config)
        out[name] = fingerprint(r.start, r.finish)
    for label, knobs in ABLATIONS:
        r = simulate(inputs.trace, functools.partial(get_policy(OURS), **knobs), inputs.truth, inputs.table,
                     cluster=inputs.cluster, slo=config.max_slowdown, name=label, observe=inputs.observe)
        out[label] = fingerprint(r.start, r.finish)
    return out


def compare(before: dict, after: dict) -> int:
    """Print every difference; return how many (cell, policy) schedules differ."""
    differ = 0
    for cell, policies in after.items():
        if cell not in before:
            print(f"  {cell}: not in the saved file")
            continue
        for name, fp in policies.items():
            old = before[cell].get(name)
            if old is None:
                print(f"  {cell} / {name}: not in the saved file")
                continue
            if old["sha256"] == fp["sha256"]:
                continue
            differ += 1
            f0, f1 = np.array(old["finish"], dtype=float), np.array(fp["finish"], dtype=float)
            s0, s1 = np.array(old["start"], dtype=float), np.array(fp["start"], dtype=float)
            moved = int(np.sum(np.abs(s1 - s0) > 1e-3) + 0)
            print(f"  {cell} / {name}: DIFFERENT: largest finish change {np.nanmax(np.abs(f1 - f0)):.3f} s, "
                  f"{moved} job(s) start at another time (rounded to 1 ms)")
    return differ


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=None, help="Default: data/ ($SHAREWISE_DATA).")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", type=Path)
    group.add_argument("--compare", type=Path)
    parser.add_argument("--philly-gpus", type=int, default=512)
    parser.add_argument("--skip-philly", action="store_true")
    parser.add_argument("--only", default=None, help="Only cells whose name contains this.")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    args.data_root = public_data_root(args.data_root)
    if not (args.data_root / "gavel").is_dir():
        raise SystemExit(f"public data not found under {args.data_root}; pass --data-root")
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sharewise-schedules-") as tmp:
        cells = prepare(args.data_root, Path(tmp), args.philly_gpus, args.skip_philly)
        if args.only:
            cells = [c for c in cells if args.only in c.name]
        if args.workers > 1:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=args.workers) as pool:
                results = list(pool.map(run_cell, cells))
        else:
            results = [run_cell(c) for c in cells]
    found = {f"{c.name} ({c.view})": r for c, r in zip(cells, results, strict=True)}
    print(f"{len(found)} cells, {sum(len(r) for r in found.values())} schedules in {time.perf_counter() - began:.0f} s")
    if args.save:
        args.save.write_text(json.dumps(found))
        print(f"saved to {args.save}")
        return 0
    differ = compare(json.loads(args.compare.read_text()), found)
    print("every schedule identical" if not differ else f"{differ} schedule(s) differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
