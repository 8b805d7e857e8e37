"""One pair run: repeats until each slowdown is known to within ``ci_target``, faults, the pairs-table row.

The slowdown's denominator is the job's solo with the host share it has next to its partner (the solo rule of
``solo``): a pair's solo windows run in the same warm processes, on the same threads, as its shared windows, and
a profile's solo is measured on that share too, so a profile's throughput and a pair's ``solo_a`` are one
quantity. A pair whose half-widths still miss ``ci_target`` after ``max_repeats`` is recorded with
``precision="missed"``; the campaign extends it (``extension_config``) when time allows.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from sharewise.datasets.pair_row import pair_row
from sharewise.profiler.config import RunConfig, device_kind
from sharewise.profiler.hostload import wait_until_idle
from sharewise.profiler.modes import CoreAssignment, placements
from sharewise.profiler.pool import WorkerPool
from sharewise.profiler.session import RepeatResult, WorkerFailed, WorkerProcess, run_round

#: Steps (and at least this many seconds) a warm worker runs, next to its partner, before a pair's first
#: window: it waited idle since its last run, and its first steps after a wait pay for cold caches.
REWARM_STEPS = 3
REWARM_S = 0.3


@dataclass(frozen=True)
class PairTask:
    """A pair to measure: two workload specs and the names they are recorded under (a value type)."""

    spec_a: str
    spec_b: str
    name_a: str
    name_b: str
    # 0: the planned repeats; k > 0: the k-th extension of a pair that missed its target (``extension_config``).
    extend: int = 0


def cv(values: list[float]) -> float:
    """Coefficient of variation (sample std / mean); 0.0 for fewer than two values.

    >>> round(cv([1.0, 1.1, 0.9]), 3)
    0.1
    """
    if len(values) < 2:
        return 0.0
    arr = np.asarray(values, dtype=float)
    return float(arr.std(ddof=1) / arr.mean())


def ci_halfwidth(values: list[float], level: float = 0.95) -> float:
    """Half-width of the ``level`` confidence interval of the mean of ``values``, relative to the mean.

    Student's t interval over independent repeats: ``t(level, n - 1) * sd / sqrt(n) / mean``; infinite for
    fewer than two values (nothing is known about the spread yet).

    >>> round(ci_halfwidth([1.0, 1.1, 0.9]), 4)
    0.2484
    >>> ci_halfwidth([1.5])
    inf
    """
    if len(values) < 2:
        return math.inf
    from scipy.stats import t

    quantile = float(t.ppf(0.5 + level / 2, len(values) - 1))
    return quantile * cv(values) / math.sqrt(len(values))


def aggregate(task: PairTask, repeats: list[RepeatResult]) -> dict:
    """Combine repeats into measured numbers: mean throughputs, mean per-repeat slowdown, CV, half-width (pure)."""
    slow = [[r.solo[i].throughput / r.coloc[i].throughput for r in repeats] for i in (0, 1)]
    return {
        "solo_a": float(np.mean([r.solo[0].throughput for r in repeats])),
        "solo_b": float(np.mean([r.solo[1].throughput for r in repeats])),
        "coloc_a": float(np.mean([r.coloc[0].throughput for r in repeats])),
        "coloc_b": float(np.mean([r.coloc[1].throughput for r in repeats])),
        "slowdown_a": float(np.mean(slow[0])),
        "slowdown_b": float(np.mean(slow[1])),
        "cv_a": cv(slow[0]),
        "cv_b": cv(slow[1]),
        # Stored NaN rather than infinite for a single repeat: "not known", as a CV of imported data is.
        "ci_a": _finite_or_nan(ci_halfwidth(slow[0])),
        "ci_b": _finite_or_nan(ci_halfwidth(slow[1])),
        "trials": len(repeats),
        "other_cpu_frac": float(np.mean([r.foreign_cpu for r in repeats])),
        "window_s": float(np.mean([r.window_s for r in repeats])),
        "steps_a": int(min(r.coloc[0].steps for r in repeats)),
        "steps_b": int(min(r.coloc[1].steps for r in repeats)),
    }


def _finite_or_nan(value: float) -> float:
    return value if math.isfinite(value) else math.nan


def precise_enough(repeats: list[RepeatResult], config: RunConfig) -> bool:
    """The sequential stopping rule: at least ``repeats`` repeats, then both half-widths within ``ci_target``
    (or ``max_repeats`` reached)."""
    if len(repeats) < config.repeats:
        return False
    if len(repeats) >= config.max_repeats:
        return True
    slow = [[r.solo[i].throughput / r.coloc[i].throughput for r in repeats] for i in (0, 1)]
    return max(ci_halfwidth(slow[0]), ci_halfwidth(slow[1])) <= config.ci_target


def extension_config(config: RunConfig, round_: int) -> RunConfig:
    """The settings of a pair's ``round_``-th extension: windows ``2 ** round_`` times as long (a longer window
    averages over more of the device's time slices and the host's jitter) and up to ``max_repeats`` more repeats
    per round, on top of the repeats it has (``measure_pair``'s ``earlier``).

    >>> c = extension_config(RunConfig(window_s=0.3, repeats=2, max_repeats=3), 2)
    >>> round(c.window_s, 2), c.max_repeats
    (1.2, 9)
    """
    if round_ <= 0:
        return config
    return config.replace(
        window_s=min(config.max_window_s, config.window_s * 2**round_), max_repeats=config.max_repeats * (round_ + 1)
    )


def judge_precision(ci_a: float, ci_b: float, target: float) -> str:
    """``"met"`` where both 95% half-widths are within ``target``, else ``"missed"`` (an unknown one, from a single
    repeat, misses).

    >>> judge_precision(0.01, 0.04, 0.05), judge_precision(0.01, 0.87, 0.05), judge_precision(0.01, math.nan, 0.05)
    ('met', 'missed', 'missed')
    """
    return "met" if ci_a <= target and ci_b <= target else "missed"  # NaN compares False: missed


def empty_row(task: PairTask, config: RunConfig, device_name: str, status: str, error: str) -> dict:
    """The pairs-table row of ``task`` under ``config`` with nothing measured yet (``datasets.pair_row``): a failed
    run's row as it is, an ``ok`` one's before its measured numbers go in."""
    return pair_row(task.name_a, task.name_b, device_kind=device_kind(config.device), device_name=device_name,
                    mode=config.mode, size=config.size, isolation=config.isolation, status=status, error=error,
                    batch_size=config.batch_size or 0,
                    # The sharing knob's split (job a's percent of the device), NaN without one (``profiler.knob``).
                    split_a=math.nan if config.split is None else float(round(config.split * 100)),
                    ci_target=config.ci_target, precision="")


def pair_placements(pool: WorkerPool, task: PairTask, places: list[CoreAssignment]) -> list[CoreAssignment]:
    """Return the two placements in the order that reuses the most warm workers (they differ only under
    ``cpu-partition``, where each side has its own cores and either side may take either part)."""
    flipped = [places[1], places[0]]
    if places[0] == places[1]:
        return places

    def warm(order):
        return sum(any(w.spec == s and w.assignment == p for w in pool.idle) for s, p in zip(
            (task.spec_a, task.spec_b), order, strict=True))

    return flipped if warm(flipped) > warm(places) else places


def measure_pair(
    task: PairTask,
    config: RunConfig,
    device_name: str,
    pool: WorkerPool,
    pinned: list[CoreAssignment] | None = None,
) -> dict:
    """Measure one pair and return its pairs-table row (``measure_pair_repeats`` without its repeats)."""
    return measure_pair_repeats(task, config, device_name, pool, pinned)[0]


def measure_pair_repeats(
    task: PairTask,
    config: RunConfig,
    device_name: str,
    pool: WorkerPool,
    pinned: list[CoreAssignment] | None = None,
    earlier: list[RepeatResult] | None = None,
) -> tuple[dict, list[RepeatResult]]:
    """Measure one pair; return its pairs-table row and the repeats it averages. Failures become rows with a
    status (and no repeats), never raise.

    Repeats (``run_round``: both alone, then together, every other one in mirrored order) run until
    ``precise_enough``, on workers of ``pool`` (an executor's, ``executors.local``): with warm isolation
    the same two processes for every repeat, else each repeat in new processes. A repeat during which
    foreign processes used more than ``disturbance_limit`` of the machine is discarded and rerun (at most
    ``disturbance_retries`` times, then kept and flagged by its ``other_cpu_frac``). A worker that crashes,
    runs out of memory or hangs is killed; with warm isolation the pair is measured once more in new
    processes, then recorded with the status. ``pinned`` overrides the mode's placements (tests pin both
    to one core). Warm workers' solo windows may come from their recent pairs (``pool.solos``, the solo rule).

    ``earlier``: repeats of this pair measured before (an extension goes on from them, under its
    ``extension_config``), averaged with the new ones. The row's ``precision`` says whether both half-widths
    ended within ``ci_target``.
    """
    began = time.monotonic()
    attempts = 2 if pool.reuse else 1
    kept: list[RepeatResult] = []
    for attempt in range(attempts):
        try:
            row, kept = _measure(task, config, pool, pinned or placements(config, 2), device_name, earlier or [])
        except WorkerFailed as exc:
            if attempt + 1 < attempts:
                continue
            suffix = " (and again in new processes)" if attempts > 1 else ""
            row = empty_row(task, config, device_name, exc.status, exc.error + suffix)
        row["pair_s"] = time.monotonic() - began
        return row, kept
    raise AssertionError("unreachable")


def _measure(task: PairTask, config: RunConfig, pool: WorkerPool, places, device_name: str,
             earlier: list[RepeatResult]) -> tuple[dict, list[RepeatResult]]:
    """The repeats of one attempt; raises ``WorkerFailed`` after killing the workers involved."""
    kept: list[RepeatResult] = list(earlier)
    retries = 0
    workers: list[WorkerProcess] = []
    soloists: list[WorkerProcess] = []  # the same workloads without a knob read at start (MPS under a split)
    info: list[dict] = []
    used: set[int] = set()  # the solo windows this pair took (``SoloBank``)
    places = pair_placements(pool, task, places)
    knob = _knob(config, places)
    shared_places = places
    if knob is not None and not knob.live:  # the knob goes into each process's environment at start
        shared_places = [
            dataclasses.replace(p, env=tuple(sorted(knob.environment(s).items())))
            for p, s in zip(places, (config.split, 1.0 - config.split), strict=True)
        ]
    try:
        # At least one new repeat: an extension is asked for because the earlier ones missed the target.
        while len(kept) == len(earlier) or not precise_enough(kept, config):
            if not workers:
                wait_until_idle(config.idle_threshold, max_wait_s=config.idle_wait_s)
                workers = pool.acquire([task.spec_a, task.spec_b], shared_places)
                if shared_places is not places:
                    soloists = pool.acquire([task.spec_a, task.spec_b], places)
                info = [w.info for w in workers]
                if pool.reuse:
                    settle_prestarted(pool, workers + soloists, config)
                    _rewarm(workers, config)
            deadline = time.monotonic() + config.timeout_s
            for w in workers + soloists:
                w.deadline = deadline
            result = run_round(workers, config, len(kept) + retries, solos=pool.solos, used=used,
                               solo_workers=soloists or None, knob=knob)
            if not pool.reuse:
                pool.release(workers + soloists)
                workers, soloists = [], []
            if result.foreign_cpu > config.disturbance_limit and retries < config.disturbance_retries:
                retries += 1
                continue
            if pool.solos is not None:  # a disturbed repeat's solos serve no later pair
                for w, window, reused in zip(soloists or workers, result.solo, result.reused, strict=True):
                    if not reused:
                        pool.solos.put(w, window, used)
            kept.append(result)
    except BaseException:
        # A fault, or an interrupt: the workers of this pair may be mid-window; never reuse them.
        pool.discard(workers + soloists)
        raise
    finally:
        if knob is not None:
            knob.close()
    for w in workers + soloists:
        w.deadline = None
    pool.release(workers + soloists)
    row = empty_row(task, config, info[0].get("device_name", device_name), "ok", "")
    row.update(aggregate(task, kept))
    row["precision"] = judge_precision(row["ci_a"], row["ci_b"], config.ci_target)
    row["batch_size_a"] = int(info[0]["batch_size"])
    row["batch_size_b"] = int(info[1]["batch_size"])
    row["host"] = info[0].get("host", row["host"])
    return row, kept


def _knob(config: RunConfig, places: list[CoreAssignment]):
    """The sharing knob of a pair at ``config.split`` (None without a split), checked before anything runs: a
    knob the machine cannot set (no writable cgroup CPU controller) is one ``KnobError`` naming what is missing."""
    if config.split is None:
        return None
    from sharewise.profiler.knob import knob_for

    knob = knob_for(config.mode, cores=len(places[0].cores))
    knob.check()
    return knob


def settle_prestarted(pool: WorkerPool, workers: list[WorkerProcess], config: RunConfig) -> None:
    """Time a few steps alone of each worker that ``pool.prestart`` started and no run used yet: its ready
    report's step time, which sizes the windows, was measured while the other workers started beside it."""
    for w in workers:
        if pool.take_prestarted(w):
            timeout = min(config.timeout_s, 30 + 6 * w.info["step_ms"] * REWARM_STEPS / 1e3)
            w.send(cmd="warm", steps=REWARM_STEPS, seconds=REWARM_S)
            w.info["step_ms"] = float(w.recv("warmed", timeout)["step_ms"])


def _rewarm(workers: list[WorkerProcess], config: RunConfig) -> None:
    """A few steps of every worker, together, after its wait; raises ``WorkerFailed``."""
    timeout = min(config.timeout_s, 30 + 6 * max(w.info["step_ms"] for w in workers) * REWARM_STEPS / 1e3)
    for w in workers:
        w.send(cmd="warm", steps=REWARM_STEPS, seconds=REWARM_S)
    for w in workers:
        w.recv("warmed", timeout)
