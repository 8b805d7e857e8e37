"""CLI of ``sharewise observe`` (run a command with its steps exported) and ``sharewise collect`` (their pair rows)."""

from __future__ import annotations

import datetime as _dt
import os
import signal
import sys
from pathlib import Path

import typer

from sharewise.cli.common import Table, console, err_console, fmt, print_json
from sharewise.profiler.exporter import DEFAULT_PORT, ENV_HOST, ENV_NAME, ENV_PORT

SCRAPES_HELP = (
    "Saved scrapes instead of a server (repeat for several files): Prometheus text format as /metrics serves it, "
    "any number of scrapes per file, each sample line ending with its scrape time in milliseconds, e.g. saved every "
    "second by: while sleep "
    "1; do curl -s http://127.0.0.1:9478/metrics | awk -v t=$(date +%s%3N) '/^sharewise_observed/ {print $0, t}' "
    ">> scrapes.txt; done"
)


def observe(
    command: list[str] = typer.Argument(None, help="The command to run, after --: e.g. -- python train.py --lr 0.1"),
    port: int = typer.Option(DEFAULT_PORT, "--port", envvar=ENV_PORT, help="Port the job serves /metrics on."),
    name: str = typer.Option(
        None, "--name", envvar=ENV_NAME, help="Workload name of the job's rows (default: the script's file stem)."
    ),
    host: str = typer.Option(
        None, "--host", envvar=ENV_HOST,
        help="Address to bind (default 127.0.0.1; 0.0.0.0 where Prometheus scrapes from another machine).",
    ),
    print_env: bool = typer.Option(
        False, "--print-env",
        help="Print the export lines that observe every Python job started after them, and run nothing (for a "
        "Slurm script: eval \"$(sharewise observe --print-env --port 9478 --name train)\").",
    ),
    cpu_env: bool = typer.Option(
        None, "--cpu-env/--no-cpu-env", show_default=False,
        help="Start the job with the environment sharewise's CPU workers use (OMP_WAIT_POLICY=PASSIVE, "
        "KMP_BLOCKTIME=0, one thread per core, pinned to this process's cores; variables already set win). "
        "Default: on where no NVIDIA GPU is visible.",
    ),
):
    """Run an unmodified training command and serve its step rate, device and name as Prometheus metrics.

    The job's behaviour and exit status are unchanged; signals are passed on. On the CPU the job gets the
    environment of sharewise's own CPU workers (--cpu-env), without which OpenMP threads spin while they wait and
    two jobs sharing cores measure the spinning. A port that is taken, or a Python without prometheus_client, is
    one line on stderr and the job runs unobserved. What a pod spec or a Slurm script needs instead of this
    wrapper: docs/guides/observe.md.

    Example: sharewise observe --port 9478 --name cnn -- python train.py --epochs 3
    """
    from sharewise.observe.launch import run_observed, shell_exports

    if print_env:
        console.print(shell_exports(port, name, host, cpu_env), soft_wrap=True, markup=False)
        return
    code = run_observed(command or [], port, name, host, cpu_env)
    if code < 0:  # ended by a signal: end the same way, so the caller sees what it would have seen
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code
    if code:
        sys.exit(code)  # not typer.Exit: without standalone mode click returns its code instead of exiting with it


def collect(
    prometheus: str = typer.Option(None, "--prometheus", help="Base URL of a Prometheus server that scraped them."),
    start: str = typer.Option("-1h", "--start", help="Start: unix seconds, ISO 8601, 'now' or before now ('-30m')."),
    end: str = typer.Option("now", "--end", help="End, as --start."),
    step: float = typer.Option(1.0, "--step", help="Seconds between the times the series are read at."),
    scrapes: list[Path] = typer.Option(None, "--scrapes", help=SCRAPES_HELP),
    data: list[str] = typer.Option(
        None, "--data", "-d", help="Dataset(s) whose solo profiles give a job's rate alone where it never ran alone."
    ),
    out: Path = typer.Option(None, "--out", "-o", help="Dataset folder the rows are added to (default: none)."),
    mode: str = typer.Option(
        None, "--mode", help="Sharing mode of the rows (default: cpu on CPUs, timeslice on GPUs)."
    ),
    repeats: int = typer.Option(3, "--repeats", help="Windows together a pair needs at least (as pairs' --repeats)."),
    ci_target: float = typer.Option(
        5.0, "--ci-target",
        help="Largest 95% confidence half-width of a slowdown, in percent, for a row (pairs stops repeating at 2%; "
        "observed windows cannot be repeated).",
    ),
    min_steps: int = typer.Option(3, "--min-steps", help="Steps every job's window holds at least."),
    series_csv: Path = typer.Option(None, "--series-csv", help="Also write the series read, one row per sample."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows and intervals as one JSON object."),
):
    """Pair rows (source observed) from jobs run under `sharewise observe`: a job's rate together over its rate alone.

    Reads the series from a Prometheus server (a time range) or saved scrapes, finds the stretches in which two
    observed jobs shared one device (one GPU UUID; one CPU core set), and pools each pair's windows under the
    confidence rule of pairs: too few windows or too wide an interval gives no row, counted. The rate alone is the
    job's own stretches alone on that device, else its solo profile (--data). `sharewise train` reads the rows.

    Example: sharewise collect --prometheus http://127.0.0.1:9090 --start -2h --out runs/observed --data runs/cpu
    """
    from sharewise.observe.collect import CollectOptions
    from sharewise.observe.collect import collect as run
    from sharewise.observe.series import parse_time

    options = CollectOptions(
        prometheus=prometheus, start=parse_time(start) if prometheus else None,
        end=parse_time(end) if prometheus else None, step=step, scrapes=tuple(scrapes or ()),
        data=tuple(data or ()), out=out, mode=mode, repeats=repeats, ci_target=ci_target / 100, min_steps=min_steps,
    )
    result = run(options)
    if series_csv is not None:
        result.observed.to_frame().to_csv(series_csv, index=False)
    if as_json:
        print_json({"rows": result.rows.to_dict(orient="records"), "intervals": [vars(i) for i in result.intervals],
                    "skipped": dict(result.skipped), "alone_windows": result.alone_windows,
                    "written": str(result.written) if result.written else None})
        return
    render(result)


def render(result) -> None:
    """The rows written, every shared interval with its outcome, and the skipped counts."""
    rows = Table(title=f"observed pairs ({len(result.rows)} row(s)) from {result.observed.source}")
    for col in ("workload_a", "workload_b", "device", "windows", "solo a/s", "solo b/s", "slowdown a", "slowdown b",
                "alone"):
        rows.add_column(col, justify="left" if col in ("workload_a", "workload_b", "device", "alone") else "right")
    for r in result.rows.to_dict(orient="records"):
        rows.add_row(
            r["workload_a"], r["workload_b"], r["device_name"], str(r["trials"]), fmt(r["solo_a"], ".2f"),
            fmt(r["solo_b"], ".2f"), _with_ci(r["slowdown_a"], r["ci_a"]), _with_ci(r["slowdown_b"], r["ci_b"]),
            r["isolation"].removeprefix("observed:"),
        )
    console.print(rows)
    spans = Table(title=f"intervals two or more observed jobs shared a device ({len(result.intervals)})")
    for col in ("jobs", "device", "from (UTC)", "seconds", "windows", "outcome"):
        spans.add_column(col, justify="right" if col in ("seconds", "windows") else "left")
    for i in result.intervals:
        began = _dt.datetime.fromtimestamp(i.t0, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        spans.add_row(" + ".join(i.jobs), i.device, began, f"{i.t1 - i.t0:.0f}", str(i.windows), i.outcome)
    console.print(spans)
    if result.skipped:
        err_console.print("skipped: " + ", ".join(f"{n} {why}" for why, n in sorted(result.skipped.items())))
    if result.written:
        err_console.print(f"wrote {len(result.rows)} row(s) to {result.written}")


def _with_ci(value: float, ci: float) -> str:
    """``1.42x +-3.1%``; ``-`` for a missing value."""
    return fmt(value, ".2f", "x") + ("" if ci != ci else f" +-{ci * 100:.1f}%")


def register(app: typer.Typer) -> None:
    # Everything after the options is the command: its own options are never read as sharewise's.
    app.command(context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True})(observe)
    app.command()(collect)
