"""CLI commands of the profiler: workloads, profile, pairs, show."""

from __future__ import annotations

import math
from pathlib import Path

import typer
from rich.table import Table

from sharewise._cli.common import console, err_console, print_json


def _split(values: list[str]) -> list[str]:
    out = []
    for v in values:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def workloads(as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of a table.")):
    """List the built-in workloads.

    Example: sharewise workloads --json
    """
    from sharewise.profiler.workloads import load_workload_class, workload_names

    items = []
    for name in workload_names():
        cls = load_workload_class(name)
        items.append(
            {
                "name": name,
                "family": cls.family,
                "default_batch_size": cls.default_batch_size,
                "kind": cls.kind,
                "description": cls.description,
            }
        )
    if as_json:
        print_json(items)
        return
    table = Table(
        title=f"{len(items)} built-in workloads (a workload of your own: path/to/file.py:ClassName)"
    )
    for col in ("name", "family", "batch", "kind", "description"):
        table.add_column(col)
    for it in items:
        table.add_row(it["name"], it["family"], str(it["default_batch_size"]), it["kind"], it["description"])
    console.print(table)


def _config(device, mode, size, batch_size, window, repeats, threads, timeout, **extra):
    from sharewise.profiler.config import RunConfig, default_mode

    return RunConfig(
        device=device,
        mode=mode or default_mode(device),
        size=size,
        batch_size=batch_size,
        window_s=window,
        repeats=repeats,
        threads=threads,
        timeout_s=timeout,
        **extra,
    )


DEVICE = typer.Option("cpu", "--device", "-d", help="cpu, cuda or cuda:N.")
MODE = typer.Option(
    None,
    "--mode",
    "-m",
    help="cpu | cpu-partition | timeslice | mps (default: cpu on CPU, timeslice on CUDA).",
)
SIZE = typer.Option("small", "--size", help="Workload size knob: tiny | small | full.")
BATCH = typer.Option(
    None, "--batch-size", "-b", help="Batch size for every workload (default: each one's own)."
)
WINDOW = typer.Option(2.0, "--window", help="Measurement window in seconds (extended to hold 10 steps).")
THREADS = typer.Option(None, "--threads", help="Threads per process (default: the cores it may use).")
TIMEOUT = typer.Option(
    300.0, "--timeout", help="Seconds one run may take before it is recorded as a timeout."
)
IDLE_WAIT = typer.Option(
    30.0, "--idle-wait", help="Seconds to wait for an idle machine before each run; then it runs anyway."
)
NO_PROBE = typer.Option(
    False,
    "--no-probe",
    help="Skip the probe window of solo profiles (no f_probe_* features; the predictor then has no offset).",
)


def profile(
    workload: list[str] = typer.Argument(..., help="Workload names or path/to/file.py:Class specs."),
    out: Path = typer.Option(..., "--out", "-o", help="Dataset folder to add the profiles to."),
    device: str = DEVICE,
    mode: str = MODE,
    size: str = SIZE,
    batch_size: int = BATCH,
    window: float = WINDOW,
    repeats: int = typer.Option(3, "--repeats", help="Repeats, each in a fresh process."),
    threads: int = THREADS,
    timeout: float = TIMEOUT,
    idle_wait: float = IDLE_WAIT,
    all_devices: bool = typer.Option(
        False, "--all-devices", help="Profile on every visible GPU; record PM scores."
    ),
    no_cache: bool = typer.Option(False, "--no-cache", help="Recompute features even when cached."),
    no_probe: bool = NO_PROBE,
):
    """Profile workloads alone: throughput, step-time percentiles, CV over repeats and f_* features.

    Example: sharewise profile resnet18 lstm_lm --device cpu --out runs/cpu
    """
    from sharewise.profiler.api import profile_many

    config = _config(
        device, mode, size, batch_size, window, repeats, threads, timeout, idle_wait_s=idle_wait, probe=not no_probe
    )
    table = Table(title=f"solo profiles -> {out}")
    for col in (
        "workload",
        "dev",
        "batch",
        "steps/s",
        "samples/s",
        "p50 ms",
        "p95 ms",
        "CV",
        "probe",
        "PM",
        "features",
        "time s",
    ):
        table.add_column(col, justify="right" if col not in ("workload", "dev") else "left", no_wrap=True)

    def on_row(row):
        n_feat = sum(1 for k in row if k.startswith("f_"))
        pm = row.get("pm_score", math.nan)
        table.add_row(
            row["workload"],
            f"{row['device_kind']}:{row['device_index']}",
            str(row["batch_size"]),
            f"{row['throughput']:.2f}",
            f"{row['samples_per_s']:.1f}",
            f"{row['iter_p50_ms']:.1f}",
            f"{row['iter_p95_ms']:.1f}",
            f"{row['cv'] * 100:.1f}%",
            _probe_cell(row),
            "-" if pm != pm else f"{pm:.3f}",
            str(n_feat),
            f"{row['profile_s']:.1f}",
        )
        err_console.print(
            f"profiled {row['workload']} on {row['device_name']}: {row['throughput']:.2f} steps/s"
        )
        warning = noisy_profile_warning(row, repeats)
        if warning:
            err_console.print(f"[yellow]warning:[/yellow] {warning}")

    profile_many(workload, config, out=out, all_devices=all_devices, use_cache=not no_cache, on_row=on_row)
    console.print(table)


#: Spread over repeats (CV) of a profile's throughput or probe sensitivity above which ``profile`` warns.
NOISY_CV = 0.10


def _probe_cell(row: dict) -> str:
    """The probe sensitivity and its spread over repeats, e.g. ``1.34x +-5%``; ``-`` without a probe."""
    value = row.get("f_probe_slowdown", math.nan)
    if value != value:
        return "-"
    spread = row.get("probe_cv", math.nan)
    return f"{value:.2f}x" + ("" if spread != spread else f" +-{spread * 100:.0f}%")


def noisy_profile_warning(row: dict, repeats: int) -> str | None:
    """Say so when a profile's repeats disagree by more than ``NOISY_CV``, else None.

    On a shared machine one profile can land in a disturbed stretch; its throughput and above all its probe
    sensitivity (the predictor's starting point) then mislead every prediction for that job.
    """
    spreads = {"throughput": row.get("cv", math.nan), "probe sensitivity": row.get("probe_cv", math.nan)}
    noisy = [f"{name} by {value * 100:.0f}%" for name, value in spreads.items() if value > NOISY_CV]
    if not noisy:
        return None
    return (
        f"{row['workload']}: repeats disagree on {' and '.join(noisy)} (more than {NOISY_CV * 100:.0f}%); "
        "if the machine was busy, profile it again when it is idle, or with more repeats "
        f"(--repeats {repeats + 2})"
    )


def pairs(
    workloads: list[str] = typer.Option(
        ..., "--workloads", "-w", help="Comma-separated workloads (names or specs)."
    ),
    out: Path = typer.Option(
        ..., "--out", "-o", help="Dataset folder (created if missing; resumes if present)."
    ),
    device: str = DEVICE,
    mode: str = MODE,
    size: str = SIZE,
    batch_size: int = BATCH,
    window: float = WINDOW,
    repeats: int = typer.Option(
        3, "--repeats", help="Repeats per pair in fresh processes (more if CV > 5%)."
    ),
    max_repeats: int = typer.Option(6, "--max-repeats", help="Upper bound of repeats when CV stays high."),
    threads: int = THREADS,
    timeout: float = TIMEOUT,
    idle_wait: float = IDLE_WAIT,
    retry_failed: bool = typer.Option(
        False, "--retry-failed", help="Rerun pairs recorded as failed or timeout."
    ),
    executor: str = typer.Option("local", "--executor", help="local | ray."),
    address: str = typer.Option(
        None, "--address", help="Ray cluster address (with --executor ray); default: start a local Ray."
    ),
    ray_cpus: int = typer.Option(
        None, "--ray-cpus", help="CPUs one Ray task holds on CPU-only clusters (default: all of a node's)."
    ),
    max_retries: int = typer.Option(
        2, "--max-retries", help="Ray: retries of a task whose worker or node died."
    ),
    no_probe: bool = NO_PROBE,
):
    """Measure co-location slowdowns of all pairs (self-pairs included) of a workload list.

    Each finished pair is saved before the next starts; rerun the same command to resume.

    Example: sharewise pairs -w resnet18,lstm_lm,ncf --device cpu --mode cpu --out runs/cpu
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from sharewise.profiler.campaign import run_campaign
    from sharewise.profiler.executors import executor_factory

    config = _config(
        device,
        mode,
        size,
        batch_size,
        window,
        repeats,
        threads,
        timeout,
        max_repeats=max_repeats,
        idle_wait_s=idle_wait,
        probe=not no_probe,
    )
    factory = executor_factory(executor, address=address, cpus_per_task=ray_cpus, max_retries=max_retries)
    last: list[str] = []
    progress = Progress(
        TextColumn("[bold]pairs"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[last]}"),
        console=err_console,
        transient=False,
    )
    task_id = progress.add_task("pairs", total=None, last="")
    try:

        def on_event(ev):
            if not progress.live.is_started:  # started on the first event, so input errors print alone
                progress.start()
            if ev.kind == "profile":
                progress.console.print(f"profiled {ev.row['workload']}: {ev.row['throughput']:.2f} steps/s")
                return
            if ev.kind == "plan":
                progress.update(task_id, total=ev.total, completed=ev.done)
                progress.console.print(f"{ev.done} of {ev.total} pairs already measured; {ev.message}")
                return
            row = ev.row
            if row["status"] == "ok":
                last.append(
                    f"{row['workload_a']}|{row['workload_b']} {row['slowdown_a']:.2f}/{row['slowdown_b']:.2f}"
                )
            else:
                last.append(f"{row['workload_a']}|{row['workload_b']} {row['status']}")
            progress.update(task_id, completed=ev.done, last="  ".join(last[-2:]))

        summary = run_campaign(
            _split(workloads),
            config,
            out,
            executor_factory=factory,
            on_event=on_event,
            retry_failed=retry_failed,
        )
    finally:
        if progress.live.is_started:
            progress.stop()
    console.print(
        f"campaign done in {summary.seconds:.0f} s: {summary.measured} measured, {summary.skipped} already done, "
        f"{summary.profiled} profiled; status {summary.by_status or '{}'}"
    )
    for a, b, status, error in summary.failures:
        console.print(f"  [red]{status}[/red] {a} | {b}: {error}")
    from sharewise.datasets.store import Dataset

    _print_matrix(Dataset(out).read_pairs())


def _print_matrix(pairs_df) -> None:
    from sharewise.datasets.summary import slowdown_matrix

    for (dev, mode), group in pairs_df.groupby(["device_name", "mode"]):
        matrix = slowdown_matrix(group)
        cvs = slowdown_matrix(group, value="cv")
        if matrix.empty:
            continue
        table = Table(title=f"slowdown of row next to column (CV) - {dev}, mode {mode}")
        table.add_column("self \\ partner")
        for c in matrix.columns:
            table.add_column(c, justify="right")
        for r in matrix.index:
            cells = []
            for c in matrix.columns:
                v, s = matrix.loc[r, c], cvs.loc[r, c]
                if v != v:
                    cells.append("-")
                else:
                    colour = "green" if v < 1.5 else "yellow" if v < 2.0 else "red"
                    cells.append(f"[{colour}]{v:.2f}[/{colour}]" + ("" if s != s else f" ({s * 100:.0f}%)"))
            table.add_row(r, *cells)
        console.print(table)


def show(
    data: str = typer.Argument(..., help="Dataset folder, or 'reference' for the shipped CPU dataset."),
    as_json: bool = typer.Option(False, "--json", help="Print counts and the slowdown matrix as JSON."),
):
    """Summarize a dataset: counts, devices, profiles and the pair slowdown matrix.

    Example: sharewise show reference
    """
    from sharewise.datasets.store import open_dataset
    from sharewise.datasets.summary import dataset_overview, slowdown_matrix

    ds = open_dataset(data, profiles=False)
    if not ds.exists():
        from sharewise.errors import DatasetError

        raise DatasetError(f"{data!r} holds neither profiles/ nor pairs/; is it a sharewise dataset folder?")
    prof, prs = ds.read_profiles(), ds.read_pairs()
    overview = dataset_overview(prof, prs)
    meta = ds.read_meta()
    if as_json:
        matrix = slowdown_matrix(prs)
        overview["slowdown_matrix"] = {r: {c: matrix.loc[r, c] for c in matrix.columns} for r in matrix.index}
        overview["meta"] = meta
        print_json(overview)
        return
    console.print(f"[bold]{ds.path}[/bold]")
    if meta.get("description"):
        console.print(meta["description"])
    console.print(
        f"{overview['profiles']} profiles of {overview['workloads']} workloads; {overview['pairs']} pairs "
        f"{overview['status']}; devices {overview['devices']}; modes {overview['modes']}"
    )
    if len(prof):
        table = Table(title="solo profiles")
        for col in ("workload", "family", "device", "mode", "batch", "steps/s", "CV", "features"):
            table.add_column(col)
        for _, r in prof.iterrows():
            nf = int(sum(1 for c in prof.columns if c.startswith("f_") and r[c] == r[c]))
            cvv = r.get("cv", math.nan)
            table.add_row(
                r["workload"],
                r["family"],
                r["device_name"],
                r["mode"],
                str(r["batch_size"]),
                f"{r['throughput']:.3g}",
                "-" if cvv != cvv else f"{cvv * 100:.1f}%",
                str(nf),
            )
        console.print(table)
    _print_matrix(prs)


def register(app: typer.Typer) -> None:
    app.command()(workloads)
    app.command()(profile)
    app.command()(pairs)
    app.command()(show)
