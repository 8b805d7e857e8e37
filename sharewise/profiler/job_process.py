"""What the driver reads of a command job's process from outside: its output's last lines, the memory its
processes hold (NVML on CUDA, resident sets on CPU), the ``CUDA_VISIBLE_DEVICES`` that shows it its GPU, and how
long a pause waits for the kernels it queued."""

from __future__ import annotations

import math
import os
import re

from sharewise.profiler.config import device_kind
from sharewise.profiler.device import cuda_index, visible_gpus

#: Characters of the job's output kept in an error message (its last lines, joined by `` | ``).
TAIL_CHARS = 400


def cuda_visible(index: int) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` value that shows a job the driver's ``cuda:index`` as its only GPU.

    It is the ``entry`` of that GPU in ``visible_gpus()``: under ``"2,3"`` index 1 gives ``"3"``; under
    GPU UUIDs (or unique prefixes of them) the full UUID. Without NVML the driver's own entry at ``index``
    is passed on as written, else ``str(index)``.
    """
    gpus = visible_gpus()
    if index < len(gpus):
        return gpus[index].entry
    # No NVML here (or no such GPU): pass the driver's own entry on, so the job's CUDA reads what ours would.
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible[index] if index < len(visible) else str(index)


def output_tail(path: str, chars: int = TAIL_CHARS) -> str:
    """The last lines of a job's output as one line: ``"; output ends: line | line"`` (empty if none).

    The profiler's own start/stop chatter of some torch builds (``USDT:...``) is left out.
    """
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 8 * chars))
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not re.match(r"USDT:", ln.strip())]
    if not lines:
        return ""
    tail = " | ".join(lines[-4:])
    return f"; output ends: {tail[-chars:]}"


def job_memory_bytes(pid: int, device: str) -> float:
    """Memory a paused job holds: on CUDA its processes' device memory (NVML), on CPU their resident sets."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    if device_kind(device) == "cuda":
        used = _nvml_process_memory({p.pid for p in procs}, device)
        if used is not None:
            return used
        from sharewise.profiler.device import FIRST_START_BYTES

        return float(FIRST_START_BYTES["cuda"])
    total = 0.0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


def _nvml_process_memory(pids: set[int], device: str) -> float | None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no NVML
        return None
    try:
        # NVML numbers GPUs regardless of CUDA_VISIBLE_DEVICES: ask it about the GPU our cuda:N is.
        handle = pynvml.nvmlDeviceGetHandleByIndex(visible_gpus(pynvml)[cuda_index(device)].nvml_index)
        mine = [p for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid in pids]
        # No match: the driver shows pids of another namespace (a container), so the use is unknown.
        return float(sum(p.usedGpuMemory or 0 for p in mine)) if mine else None
    except Exception:  # no such GPU, or a driver that hides processes (containers): unknown
        return None
    finally:
        pynvml.nvmlShutdown()


#: Most seconds a paused CUDA job's queued kernels are waited for (``drain_seconds``).
DRAIN_MAX_S = 2.0


def drain_seconds(device: str, step_s: float) -> float:
    """Seconds to wait after pausing a job before a partner's window may start on its device.

    SIGSTOP stops the job's CPU threads, not the kernels it already queued on a GPU, which run on. The hook
    synchronizes at every step (``stephook.synchronize_current_stream``), so at most one step's kernels are
    queued: waiting one step time (at most ``DRAIN_MAX_S``) lets them finish. Nothing to wait for on a CPU.

    >>> drain_seconds("cuda:0", 0.05), drain_seconds("cuda:0", 9.0), drain_seconds("cpu", 0.05)
    (0.05, 2.0, 0.0)
    """
    if device_kind(device) != "cuda" or not math.isfinite(step_s) or step_s <= 0:
        return 0.0
    return min(step_s, DRAIN_MAX_S)
