"""CLI of ``sharewise recommend``: which queued jobs should share a GPU, as a table, JSON or a deployable plan."""

from __future__ import annotations

from pathlib import Path

import typer

from sharewise.cli.common import Table, collector_paused, console, one_of, print_json
from sharewise.deploy import EMITTERS
from sharewise.errors import ConfigError
from sharewise.planner import METHODS


def recommend(
    model: Path = typer.Option(..., "--model", "-m", help="Saved model.json (sharewise train)."),
    data: str = typer.Option(..., "--data", "-d", help="Dataset with the solo profiles of the jobs' workloads."),
    queue: Path = typer.Option(
        ...,
        "--queue",
        "-q",
        help="Queue CSV: job_id, workload, optional gpus, remaining_s and bound (a job's maximum slowdown, e.g. "
        "1.3, or 'protected' for 1.25: the slowdown contract).",
    ),
    gpus: int = typer.Option(None, "--gpus", help="Number of free GPUs (or give --cluster)."),
    cluster: Path = typer.Option(
        None,
        "--cluster",
        help="Cluster CSV: gpu, optional node, job_id, workload (a row per resident job), gpu_uuid, gpu_index.",
    ),
    max_slowdown: float = typer.Option(
        2.0, "--max-slowdown", help="A pair shares only if both predicted p90 slowdowns are at most this."
    ),
    device_name: str = typer.Option(None, "--device-name", help="Device whose profiles to use, if several."),
    method: str = typer.Option("auto", "--method", help=one_of("Pairing method", METHODS)),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
    emit: str = typer.Option(
        None, "--emit", help=one_of("Write a deployable plan in this format (sharewise.deploy)", EMITTERS)
    ),
    out: Path = typer.Option(None, "--out", "-o", help="File the --emit format goes to (default: stdout)."),
    sharing: str = typer.Option(
        "auto",
        "--sharing",
        help="How --emit shares a GPU: auto (the measured mode if timeslice or mps, else timeslice), timeslice or mps.",
    ),
    node: str = typer.Option(None, "--node", help="Node of the --gpus N GPUs, for --emit (Slurm -w, HAMi)."),
    split: str = typer.Option(
        "auto",
        "--split",
        help="The sharing knob per pair: auto (chosen to keep every job's bound at p90 with the highest combined "
        "throughput, where the model has pairs measured under the knob) or none.",
    ),
):
    """Recommend which queued jobs should share a GPU: a maximum-throughput pairing within an SLO.

    Example: sharewise recommend --model model.json --data reference --queue queue.csv --gpus 4

    With --emit FORMAT the plan is written for a cluster stack, with a memory limit per sharing job and,
    for MPS, an active-thread percentage per job: --emit slurm --node n1 --out plan.sh
    """
    from sharewise.app.recommend import RecommendConfig, deploy
    from sharewise.app.recommend import recommend as run

    if emit is None and (out is not None or node is not None or sharing != "auto"):
        raise ConfigError("--out, --node and --sharing shape an emitted plan; give --emit FORMAT with them")
    if emit is not None and as_json:
        raise ConfigError("give --json (the pairing as JSON) or --emit FORMAT (a deployable plan), not both")
    config = RecommendConfig(
        model=str(model),
        data=data,
        queue=str(queue),
        gpus=gpus,
        cluster=str(cluster) if cluster else None,
        max_slowdown=max_slowdown,
        device_name=device_name,
        method=method,
        sharing=sharing,
        node=node,
        split=split,
    )
    if emit is not None:
        deployment = deploy(config, emit, out)
        if out is None:
            print(deployment.text, end="")
            return
        render_plan(deployment.plan)
        console.print(f"wrote the plan as --emit {emit} to {out}")
        return
    plan = run(config)
    if as_json:
        print_json(plan.to_json())
        return
    render_plan(plan)


def render_plan(plan) -> None:
    """Print a recommendation: one row per placement, the method, the waiting jobs and the notes; with the slowdown
    contract (jobs with bounds, or splits chosen) also each placement's split and its jobs' bounds."""
    contract = any("bounds" in p or "split" in p for p in plan.placements)
    extra = ("split", "bounds") if contract else ()
    table = Table(
        "GPU",
        "jobs",
        "workloads",
        *extra,
        "p50 slowdown",
        "p90 slowdown",
        "gain",
        "why (top contributions, log units)",
        title=(
            f"{len(plan.placements)} placements, {len(plan.waiting)} job(s) waiting; expected work rate "
            f"{plan.work_rate:.2f} GPU-equivalents vs {plan.exclusive_work_rate:.2f} without sharing "
            f"({plan.gain_pct:+.1f}%)"
        ),
    )
    for p in plan.placements:
        why = p.get("why")
        reason = ""
        if why:
            reason = "; ".join(f"{c['feature']} {c['contribution']:+.2f}" for c in why["a"][:2])
        knob = ()
        if contract:
            split = f"{p['split']}:{100 - p['split']}" if p.get("split") is not None else "-"
            knob = (split, " / ".join(p.get("bounds", [])))
        table.add_row(
            ",".join(p["gpus"]),
            " + ".join(p["jobs"]),
            " + ".join(p["workloads"]),
            *knob,
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
    app.command()(collector_paused(recommend))
