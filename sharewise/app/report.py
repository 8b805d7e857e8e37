"""``sharewise report``: one HTML page with the measured heatmaps, predicted vs measured and simulated JCT."""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from sharewise.app.figures import heatmap_png, jct_png, scatter_png
from sharewise.datasets.traces.generic import write_generic_csv
from sharewise.datasets.traces.synthetic import synthetic_trace
from sharewise.errors import DatasetError


@dataclass
class ReportResult:
    """What ``write_report`` wrote: the page, its figures, and the simulation it plotted (``simulate --json``)."""

    page: Path
    figures: list[Path] = field(default_factory=list)
    simulation: dict = field(default_factory=dict)


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


def matrix_html(matrix: pd.DataFrame) -> str:
    """Return the slowdown matrix as an HTML table with one header row, its corner naming both axes.

    Example: a table whose header reads ``self \\ partner | bert | resnet18`` and whose rows start ``bert``.
    """
    labelled = matrix.round(2).rename_axis(index=None, columns="self \\ partner")
    return labelled.to_html(na_rep="-")


def write_report(
    data: list[str | os.PathLike],
    out: str | os.PathLike,
    simulation: str | os.PathLike | None = None,
    n_gpus: int = 8,
    n_jobs: int = 300,
    seed: int = 0,
) -> ReportResult:
    """Write ``index.html`` and its PNG figures into ``out``; return what was written.

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
    figures = []
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
        figures.append(png)
        sections.append(
            f"<h2>Measured slowdowns ({html.escape(dev)}, {html.escape(mode)})</h2>"
            f"<img src='{png.name}'>" + matrix_html(matrix)
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
        figures.append(png)
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
    figures.append(png)
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
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{white-space:nowrap}img{max-width:100%}"
        "</style></head><body>"
        "<h1>sharewise report</h1>" + "\n".join(sections) + "</body></html>"
    )
    return ReportResult(page=page, figures=figures, simulation=sim)


def _simulate_synthetic(data: str, out: Path, n_gpus: int, n_jobs: int, seed: int):
    from sharewise.app.simulate import SimulationConfig, run_simulation
    from sharewise.datasets.store import open_dataset

    pairs = open_dataset(data, profiles=True, pairs=True).read_pairs()
    ok = pairs[pairs["status"] == "ok"]

    device = ok["device_name"].iloc[0]
    mode = ok.loc[ok["device_name"] == device, "mode"].iloc[0]
    sel = ok[(ok["device_name"] == device) & (ok["mode"] == mode)]
    workloads = sorted(set(sel["workload_a"]) | set(sel["workload_b"]))
    trace_path = write_generic_csv(synthetic_trace(workloads, n_jobs, n_gpus, seed=seed), out / "synthetic_trace.csv")
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
    seen = (
        "slowdowns predicted by models that never saw the workload (grouped cross-validation)"
        if report.view == "predicted"
        else f"{report.view} slowdowns"
    )
    where = (
        f"synthetic trace of {n_jobs} jobs (seed {seed}) over the measured workloads on {device}; truth: measured "
        f"pairs; policies see {html.escape(seen)}"
    )
    return sim, where
