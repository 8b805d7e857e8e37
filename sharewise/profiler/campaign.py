"""Pair campaigns: all unordered pairs of a workload list (or a budget of them), persisted one by one, resumable."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pandas as pd

from sharewise.datasets.pair import Pair
from sharewise.datasets.store import Dataset
from sharewise.errors import ProfileFailed
from sharewise.profiler.api import profile_one
from sharewise.profiler.budget import BudgetPlan, check_budget
from sharewise.profiler.config import RunConfig, device_kind
from sharewise.profiler.executors import executor_factory as _executor_factory
from sharewise.profiler.interrupts import CampaignInterrupted, StopSignals
from sharewise.profiler.modes import SHARING_MODES, placements
from sharewise.profiler.pair import PairTask, empty_row
from sharewise.profiler.probe import PROBE_SPEC
from sharewise.profiler.workloads import resolve_specs
from sharewise.profiler.writes import write_rows


@dataclass
class CampaignEvent:
    """What a progress display needs after each step of a campaign."""

    kind: str  # "plan", "profile" or "pair"
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
    # (a, b, status, error); b is "(solo profile)" when a's solo profile failed
    failures: list[tuple[str, str, str, str]] = field(default_factory=list)
    seconds: float = 0.0


def all_pairs(names: Sequence[str]) -> list[tuple[int, int]]:
    """Return index pairs (i, j), i <= j, of all unordered pairs including self-pairs, in input order.

    >>> all_pairs(["a", "b"])
    [(0, 0), (0, 1), (1, 1)]
    """
    n = len(names)
    return [(i, j) for i in range(n) for j in range(i, n)]


def done_keys(existing: pd.DataFrame, config: RunConfig, device_name: str | None, retry_failed: bool) -> set[Pair]:
    """Return the pairs already recorded for this device, mode and size, e.g. ``{Pair("a", "b")}``.

    ``device_name=None`` accepts rows of any device of the config's kind: a cluster's pairs are recorded
    under the names of the nodes that ran them, which the driver cannot know in advance.
    """
    if existing.empty:
        return set()
    rows = existing[existing["mode"] == config.mode]
    if device_name is None:
        rows = rows[rows["device_kind"] == device_kind(config.device)]
    else:
        rows = rows[rows["device_name"] == device_name]
    if "size" in rows.columns:
        rows = rows[rows["size"] == config.size]
    if retry_failed:
        rows = rows[rows["status"].isin(["ok", "oom", "skipped"])]
    return {Pair.of(a, b) for a, b in zip(rows["workload_a"], rows["workload_b"], strict=True)}


def run_campaign(
    specs: Sequence[str],
    config: RunConfig,
    out: str | Dataset,
    executor_factory: Callable[[RunConfig, str, dict | None], object] | None = None,
    profile_missing: bool = True,
    retry_failed: bool = False,
    on_event: Callable[[CampaignEvent], None] | None = None,
    budget: int | None = None,
    model=None,
) -> CampaignSummary:
    """Measure every unordered pair (self-pairs included) of ``specs`` into the dataset ``out``.

    Each finished pair is written atomically before the next starts; rerunning after an interruption skips
    pairs already recorded for this device, mode and size (``retry_failed`` reruns failed and timed-out
    ones). Workloads without a solo profile in ``out`` are profiled first when ``profile_missing``.
    ``executor_factory`` is ``executors.executor_factory(name, ...)``'s result; the local executor by default
    (with warm isolation its worker pool serves the profiles and then the pairs).
    The sharing mode's environment (the MPS daemon for ``mps``) holds for the whole campaign.

    With ``budget`` K (and a fitted ``model``), only the workloads of ``specs`` without a measured pair get
    pairs: K each, against the others, picked one at a time by ``suggest_pairs`` (``profiler.budget``).

    SIGTERM and Ctrl-C stop the campaign between two writes: the workers are ended, every row written is
    kept, and ``CampaignInterrupted`` (a ``KeyboardInterrupt``) says how many; rerunning resumes. A full
    disk raises ``DatasetError`` and leaves no half-written file.
    """
    from sharewise.profiler.device import device_name as _device_name

    began = time.monotonic()
    dataset = out if isinstance(out, Dataset) else Dataset(out)
    resolved = resolve_specs(specs)
    device_name = _device_name(config.device)
    emit = on_event or (lambda event: None)
    pairs_idx = all_pairs([n for _, n in resolved])
    summary = CampaignSummary(dataset=str(dataset.path), total=len(pairs_idx))
    if budget is not None:
        check_budget(budget, model, executor_factory)
    with StopSignals() as stops, dataset.lock("campaign"):
        try:
            _campaign(dataset, resolved, config, device_name, executor_factory, profile_missing, retry_failed,
                      emit, summary, pairs_idx, stops, budget, model)
        except CampaignInterrupted as exc:
            exc.kept = summary.measured + summary.profiled
            raise
    summary.seconds = time.monotonic() - began
    return summary


def _campaign(dataset, resolved, config, device_name, executor_factory, profile_missing, retry_failed, emit,
              summary, pairs_idx, stops, budget, model) -> None:
    with SHARING_MODES.get(config.mode).environment(config) as mode_env:
        extra_env = dict(mode_env) or None
        # Start the executor before any run: a wrong Ray address or a missing cluster fails in a second,
        # not after the solo profiles.
        factory = executor_factory or _executor_factory("local")
        executor = factory(config, device_name, extra_env)
        try:
            broken: dict[str, tuple[str, str]] = {}
            pool = getattr(executor, "pool", None)
            if profile_missing:
                summary.profiled, broken = _profile_missing(
                    dataset, resolved, config, device_name, extra_env, emit, summary.failures, pool, stops
                )
            if pool is not None:
                # The probe and any solo-only placement (CUDA profiles use every host thread) serve no pair.
                pool.evict_spec(PROBE_SPEC)
                pool.evict_idle(keep=placements(config, 2))
            # Executors spanning several machines (Ray) record each pair under its node's device name.
            on_device = None if executor.spans_nodes else device_name
            done = done_keys(dataset.read_pairs(), config, on_device, retry_failed)
            if budget is not None:
                tasks = BudgetPlan(dataset, resolved, config, device_name, budget, model, broken)
                summary.total = tasks.total
                unrunnable: list[dict] = []
                plan = f"{tasks.total} pairs to measure ({budget} per new workload: {', '.join(tasks.new) or 'none'})"
            else:
                tasks, unrunnable = _plan(resolved, pairs_idx, done, broken, config, device_name, summary)
                plan = f"{len(tasks)} pairs to measure"
            emit(CampaignEvent("plan", summary.skipped, summary.total, message=plan))
            for row in itertools.chain(unrunnable, executor.run(tasks)):
                with stops.deferred():
                    write_rows(dataset, "pairs", [row])
                summary.measured += 1
                summary.by_status[row["status"]] = summary.by_status.get(row["status"], 0) + 1
                if row["status"] != "ok":
                    failure = (row["workload_a"], row["workload_b"], row["status"], row["error"])
                    summary.failures.append(failure)
                emit(CampaignEvent("pair", summary.skipped + summary.measured, summary.total, row=row))
        finally:
            executor.close()


def _plan(resolved, pairs_idx, done, broken, config, device_name, summary):
    """Split the campaign's pairs into tasks to run and rows recorded without a run; count the done ones."""
    tasks, unrunnable = [], []
    for i, j in pairs_idx:
        (sa, na), (sb, nb) = resolved[i], resolved[j]
        if Pair.of(na, nb) in done:
            summary.skipped += 1
        elif na in broken or nb in broken:
            # A workload that failed alone fails next to a partner too: record the pair with the same
            # status instead of paying a crash or a timeout per pair.
            bad = na if na in broken else nb
            status, error = broken[bad]
            error = f"not run: the solo profile of {bad} failed: {error}"
            unrunnable.append(empty_row(PairTask(sa, sb, na, nb), config, device_name, status, error))
        else:
            tasks.append(PairTask(sa, sb, na, nb))
    return tasks, unrunnable


def _profile_missing(dataset, resolved, config, device_name, extra_env, emit, failures, pool, stops):
    """Profile the workloads without a solo profile; return (count, {name: (status, error)} of failures).

    A workload that raises, runs out of memory or hangs must not end the campaign here: it goes to
    ``failures``, its pairs are recorded with its status, and a rerun (``--retry-failed``) tries again.
    """
    have = dataset.read_profiles()
    have = have[(have["device_name"] == device_name) & (have["mode"] == config.mode)]
    if "size" in have.columns:
        have = have[have["size"] == config.size]
    names = set(have["workload"])
    count, broken = 0, {}
    for spec, name in resolved:
        if name in names:
            continue
        try:
            row = profile_one(spec, config, extra_env=extra_env, pool=pool)
        except ProfileFailed as exc:
            failures.append((name, "(solo profile)", exc.status, str(exc)))
            broken[name] = (exc.status, str(exc))
            continue
        with stops.deferred():
            write_rows(dataset, "profiles", [row])
        count += 1
        emit(CampaignEvent("profile", 0, len(resolved), row=row, message=f"profiled {name}"))
    return count, broken
