"""Pair campaigns: the missing solo profiles, then every unordered pair of a workload list (or the pairs a picker
chooses), each task run by the executor and written before the next is chosen; then the pairs whose interval
missed the target, extended while time allows; resumable."""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pandas as pd

from sharewise.datasets.pair import Pair
from sharewise.datasets.store import Dataset
from sharewise.errors import ProfileFailed
from sharewise.profiler.config import RunConfig, device_kind
from sharewise.profiler.executors import Executor, Finished, Task
from sharewise.profiler.executors import executor_factory as _executor_factory
from sharewise.profiler.interrupts import CampaignInterrupted, StopSignals
from sharewise.profiler.modes import SHARING_MODES
from sharewise.profiler.pair import PairTask, empty_row
from sharewise.profiler.solo import ProfileTask
from sharewise.profiler.workloads import resolve_specs
from sharewise.profiler.writes import write_rows


@dataclass
class CampaignEvent:
    """What a progress display needs after each step of a campaign."""

    kind: str  # "plan", "profile", "pair" or "extend" (a pair's row again, after an extension round)
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
    extended: int = 0  # extension rounds run on pairs that missed their precision target
    missed: list[tuple[str, str]] = field(default_factory=list)  # pairs still wider than the target at the end
    left: int = 0  # planned pairs not started: the time budget (``RunConfig.time_budget_s``) ran out


def all_pairs(names: Sequence[str]) -> list[tuple[int, int]]:
    """Return index pairs (i, j), i <= j, of all unordered pairs including self-pairs, in input order.

    >>> all_pairs(["a", "b"])
    [(0, 0), (0, 1), (1, 1)]
    """
    n = len(names)
    return [(i, j) for i in range(n) for j in range(i, n)]


def on_device(rows: pd.DataFrame, config: RunConfig, device_name: str | None, by_size: bool = True) -> pd.DataFrame:
    """Return the rows (profiles or pairs) of ``config``'s mode recorded on ``device_name`` (and size).

    ``device_name=None`` accepts rows of any device of the config's kind: a cluster's rows are recorded
    under the names of the nodes that ran them, which the driver cannot know in advance.
    """
    if rows.empty:
        return rows
    rows = rows[rows["mode"] == config.mode]
    if device_name is None:
        rows = rows[rows["device_kind"] == device_kind(config.device)]
    else:
        rows = rows[rows["device_name"] == device_name]
    if by_size and "size" in rows.columns:
        rows = rows[rows["size"] == config.size]
    return rows


def at_split(rows: pd.DataFrame, config: RunConfig) -> pd.DataFrame:
    """The pair rows measured at ``config.split`` (without a knob where it is None): a pair at another split is
    another measurement."""
    if rows.empty:
        return rows
    split = rows["split_a"].to_numpy(dtype=float) if "split_a" in rows else np.full(len(rows), np.nan)
    return rows[np.isnan(split)] if config.split is None else rows[split == round(config.split * 100)]


def missed_target(rows: pd.DataFrame, ci_target: float) -> np.ndarray:
    """Which ``ok`` rows are wider than their target: judged ``missed``, or not judged (measured before rows
    carried the judgment) with a half-width above ``ci_target``.

    >>> rows = pd.DataFrame({"status": ["ok"] * 3, "precision": ["met", "missed", ""],
    ...                      "ci_a": [0.01, 0.01, 0.87], "ci_b": [0.02, 0.09, 0.02]})
    >>> missed_target(rows, 0.05).tolist()
    [False, True, True]
    """
    if rows.empty:
        return np.zeros(0, dtype=bool)
    ok = (rows["status"] == "ok").to_numpy()
    judged = rows["precision"].to_numpy(dtype=object) if "precision" in rows else np.full(len(rows), "", dtype=object)
    widths = [rows[c].to_numpy(dtype=float) if c in rows else np.full(len(rows), np.nan) for c in ("ci_a", "ci_b")]
    wide = np.fmax(widths[0], widths[1]) > ci_target
    return ok & ((judged == "missed") | ((judged == "") & wide))


def done_keys(existing: pd.DataFrame, config: RunConfig, device_name: str | None, retry_failed: bool) -> set[Pair]:
    """Return the pairs already recorded for this device, mode and size, e.g. ``{Pair("a", "b")}``.

    ``device_name=None`` matches any device of the config's kind (``on_device``).
    """
    rows = at_split(on_device(existing, config, device_name), config)
    if rows.empty:
        return set()
    if retry_failed:
        rows = rows[rows["status"].isin(["ok", "oom", "skipped"])]
    return {Pair.of(a, b) for a, b in zip(rows["workload_a"], rows["workload_b"], strict=True)}


# -- what a campaign runs: tasks, and the picker of its pairs ------------------------------------------------------
class Tasks(Protocol):
    """Hands a campaign's loop its next task; ``None`` when there is none now.

    ``busy`` is the number of tasks running: a source whose next task depends on the results so far (a
    budget's pick) answers None while any runs, and is asked again after each result is written.
    """

    def next_task(self, busy: int) -> Task | None: ...


@dataclass(frozen=True)
class CampaignContext:
    """What a pair picker sees once the campaign's profiles are done.

    ``device_name`` is this machine's device (rows recorded without a run carry it); ``on_device`` the device
    rows are matched on: ``device_name``, or None (any of the kind) when the executor spans nodes. ``broken``
    maps each workload whose solo profile failed to ``(status, error)``.
    """

    dataset: Dataset
    workloads: list[tuple[str, str]]  # (spec, recorded name), as listed
    config: RunConfig
    device_name: str
    on_device: str | None
    retry_failed: bool
    broken: dict[str, tuple[str, str]]


@dataclass
class TaskQueue:
    """Tasks handed out in order, as fast as the executor takes them (none depends on another's result)."""

    tasks: deque[Task]

    def next_task(self, busy: int) -> Task | None:
        return self.tasks.popleft() if self.tasks else None


class PairPlan(Tasks, Protocol):
    """The pairs a campaign measures, as a picker planned them: ``total`` in all, ``skipped`` of them recorded
    already, ``unrunnable`` rows recorded without a run, ``message`` the line said before the first pair, and
    ``next_task`` for the rest."""

    total: int
    skipped: int
    unrunnable: Sequence[dict]
    message: str


@dataclass
class PairQueue(TaskQueue):
    """A ``PairPlan`` whose pairs are all known in advance (``AllPairs``'): handed out in order."""

    total: int = 0
    skipped: int = 0
    unrunnable: list[dict] = field(default_factory=list)
    message: str = ""


class PairPicker(Protocol):
    """Chooses a campaign's pairs once its profiles are written: ``AllPairs`` (the default) or a budget's."""

    def plan(self, context: CampaignContext) -> PairPlan: ...


class AllPairs:
    """Every unordered pair of the listed workloads, self-pairs included, in input order, except those recorded
    already (failed ones too, unless ``retry_failed``). A pair with a workload whose solo profile failed is
    recorded with that status and not run: it would fail next to a partner too, at the price of a crash or a
    timeout per pair."""

    def plan(self, context: CampaignContext) -> PairQueue:
        ctx = context
        done = done_keys(ctx.dataset.read_pairs(), ctx.config, ctx.on_device, ctx.retry_failed)
        indices = all_pairs([name for _, name in ctx.workloads])
        plan = PairQueue(deque(), total=len(indices))
        for i, j in indices:
            (sa, na), (sb, nb) = ctx.workloads[i], ctx.workloads[j]
            task = PairTask(sa, sb, na, nb)
            if Pair.of(na, nb) in done:
                plan.skipped += 1
            elif na in ctx.broken or nb in ctx.broken:
                bad = na if na in ctx.broken else nb
                status, error = ctx.broken[bad]
                error = f"not run: the solo profile of {bad} failed: {error}"
                plan.unrunnable.append(empty_row(task, ctx.config, ctx.device_name, status, error))
            else:
                plan.tasks.append(task)
        plan.message = f"{len(plan.tasks)} pairs to measure"
        return plan


# -- the campaign -------------------------------------------------------------------------------------------------
def run_campaign(
    specs: Sequence[str],
    config: RunConfig,
    out: str | Dataset,
    executor_factory: Callable[[RunConfig, str, dict | None], Executor] | None = None,
    profile_missing: bool = True,
    retry_failed: bool = False,
    on_event: Callable[[CampaignEvent], None] | None = None,
    picker: PairPicker | None = None,
) -> CampaignSummary:
    """Measure every unordered pair (self-pairs included) of ``specs`` into the dataset ``out``.

    Every task, solo profile or pair, runs on the executor (``executors.executor_factory(name, ...)``'s
    result; the local one by default), one loop for both: next task, run, write. Each row is written
    atomically before the next task is chosen; rerunning after an interruption skips pairs already recorded
    for this device, mode and size (``retry_failed`` reruns failed and timed-out ones). Workloads without a
    solo profile in ``out`` are profiled first when ``profile_missing``. The sharing mode's environment (the
    MPS daemon for ``mps``) holds for the whole campaign.

    ``picker`` chooses the pairs once the profiles are written: ``AllPairs()`` by default, or
    ``budget.BudgetPicker(K, model)``, which measures only K pairs per workload without a measured pair,
    each picked after the previous one is written.

    Precision that holds: once the planned pairs are measured, each pair of this campaign whose half-widths
    missed ``config.ci_target`` gets up to ``config.extend_rounds`` extension rounds (longer windows, more
    repeats, averaged with the repeats it has: ``pair.extension_config``), and with ``retry_failed`` so do the
    rows recorded earlier that missed the target (or were never judged and are wider than it). An extension's
    row replaces the pair's; one that fails leaves the earlier row. What still misses stays ``precision="missed"``
    in its row (``summary.missed``). With ``config.time_budget_s`` a pair (or an extension) starts only where
    the time left holds it (``TimeBudget``): the campaign ends by itself, and the pairs it left
    (``summary.left``) are measured by a rerun.

    SIGTERM and Ctrl-C stop the campaign between two writes: the workers are ended, every row written is
    kept, and ``CampaignInterrupted`` (a ``KeyboardInterrupt``) says how many; rerunning resumes. A full
    disk raises ``DatasetError`` and leaves no half-written file.
    """
    from sharewise.profiler.device import device_name as _device_name

    began = time.monotonic()
    dataset = out if isinstance(out, Dataset) else Dataset(out)
    resolved = resolve_specs(specs)
    device_name = _device_name(config.device)
    summary = CampaignSummary(dataset=str(dataset.path), total=len(all_pairs([n for _, n in resolved])))
    with StopSignals() as stops, dataset.lock("campaign"):
        campaign = _Campaign(dataset, resolved, config, device_name, summary, on_event, stops)
        campaign.budget = TimeBudget(None if config.time_budget_s is None else began + config.time_budget_s)
        try:
            with SHARING_MODES.get(config.mode).environment(config) as mode_env:
                # Start the executor before any run: a wrong Ray address or a missing cluster fails in a
                # second, not after the solo profiles.
                factory = executor_factory or _executor_factory("local")
                executor = factory(config, device_name, dict(mode_env) or None)
                try:
                    campaign.run(executor, profile_missing, retry_failed, picker or AllPairs())
                finally:
                    executor.close()
        except CampaignInterrupted as exc:
            exc.kept = summary.measured + summary.profiled
            raise
    summary.seconds = time.monotonic() - began
    return summary


@dataclass
class TimeBudget:
    """The monotonic time a campaign must end by (``RunConfig.time_budget_s``; None: no limit) and the seconds
    its pairs took so far.

    A task starts only where the time left holds it: a pair at the median of the pairs so far (none before
    the first, which starts while any time is left), an extension at its own estimate. So a campaign under an
    outer limit (the GPU check's stage ``timeout``) ends by itself rather than be cut half-way through a pair,
    whose work would be lost.
    """

    ends_at: float | None
    pair_s: list[float] = field(default_factory=list)

    def left(self) -> float:
        return math.inf if self.ends_at is None else self.ends_at - time.monotonic()

    def fits(self, seconds: float | None = None) -> bool:
        """Whether a task of ``seconds`` (None: a pair at the median so far) ends in the time left."""
        if self.ends_at is None:
            return True
        if seconds is None:
            seconds = float(np.median(self.pair_s)) if self.pair_s else 0.0
        return seconds <= self.left()


@dataclass
class _Budgeted:
    """The tasks of ``tasks`` while the budget holds one more pair; then none (``stopped``)."""

    tasks: Tasks
    budget: TimeBudget
    stopped: bool = False

    def next_task(self, busy: int) -> Task | None:
        if self.stopped or not self.budget.fits():
            self.stopped = True
            return None
        return self.tasks.next_task(busy)


@dataclass
class _Extensions:
    """Extension tasks with their estimated seconds, in order; one the time left cannot hold is skipped."""

    queue: deque[tuple[PairTask, float]]
    budget: TimeBudget
    skipped: int = 0

    def next_task(self, busy: int) -> Task | None:
        while self.queue:
            task, seconds = self.queue.popleft()
            if self.budget.fits(seconds):
                return task
            self.skipped += 1
        return None


def run_tasks(executor: Executor, tasks: Tasks, write: Callable[[Finished], None]) -> None:
    """A campaign's loop: next task, run, write; until no task is left and none runs.

    The next task is asked for whenever the executor has room (the local one: after each write; Ray: at
    once, for as many as the source gives), and each finished task is written before the loop goes on.
    """
    while True:
        task = tasks.next_task(executor.busy) if executor.has_room() else None
        if task is not None:
            executor.submit(task)
        elif executor.busy:
            write(executor.next_finished())
        else:
            return


class _Campaign:
    """One campaign's state between its writes: the dataset, the summary, the workloads whose profile failed,
    the time budget and the pairs still wider than their target."""

    def __init__(self, dataset, resolved, config, device_name, summary, on_event, stops: StopSignals) -> None:
        self.dataset = dataset
        self.resolved = resolved
        self.config = config
        self.device_name = device_name
        self.summary = summary
        self.emit = on_event or (lambda event: None)
        self.stops = stops
        self.broken: dict[str, tuple[str, str]] = {}
        self.budget = TimeBudget(None)
        # Pairs whose latest row missed the target: the task that measures them, the seconds it took so far
        # and its widest half-width.
        self.wide: dict[Pair, tuple[PairTask, float, float]] = {}

    def run(self, executor: Executor, profile_missing: bool, retry_failed: bool, picker: PairPicker) -> None:
        # An executor spanning several machines (Ray) records each row under its node's device name.
        device = None if executor.spans_nodes else self.device_name
        if profile_missing:
            profiles = self.missing_profiles(device)
            if profiles:
                executor.prepare(list(profiles))
            run_tasks(executor, TaskQueue(deque(profiles)), self.write_profile)
        context = CampaignContext(
            self.dataset, self.resolved, self.config, self.device_name, device, retry_failed, self.broken
        )
        plan = picker.plan(context)
        self.summary.total, self.summary.skipped = plan.total, plan.skipped
        self.emit(CampaignEvent("plan", plan.skipped, plan.total, message=plan.message))
        for row in plan.unrunnable:
            self.write_pair(row)
        if isinstance(plan, TaskQueue) and plan.tasks:
            executor.prepare(list(plan.tasks))
        planned = _Budgeted(plan, self.budget)
        run_tasks(executor, planned, lambda finished: self.write_pair(finished.row, finished.task))
        if planned.stopped and isinstance(plan, TaskQueue):
            self.summary.left = len(plan.tasks)
        if not planned.stopped:
            if retry_failed:
                self.add_earlier_misses(device)
            self.extend(executor)
        self.summary.missed = sorted((task.name_a, task.name_b) for task, _, _ in self.wide.values())

    def missing_profiles(self, device: str | None) -> list[ProfileTask]:
        """The listed workloads without a solo profile on this device, mode and size."""
        have = set(on_device(self.dataset.read_profiles(), self.config, device)["workload"])
        return [ProfileTask(spec, name) for spec, name in self.resolved if name not in have]

    def add_earlier_misses(self, device: str | None) -> None:
        """The pairs of the listed workloads recorded before this campaign whose rows missed its target
        (``missed_target``), to be extended after its own."""
        rows = at_split(on_device(self.dataset.read_pairs(), self.config, device), self.config)
        specs = {name: spec for spec, name in self.resolved}
        rows = rows[missed_target(rows, self.config.ci_target)]
        for r in rows.itertuples(index=False):
            key = Pair.of(r.workload_a, r.workload_b)
            if key in self.wide or r.workload_a not in specs or r.workload_b not in specs:
                continue
            task = PairTask(specs[r.workload_a], specs[r.workload_b], r.workload_a, r.workload_b)
            took = float(getattr(r, "pair_s", math.nan))
            self.wide[key] = (task, took if took > 0 else math.nan, _widest(r.ci_a, r.ci_b))

    def extend(self, executor: Executor) -> None:
        """Extension rounds for the pairs in ``wide``, while the budget holds them (``run_campaign``)."""
        for round_ in range(1, self.config.extend_rounds + 1):
            if not self.wide:
                return
            known = [took for _, took, _ in self.wide.values() if took > 0]
            typical = float(np.median(known)) if known else 0.0
            queue: deque[tuple[PairTask, float]] = deque()
            for task, took, _ in self.wide.values():
                # Round k runs up to max_repeats more repeats of 2**k-long windows: about 2**k first passes.
                queue.append((dataclasses.replace(task, extend=round_), (took if took > 0 else typical) * 2**round_))
            tasks = _Extensions(queue, self.budget)
            run_tasks(executor, tasks, self.write_extension)
            if tasks.skipped:
                return

    def write_profile(self, finished: Finished) -> None:
        """Write a profile's row; a workload that failed alone must not end the campaign: it goes to the
        failures, its pairs are recorded with its status, and a rerun (``--retry-failed``) tries again."""
        name = finished.task.name
        if finished.row is None:
            error = str(ProfileFailed(finished.status, finished.error))
            self.summary.failures.append((name, "(solo profile)", finished.status, error))
            self.broken[name] = (finished.status, error)
            return
        with self.stops.deferred():
            write_rows(self.dataset, "profiles", [finished.row])
        self.summary.profiled += 1
        self.emit(CampaignEvent("profile", 0, len(self.resolved), row=finished.row, message=f"profiled {name}"))

    def write_pair(self, row: dict, task: PairTask | None = None) -> None:
        with self.stops.deferred():
            write_rows(self.dataset, "pairs", [row])
        summary = self.summary
        summary.measured += 1
        summary.by_status[row["status"]] = summary.by_status.get(row["status"], 0) + 1
        if row["status"] != "ok":
            summary.failures.append((row["workload_a"], row["workload_b"], row["status"], row["error"]))
        took = row.get("pair_s", math.nan)
        if took == took:
            self.budget.pair_s.append(float(took))
        if task is not None and row["status"] == "ok" and row.get("precision") == "missed":
            self.wide[Pair.of(row["workload_a"], row["workload_b"])] = (task, took, _widest(row["ci_a"], row["ci_b"]))
        self.emit(CampaignEvent("pair", summary.skipped + summary.measured, summary.total, row=row))

    def write_extension(self, finished: Finished) -> None:
        """Write an extension's row in place of the pair's, if it measured; a failed one leaves the earlier row."""
        row, task = finished.row, finished.task
        key = Pair.of(row["workload_a"], row["workload_b"])
        _, took, widest = self.wide.pop(key)
        if row["status"] != "ok":
            self.summary.failures.append((row["workload_a"], row["workload_b"], row["status"],
                                          f"extension round {task.extend} failed, the earlier row is kept: "
                                          f"{row['error']}"))
            return
        row["pair_s"] = float(row["pair_s"]) + (took if took > 0 else 0.0)
        with self.stops.deferred():
            write_rows(self.dataset, "pairs", [row])
        self.summary.extended += 1
        now = _widest(row["ci_a"], row["ci_b"])
        if row["precision"] == "missed":
            self.wide[key] = (dataclasses.replace(task, extend=0), row["pair_s"], now)
        message = (f"extended {row['workload_a']}|{row['workload_b']} (round {task.extend}, {row['trials']} repeats): "
                   f"+-{widest * 100:.1f}% -> +-{now * 100:.1f}%, target {self.config.ci_target * 100:g}% "
                   f"{row['precision']}")
        self.emit(CampaignEvent("extend", self.summary.skipped + self.summary.measured, self.summary.total, row=row,
                                message=message))


def _widest(ci_a: float, ci_b: float) -> float:
    """The wider of two half-widths; infinite where either is unknown (a single repeat)."""
    widths = [float(ci_a), float(ci_b)]
    return math.inf if any(w != w for w in widths) else max(widths)
