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


# ---- the contract where a scheduler runs it: the simulator and a physical run ------------------------------------
def type_label(workload: str, bound: Bound) -> str:
    """A job type's name: its workload, with its bound where it has one (``"ncf [<= 1.3]"``), as ``recommend`` names
    it; a job without a bound is of its workload's type (``"ncf"``), so a queue without bounds keeps its names."""
    return workload if not bound.bounded else f"{workload} [{bound}]"


@dataclass(frozen=True)
class SplitTable:
    """Slowdowns of each workload next to each other at each split of the knob (measured or predicted).

    ``p50[k, i, j]`` is workload ``i``'s slowdown at its share ``splits[k]`` (percent) next to ``j``, which takes
    the rest; NaN where unknown. ``splits`` is sorted and holds ``100 - s`` with every ``s``, so the same pair
    seen from ``j`` is ``[mirror(k), j, i]``.

    Example (one row, ``a`` at 70:30 next to ``b``): ``splits == (30, 70)``, ``p50[1, a, b] == 1.2`` (a at 70),
    ``p50[0, b, a] == 2.2`` (b at 30).
    """

    workloads: tuple[str, ...]
    splits: tuple[int, ...]
    p10: np.ndarray
    p50: np.ndarray
    p90: np.ndarray

    def mirror(self, k: int) -> int:
        """The index of ``100 - splits[k]``."""
        return len(self.splits) - 1 - k

    @classmethod
    def from_rows(cls, workloads: Sequence[str], workload_a, workload_b, split_a, q_a, q_b) -> SplitTable:
        """Build from rows of pairs at a split: ``split_a`` job a's percent, ``q_a`` / ``q_b`` (rows x 3) the
        p10, p50, p90 of a and of b there (a measured row repeats its slowdown three times). Rows of the same
        pair at the same split (either order) are averaged; rows of other workloads or without a split are
        left out."""
        names = tuple(str(w) for w in workloads)
        index = {w: i for i, w in enumerate(names)}
        split = np.asarray(split_a, dtype=np.float64)
        ia = np.array([index.get(str(w), -1) for w in workload_a], dtype=np.int64)
        ib = np.array([index.get(str(w), -1) for w in workload_b], dtype=np.int64)
        q_a, q_b = np.asarray(q_a, dtype=np.float64).reshape(-1, 3), np.asarray(q_b, dtype=np.float64).reshape(-1, 3)
        keep = (ia >= 0) & (ib >= 0) & np.isfinite(split) & np.isfinite(q_a).all(1) & np.isfinite(q_b).all(1)
        keep &= (q_a > 0).all(1) & (q_b > 0).all(1)
        split = np.round(split[keep]).astype(np.int64)
        ia, ib, q_a, q_b = ia[keep], ib[keep], q_a[keep], q_b[keep]
        splits = tuple(sorted(set(split.tolist()) | {100 - s for s in split.tolist()}))
        at = {s: k for k, s in enumerate(splits)}
        n, ks = len(names), len(splits)
        total, count = np.zeros((ks, n, n, 3)), np.zeros((ks, n, n))
        ka = np.array([at[s] for s in split.tolist()], dtype=np.int64)
        kb = np.array([at[100 - s] for s in split.tolist()], dtype=np.int64)
        np.add.at(total, (ka, ia, ib), q_a)
        np.add.at(count, (ka, ia, ib), 1.0)
        np.add.at(total, (kb, ib, ia), q_b)
        np.add.at(count, (kb, ib, ia), 1.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.sort(total / count[..., None], axis=-1)  # quantiles that cross are sorted
        return cls(names, splits, mean[..., 0], mean[..., 1], mean[..., 2])


@dataclass
class TypedTables:
    """The tables of a trace's job types under the contract (``typed_tables``).

    ``types`` are the job types (``type_label``), ``view`` what the policies see and ``truth`` what the jobs
    truly do, both over ``types``; ``split[x, y]`` is type ``x``'s share (percent) where a pair of ``x`` and ``y``
    shares at a split, NaN where it shares without one (or not at all); ``choices`` each split pair's
    ``Choice``, ``declined`` why each pair no split (or no bound) allows may not share; ``truth_measured`` and
    ``truth_predicted`` count the split pairs whose truth is a measured row at the split and those whose truth is
    the prediction there.
    """

    types: tuple[str, ...]
    workload: dict[str, str]
    bound: dict[str, Bound]
    view: object
    truth: object
    split: np.ndarray
    choices: dict[tuple[str, str], Choice]
    declined: dict[tuple[str, str], str]
    truth_measured: int = 0
    truth_predicted: int = 0


def typed_tables(jobs: Sequence[tuple[str, Bound]], view, truth, view_at: SplitTable | None = None,
                 truth_at: SplitTable | None = None, max_slowdown: float = math.inf,
                 fits: np.ndarray | None = None) -> TypedTables:
    """The policies' and the truth's tables over the job types of ``jobs`` (``(workload, bound)`` per job).

    ``view`` and ``truth`` are ``engine.table.SlowdownTable`` over the same workloads, without the knob;
    ``view_at`` the policies' slowdowns at the splits (None: the mode has no knob, or no split is chosen),
    ``truth_at`` the measured ones there; ``fits`` which workload pairs may share at all (memory; default all).
    Per pair of types:

    - where ``view_at`` holds the pair, the split is ``choose_split``'s among the splits it holds (a type next to
      its own kind: 50:50 only, the two jobs being interchangeable), a job without a bound held to
      ``max_slowdown`` (the SLO: the split keeps it there too, as ``recommend`` does); both tables hold the
      pair at that split (the truth: ``truth_at`` where it was measured there, else the view's p50); a pair no
      split allows may not share;
    - elsewhere the pair keeps its tables without the knob, and may share only where each bounded job's
      predicted p90 keeps its bound.

    Returns
    -------
    TypedTables
    """
    from sharewise.engine.table import SlowdownTable

    bound_of: dict[str, Bound] = {}
    workload_of: dict[str, str] = {}
    for workload, bound in jobs:
        label = type_label(str(workload), bound)
        workload_of[label], bound_of[label] = str(workload), bound
    types = tuple(sorted(workload_of))
    view = view.aligned(truth.workloads)
    for at in (view_at, truth_at):
        if at is not None and tuple(at.workloads) != tuple(truth.workloads):
            raise ConfigError("typed_tables: the tables at the splits must be over the truth's workloads, in its order")
    index = {w: i for i, w in enumerate(truth.workloads)}
    missing = sorted({w for w in workload_of.values() if w not in index})
    if missing:
        raise ConfigError(f"job types of workload(s) {missing} have no row in the slowdown tables; known: "
                          f"{', '.join(view.workloads)}")
    n = len(types)
    q = {name: np.full((2, n, n), np.nan) for name in ("p10", "p50", "p90")}  # 0: view, 1: truth
    allowed = np.zeros((n, n), dtype=bool)
    split = np.full((n, n), np.nan)
    out = TypedTables(types, workload_of, bound_of, None, None, split, {}, {})
    for x, tx in enumerate(types):
        for y in range(x, n):
            ty = types[y]
            ia, ib = index[workload_of[tx]], index[workload_of[ty]]
            ba, bb = bound_of[tx], bound_of[ty]
            got = _at_split(view_at, truth_at, ia, ib, x == y, fits is None or bool(fits[ia, ib]), ba, bb,
                            max_slowdown)
            if got is not None:
                choice, values, measured = got
                if not choice.shares:
                    out.declined[(tx, ty)] = choice.reason
                    continue
                out.choices[(tx, ty)] = choice
                split[x, y], split[y, x] = choice.split, 100 - choice.split
                out.truth_measured += measured
                out.truth_predicted += not measured
            else:
                if not (view.allowed[ia, ib] and truth.allowed[ia, ib]):
                    continue
                p90a, p90b = float(view.p90[ia, ib]), float(view.p90[ib, ia])
                if p90a > ba.max_slowdown or p90b > bb.max_slowdown:
                    out.declined[(tx, ty)] = (f"declined without a split: the predicted p90 {p90a:.2f} and {p90b:.2f} "
                                              f"break a {ba} or b {bb}")
                    continue
                values = {name: ((getattr(view, name)[ia, ib], getattr(view, name)[ib, ia]),
                                 (truth.p50[ia, ib], truth.p50[ib, ia])) for name in q}
            for name, ((va, vb), (ta, tb)) in values.items():
                q[name][0, x, y], q[name][0, y, x] = va, vb
                q[name][1, x, y], q[name][1, y, x] = ta, tb
            allowed[x, y] = allowed[y, x] = True
    out.view = SlowdownTable(types, q["p10"][0], q["p50"][0], q["p90"][0], allowed, device_name=view.device_name,
                             source=view.source)
    out.truth = SlowdownTable(types, q["p50"][1], q["p50"][1], q["p50"][1], allowed, device_name=truth.device_name,
                              source=truth.source)
    return out


def _at_split(view_at, truth_at, ia, ib, same_type, fits, ba, bb, max_slowdown):
    """``(choice, values, truth measured)`` of one type pair at its splits, None where ``view_at`` holds none of
    them (the pair keeps its tables without the knob)."""
    if view_at is None or not fits:
        return None
    splits = np.asarray(view_at.splits)
    mirror = splits.size - 1 - np.arange(splits.size)
    ks = np.flatnonzero(np.isfinite(view_at.p50[:, ia, ib]) & np.isfinite(view_at.p50[mirror, ib, ia])
                        & np.isfinite(view_at.p90[:, ia, ib]) & np.isfinite(view_at.p90[mirror, ib, ia]))
    if same_type:
        ks = ks[splits[ks] == 50]
    if ks.size == 0:
        return None
    hold_a = ba if ba.bounded else Bound(max_slowdown) if math.isfinite(max_slowdown) else Bound()
    hold_b = bb if bb.bounded else Bound(max_slowdown) if math.isfinite(max_slowdown) else Bound()
    mk = mirror[ks]
    choice = choose_split(splits[ks], view_at.p50[ks, ia, ib], view_at.p90[ks, ia, ib], view_at.p50[mk, ib, ia],
                          view_at.p90[mk, ib, ia], hold_a, hold_b)
    if not choice.shares:
        return choice, None, False
    k = int(np.flatnonzero(splits == choice.split)[0])
    m = int(mirror[k])
    truth_a = truth_b = math.nan
    if truth_at is not None and choice.split in truth_at.splits:
        kt = truth_at.splits.index(choice.split)
        truth_a, truth_b = truth_at.p50[kt, ia, ib], truth_at.p50[len(truth_at.splits) - 1 - kt, ib, ia]
    measured = bool(np.isfinite(truth_a) and np.isfinite(truth_b))
    if not measured:
        truth_a, truth_b = view_at.p50[k, ia, ib], view_at.p50[m, ib, ia]
    values = {name: ((getattr(view_at, name)[k, ia, ib], getattr(view_at, name)[m, ib, ia]), (truth_a, truth_b))
              for name in ("p10", "p50", "p90")}
    return choice, values, measured
