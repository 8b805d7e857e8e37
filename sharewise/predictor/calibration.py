"""``ConformalCalibration``: the p10/p90 corrections a model carries, a value type (``conformal`` fits it)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sharewise.errors import ModelSchemaError

#: Target coverage of the calibrated p10-p90 interval.
COVERAGE = 0.8


@dataclass(frozen=True)
class ConformalCalibration:
    """Log corrections of the outermost quantiles per level of revealed pairs, and the shift's shrinkage.

    ``lower[k]`` is subtracted from the log p10 and ``upper[k]`` added to the log p90 of a row whose self has
    ``k`` revealed pairs (the largest level not above its count); ``devices`` holds the same per device for
    the devices calibrated on their own (``conformal``'s module docstring, step 4), the pooled ones serve the rest.
    ``shrinkage`` holds the variance components of the residuals that ``WorkloadShift`` shrinks with.
    Example::

        ConformalCalibration(lower={0: 0.12, 1: 0.08}, upper={0: 0.2, 1: 0.15}, coverage=0.8,
                             group_by="family", n_scores=1900, n_groups=7, shrinkage={...},
                             devices={"v100": {"lower": {0: 0.31, 1: 0.2}, "upper": {0: 0.45, 1: 0.3}}})
    """

    lower: dict[int, float]
    upper: dict[int, float]
    coverage: float = COVERAGE
    group_by: str = "family"
    n_scores: int = 0
    n_groups: int = 0
    shrinkage: dict = field(default_factory=dict)
    devices: dict = field(default_factory=dict)

    def level_of(self, revealed: np.ndarray) -> np.ndarray:
        """Return the calibrated level used for each count of revealed pairs (the largest level <= count)."""
        levels = np.asarray(sorted(self.lower), dtype=np.int64)
        at = np.searchsorted(levels, np.asarray(revealed, dtype=np.int64), side="right") - 1
        return levels[np.clip(at, 0, levels.size - 1)]

    def corrections(
        self, revealed: np.ndarray, devices: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Return the (lower, upper) log corrections for rows whose selves revealed ``revealed`` pairs, on
        ``devices`` (one per row; without them, or for a device without its own, the pooled corrections)."""
        keys = sorted(self.lower)
        at = np.searchsorted(keys, self.level_of(revealed))
        table = lambda c: np.array([c[k] for k in keys], dtype=np.float64)  # noqa: E731 - level -> value
        lo, hi = table(self.lower)[at], table(self.upper)[at]
        if devices is not None and self.devices and at.size:
            codes, uniques = pd.factorize(pd.Series(np.asarray(devices, dtype=object)).astype(str))
            for code, device in enumerate(uniques):
                own = self.devices.get(str(device))
                if own is not None:
                    rows = codes == code
                    lo[rows] = table(own["lower"])[at[rows]]
                    hi[rows] = table(own["upper"])[at[rows]]
        return lo, hi

    def apply(
        self, log_q: np.ndarray, revealed: np.ndarray | None = None, devices: np.ndarray | None = None
    ) -> np.ndarray:
        """Widen (or narrow) the outermost columns of sorted log quantiles ``log_q`` in place; return it.

        Without ``revealed`` every row takes level 0; without ``devices`` the pooled corrections. A narrowing
        correction never crosses the median.
        """
        if revealed is None and (devices is None or not self.devices):
            lo, hi = self.lower[0], self.upper[0]
        else:
            revealed = np.zeros(log_q.shape[0], dtype=np.int64) if revealed is None else revealed
            lo, hi = self.corrections(revealed, devices)
        mid = log_q[:, log_q.shape[1] // 2]
        log_q[:, 0] = np.minimum(log_q[:, 0] - lo, mid)
        log_q[:, -1] = np.maximum(log_q[:, -1] + hi, mid)
        return log_q

    def to_dict(self) -> dict:
        """Return plain JSON types; levels become string keys, e.g. ``{"lower": {"0": 0.12}, ...}``."""
        return {
            "lower": {str(k): float(v) for k, v in sorted(self.lower.items())},
            "upper": {str(k): float(v) for k, v in sorted(self.upper.items())},
            "coverage": float(self.coverage),
            "group_by": str(self.group_by),
            "n_scores": int(self.n_scores),
            "n_groups": int(self.n_groups),
            "shrinkage": {str(k): float(v) for k, v in self.shrinkage.items()},
            "devices": {
                str(d): {side: {str(k): float(v) for k, v in sorted(own[side].items())} for side in ("lower", "upper")}
                for d, own in sorted(self.devices.items())
            },
        }

    @classmethod
    def from_dict(cls, data: dict) -> ConformalCalibration:
        """Rebuild from ``to_dict``'s output.

        Raises
        ------
        ModelSchemaError
            ``data`` lacks the level-0 corrections.
        """
        try:
            lower = {int(k): float(v) for k, v in data["lower"].items()}
            upper = {int(k): float(v) for k, v in data["upper"].items()}
            if 0 not in lower or 0 not in upper:
                raise KeyError("0")
            devices = {
                str(d): {side: {int(k): float(v) for k, v in own[side].items()} for side in ("lower", "upper")}
                for d, own in data.get("devices", {}).items()
            }
            if any(set(own["lower"]) != set(lower) or set(own["upper"]) != set(upper) for own in devices.values()):
                raise KeyError("a device's levels differ from the pooled levels")
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ModelSchemaError(
                f"calibration must hold 'lower' and 'upper' corrections with level '0', got {data!r} ({exc}); "
                "it was not written by ConformalCalibration.to_dict: retrain the model"
            ) from None
        return cls(
            lower=lower,
            upper=upper,
            coverage=float(data.get("coverage", COVERAGE)),
            group_by=str(data.get("group_by", "family")),
            n_scores=int(data.get("n_scores", 0)),
            n_groups=int(data.get("n_groups", 0)),
            shrinkage={str(k): float(v) for k, v in data.get("shrinkage", {}).items()},
            devices=devices,
        )
