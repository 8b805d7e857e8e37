"""``SlowdownTable``: how policies and the simulator see interference, as dense arrays over workload ids."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from sharewise.datasets.pair import both_orders
from sharewise.datasets.schema import PREDICTION_COLUMNS
from sharewise.errors import ConfigError, DatasetError, SchemaError, UnknownWorkloadError


class SlowdownTable:
    """Slowdown of a workload (self) next to another (partner), as p10/p50/p90, plus who may share at all.

    ``p10[i, j]`` etc. are the slowdown quantiles of workload ``i`` next to workload ``j`` (1.0 = no
    interference); ``allowed[i, j]`` is False for pairs that may not share (out of memory, never measured or
    predicted), and is symmetric. Lookups take integer ids (``ids()`` maps names to ids) and arrays, so a
    policy can score thousands of candidate pairs in one call.

    Built from measured pairs (``from_pairs``: the truth, p10 = p50 = p90) or from predictions
    (``from_predictions``).
    """

    def __init__(
        self,
        workloads: Sequence[str],
        p10: np.ndarray,
        p50: np.ndarray,
        p90: np.ndarray,
        allowed: np.ndarray,
        *,
        device_name: str = "",
        source: str = "",
    ) -> None:
        n = len(workloads)
        arrays = [np.asarray(a, dtype=np.float64) for a in (p10, p50, p90)]
        allowed = np.asarray(allowed, dtype=bool)
        for name, a in zip(("p10", "p50", "p90", "allowed"), [*arrays, allowed], strict=True):
            if a.shape != (n, n):
                raise ValueError(f"SlowdownTable: {name} must have shape ({n}, {n}), got {a.shape}")
        if len(set(workloads)) != n:
            raise ValueError("SlowdownTable: workload names must be unique")
        allowed = allowed & allowed.T
        for a in arrays:
            ok = np.isfinite(a) & (a > 0)
            allowed &= ok & ok.T
        self.workloads: tuple[str, ...] = tuple(str(w) for w in workloads)
        self._index = {w: i for i, w in enumerate(self.workloads)}
        self.p10, self.p50, self.p90 = (np.where(allowed, a, np.nan) for a in arrays)
        self.allowed = allowed
        for a in (self.p10, self.p50, self.p90, self.allowed):
            a.flags.writeable = False
        self.device_name = device_name
        self.source = source

    def __repr__(self) -> str:
        return (
            f"SlowdownTable({len(self.workloads)} workloads, {int(np.triu(self.allowed).sum())} shareable "
            f"pairs, device {self.device_name!r}, {self.source})"
        )

    def __len__(self) -> int:
        return len(self.workloads)

    # ---- lookups -------------------------------------------------------------------------------------
    def ids(self, names: Iterable[str], what: str = "workload") -> np.ndarray:
        """Map workload names to ids; an unknown name raises ``UnknownWorkloadError`` listing known ones.

        Names are factorized first, so a queue of 100,000 jobs of a few dozen workloads costs a few dozen
        lookups, not 100,000.
        """
        values = names if isinstance(names, pd.Series) else list(names)
        codes, uniques = pd.factorize(pd.Series(values, dtype=object))
        if (codes < 0).any():  # a missing name (None, NaN)
            raise UnknownWorkloadError(f"{what} at position {int(np.argmax(codes < 0))} is empty")
        known = np.array([self._index.get(str(u), -1) for u in uniques], dtype=np.int64)
        if (known < 0).any():
            unknown = sorted(str(u) for u, k in zip(uniques, known, strict=True) if k < 0)
            raise UnknownWorkloadError(
                f"{what} {unknown[:5]} not in the slowdown table of device {self.device_name!r}; known "
                f"workloads: {', '.join(self.workloads)}"
            )
        return known[codes] if codes.shape[0] else np.empty(0, dtype=np.int64)

    def may_share(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Return whether workload ids ``a`` and ``b`` may share a GPU (element-wise)."""
        return self.allowed[a, b]

    def quantiles(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return ``(p10, p50, p90)`` slowdowns of ``a`` next to ``b`` (NaN where they may not share)."""
        return self.p10[a, b], self.p50[a, b], self.p90[a, b]

    def slowdown(self, a: np.ndarray, b: np.ndarray, quantile: str = "p50") -> np.ndarray:
        """Return one quantile (``p10``, ``p50`` or ``p90``) of the slowdown of ``a`` next to ``b``."""
        if quantile not in ("p10", "p50", "p90"):
            raise ValueError(f"quantile must be 'p10', 'p50' or 'p90', got {quantile!r}")
        return getattr(self, quantile)[a, b]

    # ---- derived tables ------------------------------------------------------------------------------
    def aligned(self, workloads: Sequence[str]) -> SlowdownTable:
        """Return this table re-indexed to ``workloads``; names it lacks may share with nobody."""
        n = len(workloads)
        src = np.array([self._index.get(w, -1) for w in workloads], dtype=np.int64)
        have = src >= 0
        out = []
        for a in (self.p10, self.p50, self.p90, self.allowed):
            full = np.full((n, n), np.nan) if a.dtype != bool else np.zeros((n, n), dtype=bool)
            full[np.ix_(have, have)] = a[np.ix_(src[have], src[have])]
            out.append(full)
        return SlowdownTable(workloads, *out, device_name=self.device_name, source=self.source)

    def restricted(self, allowed: np.ndarray) -> SlowdownTable:
        """Return a copy that additionally forbids every pair where ``allowed`` is False."""
        return SlowdownTable(
            self.workloads,
            self.p10,
            self.p50,
            self.p90,
            self.allowed & np.asarray(allowed, dtype=bool),
            device_name=self.device_name,
            source=self.source,
        )

    # ---- construction --------------------------------------------------------------------------------
    @classmethod
    def unshared(cls, workloads: Sequence[str], *, source: str = "no pair data") -> SlowdownTable:
        """A table over ``workloads`` in which no two jobs may share a GPU (every job runs alone)."""
        n = len(workloads)
        ones = np.ones((n, n))
        return cls(workloads, ones, ones, ones, np.zeros((n, n), dtype=bool), source=source)

    @classmethod
    def from_pairs(
        cls,
        pairs: pd.DataFrame,
        *,
        device_name: str | None = None,
        mode: str | None = None,
        workloads: Sequence[str] | None = None,
    ) -> SlowdownTable:
        """Build the truth from a measured pairs table (``Dataset.read_pairs()``).

        A row ``(a, b)`` with status ``ok`` gives both directions (a next to b: ``slowdown_a``; b next to a:
        ``slowdown_b``); when both ``(a, b)`` and ``(b, a)`` were measured the estimates are averaged. A pair
        with status ``oom`` never shares, even if another row measured it; pairs without an ``ok`` row are
        unknown and do not share either. ``device_name`` (and ``mode``) pick one device's measurements; a
        table holding several without a choice is an error listing them.
        """
        pairs = _one_value(pairs, "device_name", device_name, "--device-name")
        pairs = _one_value(pairs, "mode", mode, "--mode")
        device = str(pairs["device_name"].iloc[0]) if len(pairs) else (device_name or "")
        names = _names(workloads, pairs["workload_a"], pairs["workload_b"])
        index = {w: i for i, w in enumerate(names)}
        ok = pairs[pairs["status"] == "ok"]
        a = ok["workload_a"].map(index).to_numpy()
        b = ok["workload_b"].map(index).to_numpy()
        keep = ~(pd.isna(a) | pd.isna(b))
        a, b = a[keep].astype(np.int64), b[keep].astype(np.int64)
        sa = ok["slowdown_a"].to_numpy(dtype=float)[keep]
        sb = ok["slowdown_b"].to_numpy(dtype=float)[keep]
        total, count = _accumulate(len(names), a, b, sa, sb)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = total / count
        allowed = count > 0
        oom = pairs[pairs["status"] == "oom"]
        oa = oom["workload_a"].map(index).to_numpy()
        ob = oom["workload_b"].map(index).to_numpy()
        keep = ~(pd.isna(oa) | pd.isna(ob))
        oa, ob = both_orders(oa[keep].astype(np.int64), ob[keep].astype(np.int64))
        allowed[oa, ob] = False
        return cls(names, mean, mean, mean, allowed, device_name=device, source="measured")

    @classmethod
    def from_predictions(
        cls,
        predictions: pd.DataFrame,
        *,
        device_name: str | None = None,
        workloads: Sequence[str] | None = None,
    ) -> SlowdownTable:
        """Build a table from a predictions frame (``predict_pairs`` / ``out_of_fold_predictions``).

        Columns: ``workload_a, workload_b, device_name, p10_a, p50_a, p90_a, p10_b, p50_b, p90_b``. Each row
        gives both directions; repeated pairs are averaged. Quantiles that cross (p10 > p50) are sorted.
        """
        missing = [c for c in PREDICTION_COLUMNS if c not in predictions.columns]
        if missing:
            raise SchemaError(
                f"predictions: missing column(s) {missing}; expected {list(PREDICTION_COLUMNS)}"
            )
        predictions = _one_value(predictions, "device_name", device_name, "--device-name")
        device = str(predictions["device_name"].iloc[0]) if len(predictions) else (device_name or "")
        names = _names(workloads, predictions["workload_a"], predictions["workload_b"])
        index = {w: i for i, w in enumerate(names)}
        a = predictions["workload_a"].map(index).to_numpy()
        b = predictions["workload_b"].map(index).to_numpy()
        keep = ~(pd.isna(a) | pd.isna(b))
        a, b = a[keep].astype(np.int64), b[keep].astype(np.int64)
        quantiles = []
        for q in ("p10", "p50", "p90"):
            qa = predictions[f"{q}_a"].to_numpy(dtype=float)[keep]
            qb = predictions[f"{q}_b"].to_numpy(dtype=float)[keep]
            total, count = _accumulate(len(names), a, b, qa, qb)
            with np.errstate(invalid="ignore", divide="ignore"):
                quantiles.append(total / count)
        stacked = np.sort(np.stack(quantiles), axis=0)  # NaN sorts last, and all three are NaN together
        allowed = np.isfinite(stacked).all(axis=0)
        return cls(names, *stacked, allowed, device_name=device, source="predicted")


def _one_value(df: pd.DataFrame, column: str, value: str | None, option: str) -> pd.DataFrame:
    if column not in df.columns:
        return df
    present = sorted({str(v) for v in df[column]})
    if value is None:
        if len(present) > 1:
            raise ConfigError(
                f"the data holds measurements of several {column.replace('_', ' ')}s {present}; choose one "
                f"with {option} NAME"
            )
        return df
    if value not in present:
        raise DatasetError(
            f"no pair measurements with {column} {value!r}; the data holds {present or 'none'}"
        )
    return df[df[column] == value]


def _names(workloads: Sequence[str] | None, *columns: pd.Series) -> list[str]:
    if workloads is not None:
        return [str(w) for w in workloads]
    seen: dict[str, None] = {}
    for col in columns:
        for w in col:
            seen.setdefault(str(w), None)
    return sorted(seen)


def _accumulate(
    n: int, a: np.ndarray, b: np.ndarray, va: np.ndarray, vb: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Sum and count, per (self, partner) cell, the values of pairs ``(a, b)`` in both directions."""
    rows, cols, vals = both_orders(a, b, (va, vb))
    good = np.isfinite(vals) & (vals > 0)
    total = np.zeros((n, n))
    count = np.zeros((n, n))
    np.add.at(total, (rows[good], cols[good]), vals[good])
    np.add.at(count, (rows[good], cols[good]), 1.0)
    return total, count
