"""CLI commands that tie the parts together: report and demo."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.rule import Rule
from rich.table import Table

from sharewise._cli.common import console

DEMO_WORKLOADS = ("a3c", "ncf", "lstm_lm")


def report(
    data: list[str] = typer.Argument(..., help="Dataset folders (or 'reference'), read together."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for index.html and its PNG figures."),
    simulation: Path = typer.Option(None, "--simulation", help="A 'sharewise simulate --json' output to plot."),
    gpus: int = typer.Option(8, "--gpus", help="GPUs of the synthetic simulation (without --simulation)."),
    jobs: int = typer.Option(300, "--jobs", help="Jobs of the synthetic simulation (without --simulation)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the synthetic trace."),
):
    """Write a report page (HTML + PNG): measured slowdown heatmap, predicted vs measured, simulated JCT.

    Example: sharewise report reference --out report/
    """
    from sharewise.report import write_report

    page = write_report(data, out, simulation=simulation, n_gpus=gpus, n_jobs=jobs, seed=seed)
    console.print(f"wrote {page}")


def _step(title: str) -> None:
    console.print(Rule(f"[bold]{title}"))


def _print_simulation(sim: dict) -> None:
    table = Table(
        "policy",
        "avg JCT (h)",
        "p95 JCT (h)",
        "avg queue (h)",
        "GPU util",
        "SLO violations",
        title=f"simulated: {sim['jobs']} jobs on {sim['gpus']} GPUs",
    )
    for name, m in sim["policies"].items():
        table.add_row(
            name,
            f"{m['avg_jct'] / 3600:.2f}",
            f"{m['p95_jct'] / 3600:.2f}",
            f"{m['avg_queue'] / 3600:.2f}",
            f"{m['utilization']:.3f}",
            str(m["slo_violations"]),
        )
    console.print(table)


def demo(
    out: Path = typer.Option(Path("demo-out"), "--out", "-o", help="Folder for every output of the demo."),
    workloads: str = typer.Option(",".join(DEMO_WORKLOADS), "--workloads", "-w", help="Workloads to measure."),
    window: float = typer.Option(1.0, "--window", help="Measurement window in seconds."),
    repeats: int = typer.Option(3, "--repeats", help="Repeats per pair."),
):
    """Run the whole chain on the CPU in a few minutes and leave every output in one folder.

    Profiles and pairs a few built-in workloads (resuming if OUT already holds them), trains the predictor
    on the shipped reference dataset plus these measurements, predicts a pair, recommends pairings for a
    small queue, simulates a cluster with every policy and writes a report.

    Example: sharewise demo --out demo-out
    """
    import pandas as pd

    from sharewise.cli import app

    def run(*args: str) -> None:
        app(args=[str(a) for a in args], standalone_mode=False)

    out.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    names = [w.strip() for w in workloads.split(",") if w.strip()]
    _step(f"1/6 profile and measure all pairs of {', '.join(names)} on the CPU")
    # No extra repeats for noisy pairs here: the demo shows the chain in minutes; campaigns keep the default.
    run(
        "pairs",
        "-w",
        ",".join(names),
        "--out",
        data,
        "--window",
        window,
        "--repeats",
        repeats,
        "--max-repeats",
        repeats,
    )
    _step("2/6 train the slowdown predictor on the reference dataset and these measurements")
    model = out / "model.json"
    run("train", "reference", data, "--out", model)
    _step(f"3/6 predict {names[0]} next to {names[-1]} from their solo profiles")
    run("predict", "--model", model, "--data", data, names[0], names[-1])
    _step("4/6 recommend which queued jobs share a GPU")
    from sharewise.datasets.store import Dataset

    ref_workloads = sorted(Dataset("reference").read_profiles()["workload"])
    queue = pd.DataFrame(
        {
            "job_id": [f"job{i}" for i in range(8)],
            "workload": [ref_workloads[i % len(ref_workloads)] for i in range(8)],
        }
    )
    queue_path = out / "queue.csv"
    queue.to_csv(queue_path, index=False)
    run("recommend", "--model", model, "--data", "reference", "--queue", queue_path, "--gpus", 5)
    _step("5/6 simulate a cluster: every policy on one synthetic trace, truth = measured reference pairs")
    from sharewise.report import write_report

    page = write_report(["reference", data], out / "report", n_gpus=16, n_jobs=300, seed=0)
    _print_simulation(json.loads((out / "report" / "simulation.json").read_text()))
    _step("6/6 report")
    console.print(f"wrote {page} (measured heatmaps, predicted vs measured, simulated JCT)")
    console.print(f"demo outputs in {out}/: data/ (Parquet), model.json, queue.csv, report/")


def register(app: typer.Typer) -> None:
    app.command()(report)
    app.command()(demo)
