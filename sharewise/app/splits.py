"""The slowdown contract where a scheduler runs it (``simulate``, ``run``): each job's bound from its trace, the job
types, the tables at each pair's split, and how many bounded jobs kept their bound.

A trace may carry a ``bound`` per job (``planner.contract.Bound``). Jobs are then of **types**, a workload and a
bound (``planner.contract.type_label``), as ``recommend`` makes them: jobs of one type are interchangeable to a
policy, as jobs of one workload are without a contract. For every pair of types, where the sharing mode has a knob
and the policies have slowdowns at its splits, the split is chosen by ``planner.contract.choose_split`` from what
the policies see, and **both** tables hold the pair at that split: the policies' (their prediction there) and the
truth (the dataset's row measured at that split, else the prediction, counted in a note); a pair no split allows
may not share. Elsewhere (no knob, or ``--split none``) a pair shares without a split where each bounded job's
predicted p90 keeps its bound. The policies need no change: they see a table, over types. A physical run applies
each pair's split to its real jobs (``runtime.world``), so ``run --compare-sim`` compares like with like.

The splits considered are those the dataset has pairs measured at (with ``100 - s`` for each ``s``), or the whole
``planner.contract.SPLIT_GRID`` where the policies see a model trained on rows under the knob (``--model``).
Without a bound and without rows measured under a knob, nothing is typed and every table is as it always was.
``--bounds report`` keeps the policies as without a contract and only counts the bounded jobs' violations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sharewise.engine.table import SlowdownTable
from sharewise.errors import ConfigError, TraceError
from sharewise.planner.contract import SPLIT_GRID, Bound, SplitTable, TypedTables, type_label, typed_tables

#: Sharing modes that have a knob (``profiler.knob.knob_for``); ``timeslice`` has none.
KNOB_MODES = ("mps", "cpu", "cpu-partition")
#: ``--split``: choose each pair's split where the data allows (``auto``), or never split (``none``).
SPLIT_CHOICES = ("auto", "none")
#: ``--bounds``: keep each bound by the table (``enforce``), or only count the violations (``report``).
BOUND_CHOICES = ("enforce", "report")


def check_options(config) -> None:
    """``config.split`` and ``config.bounds`` are among their choices (``simulate`` and ``run`` share them)."""
    if config.split not in SPLIT_CHOICES:
        raise ConfigError(f"--split must be one of {list(SPLIT_CHOICES)}, got {config.split!r}")
    if config.bounds not in BOUND_CHOICES:
        raise ConfigError(f"--bounds must be one of {list(BOUND_CHOICES)}, got {config.bounds!r}")


def job_bounds(trace) -> list[Bound]:
    """Each job's bound from the trace's ``bound`` column (none without one); a bad cell is a ``TraceError`` naming
    its line."""
    if trace.bound is None:
        return [Bound()] * len(trace)
    out = []
    for cell, line in zip(trace.bound.tolist(), trace.line.tolist(), strict=True):
        try:
            out.append(Bound.parse(cell))
        except ConfigError as exc:
            raise TraceError(f"{trace.source}:{int(line)}: column 'bound': {exc}") from None
    return out


# ---- the data: rows measured without the knob, and under it ------------------------------------------------------
def knob_rows(pairs: pd.DataFrame) -> np.ndarray:
    """Which rows were measured under the sharing knob (a finite ``split_a``)."""
    if "split_a" not in pairs.columns:
        return np.zeros(len(pairs), dtype=bool)
    return np.isfinite(pd.to_numeric(pairs["split_a"], errors="coerce").to_numpy(dtype=float))


def base_truth(pairs: pd.DataFrame, device_name: str | None = None, mode: str | None = None,
               workloads: Sequence[str] | None = None) -> tuple[SlowdownTable, pd.DataFrame]:
    """The truth without the knob (``SlowdownTable.from_pairs`` of the rows measured without it), and the rows of its
    device (and mode) measured under it. Without such rows this is ``from_pairs(pairs, ...)`` itself; with them the
    device and the workloads are resolved over every row, so a workload measured only under the knob has a row."""
    under = knob_rows(pairs)
    if not under.any():
        return SlowdownTable.from_pairs(pairs, device_name=device_name, mode=mode, workloads=workloads), pairs.iloc[:0]
    every = SlowdownTable.from_pairs(pairs, device_name=device_name, mode=mode, workloads=workloads)
    mine = (pairs["device_name"].astype(str) == every.device_name).to_numpy()
    if mode is not None and "mode" in pairs.columns:
        mine &= (pairs["mode"].astype(str) == mode).to_numpy()
    base, knob = pairs[mine & ~under], pairs[mine & under]
    if base.empty:
        n = len(every.workloads)
        ones = np.ones((n, n))
        truth = SlowdownTable(every.workloads, ones, ones, ones, np.zeros((n, n), dtype=bool),
                              device_name=every.device_name, source="measured")
    else:
        truth = SlowdownTable.from_pairs(base, workloads=every.workloads)
    return truth, knob


def measured_at(knob: pd.DataFrame, workloads: Sequence[str]) -> SplitTable | None:
    """The slowdowns measured under the knob (rows with status ``ok``), per split; None where there are none."""
    ok = knob[knob["status"] == "ok"] if "status" in knob.columns else knob
    if ok.empty:
        return None
    s_a, s_b = ok["slowdown_a"].to_numpy(dtype=float), ok["slowdown_b"].to_numpy(dtype=float)
    return SplitTable.from_rows(workloads, ok["workload_a"], ok["workload_b"], ok["split_a"].to_numpy(dtype=float),
                                np.repeat(s_a[:, None], 3, axis=1), np.repeat(s_b[:, None], 3, axis=1))


def at_predictions(predictions: pd.DataFrame, workloads: Sequence[str]) -> SplitTable | None:
    """The rows of a predictions frame at a split (a finite ``split_a``), as a ``SplitTable``; None where none."""
    under = knob_rows(predictions)
    if not under.any():
        return None
    rows = predictions[under]
    return SplitTable.from_rows(workloads, rows["workload_a"], rows["workload_b"], rows["split_a"].to_numpy(float),
                                rows[["p10_a", "p50_a", "p90_a"]].to_numpy(float),
                                rows[["p10_b", "p50_b", "p90_b"]].to_numpy(float))


def measured_splits(knob: pd.DataFrame) -> tuple[int, ...]:
    """The splits the dataset has rows at (status ``ok``), each with its mirror ``100 - s``, in order."""
    ok = knob[knob["status"] == "ok"] if "status" in knob.columns else knob
    values = {int(round(float(v))) for v in ok["split_a"]} if len(ok) else set()
    return tuple(sorted(values | {100 - v for v in values}))


def grid_for(model) -> tuple[int, ...]:
    """``SPLIT_GRID`` where ``model`` was trained on rows under the knob (its training summary's ``knob_rows``)."""
    return SPLIT_GRID if int((getattr(model, "training_summary_", None) or {}).get("knob_rows", 0) or 0) else ()


def not_oom(pairs: pd.DataFrame, workloads: Sequence[str]) -> np.ndarray:
    """Which workload pairs were never measured out of memory (either order, with or without the knob)."""
    index = {w: i for i, w in enumerate(workloads)}
    fits = np.ones((len(workloads), len(workloads)), dtype=bool)
    if "status" in pairs.columns:
        oom = pairs[pairs["status"] == "oom"]
        for a, b in zip(oom["workload_a"].astype(str), oom["workload_b"].astype(str), strict=True):
            if a in index and b in index:
                fits[index[a], index[b]] = fits[index[b], index[a]] = False
    return fits


# ---- typing a trace ----------------------------------------------------------------------------------------------
@dataclass
class Contract:
    """A trace's jobs under the contract: each one's type (its label in the tables) and bound, the typed tables
    (None where nothing is typed: the tables are as without a contract), and what the run's notes say of it."""

    labels: list[str]
    bounds: list[Bound]
    typed: TypedTables | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def bounded(self) -> bool:
        return any(b.bounded for b in self.bounds)

    def split_matrix(self) -> np.ndarray | None:
        """Each pair of types' split (the row type's percent; NaN for none), None where no pair has one."""
        if self.typed is None or not np.isfinite(self.typed.split).any():
            return None
        return self.typed.split

    def bound_values(self) -> list[float]:
        """Each job's bound as a number (inf: none)."""
        return [b.max_slowdown for b in self.bounds]


def wants_contract(config, bounds: list[Bound], knob: pd.DataFrame, mode: str, model_grid: bool = False) -> bool:
    """Whether the tables are typed: a bound to keep, or splits to choose (a knob mode with rows or a model under
    it), and ``--bounds enforce``."""
    if config.bounds == "report":
        return False
    splits = config.split == "auto" and mode in KNOB_MODES and (len(measured_splits(knob)) > 0 or model_grid)
    return any(b.bounded for b in bounds) or splits


def type_jobs(workloads: Sequence[str], bounds: list[Bound], view: SlowdownTable | None, truth: SlowdownTable,
              view_at: SplitTable | None, truth_at: SplitTable | None, max_slowdown: float, fits: np.ndarray | None,
              mode: str, split: str) -> Contract:
    """Type the jobs (``workloads``, ``bounds``: one per job) and build the tables over their types
    (``planner.contract.typed_tables``). ``view`` None: the policies see the truth (``--oracle``), and the splits
    are chosen from what was measured at them. ``mode`` and ``split`` (``--split``) say whether any split is
    chosen at all; the notes say what was chosen and where each truth at a split came from."""
    knob = split == "auto" and mode in KNOB_MODES
    oracle = view is None
    view_at = (truth_at if oracle else view_at) if knob else None
    typed = typed_tables(list(zip(workloads, bounds, strict=True)), truth if oracle else view, truth,
                         view_at=view_at, truth_at=truth_at if knob else None, max_slowdown=max_slowdown, fits=fits)
    labels = [type_label(str(w), b) for w, b in zip(workloads, bounds, strict=True)]
    n_bounded = sum(b.bounded for b in bounds)
    kinds = len({lab for lab, b in zip(labels, bounds, strict=True) if b.bounded})
    notes = [f"slowdown contract: {n_bounded} of {len(bounds)} job(s) carry a bound ({kinds} bounded type(s)); "
             "jobs are of types (workload, bound) and the policies and the truth see each pair of types as it shares"]
    if view_at is not None:
        shared = len(typed.choices)
        notes.append(
            f"splits of the {mode} knob chosen per pair of types among "
            f"{', '.join(f'{s}:{100 - s}' for s in view_at.splits)}"
            " (planner.contract.choose_split: every bound kept at the predicted p90, a job without one held to "
            f"--max-slowdown {max_slowdown:g}, then the highest 1/p50_a + 1/p50_b; a type next to its own kind 50:50): "
            f"{shared} pair(s) share at a split, the truth there measured for {typed.truth_measured} and "
            f"the policies' prediction for {typed.truth_predicted} (no row measured at the chosen split)")
    else:
        why = "--split none" if split == "none" else f"the {mode!r} mode has no knob" if mode not in KNOB_MODES \
            else "no slowdowns at any split (no pair measured under the knob)"
        notes.append(f"no split is chosen ({why}): a pair shares without one where each bounded job's predicted p90 "
                     "keeps its bound")
    if typed.declined:
        first = next(iter(typed.declined.items()))
        notes.append(f"{len(typed.declined)} pair(s) of types may not share under the contract, e.g. "
                     f"{first[0][0]} + {first[0][1]}: {first[1]}")
    return Contract(labels, list(bounds), typed, notes)


# ---- checking it -------------------------------------------------------------------------------------------------
def bound_metrics(realized: np.ndarray, bounds: Sequence[float]) -> dict:
    """The bounded jobs' violations: ``{"bounded_jobs": 4, "bound_violations": 1, "bound_violation_rate": 0.25}``
    over the bounded jobs that finished (a realized slowdown that is a number); {} where no job is bounded. A job
    violates its bound where its realized slowdown exceeds it."""
    bound = np.asarray(bounds, dtype=float)
    realized = np.asarray(realized, dtype=float)
    counted = np.isfinite(bound) & np.isfinite(realized)
    if not np.isfinite(bound).any():
        return {}
    n = int(counted.sum())
    bad = int((realized[counted] > bound[counted] * (1 + 1e-9)).sum())
    return {"bounded_jobs": n, "bound_violations": bad, "bound_violation_rate": bad / n if n else math.nan}


def bound_lines(summary: dict, jobs: dict[str, list[dict]] | None = None) -> list[str]:
    """The verdict's lines on the contract, one per policy with bounded jobs: how many exceeded their bound, and
    (``jobs``: each policy's jobs with ``bound`` and ``realized_slowdown``) which."""
    lines = []
    for name, m in summary["policies"].items():
        if not m.get("bounded_jobs"):
            continue
        line = (f"{name}: {m['bound_violations']} of {m['bounded_jobs']} bounded job(s) exceeded their bound "
                f"(violation rate {m['bound_violation_rate']:.0%})")
        broke = [j for j in (jobs or {}).get(name, []) if j.get("bound_max") is not None
                 and j.get("realized_slowdown") is not None and j["realized_slowdown"] > j["bound_max"] * (1 + 1e-9)]
        if broke:
            line += ": " + ", ".join(f"{j['job_id']} ({j['bound']}) at {j['realized_slowdown']:.2f}" for j in broke[:6])
            line += ", ..." if len(broke) > 6 else ""
        lines.append(line)
    return lines
