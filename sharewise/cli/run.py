"""CLI of ``sharewise run``: a trace's jobs run for real on the local devices under each policy in turn."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from sharewise.cli import options
from sharewise.cli.common import Table, bound_cell, console, err_console, one_of, print_json
from sharewise.policy import REGISTRY as POLICIES
from sharewise.runtime.lengths import DEFAULT_LENGTH_S

#: Exit status of a run that completed with some job failed (2 stays bad input, nothing run).
FAILED_JOBS_EXIT = 1


def run(
    trace: Path = typer.Argument(
        ..., help="Generic trace CSV: job_id, arrival_s, workload, gpus, and steps or duration_s (a training "
        "command, NAME=cmd:..., may leave its length out)."
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Run folder (created; a rerun on it resumes)."),
    data: str = typer.Option(
        "reference", "--data", "-d", help="Dataset whose measured pairs the policies know (or 'reference')."
    ),
    policy: list[str] = typer.Option(
        None, "--policy", "-p",
        help=one_of("Policy to run (repeat the option; default: exclusive-sjf and sharewise)", POLICIES),
    ),
    device: str = typer.Option("cpu", "--device", help="cpu (core sets as slots) or cuda (every visible GPU)."),
    slots: int = typer.Option(
        None, "--slots", help="CPU only: split the cores into this many equal slots, each standing for a GPU."
    ),
    mode: str = typer.Option(None, "--mode", help="CUDA sharing mode: timeslice (default) or mps."),
    device_name: str = options.DEVICE_NAME,
    size: str = typer.Option("small", "--size", help="Size of built-in workloads: tiny, small or full."),
    max_slowdown: float = options.MAX_SLOWDOWN,
    split: str = options.SPLIT,
    bounds: str = options.BOUNDS,
    round_s: float = options.ROUND_S,
    oracle: bool = options.ORACLE,
    observe: bool = options.OBSERVE,
    predictions: Path = options.PREDICTIONS,
    model: Path = options.MODEL,
    group_by: str = options.GROUP_BY_OPTION,
    calibrate: float = typer.Option(
        6.0, "--calibrate", help="Seconds each workload runs alone first, for this sitting's step times (0: off)."
    ),
    compare_sim: bool = typer.Option(
        False, "--compare-sim", help="Also simulate each run with this sitting's measurements and compare."
    ),
    executor: str = typer.Option("local", "--executor", help="local, or ray (each job a Ray actor on its slot)."),
    address: str = typer.Option(None, "--address", help="Ray cluster address (with --executor ray)."),
    trace_format: str = options.TRACE_FORMAT,
    default_length: float = typer.Option(
        DEFAULT_LENGTH_S, "--default-length",
        help="Solo seconds the policies assume for a training command whose length nothing states (no steps or "
        "duration_s, no --total-steps argument, no earlier run in this run folder), until its real length is "
        "known.",
    ),
    metrics_port: int = typer.Option(
        None, "--metrics-port", help="Serve live Prometheus metrics of the run on this port (0: any free port; "
        "default: off).",
    ),
    metrics_host: str = typer.Option(
        "127.0.0.1", "--metrics-host", help="Address the metrics endpoint listens on (with --metrics-port)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object; progress and notes go to stderr."),
):
    """Run a trace's jobs for real under each policy in turn and measure the pairs that share.

    Each policy starts, pauses, resumes and finishes the jobs on the local devices (or on Ray with --executor
    ray) and writes RUNDIR/<policy>/run.json.

    A job that exits 0 is done, whatever the trace guessed (the steps it ran are its length); a job that fails
    is counted in the table and named with its reason in the verdict, and averages are over finished jobs.

    Exit status: 0 every job finished; 1 the runs completed but some job failed (named in the verdict and in
    RUNDIR/<policy>/run.json); 2 bad input, nothing ran (one line on stderr); 128+N stopped by signal N (rerun
    the same command to resume).

    Example: sharewise run jobs.csv --data reference --policy exclusive-sjf --policy sharewise --out runs/demo
    --compare-sim
    """
    from sharewise.app.run import DEFAULT_POLICIES, PhysicalConfig, run_physical
    from sharewise.profiler.interrupts import CampaignInterrupted

    config = PhysicalConfig(
        trace=str(trace), out=str(out), data=data, policies=tuple(policy or DEFAULT_POLICIES), device=device,
        slots=slots, mode=mode, device_name=device_name, trace_format=trace_format, size=size,
        max_slowdown=max_slowdown, round_s=round_s, oracle=oracle, observe=observe,
        predictions=str(predictions) if predictions else None, model=str(model) if model else None,
        group_by=group_by, calibrate_s=calibrate, compare_sim=compare_sim, executor=executor, address=address,
        default_length_s=default_length, metrics_port=metrics_port, metrics_host=metrics_host, split=split,
        bounds=bounds,
    )
    progress = RunProgress()
    try:
        report = run_physical(config, progress=progress)
    except CampaignInterrupted as exc:
        progress.stop()
        err_console.print(
            f"interrupted by {exc.name}: every job stopped; finished jobs and the state of the interrupted run are "
            f"kept in {out}; rerun the same command to resume"
        )
        sys.exit(exc.exit_code)
    finally:
        progress.stop()
    summary = report.to_json()
    if as_json:
        for note in report.notes:
            err_console.print(f"note: {note}")
        print_json(summary)
    else:
        render(summary)
        for note in report.notes:
            console.print(f"[dim]note: {note}[/dim]")
    if report.failed_jobs():
        sys.exit(FAILED_JOBS_EXIT)  # not typer.Exit: click returns its code in main's non-standalone mode


def render(summary: dict) -> None:
    """The runs' table (and the comparison with the simulator where it ran)."""
    dev = summary["device"]
    failed = any(m.get("failed") for m in summary["policies"].values())
    bounded = any(m.get("bounded_jobs") is not None for m in summary["policies"].values())
    table = Table(
        "policy", "finished", "failed", "avg JCT (s)", "p95 JCT (s)", "makespan (s)", "avg queue (s)", "slot util",
        "SLO violations", *(("bound violations",) if bounded else ()), "preemptions",
        title=f"{summary['jobs']} jobs run on {dev['slots']} {dev['kind']} slot(s) ({dev['device_name']}); "
        f"policies see {summary['view']} slowdowns",
        caption="JCT, queue and SLO columns are over the jobs that finished only" if failed else None,
    )
    for name, m in summary["policies"].items():
        n_failed = int(m.get("failed", 0))
        table.add_row(name, f"{m.get('finished', summary['jobs'])}/{summary['jobs']}",
                      f"[bold red]{n_failed}[/bold red]" if n_failed else "0", _num(m["avg_jct"]),
                      _num(m["p95_jct"]), _num(m["makespan"]), _num(m["avg_queue"]), f"{m['utilization']:.2f}",
                      str(m["slo_violations"]), *((bound_cell(m),) if bounded else ()), str(m["preemptions"]))
    console.print(table)
    for line in summary["verdict"]:
        console.print(line)
    comp = summary.get("comparison")
    if comp:
        t = Table("policy", "avg JCT phys/sim (s)", "ratio", "p95 phys/sim (s)", "ratio", "job ratio median",
                  "within 10%", "within 20%", "gain vs excl-sjf phys/sim",
                  title="physical run against the simulator (truth: this sitting's measurements)")
        for name, c in comp.items():
            gain = "-"
            if "gain_vs_exclusive_sjf_physical" in c:
                gain = f"{c['gain_vs_exclusive_sjf_physical']:.3f} / {c['gain_vs_exclusive_sjf_simulated']:.3f}"
            t.add_row(name, f"{c['avg_jct_physical']:.1f} / {c['avg_jct_simulated']:.1f}", f"{c['avg_ratio']:.3f}",
                      f"{c['p95_jct_physical']:.1f} / {c['p95_jct_simulated']:.1f}", f"{c['p95_ratio']:.3f}",
                      f"{c['job_ratio_median']:.3f}", f"{c['within_10']:.0%}", f"{c['within_20']:.0%}", gain)
        console.print(t)


def _num(x) -> str:
    return "-" if x is None or x != x else f"{x:.1f}"


class RunProgress:
    """A rich progress display on stderr: a bar per policy over its jobs, with the run clock and running jobs."""

    def __init__(self) -> None:
        self._progress = None
        self._tasks: dict[str, int] = {}

    def _ensure(self):
        if self._progress is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                                      console=err_console.real, transient=False)
            self._progress.start()
        return self._progress

    def __call__(self, kind: str, **info) -> None:
        p = self._ensure()
        if kind == "metrics":
            err_console.print(f"serving live metrics at {info['url']}")
        elif kind == "calibrate":
            err_console.print(f"calibrating {info['name']} (alone, a few seconds)")
        elif kind == "kept":
            err_console.print(f"{info['policy']}: finished in an earlier call, kept")
        elif kind == "policy":
            self._tasks[info["policy"]] = p.add_task(info["policy"], total=info["total"], status="")
        elif kind == "event" and info["policy"] in self._tasks:
            p.update(self._tasks[info["policy"]], completed=info["done"],
                     status=f"t={info['now']:.0f}s, {info['running']} job(s) live")

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def register(app: typer.Typer) -> None:
    app.command()(run)
