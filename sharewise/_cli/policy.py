"""CLI of the policy area: ``recommend`` (which queued jobs share a GPU), ``simulate``, ``policies``."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from sharewise._cli.common import console, err_console, print_json


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f}"


def policies(as_json: bool = typer.Option(False, "--json", help="Print a JSON list.")):
    """List the scheduling policies the simulator compares.

    Example: sharewise policies --json
    """
    from sharewise.policy import REGISTRY, get_policy

    rows = []
    for name in REGISTRY:
        func = get_policy(name)
        doc = (getattr(func, "func", func).__doc__ or "").strip().splitlines()[0]
        knobs = getattr(func, "keywords", None)  # a functools.partial binds the knobs of a variant
        if knobs:
            doc += " [" + ", ".join(f"{k}={v}" for k, v in knobs.items()) + "]"
        rows.append({"name": name, "summary": doc})
    if as_json:
        print_json(rows)
        return
    table = Table("policy", "what it does")
    for r in rows:
        table.add_row(r["name"], r["summary"])
    console.print(table)


def simulate(
    trace: Path = typer.Argument(..., help="Job trace: Gavel .trace, the Philly CSV, or a generic CSV."),
    data: str = typer.Option(
        "reference", "--data", "-d", help="Truth: dataset folder with measured pairs (or 'reference')."
    ),
    policy: list[str] = typer.Option(
        None, "--policy", "-p", help="Policy to simulate (repeat the option); default: all. See 'policies'."
    ),
    gpus: int = typer.Option(160, "--gpus", help="GPUs in the simulated cluster."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="GPUs per node."),
    device_name: str = typer.Option(
        None, "--device-name", help="Whose measurements are the truth when the data holds several devices."
    ),
    mode: str = typer.Option(None, "--mode", help="Sharing mode of the measurements, if several."),
    oracle: bool = typer.Option(False, "--oracle", help="Show the policies the measured slowdowns."),
    observe: bool = typer.Option(
        False, "--observe", help="Policies learn a pair's measured slowdown once it has run together."
    ),
    predictions: Path = typer.Option(
        None, "--predictions", help="CSV/Parquet of predictions to show the policies instead."
    ),
    model: Path = typer.Option(None, "--model", help="Saved model.json whose predictions the policies see."),
    group_by: str = typer.Option(
        "family",
        "--group-by",
        help="Out-of-fold predictions hold out this group: family | workload | device.",
    ),
    max_slowdown: float = typer.Option(2.0, "--max-slowdown", help="SLO on a job's realized slowdown."),
    seed: int = typer.Option(0, "--seed", help="Seed of the Philly workload draw and of --speed-sigma."),
    speed_sigma: float = typer.Option(
        0.0, "--speed-sigma", help="Seeded log-normal spread of GPU speed factors (0: all 1.0)."
    ),
    pm_scores: str = typer.Option(
        None, "--pm-scores", help="Dataset with 'profile --all-devices' PM scores to use as GPU speeds."
    ),
    cross_node_slowdown: float = typer.Option(
        1.0, "--cross-node-slowdown", help="Slowdown of a job whose GPUs span nodes (1.0: none)."
    ),
    trace_format: str = typer.Option("auto", "--format", help="auto | gavel | philly | csv."),
    max_jobs: int = typer.Option(None, "--max-jobs", help="Simulate only the first N jobs."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object; notes go to stderr."),
    plot: Path = typer.Option(None, "--plot", help="Folder to write the JCT CDF of every policy (PNG)."),
):
    """Replay a job trace on a simulated cluster under each policy; compare JCT, queueing and SLO violations.

    Example: sharewise simulate 6214e9.trace --data gavel-ds --device-name v100 --gpus 160
    """
    from sharewise.policy.experiment import SimulationConfig, plot_jct_cdf, run_simulation

    config = SimulationConfig(
        trace=str(trace),
        data=data,
        policies=tuple(policy or ()),
        trace_format=trace_format,
        n_gpus=gpus,
        gpus_per_node=gpus_per_node,
        device_name=device_name,
        mode=mode,
        oracle=oracle,
        predictions=str(predictions) if predictions else None,
        model=str(model) if model else None,
        group_by=group_by,
        max_slowdown=max_slowdown,
        seed=seed,
        speed_sigma=speed_sigma,
        pm_scores=pm_scores,
        cross_node_slowdown=cross_node_slowdown,
        max_jobs=max_jobs,
        observe=observe,
    )
    report = run_simulation(config)
    out = err_console if as_json else console
    if plot is not None:
        path = plot_jct_cdf(report, plot)
        out.print(f"wrote {path}")
    if as_json:
        for note in report.notes:
            err_console.print(f"note: {note}")
        print_json(report.to_json())
        return
    table = Table(
        "policy",
        "avg JCT (h)",
        "p95 JCT (h)",
        "makespan (h)",
        "avg queue (h)",
        "GPU util",
        "SLO violations",
        "sim (s)",
        title=f"{report.n_jobs} jobs on {report.n_gpus} GPUs; policies see {report.view} slowdowns",
    )
    for name, r in report.results.items():
        m = r.metrics
        table.add_row(
            name,
            _hours(m["avg_jct"]),
            _hours(m["p95_jct"]),
            _hours(m["makespan"]),
            _hours(m["avg_queue"]),
            f"{m['utilization']:.3f}",
            str(m["slo_violations"]),
            f"{r.wall_s:.2f}",
        )
    console.print(table)
    for note in report.notes:
        console.print(f"[dim]note: {note}[/dim]")


def recommend(
    model: Path = typer.Option(..., "--model", "-m", help="Saved model.json (sharewise train)."),
    data: str = typer.Option(
        ..., "--data", "-d", help="Dataset with the solo profiles of the jobs' workloads."
    ),
    queue: Path = typer.Option(
        ..., "--queue", "-q", help="Queue CSV: job_id, workload, optional gpus and remaining_s."
    ),
    gpus: int = typer.Option(None, "--gpus", help="Number of free GPUs (or give --cluster)."),
    cluster: Path = typer.Option(
        None, "--cluster", help="Cluster CSV: gpu, optional node, job_id, workload (a row per resident job)."
    ),
    max_slowdown: float = typer.Option(
        2.0, "--max-slowdown", help="A pair shares only if both predicted p90 slowdowns are at most this."
    ),
    device_name: str = typer.Option(None, "--device-name", help="Device whose profiles to use, if several."),
    method: str = typer.Option("auto", "--method", help="auto | exact | greedy pairing."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
):
    """Recommend which queued jobs should share a GPU: a maximum-throughput pairing within an SLO.

    Example: sharewise recommend --model model.json --data reference --queue queue.csv --gpus 4
    """
    from sharewise.policy.recommend import RecommendConfig
    from sharewise.policy.recommend import recommend as run

    plan = run(
        RecommendConfig(
            model=str(model),
            data=data,
            queue=str(queue),
            gpus=gpus,
            cluster=str(cluster) if cluster else None,
            max_slowdown=max_slowdown,
            device_name=device_name,
            method=method,
        )
    )
    if as_json:
        print_json(plan.to_json())
        return
    gain_pct = (
        100.0 * (plan.throughput / plan.exclusive_throughput - 1.0) if plan.exclusive_throughput else 0.0
    )
    table = Table(
        "GPU",
        "jobs",
        "workloads",
        "p50 slowdown",
        "p90 slowdown",
        "gain",
        "why (top contributions, log units)",
        title=(
            f"{len(plan.placements)} placements, {len(plan.waiting)} job(s) waiting; expected throughput "
            f"{plan.throughput:.2f} GPU-equivalents vs {plan.exclusive_throughput:.2f} without sharing "
            f"({gain_pct:+.1f}%)"
        ),
    )
    for p in plan.placements:
        why = p.get("why")
        reason = ""
        if why:
            reason = "; ".join(f"{c['feature']} {c['contribution']:+.2f}" for c in why["a"][:2])
        table.add_row(
            ",".join(p["gpus"]),
            " + ".join(p["jobs"]),
            " + ".join(p["workloads"]),
            " / ".join(f"{x:.2f}" for x in p["p50"]),
            " / ".join(f"{x:.2f}" for x in p["p90"]),
            f"{p['gain']:+.2f}" if p["kind"] != "alone" else "alone",
            reason,
        )
    console.print(table)
    console.print(f"method: {plan.method_note} ({plan.solve_s:.3f} s)")
    if plan.waiting:
        shown = ", ".join(plan.waiting[:20]) + (" ..." if len(plan.waiting) > 20 else "")
        console.print(f"waiting: {shown}")
    for note in plan.notes:
        console.print(f"[dim]note: {note}[/dim]")


def register(app: typer.Typer) -> None:
    app.command()(policies)
    app.command()(simulate)
    app.command()(recommend)
