"""``WorkloadShift``: what a new workload's few measured pairs say about its other pairs (empirical Bayes).

A model that never saw a workload errs on it by a level the workload's features do not explain (on Gavel's
V100, ResNet-18 at batch 16 is slowed by nothing; the model predicts 1.5). A handful of measured pairs show
that level. The shift turns their residuals (measured log slowdown minus the model's log p50) into a
correction of every other prediction about the workload, shrunk toward zero by how much residuals of
unseen workloads vary between workloads and between devices of one workload (a random-effects model,
variance components estimated from grouped out-of-fold residuals by ``estimate_shrinkage``)::

    log y[w, b, d] = model(w, b, d) + theta[w] + delta[w, d] + noise          (w as self)
    theta[w]    ~ (0, tau_w^2),  delta[w, d] ~ (0, tau_d^2),  noise ~ (0, sigma^2)

    self shift[w, d] = a[w] + b[w, d]
    a[w]    = sum_d v[w, d] sum(r[w, d]) / (1 / tau_w^2 + sum_d v[w, d] n[w, d]),
              v[w, d] = 1 / (sigma^2 + n[w, d] tau_d^2)
    b[w, d] = sum(r[w, d] - a[w]) / (n[w, d] + lambda_d),     lambda_d = sigma^2 / tau_d^2

``a[w]`` is the best linear predictor of ``theta[w]``: the rows of one device share its ``delta``, so a
device measured three times counts less than three devices measured once (with one row per device it is
``sum(r[w]) / (n[w] + (sigma^2 + tau_d^2) / tau_w^2)``). The same holds for the workload as a partner (its
effect on the jobs next to it). A device without a measured pair of the workload takes ``a[w]``. This is
the "cheap refit" of ``suggest.refit_on_pairs``: no tree is refitted, only these sums.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

#: Smallest variance component: a component the residuals do not show still shrinks, never divides by zero.
VARIANCE_FLOOR = 1e-4
#: Sides of a shift: the column of ``PairRows.meta`` naming the workload on that side.
SIDES = {"self": "self_workload", "partner": "partner_workload"}


def _components(residual: np.ndarray, workload: np.ndarray, device: np.ndarray) -> dict[str, float]:
    """Return ``{"tau_w": .., "tau_d": .., "sigma": ..}`` (variances) of residuals grouped by workload/device.

    Moment estimates under the module's model: ``sigma`` pools the variance within (workload, device) cells;
    ``tau_d`` matches each cell's squared deviation from its workload's mean to its expectation (below);
    ``tau_w`` is the mean square of the workload means less what ``tau_d`` and ``sigma`` put in them.
    Example: two one-row cells of one workload, residuals 0.3 and -0.1, give ``tau_d`` = 0.08 (less the
    floor's noise): each deviates by 0.2 from the mean, and ``E[dev^2] = tau_d / 2`` for two equal cells.
    """
    frame = pd.DataFrame({"w": workload, "d": device, "r": residual})
    cells = frame.groupby(["w", "d"])["r"].agg(["mean", "var", "count"])
    pooled = cells[cells["count"] > 1]
    sigma = float(((pooled["count"] - 1) * pooled["var"]).sum() / max((pooled["count"] - 1).sum(), 1))
    sigma = max(sigma, VARIANCE_FLOOR)
    by_w = frame.groupby("w")["r"].agg(["mean", "count"])
    at_w = cells.index.get_level_values("w")
    n_w = by_w["count"].reindex(at_w).to_numpy(dtype=np.float64)
    dev = cells["mean"].to_numpy() - by_w["mean"].reindex(at_w).to_numpy()
    share = (cells["count"] ** 2).groupby(level="w").sum() / by_w["count"] ** 2
    # A cell's deviation from its workload's mean, which includes the cell itself, has expectation
    # tau_d * (1 - 2 p + sum p'^2) + sigma * (1/n_wd - 1/n_w), p = n_wd / n_w the cell's share of the rows:
    # the plain mean square of the deviations would see only (D - 1) / D of tau_d over D equal devices, and
    # nothing of it where a workload has one device.
    p = cells["count"].to_numpy(dtype=np.float64) / n_w
    weight = 1.0 - 2.0 * p + share.reindex(at_w).to_numpy()
    noise = sigma * (1.0 / cells["count"].to_numpy(dtype=np.float64) - 1.0 / n_w)
    total = float(weight.sum())
    tau_d = float((dev**2 - noise).sum() / total) if total > 1e-12 else 0.0
    tau_d = max(tau_d, VARIANCE_FLOOR)
    # The mean square, not the variance: a bias common to unseen workloads is something a shift should learn.
    tau_w = float(np.mean(by_w["mean"] ** 2) - np.mean(tau_d * share + sigma / by_w["count"]))
    return {"tau_w": max(tau_w, VARIANCE_FLOOR), "tau_d": tau_d, "sigma": sigma}


def estimate_shrinkage(residual: np.ndarray, meta: pd.DataFrame) -> dict[str, float]:
    """Estimate the variance components of out-of-fold log residuals, for each side.

    Returns
    -------
    dict
        ``{"self_tau_w": 0.02, "self_tau_d": 0.03, "self_sigma": 0.04, "partner_tau_w": ..., ...}``
        (variances in squared log slowdown).
    """
    residual = np.asarray(residual, dtype=np.float64)
    device = meta["device_name"].astype(str).to_numpy()
    out: dict[str, float] = {}
    for side, column in SIDES.items():
        parts = _components(residual, meta[column].astype(str).to_numpy(), device)
        out.update({f"{side}_{k}": v for k, v in parts.items()})
    return out


@dataclass
class WorkloadShift:
    """Log corrections per workload (and device) from its measured pairs, as self and as partner.

    ``tables[side]`` maps ``device -> workload -> shift`` and ``defaults[side]`` maps ``workload -> a[w]``
    (devices without a measurement); ``counts`` holds each workload's measured rows as self, the level of
    its calibrated interval. Example::

        WorkloadShift(tables={"self": {"v100": {"ResNet-18 (batch size 16)": -0.31}}, "partner": {...}},
                      defaults={"self": {"ResNet-18 (batch size 16)": -0.2}, "partner": {...}},
                      counts={"ResNet-18 (batch size 16)": 2}, device_counts={...}, shrinkage={...})
    """

    tables: dict[str, dict[str, dict[str, float]]]
    defaults: dict[str, dict[str, float]]
    counts: dict[str, int]
    device_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    shrinkage: dict[str, float] = field(default_factory=dict)

    @classmethod
    def fit(
        cls,
        residual: np.ndarray,
        meta: pd.DataFrame,
        shrinkage: dict[str, float],
        new_workloads: Iterable[str] | None = None,
    ) -> WorkloadShift:
        """Fit the shifts of ``new_workloads`` (default: every self in ``meta``) from rows' log residuals.

        ``residual`` is measured log slowdown minus the model's log p50, one per row of ``meta``. A workload's
        self shift reads the rows where it is self, its partner shift those where it is the partner.
        """
        residual = np.asarray(residual, dtype=np.float64)
        device = meta["device_name"].astype(str).to_numpy()
        new = set(map(str, new_workloads)) if new_workloads is not None else set(meta["self_workload"].astype(str))
        tables: dict[str, dict] = {}
        defaults: dict[str, dict] = {}
        counts: dict[str, int] = {}
        device_counts: dict[str, dict[str, int]] = {}
        for side, column in SIDES.items():
            workload = meta[column].astype(str).to_numpy()
            use = np.isin(workload, list(new))
            tau_w, tau_d, sigma = (shrinkage.get(f"{side}_{k}", VARIANCE_FLOOR) for k in ("tau_w", "tau_d", "sigma"))
            frame = pd.DataFrame({"w": workload[use], "d": device[use], "r": residual[use]})
            by_w = frame.groupby("w")["r"].agg(["sum", "count"])
            per = frame.groupby(["w", "d"])["r"].agg(["sum", "count"])
            weight = 1.0 / (sigma + per["count"] * tau_d)  # a cell's rows share its device term
            num = (per["sum"] * weight).groupby(level="w").sum()
            den = (per["count"] * weight).groupby(level="w").sum() + 1.0 / tau_w
            level = (num / den).reindex(by_w.index)
            frame["left"] = frame["r"] - level.reindex(frame["w"]).to_numpy()
            cells = frame.groupby(["d", "w"])["left"].agg(["sum", "count"])
            extra = cells["sum"] / (cells["count"] + sigma / tau_d)
            table: dict[str, dict[str, float]] = {}
            for (d, w), value in extra.items():
                table.setdefault(str(d), {})[str(w)] = float(level[w] + value)
            tables[side] = table
            defaults[side] = {str(w): float(v) for w, v in level.items()}
            if side == "self":
                counts = {str(w): int(n) for w, n in by_w["count"].items()}
                for (d, w), n in cells["count"].items():
                    device_counts.setdefault(str(d), {})[str(w)] = int(n)
        return cls(
            tables=tables, defaults=defaults, counts=counts, device_counts=device_counts, shrinkage=dict(shrinkage)
        )

    # ---- applying -----------------------------------------------------------------------------------------
    def side_shift(self, side: str, workloads: np.ndarray, devices: np.ndarray) -> np.ndarray:
        """Return the log shift of each (workload, device) on ``side`` ("self" or "partner"); 0 for others."""
        workloads = np.asarray(workloads, dtype=object).astype(str)
        devices = np.asarray(devices, dtype=object).astype(str)
        flat = {(d, w): v for d, per in self.tables.get(side, {}).items() for w, v in per.items()}
        known = pd.Series(flat, dtype=np.float64) if flat else pd.Series(dtype=np.float64)
        keys = pd.MultiIndex.from_arrays([devices, workloads]) if len(devices) else None
        cell = known.reindex(keys).to_numpy(dtype=np.float64, na_value=np.nan) if keys is not None else np.empty(0)
        level = pd.Series(workloads).map(self.defaults.get(side, {})).to_numpy(dtype=np.float64, na_value=np.nan)
        return np.nan_to_num(np.where(np.isnan(cell), level, cell), nan=0.0)

    def log_shift(self, meta: pd.DataFrame) -> np.ndarray:
        """Return the total log shift (self part plus partner part) of every row of ``meta``."""
        device = meta["device_name"].to_numpy()
        return self.side_shift("self", meta["self_workload"].to_numpy(), device) + self.side_shift(
            "partner", meta["partner_workload"].to_numpy(), device
        )

    def revealed(self, workloads: np.ndarray) -> np.ndarray:
        """Return each workload's number of measured rows as self (0 for workloads without a shift)."""
        return pd.Series(np.asarray(workloads, dtype=object).astype(str)).map(self.counts).fillna(0).to_numpy(np.int64)

    def posterior_sd(self, workloads: np.ndarray, devices: np.ndarray) -> np.ndarray:
        """Return the posterior sd of each (workload, device) self level: how much is still unknown."""
        per = {(d, w): n for d, inner in self.device_counts.items() for w, n in inner.items()}
        n_d = [per.get((str(d), str(w)), 0) for w, d in zip(workloads, devices, strict=True)]
        return posterior_sd(self.shrinkage, self.revealed(workloads), np.asarray(n_d, dtype=np.float64))

    # ---- persistence --------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Return plain JSON types (the sidecar's ``shift``)."""
        return {
            "tables": self.tables,
            "defaults": self.defaults,
            "counts": self.counts,
            "device_counts": self.device_counts,
            "shrinkage": self.shrinkage,
        }

    @classmethod
    def from_dict(cls, data: dict) -> WorkloadShift:
        """Rebuild from ``to_dict``'s output."""
        return cls(
            tables={
                str(s): {str(d): {str(w): float(v) for w, v in per.items()} for d, per in t.items()}
                for s, t in data.get("tables", {}).items()
            },
            defaults={str(s): {str(w): float(v) for w, v in t.items()} for s, t in data.get("defaults", {}).items()},
            counts={str(w): int(n) for w, n in data.get("counts", {}).items()},
            device_counts={
                str(d): {str(w): int(n) for w, n in t.items()} for d, t in data.get("device_counts", {}).items()
            },
            shrinkage={str(k): float(v) for k, v in data.get("shrinkage", {}).items()},
        )


def posterior_sd(shrinkage: dict[str, float], n_workload: np.ndarray, n_device: np.ndarray) -> np.ndarray:
    """Return the posterior sd of a self level after ``n_workload`` measured rows, ``n_device`` on its device.

    ``sqrt(tau_w * lambda_w / (lambda_w + n_w) + tau_d * lambda_d / (lambda_d + n_wd))``: with nothing measured,
    ``sqrt(tau_w + tau_d)``; each measurement on the device shrinks both terms, one elsewhere only the first.
    """
    tau_w, tau_d, sigma = (shrinkage.get(f"self_{k}", VARIANCE_FLOOR) for k in ("tau_w", "tau_d", "sigma"))
    lam_w, lam_d = (sigma + tau_d) / tau_w, sigma / tau_d
    n_w = np.asarray(n_workload, dtype=np.float64)
    n_d = np.asarray(n_device, dtype=np.float64)
    return np.sqrt(tau_w * lam_w / (lam_w + n_w) + tau_d * lam_d / (lam_d + n_d))


def shift_log_quantiles(model, log_q: np.ndarray, meta: pd.DataFrame) -> np.ndarray:
    """Apply ``model``'s shift and level-aware calibration to log quantiles ``log_q`` of rows ``meta``.

    ``log_q`` must come from ``predict_quantiles`` given the rows' devices (level-0 calibration of each row's
    device already applied); returns a new array.
    A model without ``shift_`` returns ``log_q`` unchanged.
    """
    shift = getattr(model, "shift_", None)
    if shift is None:
        return log_q
    out = log_q + shift.log_shift(meta)[:, None]
    calibration = getattr(model, "calibration_", None)
    if calibration is not None:
        devices = meta["device_name"].astype(str).to_numpy()
        lo, hi = calibration.corrections(shift.revealed(meta["self_workload"].to_numpy()), devices)
        lo0, hi0 = calibration.corrections(np.zeros(len(meta), dtype=np.int64), devices)
        # Level 0 (of the row's device) is in log_q already; move the outer quantiles by the difference to
        # the row's level.
        out[:, 0] += lo0 - lo
        out[:, -1] += hi - hi0
        mid = out[:, out.shape[1] // 2]
        out[:, 0], out[:, -1] = np.minimum(out[:, 0], mid), np.maximum(out[:, -1], mid)
    return out
