"""The GPU check's time plan: what each stage of scripts/gpu_check.sh will measure and how long it should take.

Usage (the script calls it with its settings in the environment; see gpu_check.sh's header):

    python scripts/gpu_plan.py DATASET [--measured RUN_DIR]

Counts come from DATASET (what it lacks on PLAN_DEVICE, default the device of DEVICE, in each mode), costs per
step from one of two sources:

- the logs of the last H200 window (``H200``, benchmarks/results/h200-2026-12-04: the rows' ``pair_s`` and
  ``profile_s``, the stages' seconds), for the plan of a GPU window;
- with ``--measured RUN_DIR``, a finished run of this script (RUN_DIR is its unpacked ``gpu-check`` folder):
  the median ``pair_s`` and ``profile_s`` of the rows it wrote and the seconds of its other stages, so a CPU
  dry run prints the plan its own measured costs give.

The plan is printed as one table: stage, what it does, planned seconds, the stage's budget. A stage planned
above its budget is marked: it would be cut, and a rerun resumes it.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

#: Windows one repeat of a pair measures when neither solo comes from the worker's recent pairs.
WINDOWS_PER_REPEAT = 3


@dataclass(frozen=True)
class Costs:
    """Seconds per step of the GPU check (the source says where each number comes from)."""

    source: str
    start_s: float  # one worker ready: interpreter, the framework's import, the device's context, warm-up
    start_more_s: float  # each further worker started together with it (``LocalExecutor.prepare``)
    window_cost: float  # wall seconds per second of measurement window (messaging, the shared start, the tail)
    pair_overhead_s: float  # a warm pair beyond its windows: the re-warm, the idle check, the write
    profile_s: float  # a profile beyond its worker's start: the features, the probe's and the solo windows
    profile_bare_s: float  # the same with cached features and no probe (mps)
    smoke_base_s: float  # the smoke test's interpreter, torch import and device context
    smoke_each_s: float  # each smoke workload built and stepped
    solo_reused: float  # share of a pair's solo windows taken from the worker's recent pairs (``SoloBank``)
    measured_pair_s: float | None = None  # a measured run: the median pair, starts included (replaces the model)
    measured_stage_s: dict | None = None  # a measured run: the seconds of its other stages


#: The 2026-12-04 H200 window (benchmarks/results/h200-2026-12-04, the archive's rows and logs): cold pairs
#: (one new worker each) took 11.5-16.7 s, warm ones 4.1-4.6 s, so a worker's start is about 8.5 s; mps
#: profiles (a start and two solo windows, cached features, no probe) 8.4-11.3 s, 1.5 s beyond the start; a
#: warm pair of 3 repeats of three 0.3 s windows 4.1-4.6 s, so a window costs 1.3 times its length beside
#: 0.8 s per pair; timeslice profiles (features traced, the probe) 11.7-17.0 s, 6.5 s beyond the start; the
#: smoke stage 17 s for four workloads. Two numbers are not measured yet: workers started together (1 s each
#: beyond the first, the device contexts made one after another) and the share of solo windows reused (half,
#: for the pairs' order of ``sharewise pairs``: a workload's pairs follow one another).
H200 = Costs("the 2026-12-04 H200 window's logs", start_s=8.5, start_more_s=1.0, window_cost=1.3,
             pair_overhead_s=0.8, profile_s=6.5, profile_bare_s=1.5, smoke_base_s=9.0, smoke_each_s=2.0,
             solo_reused=0.5)


@dataclass
class Settings:
    """The script's settings, read from the environment it exports."""

    workloads: list[str]
    modes: list[str]
    stages: list[str]
    profile_mode: str
    device: str
    plan_device: str | None
    size: str
    window: float
    repeats: int
    max_repeats: int
    extend: int
    smoke_workloads: int
    phys_jobs: int
    phys_mean_s: float
    phys_workloads: int
    phys_policies: int
    phys_calibrate: float
    limits: dict[str, int]
    total_limit: int
    split_workloads: list[str] = ()
    splits: list[str] = ()

    @classmethod
    def from_env(cls, env=os.environ) -> Settings:
        def words(name, default=""):
            return env.get(name, default).replace(",", " ").split()

        modes = words("MODES", "timeslice mps")
        limits = {name: int(env[f"{name.upper().replace('-', '_')}_LIMIT"])
                  for name in ("smoke", "tests", "profile", "physical", "command", "mps-split")
                  if f"{name.upper().replace('-', '_')}_LIMIT" in env}
        for m in modes:
            var = f"LIMIT_{m.upper().replace('-', '_')}"
            if var in env:
                limits[f"pairs-{m}"] = int(env[var])
        return cls(
            workloads=words("WORKLOADS"), modes=modes, stages=words("STAGES"),
            profile_mode=env.get("PROFILE_MODE", modes[0]), device=env.get("DEVICE", "cuda:0"),
            plan_device=env.get("PLAN_DEVICE") or None, size=env.get("SIZE", "full"),
            window=float(env.get("WINDOW", 0.3)), repeats=int(env.get("REPEATS", 3)),
            max_repeats=int(env.get("MAX_REPEATS", 6)), extend=int(env.get("EXTEND", 1)),
            smoke_workloads=len(words("SMOKE_WORKLOADS")), phys_jobs=int(env.get("PHYS_JOBS", 6)),
            phys_mean_s=(float(env.get("PHYS_MIN_S", 3)) + float(env.get("PHYS_MAX_S", 8))) / 2,
            phys_workloads=len(words("PHYS_WORKLOADS")), phys_policies=len(words("PHYS_POLICIES")),
            phys_calibrate=float(env.get("PHYS_CALIBRATE", 2)), limits=limits,
            total_limit=int(env.get("TOTAL_LIMIT", 480)),
            split_workloads=words("SPLIT_WORKLOADS"),
            splits=words("SPLITS") or (["70:30"] if env.get("DEVICE", "cuda:0") == "cpu" else
                                       ["30:70", "50:50", "70:30"]),
        )


def missing(dataset: Path, s: Settings) -> tuple[str, dict[str, list[str]], dict[str, list[tuple[str, str]]]]:
    """The device planned for, and per mode the workloads without a profile and the pairs without a row there."""
    from sharewise.datasets.store import Dataset
    from sharewise.profiler.campaign import all_pairs
    from sharewise.profiler.device import device_name

    name = s.plan_device or device_name(s.device)
    ds = Dataset(dataset)
    profiles = ds.read_profiles() if ds.exists() else None
    pairs = ds.read_pairs() if ds.exists() else None
    lack_profiles, lack_pairs = {}, {}
    for mode in dict.fromkeys([s.profile_mode, *s.modes]):
        have = set()
        if profiles is not None and len(profiles):
            p = profiles[(profiles["device_name"] == name) & (profiles["mode"] == mode) & (profiles["size"] == s.size)]
            have = set(p["workload"])
        lack_profiles[mode] = [w for w in s.workloads if w not in have]
        done = set()
        if pairs is not None and len(pairs):
            q = pairs[(pairs["device_name"] == name) & (pairs["mode"] == mode) & (pairs["size"] == s.size)]
            done = {frozenset((a, b)) for a, b in zip(q["workload_a"], q["workload_b"], strict=True)}
        lack_pairs[mode] = [(s.workloads[i], s.workloads[j]) for i, j in all_pairs(s.workloads)
                            if frozenset((s.workloads[i], s.workloads[j])) not in done]
    return name, lack_profiles, lack_pairs


def pair_seconds(c: Costs, s: Settings) -> float:
    """A warm pair: its repeats (half-way between the planned minimum and maximum) of windows, some solos reused."""
    if c.measured_pair_s is not None:
        return c.measured_pair_s
    repeats = (s.repeats + s.max_repeats) / 2
    windows = 1 + (WINDOWS_PER_REPEAT - 1) * (1 - c.solo_reused)
    return c.pair_overhead_s + repeats * windows * s.window * c.window_cost


def start_round(c: Costs, n: int) -> float:
    """Workers started together."""
    return 0.0 if n == 0 else c.start_s + c.start_more_s * (n - 1)


def selected(s: Settings, stage: str) -> bool:
    if not s.stages:
        return True
    if stage.startswith("pairs-"):
        return bool({stage[6:], "pairs"} & set(s.stages))
    return stage in s.stages


def plan(dataset: Path, s: Settings, c: Costs) -> tuple[str, list[tuple[str, str, float]]]:
    """The device planned for, and ``[(stage, what, planned seconds)]`` in the script's order."""
    device, lack_profiles, lack_pairs = missing(dataset, s)
    measured = c.measured_stage_s or {}
    rows = []
    n_smoke = min(s.smoke_workloads or 2, len(s.workloads))
    rows.append(("smoke", f"{n_smoke} workloads stepped",
                 measured.get("smoke", c.smoke_base_s + c.smoke_each_s * n_smoke)))
    # The first mode's campaign profiles what it lacks in its own workers, which its pairs then use (the solo
    # rule); the profile stage runs alone only when that campaign is not selected.
    own = selected(s, f"pairs-{s.profile_mode}") and s.profile_mode in s.modes
    todo = lack_profiles[s.profile_mode]
    rows.append(("profile", f"{len(todo)} profiles" + (f" (in pairs-{s.profile_mode})" if own else ""),
                 0.0 if own or not todo else start_round(c, len(todo) + 1) + len(todo) * c.profile_s))
    each = pair_seconds(c, s)
    for mode in s.modes:
        pairs = lack_pairs[mode]
        profiled = lack_profiles[mode] if mode != s.profile_mode or own else []
        probe = mode == s.profile_mode
        profile_s = len(profiled) * (c.profile_s if probe else c.profile_bare_s)
        seconds = start_round(c, len(profiled) + (1 if profiled and probe else 0)) + profile_s
        # Workers the pairs need that no profile left warm: one per workload, a second per self-pair.
        need = {w for pair in pairs for w in pair} - set(profiled)
        starts = len(need) + sum(1 for a, b in pairs if a == b)
        seconds += start_round(c, starts) + len(pairs) * each
        # Extensions take the rest of the stage's budget (--time-budget), never more: they are not planned.
        what = (f"{len(profiled)} profiles, " if profiled else "") + (
            f"{len(pairs)} pairs at {each:.1f} s, {starts} workers started together"
            + ("; extensions in the rest of its budget" if s.extend else ""))
        rows.append((f"pairs-{mode}", what, seconds))
    # A physical run: each workload calibrated alone, then each policy's trace, every job a new process.
    calibrate = s.phys_workloads * (c.start_s + s.phys_calibrate)
    exclusive = s.phys_jobs * (c.start_s + s.phys_mean_s)
    physical = calibrate + (exclusive if s.phys_policies else 0) + max(0, s.phys_policies - 1) * 0.75 * exclusive
    rows.append(("physical", f"{s.phys_workloads} workloads calibrated, {s.phys_jobs} jobs x {s.phys_policies} "
                 "policies, --compare-sim", measured.get("physical", physical)))
    # The split stage: SPLIT_WORKLOADS' pairs at SPLITS. Under MPS each split starts its pairs' workers anew (MPS
    # reads the thread percentage at start); the solos run on warm workers. On the CPU the quota is live.
    split_wl = s.split_workloads or s.workloads[:2]
    n_pairs = len(split_wl) * (len(split_wl) + 1) // 2
    per_split = (0.0 if s.device == "cpu" else start_round(c, len(split_wl) + 1)) + n_pairs * each
    rows.append(("mps-split", f"{n_pairs} pairs x {len(s.splits)} splits ({', '.join(s.splits)}) under the knob",
                 measured.get("mps-split", len(s.splits) * per_split)))
    command = start_round(c, 1) + c.profile_s + start_round(c, 3) + 2 * c.profile_s + 3 * each
    rows.append(("command", "a command and its class profiled, 3 pairs", measured.get("command", command)))
    rows.append(("tests", "the GPU tests (run --device cuda left to the physical stage)",
                 measured.get("tests", float(s.limits.get("tests", 45)))))
    return device, [r for r in rows if selected(s, r[0])]


def measured_costs(run: Path, s: Settings) -> Costs:
    """Costs from a finished run of the script: its rows' median ``pair_s`` and ``profile_s``, its stages' seconds."""
    import numpy as np

    from sharewise.datasets.store import Dataset

    ds = Dataset(run / "dataset")
    pair_s = ds.read_pairs()["pair_s"].dropna() if ds.exists() else []
    profile_s = ds.read_profiles().get("profile_s") if ds.exists() else None
    stages = {}
    summary = run / "summary.txt"
    if summary.is_file():
        for line in summary.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[1] == "ok" and parts[2].endswith("s") and parts[2][:-1].isdigit():
                stages[parts[0]] = float(parts[2][:-1])
    known = profile_s is not None and profile_s.notna().any()
    profile = float(np.median(profile_s.dropna())) if known else H200.profile_s
    return replace(H200, source=f"the run in {run}", start_s=0.0, start_more_s=0.0, profile_s=profile,
                   measured_pair_s=float(np.median(pair_s)) if len(pair_s) else None, measured_stage_s=stages)


def render(device: str, rows: list[tuple[str, str, float]], s: Settings, c: Costs) -> str:
    lines = [f"time plan for {device} (costs per step from {c.source})",
             f"{'stage':<16} {'planned':>8} {'budget':>7}  what"]
    total = 0.0
    for stage, what, seconds in rows:
        budget = s.limits.get(stage)
        over = " (over its budget: cut, a rerun resumes it)" if budget is not None and seconds > budget else ""
        lines.append(f"{stage:<16} {seconds:>7.0f}s {'-' if budget is None else f'{budget}s':>7}  {what}{over}")
        total += seconds
    fits = "within" if total <= s.total_limit else "beyond (the tail stages are left for a rerun)"
    lines.append(f"{'total':<16} {total:>7.0f}s {s.total_limit:>6}s  {fits} TOTAL_LIMIT")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path, help="the dataset the run starts from (seeded or resumed)")
    parser.add_argument("--measured", type=Path, help="a finished run's gpu-check folder: plan with its costs")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    costs = measured_costs(args.measured, settings) if args.measured else H200
    print(render(*plan(args.dataset, settings, costs), settings, costs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
