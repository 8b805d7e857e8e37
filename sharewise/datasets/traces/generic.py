"""The generic trace CSV: ``job_id, arrival_s, duration_s, gpus, workload``, one job a line, in arrival order.

A ``workload`` cell is a workload name or spec; a command spec (``mytrain=cmd:python train.py``, see
``sharewise.command_spec``) is replayed under its recorded name (``mytrain``), the spec kept in ``Trace.spec``.
A cell holding a comma or a double quote is quoted as CSV quotes any cell (``"a=cmd:python a.py --x 1,2"``,
inner double quotes doubled).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.command_spec import is_command_spec, recorded_names
from sharewise.datasets.traces import Trace, TraceContext, TraceFormat
from sharewise.datasets.traces._fields import numeric_column, read_csv, whole_column
from sharewise.errors import ConfigError, TraceError

GENERIC_COLUMNS = ("job_id", "arrival_s", "duration_s", "gpus", "workload")


def read_generic_csv(path: Path, context: TraceContext | None = None) -> Trace:
    """Read a generic trace CSV (arrivals must not decrease, job ids unique, every field filled)."""
    path = Path(path)
    df = read_csv(path, GENERIC_COLUMNS)
    arrival = numeric_column(df, "arrival_s", path, positive=False)
    duration = numeric_column(df, "duration_s", path, positive=True)
    gpus = whole_column(df, "gpus", path)
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
    specs = None
    if any(is_command_spec(w) for w in np.unique(workload)):
        specs = workload
        try:
            workload = np.array(recorded_names(list(workload)), dtype=object)
        except ConfigError as exc:
            bad = next(i for i, w in enumerate(specs) if _unparsable(w))
            raise TraceError(f"{path}:{bad + 2}: column 'workload': {exc}") from None
    return Trace(
        job_id=job_id,
        arrival=arrival,
        duration=duration,
        gpus=gpus,
        workload=workload,
        line=np.arange(2, len(df) + 2),
        source=str(path),
        format="csv",
        spec=specs,
    )


def _unparsable(cell: str) -> bool:
    try:
        recorded_names([cell])
    except ConfigError:
        return True
    return False


def write_generic_csv(trace: Trace, path: str | os.PathLike) -> Path:
    """Write ``trace`` as a generic trace CSV that ``read_generic_csv`` reads back unchanged."""
    path = Path(path)
    pd.DataFrame(
        {
            "job_id": trace.job_id,
            "arrival_s": trace.arrival,
            "duration_s": trace.duration,
            "gpus": trace.gpus,
            "workload": trace.workload if trace.spec is None else trace.spec,
        }
    ).to_csv(path, index=False)
    return path


FORMAT = TraceFormat(
    name="csv",
    summary="generic CSV: job_id, arrival_s, duration_s, gpus, workload",
    read=read_generic_csv,
    detect=lambda path, header: True,  # the fallback: any other file is read as the generic CSV
)
