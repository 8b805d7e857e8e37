"""The orders a policy walks its queue in: ``queue_keys`` (FIFO or SJF), and the smallest keys first without
sorting a queue of thousands at every call (``smallest_first``, ``rest_in_order``, ``in_order``). The compiled
orderings the policies' kernels share are in ``order``."""

from __future__ import annotations

import numpy as np

from sharewise.engine.policy_types import Queue


def smallest_first(keys: np.ndarray, m: int) -> np.ndarray:
    """Return positions of at least the ``m`` smallest ``keys`` in ascending order (ties: lower position).

    The result is an exact prefix of ``np.argsort(keys, kind="stable")`` holding every key up to the
    ``m``-th smallest, found in linear time: a policy that places at most ``m`` jobs per call does not sort
    a queue of thousands at every event. Continue with ``rest_in_order`` if the prefix runs out.
    """
    n = keys.shape[0]
    if m >= n or n <= 64:
        return np.argsort(keys, kind="stable")
    if m <= 0:
        return np.empty(0, dtype=np.int64)
    kth = np.partition(keys, m - 1)[m - 1]
    idx = np.flatnonzero(keys <= kth)
    return idx[np.argsort(keys[idx], kind="stable")]


def rest_in_order(keys: np.ndarray, prefix: np.ndarray) -> np.ndarray:
    """Return the positions not in ``prefix`` (from ``smallest_first``), in ascending key order."""
    if prefix.shape[0] == keys.shape[0]:
        return np.empty(0, dtype=np.int64)
    mask = np.ones(keys.shape[0], dtype=bool)
    mask[prefix] = False
    idx = np.flatnonzero(mask)
    return idx[np.argsort(keys[idx], kind="stable")]


def in_order(keys: np.ndarray, m: int, positions: np.ndarray | None = None):
    """Yield ``positions`` (default: 0..n-1) in ascending ``keys`` order, lazily.

    Only the ``m`` smallest keys (and their ties) are sorted up front; the rest is sorted only if the caller
    keeps iterating (see ``smallest_first``).
    """
    if positions is None:
        positions = np.arange(keys.shape[0])
    prefix = smallest_first(keys, m)
    yield from positions[prefix].tolist()
    rest = rest_in_order(keys, prefix)
    if rest.shape[0]:
        yield from positions[rest].tolist()


def queue_keys(queue: Queue, order: str) -> np.ndarray:
    """Return each queued job's sort key for ``order``: ``fifo`` (arrival) or ``sjf`` (remaining time)."""
    if order == "sjf":
        return queue.remaining
    if order == "fifo":
        return queue.arrival
    raise ValueError(f"queue order must be 'fifo' or 'sjf', got {order!r}")
