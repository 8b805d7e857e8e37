"""What a sitting of physical runs measured, pooled over its runs: solo rates, start-up times and pair slowdowns per
workload (``Sitting``), the simulator's truth for ``sharewise run --compare-sim``, the per-window slowdowns the
confidence rule judges a pair by, and the lengths that training commands ran to their own end (the next runs'
estimates)."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

#: A rate needs at least this many step reports (after the first) and this many seconds.
MIN_STEPS = 4
MIN_S = 1.5


class Sitting:
    """What a sitting measured, pooled over its runs: solo rates, start-up times and pair slowdowns per workload.

    The simulator's truth for ``--compare-sim`` comes from here, so it is measured on the same machine in the
    same hour as the physical runs it is compared with.
    """

    def __init__(self) -> None:
        self.solo: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # workload -> [steps, seconds]
        self.startup: dict[str, list[float]] = defaultdict(list)
        # workload -> seconds from a job's last step report to its process's exit noticed (interpreter teardown):
        # the slot stays held, so the simulator's truth holds it too
        self.teardown: dict[str, list[float]] = defaultdict(list)
        self.pairs: dict[tuple[str, str], list[tuple[float, float, float]]] = defaultdict(list)
        # (a, b) -> the slowdowns of a and of b in each window of their pairings (``profiler.confidence``)
        self.pair_windows: dict[tuple[str, str], tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
        self.calibrated: dict[str, dict] = {}  # workload -> {"steps_per_s", "startup_s"} of its calibration run
        self.lengths: dict[str, int] = {}  # a command's spec -> the steps it ran to its own end (latest run)

    def add_solo(self, workload: str, steps: float, seconds: float) -> None:
        pool = self.solo[workload]
        pool[0] += steps
        pool[1] += seconds

    def solo_rate(self, workload: str) -> float:
        steps, seconds = self.solo.get(workload, (0.0, 0.0))
        return steps / seconds if seconds >= MIN_S and steps >= MIN_STEPS else math.nan

    def pair(self, a: str, b: str) -> tuple[float, float, float, int]:
        """Time-weighted mean slowdowns ``(of a, of b, seconds, pairings)`` over the pairings of ``a`` with
        ``b`` in either order (a self-pair's two sides are the same workload: both get their mean)."""
        rows = [(s_a, s_b, w) for s_a, s_b, w in self.pairs.get((a, b), [])]
        if a != b:
            rows += [(s_b, s_a, w) for s_a, s_b, w in self.pairs.get((b, a), [])]
        if not rows:
            return math.nan, math.nan, 0.0, 0
        w = np.array([r[2] for r in rows])
        s_a = float(np.average([r[0] for r in rows], weights=w))
        s_b = float(np.average([r[1] for r in rows], weights=w))
        if a == b:
            s_a = s_b = (s_a + s_b) / 2
        return s_a, s_b, float(w.sum()), len(rows)

    def add_windows(self, a: str, b: str, slowdowns_a: list[float], slowdowns_b: list[float]) -> None:
        """Add the per-window slowdowns of ``a`` and of ``b`` in one pairing."""
        pool = self.pair_windows[(a, b)]
        pool[0].extend(slowdowns_a)
        pool[1].extend(slowdowns_b)

    def windows(self, a: str, b: str) -> tuple[list[float], list[float]]:
        """The per-window slowdowns ``(of a, of b)`` over every pairing of ``a`` with ``b``, in either order (what
        the confidence rule judges the pair by)."""
        got_a, got_b = self.pair_windows.get((a, b), ([], []))
        out_a, out_b = list(got_a), list(got_b)
        if a != b:
            other_b, other_a = self.pair_windows.get((b, a), ([], []))
            out_a += other_a
            out_b += other_b
        return out_a, out_b

    def to_json(self) -> dict:
        return {
            "solo": {w: list(v) for w, v in self.solo.items()},
            "startup": dict(self.startup),
            "teardown": dict(self.teardown),
            "pairs": [[a, b, *r] for (a, b), rows in self.pairs.items() for r in rows],
            "pair_windows": [[a, b, list(s_a), list(s_b)] for (a, b), (s_a, s_b) in self.pair_windows.items()],
            "calibrated": self.calibrated,
            "lengths": self.lengths,
        }

    @classmethod
    def from_json(cls, data: dict) -> Sitting:
        sitting = cls()
        for w, v in data.get("solo", {}).items():
            sitting.solo[w] = list(v)
        for w, v in data.get("startup", {}).items():
            sitting.startup[w] = list(v)
        for w, v in data.get("teardown", {}).items():
            sitting.teardown[w] = list(v)
        for a, b, s_a, s_b, secs in data.get("pairs", []):
            sitting.pairs[(a, b)].append((s_a, s_b, secs))
        for a, b, s_a, s_b in data.get("pair_windows", []):
            sitting.add_windows(a, b, s_a, s_b)
        sitting.calibrated = dict(data.get("calibrated", {}))
        sitting.lengths = {k: int(v) for k, v in data.get("lengths", {}).items()}
        return sitting
