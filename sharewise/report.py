"""The report page: measured slowdown heatmap, predicted vs measured, and simulated JCT per policy."""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.errors import DatasetError


def synthetic_trace(
    workloads: list[str], n_jobs: int, n_gpus: int, seed: int = 0, load: float = 1.6
) -> pd.DataFrame:
    """Return a seeded generic-CSV job trace over ``workloads`` (``job_id, arrival_s, duration_s, gpus, workload``).

    Arrivals are Poisson with a rate that asks for ``load`` times the cluster's GPU-seconds, durations
    log-normal around 30 minutes, 1 GPU for most jobs and 2 for a few, so queues form and sharing matters.
    """
    rng = np.random.default_rng(seed)
    duration = np.round(rng.lognormal(mean=np.log(1800.0), sigma=0.8, size=n_jobs), 1)
    gpus = np.where(rng.random(n_jobs) < 0.85, 1, 2)
    mean_gpu_s = float(np.mean(duration * gpus))
    rate = load * n_gpus / mean_gpu_s
    arrival = np.round(np.cumsum(rng.exponential(1.0 / rate, size=n_jobs)), 1)
    arrival -= arrival[0]
    return pd.DataFrame(
        {
            "job_id": [f"job{i:04d}" for i in range(n_jobs)],
            "arrival_s": arrival,
            "duration_s": duration,
            "gpus": gpus,
            "workload": rng.choice(np.asarray(workloads), size=n_jobs),
        }
    )


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def heatmap_png(matrix: pd.DataFrame, title: str, path: Path) -> Path:
    """Draw the slowdown matrix (row next to column) as an annotated heatmap."""
    plt = _plt()
    n = len(matrix)
    fig, ax = plt.subplots(figsize=(1.0 + 0.65 * n, 0.8 + 0.55 * n))
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
    ax.set_title(title, fontsize=10)
    fig.colorbar(im, ax=ax, label="slowdown")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def predicted_vs_measured(
    profiles: pd.DataFrame, pairs: pd.DataFrame, group_by: str = "workload"
) -> pd.DataFrame:
    """Return one row per direction of each ok pair: measured slowdown and the out-of-fold p10/p50/p90.

    Predictions come from models that never saw the held-out ``group_by`` group of either workload.
    """
    from sharewise.predictor import out_of_fold_predictions

    ok = pairs[pairs["status"] == "ok"].reset_index(drop=True)
    pred = out_of_fold_predictions(profiles, ok, group_by=group_by, holdout="self")
    rows = []
    for side in ("a", "b"):
        rows.append(
            pd.DataFrame(
                {
                    "self": ok[f"workload_{side}"],
                    "partner": ok["workload_b" if side == "a" else "workload_a"],
                    "measured": ok[f"slowdown_{side}"],
                    "p10": pred[f"p10_{side}"],
                    "p50": pred[f"p50_{side}"],
                    "p90": pred[f"p90_{side}"],
                }
            )
        )
    return pd.concat(rows, ignore_index=True)


def scatter_png(frame: pd.DataFrame, path: Path, title: str) -> Path:
    plt = _plt()
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
    plt = _plt()
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


def write_report(
    data: list[str | os.PathLike],
    out: str | os.PathLike,
    simulation: str | os.PathLike | None = None,
    n_gpus: int = 8,
    n_jobs: int = 300,
    seed: int = 0,
) -> Path:
    """Write ``index.html`` and its PNG figures into ``out``; return the page's path.

    ``data`` lists dataset folders (or ``reference``), read together. ``simulation`` is a ``sharewise simulate
    --json`` output; without it a seeded synthetic trace over the workloads of the first dataset's first
    device is simulated on ``n_gpus`` GPUs with every policy (truth: its measured pairs; policies see
    out-of-fold predictions by workload).
    """
    from sharewise.datasets.store import read_datasets, resolve_dataset_path
    from sharewise.datasets.summary import dataset_overview, slowdown_matrix

    profiles, pairs = read_datasets(data, pairs=True)
    ok = pairs[pairs["status"] == "ok"]
    names = ", ".join(str(resolve_dataset_path(d)) for d in data)
    if ok.empty:
        raise DatasetError(f"dataset(s) {names} hold no pair with status 'ok' to report on")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sections = []
    overview = dataset_overview(profiles, pairs)
    sections.append(
        f"<p>Data <code>{html.escape(names)}</code>: {overview['profiles']} profiles of "
        f"{overview['workloads']} workloads, {overview['pairs']} pairs {html.escape(str(overview['status']))}, "
        f"devices {html.escape(', '.join(overview['devices']))}, modes {html.escape(', '.join(overview['modes']))}."
        "</p>"
    )
    for k, ((dev, mode), group) in enumerate(ok.groupby(["device_name", "mode"])):
        matrix = slowdown_matrix(group)
        png = heatmap_png(matrix, f"measured slowdown: {dev}, mode {mode}", out / f"heatmap_{k}.png")
        sections.append(
            f"<h2>Measured slowdowns ({html.escape(dev)}, {html.escape(mode)})</h2>"
            f"<img src='{png.name}'>" + matrix.round(2).to_html(na_rep="-")
        )

    n_workloads = len(set(ok["workload_a"]) | set(ok["workload_b"]))
    if n_workloads >= 3:
        # Holding out each workload costs one fit per pair of workloads: fine for a CPU campaign, too many
        # for an imported table of dozens of job types, where families are held out instead.
        group_by = "workload" if n_workloads <= 16 else "family"
        pvm = predicted_vs_measured(profiles, ok, group_by=group_by)
        err = (pvm["p50"] - pvm["measured"]).abs() / pvm["measured"]
        inside = ((pvm["measured"] >= pvm["p10"]) & (pvm["measured"] <= pvm["p90"])).mean()
        png = scatter_png(
            pvm,
            out / "predicted_vs_measured.png",
            f"held-out {group_by}: MAPE {err.mean() * 100:.1f}%, {inside * 100:.0f}% in p10-p90",
        )
        pvm.to_csv(out / "predicted_vs_measured.csv", index=False)
        sections.append(
            f"<h2>Predicted vs measured (each {group_by} unseen in training)</h2>"
            f"<p>Grouped cross-validation by {group_by}: MAPE {err.mean() * 100:.1f}%, "
            f"{inside * 100:.0f}% of measurements inside the p10-p90 band.</p><img src='{png.name}'>"
        )

    if simulation is not None:
        sim = json.loads(Path(simulation).read_text())
        where = f"from {html.escape(str(simulation))}"
    else:
        sim, where = _simulate_synthetic(str(data[0]), out, n_gpus, n_jobs, seed)
    png = jct_png(sim, out / "jct.png", f"{sim['jobs']} jobs on {sim['gpus']} GPUs")
    table = pd.DataFrame(sim["policies"]).T
    for col in ("avg_jct", "p95_jct", "makespan", "avg_queue"):
        if col in table:
            table[col] = (table[col].astype(float) / 3600).round(2)
    table = table.rename(columns={c: f"{c} (h)" for c in ("avg_jct", "p95_jct", "makespan", "avg_queue")})
    sections.append(
        f"<h2>Simulated job completion times</h2><p>{where}</p><img src='{png.name}'>"
        + table.to_html(float_format=lambda v: f"{v:.3g}")
    )
    page = out / "index.html"
    page.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>sharewise report</title><style>"
        "body{font-family:sans-serif;max-width:1000px;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}img{max-width:100%}</style></head><body>"
        "<h1>sharewise report</h1>" + "\n".join(sections) + "</body></html>"
    )
    return page


def _simulate_synthetic(data: str, out: Path, n_gpus: int, n_jobs: int, seed: int):
    from sharewise.datasets.store import open_dataset
    from sharewise.policy.experiment import SimulationConfig, run_simulation

    pairs = open_dataset(data, profiles=True, pairs=True).read_pairs()
    ok = pairs[pairs["status"] == "ok"]

    device = ok["device_name"].iloc[0]
    mode = ok.loc[ok["device_name"] == device, "mode"].iloc[0]
    sel = ok[(ok["device_name"] == device) & (ok["mode"] == mode)]
    workloads = sorted(set(sel["workload_a"]) | set(sel["workload_b"]))
    trace = synthetic_trace(workloads, n_jobs, n_gpus, seed)
    trace_path = out / "synthetic_trace.csv"
    trace.to_csv(trace_path, index=False)
    config = SimulationConfig(
        trace=str(trace_path),
        data=data,
        n_gpus=n_gpus,
        gpus_per_node=min(8, n_gpus),
        device_name=device,
        mode=mode,
        group_by="workload",
        seed=seed,
    )
    report = run_simulation(config)
    sim = report.to_json()
    (out / "simulation.json").write_text(json.dumps(sim, indent=2))
    where = (
        f"synthetic trace of {n_jobs} jobs (seed {seed}) over the measured workloads on {device}; truth: measured "
        f"pairs; policies see {html.escape(report.view)} predictions"
    )
    return sim, where
