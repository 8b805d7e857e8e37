"""The one percentile definition every part of sharewise reports with.

numpy's default ("linear", Hyndman and Fan's type 7): for ``n`` sorted values the ``q``-th percentile sits
at position ``(n - 1) * q / 100`` and interpolates linearly between its neighbours. Written out in plain
Python so the worker processes and pure trace functions need no numpy; it agrees with ``numpy.percentile``
to the last bit or two of a float.
"""

from __future__ import annotations

from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float:
    """Return the ``q``-th percentile (0-100) of ``values`` by linear interpolation; 0.0 for no values.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50)
    2.5
    >>> percentile([10.0, 20.0], 95)
    19.5
    """
    ordered = sorted(float(v) for v in values)
    if not ordered:
        return 0.0
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be within [0, 100], got {q!r}")
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    t = pos - lo
    a, b = ordered[lo], ordered[hi]
    # numpy's lerp: from the nearer end, so the result never leaves [a, b] through rounding.
    return b - (b - a) * (1.0 - t) if t >= 0.5 else a + (b - a) * t
