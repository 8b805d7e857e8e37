"""Which observed jobs shared a device, when: devices, per grid step the jobs running, stretches and windows.

1. **Devices.** Two processes are on one device when they name the same GPU UUID, or when they run on the
   same host on CPU core sets that overlap; the devices are the connected groups of that relation.
2. **States.** For each grid step ``[t_k, t_k+1]`` of a device: the jobs present at both ends and past their
   warm-up (``warmup_steps`` steps after their first sample) are its state. A step in which some job starts
   (from its interpreter's start to its first sample: it loads the device before it steps), ends or is still
   warming up is a transition and belongs to no stretch: who ran during it, and how hard, is not known.
3. **Stretches.** Runs of consecutive grid steps with one state: a job alone, two jobs together, or more.
   ``edge`` grid steps are dropped at each end (a process is still seen up to one scrape interval after it
   exits, and a newcomer's first scrape lags its start).
4. **Windows.** Each stretch is cut into consecutive windows of whole grid steps, each holding at least
   ``min_steps`` steps of every job of the state and lasting ``window_s`` seconds; a job's rate over a window
   is its steps over the time between its last steps at the two ends (exact, whatever the grid).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sharewise.observe.series import JobSeries, Observed
from sharewise.profiler.exporter import parse_cpu_list
from sharewise.profiler.session import Window


@dataclass(frozen=True)
class Device:
    """One device the observed jobs ran on: ``kind`` cpu/cuda, the ``ids`` (GPU UUID, or ``host:cores``) of
    its processes, ``name`` as profiles record it (the first process's ``device_name``), ``host``."""

    kind: str
    ids: tuple[str, ...]
    name: str
    host: str

    @property
    def exact(self) -> bool:
        """Whether every process saw the same device (one GPU, or the same core set): the device of a pairs row."""
        return len(set(self.ids)) == 1


@dataclass
class Stretch:
    """Grid steps ``[start, end)`` (indices into the grid times) in which the jobs ``jobs`` (indices into
    ``Observed.jobs``) ran on ``device`` and nothing else did, with its ``windows`` (one ``Window`` per job)."""

    device: Device
    jobs: tuple[int, ...]
    start: int
    end: int
    t0: float
    t1: float
    windows: list[list[Window]] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0


def device_of(job: JobSeries) -> str:
    """The identity of a process's device: its GPU UUID, or ``host:cores`` on a CPU (``"n1:0-3"``)."""
    labels = job.labels
    if labels.get("device_kind") == "cuda":
        return labels.get("device", "")
    return f"{labels.get('host', '')}:{labels.get('device', '')}"


def devices(jobs: list[JobSeries]) -> list[tuple[Device, list[int]]]:
    """Group processes by device (module docstring, step 1): ``[(Device, [job indices])]``."""
    parent = list(range(len(jobs)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    cores = [_cores(j) for j in jobs]
    for i in range(len(jobs)):
        for k in range(i):
            if _shared(jobs[i], jobs[k], cores[i], cores[k]):
                parent[root(i)] = root(k)
    groups: dict[int, list[int]] = {}
    for i in range(len(jobs)):
        groups.setdefault(root(i), []).append(i)
    out = []
    for members in groups.values():
        first = jobs[members[0]].labels
        ids = tuple(device_of(jobs[m]) for m in members)
        out.append((Device(first.get("device_kind", "cpu"), ids, first.get("device_name", ""),
                           first.get("host", "")), members))
    return out


def _cores(job: JobSeries) -> frozenset[int]:
    if job.labels.get("device_kind") == "cuda":
        return frozenset()
    try:
        return parse_cpu_list(job.labels.get("device", ""))
    except ValueError:
        return frozenset()


def _shared(a: JobSeries, b: JobSeries, cores_a: frozenset[int], cores_b: frozenset[int]) -> bool:
    if a.labels.get("device_kind") != b.labels.get("device_kind"):
        return False
    if a.labels.get("device_kind") == "cuda":
        return bool(a.labels.get("device")) and a.labels.get("device") == b.labels.get("device")
    return a.labels.get("host") == b.labels.get("host") and bool(cores_a & cores_b)


def states(observed: Observed, members: list[int], warmup_steps: int) -> list[tuple[int, ...] | None]:
    """Per grid step of one device the sorted jobs of its state, or None for a transition (module docstring).

    Example: ``[None, (0,), (0,), None, (0, 3), (0, 3)]`` (job 0 alone, job 3 arriving, then both).
    """
    steps = np.vstack([observed.jobs[m].steps for m in members])
    present = np.isfinite(steps)
    first = np.array([row[np.argmax(ok)] if ok.any() else np.nan for row, ok in zip(steps, present, strict=True)])
    with np.errstate(invalid="ignore"):
        warm = present & (steps - first[:, None] >= warmup_steps)
        both = present[:, :-1] & present[:, 1:]
        backwards = both & (steps[:, 1:] < steps[:, :-1])  # a counter never falls within one process
    either = present[:, :-1] | present[:, 1:]
    times = observed.times
    loading = np.zeros_like(both)  # started, not yet seen: importing, building its model, loading data
    for row, m in enumerate(members):
        born = observed.jobs[m].started
        if math.isfinite(born) and present[row].any():
            loading[row] = (times[1:] > born) & (times[:-1] < times[np.argmax(present[row])])
    transition = ((either & ~both) | (both & ~warm[:, :-1]) | backwards | loading).any(axis=0)
    ids = np.asarray(members)
    return [None if transition[k] else tuple(int(m) for m in ids[both[:, k]]) for k in range(len(transition))]


def stretches(
    observed: Observed, min_steps: int = 3, window_s: float = 0.5, warmup_steps: int = 4, edge: int = 1
) -> list[Stretch]:
    """Every stretch of one state with at least one job, on every device, with its windows (module docstring).

    Example: two jobs on cores 0-1, A alone for 20 s then with B for 30 s gives
    ``[Stretch(device, (0,), ...19 windows), Stretch(device, (0, 1), ...28 windows)]`` at a 1 s grid.
    """
    out = []
    for device, members in devices(observed.jobs):
        per_step = states(observed, members, warmup_steps)
        k = 0
        while k < len(per_step):
            state = per_step[k]
            end = k
            while end < len(per_step) and per_step[end] == state:
                end += 1
            first, last = k + edge, end - edge  # grid steps [first, last) after the edges are dropped
            if state and last > first:
                stretch = Stretch(device, state, first, last, float(observed.times[first]),
                                  float(observed.times[last]))
                stretch.windows = windows(observed, state, first, last, min_steps, window_s)
                out.append(stretch)
            k = end
    return out


def windows(
    observed: Observed, jobs: tuple[int, ...], first: int, last: int, min_steps: int, window_s: float
) -> list[list[Window]]:
    """Cut grid times ``first..last`` into windows (module docstring, step 4); one ``Window`` per job each."""
    out = []
    i = first
    for j in range(first + 1, last + 1):
        steps = [observed.jobs[m].steps[j] - observed.jobs[m].steps[i] for m in jobs]
        if min(steps) < min_steps or observed.times[j] - observed.times[i] < window_s:
            continue
        spans = [observed.jobs[m].last[j] - observed.jobs[m].last[i] for m in jobs]
        if min(spans) > 0:
            out.append([rate_window(n, s) for n, s in zip(steps, spans, strict=True)])
        i = j
    return out


def rate_window(steps: float, seconds: float) -> Window:
    """A window of the profiler's kind, ``steps`` in ``seconds``: observed rates carry no per-step times, so no
    percentiles (NaN)."""
    mean_ms = seconds / steps * 1e3
    return Window(steps=int(steps), elapsed_s=float(seconds), throughput=steps / seconds, step_mean_ms=mean_ms,
                  step_p50_ms=math.nan, step_p95_ms=math.nan, step_p99_ms=math.nan)
