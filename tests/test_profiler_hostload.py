"""Host load accounting (per core and machine-wide), and the rule measurement tests follow on a busy machine.

A measurement test asserts on numbers that background load moves (two processes pinned to one core share it
with whatever else runs there). ``measure_quietly`` is that rule: measure the foreign CPU share of the
measured cores during the windows (and, where the test can, whether its repeats agree), retry when it was
disturbed, skip naming the disturbance when every attempt was, and never fail on a disturbed measurement.
Other test modules import it from here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from sharewise.profiler.hostload import (
    CpuSnapshot,
    ForeignCpuMeter,
    core_busy_seconds,
    foreign_fraction,
    host_busy_seconds,
)

T = TypeVar("T")

#: Foreign CPU share of the measured cores (mean over a pair's kept repeats) above which the numbers of a
#: measurement test are not trusted: 5% of a core moves a pinned pair's speed sum by about as much.
QUIET_LIMIT = 0.05
#: Measurements a test makes before it gives up on a quiet one and skips.
ATTEMPTS = 3
#: Seconds between two attempts.
PAUSE_S = 2.0

LINUX = os.path.exists("/proc/stat")
needs_proc_stat = pytest.mark.skipif(not LINUX, reason="reads /proc/stat, which only Linux has")


def load_problem(share: float, limit: float = QUIET_LIMIT) -> str | None:
    """Describe a foreign CPU share above ``limit`` (None when quiet; a NaN share, no ``/proc/stat``, is quiet)."""
    return f"foreign CPU load {share:.0%} of the measured cores (limit {limit:.0%})" if share > limit else None


def measure_quietly(
    measure: Callable[[], tuple[T, str | None]],
    what: str,
    attempts: int = ATTEMPTS,
    before: Callable[[], str | None] | None = None,
) -> T:
    """Return the first result of ``measure() -> (result, problem)`` that came with no problem (None).

    A problem says what disturbed the measurement (``load_problem``: foreign CPU load during the windows;
    repeats that disagree). ``before()``, when given, names a problem just before an attempt (a busy machine):
    the attempt is then spent without measuring, so a busy machine skips in seconds, not after minutes of
    runs. When every attempt was disturbed the test is skipped with the problems seen: numbers measured next
    to someone else's load say nothing about the code under test.
    """
    problems = []
    for attempt in range(attempts):
        if attempt:
            time.sleep(PAUSE_S)  # let a passing load pass
        problem = before() if before is not None else None
        if problem is None:
            result, problem = measure()
            if problem is None:
                return result
        problems.append(problem)
    pytest.skip(f"{what}: disturbed in all {attempts} attempts ({'; '.join(problems)}); rerun on a quieter machine")


def quietest_core(sample_s: float = 0.5) -> tuple[int, float]:
    """Return the core this process may use that was least busy over ``sample_s`` seconds, and its busy share.

    The caller sleeps meanwhile, so the share is foreign load (0.0 without ``/proc/stat``).
    """
    allowed = sorted(os.sched_getaffinity(0))
    before, began = core_busy_seconds(), time.monotonic()
    time.sleep(sample_s)
    after, wall = core_busy_seconds(), time.monotonic() - began
    busy = {c: min(1.0, max(0.0, after.get(c, 0.0) - before.get(c, 0.0)) / wall) for c in allowed}
    core = min(allowed, key=busy.__getitem__)
    return core, busy[core]


# -- the accounting ---------------------------------------------------------------------------------------


def test_foreign_fraction_literal():
    # 4 busy seconds on 2 cores over 2 s, 3 of them ours: 1 foreign second of 4 core-seconds.
    assert foreign_fraction(CpuSnapshot(0, 10, 5), CpuSnapshot(2, 14, 8), 2) == 0.25
    assert foreign_fraction(CpuSnapshot(0, 10, 5), CpuSnapshot(2, 11, 8), 2) == 0.0  # clipped, never negative
    assert foreign_fraction(CpuSnapshot(0, 10, 5), CpuSnapshot(0, 14, 8), 2) == 0.0  # no time passed


@needs_proc_stat
def test_per_core_busy_adds_up_to_the_host():
    cores = core_busy_seconds()
    assert sorted(cores) == list(range(len(cores))) and all(v > 0 for v in cores.values())
    total, some = host_busy_seconds(), host_busy_seconds(list(cores))
    assert some == pytest.approx(total, abs=0.05 * len(cores) + 0.1)  # read a moment apart
    assert host_busy_seconds([min(cores)]) <= some


def _spinning_on(core: int, seconds: float = 3.0) -> subprocess.Popen:
    """Start a process that spins on ``core`` for ``seconds``; return once it is pinned and spinning."""
    code = (
        f"import os, sys, time\nos.sched_setaffinity(0, {{{core}}})\nprint('pinned', flush=True)\n"
        f"t = time.time()\nwhile time.time() - t < {seconds}: pass"
    )
    hog = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert hog.stdout.readline().strip() == "pinned"
    return hog


@needs_proc_stat
def test_meter_sees_a_busy_process_on_its_core_only():
    """A spinning process pinned to one core is foreign load there: the meter of that core sees ~all of it."""
    core = min(os.sched_getaffinity(0))
    hog = _spinning_on(core)
    try:
        meter = ForeignCpuMeter(cores=[core])
        meter.start()
        time.sleep(1.0)
        share = meter.stop()
    finally:
        hog.kill()
        hog.wait()
    # Other load on that core only adds to the foreign share; the hog alone keeps it near 1.
    assert share > 0.8, share


@needs_proc_stat
def test_quietest_core_avoids_a_busy_core():
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two cores to choose between")
    hog = _spinning_on(allowed[0])
    try:
        core, share = quietest_core()
    finally:
        hog.kill()
        hog.wait()
    assert 0.0 <= share <= 1.0
    if share < 0.5:  # another process could keep the other core just as busy: only then may it pick the hog's
        assert core != allowed[0]


def test_children_that_exited_count_as_ours():
    """A worker that exits inside the metered interval took its CPU time with it; the meter must keep it ours."""
    meter = ForeignCpuMeter()
    before = meter._snapshot()[0].ours
    subprocess.run([sys.executable, "-c", "t = __import__('time').process_time\nwhile t() < 0.3: pass"], check=True)
    assert meter._snapshot()[0].ours - before >= 0.25


# -- the rule of measurement tests --------------------------------------------------------------------------


@pytest.fixture
def no_pause(monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "PAUSE_S", 0.0)


def test_measure_quietly_retries_then_returns_the_quiet_result(no_pause):
    shares = iter([0.3, 0.02])
    assert measure_quietly(lambda: ("numbers", load_problem(next(shares))), "x") == "numbers"


def test_measure_quietly_skips_with_the_load_when_always_disturbed(no_pause):
    pattern = r"x: disturbed in all 3 attempts \(foreign CPU load 30% of the measured cores \(limit 5%\); .*50%"
    with pytest.raises(pytest.skip.Exception, match=pattern):
        shares = iter([0.3, 0.4, 0.5])
        measure_quietly(lambda: (None, load_problem(next(shares))), "x")


def test_measure_quietly_does_not_measure_while_the_machine_is_busy_before(no_pause):
    measured = []
    before = iter(["busy", None])
    result = measure_quietly(lambda: (measured.append(1) or "numbers", None), "x", before=lambda: next(before))
    assert result == "numbers" and measured == [1]  # the first attempt was spent without a measurement


def test_an_unmeasurable_share_is_quiet():
    assert load_problem(float("nan")) is None and load_problem(0.05) is None and load_problem(0.051)
