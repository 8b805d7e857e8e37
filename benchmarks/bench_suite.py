"""Benchmark: the test suite's and ``show``'s times against their targets, and zero failures under load.

Parts (each optional; by default ``show`` and the fast subset):

- ``show``: ``sharewise show reference`` in ``--show-runs`` fresh processes, wall and CPU time (target 1.5 s).
- ``demo``: ``sharewise demo`` end to end once (``--demo``), wall time and its closing verdict.
- ``fast``: ``pytest -m "not slow"`` once (target 120 s; zero failures).
- ``full``: the whole suite ``--full N`` times back to back (target 15 min each; zero failures).
- ``hog``: the whole suite once more beside a CPU hog, one busy-looping process per core (zero failures: a
  measurement test must skip, saying why, rather than fail).

Each pytest run's wall time, pass/fail/skip counts and skip reasons are printed in one table. Run it on an
idle machine: times measured next to other work say little (the hog run is the exception, by design).

    .venv/bin/python benchmarks/bench_suite.py [--show-runs 5] [--demo] [--fast] [--full 3] [--hog]
        [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGETS_S = {"show": 1.5, "fast": 120.0, "full": 15 * 60.0, "hog": None}


def _spin(stop) -> None:
    while not stop.is_set():
        pass


def time_show(runs: int) -> dict:
    """``sharewise show reference`` in fresh processes: wall and CPU seconds of each."""
    walls, cpus = [], []
    for _ in range(runs):
        before, began = os.times(), time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "sharewise", "show", "reference"], capture_output=True, text=True)
        walls.append(time.perf_counter() - began)
        after = os.times()
        cpus.append(after.children_user - before.children_user + after.children_system - before.children_system)
        if proc.returncode != 0:
            raise SystemExit(f"sharewise show failed: {proc.stderr[-500:]}")
    return {"wall_s": walls, "cpu_s": cpus}


def time_demo() -> dict:
    """``sharewise demo`` in a fresh process into a temporary folder: its wall time and its last lines."""
    with tempfile.TemporaryDirectory(prefix="sharewise-bench-demo-") as tmp:
        began = time.perf_counter()
        cmd = [sys.executable, "-m", "sharewise", "demo", "--out", str(Path(tmp) / "demo")]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - began
    if proc.returncode != 0:
        raise SystemExit(f"sharewise demo failed: {proc.stderr[-1000:]}")
    return {"wall_s": wall, "tail": proc.stdout.strip().splitlines()[-3:]}


def run_pytest(label: str, args: list[str]) -> dict:
    """Run pytest (``-rs`` so that skips say why); return its wall time, outcome counts and skip reasons."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args]
    began = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - began
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", tail)}
    skips = [line for line in proc.stdout.splitlines() if line.startswith("SKIPPED")]
    failures = [line for line in proc.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    print(f"  {label}: {wall:.0f} s, {tail}", flush=True)
    return {"label": label, "wall_s": wall, "summary": tail, "counts": counts, "skips": skips, "failures": failures,
            "returncode": proc.returncode}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show-runs", type=int, default=5, help="fresh 'sharewise show' processes (0: none)")
    parser.add_argument("--demo", action="store_true", help="time 'sharewise demo' once")
    parser.add_argument("--fast", action="store_true", help="time the fast subset (default when nothing else)")
    parser.add_argument("--full", type=int, default=0, help="run the whole suite N times back to back")
    parser.add_argument("--hog", action="store_true", help="run the whole suite once beside a CPU hog")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    fast = args.fast or not (args.full or args.hog or args.demo)
    out: dict = {"runs": []}
    if args.show_runs:
        show = out["show"] = time_show(args.show_runs)
        print(
            f"sharewise show reference, {args.show_runs} fresh processes: wall min {min(show['wall_s']):.2f} s, "
            f"median {statistics.median(show['wall_s']):.2f} s; CPU min {min(show['cpu_s']):.2f} s "
            f"(target {TARGETS_S['show']} s)"
        )
    if args.demo:
        demo = out["demo"] = time_demo()
        print(f"sharewise demo: {demo['wall_s'] / 60:.1f} min; it ends: " + " / ".join(demo["tail"]))
    print("test runs:")
    if fast:
        out["runs"].append(run_pytest("fast", ["-m", "not slow"]))
    for k in range(args.full):
        out["runs"].append(run_pytest(f"full {k + 1}", []))
    if args.hog:
        stop = mp.Event()
        hogs = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(os.cpu_count() or 1)]
        for h in hogs:
            h.start()
        try:
            out["runs"].append(run_pytest("hog", []))
        finally:
            stop.set()
            for h in hogs:
                h.join(5)
                if h.is_alive():
                    h.kill()
    print(f"\n{'run':8s} {'wall':>9s} {'target':>8s} {'passed':>7s} {'failed':>7s} {'skipped':>8s}")
    status = 0
    for r in out["runs"]:
        kind = r["label"].split()[0]
        target = TARGETS_S[kind]
        c = r["counts"]
        failed = c.get("failed", 0) + c.get("error", 0) + c.get("errors", 0)
        status |= int(failed > 0 or r["returncode"] not in (0, 5))
        verdict = "" if target is None else ("ok" if r["wall_s"] <= target else "OVER")
        print(
            f"{r['label']:8s} {r['wall_s'] / 60:6.1f} min {'' if target is None else f'{target / 60:.0f} min':>8s} "
            f"{c.get('passed', 0):7d} {failed:7d} {c.get('skipped', 0):8d}  {verdict}"
        )
        for line in r["failures"]:
            print(f"    {line}")
        for line in r["skips"]:
            print(f"    {line[:300]}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
