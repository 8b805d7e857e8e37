"""Measured features from a torch.profiler trace: kernel counts, launch rate, busy fraction, time shares."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sharewise.profiler.taxonomy import CATEGORIES, VIEW, kernel_category, op_category
from sharewise.stats import percentile

if TYPE_CHECKING:
    from sharewise.profiler.workloads.base import Workload

log = logging.getLogger(__name__)

#: Name of the ``record_function`` range around the profiled steps; its duration is the wall time.
WINDOW_NAME = "sharewise::window"
#: Prefix of the ``record_function`` range that ``torch.optim.Optimizer.step`` opens.
_OPTIMIZER_SCOPE = "Optimizer.step#"


def event_category(event: dict[str, Any]) -> str:
    """Return the category of one trace event (a dict as made by ``collect_events``).

    Work inside ``Optimizer.step`` (``"scope": "optimizer"``) is ``optimizer`` whatever the op. A CPU
    event is categorized by its aten name; a CUDA kernel by the aten op that launched it (``"op"``) and,
    when that is missing or says nothing (``other``, a view), by its kernel name.
    """
    if event.get("scope") == "optimizer":
        return "optimizer"
    if event.get("device") == "cuda":
        op = event.get("op")
        category = op_category(op) if op else "other"
        if category in ("other", VIEW):
            category = kernel_category(str(event.get("name", "")))
        return category
    category = op_category(str(event.get("name", "")))
    return "other" if category == VIEW else category


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total = 0.0
    cur_start = cur_end = None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def trace_features(
    events: list[dict[str, Any]], wall_s: float, steps: int, device_kind: str
) -> dict[str, float]:
    """Return the measured features of a profiled window of ``steps`` steps lasting ``wall_s`` seconds.

    A pure function of the events, so it runs on a saved trace. Kernels are the events with
    ``is_kernel`` true on ``device_kind`` (``"cuda"``: GPU kernels, memcpys and memsets; ``"cpu"``:
    top-level aten ops, see ``collect_events``).

    Parameters
    ----------
    events : list of dict
        ``{"name", "device", "start_us", "dur_us", "is_kernel"}`` and optionally ``"op"`` (launching aten
        op of a CUDA kernel) and ``"scope"`` (``"optimizer"``).
    wall_s : float
        Wall time of the window in seconds (``window_seconds(events)`` for a trace from
        ``collect_events``).
    steps : int
        Steps run in the window.
    device_kind : str
        ``"cpu"`` or ``"cuda"``.

    Returns
    -------
    dict
        For example ``{"f_kernels_per_step": 12.0, "f_launch_rate": 24000.0, "f_busy_frac": 0.61,
        "f_kernel_mean_us": 25.4, "f_kernel_p95_us": 80.1, "f_kernel_p99_us": 96.3,
        "f_timeshare_gemm_conv": 0.7, ..., "f_timeshare_other": 0.0}``; the time shares sum to 1 when
        there is at least one kernel and are all 0 otherwise.
    """
    if device_kind not in ("cpu", "cuda"):
        raise ValueError(f"device_kind must be 'cpu' or 'cuda', got {device_kind!r}")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if not wall_s > 0:
        raise ValueError(f"wall_s must be a positive number of seconds, got {wall_s!r}")
    kernels = [e for e in events if e.get("is_kernel") and e.get("device") == device_kind]
    durations = sorted(max(float(e["dur_us"]), 0.0) for e in kernels)
    total_us = sum(durations)
    busy_us = _union_length([(float(e["start_us"]), float(e["start_us"]) + max(float(e["dur_us"]), 0.0))
                             for e in kernels])
    by_category = {c: 0.0 for c in CATEGORIES}
    for e in kernels:
        by_category[event_category(e)] += max(float(e["dur_us"]), 0.0)
    n = len(kernels)
    features: dict[str, float] = {
        "f_kernels_per_step": n / steps,
        "f_launch_rate": n / wall_s,
        "f_busy_frac": min(max(busy_us / (wall_s * 1e6), 0.0), 1.0),
        "f_kernel_mean_us": total_us / n if n else 0.0,
        "f_kernel_p95_us": percentile(durations, 95.0),
        "f_kernel_p99_us": percentile(durations, 99.0),
    }
    for c in CATEGORIES:
        features[f"f_timeshare_{c}"] = by_category[c] / total_us if total_us > 0 else 0.0
    return features


def window_seconds(events: list[dict[str, Any]]) -> float:
    """Return the wall time in seconds of the ``WINDOW_NAME`` range of a trace from ``collect_events``."""
    for e in events:
        if e.get("name") == WINDOW_NAME:
            return float(e["dur_us"]) / 1e6
    raise ValueError(
        f"trace has no {WINDOW_NAME!r} event; pass wall_s yourself for traces not made by collect_events"
    )


def collect_events(workload: Workload, steps: int, device: Any) -> list[dict[str, Any]]:
    """Run ``steps`` steps of a built, warmed-up workload under ``torch.profiler`` and return its events.

    The steps run inside a ``WINDOW_NAME`` range (on CUDA the device is synchronized before the range
    closes, so every kernel of the window ends inside it); that range's event gives the wall time. One
    more step runs under the profiler before the range and its events are dropped.

    What counts as a kernel (``is_kernel``):

    - CUDA: every GPU-side event (kernels, memcpy, memset), each with ``"op"``, the aten op that launched
      it (matched by correlation id), when the profiler links one.
    - CPU: each *top-level* aten op, i.e. one with no aten op among its ancestors, and not a metadata-only
      op (``op_category`` gives ``view``). Nested ops are dropped rather than counted by self time: an
      op's interval contains its children's, so top-level intervals tile the busy time without double
      counting, each one is a dispatch from Python or autograd (the CPU analogue of a launch), and its
      name (``aten::linear``, ``aten::cross_entropy_loss``) carries the category of all the work inside.

    Parameters
    ----------
    workload : Workload
        Built on ``device`` and warmed up by the caller (the first steps pay one-off costs).
    steps : int
        Steps to profile.
    device : str or torch.device
        The device the workload was built on.

    Returns
    -------
    list of dict
        For example ``[{"name": "sharewise::window", "device": "cpu", "start_us": 0.0, "dur_us": 850.2,
        "is_kernel": False}, {"name": "aten::linear", "device": "cpu", "start_us": 61.0, "dur_us": 46.9,
        "is_kernel": True}, ...]``; optimizer work also has ``"scope": "optimizer"``.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    dev = torch.device(device)
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"collect_events profiles 'cpu' or 'cuda' devices, got {str(dev)!r}")
    on_cuda = dev.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    if on_cuda:
        torch.cuda.synchronize(dev)
    with profile(activities=activities) as prof:
        # One step before the window, dropped below: under a fresh profiler the first ops pay its
        # set-up costs (a 250 us LSTM layer measured 2 ms, once 80 ms), which would dominate the tail.
        workload.step()
        if on_cuda:
            torch.cuda.synchronize(dev)
        with record_function(WINDOW_NAME):
            for _ in range(steps):
                workload.step()
            if on_cuda:
                torch.cuda.synchronize(dev)
    try:
        raw = profiler_events(prof)
    except AttributeError as exc:  # a torch whose raw results lack a field read here: torch's own list
        log.info("reading the profiler's events through prof.events(): %s", exc)
        raw = list(prof.events())
    return events_from_profiler(raw, dev.type)


class _Range:
    """The ``time_range`` of an event, in microseconds, as torch's ``Interval`` offers it."""

    __slots__ = ("start", "end")

    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = start, end

    def elapsed_us(self) -> float:
        return self.end - self.start


class _Event:
    """One profiler event with what ``events_from_profiler`` reads of torch's ``FunctionEvent``."""

    __slots__ = (
        "name",
        "device_type",
        "time_range",
        "id",
        "linked_correlation_id",
        "cpu_parent",
        "is_async",
        "is_user_annotation",
        "thread",
    )

    def __init__(self, name, device_type, start, end, id_, linked, is_async, annotation, thread) -> None:
        self.name, self.device_type, self.time_range = name, device_type, _Range(start, end)
        self.id, self.linked_correlation_id, self.cpu_parent = id_, linked, None
        self.is_async, self.is_user_annotation, self.thread = is_async, annotation, thread


# Utility ops torch's own event list leaves out (``torch.autograd.profiler_util._filter_name``).
_FILTERED = frozenset(
    {
        "[memory]",
        "[OutOfMemory]",
        "profiler::_record_function_enter",
        "profiler::_record_function_enter_new",
        "profiler::_record_function_exit",
        "aten::is_leaf",
        "aten::output_nr",
        "aten::_version",
    }
)


def profiler_events(prof: Any) -> list[_Event]:
    """The events of a finished ``torch.profiler.profile``, with CPU parents, built from its raw results.

    The same events, times and parent links as ``prof.events()`` (torch's ``_parse_kineto_results`` and
    ``_populate_cpu_children``: a CPU event's parent is the innermost synchronous event on its thread whose
    interval holds it), without what the features do not read (shapes, stacks, memory, the statistics
    tree). ``prof.events()`` builds a full ``FunctionEvent`` per event in Python: for three profiled ``ppo``
    steps (about 120,000 raw events) ``collect_events`` took 6.6 s with it and 1.0 s with this; the two give
    identical events for all 19 zoo workloads (``tests/profiler/test_features.py`` checks two).
    """
    import torch
    from torch.autograd import DeviceType

    results = prof.profiler.kineto_results
    origin = results.trace_start_ns()
    cpu = DeviceType.CPU
    demangled: dict[str, str] = {}
    events: list[_Event] = []
    for k in results.events():
        name = k.name()
        if name in _FILTERED or getattr(k, "is_hidden_event", lambda: False)():
            continue
        device = k.device_type()
        if device != cpu:
            if name not in demangled:
                demangled[name] = torch._C._demangle(name)
            name = demangled[name]
        thread = k.start_thread_id()
        events.append(
            _Event(
                name,
                device,
                (k.start_ns() - origin) / 1e3,
                (k.end_ns() - origin) / 1e3,
                k.correlation_id(),
                k.linked_correlation_id(),
                k.is_async() or thread != k.end_thread_id(),
                k.is_user_annotation(),
                thread,
            )
        )
    # A CPU event linked to an op (a runtime call) belongs to that op's thread, as torch assigns it.
    by_id = {e.id: e for e in events if e.linked_correlation_id == 0 and e.device_type == cpu and not e.is_async}
    for e in events:
        if e.linked_correlation_id > 0 and e.device_type == cpu:
            op = by_id.get(e.linked_correlation_id)
            if op is not None:
                e.thread = op.thread
    sync = [e for e in events if e.device_type == cpu and not e.is_async]
    sync.sort(key=lambda e: (e.thread, e.time_range.start, -e.time_range.end))
    stack: list[_Event] = []
    thread = None
    for e in sync:
        if e.thread != thread:
            stack, thread = [], e.thread
        while stack:
            parent = stack[-1].time_range
            if e.time_range.start >= parent.end or e.time_range.end > parent.end:
                stack.pop()
            else:
                e.cpu_parent = stack[-1]
                break
        stack.append(e)
    return events


def _is_gpu_annotation(e: Any) -> bool:
    """True for the GPU-side copy of a ``record_function`` range, which is no kernel.

    On CUDA the profiler mirrors each annotation (our window, ``Optimizer.step#...``, ``ProfilerStep#N``)
    onto the GPU timeline as an event of device type CUDA (seen on an H200 with torch 2.11): counted as a
    kernel it would double the window and inflate kernel counts.
    """
    if getattr(e, "is_user_annotation", False):
        return True
    return e.name == WINDOW_NAME or e.name.startswith((_OPTIMIZER_SCOPE, "ProfilerStep#"))


def events_from_profiler(raw: list[Any], device_kind: str) -> list[dict[str, Any]]:
    """Turn the profiler's ``FunctionEvent`` objects into the plain event dicts of ``collect_events``.

    Separate from ``collect_events`` so that the selection (top-level CPU ops, kernels with their
    launching op, the window and what precedes it) is testable with stand-in events on a machine
    without the device. Uses ``name``, ``device_type``, ``time_range``, ``id``, ``linked_correlation_id``,
    ``cpu_parent`` and ``is_async`` of each event.
    """
    from torch.autograd import DeviceType

    on_cuda = device_kind == "cuda"

    def ancestors(e):
        p = e.cpu_parent
        while p is not None:
            yield p
            p = p.cpu_parent

    def in_optimizer(e) -> bool:
        return any(a.name.startswith(_OPTIMIZER_SCOPE) for a in ancestors(e))

    out: list[dict[str, Any]] = []
    # Correlation id of each aten op -> the op. A CUDA kernel's linked_correlation_id names the innermost
    # aten op that was running when it was launched (aten::addmm rather than aten::linear).
    ops_by_correlation: dict[int, Any] = {}
    for e in raw:
        if e.device_type != DeviceType.CPU or getattr(e, "is_async", False):
            continue
        start, dur = float(e.time_range.start), float(e.time_range.elapsed_us())
        if e.name == WINDOW_NAME:
            out.append(
                {"name": e.name, "device": "cpu", "start_us": start, "dur_us": dur, "is_kernel": False}
            )
            continue
        if not e.name.startswith("aten::"):
            continue
        if getattr(e, "linked_correlation_id", 0) == 0:
            ops_by_correlation[e.id] = e
        if on_cuda or any(a.name.startswith("aten::") for a in ancestors(e)):
            continue
        if op_category(e.name) == VIEW:
            continue
        event = {"name": e.name, "device": "cpu", "start_us": start, "dur_us": dur, "is_kernel": True}
        if in_optimizer(e):
            event["scope"] = "optimizer"
        out.append(event)
    if on_cuda:
        for e in raw:
            if e.device_type != DeviceType.CUDA or _is_gpu_annotation(e):
                continue
            event = {
                "name": e.name,
                "device": "cuda",
                "start_us": float(e.time_range.start),
                "dur_us": float(e.time_range.elapsed_us()),
                "is_kernel": True,
            }
            linked = getattr(e, "linked_correlation_id", 0)
            op = ops_by_correlation.get(linked) if linked > 0 else None
            if op is not None:
                event["op"] = op.name
                if in_optimizer(op):
                    event["scope"] = "optimizer"
            out.append(event)
    windows = [ev for ev in out if ev["name"] == WINDOW_NAME]
    if len(windows) != 1:
        raise RuntimeError(f"profiler trace has {len(windows)} {WINDOW_NAME!r} events, expected 1")
    # The warm-up step under the profiler ran before the window: drop its events.
    begin = windows[0]["start_us"]
    out = [ev for ev in out if ev["start_us"] >= begin]
    out.sort(key=lambda ev: (ev["start_us"], ev["device"]))
    return out
