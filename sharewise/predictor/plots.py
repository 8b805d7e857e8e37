"""Evaluation figures: predicted against measured slowdown, and error by held-out group (PNG, Agg backend)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from sharewise.predictor.choices import plural
from sharewise.predictor.evaluation import CVResult
from sharewise.predictor.metrics import slowdown_metrics


def plot_evaluation(cv: CVResult, out_dir: str | os.PathLike) -> list[Path]:
    """Write ``predicted_vs_measured.png`` and ``error_by_group.png`` into ``out_dir``; return their paths."""
    import matplotlib

    matplotlib.use("Agg", force=True)  # files only: never needs a display
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = cv.rows
    paths = []

    fig, ax = plt.subplots(figsize=(6.5, 6))
    groups = sorted(rows["group"].astype(str).unique())
    cmap = plt.get_cmap("tab20", max(len(groups), 1))
    for i, g in enumerate(groups):
        part = rows[rows["group"].astype(str) == g]
        y, p = part["measured"].to_numpy(), part["p50"].to_numpy()
        err = np.vstack([p - part["p10"].to_numpy(), part["p90"].to_numpy() - p]).clip(min=0)
        ax.errorbar(
            y,
            p,
            yerr=err,
            fmt="o",
            ms=3,
            alpha=0.6,
            elinewidth=0.5,
            color=cmap(i),
            label=g if len(groups) <= 20 else None,
        )
    lo = float(np.nanmin(rows[["measured", "p10"]].to_numpy())) * 0.9
    hi = float(np.nanmax(rows[["measured", "p90"]].to_numpy())) * 1.1
    ax.plot([lo, hi], [lo, hi], color="black", lw=1, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured slowdown")
    ax.set_ylabel("predicted slowdown (p50, bars p10-p90)")
    mape = slowdown_metrics(rows["measured"], rows["p50"])["mape"]
    ax.set_title(f"held-out {plural(cv.group_by)}: MAPE {mape:.1f}%")
    if len(groups) <= 20:
        ax.legend(fontsize=7, title=cv.group_by, loc="upper left")
    fig.tight_layout()
    paths.append(out / "predicted_vs_measured.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    # A baseline that could not run on these features (all NaN) has no bar.
    predictors = ["p50"] + [c for c in rows.columns if c.startswith("pred_") and rows[c].notna().any()]
    table = np.array(
        [
            [
                slowdown_metrics(rows.loc[rows["group"] == g, "measured"], rows.loc[rows["group"] == g, c])[
                    "mape"
                ]
                for c in predictors
            ]
            for g in groups
        ]
    )
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(groups) + 2), 4.5))
    width = 0.8 / len(predictors)
    x = np.arange(len(groups))
    for j, c in enumerate(predictors):
        label = "model" if c == "p50" else c[len("pred_") :]
        ax.bar(x + (j - (len(predictors) - 1) / 2) * width, table[:, j], width, label=label)
    ax.set_xticks(x, groups, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("MAPE on slowdown (%)")
    ax.set_title(f"error by held-out {cv.group_by}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out / "error_by_group.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths
