"""Gavel's job traces (``.trace``: tab-separated, no header), as stanford-futuredata/gavel reads them.

Two layouts exist, told apart by their number of fields:

- 2019 (7 fields, the ``traces_msr_seed0`` files): ``job_type, command, num_steps_arg, needs_data_dir,
  total_steps, arrival_time_s, scale_factor``;
- current (10 fields, ``scheduler/utils.py::parse_trace``): ``job_type, command, working_directory,
  num_steps_arg, needs_data_dir, total_steps, scale_factor, priority_weight, SLO, arrival_time``.

Semantics, as Gavel and the trace generator that wrote these files define them: ``scale_factor`` is the
number of GPUs the job gang-schedules on, and ``total_steps`` counts steps of the job at that scale, so its
exclusive run time is ``total_steps / throughput(job_type, scale_factor)``, where the throughput is the
isolated steps/s of the whole job on ``scale_factor`` GPUs (the ``"null"`` entry of the key
``('<job_type>', <scale_factor>)`` in Gavel's throughputs file).

Where that throughput was never measured (Gavel's file has scale factors 1, 2, 4 and 8, and only 1 for
A3C, CycleGAN and Recommendation, while the traces ask for up to 64 GPUs), the rule is **linear scaling
from the largest measured scale factor below it**: ``throughput(s) = throughput(k) * s / k`` with ``k`` the
largest measured ``k <= s``. The trace's notes say how many jobs the rule touched. A job asking for more
GPUs than the simulated cluster has is left out and counted in the notes, as Gavel's and the SJF-BSBF
authors' simulators do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np

from sharewise.datasets.traces import Trace, TraceContext, TraceFormat
from sharewise.datasets.traces._fields import check_time, number, read_text
from sharewise.errors import TraceError

# Field positions (0-based) of each layout, by field count.
LAYOUTS: dict[int, dict[str, int]] = {
    7: {"job_type": 0, "total_steps": 4, "arrival_time": 5, "scale_factor": 6},
    10: {"job_type": 0, "total_steps": 5, "scale_factor": 6, "arrival_time": 9},
}
_LAYOUT_NAMES = {
    7: "job_type, command, num_steps_arg, needs_data_dir, total_steps, arrival_time_s, scale_factor",
    10: (
        "job_type, command, working_directory, num_steps_arg, needs_data_dir, total_steps, scale_factor, "
        "priority_weight, SLO, arrival_time"
    ),
}


def job_throughput(curve: Mapping[int, float], gpus: int) -> tuple[float, bool]:
    """Return ``(steps/s of a job on gpus GPUs, whether the scaling rule filled it in)`` from a measured curve.

    ``curve`` maps measured GPU counts to the whole job's isolated steps/s (1 must be there). An unmeasured
    count takes the largest measured count ``k`` below it, scaled linearly: ``curve[k] * gpus / k``.

    >>> job_throughput({1: 4.0, 2: 7.0}, 2)
    (7.0, False)
    >>> job_throughput({1: 4.0, 2: 7.0}, 8)
    (28.0, True)
    """
    if gpus in curve:
        return float(curve[gpus]), False
    below = [k for k in curve if k <= gpus]
    k = max(below)
    return float(curve[k]) * gpus / k, True


def read_gavel_trace(path: Path, context: TraceContext) -> Trace:
    """Read a Gavel ``.trace`` file of either layout (module docstring); durations in seconds on one device.

    ``context.scale_throughputs`` (per job type, steps/s by GPU count) gives the throughputs; a context with
    only ``throughputs`` (single-GPU) is read as a curve measured at one GPU. ``context.n_gpus`` leaves out
    (and counts) jobs bigger than the cluster. Arrival times must not decrease.
    """
    path = Path(path)
    curves = _curves(context)
    text = read_text(path)
    types, steps, arrival, gpus, lines = [], [], [], [], []
    last = -math.inf
    for number_, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        fields = raw.rstrip("\r\n").split("\t")
        where = f"{path}:{number_}"
        layout = LAYOUTS.get(len(fields))
        if layout is None:
            raise TraceError(
                f"{where}: expected 7 tab-separated fields ({_LAYOUT_NAMES[7]}) or 10 ({_LAYOUT_NAMES[10]}), "
                f"got {len(fields)}"
            )
        job_type = fields[layout["job_type"]].strip()
        n_steps = number(fields[layout["total_steps"]], where, "total_steps")
        t = number(fields[layout["arrival_time"]], where, "arrival_time_s")
        scale = number(fields[layout["scale_factor"]], where, "scale_factor")
        if n_steps <= 0:
            raise TraceError(f"{where}: total_steps must be positive, got {fields[layout['total_steps']].strip()!r}")
        check_time(t, last, where, "arrival_time_s")
        if scale < 1 or scale != int(scale):
            raise TraceError(
                f"{where}: scale_factor must be a whole number >= 1, got {fields[layout['scale_factor']].strip()!r}"
            )
        if job_type not in curves:
            raise TraceError(
                f"{where}: job type {job_type!r} has no isolated throughput on this device; known: "
                f"{', '.join(sorted(curves))}"
            )
        last = t
        types.append(job_type)
        steps.append(n_steps)
        arrival.append(t)
        gpus.append(int(scale))
        lines.append(number_)
    if not types:
        raise TraceError(f"{path}: the trace holds no jobs")
    rates, filled = zip(*(job_throughput(curves[j], g) for j, g in zip(types, gpus, strict=True)), strict=True)
    trace = Trace(
        job_id=np.array([f"L{n}" for n in lines], dtype=object),
        arrival=np.array(arrival, dtype=float),
        duration=np.array(steps, dtype=float) / np.array(rates),
        gpus=np.array(gpus, dtype=np.int64),
        workload=np.array(types, dtype=object),
        line=np.array(lines, dtype=np.int64),
        source=str(path),
        format="gavel",
    )
    notes = [
        "Gavel trace: a job's duration is its total steps over the isolated throughput of its job type at its "
        "scale factor (all its GPUs together) on the simulated device."
    ]
    filled = np.array(filled, dtype=bool)
    if context.n_gpus is not None:
        fits = trace.gpus <= context.n_gpus
        if not fits.all():
            notes.append(
                f"{int((~fits).sum())} of {len(trace)} jobs ask for more than the cluster's {context.n_gpus} GPUs "
                f"(up to {int(trace.gpus.max())}) and are left out, as Gavel's simulator does."
            )
            trace, filled = trace.subset(fits), filled[fits]
            if len(trace) == 0:
                raise TraceError(f"{path}: every job asks for more than the cluster's {context.n_gpus} GPUs")
    if filled.any():
        notes.append(
            f"{int(filled.sum())} of the {len(trace)} jobs replayed ask for a scale factor whose throughput was "
            "not measured; their throughput is the largest measured scale factor's below it, scaled linearly "
            "with the GPU count."
        )
    return replace(trace, notes=tuple(notes))


def _curves(context: TraceContext) -> dict[str, dict[int, float]]:
    if context.scale_throughputs:
        curves = {str(w): {int(k): float(v) for k, v in c.items()} for w, c in context.scale_throughputs.items()}
    elif context.throughputs:
        curves = {str(w): {1: float(v)} for w, v in context.throughputs.items()}
    else:
        raise TraceError("a Gavel trace needs the isolated throughput of each job type")
    for w, curve in curves.items():
        if 1 not in curve or not all(v > 0 for v in curve.values()):
            raise TraceError(f"job type {w!r}: a throughput curve needs a positive single-GPU throughput")
    return curves


FORMAT = TraceFormat(
    name="gavel",
    summary="Gavel .trace, 7 or 10 tab-separated fields (durations from the isolated throughputs in --data)",
    read=read_gavel_trace,
    detect=lambda path, header: path.suffix == ".trace",
)
