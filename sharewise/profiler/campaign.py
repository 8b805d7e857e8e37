"""Pair campaigns: all unordered pairs of a workload list, persisted one by one, resumable."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import pandas as pd

from sharewise.datasets.store import Dataset
from sharewise.errors import ConfigError
from sharewise.profiler.config import RunConfig
from sharewise.profiler.pair import PairTask, empty_row


@dataclass
class CampaignEvent:
    """What a progress display needs after each step of a campaign."""

    kind: str  # "plan", "profile", "pair", "skip"
    done: int
    total: int
    row: dict | None = None
    message: str = ""


@dataclass
class CampaignSummary:
    """Outcome of a campaign: how many pairs were measured now, skipped as done, and which failed."""

    dataset: str
    total: int
    measured: int = 0
    skipped: int = 0
    profiled: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    failures: list[tuple[str, str, str, str]] = field(default_factory=list)  # (a, b, status, error)
    seconds: float = 0.0


def plan_pairs(names: Sequence[str]) -> list[tuple[int, int]]:
    """Return index pairs (i, j), i <= j, of all unordered pairs including self-pairs, in input order.

    >>> plan_pairs(["a", "b"])
    [(0, 0), (0, 1), (1, 1)]
    """
    n = len(names)
    return [(i, j) for i in range(n) for j in range(i, n)]


def resolve_specs(specs: Sequence[str]) -> list[tuple[str, str]]:
    """Validate workload specs up front (before any run) and return ``(spec, recorded name)`` pairs."""
    from sharewise.profiler.workloads import workload_name

    if not specs:
        raise ConfigError("no workloads given; name at least one (see 'sharewise workloads')")
    resolved, seen = [], set()
    for spec in specs:
        name = workload_name(spec)
        if name in seen:
            raise ConfigError(f"workload {name!r} is listed twice; self-pairs are measured automatically")
        seen.add(name)
        resolved.append((spec, name))
    return resolved


def done_keys(existing: pd.DataFrame, config: RunConfig, device_name: str, retry_failed: bool) -> set:
    """Return the (a, b) pairs already recorded for this device, mode and size (both orders)."""
    if existing.empty:
        return set()
    rows = existing[(existing["device_name"] == device_name) & (existing["mode"] == config.mode)]
    if "size" in rows.columns:
        rows = rows[rows["size"] == config.size]
    if retry_failed:
        rows = rows[rows["status"].isin(["ok", "oom", "skipped"])]
    keys = set(zip(rows["workload_a"], rows["workload_b"]))
    return keys | {(b, a) for a, b in keys}


class LocalExecutor:
    """Runs pair measurements one after another on this machine (the default; needs no Ray)."""

    name = "local"

    def __init__(self, config: RunConfig, device_name: str, extra_env: dict[str, str] | None = None) -> None:
        self.config = config
        self.device_name = device_name
        self.extra_env = extra_env

    def run(self, tasks: Sequence[PairTask]) -> Iterator[dict]:
        from sharewise.profiler.pair import measure_pair

        for task in tasks:
            try:
                yield measure_pair(task, self.config, self.device_name, self.extra_env)
            except Exception as exc:  # a bug or a broken machine: record it, keep the campaign going
                yield empty_row(task, self.config, self.device_name, "failed", f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        pass


def run_campaign(
    specs: Sequence[str],
    config: RunConfig,
    out: str | Dataset,
    executor_factory: Callable[[RunConfig, str, dict | None], object] | None = None,
    profile_missing: bool = True,
    retry_failed: bool = False,
    on_event: Callable[[CampaignEvent], None] | None = None,
) -> CampaignSummary:
    """Measure every unordered pair (self-pairs included) of ``specs`` into the dataset ``out``.

    Each finished pair is written atomically before the next starts; rerunning after an interruption skips
    pairs already recorded for this device, mode and size (``retry_failed`` reruns failed and timed-out
    ones). Workloads without a solo profile in ``out`` are profiled first when ``profile_missing``.
    """
    from sharewise.profiler.device import device_name as _device_name
    from sharewise.profiler.modes import MpsDaemon

    began = time.monotonic()
    dataset = out if isinstance(out, Dataset) else Dataset(out)
    resolved = resolve_specs(specs)
    device_name = _device_name(config.device)
    emit = on_event or (lambda event: None)
    pairs_idx = plan_pairs([n for _, n in resolved])
    summary = CampaignSummary(dataset=str(dataset.path), total=len(pairs_idx))
    with dataset.lock("campaign"):
        mps = MpsDaemon() if config.mode == "mps" else contextlib.nullcontext()
        with mps:
            extra_env = getattr(mps, "env", None) or None
            if profile_missing:
                summary.profiled = _profile_missing(dataset, resolved, config, device_name, extra_env, emit)
            done = done_keys(dataset.read_pairs(), config, device_name, retry_failed)
            tasks = []
            for i, j in pairs_idx:
                (sa, na), (sb, nb) = resolved[i], resolved[j]
                if (na, nb) in done:
                    summary.skipped += 1
                else:
                    tasks.append(PairTask(sa, sb, na, nb))
            emit(CampaignEvent("plan", summary.skipped, summary.total, message=f"{len(tasks)} pairs to measure"))
            factory = executor_factory or LocalExecutor
            executor = factory(config, device_name, extra_env)
            try:
                for row in executor.run(tasks):
                    dataset.write_pairs(pd.DataFrame([row]))
                    summary.measured += 1
                    summary.by_status[row["status"]] = summary.by_status.get(row["status"], 0) + 1
                    if row["status"] != "ok":
                        summary.failures.append((row["workload_a"], row["workload_b"], row["status"], row["error"]))
                    emit(CampaignEvent("pair", summary.skipped + summary.measured, summary.total, row=row))
            finally:
                executor.close()
    summary.seconds = time.monotonic() - began
    return summary


def _profile_missing(dataset, resolved, config, device_name, extra_env, emit) -> int:
    from sharewise.profiler.api import profile_one

    have = dataset.read_profiles()
    have = have[(have["device_name"] == device_name) & (have["mode"] == config.mode)]
    if "size" in have.columns:
        have = have[have["size"] == config.size]
    names = set(have["workload"])
    count = 0
    for spec, name in resolved:
        if name in names:
            continue
        row = profile_one(spec, config, extra_env=extra_env)
        dataset.write_profiles(pd.DataFrame([row]))
        count += 1
        emit(CampaignEvent("profile", 0, len(resolved), row=row, message=f"profiled {name}"))
    return count
