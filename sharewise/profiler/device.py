"""Device identity: names read from the hardware (never hard-coded), visible GPUs, synchronization."""

from __future__ import annotations

import os
import platform
from functools import lru_cache

from sharewise.errors import DeviceError
from sharewise.profiler.config import device_kind


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """Return the CPU model string from ``/proc/cpuinfo`` (or ``platform.processor()``)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def cpu_device_name() -> str:
    """Return the CPU device name recorded in tables, e.g. ``"AMD EPYC (2 cores)"``: the cores we may use."""
    from sharewise.profiler.modes import available_cores

    return f"{cpu_model()} ({len(available_cores())} cores)"


def cuda_index(device: str) -> int:
    return int(device.split(":", 1)[1]) if ":" in device else 0


def gpu_names() -> list[str]:
    """Return the names of the visible NVIDIA GPUs via NVML, without creating a CUDA context."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver
        return []
    try:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        count = pynvml.nvmlDeviceGetCount()
        indices = list(range(count))
        if visible is not None and visible.strip():
            try:
                indices = [int(v) for v in visible.split(",") if v.strip()]
            except ValueError:  # UUIDs: fall back to order
                indices = list(range(min(count, len(visible.split(",")))))
        names = []
        for i in indices:
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            names.append(name.decode() if isinstance(name, bytes) else name)
        return names
    finally:
        pynvml.nvmlShutdown()


def device_name(device: str) -> str:
    """Return the recorded name of ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``), checking it exists."""
    if device_kind(device) == "cpu":
        return cpu_device_name()
    names = gpu_names()
    index = cuda_index(device)
    if index >= len(names):
        raise DeviceError(
            f"device {device!r} asked for, but {len(names)} NVIDIA GPU(s) are visible"
            + (f" ({', '.join(names)})" if names else " (no driver or no GPU)")
            + "; use --device cpu or a listed index"
        )
    return names[index]


def total_memory_bytes(device: str) -> float:
    """Return the device's memory: total RAM for the CPU, the GPU's memory for CUDA."""
    if device_kind(device) == "cpu":
        import psutil

        return float(psutil.virtual_memory().total)
    import torch

    return float(torch.cuda.get_device_properties(cuda_index(device)).total_memory)

#: Memory a new worker is assumed to need before one of its workload has reported its footprint:
#: on CPUs the resident set of a small torch process, on GPUs a CUDA context and a modest model.
FIRST_START_BYTES = {"cpu": 600 * 2**20, "cuda": 2 * 2**30}


def device_memory(device: str) -> tuple[float, float]:
    """Return ``(total, free)`` bytes of ``device``: RAM for the CPU, NVML's numbers for a GPU.

    The driver never creates a CUDA context of its own (it would hold memory and, under MPS, be a client);
    where NVML cannot tell, both are infinite and only the workers' own reports limit residency.
    """
    if device_kind(device) == "cpu":
        import psutil

        mem = psutil.virtual_memory()
        return float(mem.total), float(mem.available)
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(cuda_index(device)))
            return float(info.total), float(info.free)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML (or a masked index it cannot map): trust the workers' reports
        return float("inf"), float("inf")
