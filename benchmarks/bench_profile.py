"""Benchmark: wall time of `sharewise profile` per workload on the CPU with default settings (target <= 20 s, issue 12).

Each workload is profiled in a fresh CLI process twice, side by side: with a cold feature cache (features
computed) and then a warm one (features read from the cache), so the cost of feature extraction shows as a
ratio measured in the same run. Run on an idle machine:

    .venv/bin/python benchmarks/bench_profile.py [WORKLOAD ...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 20.0


def profile_once(workload: str, out: Path, cache: Path) -> float:
    env = {**os.environ, "SHAREWISE_CACHE_DIR": str(cache)}
    began = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "sharewise", "profile", workload, "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - began
    if proc.returncode != 0:
        raise SystemExit(f"profiling {workload} failed: {proc.stderr.strip()[-500:]}")
    return wall


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", metavar="WORKLOAD", help="zoo workloads to profile (default: all)")
    args = parser.parse_args(argv)

    from sharewise.datasets.store import Dataset
    from sharewise.profiler.workloads import REGISTRY

    names = args.workloads or sorted(REGISTRY)
    print(
        f"{'workload':16s} {'cold s':>8s} {'warm s':>8s} {'cold/target':>12s} {'features':>9s} "
        f"{'steps/s':>9s} {'CV':>6s}"
    )
    colds = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            cache = Path(tmp) / f"cache-{name}"
            cold = profile_once(name, Path(tmp) / "cold", cache)
            warm = profile_once(name, Path(tmp) / "warm", cache)
            row = Dataset(Path(tmp) / "cold").read_profiles().set_index("workload").loc[name]
            n_feat = sum(1 for c in row.index if c.startswith("f_") and row[c] == row[c])
            colds.append(cold)
            print(
                f"{name:16s} {cold:8.1f} {warm:8.1f} {cold / TARGET_S:12.2f} {n_feat:9d} "
                f"{row['throughput']:9.2f} {row['cv'] * 100:5.1f}%"
            )
    print(
        f"max cold {max(colds):.1f} s, mean {sum(colds) / len(colds):.1f} s; target {TARGET_S:.0f} s -> "
        f"{'OK' if max(colds) <= TARGET_S else 'OVER'}"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
