"""The processed Microsoft Philly trace (``timestamp,duration,num_gpus[,gpu_time,cluster]``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.datasets.traces import Trace, TraceContext, TraceFormat
from sharewise.datasets.traces._fields import numeric_column, read_csv, whole_column
from sharewise.errors import TraceError

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus")


def read_philly_csv(path: Path, context: TraceContext) -> Trace:
    """Read the processed Philly CSV; each job gets one of ``context.workloads``, drawn with ``context.seed``.

    The file is not in submit order, so jobs are sorted by timestamp (ties keep file order); arrival is
    seconds since the first submission. Philly names no workloads: each job gets one of the workloads drawn
    uniformly by a ``numpy.random.Generator(seed)`` in file order, so the draw does not depend on sorting.
    """
    path = Path(path)
    workloads = context.workloads
    if not workloads:
        raise TraceError("a Philly trace needs a list of workloads to assign to its jobs")
    df = read_csv(path, PHILLY_COLUMNS)
    stamps = pd.to_datetime(df["timestamp"], errors="coerce", format="mixed")
    bad = stamps.isna().to_numpy()
    if bad.any():
        row = int(np.argmax(bad))
        raise TraceError(
            f"{path}:{row + 2}: column 'timestamp' must be a date and time like 2017-10-09 07:01:55, got "
            f"{df['timestamp'].iloc[row]!r}"
        )
    duration = numeric_column(df, "duration", path, positive=True)
    gpus = whole_column(df, "num_gpus", path)
    rng = np.random.default_rng(context.seed)
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
            f"Philly trace: workloads drawn uniformly from {len(names)} measured workloads with seed "
            f"{context.seed}; jobs sorted by submit time.",
        ),
    )


def _detect(path: Path, header: str) -> bool:
    return "timestamp" in [c.strip() for c in header.split(",")]


FORMAT = TraceFormat(
    name="philly",
    summary="Microsoft Philly CSV (timestamp, duration, num_gpus); workloads drawn with --seed",
    read=read_philly_csv,
    detect=_detect,
)
