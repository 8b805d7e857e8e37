"""Which free GPUs a job gets: packed on as few nodes as possible (``packed_block``), and the same rule handing
out many blocks at once without a scan per block (``FreeGpus``, what ``recommend`` needs for 100,000 jobs)."""

from __future__ import annotations

import bisect

import numpy as np


def packed_block(free: np.ndarray, node: np.ndarray, k: int) -> np.ndarray | None:
    """Choose ``k`` GPUs among those marked in ``free``, on as few nodes as possible, ascending; ``None`` if too few.

    A job that fits on one node goes to the node with the fewest free GPUs that still holds it (best fit, so
    whole nodes stay free for big jobs); a bigger job takes the fullest-free nodes first. The rule is compiled
    (``engine.gpus.pick_free_gpus``, which takes each GPU's occupancy and answers an empty array where too few are
    free; imported on first use: ``recommend`` hands GPUs out with ``FreeGpus`` and never loads numba). Example:
    ``packed_block(np.array([True, True, False, True]), np.array([0, 0, 1, 1]), 1)`` is ``array([3])``.
    """
    from sharewise.engine.gpus import pick_free_gpus as pick

    if k <= 0:
        return np.empty(0, dtype=np.int64)
    chosen = pick(~np.asarray(free, dtype=bool), node, k)
    return chosen if chosen.shape[0] else None


class FreeGpus:
    """Free GPUs handed out block by block with ``packed_block``'s rule, without scanning every GPU per block.

    ``take(k)`` returns what ``packed_block(free, node, k)`` returns on the GPUs not taken yet, as a sorted
    list (``None`` if fewer than ``k`` are left), and takes them. Handing out ``m`` blocks costs
    O(GPUs + m log nodes) instead of ``packed_block``'s O(m x GPUs): what ``recommend`` needs for 100,000
    jobs on 50,000 GPUs. Every rule takes a prefix of a node's free GPUs in index order, so each node keeps
    its free GPUs as a sorted list and a cursor; two sorted lists of node keys answer the rule's questions:
    ``(count, first free GPU, node)`` for one GPU (the node with the fewest free GPUs, ties to the lowest GPU
    index) and ``(count, node)`` for a block that fits on a node (the fewest free GPUs that still hold it,
    ties to the lowest node).

    Example: ``FreeGpus(np.array([True, True, False, True]), np.array([0, 0, 1, 1])).take(1)`` is ``[3]``
    (node 1 has the fewest free GPUs), then ``take(2)`` is ``[0, 1]``.
    """

    def __init__(self, free: np.ndarray, node: np.ndarray) -> None:
        idx = np.flatnonzero(free)
        nodes = np.asarray(node)[idx]
        order = np.argsort(nodes, kind="stable")  # by node, GPUs ascending inside a node
        idx, nodes = idx[order], nodes[order]
        starts = np.flatnonzero(np.r_[True, nodes[1:] != nodes[:-1]]) if idx.shape[0] else np.empty(0, np.int64)
        bounds = np.r_[starts, idx.shape[0]].tolist()
        self._gpus = {int(nodes[s]): idx[s:e].tolist() for s, e in zip(bounds[:-1], bounds[1:], strict=True)}
        self._cursor = dict.fromkeys(self._gpus, 0)
        self._one = sorted((len(g), g[0], n) for n, g in self._gpus.items())
        self._many = sorted((len(g), n) for n, g in self._gpus.items())
        self.left = int(idx.shape[0])

    def _count(self, n: int) -> int:
        return len(self._gpus[n]) - self._cursor[n]

    def _take_from(self, n: int, k: int) -> list[int]:
        """Take the first ``k`` free GPUs of node ``n`` and move its keys."""
        count, at = self._count(n), self._cursor[n]
        gpus = self._gpus[n]
        del self._one[bisect.bisect_left(self._one, (count, gpus[at], n))]
        del self._many[bisect.bisect_left(self._many, (count, n))]
        self._cursor[n] = at + k
        if count > k:
            bisect.insort(self._one, (count - k, gpus[at + k], n))
            bisect.insort(self._many, (count - k, n))
        self.left -= k
        return gpus[at : at + k]

    def take_ones(self, m: int) -> list[int]:
        """Take ``m`` GPUs one at a time (what ``m`` calls of ``take(1)`` return, in order); fewer if fewer are left.

        ``take(1)`` takes from the node with the fewest free GPUs, which stays the one with the fewest until it
        is empty: so each node in turn gives up its free GPUs in one step.
        """
        out: list[int] = []
        while len(out) < m and self.left:
            count, _, n = self._one[0]
            out.extend(self._take_from(n, min(count, m - len(out))))
        return out

    def take(self, k: int) -> list[int] | None:
        """Take ``k`` GPUs by ``packed_block``'s rule and return them ascending; ``None`` if too few are left."""
        if k > self.left:
            return None
        if k <= 0:
            return []
        if k == 1:
            return self._take_from(self._one[0][2], 1)
        i = bisect.bisect_left(self._many, (k, -1))
        if i < len(self._many):
            return self._take_from(self._many[i][1], k)
        # No node holds k: the fullest-free nodes first, GPUs in index order among nodes of equal count. Of a
        # group of equal count only its r nodes with the lowest first GPU can supply its r lowest GPUs.
        picked: list[tuple[int, int]] = []  # (GPU, node)
        end = len(self._one)
        while len(picked) < k:
            count = self._one[end - 1][0]
            start = bisect.bisect_left(self._one, (count, -1, -1))
            want = k - len(picked)
            group = [(g, n) for _, _, n in self._one[start : min(end, start + want)] for g in self._free_of(n)]
            picked.extend(sorted(group)[:want])
            end = start
        taken: dict[int, int] = {}
        for _, n in picked:
            taken[n] = taken.get(n, 0) + 1
        for n, m in taken.items():
            self._take_from(n, m)
        return sorted(g for g, _ in picked)

    def _free_of(self, n: int) -> list[int]:
        return self._gpus[n][self._cursor[n] :]
