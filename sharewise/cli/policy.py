"""CLI of the policy commands: ``policies`` and ``simulate`` (compare policies on a job trace)."""

from __future__ import annotations

from pathlib import Path

import typer

from sharewise.cli import options
from sharewise.cli.common import Table, bound_cell, console, err_console, escape, one_of, print_json
from sharewise.policy import REGISTRY as POLICIES
from sharewise.policy import describe


def policies(as_json: bool = typer.Option(False, "--json", help="Print a JSON list.")):
    """List the scheduling policies the simulator compares.

    Example: sharewise policies --json
    """
    rows = []
    for name, func in POLICIES.items():
        # A functools.partial binds the knobs of a variant; JSON shows them, the table says what they do.
        knobs = getattr(func, "keywords", None) or {}
        rows.append({"name": name, "summary": describe(name), "knobs": dict(knobs)})
    if as_json:
        print_json(rows)
        return
    table = Table("policy", "what it does")
    for r in rows:
        table.add_row(r["name"], escape(r["summary"]))
    console.print(table)


def simulate(
    trace: Path = typer.Argument(..., help="Job trace: Gavel .trace, the Philly CSV, PAL's CSV, or a generic CSV."),
    data: str = typer.Option(
        "reference",
        "--data",
        "-d",
        help="Truth: dataset folder with measured pairs ('reference'; 'none': no pair data, no job shares a GPU).",
    ),
    policy: list[str] = typer.Option(
        None, "--policy", "-p", help=one_of(
            "Policy to simulate (repeat the option; default: every event-driven one, and with --round-s PAL's "
            "round-based artifact policies too)", POLICIES,
        )
    ),
    gpus: int = typer.Option(160, "--gpus", help="GPUs in the simulated cluster."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="GPUs per node."),
    device_name: str = options.DEVICE_NAME,
    mode: str = typer.Option(None, "--mode", help="Sharing mode of the measurements, if several."),
    oracle: bool = options.ORACLE,
    observe: bool = options.OBSERVE,
    round_s: float = options.ROUND_S,
    preempt_delay: float = typer.Option(
        0.0,
        "--preempt-delay",
        help="Seconds a preempted job loses when it restarts, and a job moved to other GPUs (migration cost).",
    ),
    predictions: Path = options.PREDICTIONS,
    model: Path = options.MODEL,
    group_by: str = options.GROUP_BY_OPTION,
    max_slowdown: float = options.MAX_SLOWDOWN,
    split: str = options.SPLIT,
    bounds: str = options.BOUNDS,
    seed: int = typer.Option(0, "--seed", help="Seed of the Philly workload draw and of --speed-sigma."),
    speed_sigma: float = typer.Option(
        0.0, "--speed-sigma", help="Seeded log-normal spread of GPU speed factors (0: all 1.0)."
    ),
    pm_scores: str = typer.Option(
        None,
        "--pm-scores",
        help="GPU speeds: a dataset with 'profile --all-devices' PM scores, or PAL's per-class variability: its "
        "profiles.json (factors drawn per GPU and class, --pm-seed), a PerfVar_<class> table, or a CSV of "
        "measurements with a 'perf' column.",
    ),
    pm_seed: int = typer.Option(42, "--pm-seed", help="Seed of the per-GPU draw from measurements (PAL's: 42)."),
    job_classes: Path = typer.Option(
        None, "--job-classes", help="CSV workload,class mapping jobs to variability classes (default: PAL's)."
    ),
    cross_node_slowdown: float = typer.Option(
        1.0, "--cross-node-slowdown", help="Slowdown of a job whose GPUs span nodes (1.0: none)."
    ),
    trace_format: str = options.TRACE_FORMAT,
    max_jobs: int = typer.Option(None, "--max-jobs", help="Simulate only the first N jobs."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object; notes go to stderr."),
    plot: Path = typer.Option(None, "--plot", help="Folder to write the JCT CDF of every policy (PNG)."),
):
    """Replay a job trace on a simulated cluster under each policy; compare JCT, queueing and SLO violations.

    Example: sharewise simulate 6214e9.trace --data gavel-ds --device-name v100 --gpus 160
    """
    from sharewise.app.simulate import SimulationConfig, jct_unit, run_simulation, verdict

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
        pm_seed=pm_seed,
        job_classes=str(job_classes) if job_classes else None,
        cross_node_slowdown=cross_node_slowdown,
        max_jobs=max_jobs,
        observe=observe,
        round_s=round_s,
        preempt_delay_s=preempt_delay,
        split=split,
        bounds=bounds,
    )
    report = run_simulation(config)
    out = err_console if as_json else console
    if plot is not None:
        from sharewise.app.figures import plot_jct_cdf

        path = plot_jct_cdf(report, plot)
        out.print(f"wrote {path}")
    if as_json:
        for note in report.notes:
            err_console.print(f"note: {note}")
        print_json(report.to_json())
        return
    summary = report.to_json()
    unit, per = jct_unit(summary)  # a trace of seconds reads in seconds, one of days in hours
    bounded = any(m.get("bounded_jobs") is not None for m in summary["policies"].values())
    table = Table(
        "policy",
        f"avg JCT ({unit})",
        f"p95 JCT ({unit})",
        f"makespan ({unit})",
        f"avg queue ({unit})",
        "GPU util",
        "SLO violations",
        *(("bound violations",) if bounded else ()),
        "sim (s)",
        title=(
            f"{report.n_jobs} jobs on {report.n_gpus} GPUs; policies see {report.view} slowdowns"
            + (", plus what they observe" if report.observe else "")
        ),
    )
    for name, r in report.results.items():
        m = r.metrics
        table.add_row(
            name,
            f"{m['avg_jct'] / per:.2f}",
            f"{m['p95_jct'] / per:.2f}",
            f"{m['makespan'] / per:.2f}",
            f"{m['avg_queue'] / per:.2f}",
            f"{m['utilization']:.3f}",
            str(m["slo_violations"]),
            *((bound_cell(m),) if bounded else ()),
            f"{r.wall_s:.2f}",
        )
    console.print(table)
    shared = {name: None if r.shared is None else int(r.shared.sum()) for name, r in report.results.items()}
    for line in verdict(summary, unit=(unit, per), shared=shared, bounded=report.bounded_jobs()):
        console.print(line)
    for note in report.notes:
        console.print(f"[dim]note: {note}[/dim]")


def register(app: typer.Typer) -> None:
    app.command()(policies)
    app.command()(simulate)
