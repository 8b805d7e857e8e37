"""One pair run: repeats in fresh processes, disturbance checks, and the pairs-table row it yields."""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass

import numpy as np

from sharewise.datasets.store import utc_now
from sharewise.profiler.config import RunConfig, device_kind
from sharewise.profiler.hostload import wait_until_idle
from sharewise.profiler.modes import CoreAssignment, placements
from sharewise.profiler.session import RepeatResult, WorkerFailed, run_repeat


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


def aggregate(task: PairTask, repeats: list[RepeatResult]) -> dict:
    """Combine repeats into measured numbers: mean throughputs, mean per-repeat slowdown, CV (pure)."""
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
        "trials": len(repeats),
        "other_cpu_frac": float(np.mean([r.foreign_cpu for r in repeats])),
        "window_s": float(np.mean([r.window_s for r in repeats])),
        "steps_a": int(min(r.coloc[0].steps for r in repeats)),
        "steps_b": int(min(r.coloc[1].steps for r in repeats)),
    }


def empty_row(task: PairTask, config: RunConfig, device_name: str, status: str, error: str) -> dict:
    nan = math.nan
    return {
        "workload_a": task.name_a,
        "workload_b": task.name_b,
        "device_kind": device_kind(config.device),
        "device_name": device_name,
        "mode": config.mode,
        "size": config.size,
        "solo_a": nan,
        "solo_b": nan,
        "coloc_a": nan,
        "coloc_b": nan,
        "slowdown_a": nan,
        "slowdown_b": nan,
        "trials": 0,
        "cv_a": nan,
        "cv_b": nan,
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
    }


def measure_pair(
    task: PairTask,
    config: RunConfig,
    device_name: str,
    extra_env: dict[str, str] | None = None,
    pinned: list[CoreAssignment] | None = None,
) -> dict:
    """Measure one pair and return its pairs-table row; failures become rows with a status, never raise.

    Runs ``config.repeats`` repeats in fresh processes, more (up to ``max_repeats``) while either side's CV
    exceeds ``cv_target``; a repeat during which foreign processes used more than ``disturbance_limit`` of
    the machine is discarded and rerun (at most ``disturbance_retries`` times, then kept and flagged by its
    ``other_cpu_frac``). ``pinned`` overrides the mode's placements (tests pin both to one core).
    """
    places = pinned or placements(config, 2)
    kept: list[RepeatResult] = []
    retries = 0
    while True:
        enough = len(kept) >= config.repeats
        if enough:
            agg = aggregate(task, kept)
            if max(agg["cv_a"], agg["cv_b"]) <= config.cv_target or len(kept) >= config.max_repeats:
                break
        wait_until_idle(config.idle_threshold, max_wait_s=config.idle_wait_s)
        try:
            result = run_repeat((task.spec_a, task.spec_b), config, places, extra_env)
        except WorkerFailed as exc:
            return empty_row(task, config, device_name, exc.status, exc.error)
        if result.foreign_cpu > config.disturbance_limit and retries < config.disturbance_retries:
            retries += 1
            continue
        kept.append(result)
    row = empty_row(task, config, kept[0].info[0].get("device_name", device_name), "ok", "")
    row.update(aggregate(task, kept))
    row["batch_size_a"] = int(kept[0].info[0]["batch_size"])
    row["batch_size_b"] = int(kept[0].info[1]["batch_size"])
    row["host"] = kept[0].info[0].get("host", row["host"])
    return row
