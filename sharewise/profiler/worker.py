"""Worker process: runs one workload and answers the driver's commands over JSON lines.

Run as ``python -m sharewise.profiler.worker SPEC_JSON``. The driver (``session.py``) sets the thread and
OpenMP environment before this process starts, so torch is imported here only after it is in place. The
protocol (one JSON object per line):

- worker -> driver ``{"event": "ready", "step_ms": 41.2, "mem_bytes": 3.1e8, "device_name": ..., ...}``
  after warm-up (``mem_bytes``: what it holds while idle, CUDA reserved memory plus a context, or RSS);
- driver -> worker ``{"cmd": "measure", "start_at": <epoch s>, "window_s": 2.0, "min_steps": 10,
  "tail": true}``; the worker waits until ``start_at``, steps through the window (extended until
  ``min_steps``), answers ``{"event": "measured", ...}`` and, with ``tail``, keeps stepping until
  ``{"cmd": "stop"}`` so its partner stays loaded to the end of the partner's window, then answers
  ``{"event": "stopped"}`` once its last step is done;
- ``{"cmd": "warm", "steps": 3, "seconds": 0.3}`` -> steps at least that many and that long (a warm worker
  after a wait) -> ``{"event": "warmed", "step_ms": ...}``;
- ``{"cmd": "features", "trace_steps": 5}`` -> ``{"event": "features", "features": {...}}``;
- ``{"cmd": "exit"}`` closes the workload and exits 0.

Between commands the worker blocks on its command queue: a warm worker waiting for its next run uses no
CPU and launches nothing on the device.

Any exception is answered ``{"event": "error", "status": "failed"|"oom", "error": "..."}`` and exit 1.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import sys
import threading
import time
import traceback

# Imported by the driver too; keep torch out of module import (sharewise.stats is plain Python).
from sharewise.stats import percentile


def is_oom(exc: BaseException) -> bool:
    name = type(exc).__name__
    text = str(exc).lower()
    return (
        isinstance(exc, MemoryError)
        or name == "OutOfMemoryError"
        or "out of memory" in text
        or "can't allocate memory" in text
        or "defaultcpuallocator: not enough memory" in text
    )


class _Channel:
    """The protocol stream (the real stdout) and a reader thread over stdin."""

    def __init__(self) -> None:
        # Keep the protocol on a private copy of fd 1 and point fd 1 at stderr, so prints from the workload
        # (or libraries) cannot corrupt the protocol.
        self._out = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self.commands: queue.Queue[dict] = queue.Queue()
        self.stop = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            msg = json.loads(line)
            if msg.get("cmd") == "stop":
                self.stop.set()
            else:
                self.commands.put(msg)
        # Driver gone (stdin closed): stop any tail loop and exit.
        self.stop.set()
        self.commands.put({"cmd": "exit"})

    def send(self, **msg) -> None:
        self._out.write(json.dumps(msg) + "\n")
        self._out.flush()


def _synchronizer(device):
    import torch

    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _timed_steps(workload, sync, until: float, min_steps: int) -> list[float]:
    """Step until ``until`` (perf_counter) and at least ``min_steps``; return each step's seconds."""
    times = []
    while True:
        t0 = time.perf_counter()
        workload.step()
        sync()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        if t1 >= until and len(times) >= min_steps:
            return times


def step_time_settled(times: list[float], tolerance: float) -> bool:
    """Whether step time settled: the median of the last 3 steps is within ``tolerance`` of the median of the
    3 steps one step earlier (needs at least 4 step times; see ``warm_up``).

    >>> step_time_settled([0.9, 0.1, 0.1, 0.105], 0.10), step_time_settled([0.1, 0.1, 0.2, 0.2], 0.10)
    (True, False)
    """
    last, prev = sorted(times[-3:])[1], sorted(times[-4:-1])[1]
    return abs(last - prev) <= tolerance * prev


def warm_up(workload, sync, min_steps: int, max_s: float, tolerance: float) -> dict:
    """Step until at least ``min_steps`` ran and step time settled, or ``max_s`` passed.

    Settled: the median of the last 3 steps is within ``tolerance`` of the median of the 3 steps one step
    earlier. Medians, because on a shared VM single steps jump by 20% either way long after the one-off
    costs of the first steps (allocator growth, kernel selection, optimizer state) are paid, and a rule on
    means rarely settles, running every start to ``max_s``; the median also ignores the slow first step.
    """
    times: list[float] = []
    deadline = time.perf_counter() + max_s
    settled = False
    while True:
        t0 = time.perf_counter()
        workload.step()
        sync()
        times.append(time.perf_counter() - t0)
        if len(times) >= max(min_steps, 4) and step_time_settled(times, tolerance):
            settled = True
            break
        if time.perf_counter() >= deadline and len(times) >= min_steps:
            break
    recent = sorted(times[-5:])
    return {"warmup_steps": len(times), "settled": settled, "step_ms": recent[len(recent) // 2] * 1e3}


def summarize_window(times: list[float], elapsed: float) -> dict:
    """Return throughput and step-time percentiles (``sharewise.stats.percentile``) of one window (pure).

    >>> summarize_window([0.1, 0.1, 0.2, 0.1], 0.5)["throughput"]
    8.0
    """
    n = len(times)
    return {
        "steps": n,
        "elapsed_s": elapsed,
        "throughput": n / elapsed,
        "step_mean_ms": sum(times) / n * 1e3,
        "step_p50_ms": percentile(times, 50.0) * 1e3,
        "step_p95_ms": percentile(times, 95.0) * 1e3,
        "step_p99_ms": percentile(times, 99.0) * 1e3,
    }


def _measure(chan: _Channel, workload, sync, msg: dict) -> None:
    start_at = float(msg["start_at"])
    while True:  # sleep to just before the shared start, then spin for precision
        remaining = start_at - time.time()
        if remaining <= 0.002:
            break
        time.sleep(remaining - 0.002)
    while time.time() < start_at:
        pass
    late_ms = (time.time() - start_at) * 1e3
    # Clear a stale stop now, before "measured" goes out: the driver answers it with "stop" at once, and a
    # stop cleared after sending could be lost, leaving this worker stepping in its tail loop for good.
    chan.stop.clear()
    cpu0 = time.process_time()
    begin = time.perf_counter()
    times = _timed_steps(workload, sync, begin + float(msg["window_s"]), int(msg["min_steps"]))
    elapsed = time.perf_counter() - begin
    result = summarize_window(times, elapsed)
    result.update(late_ms=late_ms, cpu_s=time.process_time() - cpu0)
    chan.send(event="measured", **result)
    if msg.get("tail"):
        while not chan.stop.is_set():
            workload.step()
            sync()
        chan.send(event="stopped")


def _rewarm(chan: _Channel, workload, sync, msg: dict) -> None:
    times = _timed_steps(workload, sync, time.perf_counter() + float(msg.get("seconds", 0.0)), int(msg["steps"]))
    recent = sorted(times[-5:])
    chan.send(event="warmed", steps=len(times), step_ms=recent[len(recent) // 2] * 1e3)


#: A CUDA context's own device memory, which no allocator statistic shows (a few hundred MB on recent GPUs).
CUDA_CONTEXT_BYTES = 512 * 2**20


def resident_bytes(device) -> float:
    """Memory this worker holds while it waits: CUDA reserved memory plus a context, or the process's RSS."""
    if device.type == "cuda":
        import torch

        return float(torch.cuda.memory_reserved(device) + CUDA_CONTEXT_BYTES)
    import psutil

    return float(psutil.Process().memory_info().rss)


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this worker when its driver dies, so a killed campaign leaves no orphans."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def pin(cores) -> None:
    """Pin this process to ``cores`` (nothing where none are given or the OS cannot)."""
    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(cores))


def torch_device(name: str):
    """The ``torch.device`` a worker runs on, with an index on CUDA: ``"cuda"`` is ``cuda:0``, the first device
    the process sees (``torch.cuda.set_device`` refuses a CUDA device without an index).

    >>> str(torch_device("cuda")), str(torch_device("cuda:1")), str(torch_device("cpu"))
    ('cuda:0', 'cuda:1', 'cpu')
    """
    import torch

    device = torch.device(name)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", 0)
    return device


def build(spec: dict):
    """Set torch's threads and device from ``spec`` and build its workload there; return ``(workload, device,
    sync)``, ``sync`` the device synchronization to call after a step (a no-op on the CPU). Shared by the
    warm worker and the physical run's job runner, so a job runs exactly as its workload was measured."""
    import torch

    from sharewise.profiler.workloads import load_workload_class

    torch.set_num_threads(int(spec["threads"]))
    device = torch_device(spec["device"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    cls = load_workload_class(spec["spec"])
    workload = cls(batch_size=spec.get("batch_size"), size=spec.get("size", "small"))
    workload.build(device)
    return workload, device, _synchronizer(device)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    die_with_parent()
    if os.getppid() == 1:  # driver died before prctl took effect
        return 1
    spec = json.loads(argv[0])
    pin(spec.get("cores"))
    chan = _Channel()
    workload = None
    try:
        import torch

        workload, device, sync = build(spec)
        warm = warm_up(
            workload, sync, int(spec["warmup_steps"]), float(spec["warmup_max_s"]), float(spec["tolerance"])
        )
        from sharewise.profiler.device import cpu_device_name

        chan.send(
            event="ready",
            pid=os.getpid(),
            host=socket.gethostname(),
            torch_version=torch.__version__,
            device_name=(torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_device_name()),
            batch_size=workload.batch_size,
            family=getattr(workload, "family", "") or "",
            threads=torch.get_num_threads(),
            mem_bytes=resident_bytes(device),
            **warm,
        )
        while True:
            msg = chan.commands.get()
            cmd = msg.get("cmd")
            if cmd == "measure":
                _measure(chan, workload, sync, msg)
            elif cmd == "warm":
                _rewarm(chan, workload, sync, msg)
            elif cmd == "features":
                from sharewise.profiler.collect import worker_features

                feats = worker_features(workload, spec, device, int(msg.get("trace_steps", 5)))
                chan.send(event="features", features=feats)
            elif cmd == "exit":
                break
            else:
                raise ValueError(f"unknown command {cmd!r}")
        workload.close()
        workload = None
        if device.type == "cuda":
            torch.cuda.empty_cache()
        chan.send(event="bye")
        return 0
    except BaseException as exc:  # report everything: the driver records it with the pair
        status = "oom" if is_oom(exc) else "failed"
        tb = traceback.format_exc(limit=-3)
        try:
            chan.send(event="error", status=status, error=f"{type(exc).__name__}: {exc}", traceback=tb)
        except (BrokenPipeError, OSError):
            pass
        return 1


if __name__ == "__main__":
    sys.exit(main())
