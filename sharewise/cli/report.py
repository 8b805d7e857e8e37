"""CLI of the commands that tie the parts together: ``report`` and ``demo``."""

from __future__ import annotations

from pathlib import Path

import typer

from sharewise.app.demo import DEMO_WORKLOADS
from sharewise.cli.common import Rule, Table, console


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
    from sharewise.app.report import write_report

    result = write_report(data, out, simulation=simulation, n_gpus=gpus, n_jobs=jobs, seed=seed)
    console.print(f"wrote {result.page}")


def render_simulation_summary(sim: dict) -> None:
    """Print a ``simulate --json`` summary as a table, one row per policy."""
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


class _DemoScreen:
    """Renders the demo's steps with the same renderers the commands use."""

    def __init__(self) -> None:
        from sharewise.cli.profiler import CampaignProgress

        self._progress: CampaignProgress | None = None
        self._progress_type = CampaignProgress

    def step(self, title: str) -> None:
        self.close()
        console.print(Rule(f"[bold]{title}"))

    def campaign_event(self, event) -> None:
        if self._progress is None:
            self._progress = self._progress_type()
        self._progress.on_event(event)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.__exit__(None, None, None)
            self._progress = None

    def result(self, result) -> None:
        from sharewise.app.prediction import TrainResult
        from sharewise.app.profiling import PairsResult
        from sharewise.app.report import ReportResult
        from sharewise.cli.predictor import render_predict, render_train
        from sharewise.cli.profiler import render_pairs
        from sharewise.cli.recommend import render_plan
        from sharewise.planner.pairing import Plan

        self.close()
        if isinstance(result, PairsResult):
            render_pairs(result)
        elif isinstance(result, TrainResult):
            render_train(result)
        elif isinstance(result, Plan):
            render_plan(result)
        elif isinstance(result, ReportResult):
            from sharewise.app.simulate import verdict

            render_simulation_summary(result.simulation)
            for line in verdict(result.simulation):
                console.print(line)
            console.print(f"wrote {result.page} (measured heatmaps, predicted vs measured, simulated JCT)")
        elif isinstance(result, list):
            render_predict(result)


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
    from sharewise.app.demo import DemoOptions
    from sharewise.app.demo import demo as run
    from sharewise.cli.common import split_list

    screen = _DemoScreen()
    try:
        result = run(
            DemoOptions(out=out, workloads=tuple(split_list([workloads])), window_s=window, repeats=repeats), screen
        )
    finally:
        screen.close()
    console.print(f"demo outputs in {result.out}/: data/ (Parquet), model.json, queue.csv, report/")


def register(app: typer.Typer) -> None:
    app.command()(report)
    app.command()(demo)
