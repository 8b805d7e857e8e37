"""``sharewise collect``: pair rows (``source`` observed) from the step rates of jobs another scheduler started.

1. Read the exported series (``series``: a Prometheus server's HTTP API over a time range, or saved scrapes).
2. Find the stretches in which one job ran alone on a device and those in which two ran together
   (``intervals``), each cut into windows of at least ``min_steps`` steps.
3. Every window two jobs ran together is one repeat of a ``pairs`` run: its solo windows are the job's own
   windows alone on that device (taken in turn), else, where a job has fewer than ``repeats`` of those, its
   solo profile on that device model (``--data``). The repeats of one pair on one device model are pooled
   (a dataset keeps one row per pair, device and mode) and go through the confidence rule of ``pairs``
   (``profiler.confidence``, which ``sharewise run`` applies to the pairs its runs observe too): at least
   ``repeats`` repeats, else no row (too short), and the 95% confidence half-width of each slowdown within
   ``ci_target``, else no row (too noisy); the row's numbers (mean throughputs, slowdowns, CV, half-widths,
   trials, window length, steps) are ``pairs``' own ``aggregate``.
4. Write the rows to the dataset folder ``out`` in one atomic file (rows already there are kept; the newest
   row of a pair is the one read, as for any measurement).

Skipped, and counted: stretches of three or more jobs on one device, two jobs whose CPU core sets overlap but
differ (they interfered, but on no device a pairs row names), pairs with no rate alone, too short, too noisy.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from sharewise.datasets.pair_row import OBSERVED, pair_row
from sharewise.datasets.store import Dataset
from sharewise.errors import ConfigError
from sharewise.observe.intervals import Stretch, device_of, rate_window, stretches
from sharewise.observe.series import JobSeries, Observed, read_prometheus, read_scrapes
from sharewise.profiler import confidence
from sharewise.profiler.config import WARMUP_STEPS, RunConfig, default_mode, device_kind
from sharewise.profiler.pair import PairTask, aggregate
from sharewise.profiler.session import RepeatResult, Window

#: The ``source`` of the rows written.
#: Outcome of an interval whose pair was written.
WRITTEN = "written"


@dataclass(frozen=True)
class CollectOptions:
    """What ``collect`` reads and how it judges it. Exactly one of ``prometheus`` (a base URL, with ``start`` and
    ``end`` in unix seconds) and ``scrapes`` (saved text-format files) is given; ``ci_target`` is a fraction."""

    prometheus: str | None = None
    start: float | None = None
    end: float | None = None
    step: float = 1.0
    scrapes: tuple[Path, ...] = ()
    data: tuple[str, ...] = ()
    out: Path | None = None
    mode: str | None = None
    repeats: int = confidence.REPEATS
    ci_target: float = confidence.CI_TARGET
    min_steps: int = confidence.WINDOW_STEPS
    window_s: float = confidence.WINDOW_S
    warmup_steps: int = WARMUP_STEPS
    edge: int = 1
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if bool(self.prometheus) == bool(self.scrapes):
            raise ConfigError("give either --prometheus URL (with --start and --end) or --scrapes FILE..., not "
                              f"{'both' if self.prometheus else 'neither'}")
        if self.prometheus and (self.start is None or self.end is None):
            raise ConfigError("--prometheus needs a time range: --start and --end")
        if self.repeats < 2:
            raise ConfigError(f"--repeats must be at least 2 (a confidence interval needs two), got {self.repeats}")
        if not 0 < self.ci_target < 1:
            raise ConfigError(f"--ci-target is a percentage in (0, 100), got {self.ci_target * 100:g}")
        if self.min_steps < 1 or self.edge < 0 or self.warmup_steps < 0:
            raise ConfigError("--min-steps must be >= 1, --edge and --warmup-steps >= 0")


@dataclass
class Interval:
    """One stretch two (or more) observed jobs shared a device, and what became of it: ``WRITTEN`` or why not."""

    jobs: tuple[str, ...]
    device_name: str
    device: str
    t0: float
    t1: float
    windows: int
    outcome: str = WRITTEN
    host: str = ""


@dataclass
class CollectResult:
    """The series read, the rows made (already written where ``out`` was given), every shared interval, and
    ``skipped``: ``{reason: count}`` (an interval for device reasons, a pair for too short, too noisy, no rate
    alone)."""

    observed: Observed
    rows: pd.DataFrame
    intervals: list[Interval]
    skipped: Counter
    alone_windows: dict[str, int] = field(default_factory=dict)
    written: Path | None = None


def collect(options: CollectOptions) -> CollectResult:
    """Read, find, judge and write (module docstring); returns what was done, for the CLI's table."""
    if options.prometheus:
        observed = read_prometheus(options.prometheus, options.start, options.end, options.step, options.timeout_s)
    else:
        observed = read_scrapes(options.scrapes, options.step)
    found = stretches(observed, options.min_steps, max(options.window_s, options.step), options.warmup_steps,
                      options.edge)
    alone = AloneRates(observed, found, _profiles(options.data), options.repeats)
    skipped: Counter = Counter()
    intervals: list[Interval] = []
    pooled: dict[tuple[str, str, str, str], list[tuple[Interval, list[RepeatResult], str]]] = {}
    for st in (s for s in found if len(s.jobs) > 1):
        interval = _interval(observed, st)
        intervals.append(interval)
        mode = options.mode or default_mode(st.device.kind)
        shared = _shared_repeats(observed, st, alone, mode)
        if isinstance(shared, str):
            interval.outcome = shared
            skipped[shared.split(":")[0]] += 1
            continue
        key, repeats, sources = shared
        pooled.setdefault(key, []).append((interval, repeats, sources))
    rows = []
    for key, parts in pooled.items():
        row = _pair_row(key, parts, _config(options, key[3], sum(len(p[1]) for p in parts)))
        if isinstance(row, str):
            skipped[row.split(":")[0]] += 1
            for interval, *_ in parts:
                interval.outcome = row
        else:
            rows.append(row)
    table = pd.DataFrame(rows)
    written = Dataset(options.out).write_pairs(table) if options.out is not None and rows else None
    return CollectResult(observed, table, intervals, skipped, alone.counts(), written)


class AloneRates:
    """Each job's rate alone on a device: its own windows alone there, taken in turn (at least ``needed`` of
    them), else its solo profile on that device model (``profiles``: ``{(workload, device_name, mode): steps/s}``)."""

    def __init__(self, observed: Observed, found: list[Stretch], profiles: dict, needed: int) -> None:
        self.windows: dict[tuple[str, str], list[Window]] = {}
        for st in found:
            if len(st.jobs) == 1:
                job = observed.jobs[st.jobs[0]]
                self.windows.setdefault((job.name, device_of(job)), []).extend(w[0] for w in st.windows)
        self.profiles = profiles
        self.needed = needed
        self._turns: dict[tuple[str, str], Iterator[Window]] = {}

    def of(self, job: JobSeries, device_name: str, mode: str) -> tuple[str, Iterator[Window]] | None:
        """``("alone", windows in turn)``, ``("profile", its rate forever)``, or None where neither is known."""
        key = (job.name, device_of(job))
        if len(self.windows.get(key, [])) >= self.needed:
            return "alone", self._turns.setdefault(key, itertools.cycle(self.windows[key]))
        rate = self.profiles.get((job.name, device_name, mode))
        return None if rate is None else ("profile", itertools.repeat(rate_window(1, 1 / rate)))

    def counts(self) -> dict[str, int]:
        """Windows alone per job and device: ``{"cnn on n1:0-1": 16}``."""
        return {f"{name} on {device}": len(w) for (name, device), w in self.windows.items()}


def _shared_repeats(observed: Observed, st: Stretch, alone: AloneRates, mode: str):
    """The ``pairs`` repeats of one stretch two jobs shared: ``(pair key, repeats, "alone/profile")``, or why there
    are none (``"no rate alone: ..."``)."""
    if len(st.jobs) > 2:
        return f"{len(st.jobs)} jobs on one device"
    if not st.device.exact:
        return "core sets overlap but differ"
    a, b = sorted(st.jobs, key=lambda m: observed.jobs[m].name)
    rates = [alone.of(observed.jobs[m], st.device.name, mode) for m in (a, b)]
    missing = [observed.jobs[m].name for m, r in zip((a, b), rates, strict=True) if r is None]
    if missing:
        return f"no rate alone: {' and '.join(missing)} ran alone on no stretch and has no solo profile"
    at = (st.jobs.index(a), st.jobs.index(b))
    repeats = [
        RepeatResult([next(rates[0][1]), next(rates[1][1])], [w[at[0]], w[at[1]]],
                     sum(x.elapsed_s for x in w) / len(w), math.nan)
        for w in st.windows
    ]
    key = (observed.jobs[a].name, observed.jobs[b].name, st.device.name, mode)
    return key, repeats, f"{rates[0][0]}/{rates[1][0]}"


def _pair_row(key: tuple[str, str, str, str], parts: list, config: RunConfig) -> dict | str:
    """The pairs row of one pair's pooled repeats, or why the rule of ``pairs`` gives none."""
    repeats = [r for _, rs, _ in parts for r in rs]
    reason = _judge(repeats, config)
    if reason:
        return reason
    name_a, name_b, device_name, _ = key
    return pair_row(name_a, name_b, device_kind=device_kind(config.device), device_name=device_name,
                    mode=config.mode, size=config.size, batch_size=config.batch_size or 0,
                    isolation="observed:" + "+".join(dict.fromkeys(p[2] for p in parts)), host=parts[0][0].host,
                    **aggregate(PairTask(name_a, name_b, name_a, name_b), repeats), source=OBSERVED,
                    pair_s=sum(i.t1 - i.t0 for i, *_ in parts))


def _interval(observed: Observed, st: Stretch) -> Interval:
    names = tuple(sorted(observed.jobs[m].name for m in st.jobs))
    return Interval(names, st.device.name, ",".join(dict.fromkeys(st.device.ids)), st.t0, st.t1, len(st.windows),
                    host=st.device.host)


def _config(options: CollectOptions, mode: str, n: int) -> RunConfig:
    """The ``pairs`` settings the rule reads: at least ``repeats``, half-widths within ``ci_target``; never the
    "enough repeats, stop anyway" bound (observed windows cannot be measured again, so noise is not outwaited)."""
    device = "cpu" if mode.startswith("cpu") else "cuda"
    return RunConfig(device=device, mode=mode, repeats=options.repeats, max_repeats=max(options.repeats, n + 1),
                     ci_target=options.ci_target, min_window_steps=options.min_steps, window_s=options.window_s)


def _judge(repeats: list[RepeatResult], config: RunConfig) -> str:
    """Empty where the repeats make a row under the confidence rule (``profiler.confidence``, which ``run``
    applies to its pairings too), else why not (``too short: ...``)."""
    slow = [[r.solo[i].throughput / r.coloc[i].throughput for r in repeats] for i in (0, 1)]
    return confidence.judge(slow[0], slow[1], config.repeats, config.ci_target)


def _profiles(paths: tuple[str, ...]) -> dict[tuple[str, str, str], float]:
    """Solo throughput by ``(workload, device_name, mode)`` from the profiles of ``paths`` (later folders win);
    a mode's solo runs also answer for the modes that reuse them (``mps`` takes ``timeslice``'s)."""
    from sharewise.profiler.modes import SHARING_MODES

    out: dict[tuple[str, str, str], float] = {}
    for path in paths:
        ds = Dataset(path)
        if not ds.profiles_dir.is_dir():
            continue
        for row in ds.read_profiles().itertuples(index=False):
            out[(row.workload, row.device_name, row.mode)] = float(row.throughput)
    for name, mode in SHARING_MODES.items():
        if mode.solo_as:
            for (w, d, m), tp in list(out.items()):
                if m == mode.solo_as:
                    out.setdefault((w, d, name), tp)
    return out


__all__ = ["OBSERVED", "CollectOptions", "CollectResult", "Interval", "collect"]
