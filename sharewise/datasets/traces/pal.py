"""PAL's simulation traces (the "Sia-Philly" workloads of blox-pal): ``job_id,num_gpus,submit_time,duration,model``.

In these files ``duration`` is the job's number of **iterations**, not seconds: PAL's simulator runs each model
at a fixed iteration time (``pal_models.csv`` next to this module, read from the artifact's code: BERT 0.179 s,
DCGAN 0.0469, GPT2 3.5714, PointNet 0.281, resnet50 0.1754, vgg19 0.3006), times the slowest per-GPU factor of
its class (``sharewise.datasets.variability``) and a locality penalty when it spans nodes (the simulator's
part). So a job's exclusive run time on a factor-1.0 GPU is ``duration x iteration time``.

Each model runs as our zoo's nearest workload (``zoo_workload``: vgg19 as ``vgg16``, the others under their own
names), so a pair table measured on the zoo applies to these jobs; the model's PAL class (``pal_class``: resnet50
A, vgg19 C, PointNet D, GPT2/DCGAN/BERT B) maps to both names (``pal_class_mapping``).
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.datasets.traces import Trace, TraceContext, TraceFormat
from sharewise.datasets.traces._fields import numeric_column, read_csv, whole_column
from sharewise.errors import TraceError

PAL_COLUMNS = ("job_id", "num_gpus", "submit_time", "duration", "model")


@functools.lru_cache(maxsize=1)
def pal_models() -> pd.DataFrame:
    """PAL's models: iteration time (s), PAL class, our zoo's nearest workload (``pal_models.csv``).

    Example (first rows)::

           model  iter_time_s pal_class zoo_workload
        0   BERT       0.1790    classB         bert
        1  DCGAN       0.0469    classB        dcgan
    """
    with resources.files(__package__).joinpath("pal_models.csv").open(encoding="utf-8") as fh:
        return pd.read_csv(fh)


def pal_class_mapping() -> dict[str, str]:
    """PAL's class of each model, under its PAL name and its zoo name: ``{"resnet50": "classA", "vgg19":
    "classC", "vgg16": "classC", "PointNet": "classD", "pointnet": "classD", "BERT": "classB", ...}``."""
    models = pal_models()
    mapping = dict(zip(models["model"], models["pal_class"], strict=True))
    mapping.update(zip(models["zoo_workload"], models["pal_class"], strict=True))
    return mapping


def read_pal_csv(path: Path, context: TraceContext | None = None) -> Trace:
    """Read a PAL trace; a job's exclusive run time is its iterations x its model's iteration time.

    Jobs are sorted by ``submit_time`` (ties keep file order); the workload is the model's zoo workload.
    """
    path = Path(path)
    df = read_csv(path, PAL_COLUMNS)
    models = pal_models().set_index("model")
    model = df["model"].astype(str).str.strip()
    unknown = ~model.isin(models.index)
    if unknown.any():
        row = int(np.argmax(unknown.to_numpy()))
        raise TraceError(
            f"{path}:{row + 2}: model {model.iloc[row]!r} has no iteration time in PAL's model table; known "
            f"models: {', '.join(models.index)}"
        )
    submit = numeric_column(df, "submit_time", path, positive=False)
    iterations = numeric_column(df, "duration", path, positive=True)
    gpus = whole_column(df, "num_gpus", path)
    duration = iterations * models.loc[model, "iter_time_s"].to_numpy(dtype=float)
    workload = models.loc[model, "zoo_workload"].to_numpy(dtype=object)
    order = np.argsort(submit, kind="stable")
    lines = np.arange(2, len(df) + 2)
    used = sorted(set(model))
    return Trace(
        job_id=df["job_id"].astype(str).str.strip().to_numpy(dtype=object)[order],
        arrival=submit[order],
        duration=duration[order],
        gpus=gpus[order],
        workload=workload[order],
        line=lines[order],
        source=str(path),
        format="pal",
        notes=(
            "PAL trace: duration is iterations x the model's fixed iteration time ("
            + ", ".join(f"{m} {models.loc[m, 'iter_time_s']:g} s" for m in used)
            + "); models run as zoo workloads ("
            + ", ".join(f"{m} as {models.loc[m, 'zoo_workload']}" for m in used)
            + ").",
        ),
    )


def _detect(path: Path, header: str) -> bool:
    return set(PAL_COLUMNS) <= {c.strip() for c in header.split(",")}


FORMAT = TraceFormat(
    name="pal",
    summary="PAL's traces (job_id, num_gpus, submit_time, duration in iterations, model)",
    read=read_pal_csv,
    detect=_detect,
)
