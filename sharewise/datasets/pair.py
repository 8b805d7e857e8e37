"""The ``Pair`` value type: two workloads that share a device, in one canonical order.

A measurement of ``(a, b)`` is also one of ``(b, a)``: the pairs table stores each unordered pair once
(``workload_a``, ``workload_b``) with both slowdowns, and every reader needs it in both directions (the
slowdown of self next to partner). ``Pair`` holds the canonical order for sets and keys; ``both_orders``
turns column arrays of pairs into the two directions, so no module writes that by hand.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, order=True)
class Pair:
    """An unordered pair of workload names, stored sorted (``a <= b``); a self-pair has ``a == b``.

    >>> Pair.of("resnet18", "bert")
    Pair(a='bert', b='resnet18')
    >>> Pair.of("bert", "resnet18") == Pair.of("resnet18", "bert")
    True
    """

    a: str
    b: str

    def __post_init__(self) -> None:
        if self.a > self.b:
            raise ValueError(f"Pair({self.a!r}, {self.b!r}) is not in canonical order; build it with Pair.of")

    @classmethod
    def of(cls, x: str, y: str) -> Pair:
        """Return the pair of ``x`` and ``y`` in canonical order."""
        x, y = str(x), str(y)
        return cls(x, y) if x <= y else cls(y, x)

    @property
    def is_self_pair(self) -> bool:
        return self.a == self.b

    def other(self, workload: str) -> str:
        """Return the partner of ``workload`` in this pair."""
        if workload == self.a:
            return self.b
        if workload == self.b:
            return self.a
        raise ValueError(f"{workload!r} is not in {self}")

    def orders(self) -> tuple[tuple[str, str], ...]:
        """Return the distinct (self, partner) directions: two, or one for a self-pair."""
        return ((self.a, self.b),) if self.is_self_pair else ((self.a, self.b), (self.b, self.a))

    def __iter__(self) -> Iterator[str]:
        return iter((self.a, self.b))

    def __str__(self) -> str:
        return f"{self.a}|{self.b}"


def both_orders(first, second, *values: tuple) -> tuple[np.ndarray, ...]:
    """Return ``(self, partner, *values)`` with every pair in both directions: the rows, then flipped.

    ``first``/``second`` are the two members of each pair (names or ids); each entry of ``values`` is a
    ``(value of first, value of second)`` tuple of arrays, so the value travels with its own member.

    >>> s, p, v = both_orders(np.array([0]), np.array([1]), (np.array([1.5]), np.array([1.2])))
    >>> s.tolist(), p.tolist(), v.tolist()
    ([0, 1], [1, 0], [1.5, 1.2])
    """
    first, second = np.asarray(first), np.asarray(second)
    out = [np.concatenate([first, second]), np.concatenate([second, first])]
    for of_first, of_second in values:
        out.append(np.concatenate([np.asarray(of_first), np.asarray(of_second)]))
    return tuple(out)
