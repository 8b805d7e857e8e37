"""Figures a person would rather look at than read: heatmaps, predicted-vs-measured, JCT per policy.

Every function draws one PNG with matplotlib's non-interactive backend and returns its path; matplotlib is
imported only when a figure is drawn, so commands that draw nothing never load it.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from sharewise.app.simulate import SimulationReport


def pyplot():
    """Return ``matplotlib.pyplot`` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def heatmap_png(matrix: pd.DataFrame, title: str, path: Path) -> Path:
    """Draw the slowdown matrix (row next to column) as an annotated heatmap; return ``path``."""
    plt = pyplot()
    fig = heatmap_figure(matrix, title)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def heatmap_figure(matrix: pd.DataFrame, title: str):
    """Return the heatmap of ``matrix`` as a matplotlib figure, its title wrapped to fit inside it."""
    plt = pyplot()
    n = len(matrix)
    # At least 4 x 3.2 in: a two-workload matrix with a device name in the title is otherwise a sliver.
    fig, ax = plt.subplots(figsize=(max(4.0, 1.0 + 0.65 * n), max(3.2, 1.2 + 0.55 * n)))
    values = matrix.to_numpy(dtype=float)
    im = ax.imshow(values, cmap="RdYlGn_r", vmin=1.0, vmax=max(2.5, float(np.nanmax(values))))
    ax.set_xticks(range(n), matrix.columns, rotation=45, ha="right")
    ax.set_yticks(range(n), matrix.index)
    for i in range(n):
        for j in range(n):
            if np.isfinite(values[i, j]):
                ax.text(j, i, f"{values[i, j]:.2f}", ha="center", va="center", fontsize=8)
    ax.set_xlabel("partner")
    ax.set_ylabel("self (slowed down)")
    fig.colorbar(im, ax=ax, label="slowdown")
    fit_title(fig, ax, title)
    return fig


def fit_title(fig, ax, title: str, fontsize: float = 10) -> None:
    """Set ``ax``'s title, wrapped at word breaks until it lies inside the figure after ``tight_layout``.

    A long title (a CPU's full name) on a small figure is otherwise cut at both edges of the PNG. The figure
    is drawn before measuring: an image's fixed aspect moves its axes, and the title with them, only then.
    """
    width = len(title)
    while True:
        ax.set_title(textwrap.fill(title, width), fontsize=fontsize)
        fig.tight_layout()
        fig.canvas.draw()
        box = ax.title.get_window_extent()
        if (box.x0 >= 0 and box.x1 <= fig.bbox.width) or width <= 10:
            return
        width = max(10, int(width * 0.85))


def scatter_png(frame: pd.DataFrame, path: Path, title: str) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 5))
    lo = float(min(frame["measured"].min(), frame["p50"].min())) * 0.95
    hi = float(max(frame["measured"].max(), frame["p90"].max())) * 1.05
    ax.errorbar(
        frame["measured"],
        frame["p50"],
        yerr=[frame["p50"] - frame["p10"], frame["p90"] - frame["p50"]],
        fmt="o",
        ms=4,
        alpha=0.7,
        elinewidth=0.8,
        capsize=2,
        label="p50 (bars: p10-p90)",
    )
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="perfect")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured slowdown")
    ax.set_ylabel("predicted slowdown")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def jct_png(sim: dict, path: Path, title: str) -> Path:
    plt = pyplot()
    names = list(sim["policies"])
    avg = [sim["policies"][n]["avg_jct"] / 3600 for n in names]
    p95 = [sim["policies"][n]["p95_jct"] / 3600 for n in names]
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(1.2 + 1.0 * len(names), 4))
    ax.bar(x - 0.2, avg, 0.4, label="average JCT")
    ax.bar(x + 0.2, p95, 0.4, label="p95 JCT")
    ax.set_xticks(x, names, rotation=30, ha="right")
    ax.set_ylabel("hours")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_jct_cdf(report: SimulationReport, out_dir: str | os.PathLike) -> Path:
    """Write ``jct_cdf.png`` in ``out_dir``: the JCT CDF of every simulated policy; return its path."""
    plt = pyplot()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, r in report.results.items():
        jct = np.sort(r.jct) / 3600.0
        ax.step(jct, np.arange(1, jct.shape[0] + 1) / jct.shape[0], where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"JCT CDF: {report.n_jobs} jobs on {report.n_gpus} GPUs ({report.view} slowdowns)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "jct_cdf.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
