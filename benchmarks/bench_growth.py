"""Benchmark: the growth table, the cost of every user-scaled path at n and 10n side by side (limit 20x).

Runs the growth checks of ``tests/project/test_growth.py`` (CI runs them too, in the fast subset) and prints what each
measured: CPU time on one thread at ``n`` and ``10 n``, best of interleaved repeats, their ratio, and the
foreign CPU load of its window. Linear work grows about 10x, an O(n^2) or O(jobs x GPUs) path about 100x;
a check fails above 20x (``tests/loadguard.py`` says when it retries or skips instead).

    .venv/bin/python benchmarks/bench_growth.py [-k EXPRESSION] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIMIT = 20.0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default=None, help="pytest -k expression selecting checks")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sharewise-bench-growth-") as tmp:
        report = Path(tmp) / "growth.jsonl"
        env = {**os.environ, "SHAREWISE_GROWTH_REPORT": str(report)}
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               str(REPO / "tests" / "project" / "test_growth.py")]
        if args.k:
            cmd += ["-k", args.k]
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        rows = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    print(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-2000:])
    print(f"\n{'path':38s} {'n':>7s} {'10 n':>7s} {'unit':28s} {'CPU ms n':>9s} {'CPU ms 10n':>11s} {'ratio':>6s} "
          f"{'load':>5s}")
    for r in rows:  # a check that retried shows each attempt
        print(
            f"{r['path']:38s} {r['n']:7d} {r['big']:7d} {r['unit'][:28]:28s} {r['small_cpu_s'] * 1e3:9.1f} "
            f"{r['big_cpu_s'] * 1e3:11.1f} {r['ratio']:5.1f}x {r['foreign_share']:5.2f}"
            + ("" if r["ratio"] <= LIMIT else "  OVER")
        )
    print(f"\nlimit {LIMIT:.0f}x; 'load' = foreign CPU share of the machine during the check (steal included)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
