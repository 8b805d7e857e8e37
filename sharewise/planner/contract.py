"""The slowdown contract: a bound per job, and per pair the split of the sharing knob that keeps every bound.

A job may carry a **bound**: a maximum slowdown (``max_slowdown``), or **protected**, which is the bound
``PROTECTED_SLOWDOWN`` while its partner takes what is left. A pair may share a device under a split of its
knob (``profiler.knob.Split``: job a's share, the rest to b). ``choose_split`` takes the predicted p50 and p90
slowdowns of both jobs at every split of a grid and returns the one that keeps **both bounds at p90** while
maximizing the pair's combined normalized throughput ``1/p50_a + 1/p50_b`` (above 1: sharing finishes more work
than taking turns); where no split keeps both bounds, or the best one does not pay, the pair is declined and the
reason says which. Ties go to the split nearer 50:50 (neither job starved for a rounding error).

The rule is the same wherever a split is chosen: ``recommend`` (the plan, and the knob it emits), and the run's
and the simulator's worlds when a policy forms a pair (so ``run --compare-sim`` compares like with like).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sharewise.errors import ConfigError

#: A protected job's bound: it keeps at least 80% of its speed (the issue's "say <= 1.25"), its partner taking
#: what is left.
PROTECTED_SLOWDOWN = 1.25
#: The splits ``choose_split`` considers: job a's share in percent, 10:90 to 90:10 in steps of 10.
SPLIT_GRID = tuple(range(10, 100, 10))


@dataclass(frozen=True)
class Bound:
    """What one job was promised: its slowdown stays at most ``max_slowdown`` (inf: no bound).

    ``Bound.parse("1.3")`` is ``Bound(1.3)``; ``Bound.parse("protected")`` is ``Bound(1.25, protected=True)``;
    ``Bound.parse("")`` is ``Bound()``.
    """

    max_slowdown: float = math.inf
    protected: bool = False

    def __post_init__(self) -> None:
        if not (self.max_slowdown >= 1.0):
            raise ConfigError(
                f"a job's bound is a maximum slowdown of at least 1.0 (1.0: not slowed at all), got "
                f"{self.max_slowdown!r}; write e.g. 1.3, or 'protected' for {PROTECTED_SLOWDOWN}"
            )

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.max_slowdown)

    @classmethod
    def parse(cls, text) -> Bound:
        """Read a queue cell: empty/NaN (no bound), ``protected``, or a number >= 1."""
        if text is None or (isinstance(text, float) and math.isnan(text)):
            return cls()
        value = str(text).strip().lower()
        if value in ("", "none", "nan"):
            return cls()
        if value in ("protected", "protect", "yes", "true"):
            return cls(PROTECTED_SLOWDOWN, protected=True)
        try:
            return cls(float(value))
        except ValueError:
            raise ConfigError(
                f"a job's bound is a maximum slowdown (e.g. 1.3), 'protected' ({PROTECTED_SLOWDOWN}) or empty, got "
                f"{text!r}"
            ) from None

    def __str__(self) -> str:
        if self.protected:
            return f"protected (<= {self.max_slowdown:g})"
        return f"<= {self.max_slowdown:g}" if self.bounded else "none"


@dataclass(frozen=True)
class Choice:
    """The split chosen for one pair (``split`` in percent for job a; None: declined) and why.

    Example: ``Choice(split=70, p50=(1.18, 2.4), p90=(1.24, 2.9), throughput=1.26, reason="70:30 keeps a <=
    1.25 at p90 (1.24) ...")``.
    """

    split: int | None
    p50: tuple[float, float]
    p90: tuple[float, float]
    throughput: float
    reason: str

    @property
    def shares(self) -> bool:
        return self.split is not None


def choose_split(
    splits: Sequence[int],
    p50_a: Sequence[float],
    p90_a: Sequence[float],
    p50_b: Sequence[float],
    p90_b: Sequence[float],
    bound_a: Bound = Bound(),
    bound_b: Bound = Bound(),
) -> Choice:
    """Choose the split that keeps both bounds at p90 and maximizes ``1/p50_a + 1/p50_b`` (module docstring).

    ``splits`` are job a's shares in percent; the other arguments are the predicted slowdowns at each of them.

    >>> c = choose_split([30, 50, 70], [2.4, 1.6, 1.2], [2.7, 1.8, 1.24], [1.3, 1.6, 2.2], [1.4, 1.8, 2.6],
    ...                  Bound(1.25, protected=True))
    >>> c.split, round(c.throughput, 3)
    (70, 1.288)
    >>> choose_split([50], [1.6], [1.8], [1.6], [1.8], Bound(1.25)).split is None
    True
    """
    splits = np.asarray(splits, dtype=np.int64)
    p50a, p90a = np.asarray(p50_a, dtype=np.float64), np.asarray(p90_a, dtype=np.float64)
    p50b, p90b = np.asarray(p50_b, dtype=np.float64), np.asarray(p90_b, dtype=np.float64)
    if not (splits.shape == p50a.shape == p90a.shape == p50b.shape == p90b.shape) or splits.size == 0:
        raise ConfigError(f"choose_split needs one prediction per split, got {splits.size} splits and "
                          f"{p50a.size}/{p90a.size}/{p50b.size}/{p90b.size} predictions")
    keeps = (p90a <= bound_a.max_slowdown) & (p90b <= bound_b.max_slowdown)
    throughput = 1.0 / p50a + 1.0 / p50b
    if not keeps.any():
        i = int(np.argmin(np.maximum(p90a / bound_a.max_slowdown, p90b / bound_b.max_slowdown)))
        return Choice(None, (float(p50a[i]), float(p50b[i])), (float(p90a[i]), float(p90b[i])), float(throughput[i]),
                      f"declined: no split keeps both bounds at p90 (a {bound_a}, b {bound_b}); the nearest, "
                      f"{splits[i]}:{100 - splits[i]}, gives p90 {p90a[i]:.2f} and {p90b[i]:.2f}")
    # Highest throughput among the splits that keep both bounds; ties (to 1e-9) to the split nearest 50:50.
    score = np.where(keeps, throughput, -np.inf)
    best = score.max()
    near = np.flatnonzero(score >= best - 1e-9)
    i = int(near[np.argmin(np.abs(splits[near] - 50))])
    split = int(splits[i])
    p50, p90 = (float(p50a[i]), float(p50b[i])), (float(p90a[i]), float(p90b[i]))
    if throughput[i] <= 1.0:
        return Choice(None, p50, p90, float(throughput[i]),
                      f"declined: the best split that keeps both bounds, {split}:{100 - split}, does not pay "
                      f"(1/p50_a + 1/p50_b = {throughput[i]:.2f} <= 1: taking turns finishes more work)")
    return Choice(split, p50, p90, float(throughput[i]),
                  f"{split}:{100 - split} keeps a {bound_a} (p90 {p90[0]:.2f}) and b {bound_b} (p90 {p90[1]:.2f}) "
                  f"with combined throughput {throughput[i]:.2f} (1/p50_a + 1/p50_b), the highest of "
                  f"{int(keeps.sum())} split(s) that keep both")
