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


def host_busy_seconds() -> float:
    """Return CPU seconds all processes have spent busy since boot (``/proc/stat``, all cores summed).

    Busy = user + nice + system + irq + softirq + steal; steal counts because on a shared VM it is time our
    measurement did not get. Returns NaN where ``/proc/stat`` does not exist (not Linux).
    """
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()
    except OSError:
        return float("nan")
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / _CLK_TCK


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
    ran; 1.0 = another process kept every core busy).
    """

    def __init__(self, pids: Iterable[int] = ()) -> None:
        self.pids = list(pids)
        self._start: CpuSnapshot | None = None

    def _snapshot(self) -> CpuSnapshot:
        # The meter's own process counts as ours: it polls pipes while the workers run.
        ours = process_tree_cpu_seconds(self.pids) + sum(os.times()[:2])
        return CpuSnapshot(time.monotonic(), host_busy_seconds(), ours)

    def start(self) -> None:
        if self._start is not None:
            raise RuntimeError("ForeignCpuMeter.start() called twice; call stop() first")
        self._start = self._snapshot()

    def stop(self) -> float:
        if self._start is None:
            raise RuntimeError("ForeignCpuMeter.stop() called before start()")
        end = self._snapshot()
        begin, self._start = self._start, None
        return foreign_fraction(begin, end, os.cpu_count() or 1)


def foreign_fraction(begin: CpuSnapshot, end: CpuSnapshot, ncores: int) -> float:
    """Return the foreign CPU share of the machine between two snapshots (pure; clipped at 0).

    >>> foreign_fraction(CpuSnapshot(0, 10, 5), CpuSnapshot(2, 14, 8), 2)
    0.25
    """
    wall = end.wall - begin.wall
    if wall <= 0 or begin.host_busy != begin.host_busy:  # NaN check: no /proc/stat
        return float("nan") if wall > 0 else 0.0
    foreign = (end.host_busy - begin.host_busy) - (end.ours - begin.ours)
    return max(0.0, foreign / (wall * ncores))


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
