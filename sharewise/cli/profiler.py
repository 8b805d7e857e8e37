"""CLI of the measuring commands: ``workloads``, ``profile``, ``pairs``, ``show``."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import typer

from sharewise.cli.common import Table, console, err_console, fmt, one_of, print_json, split_list
from sharewise.errors import SharewiseError
from sharewise.profiler.config import ISOLATIONS, SIZES
from sharewise.profiler.executor_registry import EXECUTORS
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
THREADS = typer.Option(
    None,
    "--threads",
    help="Threads per process (default: the cores it may use; on a GPU half of them, a pair member's share, "
    "alone too).",
)
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
    shares: str = typer.Option(
        None,
        "--shares",
        help="Also measure the job's solo rate under the sharing knob at these shares in percent, e.g. 25,50,75: "
        "its scaling curve (a CPU quota with --mode cpu, an MPS thread percentage with --mode mps).",
    ),
):
    """Profile workloads alone: throughput, step-time percentiles, CV over repeats and f_* features.

    A training command runs unmodified; sharewise counts its optimizer steps and pauses it between windows.

    Example: sharewise profile resnet18 'mytrain=cmd:python train.py --bs 64' --device cpu --out runs/cpu
    """
    from sharewise.app.profiling import ProfileOptions
    from sharewise.app.profiling import profile as run

    config = _config(locals(), max_repeats=max(repeats, 20), shares=_shares(shares))
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
        False,
        "--retry-failed",
        help="Rerun pairs recorded as failed or timeout (and, with --extend, extend those wider than --ci-target).",
    ),
    extend: int = typer.Option(
        0,
        "--extend",
        help="Extension rounds of a pair still wider than --ci-target after --max-repeats, once the planned pairs "
        "are measured: windows twice as long, up to --max-repeats more repeats each (default 0: none).",
    ),
    time_budget: float = typer.Option(
        None,
        "--time-budget",
        help="Seconds the campaign may take: a pair that would not end in time is left for a rerun, extensions "
        "run in the time left, and the campaign ends by itself.",
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
    split: list[str] = typer.Option(
        None,
        "--split",
        help="Measure the pairs under the sharing knob at split A:B in percent (the first workload's share: a CPU "
        "quota with --mode cpu, an MPS thread percentage with --mode mps; timeslice has none); repeat it, or "
        "give several comma-separated, for several splits. Each split is its own row.",
    ),
):
    """Measure co-location slowdowns of all pairs (self-pairs included) of a workload list.

    Each finished pair is saved before the next starts; rerun the same command to resume.

    Example: sharewise pairs -w resnet18,lstm_lm,ncf --device cpu --mode cpu --out runs/cpu --split 70:30
    """
    from sharewise.app.profiling import PairsOptions
    from sharewise.app.profiling import pairs as run

    config = _config(
        locals(), max_repeats=max_repeats, ci_target=ci_target / 100, extend_rounds=extend, time_budget_s=time_budget
    )
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
        splits=_splits(split),
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


def _shares(text: str | None) -> tuple[int, ...]:
    """``--shares 25,50,75`` as whole percents (() without the option); a bad one is a ``ConfigError``."""
    if not text:
        return ()
    from sharewise.errors import ConfigError

    try:
        return tuple(sorted({int(x) for x in split_list([text])}))
    except ValueError:
        raise ConfigError(f"--shares takes whole percents separated by commas, e.g. 25,50,75, got {text!r}") from None


def _splits(values: list[str] | None) -> tuple[float | None, ...]:
    """``--split`` values as shares of the first workload (``(None,)``: no knob)."""
    if not values:
        return (None,)
    from sharewise.profiler.knob import parse_splits

    return tuple(s.share_a for s in parse_splits(values))


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
            console=err_console.real,
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
        if ev.kind == "extend":
            progress.console.print(ev.message)
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
    if summary.extended:
        console.print(f"{summary.extended} extension round(s) run on pairs wider than the precision target")
    if summary.missed:
        shown = ", ".join(f"{a}|{b}" for a, b in summary.missed[:8]) + (" ..." if len(summary.missed) > 8 else "")
        console.print(f"[yellow]{len(summary.missed)} pair(s) still wider than the precision target[/yellow] "
                      f"(precision=missed in their rows; --extend 1 --retry-failed extends them): {shown}")
    if summary.left:
        console.print(f"[yellow]{summary.left} pair(s) left for a rerun[/yellow]: the time budget ran out")
    print_matrix(result.pairs)


def counts_text(counts: dict) -> str:
    """Counts as a reader writes them, not as Python prints a dict: ``{"ok": 35, "failed": 1}`` gives
    ``"ok 35, failed 1"``."""
    return ", ".join(f"{key} {value}" for key, value in counts.items())


def precision_counts(pairs_df) -> dict[str, int]:
    """The ``ok`` pairs by their precision judgment: ``{"met": 25, "missed": 11, "not judged": 0}``."""
    ok = pairs_df[pairs_df["status"] == "ok"]
    judged = ok["precision"] if "precision" in ok.columns else None
    counts = {"met": 0, "missed": 0, "not judged": len(ok)}
    if judged is not None:
        counts["met"], counts["missed"] = int((judged == "met").sum()), int((judged == "missed").sum())
        counts["not judged"] = len(ok) - counts["met"] - counts["missed"]
    return counts


def judged_by_meta(pairs_df, meta: dict):
    """The pairs, with the ``ok`` rows measured before sharewise judged each row's precision judged against the
    target the dataset's ``meta.json`` states for its campaign (``settings.ci_target_pct``); unchanged where it
    states none. For display: the files keep what was measured."""
    target = (meta.get("settings") or {}).get("ci_target_pct")
    if target is None or "ci_a" not in pairs_df.columns or pairs_df.empty:
        return pairs_df
    out = pairs_df.copy()
    if "precision" not in out.columns:
        out["precision"] = ""
    if "ci_target" not in out.columns:
        out["ci_target"] = math.nan
    widest = out[["ci_a", "ci_b"]].astype(float).max(axis=1, skipna=False)
    todo = (out["status"] == "ok") & (out["precision"] == "") & widest.notna()
    out.loc[todo, "precision"] = (widest[todo] <= target / 100).map({True: "met", False: "missed"})
    out.loc[todo, "ci_target"] = target / 100
    return out


def precision_line(pairs_df) -> str | None:
    """One line on the pairs that missed their precision target, e.g. ``precision: 11 of 18 pairs missed their
    target (+-5%) ...``; None where every judged pair met it."""
    counts = precision_counts(pairs_df)
    if not counts["missed"]:
        return None
    ok = pairs_df[(pairs_df["status"] == "ok") & (pairs_df.get("precision") == "missed")]
    targets = sorted({f"+-{t * 100:g}%" for t in ok["ci_target"].dropna()}) if "ci_target" in ok.columns else []
    total = counts["met"] + counts["missed"] + counts["not judged"]
    return (f"precision: {counts['missed']} of {total} pairs missed their target ({', '.join(targets) or 'unknown'}; "
            "marked * in the matrix): their intervals are wider than the campaign asked for; "
            "'sharewise pairs --extend 1 --retry-failed' extends them")


def print_matrix(pairs_df) -> None:
    """Print one slowdown matrix per device and mode: row next to column, with the 95% confidence half-width
    (``+-2%``) where the pairs have one, else the CV over repeats in brackets; ``*`` marks a pair whose row
    missed its precision target (``precision``)."""
    from sharewise.datasets.summary import slowdown_matrix

    frame = pairs_df.assign(_split=pairs_df["split_a"].fillna(-1.0) if "split_a" in pairs_df else -1.0)
    for (dev, mode, split), group in frame.groupby(["device_name", "mode", "_split"]):
        # One matrix per split of the sharing knob: row next to column, the row's share first (70:30).
        knob = "" if split < 0 else f", split {int(split)}:{100 - int(split)} (workload_a's share first)"
        matrix = slowdown_matrix(group)
        cis = slowdown_matrix(group, value="ci")
        cvs = slowdown_matrix(group, value="cv")
        if matrix.empty:
            continue
        missed = set()
        if "precision" in group.columns:
            rows = group[(group["status"] == "ok") & (group["precision"] == "missed")]
            missed = {(a, b) for a, b in zip(rows["workload_a"], rows["workload_b"], strict=True)}
            missed |= {(b, a) for a, b in missed}
        table = Table(
            title=f"slowdown of row next to column (+-95% CI half-width, or (CV)) - {dev}, mode {mode}{knob}"
        )
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
                mark = "[red]*[/red]" if (r, c) in missed else ""
                cells.append(f"[{colour}]{v:.2f}[/{colour}]{spread}{mark}")
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
    pairs = judged_by_meta(result.pairs, result.meta)
    if as_json:
        # The ok pairs by their precision judgment, e.g. {"met": 25, "missed": 11, "not judged": 0}.
        print_json({**result.to_json(), "precision": precision_counts(pairs)})
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
    line = precision_line(pairs)
    if line:
        console.print(line)
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
    print_matrix(pairs)


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
