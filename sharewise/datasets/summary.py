"""Summaries of a dataset: counts, and the slowdown matrix (row workload next to column workload)."""

from __future__ import annotations

import pandas as pd


def directed_slowdowns(pairs: pd.DataFrame) -> pd.DataFrame:
    """Return one row per (self, partner) direction of the ok pairs: slowdown of self next to partner.

    Example: a row ``workload_a="x", workload_b="y", slowdown_a=1.4, slowdown_b=1.2`` yields
    ``(self="x", partner="y", slowdown=1.4)`` and ``(self="y", partner="x", slowdown=1.2)``.
    """
    ok = pairs[pairs["status"] == "ok"]
    keep = ["device_name", "mode"]
    a, b = ok[keep].copy(), ok[keep].copy()
    for frame, me, other in ((a, "a", "b"), (b, "b", "a")):
        frame["self"] = ok[f"workload_{me}"]
        frame["partner"] = ok[f"workload_{other}"]
        frame["slowdown"] = ok[f"slowdown_{me}"]
        frame["cv"] = ok[f"cv_{me}"]
        frame["ci"] = ok[f"ci_{me}"] if f"ci_{me}" in ok else float("nan")
    same = ok["workload_a"] == ok["workload_b"]
    out = pd.concat([a, b[~same.to_numpy()]], ignore_index=True)
    return out


def slowdown_matrix(pairs: pd.DataFrame, value: str = "slowdown") -> pd.DataFrame:
    """Return a square table: entry (r, c) = ``value`` of workload r next to workload c (mean over rows).

    ``value`` is ``"slowdown"``, ``"cv"`` (spread over repeats) or ``"ci"`` (the relative 95% confidence
    half-width; NaN where the pairs table has none). For a self-pair the two processes' values are averaged.
    """
    directed = directed_slowdowns(pairs)
    if directed.empty:
        return pd.DataFrame()
    ok = pairs[pairs["status"] == "ok"]
    self_pairs = ok[ok["workload_a"] == ok["workload_b"]]
    if not self_pairs.empty:
        col_a, col_b = f"{value}_a", f"{value}_b"
        if col_a in self_pairs:
            means = (self_pairs[col_a] + self_pairs[col_b]) / 2
        else:
            means = pd.Series(float("nan"), index=self_pairs.index)
        directed = directed[directed["self"] != directed["partner"]]
        extra = pd.DataFrame(
            {"self": self_pairs["workload_a"], "partner": self_pairs["workload_b"], value: means}
        )
        directed = pd.concat([directed, extra], ignore_index=True)
    names = sorted(set(directed["self"]) | set(directed["partner"]))
    table = directed.pivot_table(index="self", columns="partner", values=value, aggfunc="mean", dropna=False)
    return table.reindex(index=names, columns=names)


def dataset_overview(profiles: pd.DataFrame, pairs: pd.DataFrame) -> dict:
    """Return counts a person checks first.

    Example: ``{"profiles": 8, "workloads": 8, "pairs": 36, "status": {"ok": 35, "failed": 1},
    "devices": ["AMD EPYC (2 cores)"], "modes": ["cpu"]}``
    """
    devices = sorted(set(profiles.get("device_name", [])) | set(pairs.get("device_name", [])))
    modes = sorted(set(profiles.get("mode", [])) | set(pairs.get("mode", [])))
    cols = [pairs[c] for c in ("ci_a", "ci_b") if c in pairs]
    ci = pd.concat(cols, ignore_index=True).dropna() if cols else pd.Series(dtype=float)
    return {
        "profiles": int(len(profiles)),
        "workloads": int(profiles["workload"].nunique()) if len(profiles) else 0,
        "pairs": int(len(pairs)),
        "status": {k: int(v) for k, v in pairs["status"].value_counts().items()} if len(pairs) else {},
        "devices": devices,
        "modes": modes,
        # Relative 95% confidence half-widths of the measured slowdowns (pairs with repeats that report one).
        "ci_median": float(ci.median()) if len(ci) else None,
        "ci_max": float(ci.max()) if len(ci) else None,
    }
