"""Check that a change leaves a CPU campaign as it was, apart from what is measured: rows, tasks, pool, output.

A refactoring of how a campaign runs its tasks (profiles and pairs through the executor, the feature cache in
one place) must not change which rows exist, which tasks ran in which order, how many worker processes
started or were reused, the features that are counted rather than measured, or what the CLI prints. Run it
on the old code with ``--save``, on the new one with ``--compare``:

    .venv/bin/python benchmarks/check_campaign.py --save before.json
    .venv/bin/python benchmarks/check_campaign.py --compare before.json

Scenarios, in order, each in its own process, sharing one feature cache (so cache hits happen at the same
places): a warm ``sharewise pairs`` campaign of two tiny workloads and one that fails alone (its pairs are
recorded without a run); the same command again (a resume: nothing left to run); a ``--budget`` campaign
that profiles a new workload and measures the one pair its model picks; ``sharewise profile`` of two
workloads and a training command; a campaign with ``--isolation fresh`` (called through ``run_campaign``
with ``disturbance_retries=0``: a disturbed fresh repeat would start extra processes, and the CLI has no
option for that).

What is compared:

- every table's columns and dtypes, and every row's non-measured values (workload names, statuses, errors,
  keys, batch sizes, device names, counted features: FLOPs, parameter bytes, op counts...); measured columns
  (timings, throughputs, slowdowns, measured features) only by where they are NaN;
- the order of the writes (which table, which workloads, which status);
- the worker pools: every ``acquire`` in order (which workloads, how many workers started, reused, evicted
  since the last one) and the totals of the pools' counters;
- stdout and stderr of each CLI run with every number replaced by ``#`` and runs of spaces collapsed.

Windows, repeats and the idle wait are short (``--window 0.1 --repeats 2 --max-repeats 2 --idle-wait 0.5``):
this is a check of structure, not a measurement, and on a shared machine the idle check would otherwise wait.
"""

from __future__ import annotations

import argparse
import atexit
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
USER = FIXTURES / "user_workloads.py"
PY = shlex.quote(sys.executable)

QUICK = ["--size", "tiny", "--window", "0.1", "--repeats", "2", "--idle-wait", "0.5", "--timeout", "120"]
PAIRS_QUICK = [*QUICK, "--max-repeats", "2"]
CAMPAIGN = ",".join(f"{USER}:{c}" for c in ("TinyMLP", "TinyConv", "RaisesInStep"))
INFER = f"infer=cmd:{PY} {shlex.quote(str(FIXTURES / 'infer_loop.py'))}"

#: Columns of the tables whose values are measured (they vary from run to run): compared by NaN-ness only.
#: ``_file`` is the name of the file a row was read from, which carries the time of its write.
MEASURED = {"_file",
    "created_at", "iter_time_ms", "throughput", "samples_per_s", "iter_p50_ms", "iter_p95_ms", "iter_p99_ms",
    "cv", "profile_s", "probe_cv", "solo_a", "solo_b", "coloc_a", "coloc_b", "slowdown_a", "slowdown_b",
    "cv_a", "cv_b", "ci_a", "ci_b", "other_cpu_frac", "window_s", "steps_a", "steps_b", "pair_s", "pm_score",
}
#: Features that are counted, not measured: compared exactly. Every other ``f_*`` column is measured.
COUNTED = ("f_flops_per_step", "f_param_bytes", "f_activation_bytes", "f_arith_intensity", "f_batch_size",
           "f_ops_per_step_static", "f_opcount_", "f_opshare_", "f_device_mem_bytes")


def measured(column: str) -> bool:
    if column in MEASURED:
        return True
    return column.startswith("f_") and not column.startswith(COUNTED)


# -- the child: one scenario, instrumented -----------------------------------------------------------------------
def instrument(log_path: str) -> None:
    """Record every worker pool's acquires and counters and every dataset write; dump them at exit."""
    from sharewise.datasets.store import Dataset
    from sharewise.profiler.pool import WorkerPool
    from sharewise.profiler.probe import PROBE_SPEC
    from sharewise.profiler.workloads import workload_name

    pools: list = []
    events: list = []
    last: dict[int, tuple[int, int, int]] = {}

    def name(spec: str) -> str:
        return "(probe)" if spec == PROBE_SPEC else workload_name(spec)

    def delta(pool) -> list[int]:
        now = (pool.started, pool.reused, pool.evicted)
        before = last.get(id(pool), (0, 0, 0))
        last[id(pool)] = now
        return [a - b for a, b in zip(now, before, strict=True)]

    init, acquire = WorkerPool.__init__, WorkerPool.acquire

    def pool_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        pools.append(self)

    def pool_acquire(self, specs, assignments):
        evicted_before = delta(self)[2]  # evictions since the last event of this pool
        try:
            return acquire(self, specs, assignments)
        finally:
            started, reused, evicted = delta(self)
            events.append(["acquire", [name(s) for s in specs], started, reused, evicted_before + evicted])

    def writer(table, method):
        def write(self, df, *args, **kwargs):
            if table == "pairs":
                keys = [f"{a}|{b}:{s}" for a, b, s in zip(df["workload_a"], df["workload_b"], df["status"],
                                                            strict=True)]
            else:
                keys = list(df["workload"])
            events.append(["write", table, keys])
            return method(self, df, *args, **kwargs)

        return write

    WorkerPool.__init__, WorkerPool.acquire = pool_init, pool_acquire
    Dataset.write_pairs = writer("pairs", Dataset.write_pairs)
    Dataset.write_profiles = writer("profiles", Dataset.write_profiles)

    def dump():
        totals = {k: sum(getattr(p, k) for p in pools) for k in ("started", "reused", "evicted")}
        tail = [delta(p)[2] for p in pools]  # evictions after each pool's last acquire
        events.append(["evicted after the last acquire", sum(tail)])
        Path(log_path).write_text(json.dumps({"events": events, "pool_totals": totals}))

    atexit.register(dump)


def child(argv: list[str]) -> None:
    """``--child LOG cli ARGS...`` runs the CLI; ``--child LOG fresh OUT`` runs the fresh campaign."""
    log, kind, *rest = argv
    instrument(log)
    if kind == "cli":
        from sharewise.cli import main

        main(rest)
        return
    from sharewise.profiler.campaign import run_campaign
    from sharewise.profiler.config import RunConfig

    config = RunConfig(size="tiny", window_s=0.1, repeats=2, max_repeats=2, idle_wait_s=0.5, timeout_s=120,
                       isolation="fresh", disturbance_retries=0)
    specs = [f"{USER}:TinyMLP", f"{USER}:TinyEmbed"]
    summary = run_campaign(specs, config, rest[0])
    print(json.dumps({k: getattr(summary, k) for k in ("total", "measured", "skipped", "profiled", "by_status")}))
    print(json.dumps([list(f) for f in summary.failures]))


# -- the parent: run the scenarios, fingerprint what they left -------------------------------------------------
def seed_budget(folder: Path, model_path: Path) -> None:
    """Literal profiles and pairs of tiny_mlp and tiny_conv on this CPU, and a model trained on them."""
    import pandas as pd

    from sharewise.datasets.store import Dataset
    from sharewise.predictor import train_model
    from sharewise.profiler.device import cpu_device_name

    device = cpu_device_name()
    base = dict(family="f", batch_size=8, device_kind="cpu", device_name=device, mode="cpu", host="h", size="tiny",
                torch_version="2", created_at="2026-01-01T00:00:00", iter_time_ms=10.0, throughput=100.0)
    names = ["tiny_mlp", "tiny_conv"]
    profiles = pd.DataFrame([{**base, "workload": n, "f_flops_per_step": (i + 1) * 1e9, "f_busy_frac": 0.2 * (i + 1)}
                             for i, n in enumerate(names)])
    rows = []
    for a, b in (("tiny_mlp", "tiny_mlp"), ("tiny_mlp", "tiny_conv"), ("tiny_conv", "tiny_conv")):
        s = 1.2 + 0.1 * names.index(b)
        rows.append(dict(workload_a=a, workload_b=b, device_kind="cpu", device_name=device, mode="cpu", size="tiny",
                         solo_a=10.0, solo_b=10.0, coloc_a=10 / s, coloc_b=10 / s, slowdown_a=s, slowdown_b=s,
                         trials=3, cv_a=0.01, cv_b=0.01, status="ok", error="", created_at="2026-01-01T00:00:00",
                         batch_size_a=8, batch_size_b=8))
    pairs = pd.DataFrame(rows)
    ds = Dataset(folder)
    ds.write_profiles(profiles)
    ds.write_pairs(pairs)
    train_model(profiles, pairs, n_estimators=10, min_child_weight=1).save(model_path)


def scenarios(root: Path) -> list[tuple[str, list[str]]]:
    model = root / "model.json"
    return [
        ("pairs", ["cli", "pairs", "-w", CAMPAIGN, *PAIRS_QUICK, "--out", str(root / "campaign")]),
        ("pairs-resume", ["cli", "pairs", "-w", CAMPAIGN, *PAIRS_QUICK, "--out", str(root / "campaign")]),
        ("pairs-budget", ["cli", "pairs", "-w", f"{USER}:TinyMLP,{USER}:TinyEmbed", *PAIRS_QUICK, "--budget", "2",
                          "--model", str(model), "--out", str(root / "budget")]),
        ("profile", ["cli", "profile", f"{USER}:TinyMLP", f"{USER}:TinyEmbed", INFER, *QUICK,
                     "--out", str(root / "profiled")]),
        ("pairs-fresh", ["fresh", str(root / "fresh")]),
    ]


def normalize(text: str) -> str:
    """Output without numbers, noisy-profile warnings, table drawing, wraps or runs of spaces.

    Table widths follow the widths of the numbers in them, and titles and long lines wrap at those
    widths, so the text is compared as one run of words. A profile whose repeats disagree gets a warning:
    that depends on the machine's load, so those are dropped.
    """
    text = re.sub(r"warning: \S+: repeats disagree on .*?\(--repeats \d+\)", "", text, flags=re.S)
    text = re.sub(r"ETA \S+", "ETA ?", text)
    text = re.sub(r"\d+(\.\d+)?(e[+-]?\d+)?", "#", text)
    text = re.sub(r"[\u2500-\u257f]+", "|", text)  # box drawing
    return re.sub(r"\s+", " ", text).strip()


def _paths(text: str, root: Path) -> str:
    return text.replace(str(root), "<root>").replace(str(REPO), "<repo>").replace(sys.executable, "<python>")


def run_scenarios(root: Path) -> dict:
    env = {**os.environ, "SHAREWISE_CACHE_DIR": str(root / "cache"), "COLUMNS": "200"}
    seed_budget(root / "budget", root / "model.json")
    out = {}
    for label, args in scenarios(root):
        log = root / f"{label}.log.json"
        began = time.monotonic()
        proc = subprocess.run([sys.executable, __file__, "--child", str(log), *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=1800)
        print(f"  {label}: exit {proc.returncode} in {time.monotonic() - began:.0f} s", flush=True)
        record = json.loads(log.read_text()) if log.exists() else {}
        record["exit"] = proc.returncode
        record["stdout"] = _paths(proc.stdout, root)
        record["stderr"] = _paths(proc.stderr, root)
        out[label] = record
    for folder in ("campaign", "budget", "profiled", "fresh"):
        out[f"table {folder}"] = tables(root / folder)
    out["feature cache files"] = sorted(p.name.split("-bs")[0] + "-bs" + p.name.split("-bs")[1].split("-")[0]
                                        for p in (root / "cache" / "features").glob("*.json"))
    return out


def tables(folder: Path) -> dict:
    """Both tables of a dataset, every row and column as written (NaN as ``"nan"``), in file order."""
    from sharewise.datasets.store import Dataset

    ds = Dataset(folder)
    out = {}
    for table, df in (("profiles", ds.read_profiles(latest=False)), ("pairs", ds.read_pairs(latest=False))):
        rows = [{c: ("nan" if _isnan(v) else v) for c, v in row.items()}
                for row in df.reset_index(drop=True).to_dict("records")]
        out[table] = {"columns": {c: str(df[c].dtype) for c in df.columns}, "rows": rows}
    return json.loads(json.dumps(out, default=str))


def _isnan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


def fingerprint(result: dict) -> dict:
    """What must not change: measured cells reduced to ``value``/``nan``, rows sorted, output normalized."""
    out = {}
    for key, record in result.items():
        if key.startswith("table "):
            out[key] = {}
            for table, t in record.items():
                rows = [{c: (("nan" if v == "nan" else "value") if measured(c) else v) for c, v in row.items()}
                        for row in t["rows"]]
                out[key][table] = {"columns": t["columns"],
                                   "rows": sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))}
        elif isinstance(record, dict) and "exit" in record:
            out[key] = {**record, "stdout": normalize(record["stdout"]), "stderr": normalize(record["stderr"])}
        else:
            out[key] = record
    return out


def compare(before: dict, after: dict, path: str = "") -> list[str]:
    """Every difference between two fingerprints, as ``path: before -> after`` lines."""
    if isinstance(before, dict) and isinstance(after, dict):
        diffs = []
        for k in sorted(set(before) | set(after), key=str):
            if k not in after:
                diffs.append(f"{path}/{k}: only before")
            elif k not in before:
                diffs.append(f"{path}/{k}: only after")
            else:
                diffs.extend(compare(before[k], after[k], f"{path}/{k}"))
        return diffs
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [d for i, (b, a) in enumerate(zip(before, after, strict=True)) for d in compare(b, a, f"{path}[{i}]")]
    if before == after:
        return []
    if isinstance(before, str) and isinstance(after, str):
        at = next((i for i, (x, y) in enumerate(zip(before, after, strict=False)) if x != y),
                  min(len(before), len(after)))
        return [f"{path}: ...{before[max(0, at - 80):at + 120]!r} -> ...{after[max(0, at - 80):at + 120]!r}"]
    return [f"{path}: {json.dumps(before, default=str)[:300]} -> {json.dumps(after, default=str)[:300]}"]


def report(before: dict, after: dict) -> int:
    """Print the differences of two results' fingerprints and what was compared; return how many."""
    old, new = fingerprint(before), fingerprint(after)
    diffs = compare(old, new)
    for line in diffs:
        print(f"  {line}")
    events = sum(len(r["events"]) for r in new.values() if isinstance(r, dict) and "events" in r)
    rows = sum(len(t["rows"]) for k, r in new.items() if k.startswith("table ") for t in r.values())
    print(f"{len(diffs)} difference(s) over {sum(1 for r in new.values() if 'exit' in r)} runs, {events} acquires "
          f"and writes in order, {rows} rows")
    return len(diffs)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--save", help="Run the campaigns and write what they left to this JSON file.")
    what.add_argument("--compare", help="Run the campaigns and compare them with a saved file.")
    what.add_argument("--diff", nargs=2, metavar=("BEFORE", "AFTER"), help="Compare two saved files (no run).")
    parser.add_argument("--keep", action="store_true", help="Keep the datasets and logs (their folder is printed).")
    args = parser.parse_args()
    if args.diff:
        before, after = (json.loads(Path(p).read_text()) for p in args.diff)
        sys.exit(1 if report(before, after) else 0)
    root = Path(tempfile.mkdtemp(prefix="check-campaign-"))
    print(f"campaigns in {root}", flush=True)
    try:
        result = json.loads(json.dumps(run_scenarios(root), default=str))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if args.save:
        Path(args.save).write_text(json.dumps(result, indent=1))
        print(f"saved to {args.save}")
        return
    sys.exit(1 if report(json.loads(Path(args.compare).read_text()), result) else 0)


if __name__ == "__main__":
    main()
