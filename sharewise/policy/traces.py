"""Job traces for the simulator: Gavel ``.trace``, the Philly CSV and a generic CSV, validated on load.

Every loader returns a ``Trace`` sorted by arrival, or raises ``TraceError`` naming the file and line; nothing
malformed reaches the simulation.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.errors import TraceError

TRACE_FORMATS = ("gavel", "philly", "csv")
GENERIC_COLUMNS = ("job_id", "arrival_s", "duration_s", "gpus", "workload")
PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus")
_GAVEL_FIELDS = 7


@dataclass(frozen=True)
class Trace:
    """Jobs to replay, sorted by arrival; all arrays have one entry per job.

    ``duration`` is the exclusive run time in seconds on a speed-1.0 GPU; ``line`` is the job's line in the
    source file (for messages); ``notes`` lists assumptions made while loading.

    Example (two jobs)::

        Trace(job_id=array(['a', 'b']), arrival=array([0., 60.]), duration=array([3600., 120.]),
              gpus=array([1, 2]), workload=array(['resnet18', 'bert']), line=array([2, 3]),
              source='jobs.csv', format='csv', notes=())
    """

    job_id: np.ndarray
    arrival: np.ndarray
    duration: np.ndarray
    gpus: np.ndarray
    workload: np.ndarray
    line: np.ndarray
    source: str = ""
    format: str = "csv"
    notes: tuple[str, ...] = field(default=())

    def __len__(self) -> int:
        return int(self.arrival.shape[0])

    def head(self, n: int) -> Trace:
        """Return the first ``n`` jobs (by arrival)."""
        return Trace(
            self.job_id[:n],
            self.arrival[:n],
            self.duration[:n],
            self.gpus[:n],
            self.workload[:n],
            self.line[:n],
            self.source,
            self.format,
            self.notes,
        )


def detect_format(path: str | os.PathLike) -> str:
    """Guess a trace's format: ``.trace`` is Gavel; a CSV whose header has ``timestamp`` is Philly."""
    path = Path(path)
    if path.suffix == ".trace":
        return "gavel"
    try:
        with open(path, encoding="utf-8") as fh:
            header = fh.readline()
    except OSError as exc:
        raise TraceError(f"cannot read trace {str(path)!r}: {exc.strerror}") from None
    names = [c.strip() for c in header.split(",")]
    return "philly" if "timestamp" in names else "csv"


def load_trace(
    path: str | os.PathLike,
    *,
    format: str = "auto",
    throughputs: Mapping[str, float] | None = None,
    workloads: Sequence[str] | None = None,
    seed: int = 0,
) -> Trace:
    """Load a trace of any supported format.

    Parameters
    ----------
    path
        The trace file.
    format
        ``gavel``, ``philly``, ``csv`` or ``auto`` (by extension and header).
    throughputs
        Isolated steps/s per workload on the simulated device; needed for Gavel traces, whose jobs are given
        in steps.
    workloads
        The workloads a Philly job may be (drawn uniformly with ``seed``); Philly has no workload names.
    seed
        Seed of the Philly workload draw.
    """
    fmt = detect_format(path) if format == "auto" else format
    if fmt == "gavel":
        if throughputs is None:
            raise TraceError("a Gavel trace needs the isolated throughput of each job type")
        return read_gavel_trace(path, throughputs)
    if fmt == "philly":
        if not workloads:
            raise TraceError("a Philly trace needs a list of workloads to assign to its jobs")
        return read_philly_csv(path, workloads, seed=seed)
    if fmt == "csv":
        return read_generic_csv(path)
    raise TraceError(f"unknown trace format {fmt!r}; expected one of {['auto', *TRACE_FORMATS]}")


def read_gavel_trace(path: str | os.PathLike, throughputs: Mapping[str, float]) -> Trace:
    """Read a Gavel ``.trace`` file (tab-separated, no header).

    Fields: ``job_type, command, num_steps_arg, needs_data_dir, total_steps, arrival_time_s, scale_factor``.
    A job's duration is ``total_steps`` over the isolated single-GPU throughput of its job type
    (``throughputs``); ``scale_factor`` is its number of GPUs. Arrival times must not decrease.
    """
    path = Path(path)
    text = _read_text(path)
    types, steps, arrival, gpus, lines = [], [], [], [], []
    last = -math.inf
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        fields = raw.split("\t")
        where = f"{path}:{number}"
        if len(fields) != _GAVEL_FIELDS:
            raise TraceError(
                f"{where}: expected {_GAVEL_FIELDS} tab-separated fields (job_type, command, num_steps_arg, "
                f"needs_data_dir, total_steps, arrival_time_s, scale_factor), got {len(fields)}"
            )
        job_type = fields[0].strip()
        n_steps = _number(fields[4], where, "total_steps")
        t = _number(fields[5], where, "arrival_time_s")
        scale = _number(fields[6], where, "scale_factor")
        if n_steps <= 0:
            raise TraceError(f"{where}: total_steps must be positive, got {fields[4].strip()!r}")
        _check_time(t, last, where, "arrival_time_s")
        if scale < 1 or scale != int(scale):
            raise TraceError(f"{where}: scale_factor must be a whole number >= 1, got {fields[6].strip()!r}")
        if job_type not in throughputs:
            raise TraceError(
                f"{where}: job type {job_type!r} has no isolated throughput on this device; known: "
                f"{', '.join(sorted(throughputs))}"
            )
        last = t
        types.append(job_type)
        steps.append(n_steps)
        arrival.append(t)
        gpus.append(int(scale))
        lines.append(number)
    if not types:
        raise TraceError(f"{path}: the trace holds no jobs")
    rate = np.array([float(throughputs[j]) for j in types])
    return Trace(
        job_id=np.array([f"L{n}" for n in lines], dtype=object),
        arrival=np.array(arrival, dtype=float),
        duration=np.array(steps, dtype=float) / rate,
        gpus=np.array(gpus, dtype=np.int64),
        workload=np.array(types, dtype=object),
        line=np.array(lines, dtype=np.int64),
        source=str(path),
        format="gavel",
        notes=(
            "Gavel trace: a job's duration is its total steps over the isolated single-GPU throughput of its "
            "job type on the simulated device.",
        ),
    )


def read_philly_csv(path: str | os.PathLike, workloads: Sequence[str], seed: int = 0) -> Trace:
    """Read the processed Philly CSV (``timestamp,duration,num_gpus[,gpu_time,cluster]``).

    The file is not in submit order, so jobs are sorted by timestamp (ties keep file order); arrival is
    seconds since the first submission. Philly names no workloads: each job gets one of ``workloads`` drawn
    uniformly by a ``numpy.random.Generator(seed)`` in file order, so the draw does not depend on sorting.
    """
    path = Path(path)
    df = _read_csv(path, PHILLY_COLUMNS)
    stamps = pd.to_datetime(df["timestamp"], errors="coerce", format="mixed")
    bad = stamps.isna().to_numpy()
    if bad.any():
        row = int(np.argmax(bad))
        raise TraceError(
            f"{path}:{row + 2}: column 'timestamp' must be a date and time like 2017-10-09 07:01:55, got "
            f"{df['timestamp'].iloc[row]!r}"
        )
    duration = _numeric_column(df, "duration", path, positive=True)
    gpus = _whole_column(df, "num_gpus", path)
    if not workloads:
        raise TraceError("a Philly trace needs at least one workload to assign to its jobs")
    rng = np.random.default_rng(seed)
    names = np.array(sorted(workloads), dtype=object)
    drawn = names[rng.integers(0, len(names), size=len(df))]
    seconds = (stamps - stamps.min()).dt.total_seconds().to_numpy()
    order = np.argsort(seconds, kind="stable")
    lines = np.arange(2, len(df) + 2)
    return Trace(
        job_id=np.array([f"L{n}" for n in lines[order]], dtype=object),
        arrival=seconds[order],
        duration=duration[order],
        gpus=gpus[order],
        workload=drawn[order],
        line=lines[order],
        source=str(path),
        format="philly",
        notes=(
            f"Philly trace: workloads drawn uniformly from {len(names)} measured workloads with seed {seed}; "
            "jobs sorted by submit time.",
        ),
    )


def read_generic_csv(path: str | os.PathLike) -> Trace:
    """Read a generic trace CSV (``job_id, arrival_s, duration_s, gpus, workload``, arrivals in order)."""
    path = Path(path)
    df = _read_csv(path, GENERIC_COLUMNS)
    arrival = _numeric_column(df, "arrival_s", path, positive=False)
    duration = _numeric_column(df, "duration_s", path, positive=True)
    gpus = _whole_column(df, "gpus", path)
    decreasing = np.flatnonzero(np.diff(arrival) < 0)
    if decreasing.shape[0]:
        row = int(decreasing[0]) + 1
        raise TraceError(
            f"{path}:{row + 2}: arrival_s {arrival[row]:g} is earlier than the previous job's "
            f"{arrival[row - 1]:g}; sort the trace by arrival_s"
        )
    job_id = df["job_id"].astype(str).str.strip().to_numpy(dtype=object)
    workload = df["workload"].astype(str).str.strip().to_numpy(dtype=object)
    for col, values in (("job_id", job_id), ("workload", workload)):
        empty = np.flatnonzero((values == "") | df[col].isna().to_numpy())
        if empty.shape[0]:
            raise TraceError(f"{path}:{int(empty[0]) + 2}: column {col!r} is empty")
    _, first, counts = np.unique(job_id.astype(str), return_index=True, return_counts=True)
    if (counts > 1).any():
        dup = int(np.sort(first[counts > 1])[0])
        later = np.flatnonzero(job_id == job_id[dup])[1]
        raise TraceError(
            f"{path}:{int(later) + 2}: job_id {job_id[dup]!r} repeats the job of line {dup + 2}; job ids "
            "must be unique"
        )
    return Trace(
        job_id=job_id,
        arrival=arrival,
        duration=duration,
        gpus=gpus,
        workload=workload,
        line=np.arange(2, len(df) + 2),
        source=str(path),
        format="csv",
    )


def check_trace(trace: Trace, workloads: Sequence[str], n_gpus: int) -> None:
    """Raise ``TraceError`` if a job names a workload not in ``workloads`` or wants over ``n_gpus`` GPUs."""
    known = set(workloads)
    unknown = np.array([w not in known for w in trace.workload], dtype=bool)
    if unknown.any():
        i = int(np.argmax(unknown))
        raise TraceError(
            f"{trace.source}:{int(trace.line[i])}: workload {trace.workload[i]!r} has no measured pairs on "
            f"this device; known workloads: {', '.join(sorted(known))}"
        )
    big = trace.gpus > n_gpus
    if big.any():
        i = int(np.argmax(big))
        raise TraceError(
            f"{trace.source}:{int(trace.line[i])}: job asks for {int(trace.gpus[i])} GPUs, the cluster has "
            f"{n_gpus}; simulate a bigger cluster (--gpus)"
        )


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"cannot read trace {str(path)!r}: {exc}") from None


def _read_csv(path: Path, required: Sequence[str]) -> pd.DataFrame:
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except FileNotFoundError:
        raise TraceError(f"trace file {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise TraceError(f"cannot read trace {str(path)!r} as CSV: {str(exc).splitlines()[0]}") from None
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise TraceError(
            f"{path}: missing column(s) {missing}; expected a header with {list(required)}, got "
            f"{list(df.columns)}"
        )
    if df.empty:
        raise TraceError(f"{path}: the trace holds no jobs")
    return df


def _numeric_column(df: pd.DataFrame, col: str, path: Path, positive: bool) -> np.ndarray:
    text = df[col].astype(str).str.strip()
    values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(values) | ((values <= 0) if positive else (values < 0))
    if bad.any():
        row = int(np.argmax(bad))
        need = "a positive number" if positive else "a number >= 0"
        raise TraceError(f"{path}:{row + 2}: column {col!r} must be {need}, got {text.iloc[row]!r}")
    return values


def _whole_column(df: pd.DataFrame, col: str, path: Path) -> np.ndarray:
    values = _numeric_column(df, col, path, positive=True)
    bad = values != np.floor(values)
    if bad.any():
        row = int(np.argmax(bad))
        raise TraceError(
            f"{path}:{row + 2}: column {col!r} must be a whole number >= 1, got {df[col].iloc[row]!r}"
        )
    return values.astype(np.int64)


def _number(text: str, where: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{where}: {name} must be a number, got {text.strip()!r}") from None
    if not math.isfinite(value):
        raise TraceError(f"{where}: {name} must be finite, got {text.strip()!r}")
    return value


def _check_time(t: float, last: float, where: str, name: str) -> None:
    if t < 0:
        raise TraceError(f"{where}: {name} must be >= 0, got {t:g}")
    if t < last:
        raise TraceError(
            f"{where}: {name} {t:g} is earlier than the previous job's {last:g}; sort the trace by arrival"
        )


def synthetic_trace(
    workloads: Sequence[str],
    n_jobs: int = 200,
    *,
    seed: int = 0,
    mean_interarrival_s: float = 60.0,
    median_duration_s: float = 1800.0,
    multi_gpu_share: float = 0.1,
    max_gpus: int = 4,
) -> Trace:
    """Draw a small trace (Poisson arrivals, log-normal durations, a few multi-GPU jobs), ``Generator(seed)``.

    For demos and tests on datasets that come without a trace of their own, such as a CPU campaign.
    """
    if not workloads:
        raise TraceError("a synthetic trace needs at least one workload")
    if n_jobs < 1:
        raise TraceError(f"a synthetic trace needs at least one job, got n_jobs={n_jobs}")
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(mean_interarrival_s, n_jobs))
    arrival -= arrival[0]
    duration = np.round(median_duration_s * np.exp(rng.normal(0.0, 1.0, n_jobs)), 1)
    sizes = 2 ** np.arange(1, max(1, int(np.log2(max_gpus))) + 1)
    gpus = np.where(rng.random(n_jobs) < multi_gpu_share, rng.choice(sizes, n_jobs), 1) if max_gpus > 1 else 1
    names = np.array(sorted(workloads), dtype=object)
    return Trace(
        job_id=np.array([f"job{i:04d}" for i in range(n_jobs)], dtype=object),
        arrival=np.round(arrival, 1),
        duration=np.maximum(duration, 1.0),
        gpus=np.broadcast_to(np.asarray(gpus, dtype=np.int64), (n_jobs,)).copy(),
        workload=names[rng.integers(0, len(names), n_jobs)],
        line=np.arange(2, n_jobs + 2),
        source=f"synthetic(seed={seed})",
        format="csv",
    )


def write_generic_csv(trace: Trace, path: str | os.PathLike) -> Path:
    """Write ``trace`` as a generic trace CSV (``job_id, arrival_s, duration_s, gpus, workload``)."""
    path = Path(path)
    pd.DataFrame(
        {
            "job_id": trace.job_id,
            "arrival_s": trace.arrival,
            "duration_s": trace.duration,
            "gpus": trace.gpus,
            "workload": trace.workload,
        }
    ).to_csv(path, index=False)
    return path
