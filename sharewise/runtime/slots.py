"""What stands for a GPU in a physical run: every visible CUDA device, or on a CPU machine equal sets of cores.

A *slot* holds at most two jobs, as a GPU does in the simulator. On CUDA a slot is one device: a job sees
only its own (``CUDA_VISIBLE_DEVICES``) and shares it with its partner in the sharing mode of the run
(``timeslice``: plain contexts; ``mps``: clients of one MPS daemon). On a CPU machine ``--slots N`` splits
the cores this process may use into N equal sets; a job is pinned to its slot's cores with as many threads
as the slot has cores, and two jobs on one slot share those cores, exactly as the two workers of a pair
measured in mode ``cpu`` on that many cores (so a slot of every core is the device the shipped ``reference``
dataset was measured on, and a slot of fewer cores is a device of its own: ``pairs --slots N`` measures it).
A job that asks for several slots gets the union of their cores (CPU) or all their devices (CUDA; a
built-in workload uses the first of them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sharewise.errors import ConfigError


@dataclass(frozen=True)
class Slot:
    """One slot: its index, the host cores its jobs may use and their thread count, its GPU's CUDA ordinal
    in this process (``None`` on a CPU machine) and the ``CUDA_VISIBLE_DEVICES`` entry that shows a job that
    GPU (an NVML index or a GPU UUID; ``None`` reads as ``str(cuda)``). Examples: ``Slot(index=0, cores=(0, 1),
    threads=2, cuda=None)``; ``Slot(index=1, cores=(0, 1), threads=1, cuda=1, entry="GPU-5c1d6f0e-...")``."""

    index: int
    cores: tuple[int, ...]
    threads: int
    cuda: int | None = None
    entry: str | None = None

    @property
    def visible(self) -> str | None:
        """The ``CUDA_VISIBLE_DEVICES`` entry of this slot's GPU, None on a CPU slot."""
        if self.entry is not None:
            return self.entry
        return None if self.cuda is None else str(self.cuda)


@dataclass(frozen=True)
class Layout:
    """The slots of a run and the device they are, as recorded in datasets.

    ``device`` is ``cpu`` or ``cuda``; ``mode`` the sharing mode whose measured pairs apply (``cpu`` on CPU
    slots); ``device_name`` the name the profiler records for one slot (``AMD EPYC (2 cores)``, ``NVIDIA
    H200``); ``memory_bytes`` what one slot's jobs may hold together (RAM over the slots on a CPU, the
    device's memory on CUDA; NaN where unknown).
    """

    device: str
    mode: str
    slots: tuple[Slot, ...]
    device_name: str
    memory_bytes: float = float("nan")

    @property
    def n_slots(self) -> int:
        return len(self.slots)

    def job_place(self, slots: list[int]) -> tuple[tuple[int, ...], int, str | None]:
        """Where a job on ``slots`` runs: ``(cores, threads, CUDA_VISIBLE_DEVICES or None)``, e.g.
        ``((0, 1), 1, "GPU-5c1d6f0e-...,GPU-8a2b...")`` for two CUDA slots listed by UUID."""
        chosen = [self.slots[s] for s in slots]
        cores = tuple(sorted({c for s in chosen for c in s.cores}))
        if self.device == "cpu":
            return cores, len(cores), None
        return cores, chosen[0].threads, ",".join(str(s.visible) for s in chosen)


def cpu_layout(n_slots: int = 1) -> Layout:
    """``n_slots`` equal sets of the cores this process may use; a ``ConfigError`` if they do not divide."""
    from sharewise.profiler.device import cpu_model
    from sharewise.profiler.modes import available_cores

    cores = available_cores()
    if n_slots < 1 or n_slots > len(cores) or len(cores) % n_slots:
        raise ConfigError(
            f"--slots {n_slots}: this machine lets sharewise use {len(cores)} core(s), which do not split into "
            f"{n_slots} equal slot(s); use a divisor of {len(cores)}"
        )
    size = len(cores) // n_slots
    slots = tuple(Slot(i, tuple(cores[i * size : (i + 1) * size]), size) for i in range(n_slots))
    import psutil

    return Layout("cpu", "cpu", slots, f"{cpu_model()} ({size} cores)", float(psutil.virtual_memory().total) / n_slots)


def cuda_layout(mode: str = "timeslice") -> Layout:
    """Every visible CUDA device, one slot each (names and memory from NVML; no CUDA context is made here)."""
    from sharewise.profiler.device import visible_gpus
    from sharewise.profiler.modes import SHARING_MODES, available_cores

    if mode not in ("timeslice", "mps"):
        raise ConfigError(f"mode {mode!r} is not a CUDA sharing mode; use 'timeslice' or 'mps'")
    gpus = visible_gpus()
    names = [g.name for g in gpus]
    if not names:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise ConfigError(
            "--device cuda: no NVIDIA GPU is visible ("
            + ("NVML found none" if visible is None else f"NVML found none that CUDA_VISIBLE_DEVICES={visible!r} shows")
            + "); use --device cpu, or list GPUs by NVML index or GPU UUID (as `nvidia-smi -L` shows them)"
        )
    if len(set(names)) > 1:
        raise ConfigError(
            f"--device cuda: the visible GPUs are of different kinds ({', '.join(sorted(set(names)))}); a run "
            "uses one kind of device: narrow CUDA_VISIBLE_DEVICES"
        )
    cores = available_cores()
    threads = max(1, len(cores) // 2)  # a GPU job's host threads, as a pair's worker gets (split_threads)
    SHARING_MODES.get(mode)
    slots = tuple(Slot(g.cuda_index, cores, threads, g.cuda_index, g.entry) for g in gpus)
    return Layout("cuda", mode, slots, names[0], _gpu_memory(gpus[0].nvml_index))


def _gpu_memory(index: int) -> float:
    """Total bytes of NVML's GPU ``index`` (NaN without NVML)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return float(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index)).total)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML: memory unknown, the run relies on the pairs' measured status
        return float("nan")


def layout(device: str, n_slots: int | None = None, mode: str | None = None) -> Layout:
    """The layout of a run on ``device`` (``cpu`` or ``cuda``); ``n_slots`` only applies to a CPU."""
    if device == "cpu":
        if mode not in (None, "cpu"):
            raise ConfigError(f"--mode {mode!r} is for CUDA devices; CPU slots share their cores (mode 'cpu')")
        return cpu_layout(1 if n_slots is None else n_slots)
    if device == "cuda":
        if n_slots is not None:
            raise ConfigError("--slots splits CPU cores; on CUDA every visible GPU is a slot")
        return cuda_layout(mode or "timeslice")
    raise ConfigError(f"--device must be 'cpu' or 'cuda', got {device!r}")


def pin_to_slot(device: str, n_slots: int) -> Layout:
    """Restrict this process (and the workers it starts) to the first of ``n_slots`` equal core sets, so a
    profile or a pair campaign measures the device a physical run with ``--slots n_slots`` has: the
    profiler's device name then says how many cores (``AMD EPYC (1 cores)``)."""
    if device != "cpu":
        raise ConfigError("--slots splits CPU cores; on CUDA every GPU is a device of its own")
    lay = cpu_layout(n_slots)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(lay.slots[0].cores))
    return lay
