"""CLI of the measuring commands: ``workloads``, ``profile``, ``pairs``, ``show``."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import typer
from rich.table import Table

from sharewise.cli.common import console, err_console, fmt, one_of, print_json, split_list
from sharewise.errors import SharewiseError
from sharewise.profiler.config import ISOLATIONS, SIZES
from sharewise.profiler.executors import EXECUTORS
from sharewise.profiler.modes import SHARING_MODES


def workloads(as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of a table.")):
    """List the built-in workloads.

    Example: sharewise workloads --json
    """
    from sharewise.app.profiling import workloads as describe

    items = describe()
    if as_json:
        print_json(items)
        return
    table = Table(
        title=f"{len(items)} built-in workloads (your own: path/to/file.py:ClassName, or NAME=cmd:python train.py)"
    )
    for col in ("name", "family", "batch", "kind", "description"):
        table.add_column(col)
    for it in items:
        table.add_row(it["name"], it["family"], str(it["default_batch_size"]), it["kind"], it["description"])
    console.print(table)


def _config(settings: dict, **extra):
    """The RunConfig of a measuring command from its shared options (``settings``: the command's locals)."""
    from sharewise.profiler.config import RunConfig, default_mode

    device = settings["device"]
    if settings.get("slots") is not None:
        from sharewise.runtime.slots import pin_to_slot

        pin_to_slot(device, settings["slots"])
    return RunConfig(
        mode=settings["mode"] or default_mode(device),
        size=settings["size"],
        batch_size=settings["batch_size"],
        window_s=settings["window"],
        repeats=settings["repeats"],
        threads=settings["threads"],
        timeout_s=settings["timeout"],
        isolation=settings["isolation"],
        idle_wait_s=settings["idle_wait"],
        probe=not settings["no_probe"],
        min_window_steps=settings["min_steps"],
        device=device,
        **extra,
    )


DEVICE = typer.Option("cpu", "--device", "-d", help="cpu, cuda or cuda:N.")
SLOTS = typer.Option(
    None, "--slots", help="CPU only: measure on the first of N equal core sets, the device 'run --slots N' uses."
)
MODE = typer.Option(
    None,
    "--mode",
    "-m",
    help=one_of("Sharing mode (default: cpu on CPU, timeslice on CUDA)", SHARING_MODES),
)
SIZE = typer.Option("small", "--size", help=one_of("Workload size knob", SIZES))
BATCH = typer.Option(
    None, "--batch-size", "-b", help="Batch size for every workload (default: each one's own)."
)
WINDOW = typer.Option(0.5, "--window", help="Measurement window in seconds (extended to hold --min-steps steps).")
THREADS = typer.Option(None, "--threads", help="Threads per process (default: the cores it may use).")
TIMEOUT = typer.Option(
    300.0, "--timeout", help="Seconds one run may take before it is recorded as a timeout."
)
IDLE_WAIT = typer.Option(
    30.0, "--idle-wait", help="Seconds to wait for an idle machine before each run; then it runs anyway."
)
ISOLATION = typer.Option(
    "warm",
    "--isolation",
    help=one_of(
        "warm: one long-lived process per workload, its repeats and pairs in it; fresh: new processes for "
        "every repeat",
        ISOLATIONS,
    ),
)
MIN_STEPS = typer.Option(3, "--min-steps", help="Steps a window holds at least (it is extended to hold them).")
NO_PROBE = typer.Option(
    False,
    "--no-probe",
    help="Skip the probe window of solo profiles (no f_probe_* features; the predictor then has no offset).",
)


def _probe_cell(row: dict) -> str:
    """The probe sensitivity and its spread over repeats, e.g. ``1.34x +-5%``; ``-`` without a probe."""
    value = row.get("f_probe_slowdown", math.nan)
    if value != value:
        return "-"
    spread = row.get("probe_cv", math.nan)
    return f"{value:.2f}x" + ("" if spread != spread else f" +-{spread * 100:.0f}%")


def profile(
    workload: list[str] = typer.Argument(
        ...,
        help="Workload names, path/to/file.py:Class specs, or training commands as they are: "
        "'NAME=cmd:python train.py ARGS' (see docs/guides/profile.md, 'Your training script as is').",
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Dataset folder to add the profiles to."),
    device: str = DEVICE,
    slots: int = SLOTS,
    mode: str = MODE,
    size: str = SIZE,
    batch_size: int = BATCH,
    window: float = WINDOW,
    repeats: int = typer.Option(6, "--repeats", help="Repeats: a solo window and one next to the probe each."),
    isolation: str = ISOLATION,
    min_steps: int = MIN_STEPS,
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

    A training command runs unmodified; sharewise counts its optimizer steps and pauses it between windows.

    Example: sharewise profile resnet18 'mytrain=cmd:python train.py --bs 64' --device cpu --out runs/cpu
    """
    from sharewise.app.profiling import ProfileOptions
    from sharewise.app.profiling import profile as run

    config = _config(locals(), max_repeats=max(repeats, 20))
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

    def on_row(row: dict, warning: str | None) -> None:
        n_feat = sum(1 for k in row if k.startswith("f_"))
        pm = row.get("pm_score", math.nan)
        table.add_row(
            row["workload"],
            f"{row['device_kind']}:{row['device_index']}",
            str(row["batch_size"]),
            f"{row['throughput']:.2f}",
            fmt(row["samples_per_s"], ".1f"),
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
        if warning:
            err_console.print(f"[yellow]warning:[/yellow] {warning}")

    options = ProfileOptions(
        workloads=tuple(workload), out=out, config=config, all_devices=all_devices, use_cache=not no_cache
    )
    from sharewise.profiler.interrupts import CampaignInterrupted

    try:
        run(options, on_row=on_row)
    except CampaignInterrupted as exc:
        console.print(table)
        stopped(exc, len(table.rows), out)
    console.print(table)


def pairs(
    workloads: list[str] = typer.Option(
        ...,
        "--workloads",
        "-w",
        help="Comma-separated workloads (names or specs); give each command ('NAME=cmd:...') its own -w.",
    ),
    out: Path = typer.Option(
        ..., "--out", "-o", help="Dataset folder (created if missing; resumes if present)."
    ),
    device: str = DEVICE,
    slots: int = SLOTS,
    mode: str = MODE,
    size: str = SIZE,
    batch_size: int = BATCH,
    window: float = WINDOW,
    repeats: int = typer.Option(
        3, "--repeats", help="Repeats per pair at least (each: both alone, then together); more until precise."
    ),
    max_repeats: int = typer.Option(20, "--max-repeats", help="Upper bound of repeats when the interval stays wide."),
    ci_target: float = typer.Option(
        2.0, "--ci-target", help="Stop once each slowdown's 95% confidence half-width is within this many percent."
    ),
    isolation: str = ISOLATION,
    min_steps: int = MIN_STEPS,
    budget: int = typer.Option(
        None,
        "--budget",
        help="Only K pairs per listed workload without pairs, picked one at a time by --model (then stop).",
    ),
    model: Path = typer.Option(None, "--model", help="Model (sharewise train) that picks the --budget pairs."),
    threads: int = THREADS,
    timeout: float = TIMEOUT,
    idle_wait: float = IDLE_WAIT,
    retry_failed: bool = typer.Option(
        False, "--retry-failed", help="Rerun pairs recorded as failed or timeout."
    ),
    executor: str = typer.Option("local", "--executor", help=one_of("Where pair runs execute", EXECUTORS)),
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
    from sharewise.app.profiling import PairsOptions
    from sharewise.app.profiling import pairs as run

    config = _config(locals(), max_repeats=max_repeats, ci_target=ci_target / 100)
    options = PairsOptions(
        workloads=tuple(split_list(workloads)),
        out=out,
        config=config,
        executor=executor,
        address=address,
        ray_cpus=ray_cpus,
        max_retries=max_retries,
        retry_failed=retry_failed,
        budget=budget,
        model=model,
    )
    from sharewise.profiler.interrupts import CampaignInterrupted

    try:
        with CampaignProgress() as progress:
            result = run(options, on_event=progress.on_event)
    except CampaignInterrupted as exc:
        stopped(exc, exc.kept, out)
    render_pairs(result)
    summary = result.summary
    # A campaign of commands that measured nothing is a failed start (a wrong path, a script that never
    # steps): one line and exit 2. Built-in workloads' failures stay recorded rows of a campaign that ran.
    from sharewise.command_spec import is_command_spec

    commands = any(is_command_spec(w) for w in options.workloads)
    if commands and summary.failures and not summary.profiled and not summary.by_status.get("ok"):
        a, b, status, error = summary.failures[0]
        raise CampaignFailed(
            f"nothing could be measured ({len(summary.failures)} failure(s); first: {a} | {b}, {status}: "
            f"{error}); the rows recorded are kept in {out}"
        )


class CampaignFailed(SharewiseError):
    """A campaign in which nothing could be measured (every profile and pair failed)."""


def stopped(exc, kept: int, out: Path) -> None:
    """Say what an interrupted run kept and exit with the signal's shell code (130 for Ctrl-C, 143 for SIGTERM)."""
    err_console.print(
        f"interrupted by {exc.name}: workers stopped, {kept} row(s) written are kept in {out}; "
        "rerun the same command to resume"
    )
    # Not typer.Exit: without standalone mode click returns its code instead of exiting with it.
    sys.exit(exc.exit_code)


class CampaignProgress:
    """A progress bar over a campaign's pairs on stderr, started at the first event (so input errors print
    alone), with the last two pairs' slowdowns beside it."""

    def __init__(self) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.last: list[str] = []
        self.progress = Progress(
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
        self.task_id = self.progress.add_task("pairs", total=None, last="")

    def __enter__(self) -> CampaignProgress:
        return self

    def __exit__(self, *exc) -> None:
        if self.progress.live.is_started:
            self.progress.stop()

    def on_event(self, ev) -> None:
        progress = self.progress
        if not progress.live.is_started:
            progress.start()
        if ev.kind == "profile":
            progress.console.print(f"profiled {ev.row['workload']}: {ev.row['throughput']:.2f} steps/s")
            return
        if ev.kind == "plan":
            progress.update(self.task_id, total=ev.total, completed=ev.done)
            progress.console.print(f"{ev.done} of {ev.total} pairs already measured; {ev.message}")
            return
        row = ev.row
        pair = f"{row['workload_a']}|{row['workload_b']}"
        if row["status"] == "ok":
            self.last.append(f"{pair} {row['slowdown_a']:.2f}/{row['slowdown_b']:.2f}")
        else:
            self.last.append(f"{pair} {row['status']}")
        progress.update(self.task_id, completed=ev.done, last="  ".join(self.last[-2:]))


def render_pairs(result) -> None:
    """Print a campaign's summary, its failures, and the dataset's slowdown matrices."""
    summary = result.summary
    console.print(
        f"campaign done in {summary.seconds:.0f} s: {summary.measured} measured, {summary.skipped} already done, "
        f"{summary.profiled} profiled; status {counts_text(summary.by_status) or 'none'}"
    )
    for a, b, status, error in summary.failures:
        console.print(f"  [red]{status}[/red] {a} | {b}: {error}")
    print_matrix(result.pairs)


def counts_text(counts: dict) -> str:
    """Counts as a reader writes them, not as Python prints a dict: ``{"ok": 35, "failed": 1}`` gives
    ``"ok 35, failed 1"``."""
    return ", ".join(f"{key} {value}" for key, value in counts.items())


def print_matrix(pairs_df) -> None:
    """Print one slowdown matrix per device and mode: row next to column, with the 95% confidence half-width
    (``+-2%``) where the pairs have one, else the CV over repeats in brackets."""
    from sharewise.datasets.summary import slowdown_matrix

    for (dev, mode), group in pairs_df.groupby(["device_name", "mode"]):
        matrix = slowdown_matrix(group)
        cis = slowdown_matrix(group, value="ci")
        cvs = slowdown_matrix(group, value="cv")
        if matrix.empty:
            continue
        table = Table(title=f"slowdown of row next to column (+-95% CI half-width, or (CV)) - {dev}, mode {mode}")
        table.add_column("self \\ partner")
        for c in matrix.columns:
            table.add_column(c, justify="right")
        for r in matrix.index:
            cells = []
            for c in matrix.columns:
                v, h, s = matrix.loc[r, c], cis.loc[r, c], cvs.loc[r, c]
                if v != v:
                    cells.append("-")
                    continue
                colour = "green" if v < 1.5 else "yellow" if v < 2.0 else "red"
                spread = f" +-{h * 100:.1f}%" if h == h else "" if s != s else f" ({s * 100:.0f}%)"
                cells.append(f"[{colour}]{v:.2f}[/{colour}]{spread}")
            table.add_row(r, *cells)
        console.print(table)


def show(
    data: str = typer.Argument(..., help="Dataset folder, or 'reference' for the shipped CPU dataset."),
    as_json: bool = typer.Option(False, "--json", help="Print counts and the slowdown matrix as JSON."),
):
    """Summarize a dataset: counts, devices, profiles and the pair slowdown matrix.

    Example: sharewise show reference
    """
    from sharewise.app.profiling import show as read

    result = read(data)
    if as_json:
        print_json(result.to_json())
        return
    overview, prof = result.overview, result.profiles
    console.print(f"[bold]{result.path}[/bold]")
    if result.meta.get("description"):
        console.print(result.meta["description"])
    status = f" ({counts_text(overview['status'])})" if overview["status"] else ""
    devices, modes = ", ".join(overview["devices"]) or "none", ", ".join(overview["modes"]) or "none"
    console.print(
        f"{overview['profiles']} profiles of {overview['workloads']} workloads; {overview['pairs']} pairs{status}; "
        f"devices {devices}; modes {modes}"
    )
    if overview.get("ci_median") is not None:
        console.print(
            f"slowdowns known to within +-{overview['ci_median'] * 100:.1f}% (median 95% confidence half-width; "
            f"widest +-{overview['ci_max'] * 100:.1f}%)"
        )
    if len(prof):
        table = Table(title="solo profiles")
        for col in ("workload", "family", "device", "mode", "batch", "steps/s", "CV", "features"):
            table.add_column(col)
        feature_cols = [c for c in prof.columns if c.startswith("f_")]
        counts = prof[feature_cols].notna().sum(axis=1).tolist() if feature_cols else [0] * len(prof)
        for (_, r), nf in zip(prof.iterrows(), counts, strict=True):
            cvv = r.get("cv", math.nan)
            table.add_row(
                r["workload"],
                r["family"],
                r["device_name"],
                r["mode"],
                str(r["batch_size"]),
                f"{r['throughput']:.3g}",
                "-" if cvv != cvv else f"{cvv * 100:.1f}%",
                str(int(nf)),
            )
        console.print(table)
        for note in unmeasured_notes(prof):
            console.print(note)
    print_matrix(result.pairs)


def unmeasured_notes(profiles) -> list[str]:
    """Why the features of command profiles (a ``spec`` of ``NAME=cmd:...``) are NaN, one line per reason."""
    from sharewise.command_spec import is_command_spec

    if "spec" not in profiles.columns:
        return []
    commands = profiles[profiles["spec"].fillna("").astype(str).map(is_command_spec)]
    if commands.empty:
        return []
    from sharewise.profiler.blackbox import UNMEASURED, UNMEASURED_SOMETIMES

    names = ", ".join(sorted(set(commands["workload"].astype(str))))
    reasons: dict[str, list[str]] = {}
    for feature, why in {**UNMEASURED, **UNMEASURED_SOMETIMES}.items():
        if feature in commands.columns and commands[feature].isna().any():
            reasons.setdefault(why, []).append(feature)
    lines = [f"commands measured as they run ({names}): features not measured (NaN), and why:"]
    for why, features in reasons.items():
        shown = ", ".join(features[:3]) + (f" and {len(features) - 3} more" if len(features) > 3 else "")
        lines.append(f"  {shown}: {why}")
    return lines if len(lines) > 1 else []


def register(app: typer.Typer) -> None:
    app.command()(workloads)
    app.command()(profile)
    app.command()(pairs)
    app.command()(show)
