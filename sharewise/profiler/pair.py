"""One pair run: repeats until each slowdown is known to within ``ci_target``, faults, the pairs-table row."""

from __future__ import annotations

import math
import socket
import time
from dataclasses import dataclass

import numpy as np

from sharewise.datasets.store import utc_now
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


def empty_row(task: PairTask, config: RunConfig, device_name: str, status: str, error: str) -> dict:
    nan = math.nan
    return {
        "workload_a": task.name_a,
        "workload_b": task.name_b,
        "device_kind": device_kind(config.device),
        "device_name": device_name,
        "mode": config.mode,
        "size": config.size,
        "isolation": config.isolation,
        "solo_a": nan,
        "solo_b": nan,
        "coloc_a": nan,
        "coloc_b": nan,
        "slowdown_a": nan,
        "slowdown_b": nan,
        "trials": 0,
        "cv_a": nan,
        "cv_b": nan,
        "ci_a": nan,
        "ci_b": nan,
        "status": status,
        "error": error,
        "created_at": utc_now(),
        "host": socket.gethostname(),
        "other_cpu_frac": nan,
        "window_s": nan,
        "steps_a": 0,
        "steps_b": 0,
        "batch_size_a": config.batch_size or 0,
        "batch_size_b": config.batch_size or 0,
        "pair_s": nan,
    }


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
    """Measure one pair and return its pairs-table row; failures become rows with a status, never raise.

    Repeats (``run_round``: both alone, then together, every other one in mirrored order) run until
    ``precise_enough``, on workers of ``pool`` (an executor's, ``executors.local``): with warm isolation
    the same two processes for every repeat, else each repeat in new processes. A repeat during which
    foreign processes used more than ``disturbance_limit`` of the machine is discarded and rerun (at most
    ``disturbance_retries`` times, then kept and flagged by its ``other_cpu_frac``). A worker that crashes,
    runs out of memory or hangs is killed; with warm isolation the pair is measured once more in new
    processes, then recorded with the status. ``pinned`` overrides the mode's placements (tests pin both
    to one core).
    """
    began = time.monotonic()
    attempts = 2 if pool.reuse else 1
    for attempt in range(attempts):
        try:
            row = _measure(task, config, pool, pinned or placements(config, 2), device_name)
        except WorkerFailed as exc:
            if attempt + 1 < attempts:
                continue
            suffix = " (and again in new processes)" if attempts > 1 else ""
            row = empty_row(task, config, device_name, exc.status, exc.error + suffix)
        row["pair_s"] = time.monotonic() - began
        return row
    raise AssertionError("unreachable")


def _measure(task: PairTask, config: RunConfig, pool: WorkerPool, places, device_name: str) -> dict:
    """The repeats of one attempt; raises ``WorkerFailed`` after killing the workers involved."""
    kept: list[RepeatResult] = []
    retries = 0
    workers: list[WorkerProcess] = []
    info: list[dict] = []
    places = pair_placements(pool, task, places)
    try:
        while not precise_enough(kept, config):
            if not workers:
                wait_until_idle(config.idle_threshold, max_wait_s=config.idle_wait_s)
                workers = pool.acquire([task.spec_a, task.spec_b], places)
                info = [w.info for w in workers]
                if pool.reuse:
                    _rewarm(workers, config)
            deadline = time.monotonic() + config.timeout_s
            for w in workers:
                w.deadline = deadline
            result = run_round(workers, config, len(kept) + retries)
            if not pool.reuse:
                pool.release(workers)
                workers = []
            if result.foreign_cpu > config.disturbance_limit and retries < config.disturbance_retries:
                retries += 1
                continue
            kept.append(result)
    except BaseException:
        # A fault, or an interrupt: the workers of this pair may be mid-window; never reuse them.
        pool.discard(workers)
        raise
    for w in workers:
        w.deadline = None
    pool.release(workers)
    row = empty_row(task, config, info[0].get("device_name", device_name), "ok", "")
    row.update(aggregate(task, kept))
    row["batch_size_a"] = int(info[0]["batch_size"])
    row["batch_size_b"] = int(info[1]["batch_size"])
    row["host"] = info[0].get("host", row["host"])
    return row


def _rewarm(workers: list[WorkerProcess], config: RunConfig) -> None:
    """A few steps of every worker, together, after its wait; raises ``WorkerFailed``."""
    timeout = min(config.timeout_s, 30 + 6 * max(w.info["step_ms"] for w in workers) * REWARM_STEPS / 1e3)
    for w in workers:
        w.send(cmd="warm", steps=REWARM_STEPS, seconds=REWARM_S)
    for w in workers:
        w.recv("warmed", timeout)
