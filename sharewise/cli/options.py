"""Options that ``simulate`` and ``run`` share, declared once: the SLO, rounds, and what the policies know (the truth,
predictions, a model or out-of-fold predictions, learning from observed pairs), the device whose data to use and the
trace format. A Typer option is a default value, so one object serves every command that names it."""

from __future__ import annotations

from pathlib import Path

import typer

from sharewise.cli.common import one_of
from sharewise.datasets.traces import AUTO, TRACE_FORMATS
from sharewise.predictor.choices import GROUP_BY

DEVICE_NAME: str = typer.Option(
    None, "--device-name", help="Whose measurements (the truth, and what the policies know) when the data holds "
    "several devices."
)
MAX_SLOWDOWN: float = typer.Option(2.0, "--max-slowdown", help="SLO on a job's realized slowdown.")
ROUND_S: float = typer.Option(
    None, "--round-s", help="Start jobs only at multiples of this many seconds (Gavel uses 360 s rounds)."
)
ORACLE: bool = typer.Option(False, "--oracle", help="Show the policies the dataset's measured slowdowns.")
OBSERVE: bool = typer.Option(
    True, "--observe/--no-observe",
    help="Policies learn a pair's measured slowdowns once it has run together (default), as a cluster does.",
)
PREDICTIONS: Path = typer.Option(None, "--predictions", help="CSV/Parquet of predictions to show the policies.")
MODEL: Path = typer.Option(None, "--model", help="Saved model.json whose predictions the policies see.")
GROUP_BY_OPTION: str = typer.Option(
    "family", "--group-by", help=one_of("Out-of-fold predictions hold out this group", GROUP_BY)
)
TRACE_FORMAT: str = typer.Option(AUTO, "--format", help=one_of("Trace format", (AUTO, *TRACE_FORMATS.names())))
SPLIT: str = typer.Option(
    "auto", "--split",
    help="The sharing knob under the slowdown contract: auto chooses each pair's split (a CPU quota, an MPS thread "
    "percentage) where the data has slowdowns measured or predicted at splits and the mode has a knob; none never "
    "splits (pairs share without one).",
)
BOUNDS: str = typer.Option(
    "enforce", "--bounds",
    help="Jobs' bounds from the trace's 'bound' column (a maximum slowdown, or 'protected'): enforce keeps them "
    "through the policies' table (a pair that would break one does not share, or shares at a split that keeps "
    "it); report schedules as without bounds and only counts the violations.",
)
