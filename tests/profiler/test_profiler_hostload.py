"""Host load accounting (per core and machine-wide), and the rules measurement tests follow on a busy machine.

The rules live in ``tests/loadguard.py`` (``measure_quietly``, ``bound_if_quiet``, ``clearly_above_one``,
``check_growth``); this module tests them. Its names are re-exported here for tests that imported them from here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import loadguard
import pytest
from loadguard import (  # noqa: F401 - re-exported for tests that import the rule from here
    ATTEMPTS,
    PAUSE_S,
    QUIET_LIMIT,
    LoadWarning,
    LoadWindow,
    bound_if_quiet,
    check_growth,
    clearly_above_one,
    load_problem,
    measure_quietly,
    quietest_core,
)

from sharewise.profiler.hostload import (
    CpuSnapshot,
    ForeignCpuMeter,
    core_busy_seconds,
    foreign_fraction,
    host_busy_seconds,
)

LINUX = os.path.exists("/proc/stat")
needs_proc_stat = pytest.mark.skipif(not LINUX, reason="reads /proc/stat, which only Linux has")


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
    began = time.monotonic()
    total, some = host_busy_seconds(), host_busy_seconds(list(cores))
    gap = time.monotonic() - began
    # Read a moment apart, and a loaded machine may pause this process in that moment: every core may have
    # been busy for the whole gap, so the tolerance grows with it (a fixed one failed beside a CPU hog).
    assert some == pytest.approx(total, abs=0.05 * len(cores) + 0.1 + gap * len(cores))
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
    monkeypatch.setattr(loadguard, "PAUSE_S", 0.0)


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


def test_bound_if_quiet_asserts_in_a_quiet_window_and_warns_in_a_busy_one():
    quiet, busy = LoadWindow(), LoadWindow()
    quiet.share, busy.share = 0.0, 0.4
    bound_if_quiet(quiet, True, "holds")
    with pytest.raises(AssertionError, match="took too long"):
        bound_if_quiet(quiet, False, "took too long")
    with pytest.warns(LoadWarning, match=r"not checked: took too long \(foreign CPU load 40%"):
        bound_if_quiet(busy, False, "took too long")
    with pytest.raises(AssertionError):  # quiet enough for a looser limit: checked, and it fails
        bound_if_quiet(busy, False, "took too long", limit=0.5)


def test_clearly_above_one_is_the_half_width_rule():
    clearly_above_one(2.0, 0.4, "x")  # 2.0 * 0.6 = 1.2
    for value, halfwidth in ((1.2, 0.2), (0.9, 0.0), (float("nan"), 0.1), (2.0, float("nan")), (float("inf"), 0.1)):
        with pytest.raises(AssertionError):
            clearly_above_one(value, halfwidth, "x")


def _spin(units: int) -> None:
    x = 0
    for _ in range(units):
        x += 1


def test_growth_check_passes_linear_work_and_fails_quadratic_work(no_pause):
    """A path of size-proportional work passes at about 10x; one of size-squared work fails at about 100x
    (a machine saturated by others makes it skip instead, which is what the rule says)."""
    ratio = check_growth("linear", lambda size: lambda: _spin(400 * size), 50, "units")
    assert 5 < ratio <= loadguard.GROWTH_LIMIT
    try:
        with pytest.raises(pytest.fail.Exception, match=r"quadratic: 300 units cost .* in two quiet windows"):
            check_growth("quadratic", lambda size: lambda: _spin(6 * size * size), 30, "units")
    except pytest.skip.Exception as skipped:
        pytest.skip(f"the machine was saturated: {skipped}")


def test_growth_check_skips_with_the_load_when_no_window_is_quiet(no_pause, monkeypatch):
    monkeypatch.setattr(loadguard, "GROWTH_SATURATED", -1.0)  # every window counts as saturated
    with pytest.raises(pytest.skip.Exception, match=r"quadratic: not confirmed in 3 attempts .* while foreign CPU"):
        check_growth("quadratic", lambda size: lambda: _spin(6 * size * size), 30, "units")
