"""The generic trace CSV: ``job_id, arrival_s, gpus, workload`` and ``duration_s`` or ``steps``, one job a line,
in arrival order.

``duration_s`` is the job's solo run time in seconds; ``steps`` its length in training steps, which the
device's solo throughput (the dataset's profiles, ``TraceContext.throughputs``) turns into a duration for the
simulator, and which a physical run runs as they are. A file gives one of the two columns. A training
command (below) may leave its length out (an empty cell, or neither column when every job is a command): its
``duration`` and ``steps`` are then NaN, and a physical run estimates its length and learns it as it runs.

A ``workload`` cell is a workload name or spec; a command spec (``mytrain=cmd:python train.py``, see
``sharewise.command_spec``) is replayed under its recorded name (``mytrain``), the spec kept in ``Trace.spec``.
A cell holding a comma or a double quote is quoted as CSV quotes any cell (``"a=cmd:python a.py --x 1,2"``,
inner double quotes doubled).

An optional ``bound`` column carries each job's promise of the slowdown contract (``planner.contract.Bound``): a
maximum slowdown (``1.3``), ``protected``, or an empty cell for none. The reader keeps the cells as text
(``Trace.bound``; a layer below the planner, it does not interpret them); whatever simulates or runs the trace
reads them, naming the line of a bad one.
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
#: The columns every generic trace has; the length is ``duration_s`` or ``steps``.
REQUIRED = ("job_id", "arrival_s", "gpus", "workload")


def read_generic_csv(path: Path, context: TraceContext | None = None) -> Trace:
    """Read a generic trace CSV (arrivals must not decrease, job ids unique, every field filled)."""
    path = Path(path)
    df = read_csv(path, REQUIRED)
    has = [c for c in ("duration_s", "steps") if c in df.columns]
    commands = df["workload"].map(is_command_spec).to_numpy(dtype=bool)
    if len(has) > 1 or (not has and not commands.all()):
        raise TraceError(
            f"{path}: give each job's length as exactly one of the columns 'duration_s' (solo seconds) or "
            f"'steps' (training steps), got {has or 'neither'} (only a training command, NAME=cmd:..., may "
            "leave its length out)"
        )
    blank = np.ones(len(df), dtype=bool) if not has else (df[has[0]].astype(str).str.strip() == "").to_numpy()
    if (blank & ~commands).any():
        row = int(np.argmax(blank & ~commands))
        raise TraceError(
            f"{path}:{row + 2}: column {has[0]!r} is empty; give the job's length (only a training command, "
            "NAME=cmd:..., may leave it out, to be estimated and learned as it runs)"
        )
    if has and blank.any():
        df = df.assign(**{has[0]: df[has[0]].where(~blank, "1")})  # parsed as a placeholder, NaN below
    arrival = numeric_column(df, "arrival_s", path, positive=False)
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
    steps = None
    if has != ["duration_s"]:
        steps = whole_column(df, "steps", path) if has else np.zeros(len(df), dtype=np.int64)
        if blank.any():
            steps = np.where(blank, np.nan, steps)
        duration = _steps_to_seconds(steps, workload, path, context)
    else:
        duration = np.where(blank, np.nan, numeric_column(df, "duration_s", path, positive=True))
    bound = df["bound"].astype(str).str.strip().to_numpy(dtype=object) if "bound" in df.columns else None
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
        steps=steps,
        bound=bound,
    )


def _steps_to_seconds(steps: np.ndarray, workload: np.ndarray, path: Path, context: TraceContext | None) -> np.ndarray:
    """Each job's steps over its workload's solo steps/s on the device (NaN where no throughput is known yet:
    a physical run measures it before it needs it)."""
    rates = (context.throughputs if context is not None else None) or {}
    return np.array([s / rates[w] if rates.get(w, 0) > 0 else np.nan for s, w in zip(steps, workload, strict=True)])


def _unparsable(cell: str) -> bool:
    try:
        recorded_names([cell])
    except ConfigError:
        return True
    return False


def write_generic_csv(trace: Trace, path: str | os.PathLike) -> Path:
    """Write ``trace`` as a generic trace CSV that ``read_generic_csv`` reads back unchanged."""
    path = Path(path)
    length = {"duration_s": trace.duration} if trace.steps is None else {"steps": trace.steps}
    pd.DataFrame(
        {
            "job_id": trace.job_id,
            "arrival_s": trace.arrival,
            **length,
            "gpus": trace.gpus,
            "workload": trace.workload if trace.spec is None else trace.spec,
            **({} if trace.bound is None else {"bound": trace.bound}),
        }
    ).to_csv(path, index=False)
    return path


FORMAT = TraceFormat(
    name="csv",
    summary="generic CSV: job_id, arrival_s, gpus, workload, and duration_s or steps (optional: bound)",
    read=read_generic_csv,
    detect=lambda path, header: True,  # the fallback: any other file is read as the generic CSV
)
