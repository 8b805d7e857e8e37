"""Host CPU accounting: is the machine idle, and how much CPU did processes other than ours use?

On a 2-core machine a background process is a bigger signal than the interference being measured, so every
measurement window records the CPU seconds used by everything else and a run disturbed beyond a threshold is
retried.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _busy_by_line() -> dict[str, float]:
    """Busy CPU seconds since boot per ``/proc/stat`` line: ``{"cpu": all cores, "cpu0": ..., ...}``.

    Busy = user + nice + system + irq + softirq + steal; steal counts because on a shared VM it is time our
    measurement did not get. Empty where ``/proc/stat`` does not exist (not Linux).
    """
    try:
        with open("/proc/stat") as fh:
            lines = [line.split() for line in fh if line.startswith("cpu")]
    except OSError:
        return {}
    out = {}
    for fields in lines:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
        out[fields[0]] = (user + nice + system + irq + softirq + steal) / _CLK_TCK
    return out


def host_busy_seconds(cores: Iterable[int] | None = None) -> float:
    """Return CPU seconds spent busy since boot, all cores summed or only ``cores``; NaN where not Linux."""
    busy = _busy_by_line()
    return _busy_of(busy, None if cores is None else sorted(cores))


def _busy_of(busy: dict[str, float], cores: list[int] | None) -> float:
    if not busy:
        return float("nan")
    if cores is None:
        return busy["cpu"]
    return sum(busy.get(f"cpu{c}", 0.0) for c in cores)


def core_busy_seconds() -> dict[int, float]:
    """Return each core's busy CPU seconds since boot, e.g. ``{0: 812.4, 1: 640.1}`` (empty if not Linux)."""
    return {int(name[3:]): v for name, v in _busy_by_line().items() if name[3:].isdigit()}


def process_tree_cpu_seconds(pids: Iterable[int]) -> float:
    """Return user+system CPU seconds used so far by ``pids`` and their children (threads included)."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            procs = [proc, *proc.children(recursive=True)]
        except psutil.Error:
            continue
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                continue
    return total


@dataclass
class CpuSnapshot:
    """Busy CPU seconds of the host and of our processes at one moment."""

    wall: float
    host_busy: float
    ours: float


class ForeignCpuMeter:
    """Measures the CPU used by processes other than ``pids`` between ``start()`` and ``stop()``.

    ``stop()`` returns the foreign CPU time as a fraction of the machine over the interval (0.0 = no one else
    ran; 1.0 = another process kept every core busy). With ``cores`` (the cores the measured processes are
    pinned to) it returns the larger of that and the foreign fraction of those cores alone: load on a
    pinned process's own core takes its time directly, and load elsewhere still slows it (shared caches and
    memory, the VM host's hyperthreads: two processes pinned to one core of an otherwise busy 2-core VM
    measured a combined speed 12% under one core's). Our own processes' time counts as spent on ``cores``,
    which errs toward a lower share of them.
    """

    def __init__(self, pids: Iterable[int] = (), cores: Iterable[int] | None = None) -> None:
        self.pids = list(pids)
        self.cores = sorted(set(cores)) if cores else None
        self._start: tuple[CpuSnapshot, CpuSnapshot] | None = None

    def _snapshot(self) -> tuple[CpuSnapshot, CpuSnapshot]:
        """The machine's and ``cores``' snapshots (the same when no cores are given), from one reading."""
        # The meter's own process counts as ours (it polls pipes while the workers run), and so do its
        # children that have exited and been waited for: their CPU time left the process tree with them.
        own = os.times()
        ours = process_tree_cpu_seconds(self.pids) + own.user + own.system + own.children_user + own.children_system
        now, busy = time.monotonic(), _busy_by_line()
        machine = CpuSnapshot(now, _busy_of(busy, None), ours)
        return machine, (CpuSnapshot(now, _busy_of(busy, self.cores), ours) if self.cores else machine)

    def start(self) -> None:
        if self._start is not None:
            raise RuntimeError("ForeignCpuMeter.start() called twice; call stop() first")
        self._start = self._snapshot()

    def stop(self) -> float:
        if self._start is None:
            raise RuntimeError("ForeignCpuMeter.stop() called before start()")
        (machine0, cores0), (machine1, cores1) = self._start, self._snapshot()
        self._start = None
        share = foreign_fraction(machine0, machine1, os.cpu_count() or 1)
        if self.cores:
            share = max(share, foreign_fraction(cores0, cores1, len(self.cores)))
        return share


def foreign_fraction(begin: CpuSnapshot, end: CpuSnapshot, ncores: int) -> float:
    """Return the foreign CPU share of the machine between two snapshots (pure; clipped to [0, 1]).

    >>> foreign_fraction(CpuSnapshot(0, 10, 5), CpuSnapshot(2, 14, 8), 2)
    0.25
    """
    wall = end.wall - begin.wall
    if wall <= 0 or begin.host_busy != begin.host_busy:  # NaN check: no /proc/stat
        return float("nan") if wall > 0 else 0.0
    foreign = (end.host_busy - begin.host_busy) - (end.ours - begin.ours)
    return min(1.0, max(0.0, foreign / (wall * ncores)))


def wait_until_idle(threshold: float, sample_s: float = 0.5, max_wait_s: float = 30.0) -> float:
    """Wait until the host's CPU use over ``sample_s`` is below ``threshold`` (share of the machine).

    Returns the last measured share; the caller records it and decides what a still-busy host means.
    """
    deadline = time.monotonic() + max_wait_s
    while True:
        meter = ForeignCpuMeter()
        meter.start()
        time.sleep(sample_s)
        share = meter.stop()
        if share != share or share <= threshold or time.monotonic() >= deadline:
            return share if share == share else 0.0
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))  # let the other job get on
