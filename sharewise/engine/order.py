"""Compiled orderings the policies share: stable sorts, the smallest few, and longest-remaining-first.

numba's own sorts take seconds to compile, so these are written out; each gives exactly what the numpy call
it replaces gives (``tests/policy/test_policy_kernels.py`` holds them to numpy and to ``tests/policy_oracles.py``).
"""

from __future__ import annotations

import numpy as np

from sharewise.engine.compiled import kernel


@kernel
def lex_order(first, second):  # pragma: no cover - compiled; tested against numpy
    """Positions in ascending ``first``, ties in ascending ``second``, then ascending position: a bottom-up
    merge sort, so with ``second`` equal to ``first`` it is ``np.argsort(first, kind="stable")``."""
    n = first.shape[0]
    order = np.arange(n)
    spare = np.empty(n, dtype=np.int64)
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            a, b, o = lo, mid, lo
            while a < mid and b < hi:
                x, y = order[a], order[b]
                if first[y] < first[x] or (first[y] == first[x] and second[y] < second[x]):
                    spare[o] = y
                    b += 1
                else:
                    spare[o] = x
                    a += 1
                o += 1
            while a < mid:
                spare[o] = order[a]
                a += 1
                o += 1
            while b < hi:
                spare[o] = order[b]
                b += 1
                o += 1
        order, spare = spare, order
        width *= 2
    return order


@kernel
def stable_order(keys):  # pragma: no cover - compiled; tested against np.argsort(kind="stable")
    """``np.argsort(keys, kind="stable")``."""
    return lex_order(keys, keys)


@kernel
def smallest(keys, m):  # pragma: no cover - compiled; tested against np.argsort(kind="stable")
    """The first ``m`` positions of ``stable_order(keys)``, by insertion into a sorted buffer: linear in
    ``len(keys)`` for the few ``m`` a policy call needs."""
    m = min(m, keys.shape[0])
    out = np.empty(max(m, 0), dtype=np.int64)
    if m <= 0:
        return out
    filled = 0
    for i in range(keys.shape[0]):
        x = keys[i]
        if filled < m:
            j = filled
            filled += 1
        elif x < keys[out[m - 1]]:
            j = m - 1
        else:
            continue  # ties with the last kept key come after it: positions only grow
        while j > 0 and keys[out[j - 1]] > x:
            out[j] = out[j - 1]
            j -= 1
        out[j] = i
    return out


@kernel
def select_smallest(values, m):  # pragma: no cover - compiled; tested against np.partition
    """The ``m`` smallest of ``values`` (``1 <= m <= len``), in no particular order: Hoare's quickselect
    with a median-of-three pivot, on a copy (what ``np.partition(values, m - 1)[:m]`` holds)."""
    a = values.copy()
    lo, hi, k = 0, a.shape[0] - 1, m - 1
    while lo < hi:
        mid = (lo + hi) // 2
        x, y, z = a[lo], a[mid], a[hi]
        pivot = max(min(x, y), min(max(x, y), z))
        i, j = lo, hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            break
    return a[:m].copy()


@kernel
def by_sensitivity(positions, remaining, gpus):  # pragma: no cover - compiled; tested against the oracle
    """``positions`` most variability-sensitive first: longest ``remaining`` first, ties to more ``gpus``, then
    to the lower position (``pm_first.by_sensitivity`` states why)."""
    ascending = positions[stable_order(positions)]
    n = ascending.shape[0]
    longer = np.empty(n, dtype=np.float64)
    wider = np.empty(n, dtype=np.int64)
    for c in range(n):
        longer[c] = -remaining[ascending[c]]
        wider[c] = -gpus[ascending[c]]
    return ascending[lex_order(longer, wider)]
