"""The confidence rule a pair observed on a running cluster passes before it becomes a pair row or the policies'
knowledge: enough windows together, and each slowdown's 95% confidence half-width over them within a target.

``sharewise collect`` (jobs another scheduler started) and ``sharewise run`` (the runs' own pairings) both judge
with ``judge``: the rule of ``pairs`` (``profiler.pair``: at least ``repeats`` repeats, half-widths within
``ci_target``) without its stop-anyway bound at ``max_repeats``, because an observed window cannot be measured
again, so noise cannot be outwaited.
"""

from __future__ import annotations

from collections.abc import Sequence

from sharewise.profiler.config import MIN_WINDOW_STEPS
from sharewise.profiler.pair import ci_halfwidth

#: Windows two jobs ran together that a row needs at least (``collect --repeats``).
REPEATS = 3
#: The largest 95% confidence half-width of each slowdown, as a fraction of it (``collect --ci-target``).
CI_TARGET = 0.05
#: A window holds at least this many steps of each job (``collect --min-steps``) ...
WINDOW_STEPS = MIN_WINDOW_STEPS
#: ... and at least this many seconds (``collect --window-s``).
WINDOW_S = 0.5


def judge(slowdowns_a: Sequence[float], slowdowns_b: Sequence[float], repeats: int = REPEATS,
          ci_target: float = CI_TARGET) -> str:
    """Empty where the per-window slowdowns of the two jobs make a row, else why not, in words.

    >>> judge([1.20, 1.21, 1.19], [1.50, 1.52, 1.49])
    ''
    >>> judge([0.95, 0.81], [0.77, 0.98])
    'too short: 2 window(s) together, 3 needed'
    >>> judge([1.0, 1.3, 0.8], [1.0, 1.0, 1.0])
    'too noisy: half-widths 60.5% and 0.0% over 3 windows, target 5%'
    """
    n = min(len(slowdowns_a), len(slowdowns_b))
    if n < repeats:
        return f"too short: {n} window(s) together, {repeats} needed"
    widths = [ci_halfwidth(list(slowdowns_a)), ci_halfwidth(list(slowdowns_b))]
    if max(widths) <= ci_target:
        return ""
    return (f"too noisy: half-widths {widths[0] * 100:.1f}% and {widths[1] * 100:.1f}% over {n} windows, target "
            f"{ci_target * 100:g}%")


__all__ = ["CI_TARGET", "REPEATS", "WINDOW_S", "WINDOW_STEPS", "judge"]
