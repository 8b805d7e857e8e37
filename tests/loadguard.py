"""How a test that measures time, throughput, growth or interference holds on a busy machine: import from here.

The machine a test runs on is shared: other processes take CPU, and on a VM so does the host (steal time, and
speed drifts that no process shows). A measured number moves with that load, so a test never asserts a bound on
it without knowing the load its window ran under. The rules, one tool each:

1. **Measure the foreign load of the window and retry** (``measure_quietly``). ``measure()`` returns
   ``(result, problem)``; ``problem`` is None for a quiet window, else what disturbed it: ``load_problem`` of
   the foreign CPU share (``sharewise.profiler.hostload.ForeignCpuMeter``, which counts steal time), or repeats
   that disagree. A disturbed attempt is spent; after ``ATTEMPTS`` of them the test is skipped, naming each
   problem. A disturbed measurement never fails a test::

       def measure():
           with LoadWindow() as window:
               row = measure_something()
           return row, window.problem(limit=0.10)

       row = measure_quietly(measure, "conv next to matmul")

2. **A bound that depends on the machine's state is not asserted as such.** It becomes a property that holds on
   any machine (``clearly_above_one``: measured, finite, and above 1 by more than its own confidence
   half-width), or it is checked only when its window was quiet (``bound_if_quiet``: asserted in a quiet window;
   in a busy one the test goes on and a ``LoadWarning`` in the summary says which bound was not checked).

3. **Growth checks** (``check_growth``): a path a user scales runs at ``n`` and ``10 n`` in one process and fails
   if its cost grows more than ``GROWTH_LIMIT`` (20x): linear work grows about 10x, an O(n^2) or
   O(jobs x GPUs) path about 100x. The cost is the process's CPU time (``time.process_time``, which a busy
   neighbour or the host's steal barely moves, unlike wall time) on one thread, with the test session's
   objects frozen out of the garbage collector's passes (the path's own collections count), the best of
   ``GROWTH_REPEATS`` interleaved repeats of each size. A ratio above the limit counts only from a window
   that other processes did not saturate (``GROWTH_SATURATED``) and where the repeats of each size agreed
   within ``GROWTH_SPREAD``; it must be seen twice to fail. (A neighbour moves CPU time far less than wall
   time, and alike for both sizes, which alternate; the margin of 2x over linear growth covers what it
   does move, and a bigger working set's cache misses.) Windows that were not quiet are retried,
   then the test is skipped with the load seen. A quadratic part shows only once it costs about an eighth
   of the linear work at ``n`` (then ``10 n`` costs more than 20x): size ``n`` for that, and check it by
   making the path quadratic on purpose once.

Everything here is plain functions over ``hostload``'s meters; ``tests/profiler/test_profiler_hostload.py`` tests them.
"""

from __future__ import annotations

import gc
import json
import math
import os
import time
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from typing import TypeVar

import pytest

from sharewise.profiler.hostload import ForeignCpuMeter, core_busy_seconds

T = TypeVar("T")

#: Foreign CPU share of the measured cores (mean over a pair's kept repeats) above which the numbers of a
#: measurement test are not trusted: 5% of a core moves a pinned pair's speed sum by about as much.
QUIET_LIMIT = 0.05
#: Measurements a test makes before it gives up on a quiet one and skips.
ATTEMPTS = 3
#: Seconds between two attempts.
PAUSE_S = 2.0

#: A growth check fails when the cost at ``GROWTH_FACTOR x n`` exceeds this many times the cost at ``n``.
GROWTH_LIMIT = 20.0
GROWTH_FACTOR = 10
#: Interleaved repeats of each size per attempt (the best of them counts).
GROWTH_REPEATS = 3
#: Largest/smallest CPU time among one size's repeats beyond which an attempt's window was unsteady.
GROWTH_SPREAD = 1.5
#: Foreign share of the machine above which a growth window was saturated by other processes.
GROWTH_SATURATED = 0.9
#: Environment variable naming a JSON-lines file each growth check appends its measurement to
#: (``benchmarks/bench_growth.py`` sets it to print the growth table).
GROWTH_REPORT_ENV = "SHAREWISE_GROWTH_REPORT"


class LoadWarning(UserWarning):
    """A bound of a measurement test was not checked because its window was not quiet."""


def load_problem(share: float, limit: float = QUIET_LIMIT) -> str | None:
    """Describe a foreign CPU share above ``limit`` (None when quiet; a NaN share, no ``/proc/stat``, is quiet)."""
    return f"foreign CPU load {share:.0%} of the measured cores (limit {limit:.0%})" if share > limit else None


class LoadWindow:
    """A measurement window: ``with LoadWindow() as w: ...`` then ``w.share`` (foreign CPU share of the machine,
    or of ``cores``, steal included) and ``w.problem(limit)``. ``pids`` are our own child processes."""

    def __init__(self, pids=(), cores=None) -> None:
        self._meter = ForeignCpuMeter(pids, cores)
        self.share = float("nan")

    def __enter__(self) -> LoadWindow:
        self._meter.start()
        return self

    def __exit__(self, *exc) -> None:
        self.share = self._meter.stop()

    def problem(self, limit: float = QUIET_LIMIT) -> str | None:
        """``load_problem`` of this window's share (None when quiet)."""
        return load_problem(self.share, limit)


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


def clearly_above_one(value: float, halfwidth: float, what: str) -> None:
    """Assert the machine-independent form of "this slowdown is real": ``value`` is measured, finite, and above 1
    by more than its own relative 95% confidence half-width (``value * (1 - halfwidth) > 1``)."""
    assert math.isfinite(value) and math.isfinite(halfwidth) and halfwidth >= 0, (what, value, halfwidth)
    assert value * (1.0 - halfwidth) > 1.0, f"{what}: {value:.3f} +- {halfwidth:.1%} is not clearly above 1"


def bound_if_quiet(window: LoadWindow, holds: bool, what: str, limit: float = QUIET_LIMIT) -> None:
    """Assert ``holds`` (a bound that load can break, e.g. on elapsed time) when ``window`` was quiet; in a busy
    window warn (``LoadWarning``, shown in the summary) that ``what`` was not checked, and go on."""
    problem = window.problem(limit)
    if problem is None:
        assert holds, what
    else:
        warnings.warn(LoadWarning(f"not checked: {what} ({problem})"), stacklevel=2)


# -- growth checks ------------------------------------------------------------------------------------------


def cpu_seconds(fn: Callable[[], object]) -> float:
    """Return the CPU time (all threads of this process) ``fn()`` took."""
    began = time.process_time()
    fn()
    return time.process_time() - began


@contextmanager
def session_objects_frozen():
    """Collect garbage once, then move every object alive to the collector's permanent generation until the
    block ends: a collection inside it then passes over the measured path's own objects only, not over all the
    test session's (which would make its cost depend on what ran before)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def growth_window_limit() -> float:
    """Foreign share of the machine above which a growth window counts as busy: every core taken by others
    (0.9), so the measuring thread shared its core and its caches the whole time."""
    return GROWTH_SATURATED


def check_growth(
    path: str,
    prepare: Callable[[int], Callable[[], object]],
    n: int,
    unit: str,
    factor: int = GROWTH_FACTOR,
    limit: float = GROWTH_LIMIT,
    repeats: int = GROWTH_REPEATS,
    attempts: int = ATTEMPTS,
) -> float:
    """Fail if ``path`` costs more than ``limit`` times as much at ``factor * n`` as at ``n``; return the ratio.

    ``prepare(size)`` builds the input of one size (not timed) and returns a function that runs the path on it.
    Both sizes run ``repeats`` times, interleaved, on one thread; see the module docstring for when a ratio
    above the limit fails, retries or skips. The measurement is appended to the file named by
    ``$SHAREWISE_GROWTH_REPORT``, if set.
    """
    from threadpoolctl import threadpool_limits

    run_small, run_big = prepare(n), prepare(factor * n)
    over, problems = 0, []
    for attempt in range(attempts):
        if attempt:
            time.sleep(PAUSE_S)
        small, big = [], []
        with threadpool_limits(limits=1), session_objects_frozen(), LoadWindow() as window:
            run_small()  # warm: lazy imports, compiled kernels (a first big run is one more repeat's worth)
            for _ in range(repeats):
                small.append(cpu_seconds(run_small))
                big.append(cpu_seconds(run_big))
        ratio = min(big) / max(min(small), 1e-9)
        spread = max(max(s) / max(min(s), 1e-9) for s in (small, big))
        _report(path, unit, n, factor, min(small), min(big), ratio, window.share)
        if ratio <= limit:
            return ratio
        unsteady = f"repeats of one size differed {spread:.1f}x (limit {GROWTH_SPREAD:g}x)"
        problem = window.problem(growth_window_limit()) or (unsteady if spread > GROWTH_SPREAD else None)
        seen = (
            f"{path}: {factor * n} {unit} cost {min(big) * 1e3:.1f} ms of CPU, {ratio:.0f}x the "
            f"{min(small) * 1e3:.1f} ms of {n} {unit} (limit {limit:.0f}x; linear work grows about {factor}x)"
        )
        if problem is None:
            over += 1
            if over == 2:
                pytest.fail(f"{seen}, in two quiet windows: the path grows faster than linearly")
            problems.append(f"{seen} in a quiet window")
        else:
            problems.append(f"{seen} while {problem}")
    pytest.skip(f"{path}: not confirmed in {attempts} attempts ({'; '.join(problems)}); rerun on a quieter machine")


def _report(path, unit, n, factor, small_s, big_s, ratio, share) -> None:
    out = os.environ.get(GROWTH_REPORT_ENV)
    if not out:
        return
    row = {"path": path, "unit": unit, "n": n, "big": factor * n, "small_cpu_s": small_s, "big_cpu_s": big_s}
    with open(out, "a") as fh:
        fh.write(json.dumps({**row, "ratio": ratio, "foreign_share": share}) + "\n")
