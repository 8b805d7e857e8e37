"""Job traces for the simulator: the ``Trace`` type, the trace-format registry, and ``load_trace``.

Every format is a module of this package exposing ``FORMAT``, a ``TraceFormat`` with one signature:
``read(path, context) -> Trace`` (``context`` is a ``TraceContext`` carrying what some formats need from the
caller: isolated throughputs, the workloads to draw from, a seed) and ``detect(path, header) -> bool``. Every
reader returns a ``Trace`` sorted by arrival or raises ``TraceError`` naming the file and line; nothing
malformed reaches a simulation. Adding a format is its module plus one line in ``TRACE_FORMATS``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sharewise.errors import TraceError
from sharewise.registry import Registry

if TYPE_CHECKING:  # numpy loads with a format's reader: the CLI reads TRACE_FORMATS for its help without it
    import numpy as np

TRACE_FORMATS: Registry[TraceFormat] = Registry(
    "trace format",
    "sharewise.datasets.traces",
    {"gavel": "gavel:FORMAT", "philly": "philly:FORMAT", "pal": "pal:FORMAT", "csv": "generic:FORMAT"},
    signature="TraceFormat: read(path, context: TraceContext) -> Trace; detect(path, header) -> bool",
)
AUTO = "auto"


@dataclass(frozen=True)
class Trace:
    """Jobs to replay, sorted by arrival; all arrays have one entry per job.

    ``duration`` is the exclusive run time in seconds on a speed-1.0 GPU; ``line`` is the job's line in the
    source file (for messages); ``notes`` lists assumptions made while loading. ``workload`` holds the names
    the measured tables use; ``spec`` (None when every job's is its name) the workload spec each job was
    given, a command's ``NAME=cmd:...`` included, for whatever runs the jobs for real. ``steps``, where the
    file gives them (the generic CSV's ``steps`` column), is each job's length in training steps; a physical
    run (``sharewise run``) runs that many, and ``duration`` is then the steps at the device's solo throughput.
    ``bound``, where the file gives one (the generic CSV's optional ``bound`` column), is each job's promise of
    the slowdown contract as its cell reads (``"1.3"``, ``"protected"``, ``""`` for none), read into a
    ``planner.contract.Bound`` by whatever simulates or runs the trace.

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
    spec: np.ndarray | None = None
    steps: np.ndarray | None = None
    bound: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.arrival.shape[0])

    def subset(self, keep: np.ndarray) -> Trace:
        """Return the jobs selected by ``keep`` (a boolean mask or index array), order kept."""
        return Trace(
            self.job_id[keep],
            self.arrival[keep],
            self.duration[keep],
            self.gpus[keep],
            self.workload[keep],
            self.line[keep],
            self.source,
            self.format,
            self.notes,
            None if self.spec is None else self.spec[keep],
            None if self.steps is None else self.steps[keep],
            None if self.bound is None else self.bound[keep],
        )

    def head(self, n: int) -> Trace:
        """Return the first ``n`` jobs (by arrival)."""
        return self.subset(slice(0, n))


@dataclass(frozen=True)
class TraceContext:
    """What a trace format may need from the caller besides the file.

    ``throughputs``: isolated steps/s per workload on the simulated device, one GPU (Gavel traces give jobs
    in steps); ``scale_throughputs``: per workload, the isolated steps/s of the whole job on ``k`` GPUs, for
    the GPU counts measured (``{"ResNet-50 (batch size 64)": {1: 4.39, 2: 7.92, 4: 9.45, 8: 17.3}}``);
    ``workloads``: the workloads a job without a workload name may be (Philly), drawn with ``seed``;
    ``n_gpus``: the simulated cluster's size, when known (readers report and leave out bigger jobs).
    """

    throughputs: Mapping[str, float] | None = None
    scale_throughputs: Mapping[str, Mapping[int, float]] | None = None
    n_gpus: int | None = None
    workloads: Sequence[str] | None = None
    seed: int = 0


@dataclass(frozen=True)
class TraceFormat:
    """One trace format: its name, a one-line summary, how to recognise a file, how to read one."""

    name: str
    summary: str
    read: Callable[[Path, TraceContext], Trace]
    detect: Callable[[Path, str], bool]


def detect_format(path: str | os.PathLike) -> str:
    """Return the name of the first registered format that recognises ``path`` (by extension or header).

    The generic CSV comes last and accepts any file, so every path gets a format.
    """
    path = Path(path)
    header = ""
    if path.suffix != ".trace":
        try:
            with open(path, encoding="utf-8") as fh:
                header = fh.readline()
        except OSError as exc:
            raise TraceError(f"cannot read trace {str(path)!r}: {exc.strerror}") from None
        except UnicodeDecodeError:
            header = ""
    for name, fmt in TRACE_FORMATS.items():
        if fmt.detect(path, header):
            return name
    return "csv"


def load_trace(path: str | os.PathLike, *, format: str = AUTO, context: TraceContext | None = None) -> Trace:
    """Load a trace of any registered format (``auto``: by extension and header); see ``TRACE_FORMATS``."""
    name = detect_format(path) if format == AUTO else format
    if name not in TRACE_FORMATS:
        raise TraceError(f"unknown trace format {name!r}; expected one of {[AUTO, *TRACE_FORMATS.names()]}")
    return TRACE_FORMATS.get(name).read(Path(path), context or TraceContext())


def check_trace(trace: Trace, workloads: Sequence[str], n_gpus: int) -> None:
    """Raise ``TraceError`` if a job names a workload not in ``workloads`` or wants over ``n_gpus`` GPUs."""
    import numpy as np

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


__all__ = [
    "AUTO",
    "TRACE_FORMATS",
    "Trace",
    "TraceContext",
    "TraceFormat",
    "check_trace",
    "detect_format",
    "load_trace",
]
